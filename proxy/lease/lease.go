package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/proxy/internalconn"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// Defaults of Config.
const (
	DefaultInterval        = 5 * time.Second
	DefaultGrace           = 25 * time.Second
	DefaultCompactInterval = time.Second
	DefaultRetention       = time.Second // Materialize's default for tables
	DefaultBatchSize       = 10000
	DefaultMaxBatches      = 20
)

// ErrLost is wrapped by every error of a lease that may no longer serve:
// fenced by a newer generation, expired (no successful heartbeat within
// the grace), or closed.
var ErrLost = errors.New("lease lost")

// InstallError is Register's error when installing or upgrading mzproxy's
// backend schema (storage.Install), its first step, failed.
type InstallError struct{ Err error }

func (e *InstallError) Error() string { return e.Err.Error() }
func (e *InstallError) Unwrap() error { return e.Err }

// Config configures Register.
type Config struct {
	// Dial connects to the lease's database as a superuser (the proxy's
	// administrative connection). Called again after a connection breaks.
	Dial func(ctx context.Context) (*pgx.Conn, error)
	// Generation of this proxy: 0 joins the newest registered generation;
	// a lower one than the newest fails to register (fenced); a higher one
	// fences every incarnation of a lower generation.
	Generation uint64
	// Interval between heartbeats (DefaultInterval) and Grace, after which
	// an incarnation without a heartbeat is retired (DefaultGrace). Grace
	// must exceed Interval comfortably: the lease is considered lost
	// locally a tenth of Grace before the backend may retire it.
	Interval, Grace time.Duration
	// CompactInterval between compaction rounds (DefaultCompactInterval);
	// negative: this proxy never compacts.
	CompactInterval time.Duration
	// DefaultRetention of tables without RETAIN HISTORY (DefaultRetention).
	DefaultRetention time.Duration
	// TickInterval (DefaultTickInterval) bounds how far the upper and the
	// oracle's read_ts trail the clock while nothing is written: the proxy
	// holding the database's tick lock commits an empty write when no
	// write has for that long (see tick.go); negative: this proxy never
	// ticks.
	TickInterval time.Duration
	// Ticks counts the ticks (a Set shares one among its leases; nil: the
	// lease counts alone).
	Ticks *TickCounters
	// BatchSize is the number of versions one compaction statement deletes
	// at most (DefaultBatchSize); MaxBatches bounds the statements per
	// table per round (DefaultMaxBatches), so a round stays short and the
	// rest waits for the next one.
	BatchSize, MaxBatches int
	// Host is recorded in the incarnation (default: os.Hostname).
	Host string
	// Log receives the loop's errors (default: logrus's standard logger).
	Log logrus.FieldLogger
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.CompactInterval == 0 {
		c.CompactInterval = DefaultCompactInterval
	}
	if c.DefaultRetention <= 0 {
		c.DefaultRetention = DefaultRetention
	}
	if c.TickInterval == 0 {
		c.TickInterval = DefaultTickInterval
	}
	if c.Ticks == nil {
		c.Ticks = &TickCounters{}
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = DefaultMaxBatches
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if c.Log == nil {
		c.Log = logrus.StandardLogger()
	}
}

// Lease is one incarnation of this proxy in one database: its heartbeat,
// its read protection and (if it holds the compaction lock) the database's
// compaction. Methods are safe for concurrent use.
type Lease struct {
	cfg Config
	id  int64
	gen uint64

	// connMu serializes the use of conn and orders every publication
	// (heartbeat, holds below the floor, compaction).
	connMu sync.Mutex
	conn   *internalconn.Conn // checked before each statement, dialed again when dead

	mu        sync.Mutex
	floor     uint64             // holds at ts >= floor are granted locally
	published uint64             // the floor the last heartbeat published
	candidate uint64             // the oracle's read_ts at the last heartbeat: the next floor
	deadline  time.Time          // the lease is valid until then
	fast      map[uint64]int     // holds at or above the floor, by ts
	held      map[*Hold]struct{} // every hold out, published at each heartbeat
	// covered bounds this incarnation's read_holds rows from above: while
	// covered[c] is there, the row of c exists and is at or below it, so
	// c's since stays at or below it too (an entry starts at a ts that
	// acquire_hold checked against the since; compaction cannot pass the
	// row). A hold below the floor at ts >= covered[c] on every input is
	// therefore granted in memory. acquire_hold lowers an entry; the
	// heartbeat raises or drops it when it takes its snapshot of the
	// holds, before it publishes (see heartbeat).
	covered map[int64]uint64
	// flights are the acquire_hold round trips in progress, by ts: closed
	// when done. Acquirers at the same ts wait for one rather than queue
	// their own on connMu.
	flights   map[uint64]chan struct{}
	err       error // set once lost
	gone      bool  // lost because its database does not exist any more
	done      chan struct{}
	lastRound CompactStats

	cancel    context.CancelFunc
	loopDone  chan struct{}
	closeOnce sync.Once
}

// Register registers a new incarnation in the database cfg.Dial reaches
// (installing mzproxy's backend schema first when needed) and starts its
// heartbeat and compaction loop. Call Close to stop it. A proxy registers
// once per database, when it first uses it.
func Register(ctx context.Context, cfg Config) (*Lease, error) {
	cfg.defaults()
	if cfg.Dial == nil {
		return nil, errors.New("lease: Config.Dial is nil")
	}
	l := &Lease{
		cfg:     cfg,
		fast:    map[uint64]int{},
		held:    map[*Hold]struct{}{},
		covered: map[int64]uint64{},
		flights: map[uint64]chan struct{}{},
		done:    make(chan struct{}),
	}
	l.conn = internalconn.New(nil, cfg.Dial)
	start := time.Now()
	var inc storage.Incarnation
	// Registering twice would make two incarnations: run once. The
	// registration rides with the install's last round trip (in a new
	// database, in its transaction).
	err := l.conn.Run(ctx, internalconn.Once, func(conn *pgx.Conn) error {
		var err error
		inc, err = storage.InstallAndRegister(ctx, conn, storage.Registration{
			Generation: int64(min(cfg.Generation, math.MaxInt64)), GraceMS: cfg.Grace.Milliseconds(), Host: cfg.Host, PID: os.Getpid()})
		var re *storage.RegisterError
		if err != nil && !errors.As(err, &re) && !storage.IsFenced(err) {
			return &InstallError{err}
		}
		return err
	})
	if err != nil {
		l.conn.Close()
		var ie *InstallError
		switch {
		case storage.IsFenced(err):
			return nil, lost(err)
		case errors.As(err, &ie):
			return nil, ie
		}
		return nil, fmt.Errorf("lease: register: %w", err)
	}
	l.id = inc.ID
	l.gen = uint64(inc.Generation)
	l.floor, l.published, l.candidate = uint64(inc.Floor), uint64(inc.Floor), uint64(inc.Floor)
	l.deadline = start.Add(l.validity())
	loopCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.loopDone = make(chan struct{})
	go l.loop(loopCtx)
	return l, nil
}

// Granted returns a lease of incarnation id that no backend stands
// behind: it never expires, grants every hold in memory (floor 0) and has
// no heartbeat loop; Refused still loses it. It exists for the session
// scripts of package proxy, which run a session against a scripted backend
// with no database to register in. Do not Close it.
func Granted(id int64) *Lease {
	var cfg Config
	cfg.defaults()
	return &Lease{
		cfg:      cfg,
		id:       id,
		fast:     map[uint64]int{},
		held:     map[*Hold]struct{}{},
		covered:  map[int64]uint64{},
		flights:  map[uint64]chan struct{}{},
		done:     make(chan struct{}),
		deadline: time.Now().AddDate(100, 0, 0),
	}
}

// validity is how long after a heartbeat was sent the lease counts as
// valid locally: a tenth of the grace short of when the backend may retire
// it (its clock starts later, when the heartbeat arrives).
func (l *Lease) validity() time.Duration { return l.cfg.Grace - l.cfg.Grace/10 }

// lost wraps a backend error (fenced, expired) or a reason as the error a
// client sees: XX000 with the backend's message, wrapping ErrLost.
func lost(cause error) *pgerr.Error {
	var pe *pgconn.PgError
	if errors.As(cause, &pe) {
		e := pgerr.Wrap(pgerr.InternalError, &lostError{msg: pe.Message, cause: cause})
		e.Detail, e.Hint = pe.Detail, pe.Hint
		return e
	}
	return pgerr.Wrap(pgerr.InternalError, &lostError{msg: cause.Error(), cause: cause})
}

type lostError struct {
	msg   string
	cause error
}

func (e *lostError) Error() string   { return e.msg }
func (e *lostError) Unwrap() []error { return []error{ErrLost, e.cause} }

// ID is the incarnation's id in this database: what BeginWriteSQL passes.
func (l *Lease) ID() int64 { return l.id }

// Generation is the incarnation's generation.
func (l *Lease) Generation() uint64 { return l.gen }

// BeginWriteSQL is the statement that takes the commit slot of a write
// transaction for this incarnation (storage.BeginWriteFor(l.ID())): it
// fails (storage.IsFenced) once the incarnation is fenced or expired, and
// the transaction then writes nothing.
func (l *Lease) BeginWriteSQL() string { return storage.BeginWriteFor(l.id) }

// Done is closed when the lease is lost: reads holding it must stop (their
// next statement would no longer be protected).
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while the lease is valid, else why it is not (wrapping
// ErrLost; a *pgerr.Error with SQLSTATE XX000 to send to the client).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkLocked()
}

// checkLocked notices an expired lease.
func (l *Lease) checkLocked() error {
	if l.err == nil && time.Now().After(l.deadline) {
		l.loseLocked(lost(fmt.Errorf("mzproxy incarnation %d lost its lease: no successful heartbeat for %v", l.id, l.validity())))
	}
	return l.err
}

func (l *Lease) loseLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	l.floor = math.MaxUint64
	close(l.done)
	l.cfg.Log.WithField("incarnation", l.id).WithError(err).Warn("mzproxy lease lost")
}

