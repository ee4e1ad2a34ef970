package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Leases, compaction, retention and fencing across proxy processes on one
// backend (the tests' shared PostgreSQL, external to every proxy).

// fastLease makes heartbeats and compaction frequent, so the tests wait
// seconds, not minutes; the grace stays well above a heartbeat on a busy
// machine.
var fastLease = []string{"--heartbeat-interval", "200ms", "--lease-grace", "3s", "--compaction-interval", "100ms"}

// leaseArgs is fastLease with more flags.
func leaseArgs(more ...string) []string { return append(slices.Clone(fastLease), more...) }

// leaseDB is a test database with helpers reading mzproxy's state directly
// from PostgreSQL.
type leaseDB struct {
	t      *testing.T
	ctx    context.Context
	name   string
	direct *pgx.Conn
}

func newLeaseDB(t *testing.T, ctx context.Context) *leaseDB {
	name := freshDatabase(t, ctx)
	return &leaseDB{t: t, ctx: ctx, name: name, direct: connectTo(t, ctx, directURL("postgres", name))}
}

func (d *leaseDB) int(sql string, args ...any) int64 {
	d.t.Helper()
	var n *int64
	if err := d.direct.QueryRow(d.ctx, sql, args...).Scan(&n); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	if n == nil {
		return -1
	}
	return *n
}

// since is table name's read frontier, as mz_internal.mz_frontiers shows it.
func (d *leaseDB) since(name string) uint64 {
	d.t.Helper()
	return uint64(d.int("SELECT read_frontier FROM mz_internal.mz_frontiers WHERE name = $1 AND dropped_ts IS NULL", name))
}

// incarnation is the live incarnation of process p in the database.
func (d *leaseDB) incarnation(p *proxyProc) int64 {
	d.t.Helper()
	var id int64
	d.eventually(5*time.Second, "a live incarnation of the proxy", func() bool {
		id = d.int("SELECT max(id) FROM mz_internal.mz_incarnations WHERE pid = $1 AND status = 'live'", p.cmd.Process.Pid)
		return id > 0
	})
	return id
}

