package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Faults under session 7's read paths: the lock-free pin of read-only
// transactions, prepared AS OF reads sharing snapshot rounds, and read
// holds granted in memory below an incarnation's floor.

// faultLoad is clients reading table t (k bigint PRIMARY KEY, RETAIN
// HISTORY) through proxy URLs while a writer inserts k = 1, 2, ...: each
// reader alternates a read-only transaction and a prepared read AS OF
// asOf. Every operation runs under statement_timeout and a deadline past
// it; a client whose connection broke connects again.
type faultLoad struct {
	t       *testing.T
	ctx     context.Context
	asOf    int64
	asOfSum string // count and sum of t AS OF asOf
	acked   atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	reads   []pinnedRead
	asOfOK  int
	errs    map[string]int // failures by SQLSTATE ("" for a broken connection)
	longest time.Duration
	wrong   []string
}

// pinnedRead is what a read-only transaction read at its timestamp.
type pinnedRead struct {
	ts         int64
	count, sum int64
}

// opLimit bounds any operation: statement_timeout (15s) and a margin.
const opLimit = 45 * time.Second

func newFaultLoad(t *testing.T, ctx context.Context, asOf int64, asOfSum string) *faultLoad {
	return &faultLoad{t: t, ctx: ctx, asOf: asOf, asOfSum: asOfSum, stop: make(chan struct{}), errs: map[string]int{}}
}

// start runs readers on each of urls and, on writeURL, the writer from k =
// next.
func (l *faultLoad) start(urls []string, writeURL string, next int64) {
	for _, url := range urls {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.reader(url) }()
	}
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.writer(writeURL, next) }()
}

// finish stops the clients and fails the test on a wrong answer or an
// operation that outlived its bound.
func (l *faultLoad) finish() {
	close(l.stop)
	l.wg.Wait()
	l.t.Logf("%d read-only transactions, %d AS OF reads, %d writes acknowledged; failures by SQLSTATE %v; longest operation %v",
		len(l.reads), l.asOfOK, l.acked.Load(), l.errs, l.longest)
	for _, w := range l.wrong {
		l.t.Error(w)
	}
	if l.longest > opLimit {
		l.t.Errorf("an operation took %v, past statement_timeout", l.longest)
	}
	if len(l.reads) == 0 || l.asOfOK == 0 {
		l.t.Errorf("no read succeeded")
	}
}

// readCount is how many read-only transactions succeeded so far.
func (l *faultLoad) readCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reads)
}

func (l *faultLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// connect opens a session with statement_timeout, or nil (after a pause)
// when the proxy does not take one now.
func (l *faultLoad) connect(url string) *pgx.Conn {
	ctx, cancel := context.WithTimeout(l.ctx, opLimit)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		if _, err = conn.Exec(ctx, "SET statement_timeout = '15s'"); err != nil {
			conn.Close(ctx)
		}
	}
	if err != nil {
		time.Sleep(100 * time.Millisecond)
		return nil
	}
	return conn
}

// op runs f under opLimit, notes how long it took and how it failed, and
// reports whether the connection is still good.
func (l *faultLoad) op(f func(ctx context.Context) error) bool {
	ctx, cancel := context.WithTimeout(l.ctx, opLimit+15*time.Second)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	took := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.longest = max(l.longest, took)
	if err == nil {
		return true
	}
	code := sqlState(err)
	l.errs[code]++
	return code != "" && !strings.HasPrefix(code, "08") && !strings.HasPrefix(code, "57P")
}