// Refused loses the lease at once when err is a write function refusing
// this incarnation (storage.IsFenced), rather than at the next heartbeat:
// a proxy that a session saw fenced starts no new session on it. The
// error is not taken at its word: a client's own function may raise the
// same SQLSTATE, message and detail, and its session relays it like any
// other (an ordinary role made the proxy lose its lease, and every session
// its holds, at will). A heartbeat run now asks the backend, and loses
// the lease only if it refuses this incarnation too.
func (l *Lease) Refused(err error) {
	switch {
	case !storage.IsFenced(err):
	case l.conn == nil:
		l.lose(lost(err)) // Granted: no backend to ask
	default:
		_ = l.Heartbeat(context.Background())
	}
}

func (l *Lease) lose(err error) {
	l.mu.Lock()
	l.loseLocked(err)
	l.mu.Unlock()
}

// Floor is the oldest timestamp at which Acquire grants a hold without a
// backend round trip: history at any ts >= Floor() is protected by this
// incarnation's published floor. MaxUint64 once the lease is lost.
func (l *Lease) Floor() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.checkLocked() != nil {
		return math.MaxUint64
	}
	return l.floor
}

// Hold is read protection at TS on the collections it was acquired for.
// Release it when the read is done.
type Hold struct {
	l      *Lease
	ts     uint64
	inputs []int64
	slow   bool // below the floor: protected by the read_holds rows
	once   sync.Once
}