// holds is incarnation inc's published holds on table name.
func (d *leaseDB) holds(inc int64, name string) []uint64 {
	d.t.Helper()
	rows, err := d.direct.Query(d.ctx, "SELECT ts FROM mz_internal.mz_read_holds WHERE incarnation = $1 AND name = $2 AND kind = 'hold' ORDER BY ts", inc, name)
	if err != nil {
		d.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (uint64, error) {
		var ts int64
		err := r.Scan(&ts)
		return uint64(ts), err
	})
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

// eventually polls cond until it holds or d passes.
func (d *leaseDB) eventually(limit time.Duration, what string, cond func() bool) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			d.t.Fatalf("after %v: still not %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kv reads "k:v" pairs of a two-int-column query, in order.
func kv(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string) []string {
	t.Helper()
	rows, err := conn.Query(ctx, sql, simple(conn))
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var k, v int
		err := r.Scan(&k, &v)
		return fmt.Sprintf("%d:%d", k, v), err
	})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// updateRounds changes every row of table kv n times through conn and
// returns the oracle read timestamp and contents after each change.
func updateRounds(t *testing.T, ctx context.Context, conn *pgx.Conn, n int) (tss []uint64, contents [][]string) {
	t.Helper()
	for i := 0; i < n; i++ {
		mustExec(t, ctx, conn, "UPDATE kv SET v = v + 1")
		tss = append(tss, readTS(t, ctx, conn))
		contents = append(contents, kv(t, ctx, conn, "SELECT k, v FROM kv ORDER BY k"))
	}
	return tss, contents
}

func createKV(t *testing.T, ctx context.Context, conn *pgx.Conn, with string) {
	t.Helper()
	mustExec(t, ctx, conn, "CREATE TABLE kv (k int PRIMARY KEY, v int)"+with,
		"INSERT INTO kv SELECT g, 0 FROM generate_series(1, 5) g")
}

// heldCursor is a cursor reading at a timestamp the proxy chooses and
// holds until the transaction ends (mz_now() puts its DECLARE on the
// explicit-timestamp path).
const heldCursor = "DECLARE c CURSOR FOR SELECT k, v FROM kv WHERE mz_now() > 0 ORDER BY k"

// declareHeld begins a transaction on conn declaring heldCursor and
// returns the timestamp it holds, once incarnation inc published it.
func declareHeld(t *testing.T, ctx context.Context, d *leaseDB, conn *pgx.Conn, inc int64) uint64 {
	t.Helper()
	mustExec(t, ctx, conn, "BEGIN", heldCursor)
	var held []uint64
	d.eventually(10*time.Second, "the cursor's hold published", func() bool {
		held = d.holds(inc, "kv")
		return len(held) == 1
	})
	return held[0]
}

// heldByA is the scene of the tests of a proxy's read hold against the
// other proxy's compaction: proxy A (not compacting) holds a read at held
// in cursor c of reader r's transaction (incarnation incA), after proxy B
// (retention 1 ms, compacting) wrote rounds updates of kv through wb, whose
// contents after each round are contents.
type heldByA struct {
	d        *leaseDB
	a        *proxyProc
	wb, r    *pgx.Conn
	incA     int64
	held     uint64
	contents [][]string
}

func holdOnA(t *testing.T, ctx context.Context, rounds int) heldByA {
	t.Helper()
	f := heldByA{d: newLeaseDB(t, ctx)}
	f.a = startProxy(t, leaseArgs("--compaction-interval", "0")...)
	b := startProxy(t, leaseArgs("--retain-history", "1ms")...)
	f.wb = connectTo(t, ctx, b.URL("postgres", f.d.name))
	createKV(t, ctx, f.wb, "")
	_, f.contents = updateRounds(t, ctx, f.wb, rounds)
	f.r = connectTo(t, ctx, f.a.URL("postgres", f.d.name))
	f.incA = f.d.incarnation(f.a)
	f.held = declareHeld(t, ctx, f.d, f.r, f.incA)
	return f
}

// TestLeaseSlowReader: a reader on proxy A holding timestamp t in a slowly
// fetched cursor keeps proxy B's compaction at or below t, reads exactly
// t's contents, shows its hold in mz_read_holds; once it ends, the hold
// goes and the since advances past t.
func TestLeaseSlowReader(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := holdOnA(t, ctx, 3)
	d, wb, r, incA, held := f.d, f.wb, f.r, f.incA, f.held
	want := f.contents[2]
	got := kv(t, ctx, r, "FETCH 2 FROM c")

	// B writes on and compacts; A heartbeats.
	updateRounds(t, ctx, wb, 5)
	time.Sleep(time.Second) // several compaction rounds
	if s := d.since("kv"); s > held {
		t.Fatalf("since %d passed the hold at %d", s, held)
	}
	got = append(got, kv(t, ctx, r, "FETCH ALL FROM c")...)
	if !slices.Equal(got, want) {
		t.Fatalf("cursor AS OF %d read %v, want %v", held, got, want)
	}
	// Another read at the held time in the same transaction is exact too.
	if again := kv(t, ctx, r, fmt.Sprintf("SELECT k, v FROM kv ORDER BY k AS OF %d", held)); !slices.Equal(again, want) {
		t.Fatalf("AS OF %d again: %v, want %v", held, again, want)
	}
	mustExec(t, ctx, r, "COMMIT")
	d.eventually(10*time.Second, "the since past the released hold", func() bool { return d.since("kv") > held })
	if h := d.holds(incA, "kv"); len(h) != 0 {
		t.Errorf("holds still published after the reader ended: %v", h)
	}
	if n := d.int("SELECT total_compacted_rows FROM mz_internal.mz_compactions WHERE name = 'kv'"); n <= 0 {
		t.Errorf("nothing compacted: %d", n)
	}
}

// TestTxnTimedomainHeldLate: a read-only transaction is pinned at t by
// its first statement, and holds its timedomain at t at its first read
// that names a managed table, which may come much later: after proxy A's
// heartbeats raised its floor past t and proxy B compacted (retention
// 1 ms). That read still reads kv at t, its history too; before, its hold
// was refused with XX000 "Timestamp (t) is not valid for all inputs" (the
// race that failed TestLeaseSlowReader once in CI, there in the short
// window between a pin and its hold): the pin now holds A's floor until
// the timedomain is held.
func TestTxnTimedomainHeldLate(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	a := startProxy(t, leaseArgs("--compaction-interval", "0")...)
	b := startProxy(t, leaseArgs("--retain-history", "1ms")...)
	wb := connectTo(t, ctx, b.URL("postgres", d.name))
	createKV(t, ctx, wb, "")
	_, contents := updateRounds(t, ctx, wb, 2)
	r := connectTo(t, ctx, a.URL("postgres", d.name))
	mustExec(t, ctx, r, "BEGIN")
	var pinned int64
	if err := r.QueryRow(ctx, "SELECT mz_now()", simple(r)).Scan(&pinned); err != nil {
		t.Fatal(err)
	}
	// B writes on and compacts every 100 ms; A heartbeats every 200 ms,
	// each raising its floor to the read_ts the one before saw.
	updateRounds(t, ctx, wb, 5)
	time.Sleep(1500 * time.Millisecond)
	want := contents[1]
	if got := kv(t, ctx, r, "SELECT k, v FROM kv ORDER BY k"); !slices.Equal(got, want) {
		t.Fatalf("read at %d: %v, want %v", pinned, got, want)
	}
	if got := kv(t, ctx, r, fmt.Sprintf("SELECT k, v FROM kv ORDER BY k AS OF %d", pinned)); !slices.Equal(got, want) {
		t.Fatalf("AS OF %d: %v, want %v", pinned, got, want)
	}
	if s := d.since("kv"); s > uint64(pinned) {
		t.Fatalf("since %d passed the transaction's timestamp %d", s, pinned)
	}
	mustExec(t, ctx, r, "COMMIT")
	// Nothing outlives the transaction: the since moves on.
	d.eventually(10*time.Second, "the since past the transaction's timestamp", func() bool { return d.since("kv") > uint64(pinned) })
}

// TestLeaseHoldIntrospection: a long read shows its hold in
// mz_internal.mz_read_holds (through any proxy) while it runs; the hold
// disappears when the read ends, fails, is canceled, or its client
// disconnects.
func TestLeaseHoldIntrospection(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	a := startProxy(t, fastLease...)
	b := startProxy(t, fastLease...)
	w := connectTo(t, ctx, a.URL("postgres", d.name))
	createKV(t, ctx, w, " WITH (RETAIN HISTORY FOR '1h')")
	tss, _ := updateRounds(t, ctx, w, 2)
	at := tss[0]
	inc := d.incarnation(a)
	// Read through proxy B: introspection is plain SQL on any proxy.
	observer := connectTo(t, ctx, b.URL("postgres", d.name))
	// holdShown: a hold by A on kv is shown, at ts unless ts is 0.
	holdShown := func(ts uint64) bool {
		var n int64
		err := observer.QueryRow(ctx, "SELECT count(*) FROM mz_internal.mz_read_holds WHERE incarnation = $1 AND name = 'kv' AND kind = 'hold' AND (ts = $2 OR $2 = 0)", inc, int64(ts)).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	slowRead := "SELECT k, v FROM kv, pg_sleep(%s) WHERE %s ORDER BY k AS OF " + fmt.Sprint(at)

	cases := []struct {
		name string
		ts   uint64                     // the hold's (0: the transaction's, chosen by the proxy)
		run  func(conn *pgx.Conn) error // runs the long read and ends it
	}{
		{"ends", at, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, fmt.Sprintf(slowRead, "1.5", "true"), simple(conn))
			return err
		}},
		{"fails", at, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, fmt.Sprintf(slowRead, "1.5", "1 / (k - k) = 0"), simple(conn))
			if err == nil {
				return errors.New("division by zero did not fail")
			}
			return nil
		}},
		{"canceled", at, func(conn *pgx.Conn) error {
			cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			_, err := conn.Exec(cctx, fmt.Sprintf(slowRead, "60", "true"), simple(conn))
			if err == nil {
				return errors.New("the read was not canceled")
			}
			return nil
		}},
		{"disconnects", 0, func(conn *pgx.Conn) error {
			// A transaction holding its timestamp for a cursor, then the
			// client goes away without ending it.
			mustExec(t, ctx, conn, "BEGIN", heldCursor)
			time.Sleep(1500 * time.Millisecond)
			return conn.PgConn().Conn().Close()
		}},
	}
	for _, c := range cases {
		conn, err := pgx.Connect(ctx, a.URL("postgres", d.name))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.run(conn) }()
		d.eventually(10*time.Second, c.name+": the hold shown", func() bool { return holdShown(c.ts) })
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		d.eventually(10*time.Second, c.name+": the hold gone", func() bool { return !holdShown(0) })
		conn.Close(ctx)
	}
}