func (l *faultLoad) reader(url string) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	asOfQuery := fmt.Sprintf("SELECT count(*)::text || ' ' || coalesce(sum(k), 0) FROM t AS OF %d", l.asOf)
	for !l.stopped() {
		if conn == nil {
			if conn = l.connect(url); conn == nil {
				continue
			}
			if _, err := conn.Prepare(l.ctx, "asof", asOfQuery); err != nil {
				conn.Close(l.ctx)
				conn = nil
				continue
			}
		}
		good := l.op(func(ctx context.Context) error { return l.readOnlyTxn(ctx, conn) }) &&
			l.op(func(ctx context.Context) error {
				var got string
				if err := conn.QueryRow(ctx, "asof").Scan(&got); err != nil {
					return err
				}
				l.mu.Lock()
				defer l.mu.Unlock()
				l.asOfOK++
				if got != l.asOfSum {
					l.wrong = append(l.wrong, fmt.Sprintf("AS OF %d: %s, want %s", l.asOf, got, l.asOfSum))
				}
				return nil
			})
		if !good {
			conn.Close(l.ctx)
			conn = nil
		}
	}
}

// readOnlyTxn reads the table's count and sum and mz_now() in a read-only
// transaction, which must include the last write acknowledged before it.
func (l *faultLoad) readOnlyTxn(ctx context.Context, conn *pgx.Conn) error {
	acked := l.acked.Load()
	var r pinnedRead
	var seen int64
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT count(*), coalesce(sum(k), 0), mz_now()::text::bigint, count(*) FILTER (WHERE k = $1) FROM t",
			acked).Scan(&r.count, &r.sum, &r.ts, &seen)
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads = append(l.reads, r)
	if acked > 0 && seen != 1 {
		l.wrong = append(l.wrong, fmt.Sprintf("a read-only transaction at %d missed k = %d, acknowledged before it began", r.ts, acked))
	}
	return nil
}

func (l *faultLoad) writer(url string, next int64) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ; !l.stopped(); next++ {
		if conn == nil {
			if conn = l.connect(url); conn == nil {
				continue
			}
		}
		k := next
		ok := l.op(func(ctx context.Context) error {
			if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", k); err != nil {
				return err
			}
			l.acked.Store(k)
			return nil
		})
		if !ok {
			conn.Close(l.ctx)
			conn = nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkHistory compares every read-only transaction's answer with the
// history at its timestamp, read directly.
func (l *faultLoad) checkHistory(direct *pgx.Conn, history string) {
	l.t.Helper()
	for _, r := range l.reads {
		var count, sum int64
		if err := direct.QueryRow(l.ctx, fmt.Sprintf("SELECT count(*), coalesce(sum(k), 0) FROM %s WHERE mz_from <= $1 AND mz_to > $1", history),
			r.ts).Scan(&count, &sum); err != nil {
			l.t.Fatal(err)
		}
		if count != r.count || sum != r.sum {
			l.t.Errorf("a read-only transaction at %d read %d rows (sum %d); the history has %d (sum %d)", r.ts, r.count, r.sum, count, sum)
		}
	}
}

// setupFaultTable creates t through conn with rows 1..n and returns the
// time after them, their count and sum as the AS OF read answers, and the
// history table.
func setupFaultTable(t *testing.T, ctx context.Context, conn, direct *pgx.Conn, n int64) (int64, string, string) {
	t.Helper()
	mustExec(t, ctx, conn, "CREATE TABLE t (k bigint PRIMARY KEY) WITH (RETAIN HISTORY FOR '1h')",
		fmt.Sprintf("INSERT INTO t SELECT generate_series(1, %d)", n))
	var ts int64
	if err := conn.QueryRow(ctx, "SELECT mz_now()::text::bigint", pgx.QueryExecModeSimpleProtocol).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	var history string
	if err := direct.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE name = 't' AND dropped_ts IS NULL").Scan(&history); err != nil {
		t.Fatal(err)
	}
	return ts, fmt.Sprintf("%d %d", n, n*(n+1)/2), history
}

// noHoldsOn waits until no read holds the table (mz_internal.mz_read_holds).
func noHoldsOn(t *testing.T, ctx context.Context, direct *pgx.Conn, table string) {
	t.Helper()
	eventually(t, 30*time.Second, "every read hold on "+table+" released", func() bool {
		var n int
		err := direct.QueryRow(ctx, "SELECT count(*) FROM mz_internal.mz_read_holds WHERE name = $1 AND kind = 'hold'", table).Scan(&n)
		return err == nil && n == 0
	})
}