// TS is the held timestamp.
func (h *Hold) TS() uint64 { return h.ts }

// Lease is the lease the hold was granted under: once it is lost
// (Lease().Err() != nil) the hold protects nothing.
func (h *Hold) Lease() *Lease { return h.l }

// Release gives the hold up; the backend learns at the next heartbeat.
func (h *Hold) Release() {
	h.once.Do(func() {
		l := h.l
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.held, h)
		if !h.slow {
			l.releaseFastLocked(h.ts)
		}
	})
}

// BelowSinceError is Acquire's refusal of a timestamp below an input's
// since.
type BelowSinceError struct {
	TS uint64
	// Since maps each input (catalog id) to its since.
	Since map[int64]uint64
}

func (e *BelowSinceError) Error() string {
	ids := make([]int64, 0, len(e.Since))
	for id := range e.Since {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	s := fmt.Sprintf("Timestamp (%d) is not valid for all inputs:", e.TS)
	for _, id := range ids {
		s += fmt.Sprintf(" u%d since %d", id, e.Since[id])
	}
	return s
}

// Acquire protects the history of inputs (catalog ids of managed tables)
// at ts until the Hold is released. At or above Floor() it is granted in
// memory, and so is a hold below it whose inputs this incarnation's
// published holds already protect at ts (see covered). Otherwise a backend
// round trip publishes the hold under the lock compaction takes, after
// checking ts against the inputs' sinces (*BelowSinceError if an input is
// compacted past ts); concurrent acquirers at the same ts share that round
// trip. A lost lease fails with Err().
//
// The caller still chooses ts from the sinces it read (a new table's since
// is its creation time, which may be above the floor); Acquire guarantees
// that a since at or below ts when it was read stays so while held.
func (l *Lease) Acquire(ctx context.Context, ts uint64, inputs []int64) (*Hold, error) {
	ids := append([]int64(nil), inputs...)
	for {
		l.mu.Lock()
		if h, err := l.grantLocked(ts, ids); h != nil || err != nil {
			l.mu.Unlock()
			return h, err
		}
		flight, waiting := l.flights[ts]
		if !waiting {
			flight = make(chan struct{})
			l.flights[ts] = flight
		}
		l.mu.Unlock()
		if !waiting {
			return l.publishHold(ctx, ts, ids, flight)
		}
		// The round trip at ts in flight most likely covers these inputs
		// too: look again once it is done.
		select {
		case <-flight:
		case <-ctx.Done():
			return nil, fmt.Errorf("lease: acquiring a read hold at %d: %w", ts, ctx.Err())
		}
	}
}

// TryAcquire is Acquire without its round trip: nil, nil when the hold
// would take one (a ts below the floor on inputs not covered there). The
// event loop's reads take their holds with it: they must not wait. The
// hold keeps inputs (Acquire keeps a copy).
func (l *Lease) TryAcquire(ts uint64, inputs []int64) (*Hold, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grantLocked(ts, inputs)
}

// HoldFloor protects the history of every collection at the floor, in
// memory, until ReleaseFloor(ts): no since passes ts meanwhile. A reader
// that chooses its timestamp t afterwards from the oracle (t >= ts: the
// floor is a read_ts the oracle handed out before) can then Acquire t for
// its inputs later and never be refused, however many heartbeats raise
// the floor past t in between (Acquire's round trip then finds every
// since at or below ts). A count, not a Hold: it costs a reader no
// allocation. A lost lease fails with Err().
func (l *Lease) HoldFloor() (ts uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkLocked(); err != nil {
		return 0, err
	}
	// At the floor itself, not a copy read earlier: a heartbeat raises
	// the floor first, under mu, and then publishes at most the oldest
	// fast hold, this one.
	l.fast[l.floor]++
	return l.floor, nil
}

// ReleaseFloor gives up a HoldFloor at ts.
func (l *Lease) ReleaseFloor(ts uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseFastLocked(ts)
}

// releaseFastLocked gives up one hold at ts granted at or above the floor.
func (l *Lease) releaseFastLocked(ts uint64) {
	if l.fast[ts]--; l.fast[ts] <= 0 {
		delete(l.fast, ts)
	}
}

// grantLocked grants a hold at ts in memory when it can (nil, nil when it
// takes a round trip).
func (l *Lease) grantLocked(ts uint64, ids []int64) (*Hold, error) {
	if err := l.checkLocked(); err != nil {
		return nil, err
	}
	if ts >= l.floor {
		h := &Hold{l: l, ts: ts, inputs: ids}
		l.fast[ts]++
		l.held[h] = struct{}{}
		return h, nil
	}
	for _, c := range ids {
		if bound, ok := l.covered[c]; !ok || bound > ts {
			return nil, nil
		}
	}
	h := &Hold{l: l, ts: ts, inputs: ids, slow: true}
	l.held[h] = struct{}{}
	return h, nil
}

// publishHold is Acquire's round trip: acquire_hold publishes a hold at ts
// on ids below the floor, then flight is closed for those waiting on it.
func (l *Lease) publishHold(ctx context.Context, ts uint64, ids []int64, flight chan struct{}) (*Hold, error) {
	defer func() {
		l.mu.Lock()
		delete(l.flights, ts)
		l.mu.Unlock()
		close(flight)
	}()
	l.connMu.Lock()
	defer l.connMu.Unlock()
	// What held connMu before (another ts's round trip) may cover ts now.
	l.mu.Lock()
	h, err := l.grantLocked(ts, ids)
	l.mu.Unlock()
	if h != nil || err != nil {
		return h, err
	}
	since := map[int64]uint64{}
	// Publishing a hold is a write: run once.
	err = l.withConn(ctx, internalconn.Once, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SELECT collection, since FROM "+storage.Schema+".acquire_hold($1, $2, $3)", l.id, int64(min(ts, math.MaxInt64)), ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c, s int64
			if err := rows.Scan(&c, &s); err != nil {
				return err
			}
			since[c] = uint64(s)
		}
		return rows.Err()
	})
	if err != nil {
		if storage.IsFenced(err) {
			l.lose(lost(err))
			return nil, l.Err()
		}
		return nil, fmt.Errorf("lease: acquiring a read hold at %d: %w", ts, err)
	}
	for _, s := range since {
		if s > ts {
			return nil, &BelowSinceError{TS: ts, Since: since}
		}
	}
	h = &Hold{l: l, ts: ts, inputs: ids, slow: true}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkLocked(); err != nil {
		return nil, err
	}
	l.held[h] = struct{}{}
	// connMu is still held: no heartbeat took its snapshot since the
	// rows were lowered to ts.
	for c := range since {
		if bound, ok := l.covered[c]; !ok || ts < bound {
			l.covered[c] = ts
		}
	}
	return h, nil
}

