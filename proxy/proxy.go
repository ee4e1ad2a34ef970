package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/occ"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/lease"
	"github.com/mzproxy/mzproxy/proxy/observe"
)

// planCacheSize bounds the plans kept per proxy (shared by its sessions).
const planCacheSize = 4096

// Config configures a Proxy.
type Config struct {
	// Backend is where sessions connect: host, port, TLS and defaults.
	// Each session connects as its client's user to its client's database.
	Backend *pgconn.Config
	// Passthrough relays the backend's authentication to the client
	// instead of logging in to the backend on the client's behalf.
	Passthrough bool
	// Password returns the backend password for a user, if the proxy knows
	// one (from the users file); "" leaves Backend's password.
	Password func(user string) string
	Logger   *logrus.Entry
	// Observer follows the sessions' statements (metrics, traces, slow
	// log, SHOW mzproxy_sessions); nil: one that records no metrics or
	// traces.
	Observer *observe.Observer
	// HistoryReads sends every read of a managed table through the
	// history rewrite at the oracle's read timestamp, instead of reading
	// the present table. Answers must not change: the conformance tests
	// run with it to prove the rewrite right.
	HistoryReads bool
	// NoTemplate: a client's CREATE DATABASE copies template1 as written,
	// and the schema is installed at the first connection, instead of
	// copying the template database that holds it (template.go).
	NoTemplate bool
	// EventLoop: the session's backend socket can be driven by the
	// frontend's event loop (frontend.Config.EventLoop) between
	// statements; see evloop.go.
	EventLoop bool
	// StatementTimeout is the statement_timeout of sessions that get none
	// from their startup packet or their role's or database's defaults;
	// zero: none. SetStatementTimeout changes it later.
	StatementTimeout time.Duration
	// OCCMaxAttempts bounds the compare-and-appends of one optimistic
	// write (0: occ.DefaultMaxAttempts); then 40001. SetOCCMaxAttempts
	// changes it later.
	OCCMaxAttempts int
	// OCCMaxConcurrent bounds the autocommit write loops running at once
	// (< 1: no bound); more writers queue in FIFO order.
	OCCMaxConcurrent int
	// OCCPauseFile is a test-only failpoint: when set, an optimistic write
	// whose SQL contains OCCPauseMarker pauses between its payload and its
	// append while this file exists. Inert when empty.
	OCCPauseFile string
	// IdleRelease is how long the proxy keeps its own connections to a
	// database (and its incarnation there) after the database's last
	// session ended (idle.go); 0: DefaultIdleRelease, < 0: until the
	// proxy stops.
	IdleRelease time.Duration
	// Lease configures the incarnation the proxy registers in each
	// database it serves (Dial is ignored: the proxy connects as the
	// backend's configured user).
	Lease lease.Config
}

// Proxy opens sessions; it implements the frontend's Handler (through a
// thin adapter in cmd/mzproxy, so neither package imports the other).
type Proxy struct {
	cfg      Config
	log      *logrus.Entry
	planner  *planner.Planner
	installs installs
	// templates makes the template database of new databases.
	templates templates
	holds     holds
	obs       *observe.Observer
	occSem    *occ.Semaphore
	occStats  occ.Metrics
	// writeWaits chooses how optimistic writes wait (write_wait.go).
	writeWaits writeWaits
	leases     *lease.Set

	interruptions interruptions
	// statementTimeout and occMaxAttempts are Config's StatementTimeout
	// and OCCMaxAttempts as SIGHUP last set them.
	statementTimeout atomic.Int64
	occMaxAttempts   atomic.Int64

	dbMu      sync.Mutex
	dbs       map[string]*database
	dbsClosed bool          // Close began: no idle timer starts
	sessions  atomic.Uint64 // numbers sessions
}

// New returns a Proxy.
func New(cfg Config) *Proxy {
	log := cfg.Logger
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	obs := cfg.Observer
	if obs == nil {
		// Without meter and tracer New cannot fail.
		obs, _ = observe.New(observe.Config{})
	}
	p := &Proxy{
		cfg:     cfg,
		log:     log,
		planner: planner.New(planCacheSize),
		obs:     obs,
		dbs:     map[string]*database{},
		occSem:  occ.NewSemaphore(cfg.OCCMaxConcurrent),
	}
	p.statementTimeout.Store(int64(cfg.StatementTimeout))
	p.occMaxAttempts.Store(int64(cfg.OCCMaxAttempts))
	if cfg.Lease.Log == nil {
		cfg.Lease.Log = log
	}
	p.leases = lease.NewSet(cfg.Lease, func(ctx context.Context, database string) (*pgx.Conn, error) {
		return p.adminConn(ctx, database)
	})
	return p
}

// OCCMaxAttempts is the bound on an optimistic write's compare-and-appends
// now.
func (p *Proxy) OCCMaxAttempts() int { return int(p.occMaxAttempts.Load()) }

// SetOCCMaxAttempts changes the bound on an optimistic write's
// compare-and-appends (0: occ.DefaultMaxAttempts); writes that start
// after it follow it.
func (p *Proxy) SetOCCMaxAttempts(n int) { p.occMaxAttempts.Store(int64(n)) }

// OCCStats returns the counters of the optimistic write loop.
func (p *Proxy) OCCStats() *occ.Metrics { return &p.occStats }

// TickStats returns the counters of the empty writes that keep each
// database's upper with the clock (lease.Config.TickInterval).
func (p *Proxy) TickStats() *lease.TickCounters { return p.leases.Ticks() }

