package proxy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/internalconn"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// database is the proxy's view of one backend database: an administrative
// connection for reading the catalog and frontiers, and the latest catalog
// snapshot. Sessions reach it only on the explicit-timestamp path (AS OF,
// mz_now(), EXPLAIN TIMESTAMP, history mode); reads of the present and
// writes never wait for it.
type database struct {
	name string

	mu sync.Mutex // serializes use of conn
	// rounds shares snapshot round trips among concurrent requests.
	rounds snapshotRounds
	conn   *internalconn.Conn // nil until first use
	// catalog was read over the current connection: a new connection may
	// reach a database that was dropped and made again under the same
	// name, whose catalog revisions start over.
	catalog *catalogSnapshot

	// seen is the last snapshot's catalog and frontiers, for metrics read
	// without waiting for conn.
	seen atomic.Pointer[seenFrontiers]

	// users counts the sessions of the database (starting ones
	// included), and idle is the timer that releases the database once
	// it has had none for Config.IdleRelease (idle.go); both guarded by
	// Proxy.dbMu.
	users int
	idle  *time.Timer

	// fixed, when set, is what every snapshot returns, read over no
	// connection: the session scripts (session_script_test.go) run
	// against a scripted backend with no database behind it.
	fixed *seenFrontiers
}

type seenFrontiers struct {
	catalog   *catalogSnapshot
	frontiers *storage.FrontierState
}

// database returns the state of the named database, creating it on first
// use.
func (p *Proxy) database(name string) *database {
	p.dbMu.Lock()
	defer p.dbMu.Unlock()
	return p.databaseLocked(name)
}

func (p *Proxy) databaseLocked(name string) *database {
	db := p.dbs[name]
	if db == nil {
		db = &database{name: name}
		p.dbs[name] = db
	}
	return db
}

// with runs f on the database's administrative connection, (re)connecting
// as the backend's configured user when needed; retry says whether f may
// run again on a new connection when the old one turns out dead.
func (db *database) with(ctx context.Context, p *Proxy, retry internalconn.Retry, f func(*pgx.Conn) error) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.conn == nil {
		db.conn = internalconn.New(nil, func(ctx context.Context) (*pgx.Conn, error) {
			db.catalog = nil // db.mu is held: with is the only caller
			db.seen.Store(nil)
			return p.adminConn(ctx, db.name)
		})
	}
	return db.conn.Run(ctx, retry, f)
}

// forgetCatalog drops the catalog read so far: mzproxy's schema was just
// installed (the database was made again), so its revisions start over and
// an old catalog could pass for a new one of the same revision.
func (db *database) forgetCatalog() {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.catalog = nil
	db.seen.Store(nil)
}

// closeConn closes the administrative connection; the next use dials
// again.
func (db *database) closeConn() {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.conn != nil {
		db.conn.Close()
	}
}

// InternalApplicationName is the application_name of mzproxy's own
// connections to the backend (catalog reads, leases, installs): what
// tells them from the clients' sessions in pg_stat_activity, so that a
// client's DROP DATABASE can end them (dropdb.go).
const InternalApplicationName = "mzproxy internal"