// withConn runs f on the connection (connMu held), dialing first if
// needed; retry says whether f may run again on a new connection when the
// old one turns out dead.
func (l *Lease) withConn(ctx context.Context, retry internalconn.Retry, f func(*pgx.Conn) error) error {
	err := l.conn.Run(ctx, retry, f)
	if databaseGone(err) {
		// The incarnation, its holds and the history they protect went
		// with the database: nothing is left to heartbeat, tick or
		// compact. Without this the loop dialed the dropped database
		// about twice a second until the lease expired (47 refused
		// connections per database a sqllogictest file makes and drops).
		l.mu.Lock()
		l.gone = true
		l.mu.Unlock()
		l.lose(lost(err))
		return l.Err()
	}
	return err
}

// Gone reports whether the lease was lost because its database does not
// exist any more (it was dropped).
func (l *Lease) Gone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gone
}

// databaseGone reports whether err is the refusal of a connection to a
// database that does not exist (any more: it was dropped or renamed).
func databaseGone(err error) bool {
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	return errors.As(err, &ce) && errors.As(err, &pe) && pe.Code == "3D000" // invalid_catalog_name
}

// Heartbeat renews the lease now and publishes the floor and the holds
// out, per collection the oldest (the loop does this every Interval).
// Holds at or above the floor are published only to be seen (mz_read_holds):
// the floor already protects them.
func (l *Lease) Heartbeat(ctx context.Context) error {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	return l.heartbeat(ctx)
}