// TestLeaseKill9: proxy A killed (-9) while it holds a read stops holding
// back compaction once its grace has passed: B retires it and advances
// the since past A's hold.
func TestLeaseKill9(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := holdOnA(t, ctx, 2)
	d, a, wb, incA, held := f.d, f.a, f.wb, f.incA, f.held

	a.signal(syscall.SIGKILL)
	killed := time.Now()
	updateRounds(t, ctx, wb, 3)
	if s := d.since("kv"); s > held {
		t.Fatalf("since %d passed A's hold at %d right after the kill", s, held)
	}
	d.eventually(15*time.Second, "the since past the dead proxy's hold", func() bool { return d.since("kv") > held })
	if waited := time.Since(killed); waited < 2*time.Second {
		t.Errorf("A's hold stopped counting %v after the kill, before its grace (3s)", waited)
	}
	if st := d.int("SELECT count(*) FROM mz_internal.mz_incarnations WHERE id = $1 AND status = 'lease expired'", incA); st != 1 {
		t.Errorf("A's incarnation not shown as 'lease expired'")
	}
}

// TestLeaseSIGSTOP: a proxy paused past its grace is retired; when it
// wakes, its transaction holding a read fails with the lost-lease error
// (no stale or compacted read), and its next session registers again and
// serves.
func TestLeaseSIGSTOP(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	f := holdOnA(t, ctx, 2)
	d, a, wb, r, incA, held := f.d, f.a, f.wb, f.r, f.incA, f.held
	kv(t, ctx, r, "FETCH 1 FROM c")

	a.signal(syscall.SIGSTOP)
	updateRounds(t, ctx, wb, 3)
	d.eventually(20*time.Second, "the since past the paused proxy's hold", func() bool { return d.since("kv") > held })
	a.signal(syscall.SIGCONT)

	_, err := r.Exec(ctx, "FETCH ALL FROM c", simple(r))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "XX000" || !strings.Contains(pe.Message, fmt.Sprintf("mzproxy incarnation %d", incA)) {
		t.Fatalf("FETCH after the lease was lost: %v, want the incarnation's lost-lease error", err)
	}
	t.Logf("after waking: %s", pe.Message)
	mustExec(t, ctx, r, "ROLLBACK")
	// Registered again: reads and writes through A work, as a new
	// incarnation.
	mustExec(t, ctx, r, "UPDATE kv SET v = v + 100")
	if got := kv(t, ctx, r, "SELECT k, v FROM kv WHERE k = 1"); len(got) != 1 || got[0] != "1:105" {
		t.Fatalf("read through the re-registered proxy: %v", got)
	}
	if _, err := r.Exec(ctx, fmt.Sprintf("SELECT * FROM kv AS OF %d", held), simple(r)); err == nil || !strings.Contains(err.Error(), "is not valid for all inputs") {
		t.Fatalf("AS OF the compacted time after re-registering: %v", err)
	}
	if inc := d.incarnation(a); inc == incA {
		t.Fatalf("still incarnation %d", inc)
	}
}

