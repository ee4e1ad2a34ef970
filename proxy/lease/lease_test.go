package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mzproxy/mzproxy/proxy/internalconn"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// beat heartbeats each lease twice: the floor a heartbeat publishes is the
// read_ts the previous one saw.
func beat(t *testing.T, ls ...*Lease) {
	t.Helper()
	for i := 0; i < 2; i++ {
		for _, l := range ls {
			if err := l.Heartbeat(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func compact(t *testing.T, l *Lease) CompactStats {
	t.Helper()
	st, err := l.Compact(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Ran {
		t.Fatal("compaction did not run (lock held elsewhere)")
	}
	return st
}

// TestHoldProtectsHistory: a hold at t on incarnation A while B compacts
// keeps since <= t and the history at t exact, both for a hold granted in
// memory (at or above the floor) and one published below it; after the
// release the since moves past t.
func TestHoldProtectsHistory(t *testing.T) {
	for _, below := range []bool{false, true} {
		name := "fast"
		if below {
			name = "below-floor"
		}
		t.Run(name, func(t *testing.T) {
			d := newDB(t)
			a := d.register(Config{})
			b := d.register(Config{})
			d.mustWrite(b.BeginWriteSQL(), "CREATE TABLE t (k text PRIMARY KEY, v text)")
			id, h := d.table("t")
			var stamps []uint64
			var want []string
			for i := 0; i < 5; i++ {
				ts := d.mustWrite(b.BeginWriteSQL(),
					"INSERT INTO t VALUES ('a', 'a"+string(rune('0'+i))+"') ON CONFLICT (k) DO UPDATE SET v = excluded.v",
					"INSERT INTO t VALUES ('b"+string(rune('0'+i))+"', 'x')")
				stamps = append(stamps, ts)
				want = append(want, d.at(h, ts))
			}
			held := stamps[2]
			if !below {
				// Acquire before A's floor passes held.
				if f := a.Floor(); f > held {
					t.Fatalf("floor %d already above %d", f, held)
				}
			} else {
				beat(t, a, b)
				if f := a.Floor(); f <= held {
					t.Fatalf("floor %d not above %d", f, held)
				}
			}
			hold, err := a.Acquire(context.Background(), held, []int64{id})
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Stats(); (got.SlowHolds == 1) != below {
				t.Fatalf("stats %+v: want a hold below the floor: %v", got, below)
			}
			// More writes, then everything heartbeats and B compacts.
			for i := 0; i < 3; i++ {
				d.mustWrite(b.BeginWriteSQL(), "UPDATE t SET v = v || '+'")
			}
			beat(t, a, b)
			st := compact(t, b)
			if s := d.since(id); s > held {
				t.Fatalf("since %d passed the hold at %d", s, held)
			}
			if s := d.since(id); s != held {
				t.Errorf("since %d, want exactly the hold %d", s, held)
			}
			for i, ts := range stamps {
				if ts < held {
					continue
				}
				if got := d.at(h, ts); got != want[i] {
					t.Errorf("history at %d: %q, want %q", ts, got, want[i])
				}
			}
			t.Logf("deleted %v", st.Deleted)
			if st.Deleted[id] == 0 {
				t.Errorf("nothing compacted below the hold")
			}
			// Published when granted below the floor, else by the heartbeat.
			if got := d.int("SELECT count(*) FROM mz_internal.mz_read_holds WHERE incarnation = $1 AND kind = 'hold' AND ts = $2", a.ID(), int64(held)); got != 1 {
				t.Errorf("mz_read_holds rows of kind hold at %d: %d", held, got)
			}
			hold.Release()
			hold.Release() // idempotent
			beat(t, a, b)
			compact(t, b)
			if s := d.since(id); s <= held {
				t.Fatalf("since %d did not pass the released hold at %d", s, held)
			}
			if got := d.int("SELECT count(*) FROM "+h+" WHERE mz_to <= $1", int64(d.since(id))); got != 0 {
				t.Errorf("%d versions invisible at since were kept", got)
			}
			if got := d.int("SELECT count(*) FROM mzproxy.read_holds"); got != 0 {
				t.Errorf("read_holds rows after release: %d", got)
			}
		})
	}
}

// TestAcquireBelowSince: a hold below an input's since is refused with the
// sinces; one at the since is granted.
func TestAcquireBelowSince(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{})
	d.mustWrite(a.BeginWriteSQL(), "CREATE TABLE t (k text PRIMARY KEY, v text)")
	id, _ := d.table("t")
	t0 := d.mustWrite(a.BeginWriteSQL(), "INSERT INTO t VALUES ('a', '1')")
	for i := 0; i < 3; i++ {
		d.mustWrite(a.BeginWriteSQL(), "UPDATE t SET v = v || '+'")
	}
	beat(t, a)
	compact(t, a)
	since := d.since(id)
	if since <= t0 {
		t.Fatalf("since %d did not advance past %d", since, t0)
	}
	_, err := a.Acquire(context.Background(), t0, []int64{id})
	var bs *BelowSinceError
	if !errors.As(err, &bs) || bs.Since[id] != since {
		t.Fatalf("Acquire below since: %v, want BelowSinceError with since %d", err, since)
	}
	t.Log(err)
	h, err := a.Acquire(context.Background(), since, []int64{id})
	if err != nil {
		t.Fatalf("Acquire at since %d: %v", since, err)
	}
	h.Release()
}

// TestExpiredIncarnation: an incarnation that stops heartbeating is
// retired after its grace, compaction passes its floor, and it finds
// itself fenced: locally (Err, Done, Acquire) and in the backend (writes,
// heartbeat).
func TestExpiredIncarnation(t *testing.T) {
	d := newDB(t)
	const grace = 2 * time.Second
	b := d.register(Config{})
	d.mustWrite(b.BeginWriteSQL(), "CREATE TABLE t (k text PRIMARY KEY, v text)")
	id, _ := d.table("t")
	a := d.register(Config{Grace: grace}) // its loop never heartbeats
	floorA := a.Floor()
	hold, err := a.Acquire(context.Background(), floorA, []int64{id})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	for i := 0; i < 3; i++ {
		d.mustWrite(b.BeginWriteSQL(), "INSERT INTO t VALUES ('k"+string(rune('0'+i))+"', 'v')")
	}
	beat(t, b)
	// A's grace counts from its last heartbeat: its registration was
	// followed by four writes, and on a loaded machine those can take
	// most of the grace. A beats once more here, and the grace runs from
	// now.
	beat(t, a)
	compact(t, b)
	if s := d.since(id); s > floorA {
		t.Fatalf("since %d passed live A's floor %d", s, floorA)
	}
	select {
	case <-a.Done():
		t.Fatal("lease lost early")
	default:
	}
	time.Sleep(grace + 100*time.Millisecond)
	beat(t, b)
	compact(t, b)
	if s := d.since(id); s <= floorA {
		t.Fatalf("since %d still held at expired A's floor %d", s, floorA)
	}
	if got := d.int("SELECT count(*) FROM mz_internal.mz_incarnations WHERE id = $1 AND status = 'lease expired'", a.ID()); got != 1 {
		t.Errorf("A not shown as retired in mz_incarnations")
	}
	// Locally.
	select {
	case <-a.Done():
	default:
		t.Fatal("Done not closed after the grace")
	}
	if err := a.Err(); !errors.Is(err, ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", err)
	}
	if a.Floor() != math.MaxUint64 {
		t.Errorf("Floor of a lost lease = %d", a.Floor())
	}
	if _, err := a.Acquire(context.Background(), math.MaxInt64, []int64{id}); !errors.Is(err, ErrLost) {
		t.Errorf("Acquire on a lost lease: %v", err)
	}
	// In the backend.
	_, err = d.write(a.BeginWriteSQL(), "INSERT INTO t VALUES ('zombie', 'v')")
	if !storage.IsFenced(err) || !strings.Contains(err.Error(), "lost its lease") {
		t.Fatalf("write of a retired incarnation: %v, want fenced", err)
	}
	t.Log(err)
	if got := d.int("SELECT count(*) FROM t WHERE k = 'zombie'"); got != 0 {
		t.Errorf("fenced write left %d rows", got)
	}
	var n int64
	err = d.conn.QueryRow(context.Background(), "SELECT mzproxy.heartbeat($1, 0, '{}', '{}')", a.ID()).Scan(&n)
	if !storage.IsFenced(err) {
		t.Errorf("heartbeat of a retired incarnation: %v", err)
	}
	// A new registration serves again.
	a2 := d.register(Config{})
	d.mustWrite(a2.BeginWriteSQL(), "INSERT INTO t VALUES ('back', 'v')")
}

// TestGenerationFencing: registering generation 2 fences generation 1's
// writes (no partial write) and heartbeats; generation 1 cannot register
// any more; generation 0 joins generation 2.
func TestGenerationFencing(t *testing.T) {
	d := newDB(t)
	g1 := d.register(Config{Generation: 1})
	d.mustWrite(g1.BeginWriteSQL(), "CREATE TABLE t (k text PRIMARY KEY, v text)")
	id, h := d.table("t")
	d.mustWrite(g1.BeginWriteSQL(), "INSERT INTO t VALUES ('a', '1')")

	// A generation-1 write transaction in flight while generation 2
	// registers: the registration waits for its commit.
	ctx := context.Background()
	tx, err := d.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, g1.BeginWriteSQL()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES ('inflight', '1')"); err != nil {
		t.Fatal(err)
	}
	registered := make(chan *Lease, 1)
	other := newConnDB(t, d)
	go func() {
		l, err := Register(ctx, Config{Generation: 2, Dial: other, Interval: time.Hour, Grace: time.Hour, CompactInterval: -1, Log: quiet})
		if err != nil {
			t.Error(err)
		}
		registered <- l
	}()
	select {
	case <-registered:
		t.Fatal("generation 2 registered while a generation-1 write held the commit slot")
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := <-registered
	if g2 == nil {
		t.FailNow()
	}
	defer g2.Close(ctx)
	if g2.Generation() != 2 {
		t.Fatalf("generation %d", g2.Generation())
	}

	before := d.int("SELECT count(*) FROM " + h)
	_, err = d.write(g1.BeginWriteSQL(), "INSERT INTO t VALUES ('b', '1')")
	var pe *pgconn.PgError
	if !storage.IsFenced(err) || !errors.As(err, &pe) || pe.Code != "XX000" || !strings.Contains(pe.Message, "fenced by new generation 2") {
		t.Fatalf("generation-1 write: %v, want XX000 ... fenced by new generation 2", err)
	}
	t.Log(err)
	if got := d.int("SELECT count(*) FROM t WHERE k = 'b'"); got != 0 {
		t.Errorf("fenced write left rows")
	}
	if got := d.int("SELECT count(*) FROM " + h); got != before {
		t.Errorf("fenced write changed history: %d -> %d", before, got)
	}
	// begin_write_at too.
	if _, err := d.write(storage.BeginWriteAtFor(math.MaxInt64/2, g1.ID()), "INSERT INTO t VALUES ('c', '1')"); !storage.IsFenced(err) {
		t.Errorf("generation-1 begin_write_at: %v", err)
	}
	if err := g1.Heartbeat(ctx); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "fenced by new generation 2") {
		t.Errorf("generation-1 heartbeat: %v", err)
	}
	if _, err := g1.Acquire(ctx, math.MaxInt64, []int64{id}); !errors.Is(err, ErrLost) {
		t.Errorf("generation-1 Acquire: %v", err)
	}
	// Generation 1 cannot come back; 0 joins the newest.
	if _, err := Register(ctx, Config{Generation: 1, Dial: other, CompactInterval: -1, Log: quiet}); !errors.Is(err, ErrLost) {
		t.Errorf("registering generation 1 after 2: %v", err)
	}
	g0 := d.register(Config{})
	if g0.Generation() != 2 {
		t.Errorf("generation 0 joined %d, want 2", g0.Generation())
	}
	d.mustWrite(g2.BeginWriteSQL(), "INSERT INTO t VALUES ('d', '1')")
	d.mustWrite(g0.BeginWriteSQL(), "INSERT INTO t VALUES ('e', '1')")
	// The unfenced form still works.
	d.mustWrite(storage.BeginWriteSQL, "INSERT INTO t VALUES ('f', '1')")
	if got := d.int("SELECT count(*) FROM mz_internal.mz_incarnations WHERE status = 'fenced' AND fenced_by = $1", g2.ID()); got != 1 {
		t.Errorf("mz_incarnations fenced rows: %d", got)
	}
}

// newConnDB returns a Dial for d's database.
func newConnDB(t *testing.T, d *db) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, d.cs) }
}

