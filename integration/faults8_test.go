package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Faults under session 8's surfaces: the per-table read-then-write check,
// whose marks are unlogged sequences (reset by a crash), with two proxies
// writing the same tables; and read-only transactions whose pin rides
// with their first read while DDL recycles the marks' sequences.

// bankLoad is clients running read-then-write transactions on acc through
// proxy URLs: each reads the sum of acc and, when the sum allows it,
// withdraws 10 from a random row, else deposits 10. Run serializably the
// sum never goes below 0; a write skew (two withdrawals that each saw the
// other's 10) takes it there. A client whose connection broke connects
// again.
type bankLoad struct {
	t    *testing.T
	ctx  context.Context
	rows int
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	commits  []int // per client
	net      int64 // what the acknowledged commits added to the sum
	unknown  int   // COMMITs whose outcome the client never learned
	errs     map[string]int
	longest  time.Duration
	negative []string
}

func newBankLoad(t *testing.T, ctx context.Context, rows int) *bankLoad {
	return &bankLoad{t: t, ctx: ctx, rows: rows, stop: make(chan struct{}), errs: map[string]int{}}
}

// start runs one client on each of urls.
func (l *bankLoad) start(urls []string) {
	l.commits = make([]int, len(urls))
	for i, url := range urls {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.client(i, url) }()
	}
}

// committed is how many transactions client i committed so far.
func (l *bankLoad) committed(i int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.commits[i]
}

// finish stops the clients and fails the test on a negative sum or an
// operation that outlived its bound.
func (l *bankLoad) finish() {
	close(l.stop)
	l.wg.Wait()
	l.t.Logf("commits by client %v; failures by SQLSTATE %v; %d outcomes unknown; longest transaction %v",
		l.commits, l.errs, l.unknown, l.longest)
	for _, n := range l.negative {
		l.t.Error(n)
	}
	if l.longest > opLimit {
		l.t.Errorf("a transaction took %v, past statement_timeout", l.longest)
	}
}

func (l *bankLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *bankLoad) client(i int, url string) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for !l.stopped() {
		if conn == nil {
			if conn = (&faultLoad{ctx: l.ctx}).connect(url); conn == nil {
				continue
			}
		}
		if !l.transaction(i, conn) {
			conn.Close(l.ctx)
			conn = nil
		}
	}
}

// transaction runs one read-then-write transaction and reports whether
// the connection is still good.
func (l *bankLoad) transaction(i int, conn *pgx.Conn) bool {
	ctx, cancel := context.WithTimeout(l.ctx, opLimit+15*time.Second)
	defer cancel()
	start := time.Now()
	var delta int64
	committing := false
	err := func() error {
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			return err
		}
		var sum int64
		if err := conn.QueryRow(ctx, "SELECT sum(bal) FROM acc").Scan(&sum); err != nil {
			return err
		}
		if sum < 0 {
			l.mu.Lock()
			l.negative = append(l.negative, fmt.Sprintf("a transaction read the sum %d: a write skew committed", sum))
			l.mu.Unlock()
		}
		delta = 10
		if sum >= 10 {
			delta = -10
		}
		if _, err := conn.Exec(ctx, "UPDATE acc SET bal = bal + $1 WHERE id = $2", delta, 1+rand.IntN(l.rows)); err != nil {
			return err
		}
		committing = true
		_, err := conn.Exec(ctx, "COMMIT")
		return err
	}()
	took := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.longest = max(l.longest, took)
	if err == nil {
		l.commits[i]++
		l.net += delta
		return true
	}
	code := sqlState(err)
	l.errs[code]++
	if committing && (code == "" || strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P")) {
		l.unknown++
	}
	if code == "" || strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P") {
		return false
	}
	_, rerr := conn.Exec(ctx, "ROLLBACK")
	return rerr == nil
}