// internalConfig is the backend configuration of mzproxy's own
// connections to database, as the backend's configured user.
func (p *Proxy) internalConfig(database string) *pgconn.Config {
	cfg := p.cfg.Backend.Copy()
	cfg.Database = database
	if cfg.RuntimeParams == nil { // (Copy copies a map it has)
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = InternalApplicationName
	// A database's owner may set its search_path (ALTER DATABASE ... SET)
	// for every role that connects, superusers too: ahead of pg_catalog,
	// the operators and functions of a schema of its own would run in the
	// proxy's statements with a superuser's rights (TestHostile18DatabaseSearchPath).
	// A setting sent at connection start wins over the database's and
	// the role's; every name the proxy's own statements need is
	// schema-qualified, as in its SECURITY DEFINER functions.
	cfg.RuntimeParams["search_path"] = "pg_catalog, pg_temp"
	// So may it set role, to itself: a superuser's session then runs as
	// that role, and the proxy could not install or register there.
	cfg.RuntimeParams["role"] = "none"
	return cfg
}

// adminConn connects to database as the backend's configured user.
func (p *Proxy) adminConn(ctx context.Context, database string) (*pgx.Conn, error) {
	cfg := p.internalConfig(database)
	connCfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	connCfg.Config = *cfg
	conn, err := pgx.ConnectConfig(ctx, connCfg)
	if err != nil {
		// The cause stays in the chain: a login refused (28xxx) is told
		// from a backend that is down.
		return nil, pgerr.Wrap(pgerr.ConnectionFailure, fmt.Errorf("mzproxy could not connect to database %q: %w", database, err))
	}
	return conn, nil
}

// frontiersSQL reads the catalog revision, the upper and every live
// collection's since in one statement (one snapshot, one round trip). The
// upper is upper()'s, as the view txns answers it: a database or role
// may restrict non-system views (restrict_nonsystem_relation_kind) for
// the proxy's own connection too.
const frontiersSQL = `
SELECT (SELECT revision FROM ` + storage.Schema + `.catalog_revision), x.upper, c.id, c.since
  FROM (SELECT ` + storage.Schema + `.upper() AS upper) x
  LEFT JOIN (` + storage.Schema + `.collections c
             JOIN ` + storage.Schema + `.catalog k ON k.id = c.id AND k.dropped_ts IS NULL) ON true`

// snapshotRoundTimeout bounds one shared snapshot round trip: it runs for
// all its waiters, on no one's context (each waiter stops waiting at its
// own deadline or cancel).
const snapshotRoundTimeout = time.Minute

// snapshotRounds lets concurrent snapshot requests share one round trip
// (issue 15: each Bind of a prepared AS OF or mz_now() read queued for a
// round trip of its own on the one admin connection). A request joins the
// round that has not started yet, never one already running: the round it
// gets started after the request began, so its catalog and frontiers are
// not older than the request (a catalog change committed before a Bind is
// seen by it, as when each Bind read its own). Since, a Bind that starts
// its batch outside a block reads none (guardedBind): the rounds serve
// every other request (other Binds, Parse, EXPLAIN TIMESTAMP).
type snapshotRounds struct {
	mu      sync.Mutex
	pending *snapshotRound // the next round, not started; nil: none asked for
	running bool           // a runner goroutine is serving rounds
}

// snapshotRound is one shared round trip; done closes when its result is
// set.
type snapshotRound struct {
	done chan struct{}
	cat  *catalogSnapshot
	fr   *storage.FrontierState
	err  error
}

// snapshot returns the catalog at the backend's current revision and the
// frontiers, read by a round trip that started after the call. The catalog
// is reloaded only when the revision moved.
func (db *database) snapshot(ctx context.Context, p *Proxy) (*catalogSnapshot, *storage.FrontierState, error) {
	if db.fixed != nil {
		db.seen.Store(db.fixed)
		return db.fixed.catalog, db.fixed.frontiers, nil
	}
	r := db.joinRound(p)
	select {
	case <-r.done:
		if r.err != nil {
			// Each waiter its own error: a session may add to it.
			e := *pgerr.As(r.err)
			return nil, nil, &e
		}
		return r.cat, r.fr, nil
	case <-ctx.Done():
		// The round goes on for its other waiters.
		return nil, nil, pgerr.As(fmt.Errorf("reading mzproxy's catalog: %w", ctx.Err()))
	}
}

// joinRound returns the pending round, asking for one (and a runner) when
// there is none.
func (db *database) joinRound(p *Proxy) *snapshotRound {
	rs := &db.rounds
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.pending == nil {
		rs.pending = &snapshotRound{done: make(chan struct{})}
	}
	r := rs.pending
	if !rs.running {
		rs.running = true
		go db.runRounds(p)
	}
	return r
}

// runRounds serves pending rounds one after another until none is asked
// for; requests arriving during a round join the next.
func (db *database) runRounds(p *Proxy) {
	rs := &db.rounds
	for {
		rs.mu.Lock()
		r := rs.pending
		rs.pending = nil
		if r == nil {
			rs.running = false
			rs.mu.Unlock()
			return
		}
		rs.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), snapshotRoundTimeout)
		r.cat, r.fr, r.err = db.readSnapshot(ctx, p)
		cancel()
		close(r.done)
	}
}