// TestRetention: a table with RETAIN HISTORY keeps its window, one without
// follows the default, RESET returns to it; a dropped table's history goes
// once its since passes the drop.
func TestRetention(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{DefaultRetention: time.Millisecond})
	d.mustWrite(a.BeginWriteSQL(), "CREATE TABLE short (k text PRIMARY KEY, v text)", "CREATE TABLE long (k text PRIMARY KEY, v text)",
		storage.SetRetentionQuery("long", time.Hour, false))
	var ok bool
	tx, _ := d.conn.Begin(context.Background())
	tx.QueryRow(context.Background(), a.BeginWriteSQL()).Scan(new(int64))
	if err := tx.QueryRow(context.Background(), "CREATE TEMP TABLE tmp (x int); "+storage.SetRetentionQuery("tmp", time.Hour, false)).Scan(&ok); err == nil && ok {
		t.Errorf("set_retention on a temporary table returned true")
	}
	tx.Rollback(context.Background())
	if _, err := d.conn.Exec(context.Background(), storage.SetRetentionQuery("long", time.Hour, false)); err == nil {
		t.Errorf("set_retention outside a write transaction succeeded")
	}
	short, _ := d.table("short")
	long, _ := d.table("long")
	created := d.since(long)
	for i := 0; i < 3; i++ {
		d.mustWrite(a.BeginWriteSQL(), "INSERT INTO short VALUES ('k"+string(rune('0'+i))+"', 'v')", "INSERT INTO long VALUES ('k"+string(rune('0'+i))+"', 'v')")
	}
	beat(t, a)
	compact(t, a)
	upper := uint64(d.int(storage.UpperSQL))
	// After two heartbeats with no write in between the floor is read_ts
	// = upper-1, so the default retention of 1 ms decides.
	if s := d.since(short); s != upper-2 {
		t.Errorf("short since %d, upper %d: want upper-1-1ms", s, upper)
	}
	if s := d.since(long); s != created {
		t.Errorf("long since %d moved within its hour (created %d)", s, created)
	}
	if got := d.int("SELECT retain_ms FROM mz_internal.mz_frontiers WHERE name = 'long'"); got != 3600000 {
		t.Errorf("mz_frontiers retain_ms = %d", got)
	}
	if got := d.int("SELECT retain_ms FROM mz_internal.mz_frontiers WHERE name = 'short'"); got != 1 {
		t.Errorf("mz_frontiers default retain_ms = %d", got)
	}
	d.mustWrite(a.BeginWriteSQL(), "ALTER TABLE long ADD COLUMN w int", storage.SetRetentionQuery("long", 0, true))
	beat(t, a)
	compact(t, a)
	if s := d.since(long); s <= created {
		t.Errorf("long since %d did not move after RESET", s)
	}

	_, h := d.table("short")
	dropped := d.mustWrite(a.BeginWriteSQL(), "DROP TABLE short")
	if got := d.int("SELECT count(*) FROM pg_class WHERE oid = $1::regclass", h); got != 1 {
		t.Fatal("history of the dropped table is gone at once")
	}
	hold, err := a.Acquire(context.Background(), dropped-1, []int64{short})
	if err != nil {
		t.Fatal(err)
	}
	d.mustWrite(a.BeginWriteSQL(), "INSERT INTO long VALUES ('x', 'v')")
	beat(t, a)
	compact(t, a)
	if got := d.int("SELECT count(*) FROM mzproxy.collections WHERE id = $1", short); got != 1 {
		t.Fatal("history of a dropped table removed under a hold")
	}
	hold.Release()
	beat(t, a)
	compact(t, a)
	if got := d.int("SELECT count(*) FROM mzproxy.catalog WHERE id = $1", short); got != 0 {
		t.Errorf("catalog row of the dropped table kept")
	}
	if got := d.int("SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace = 'mzproxy'::regnamespace", strings.TrimPrefix(h, "mzproxy.")); got != 0 {
		t.Errorf("history table of the dropped table kept")
	}
}