// StatementTimeout is the configured default statement_timeout now.
func (p *Proxy) StatementTimeout() time.Duration { return time.Duration(p.statementTimeout.Load()) }

// SetStatementTimeout changes the configured default statement_timeout;
// sessions follow from their next statement.
func (p *Proxy) SetStatementTimeout(d time.Duration) { p.statementTimeout.Store(int64(d)) }

// sessionStartTimeout bounds the backend work of a session's start
// (PostgreSQL's default authentication_timeout).
const sessionStartTimeout = time.Minute

// startError is err, or, if the session's start ran out of time, the
// error saying so.
func startError(ctx context.Context, err error) error {
	if ctx.Err() == context.DeadlineExceeded {
		return pgerr.Fatal(pgerr.ConnectionFailure, "mzproxy could not start the session within %v: %v", sessionStartTimeout, err)
	}
	return err
}

// Connect opens a session for an authenticated client (or, with
// passthrough, authenticates it through relay). ctx is the client
// connection's: when it ends, the session's backend work is canceled.
func (p *Proxy) Connect(ctx context.Context, start wire.Startup, relay wire.AuthRelay, client *wire.Writer) (*Session, error) {
	if _, ok := start.Params["replication"]; ok {
		return nil, pgerr.Fatal(pgerr.FeatureNotSupported, "mzproxy does not support replication connections")
	}
	// The backend work of a session's start (schema check, registration,
	// settings) is bounded like PostgreSQL's authentication_timeout: a
	// backend that does not answer fails the start rather than hanging it.
	startCtx, cancel := context.WithTimeout(ctx, sessionStartTimeout)
	defer cancel()
	// A database this proxy just made from the template: the lease
	// registers there while the session's backend starts (not with
	// passthrough, where the client is not yet authenticated).
	var (
		db         *database
		registered chan bool
	)
	if !p.cfg.Passthrough && p.takeCopy(start.Database) {
		// The session counts in its database from here: the database is
		// not let go while it starts (idle.go).
		db = p.enterDatabase(start.Database)
		registered = make(chan bool, 1)
		go func() { registered <- p.registerCopy(startCtx, start.Database) }()
		defer func() {
			if registered != nil {
				<-registered
			}
		}()
	}
	var (
		be  *backend
		err error
	)
	if p.cfg.Passthrough {
		if relay == nil {
			return nil, pgerr.Fatal(pgerr.InternalError, "passthrough authentication without a client relay")
		}
		be, err = connectPassthrough(ctx, p.cfg.Backend, start, relay)
	} else {
		password := ""
		if p.cfg.Password != nil {
			password = p.cfg.Password(start.User)
		}
		be, err = connectBackend(ctx, p.cfg.Backend, start, password)
	}
	if err != nil {
		p.leaveDatabase(db)
		return nil, err
	}
	if p.cfg.EventLoop {
		be.detachable()
	}
	if registered != nil {
		// The session's settings are read while the copy's registration
		// runs; the session has no lease until it is done.
		s, err := p.openSession(ctx, startCtx, be, start, client, nil, db)
		ok := <-registered
		registered = nil
		if err != nil {
			return nil, err
		}
		l, err := p.sessionLease(startCtx, s.be, start.Database, !ok)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.lease = l
		return s, nil
	}
	db = p.enterDatabase(start.Database)
	l, err := p.sessionLease(startCtx, be, start.Database, true)
	if err != nil {
		be.close()
		p.leaveDatabase(db)
		return nil, err
	}
	return p.openSession(ctx, startCtx, be, start, client, l, db)
}

// sessionLease is the lease of a session starting in database on be, after
// ensureInstalled when check (else the caller registered there just now).
func (p *Proxy) sessionLease(startCtx context.Context, be *backend, database string, check bool) (*lease.Lease, error) {
	if check {
		if err := p.ensureInstalled(startCtx, be, database); err != nil {
			return nil, startError(startCtx, err)
		}
	}
	// Registering is needed to write and to hold reads; a proxy that a
	// newer generation fenced serves no new sessions.
	l, err := p.Lease(startCtx, database)
	if err != nil {
		return nil, startError(startCtx, pgerr.As(err))
	}
	return l, nil
}

// openSession opens the session of start on its connected backend be,
// under lease l, counted in db (nil: it counts itself in); startCtx bounds
// the backend work of the start. It is
// Connect's last step, apart so that the session scripts
// (session_script_test.go) can open a session on a scripted backend.
func (p *Proxy) openSession(ctx, startCtx context.Context, be *backend, start wire.Startup, client *wire.Writer, l *lease.Lease, db *database) (*Session, error) {
	if db == nil {
		db = p.enterDatabase(start.Database)
	}
	id := p.sessions.Add(1)
	obs := p.obs.OpenSession(observe.SessionInfo{
		ID:              start.Session,
		User:            start.User,
		Database:        start.Database,
		ApplicationName: start.Params["application_name"],
		BackendPID:      be.pid,
	}, p.log.WithField("backend_pid", be.pid))
	s := newSession(ctx, p, be, client, obs.Log())
	s.id = id
	s.db = db
	s.obs = obs
	if err := s.loadTimeoutDefaults(startCtx); err != nil {
		s.Close()
		return nil, startError(startCtx, err)
	}
	s.user = start.User
	s.dump = start.Params["application_name"] == dumpApplicationName
	s.lease = l
	return s, nil
}