func (l *Lease) heartbeat(ctx context.Context) error {
	l.mu.Lock()
	if err := l.checkLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	// Raise the local floor first: holds granted from here on are at or
	// above it, hence above what is published below.
	l.floor = max(l.floor, l.candidate)
	floor := l.floor
	for ts := range l.fast {
		floor = min(floor, ts)
	}
	oldest := map[int64]uint64{}
	for h := range l.held {
		for _, c := range h.inputs {
			if cur, ok := oldest[c]; !ok || h.ts < cur {
				oldest[c] = h.ts
			}
		}
	}
	// The backend raises each row to oldest (or drops it when not listed)
	// at some moment from now on, and a hold granted meanwhile is not in
	// this snapshot: from here it may count only on what the row is both
	// before and after, at most max(covered, oldest). This holds whether
	// the heartbeat succeeds or not.
	for c, bound := range l.covered {
		if ts, ok := oldest[c]; ok {
			l.covered[c] = max(bound, ts)
		} else {
			delete(l.covered, c)
		}
	}
	l.mu.Unlock()
	colls := make([]int64, 0, len(oldest))
	tss := make([]int64, 0, len(oldest))
	for c, ts := range oldest {
		colls, tss = append(colls, c), append(tss, int64(ts))
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Interval)
	defer cancel()
	var readTS int64
	// A heartbeat run twice publishes the same: it may run again.
	err := l.withConn(ctx, internalconn.Idempotent, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT "+storage.Schema+".heartbeat($1, $2, $3, $4)", l.id, int64(floor), colls, tss).Scan(&readTS)
	})
	if err != nil {
		if storage.IsFenced(err) {
			l.lose(lost(err))
			return l.Err()
		}
		return fmt.Errorf("lease: heartbeat: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.deadline = start.Add(l.validity())
		l.published = max(l.published, floor)
		l.candidate = max(l.candidate, uint64(readTS))
	}
	return l.err
}