// TestBoundedStorage: under a steady update loop with the loop compacting,
// the history table's size stays bounded.
func TestBoundedStorage(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{Interval: 50 * time.Millisecond, Grace: 5 * time.Second, CompactInterval: 50 * time.Millisecond,
		DefaultRetention: 100 * time.Millisecond, BatchSize: 500})
	d.mustWrite(a.BeginWriteSQL(), "CREATE TABLE t (k int PRIMARY KEY, v int)", "INSERT INTO t SELECT g, 0 FROM generate_series(1, 100) g")
	id, h := d.table("t")
	dur := 3 * time.Second
	if testing.Short() {
		dur = time.Second
	}
	end := time.Now().Add(dur)
	var writes, maxRows int64
	for time.Now().Before(end) {
		d.mustWrite(a.BeginWriteSQL(), "UPDATE t SET v = v + 1")
		writes++
		if writes%10 == 0 {
			maxRows = max(maxRows, d.int("SELECT count(*) FROM "+h))
		}
	}
	written := writes*100 + 100
	rows := d.int("SELECT count(*) FROM " + h)
	total := d.int("SELECT total_compacted_rows FROM mz_internal.mz_compactions WHERE object_id = $1", "u"+itoa(id))
	size := d.int("SELECT pg_total_relation_size($1::regclass)", h)
	t.Logf("%d update transactions of 100 rows in %v: %d versions written, %d compacted; history now %d rows (%d kB before vacuum), at most %d seen",
		writes, dur, written, total, rows, size/1024, maxRows)
	if writes < 20 {
		t.Skip("too few writes on this machine to judge")
	}
	// The retention plus a couple of heartbeat and compaction intervals
	// worth of versions, generously.
	if maxRows > written/2 || rows > written/2 {
		t.Errorf("history not bounded: %d rows of %d written", max(rows, maxRows), written)
	}
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestIntrospection: the mz_internal views answer for anyone.
func TestIntrospection(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{})
	// A role of this run's own: roles are the server's, and -count runs
	// the test again on the same server.
	role := fmt.Sprintf("mzreader_%d", time.Now().UnixNano())
	d.mustWrite(a.BeginWriteSQL(), "CREATE TABLE t (k text PRIMARY KEY, v text)", "CREATE ROLE "+role+" LOGIN")
	id, _ := d.table("t")
	h, err := a.Acquire(context.Background(), 1, []int64{id})
	if err == nil {
		h.Release()
		t.Fatal("hold at 1 granted")
	}
	compact(t, a)
	reader := connect(t, server.ConnString(role, d.conn.Config().Database))
	for _, q := range []string{
		"SELECT count(*) FROM mz_internal.mz_incarnations WHERE status = 'live' AND heartbeat_age < interval '1 hour' AND read_floor > 0",
		"SELECT count(*) FROM mz_internal.mz_read_holds WHERE kind = 'floor' AND object_id = 'u" + itoa(id) + "'",
		"SELECT count(*) FROM mz_internal.mz_frontiers WHERE read_frontier < write_frontier AND name = 't'",
		"SELECT count(*) FROM mz_internal.mz_compactions WHERE last_round_by = " + itoa(a.ID()),
	} {
		var n int64
		if err := reader.QueryRow(context.Background(), q).Scan(&n); err != nil || n != 1 {
			t.Errorf("%s: %d, %v", q, n, err)
		}
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// TestConcurrentHolds: readers acquire holds at recent and older times
// while a writer updates and the loop heartbeats and compacts every few
// milliseconds; every granted hold sees the complete history at its time.
func TestConcurrentHolds(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{Interval: 20 * time.Millisecond, Grace: 10 * time.Second, CompactInterval: 15 * time.Millisecond,
		DefaultRetention: time.Millisecond, BatchSize: 100})
	d.mustWrite(a.BeginWriteSQL(), "CREATE TABLE t (k int PRIMARY KEY, v int)", "INSERT INTO t SELECT g, 0 FROM generate_series(1, 50) g")
	id, h := d.table("t")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errs := make(chan error, 8)
	var granted, refused atomic.Int64
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		conn := connect(t, d.cs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				// As the proxy does: read the since with the time, refuse a
				// time below it, then hold.
				var now, since0 int64
				if err := conn.QueryRow(ctx, "SELECT "+storage.Schema+".read_ts(), (SELECT since FROM mzproxy.collections WHERE id = $1)", id).Scan(&now, &since0); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				ts := uint64(now) - uint64(i%4)*uint64(i%50) // sometimes well below the floor
				if ts < uint64(since0) {
					refused.Add(1)
					continue
				}
				hold, err := a.Acquire(ctx, ts, []int64{id})
				var bs *BelowSinceError
				if errors.As(err, &bs) {
					refused.Add(1)
					continue
				}
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				granted.Add(1)
				time.Sleep(time.Duration(i%3) * 10 * time.Millisecond)
				var n, since int64
				err = conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+h+" WHERE mz_from <= $1 AND mz_to > $1), (SELECT since FROM mzproxy.collections WHERE id = $2)",
					int64(ts), id).Scan(&n, &since)
				hold.Release()
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if n != 50 || uint64(since) > ts {
					errs <- fmt.Errorf("hold at %d: %d rows visible, since %d", ts, n, since)
					return
				}
			}
		}()
	}
	writer := connect(t, d.cs)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			tx, err := writer.Begin(ctx)
			if err != nil {
				return
			}
			_, err = tx.Exec(ctx, a.BeginWriteSQL()+"; UPDATE t SET v = v + 1 WHERE k % 5 = 0")
			if err == nil {
				err = tx.Commit(ctx)
			}
			tx.Rollback(context.Background())
			if err != nil && ctx.Err() == nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := a.Stats()
	t.Logf("%d holds granted, %d refused below a since; compacted %d versions; lease %+v", granted.Load(), refused.Load(),
		d.int("SELECT compacted_rows FROM mzproxy.collections WHERE id = $1", id), st.Err)
	if granted.Load() == 0 {
		t.Error("no hold granted")
	}
}