// TestLeaseRetention: AS OF inside the retention window works and outside
// it fails with the since error; RETAIN HISTORY on CREATE TABLE, ALTER
// TABLE ... SET and RESET change the window.
func TestLeaseRetention(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	p := startProxy(t, leaseArgs("--retain-history", "1ms")...)
	conn := connectTo(t, ctx, p.URL("postgres", d.name))
	createKV(t, ctx, conn, " WITH (RETAIN HISTORY FOR '1h')")
	if ms := d.int("SELECT retain_ms FROM mz_internal.mz_frontiers WHERE name = 'kv'"); ms != 3600000 {
		t.Fatalf("retain_ms after CREATE TABLE ... RETAIN HISTORY FOR '1h': %d", ms)
	}
	tss, contents := updateRounds(t, ctx, conn, 3)
	time.Sleep(1500 * time.Millisecond) // heartbeats and compaction rounds
	if got := kv(t, ctx, conn, fmt.Sprintf("SELECT k, v FROM kv ORDER BY k AS OF %d", tss[0])); !slices.Equal(got, contents[0]) {
		t.Fatalf("AS OF %d inside a 1h window: %v, want %v", tss[0], got, contents[0])
	}

	tag, err := conn.Exec(ctx, "ALTER TABLE kv SET (RETAIN HISTORY FOR '100ms')", simple(conn))
	if err != nil || tag.String() != "ALTER TABLE" {
		t.Fatalf("ALTER TABLE SET (RETAIN HISTORY): %q %v", tag, err)
	}
	if ms := d.int("SELECT retain_ms FROM mz_internal.mz_frontiers WHERE name = 'kv'"); ms != 100 {
		t.Fatalf("retain_ms after SET: %d", ms)
	}
	updateRounds(t, ctx, conn, 2)
	d.eventually(10*time.Second, "the since past the old time", func() bool { return d.since("kv") > tss[2] })
	_, err = conn.Exec(ctx, fmt.Sprintf("SELECT k, v FROM kv AS OF %d", tss[0]), simple(conn))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "XX000" || !strings.HasPrefix(pe.Message, fmt.Sprintf("Timestamp (%d) is not valid for all inputs", tss[0])) {
		t.Fatalf("AS OF outside the window: %v", err)
	}
	// Inside the window: the newest time.
	now := readTS(t, ctx, conn)
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT k, v FROM kv AS OF %d", now), simple(conn)); err != nil {
		t.Fatalf("AS OF %d, the oracle's read timestamp: %v", now, err)
	}

	// In a transaction block, and RESET back to the default.
	mustExec(t, ctx, conn, "BEGIN", "ALTER TABLE kv RESET (RETAIN HISTORY)", "COMMIT")
	if ms := d.int("SELECT retain_ms FROM mz_internal.mz_frontiers WHERE name = 'kv'"); ms != 1 {
		t.Fatalf("retain_ms after RESET: %d, want the default 1", ms)
	}
	// A failed DDL with RETAIN HISTORY changes nothing and reports its own
	// error only.
	_, err = conn.Exec(ctx, "CREATE TABLE kv (x int) WITH (RETAIN HISTORY FOR '1h')", simple(conn))
	if !errors.As(err, &pe) || pe.Code != "42P07" {
		t.Fatalf("CREATE TABLE of an existing name: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1", simple(conn)); err != nil {
		t.Fatalf("session after the failed DDL: %v", err)
	}
}