// checkSum compares the sum of acc, read directly, with what the
// acknowledged commits made of initial (give or take the commits whose
// outcome is unknown), and fails the test if it is negative.
func (l *bankLoad) checkSum(direct *pgx.Conn, initial int64) {
	l.t.Helper()
	var sum int64
	if err := direct.QueryRow(l.ctx, "SELECT sum(bal) FROM acc").Scan(&sum); err != nil {
		l.t.Fatal(err)
	}
	want := initial + l.net
	if sum < 0 || sum < want-10*int64(l.unknown) || sum > want+10*int64(l.unknown) {
		l.t.Errorf("the sum of acc is %d; the acknowledged commits make it %d (%d outcomes unknown)", sum, want, l.unknown)
	}
}

// bankTable creates acc through conn: rows rows, the first holding 10.
func bankTable(t *testing.T, ctx context.Context, conn *pgx.Conn, rows int) {
	t.Helper()
	mustExec(t, ctx, conn, "CREATE TABLE acc (id int PRIMARY KEY, bal int)",
		fmt.Sprintf("INSERT INTO acc SELECT i, CASE WHEN i = 1 THEN 10 ELSE 0 END FROM generate_series(1, %d) i", rows))
}

// TestFault8RestartWriteSkew: the backend restarts immediately (SIGQUIT,
// crash recovery: every unlogged sequence, the tables' marks and the
// count of writes among them, is reset) while read-then-write
// transactions are open and while clients run them. The open ones never
// commit; afterwards a write skew still fails its second COMMIT with
// 40001, a lone read-then-write transaction commits, and the clients'
// sum never went below 0 nor away from what they acknowledged.
func TestFault8RestartWriteSkew(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newDurableCluster(t, ctx)
	p := startProxy(t, append([]string{"--backend", pg.url()}, fastLease...)...)
	url := p.URL("postgres", "postgres")
	setup := connectTo(t, ctx, url)
	mustExec(t, ctx, setup, "CREATE TABLE acc (id int PRIMARY KEY, bal int)", "INSERT INTO acc VALUES (1, 100), (2, 100)")
	for i := range 3 {
		writeSkew(t, ctx, connectTo(t, ctx, url), connectTo(t, ctx, url), fmt.Sprintf("write skew %d before the crash", i))
	}
	// Open across the crash: a read, and a read then a write.
	reader, writer := connectTo(t, ctx, url), connectTo(t, ctx, url)
	var sum int64
	mustExec(t, ctx, reader, "BEGIN")
	mustExec(t, ctx, writer, "BEGIN")
	for _, c := range []*pgx.Conn{reader, writer} {
		if err := c.QueryRow(ctx, "SELECT sum(bal) FROM acc").Scan(&sum); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, ctx, writer, "UPDATE acc SET bal = bal - 1000 WHERE id = 2")
	setup.Close(ctx)

	crash := func() {
		pg.crash(t, ctx)
	}
	crash()
	_, err := reader.Exec(ctx, "UPDATE acc SET bal = bal - 1000 WHERE id = 1")
	if err == nil {
		_, err = reader.Exec(ctx, "COMMIT")
	}
	if err == nil {
		t.Fatal("a read-then-write transaction begun before the crash committed after it")
	}
	if _, err := writer.Exec(ctx, "COMMIT"); err == nil {
		t.Fatal("a write begun before the crash committed after it")
	}
	var conn *pgx.Conn
	eventually(t, time.Minute, "the proxy serves after the crash", func() bool {
		c, err := pgx.Connect(ctx, url)
		if err == nil && c.Ping(ctx) == nil {
			conn = c
			return true
		}
		if c != nil {
			c.Close(ctx)
		}
		return false
	})
	t.Cleanup(func() { conn.Close(context.Background()) })
	if err := conn.QueryRow(ctx, "SELECT sum(bal) FROM acc").Scan(&sum); err != nil || sum != 170 {
		t.Fatalf("the sum after the crash: %d, %v; want 170 (nothing open before it committed)", sum, err)
	}
	// The marks start again from 0, as does the count of writes.
	writeSkew(t, ctx, conn, connectTo(t, ctx, url), "the first write skew after the crash")
	for i := range 3 {
		if err := readThenWrite(ctx, conn); err != nil {
			t.Fatalf("read-then-write transaction %d alone after the crash: %v", i, err)
		}
	}
	writeSkew(t, ctx, conn, connectTo(t, ctx, url), "a write skew after the crash")

	// Clients running the transactions while it crashes again.
	mustExec(t, ctx, conn, "DROP TABLE acc")
	bankTable(t, ctx, conn, 2)
	conn.Close(ctx)
	l := newBankLoad(t, ctx, 2)
	l.start([]string{url, url, url, url})
	time.Sleep(3 * time.Second)
	crash()
	time.Sleep(4 * time.Second)
	before := l.committed(0) + l.committed(1) + l.committed(2) + l.committed(3)
	time.Sleep(3 * time.Second)
	l.finish()
	if after := l.committed(0) + l.committed(1) + l.committed(2) + l.committed(3); after == before {
		t.Errorf("no read-then-write transaction committed after the second crash")
	}
	l.checkSum(connectTo(t, ctx, pg.url()), 10)
	noHoldsOn(t, ctx, connectTo(t, ctx, pg.url()), "acc")
}