// TestReconnect: a broken lease connection is redialed by the next call,
// which succeeds (the heartbeat is checked before use, and run again when
// the backend ended it under the statement); a lost lease gives the
// compaction lock up to another proxy.
func TestReconnect(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{Grace: 3 * time.Second})
	compact(t, a)
	var pid uint32
	a.connMu.Lock()
	_ = a.withConn(context.Background(), internalconn.Once, func(c *pgx.Conn) error { pid = c.PgConn().PID(); return nil })
	a.connMu.Unlock()
	if _, err := d.conn.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	if err := a.Heartbeat(context.Background()); err != nil {
		t.Fatalf("the first heartbeat after the connection was terminated: %v", err)
	}
	compact(t, a) // the lock was released with the old connection
	b := d.register(Config{})
	if st, err := b.Compact(context.Background()); err != nil || st.Ran && a.Err() == nil {
		t.Fatalf("b compacted while a holds the lock: %+v %v", st, err)
	}
	// a expires (no loop heartbeats); its loop drops the connection and
	// with it the lock.
	<-a.Done()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := b.Compact(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Ran {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lost lease kept the compaction lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDroppedDatabase: a lease whose database is dropped is lost at its
// loop's next round trip (the dial is refused with 3D000), and its loop
// stops dialing, rather than trying about twice a second until it
// expires (issue 16: each sqllogictest file makes and drops a database).
func TestDroppedDatabase(t *testing.T) {
	d := newDB(t)
	var dials atomic.Int64
	cs := d.cs
	a := d.register(Config{
		Dial: func(ctx context.Context) (*pgx.Conn, error) {
			dials.Add(1)
			return pgx.Connect(ctx, cs)
		},
		CompactInterval: 20 * time.Millisecond,
		TickInterval:    20 * time.Millisecond,
	})
	compact(t, a)
	d.conn.Close(context.Background())
	admin := connect(t, server.ConnString("postgres", "postgres"))
	if _, err := admin.Exec(context.Background(), "DROP DATABASE "+d.conn.Config().Database+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease of a dropped database is not lost after 10 s")
	}
	if err := a.Err(); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("lost with %v, want ErrLost saying the database does not exist", err)
	}
	if !a.Gone() {
		t.Error("the lease of a dropped database does not say it is gone")
	}
	n := dials.Load()
	time.Sleep(200 * time.Millisecond)
	if more := dials.Load() - n; more > 0 {
		t.Fatalf("the lost lease dialed its dropped database %d more times", more)
	}
}

// TestSet: one lease per database, registered on first use, replaced after
// a loss, with the generation of the first registration.
func TestSet(t *testing.T) {
	d1, d2 := newDB(t), newDB(t)
	css := map[string]string{d1.conn.Config().Database: d1.cs, d2.conn.Config().Database: d2.cs}
	s := NewSet(Config{Interval: time.Hour, Grace: time.Hour, CompactInterval: -1, Log: quiet},
		func(ctx context.Context, database string) (*pgx.Conn, error) { return pgx.Connect(ctx, css[database]) })
	defer s.Close(context.Background())
	ctx := context.Background()
	l1, err := s.Get(ctx, d1.conn.Config().Database)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Get(ctx, d1.conn.Config().Database); again != l1 {
		t.Fatal("second Get registered again")
	}
	l2, err := s.Get(ctx, d2.conn.Config().Database)
	if err != nil || l2 == l1 {
		t.Fatal(err)
	}
	if len(s.Leases()) != 2 {
		t.Fatalf("leases: %v", s.Leases())
	}
	// A newer generation fences d1: this set may not come back there.
	newer := d1.register(Config{Generation: 5})
	_ = newer
	if err := l1.Heartbeat(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("heartbeat after fence: %v", err)
	}
	if _, err := s.Get(ctx, d1.conn.Config().Database); !errors.Is(err, ErrLost) {
		t.Fatalf("Get after the fence: %v, want ErrLost", err)
	}
	// A lease closed (lost) in d2 is replaced.
	l2.Close(ctx)
	l2b, err := s.Get(ctx, d2.conn.Config().Database)
	if err != nil || l2b == l2 || l2b.ID() == l2.ID() {
		t.Fatalf("Get after loss: %v %v", l2b, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, d2.conn.Config().Database); !errors.Is(err, ErrSetClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if got := d2.int("SELECT count(*) FROM mz_internal.mz_incarnations WHERE status = 'live'"); got != 0 {
		t.Errorf("live incarnations after Close: %d", got)
	}
}

// TestSetDetachDropped: Detach takes a live lease out of the set (it is
// not closed: the caller closes it) and keeps the database's entry (its
// generation); a lease lost because its database was dropped takes the
// entry with it, and so does a Get refused with 3D000, so a set does not
// grow with the databases made and dropped.
func TestSetDetachDropped(t *testing.T) {
	d1, d2 := newDB(t), newDB(t)
	n1, n2 := d1.conn.Config().Database, d2.conn.Config().Database
	css := map[string]string{n1: d1.cs, n2: d2.cs}
	s := NewSet(Config{Interval: time.Hour, Grace: time.Hour, CompactInterval: 20 * time.Millisecond, Log: quiet},
		func(ctx context.Context, database string) (*pgx.Conn, error) { return pgx.Connect(ctx, css[database]) })
	defer s.Close(context.Background())
	ctx := context.Background()
	l1, err := s.Get(ctx, n1)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Detach(n1); got != l1 || l1.Err() != nil {
		t.Fatalf("Detach: %v (lease err %v), want the live lease", got, l1.Err())
	}
	if s.Len() != 1 || len(s.Leases()) != 0 {
		t.Fatalf("after Detach: %d entries, %d leases; want 1, 0", s.Len(), len(s.Leases()))
	}
	if err := l1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := s.Get(ctx, n2)
	if err != nil {
		t.Fatal(err)
	}
	d2.conn.Close(ctx)
	admin := connect(t, server.ConnString("postgres", "postgres"))
	if _, err := admin.Exec(ctx, "DROP DATABASE "+n2+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease of a dropped database is not lost after 10 s")
	}
	if got := s.Detach(n2); got != l2 || s.Len() != 1 {
		t.Fatalf("Detach of a dropped database's lease: %v, %d entries; want the lease, 1", got, s.Len())
	}
	if _, err := s.Get(ctx, n2); !databaseGone(err) || s.Len() != 1 {
		t.Fatalf("Get of a dropped database: %v, %d entries; want 3D000, 1", err, s.Len())
	}
	s.Remove(n1)
	if s.Len() != 0 {
		t.Fatalf("after Remove: %d entries", s.Len())
	}
}

// TestCompactionChecksBoundedTables: a round looks for versions to delete
// in at most 128 tables (and for at most 20 ms), those whose since moved
// past the since they were last found clean at, the longest unchecked
// first. With 130 tables holding unreadable versions, a round compacts at
// most 128 of them, later rounds the others; a round after no write checks
// none.
func TestCompactionChecksBoundedTables(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{DefaultRetention: time.Millisecond})
	const n = 130
	var create, insert, update []string
	for i := 0; i < n; i++ {
		create = append(create, fmt.Sprintf("CREATE TABLE t%d (k int PRIMARY KEY, v int)", i))
		insert = append(insert, fmt.Sprintf("INSERT INTO t%d VALUES (1, 0)", i))
		update = append(update, fmt.Sprintf("UPDATE t%d SET v = 1", i))
	}
	d.mustWrite(a.BeginWriteSQL(), create...)
	d.mustWrite(a.BeginWriteSQL(), insert...)
	// Every table's first version is retracted at one timestamp, and the
	// tables' sinces pass it after a later write and two heartbeats.
	d.mustWrite(a.BeginWriteSQL(), update...)
	time.Sleep(5 * time.Millisecond)
	d.mustWrite(a.BeginWriteSQL(), "INSERT INTO t0 VALUES (2, 0)")
	beat(t, a)
	unreadable := func() int64 {
		return d.int("SELECT count(*) FROM mzproxy.collections c JOIN mzproxy.catalog k ON k.id = c.id WHERE c.clean_since IS DISTINCT FROM c.since")
	}
	compacted := map[int64]bool{}
	for round := 1; unreadable() > 0; round++ {
		if round > 40 {
			t.Fatalf("%d tables still not clean after %d rounds", unreadable(), round-1)
		}
		st := compact(t, a)
		if len(st.Deleted) > 128 {
			t.Fatalf("round %d deleted in %d tables, more than 128", round, len(st.Deleted))
		}
		for id := range st.Deleted {
			compacted[id] = true
		}
	}
	if len(compacted) != n {
		t.Errorf("versions deleted in %d tables, want %d", len(compacted), n)
	}
	for i := 0; i < n; i++ {
		id, h := d.table(fmt.Sprintf("t%d", i))
		if got := d.int("SELECT count(*) FROM "+h+" WHERE mz_to <= $1", int64(d.since(id))); got != 0 {
			t.Fatalf("t%d is clean at its since but holds %d versions unreadable there", i, got)
		}
	}
	// With no write no since moves, and nothing is checked.
	st := compact(t, a)
	if len(st.Since) != n || len(st.Deleted) != 0 || unreadable() != 0 {
		t.Errorf("idle round: %d sinces, deletions in %d tables, %d tables not clean", len(st.Since), len(st.Deleted), unreadable())
	}
}

// TestHoldFloorKeepsChosenTimestamp: a reader that chooses t from the
// oracle (a read-only transaction's pin) and acquires its holds at t only
// later, after heartbeats raised the floor past t and compaction (1 ms
// retention) ran, is refused t (XX000, below the since: how
// TestLeaseSlowReader once failed in CI), unless it took HoldFloor before
// choosing t: then the since stays at or below the fence, and Acquire(t)
// is granted by its round trip.
func TestHoldFloorKeepsChosenTimestamp(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		t.Run(fmt.Sprintf("fenced=%v", fenced), func(t *testing.T) {
			d := newDB(t)
			a := d.register(Config{})
			b := d.register(Config{})
			d.mustWrite(b.BeginWriteSQL(), "CREATE TABLE t (k text PRIMARY KEY, v text)")
			id, _ := d.table("t")
			d.mustWrite(b.BeginWriteSQL(), "INSERT INTO t VALUES ('a', 'a0')")
			beat(t, a, b)
			var fence uint64
			if fenced {
				var err error
				if fence, err = a.HoldFloor(); err != nil {
					t.Fatal(err)
				}
				defer a.ReleaseFloor(fence)
			}
			// The pin: the oracle's read timestamp, at or above the floor.
			chosen := uint64(d.int(storage.ReadTSSQL))
			if fenced && fence > chosen {
				t.Fatalf("fence %d above the timestamp chosen after it, %d", fence, chosen)
			}
			for i := 0; i < 3; i++ {
				d.mustWrite(b.BeginWriteSQL(), "UPDATE t SET v = v || '+'")
			}
			beat(t, a, b)
			compact(t, b)
			if f := a.Floor(); f <= chosen {
				t.Fatalf("the floor %d did not pass %d: the test shows nothing", f, chosen)
			}
			h, err := a.Acquire(context.Background(), chosen, []int64{id})
			var below *BelowSinceError
			switch {
			case !fenced && !errors.As(err, &below):
				t.Fatalf("without the fence: Acquire(%d) = %v, want it refused below the since %d", chosen, err, d.since(id))
			case fenced && err != nil:
				t.Fatalf("Acquire(%d) with the fence at %d: %v", chosen, fence, err)
			case fenced:
				defer h.Release()
				if s := d.since(id); s > chosen {
					t.Fatalf("since %d passed %d", s, chosen)
				}
			}
		})
	}
}

// BenchmarkHoldFloor: what a read-only transaction's fence costs the
// proxy (HoldFloor at its pin, ReleaseFloor once its timedomain is held).
func BenchmarkHoldFloor(b *testing.B) {
	l := Granted(1)
	b.ReportAllocs()
	for b.Loop() {
		ts, err := l.HoldFloor()
		if err != nil {
			b.Fatal(err)
		}
		l.ReleaseFloor(ts)
	}
}