// TestLeaseGenerationFence: starting a proxy of generation 2 fences
// generation 1's writes: a write transaction open during the fence
// commits fully before it (the fence waits for it), later writes through
// generation 1 fail with "fenced by new generation" and write nothing;
// reads through generation 1 still drain.
func TestLeaseGenerationFence(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	// Both proxies' backend URL names the test's database, where each
	// registers at start: generations are per database, and a generation
	// 2 registered in the shared database would fence every other test's
	// proxies.
	backend := directURL("postgres", d.name)
	// Generation 1 heartbeats too rarely to notice the fence itself
	// during the test: its sessions' refused writes must tell it (its
	// autocommit INSERT and UPDATE below are refused in the session's own
	// optimistic loop).
	old := startProxy(t, leaseArgs("--generation", "1", "--backend", backend, "--heartbeat-interval", "1m", "--lease-grace", "3m")...)
	w := connectTo(t, ctx, old.URL("postgres", d.name))
	createKV(t, ctx, w, "")
	// Two writes in flight. A transaction with DDL holds the commit slot
	// (pessimistic): the fence waits for it, and it commits fully before
	// the fence. An optimistic one holds no lock: its COMMIT comes after
	// the fence and appends nothing.
	mustExec(t, ctx, w, "BEGIN", "CREATE TABLE kv2 (k int)", "INSERT INTO kv2 VALUES (1)")
	w2 := connectTo(t, ctx, old.URL("postgres", d.name))
	mustExec(t, ctx, w2, "BEGIN", "INSERT INTO kv VALUES (100, 100)")

	// Generation 2 registers at start; the fence waits for the open
	// pessimistic write's commit, and so does its first session.
	next := startProxy(t, leaseArgs("--generation", "2", "--backend", backend)...)
	registered := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(ctx, next.URL("postgres", d.name))
		if err == nil {
			conn.Close(ctx)
		}
		registered <- err
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-registered:
		t.Fatalf("generation 2 registered while generation 1's pessimistic write was open: %v", err)
	default:
	}
	mustExec(t, ctx, w, "INSERT INTO kv2 VALUES (2)", "COMMIT")
	if err := <-registered; err != nil {
		t.Fatalf("generation 2's first session: %v", err)
	}
	if n := d.int("SELECT count(*) FROM kv2"); n != 2 {
		t.Fatalf("the pessimistic write in flight during the fence: %d of 2 rows", n)
	}
	// The rest of the optimistic transaction fails: refused by the proxy
	// (its lease is fenced), or at COMMIT as a conflict (the fence moved
	// the upper's row: 40001) or as fenced. Either way nothing is written.
	for _, sql := range []string{"INSERT INTO kv VALUES (101, 101)", "COMMIT"} {
		_, err := w2.Exec(ctx, sql, simple(w2))
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "40001" || strings.Contains(pe.Message, "fenced by new generation 2")) {
			break
		}
		if err != nil || sql == "COMMIT" {
			t.Fatalf("%s in the optimistic write in flight after the fence: %v", sql, err)
		}
	}
	_, _ = w2.Exec(ctx, "ROLLBACK", simple(w2))
	if n := d.int("SELECT count(*) FROM kv WHERE k >= 100"); n != 0 {
		t.Fatalf("the optimistic write in flight wrote %d rows after the fence", n)
	}

	before := d.int("SELECT count(*) FROM kv")
	refused := func(sql string) {
		t.Helper()
		_, err := w.Exec(ctx, sql, simple(w))
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "XX000" || !strings.Contains(pe.Message, "fenced by new generation 2") {
			t.Fatalf("%s through generation 1 after the fence: %v", sql, err)
		}
	}
	newSessionRefused := func() {
		t.Helper()
		if conn, err := pgx.Connect(ctx, old.URL("postgres", d.name)); err == nil {
			conn.Close(ctx)
			t.Fatalf("generation 1 accepted a new session after the fence")
		} else if !strings.Contains(err.Error(), "fenced by new generation 2") {
			t.Fatalf("new session on generation 1: %v", err)
		}
	}
	refused("INSERT INTO kv VALUES (200, 0), (201, 0)")
	refused("UPDATE kv SET v = -1")
	// The writes' refusal alone told generation 1 it is fenced.
	newSessionRefused()
	refused("UPDATE kv SET v = -1 RETURNING k")
	if n := d.int("SELECT count(*) FROM kv"); n != before {
		t.Fatalf("fenced writes wrote: %d rows, had %d", n, before)
	}
	if n := d.int("SELECT count(*) FROM kv WHERE v = -1"); n != 0 {
		t.Fatalf("fenced UPDATE wrote %d rows", n)
	}
	// Reads of the present through the fenced proxy still drain.
	if got := kv(t, ctx, w, "SELECT k, v FROM kv WHERE k = 1"); len(got) != 1 {
		t.Fatalf("read through the fenced proxy: %v", got)
	}
	// Generation 2 writes.
	mustExec(t, ctx, connectTo(t, ctx, next.URL("postgres", d.name)), "INSERT INTO kv VALUES (300, 300)")
	newSessionRefused()
}