// CompactStats describes one compaction round.
type CompactStats struct {
	// Ran is false when another proxy holds the compaction lock.
	Ran bool
	// Since maps each collection to its since after the round.
	Since map[int64]uint64
	// Deleted versions, per collection (only those with deletions).
	Deleted map[int64]int64
	// More is true when some table had more to delete than MaxBatches
	// allowed: the next round continues.
	More bool
}

// Compact runs one compaction round now if this proxy holds (or can take)
// the database's compaction lock (the loop does this every
// CompactInterval): it retires incarnations past their grace, advances
// every since and deletes versions no time at or after the since can read,
// in bounded batches.
func (l *Lease) Compact(ctx context.Context) (CompactStats, error) {
	return l.compact(ctx, nil)
}

// compact runs a round; between batches beat is called (the loop passes
// its heartbeat so a long round cannot starve it).
func (l *Lease) compact(ctx context.Context, beat func()) (CompactStats, error) {
	st := CompactStats{Since: map[int64]uint64{}, Deleted: map[int64]int64{}}
	// The collections holding versions their since makes unreadable, in id
	// order: only those take compact_batch round trips.
	var ids []int64
	if err := l.Err(); err != nil {
		return st, err
	}
	// Every statement is bounded, so a stuck one cannot starve the
	// heartbeats that share the loop for long.
	timeout := l.cfg.Grace / 4
	l.connMu.Lock()
	err := l.withConn(ctx, internalconn.Once, func(conn *pgx.Conn) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		// The right to compact is a claim of a live incarnation, not an
		// advisory lock: any role can take those (storage: claim).
		var holder bool
		if err := conn.QueryRow(ctx, "SELECT "+storage.Schema+".claim('compaction', $1)", l.id).Scan(&holder); err != nil || !holder {
			return err
		}
		st.Ran = true
		rows, err := conn.Query(ctx, "SELECT id, since, pending FROM "+storage.Schema+".compact($1, $2)", l.cfg.DefaultRetention.Milliseconds(), l.id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, since int64
			var pending bool
			if err := rows.Scan(&id, &since, &pending); err != nil {
				return err
			}
			st.Since[id] = uint64(since)
			if pending {
				ids = append(ids, id)
			}
		}
		return rows.Err()
	})
	l.connMu.Unlock()
	if err != nil || !st.Ran {
		if err != nil {
			err = fmt.Errorf("lease: compaction: %w", err)
		}
		return st, err
	}
	for _, id := range ids {
		for b := 0; ; b++ {
			if b == l.cfg.MaxBatches {
				st.More = true
				break
			}
			if beat != nil {
				beat()
			}
			var n int64
			l.connMu.Lock()
			err := l.withConn(ctx, internalconn.Once, func(conn *pgx.Conn) error {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				return conn.QueryRow(ctx, "SELECT "+storage.Schema+".compact_batch($1, $2)", id, l.cfg.BatchSize).Scan(&n)
			})
			l.connMu.Unlock()
			if err != nil {
				return st, fmt.Errorf("lease: compaction of u%d: %w", id, err)
			}
			if n > 0 {
				st.Deleted[id] += n
			}
			if n < int64(l.cfg.BatchSize) {
				break
			}
		}
	}
	l.mu.Lock()
	l.lastRound = st
	l.mu.Unlock()
	return st, nil
}