// TestFault7BackendRestart: the backend restarts (fast, then immediate:
// SIGQUIT, crash recovery) while three clients run read-only transactions
// (the lock-free pin) and prepared AS OF reads and a writer inserts.
// Afterwards every answer was exact (the AS OF reads the rows before it;
// each transaction what the history holds at its mz_now(), with every
// write acknowledged before it), no operation outlived its statement
// timeout, and no read hold is left.
func TestFault7BackendRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	// Acknowledged commits must survive the crash (the shared test
	// PostgreSQL commits asynchronously, which loses the last ones): from
	// the first restart on.
	pg.cfg.Settings["synchronous_commit"] = "on"
	p := startProxy(t, append([]string{"--backend", pg.url()}, fastLease...)...)
	setup := connectTo(t, ctx, p.URL("postgres", "postgres"))
	direct := func() *pgx.Conn { return connectTo(t, ctx, pg.url()) }
	asOf, want, history := setupFaultTable(t, ctx, setup, direct(), 50)
	setup.Close(ctx)

	l := newFaultLoad(t, ctx, asOf, want)
	url := p.URL("postgres", "postgres")
	l.start([]string{url, url, url}, url, 51)
	time.Sleep(2 * time.Second)
	pg.restart(t, ctx)
	time.Sleep(3 * time.Second)
	// Immediate: no shutdown checkpoint; the sequences come back from
	// WAL, the pin's P possibly not set.
	pg.crash(t, ctx)
	time.Sleep(4 * time.Second)
	before := l.readCount()
	time.Sleep(2 * time.Second)
	l.finish()
	if l.readCount() == before {
		t.Errorf("no read-only transaction succeeded after the immediate restart")
	}
	check := direct()
	l.checkHistory(check, history)
	noHoldsOn(t, ctx, check, "t")
}

// TestFault7ProxyKill: two proxies serve AS OF reads of a past time (read
// holds granted in memory below each incarnation's floor and shared by
// concurrent acquirers) and read-only transactions; one is killed with
// SIGKILL mid-load. The other's clients go on with exact answers, the dead
// proxy's holds lapse after its grace, and once the clients stop no hold
// is left.
func TestFault7ProxyKill(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	a, b := startProxy(t, fastLease...), startProxy(t, fastLease...)
	setup := connectTo(t, ctx, b.URL("postgres", d.name))
	asOf, want, history := setupFaultTable(t, ctx, setup, d.direct, 40)
	// Later writes and a few seconds: asOf is well below the floors.
	mustExec(t, ctx, setup, "INSERT INTO t VALUES (41)")
	time.Sleep(2 * time.Second)
	setup.Close(ctx)

	onA := newFaultLoad(t, ctx, asOf, want)
	onB := newFaultLoad(t, ctx, asOf, want)
	urlA, urlB := a.URL("postgres", d.name), b.URL("postgres", d.name)
	onA.start([]string{urlA, urlA}, urlB, 1000)
	onB.start([]string{urlB, urlB, urlB}, urlB, 2000)
	time.Sleep(3 * time.Second)
	incA := d.incarnation(a)
	a.signal(syscall.SIGKILL)
	d.eventually(20*time.Second, "the killed proxy's holds lapsed", func() bool {
		return d.int("SELECT count(*) FROM mz_internal.mz_read_holds WHERE incarnation = $1", incA) == 0
	})
	afterKill := onB.readCount()
	time.Sleep(2 * time.Second)
	close(onA.stop)
	onA.wg.Wait()
	onB.finish()
	if onB.readCount() == afterKill {
		t.Errorf("no read-only transaction through the surviving proxy after the kill")
	}
	for _, l := range []*faultLoad{onA, onB} {
		for _, w := range l.wrong {
			t.Error(w)
		}
		l.checkHistory(d.direct, history)
	}
	noHoldsOn(t, ctx, d.direct, "t")
}