// TestFault8ProxyKillReadWrite: two proxies run read-then-write
// transactions on the same table; one is killed with SIGKILL mid-load.
// The other's clients go on committing, no write skew commits on either,
// the sum is what the acknowledged commits made it, and no read hold is
// left.
func TestFault8ProxyKillReadWrite(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	a, b := startProxy(t, fastLease...), startProxy(t, fastLease...)
	bankTable(t, ctx, connectTo(t, ctx, b.URL("postgres", d.name)), 3)
	urlA, urlB := a.URL("postgres", d.name), b.URL("postgres", d.name)
	l := newBankLoad(t, ctx, 3)
	l.start([]string{urlA, urlA, urlA, urlB, urlB, urlB})
	time.Sleep(3 * time.Second)
	incA := d.incarnation(a)
	a.signal(syscall.SIGKILL)
	d.eventually(20*time.Second, "the killed proxy's holds lapsed", func() bool {
		return d.int("SELECT count(*) FROM mz_internal.mz_read_holds WHERE incarnation = $1", incA) == 0
	})
	onB := func() int { return l.committed(3) + l.committed(4) + l.committed(5) }
	afterKill := onB()
	time.Sleep(3 * time.Second)
	l.finish()
	if onB() == afterKill {
		t.Errorf("no read-then-write transaction through the surviving proxy after the kill")
	}
	l.checkSum(d.direct, 10)
	noHoldsOn(t, ctx, d.direct, "acc")
}

// TestFault8ReadBurstDDL: 50 clients run read-only transactions (each
// pinned with its first read) and prepared AS OF reads while a writer
// inserts and another session creates and drops tables (each CREATE
// takes the marks a DROP left, renaming two sequences). Every answer is
// the history's at its timestamp, no operation outlives its bound, no
// read hold is left, and every live managed table has its two marks.
func TestFault8ReadBurstDDL(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, fastLease...)
	url := p.URL("postgres", db)
	direct := connectTo(t, ctx, directURL("postgres", db))
	setup := connectTo(t, ctx, url)
	asOf, want, history := setupFaultTable(t, ctx, setup, direct, 30)
	setup.Close(ctx)

	var ddls atomic.Int64
	ddlDone := make(chan struct{})
	stopDDL := make(chan struct{})
	go func() {
		defer close(ddlDone)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("the DDL session: %v", err)
			return
		}
		defer conn.Close(context.Background())
		for i := 0; ; i++ {
			select {
			case <-stopDDL:
				return
			default:
			}
			name := fmt.Sprintf("churn%d", i%4)
			if _, err := conn.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s; CREATE TABLE %s (k int PRIMARY KEY)", name, name),
				pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Errorf("DDL %d: %v", i, err)
				return
			}
			ddls.Add(1)
		}
	}()
	urls := make([]string, 50)
	for i := range urls {
		urls[i] = url
	}
	l := newFaultLoad(t, ctx, asOf, want)
	l.start(urls, url, 31)
	time.Sleep(8 * time.Second)
	close(stopDDL)
	<-ddlDone
	l.finish()
	t.Logf("%d DDL statements meanwhile", ddls.Load())
	if ddls.Load() == 0 {
		t.Error("no DDL ran during the reads")
	}
	l.checkHistory(direct, history)
	noHoldsOn(t, ctx, direct, "t")
	var missing string
	if err := direct.QueryRow(ctx, `SELECT coalesce(string_agg(k.name, ', '), '') FROM mzproxy.catalog k
		WHERE k.kind = 'table' AND k.dropped_ts IS NULL AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = k.oid)
		  AND (to_regclass('mzproxy.w' || k.oid) IS NULL OR to_regclass('mzproxy.c' || k.oid) IS NULL)`).Scan(&missing); err != nil {
		t.Fatal(err)
	}
	if missing != "" {
		t.Errorf("managed tables without their marks after the DDL: %s", missing)
	}
}