// TestLeaseStorageBounded: under a steady update load with the default
// retention, the history of a table stops growing (compaction keeps pace).
func TestLeaseStorageBounded(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	p := startProxy(t, fastLease...)
	conn := connectTo(t, ctx, p.URL("postgres", d.name))
	createKV(t, ctx, conn, "")
	history := d.historyTable("kv")
	var samples []int64
	start := time.Now()
	for i := 0; time.Since(start) < 12*time.Second; i++ {
		mustExec(t, ctx, conn, "UPDATE kv SET v = v + 1")
		if i%50 == 0 {
			samples = append(samples, d.int("SELECT count(*) FROM "+history))
		}
	}
	updates := d.int("SELECT max(v) FROM kv")
	t.Logf("%d updates of 5 rows in 12s; history rows sampled: %v", updates, samples)
	if updates < 100 {
		t.Fatalf("only %d updates", updates)
	}
	// Every update adds 5 versions; with 1s retention and 200ms
	// heartbeats only the last couple of seconds' versions stay.
	last := samples[len(samples)-1]
	if last >= 5*updates/2 {
		t.Fatalf("history holds %d versions after %d updates: not compacted", last, updates)
	}
	// Compaction runs in rounds, so the count saws; its peaks must not
	// climb.
	first, second := samples[:len(samples)/2], samples[len(samples)/2:]
	if slices.Max(second) > 2*slices.Max(first)+100 {
		t.Errorf("history still growing: peak %d in the first half, %d in the second", slices.Max(first), slices.Max(second))
	}
}