// readSnapshot reads the frontiers, and the catalog when its revision
// moved, in a round trip of its own.
func (db *database) readSnapshot(ctx context.Context, p *Proxy) (*catalogSnapshot, *storage.FrontierState, error) {
	var cat *catalogSnapshot
	fr := &storage.FrontierState{Since: map[int64]uint64{}}
	err := db.with(ctx, p, internalconn.Idempotent, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, frontiersSQL)
		if err != nil {
			return err
		}
		var rev int64
		for rows.Next() {
			var upper int64
			var id, since *int64
			if err := rows.Scan(&rev, &upper, &id, &since); err != nil {
				return err
			}
			fr.Upper = uint64(upper)
			if id != nil && since != nil {
				fr.Since[*id] = uint64(*since)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if db.catalog == nil || db.catalog.cat.Revision != rev {
			// The catalog and its revision in one snapshot.
			err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
				c, err := storage.LoadCatalog(ctx, tx)
				if err == nil {
					db.catalog = newCatalogSnapshot(c)
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		cat = db.catalog
		db.seen.Store(&seenFrontiers{catalog: cat, frontiers: fr})
		return nil
	})
	if err != nil {
		return nil, nil, pgerr.As(fmt.Errorf("reading mzproxy's catalog: %w", err))
	}
	return cat, fr, nil
}

// catalogAt returns the catalog of the last snapshot if it is at revision
// rev, nil otherwise: without a round trip.
func (db *database) catalogAt(rev int64) *catalogSnapshot {
	if seen := db.seen.Load(); seen != nil && seen.catalog.cat.Revision == rev {
		return seen.catalog
	}
	return nil
}

// catalogSnapshot adapts a storage catalog to what the planner looks up.
type catalogSnapshot struct {
	cat     *storage.Catalog
	objects map[int64]*planner.Object
	// history: the tables whose history this proxy saw built since c was
	// read (lazy_history.go), shared by withTemps' copies.
	history *historyState
	// temps are the names of one session's temporary relations, which
	// shadow managed objects of the same name where the search path has
	// pg_temp (withTemps): nil in a database's own snapshot, which all
	// its sessions share.
	temps map[string]bool
}

// withTemps is s as seen by a session whose temporary relations have
// the names temps: a copy, so that no plan made with it is taken for one
// made with s (the planner's cache tells catalogs apart by pointer), nor
// s for it.
func (s *catalogSnapshot) withTemps(temps map[string]bool) *catalogSnapshot {
	if len(temps) == 0 {
		return s
	}
	c := *s
	c.temps = temps
	return &c
}

func newCatalogSnapshot(c *storage.Catalog) *catalogSnapshot {
	s := &catalogSnapshot{cat: c, objects: make(map[int64]*planner.Object, len(c.Objects)), history: newHistoryState(c)}
	for _, o := range c.Objects {
		po := &planner.Object{
			ID:      uint64(o.ID),
			Schema:  o.Schema,
			Name:    o.Name,
			Kind:    planner.Table,
			History: planner.QualifiedName{Schema: o.HistorySchema, Name: o.HistoryName},
			ViewSQL: o.ViewSQL,

			RowSecurity: o.RowSecurity,
		}
		if o.Kind == storage.KindView {
			po.Kind = planner.View
		}
		for _, col := range o.Columns {
			po.Columns = append(po.Columns, col.Name)
		}
		s.objects[o.ID] = po
	}
	return s
}

// Lookup implements planner.Catalog. An unqualified name resolves in the
// first schema of the search path holding a managed object of that name,
// or, at pg_temp, a temporary relation of the session's (unmanaged); an
// unmanaged relation of another schema earlier in the path that shadows
// it is not seen (the proxy does not track those).
func (s *catalogSnapshot) Lookup(schema, name string, searchPath []string) (*planner.Object, bool) {
	if schema != "" {
		if o := s.cat.ByName(schema, name); o != nil {
			return s.objects[o.ID], true
		}
		return nil, false
	}
	for _, sch := range searchPath {
		if sch == "pg_temp" {
			if s.temps[name] {
				return nil, false
			}
			continue
		}
		if o := s.cat.ByName(sch, name); o != nil {
			return s.objects[o.ID], true
		}
	}
	return nil, false
}

// Revision implements planner.Catalog.
func (s *catalogSnapshot) Revision() uint64 { return uint64(s.cat.Revision) }