// loop heartbeats every Interval, compacts every CompactInterval and ticks
// (tick.go) until Close or the lease is lost.
func (l *Lease) loop(ctx context.Context) {
	defer close(l.loopDone)
	lastBeat := time.Now()
	beat := func() {
		if time.Since(lastBeat) < l.cfg.Interval {
			return
		}
		lastBeat = time.Now()
		if err := l.Heartbeat(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, ErrLost) {
			l.cfg.Log.WithField("incarnation", l.id).WithError(err).Warn("mzproxy lease heartbeat failed")
		}
	}
	beats := time.NewTicker(l.cfg.Interval)
	defer beats.Stop()
	// Notices expiry (closing Done) even when nobody asks.
	checks := time.NewTicker(max(l.cfg.Grace/20, time.Millisecond))
	defer checks.Stop()
	var compactions <-chan time.Time
	if l.cfg.CompactInterval > 0 {
		t := time.NewTicker(l.cfg.CompactInterval)
		defer t.Stop()
		compactions = t.C
	}
	// Ticks run on their own schedule: Tick says when the next is due.
	var ticks <-chan time.Time
	var tickTimer *time.Timer
	if l.cfg.TickInterval > 0 {
		tickTimer = time.NewTimer(l.cfg.TickInterval)
		defer tickTimer.Stop()
		ticks = tickTimer.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			l.connMu.Lock()
			l.conn.Close()
			l.connMu.Unlock()
			return
		case <-checks.C:
			_ = l.Err()
		case <-beats.C:
			lastBeat = time.Time{}
			beat()
		case <-compactions:
			if _, err := l.compact(ctx, beat); err != nil && ctx.Err() == nil && !errors.Is(err, ErrLost) {
				l.cfg.Log.WithField("incarnation", l.id).WithError(err).Warn("mzproxy compaction failed")
			}
		case <-ticks:
			next, err := l.Tick(ctx)
			if err != nil && ctx.Err() == nil && !errors.Is(err, ErrLost) {
				l.cfg.Log.WithField("incarnation", l.id).WithError(err).Warn("mzproxy tick failed")
			}
			tickTimer.Reset(next)
		}
	}
}

// Close stops the loop, retires the incarnation (its floor and holds stop
// counting at once; its writes are refused from then on) and closes the
// connection. Holds still out are released with it.
func (l *Lease) Close(ctx context.Context) error {
	var err error
	l.closeOnce.Do(func() {
		l.cancel()
		<-l.loopDone
		l.connMu.Lock()
		defer l.connMu.Unlock()
		l.mu.Lock()
		wasLive := l.err == nil
		l.mu.Unlock()
		if wasLive {
			err = l.withConn(ctx, internalconn.Once, func(conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, "SELECT "+storage.Schema+".deregister($1)", l.id)
				return err
			})
		}
		l.lose(lost(fmt.Errorf("mzproxy incarnation %d was closed", l.id)))
		l.conn.Close()
	})
	return err
}

// abandon stops the loop and drops the connection without retiring the
// incarnation (whose database is gone): the lease counts as lost.
func (l *Lease) abandon() {
	l.closeOnce.Do(func() {
		l.cancel()
		<-l.loopDone
		l.connMu.Lock()
		defer l.connMu.Unlock()
		l.lose(lost(fmt.Errorf("mzproxy incarnation %d: its database was dropped", l.id)))
		l.conn.Close()
	})
}

// Stats is the lease's state for metrics and introspection.
type Stats struct {
	ID         int64
	Generation uint64
	// Floor is the local fast-path floor, Published the floor the backend
	// has (at most Floor).
	Floor, Published uint64
	// Holds granted now: at or above the floor, and below it.
	FastHolds, SlowHolds int
	// Deadline is when the lease expires locally without another
	// heartbeat.
	Deadline time.Time
	Err      error
	// LastCompaction is this proxy's last compaction round.
	LastCompaction CompactStats
}

// Stats returns the lease's current state.
func (l *Lease) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.fast {
		n += c
	}
	return Stats{ID: l.id, Generation: l.gen, Floor: l.floor, Published: l.published, FastHolds: n,
		SlowHolds: len(l.held) - n, Deadline: l.deadline, Err: l.checkLocked(), LastCompaction: l.lastRound}
}