// TestFault8IdleWatch: a read-only transaction with read holds idles for
// spans around the 50 ms after which the proxy watches its backend (its
// next statement arriving just before, at or after the watch starts):
// every read answers the transaction's snapshot. Then the backend ends
// such a transaction while its client idles (idle_in_transaction_session_timeout,
// pg_terminate_backend): the holds are released while the client still
// idles, and its next statement gets an error with a SQLSTATE at once.
func TestFault8IdleWatch(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	// The holds of a read at a pinned timestamp are granted in memory:
	// the proxy's metric counts them.
	p := startProxy(t, leaseArgs("--metrics-listen", "127.0.0.1:0")...)
	url := p.URL("postgres", db)
	direct := connectTo(t, ctx, directURL("postgres", db))
	conn, writer := connectTo(t, ctx, url), connectTo(t, ctx, url)
	setupFaultTable(t, ctx, conn, direct, 10)
	read := func(what string) int64 {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return n
	}
	for i := range 30 {
		pause := time.Duration(i%10) * 12 * time.Millisecond // 0 to 108 ms
		mustExec(t, ctx, conn, "BEGIN READ ONLY")
		first := read("the first read")
		mustExec(t, ctx, writer, fmt.Sprintf("INSERT INTO t VALUES (%d)", 100+i))
		time.Sleep(pause)
		if again := read(fmt.Sprintf("a read after %v idle", pause)); again != first {
			t.Fatalf("after %v idle the transaction read %d rows, then %d", pause, first, again)
		}
		time.Sleep(pause)
		mustExec(t, ctx, conn, "COMMIT")
	}
	p.awaitHolds(t, 0, "after the transactions")

	// Over the simple protocol, once its pins agree, the event loop
	// serves the transaction and idles with it (proxy/loop_txn.go): when
	// the backend speaks, the loop gives the session back, which then
	// watches its backend as after a statement of its own.
	for _, end := range []string{"timeout", "terminate", "simple timeout", "simple terminate"} {
		victimURL := url
		if strings.HasPrefix(end, "simple") {
			victimURL += "&default_query_exec_mode=simple_protocol"
		}
		victim := connectTo(t, ctx, victimURL)
		var pid int
		if err := victim.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(end, "timeout") {
			mustExec(t, ctx, victim, "SET idle_in_transaction_session_timeout = '500ms'")
		}
		// Enough for the pins to agree and for the connection's back-off
		// from the loop (frontend/loop.go) to end; a plain BEGIN tells
		// the proxy the session's defaults.
		for range 10 {
			mustExec(t, ctx, victim, "BEGIN")
			mustExec(t, ctx, victim, "SELECT count(*) FROM t")
			mustExec(t, ctx, victim, "COMMIT")
		}
		mustExec(t, ctx, victim, "BEGIN READ ONLY")
		var n int64
		if err := victim.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if p.readHolds(t) == 0 {
			t.Fatalf("%s: the open read-only transaction holds nothing on t", end)
		}
		if strings.HasSuffix(end, "terminate") {
			mustExec(t, ctx, direct, fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid))
		}
		// The client idles on: the proxy alone notices.
		p.awaitHolds(t, 0, end+": after the backend ended the idle transaction")
		qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := victim.Exec(qctx, "SELECT count(*) FROM t")
		hung := qctx.Err() != nil
		cancel()
		if err == nil || hung || sqlState(err) == "" {
			t.Fatalf("%s: the next statement of the ended transaction: %v (a timeout is a hang)", end, err)
		}
		t.Logf("%s: the next statement: %v", end, err)
	}
	p.mustAlive(t, ctx)
}