// historyTable is the history relation of managed table name (qualified
// and quoted).
func (d *leaseDB) historyTable(name string) string {
	d.t.Helper()
	var h string
	if err := d.direct.QueryRow(d.ctx, "SELECT history FROM mzproxy.catalog WHERE name = $1 AND dropped_ts IS NULL", name).Scan(&h); err != nil {
		d.t.Fatal(err)
	}
	return h
}

// TestLeaseBankRestart: transfers between accounts through two proxies
// while one is killed (-9) and a new process takes its place: the total is
// conserved, every acknowledged transfer is in the ledger written in its
// transaction, and the balances are exactly what the ledger says.
func TestLeaseBankRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	a, b := startProxy(t, fastLease...), startProxy(t, fastLease...)
	setup := connectTo(t, ctx, b.URL("postgres", d.name))
	const accounts, initial = 8, 1000
	mustExec(t, ctx, setup,
		"CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL)",
		fmt.Sprintf("INSERT INTO acct SELECT g, %d FROM generate_series(0, %d) g", initial, accounts-1),
		"CREATE TABLE ledger (id text PRIMARY KEY, src int, dst int, amount int)")

	var mu sync.Mutex
	urls := map[string]string{"a": a.URL("postgres", d.name), "b": b.URL("postgres", d.name)}
	url := func(name string) string { mu.Lock(); defer mu.Unlock(); return urls[name] }
	var acked []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		name := []string{"a", "b"}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var conn *pgx.Conn
			defer func() {
				if conn != nil {
					conn.Close(context.Background())
				}
			}()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if conn == nil {
					c, err := pgx.Connect(ctx, url(name))
					if err != nil {
						time.Sleep(20 * time.Millisecond) // the proxy is being replaced
						continue
					}
					conn = c
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				from, to, amount := (w+i)%accounts, (w+3*i+1)%accounts, 1+i%7
				if from == to {
					to = (to + 1) % accounts
				}
				_, err := execSimple(ctx, conn, fmt.Sprintf("BEGIN; UPDATE acct SET balance = balance - %d WHERE id = %d; "+
					"UPDATE acct SET balance = balance + %d WHERE id = %d; INSERT INTO ledger VALUES ('%s', %d, %d, %d); COMMIT",
					amount, from, amount, to, id, from, to, amount))
				switch {
				case err == nil:
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
				case conn.IsClosed() || errors.Is(err, context.Canceled) || !isPgError(err):
					// Killed mid-transfer: the outcome is unknown; the
					// ledger says.
					conn.Close(context.Background())
					conn = nil
				case retryable(err):
				default:
					var pe *pgconn.PgError
					if errors.As(err, &pe) && pe.Severity == "FATAL" {
						conn.Close(context.Background())
						conn = nil
						continue
					}
					t.Errorf("transfer %s: %v", id, err)
					return
				}
			}
		}()
	}
	time.Sleep(time.Second)
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	a2 := startProxy(t, fastLease...)
	mu.Lock()
	urls["a"] = a2.URL("postgres", d.name)
	mu.Unlock()
	// Transfers go on for 2 s after the restart, longer while fewer than
	// 40 are acknowledged (a loaded machine), up to 30 s.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(2 * time.Second)
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 40 {
			break
		}
	}
	close(stop)
	wg.Wait()

	if n := d.int("SELECT sum(balance) FROM acct"); n != accounts*initial {
		t.Fatalf("total %d, want %d", n, accounts*initial)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 20 {
		t.Fatalf("only %d transfers acknowledged", len(acked))
	}
	lost := d.int("SELECT count(*) FROM unnest($1::text[]) a(id) WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.id = a.id)", acked)
	if lost != 0 {
		t.Fatalf("%d acknowledged transfers are not in the ledger", lost)
	}
	if n := d.int(`SELECT count(*) FROM acct a WHERE a.balance <> $1
		+ coalesce((SELECT sum(amount) FROM ledger WHERE dst = a.id), 0)
		- coalesce((SELECT sum(amount) FROM ledger WHERE src = a.id), 0)`, initial); n != 0 {
		t.Fatalf("%d balances differ from the ledger", n)
	}
	t.Logf("%d transfers acknowledged, %d in the ledger", len(acked), d.int("SELECT count(*) FROM ledger"))
}

// isPgError reports whether err is an error the server sent (not a broken
// connection).
func isPgError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}
