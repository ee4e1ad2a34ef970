package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestFault19RestartInterrupted: PostgreSQL restarts fast (57P01 to every
// session) and immediately (SIGQUIT, a crash) while clients of two
// proxies (with and without the event loop) have their statements
// interrupted again and again: writes to a managed row that never finish
// (they sleep) stopped by statement_timeout, in autocommit and in blocks,
// and reads and writes stopped by a CancelRequest; and while read-only
// transactions (a plain BEGIN, which the loop answers itself, then two
// reads) and transfers run. Every interrupted statement answers 57014 and
// its session goes on (a block: 25P02, then ROLLBACK), or its connection
// is lost (08xxx, 57Pxx); no other error. Afterwards the interrupted
// writes left nothing (the row is 0), the bank's total is conserved and
// every read saw it, no statement still runs, and the proxies serve with
// no read hold left.
func TestFault19RestartInterrupted(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg, st := restartStage(t, ctx)
	const total = 1000
	const marker = "/* fault19 */ "
	neverDone := marker + "UPDATE hot SET v = v + $1 WHERE id = (SELECT 1 FROM pg_sleep(30))"
	for _, how := range []string{"fast", "immediate"} {
		var (
			mu          sync.Mutex
			errs        = map[string]int{}
			wrong       []string
			interrupted int
			rotxns      int
			stop        = make(chan struct{})
			wg          sync.WaitGroup
		)
		note := func(err error) {
			code := sqlState(err)
			mu.Lock()
			defer mu.Unlock()
			errs[code]++
			if code != "" && !strings.HasPrefix(code, "08") && !strings.HasPrefix(code, "57P") {
				wrong = append(wrong, fmt.Sprintf("%s: %v", how, err))
			}
		}
		// interruptedBy checks that err is the 57014 of cause, and that
		// the session goes on; a lost connection is returned, to connect
		// again.
		interruptedBy := func(c *pgx.Conn, err error, cause string, block bool) error {
			if sqlState(err) != "57014" {
				if err == nil {
					err = fmt.Errorf("an interrupted statement succeeded")
				}
				return err
			}
			if !strings.Contains(err.Error(), cause) {
				mu.Lock()
				wrong = append(wrong, fmt.Sprintf("%s: %v, want %q", how, err, cause))
				mu.Unlock()
			}
			if block {
				if _, err := c.Exec(ctx, "SELECT 1"); sqlState(err) != "25P02" {
					if err == nil {
						err = fmt.Errorf("a block went on after its statement was interrupted")
					}
					return err
				}
				if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
					return err
				}
			}
			var one int
			if err := c.QueryRow(ctx, "SELECT $1::int", 1).Scan(&one); err != nil {
				return err
			}
			mu.Lock()
			interrupted++
			mu.Unlock()
			return nil
		}
		client := func(i int, params string, op func(c *pgx.Conn) error) {
			defer wg.Done()
			runReconnecting(ctx, stop, func() string { return st.url(i%2, "postgres") + params }, op, note)
		}
		for i := range 2 {
			for _, block := range []bool{false, true} {
				wg.Add(1)
				go client(i, "&statement_timeout=300", func(c *pgx.Conn) error {
					if block {
						if _, err := c.Exec(ctx, "BEGIN"); err != nil {
							return err
						}
					}
					_, err := c.Exec(ctx, neverDone, 1)
					return interruptedBy(c, err, "statement timeout", block)
				})
			}
		}
		for i := range 2 {
			for _, sql := range []string{neverDone, marker + "SELECT count(*) FROM acct, pg_sleep(30) WHERE k > $1"} {
				wg.Add(1)
				// (statement_timeout ends a statement whose cancel came
				// before it reached the backend, and so was dropped.)
				go client(i, "&statement_timeout=10000", func(c *pgx.Conn) error {
					timer := time.AfterFunc(300*time.Millisecond, func() { _ = c.PgConn().CancelRequest(ctx) })
					_, err := c.Exec(ctx, sql, 1)
					timer.Stop()
					cause := "user request"
					if strings.Contains(fmt.Sprint(err), "statement timeout") {
						cause = "statement timeout"
					}
					return interruptedBy(c, err, cause, false)
				})
			}
		}
		for i := range 2 {
			wg.Add(1)
			go client(i, "", func(c *pgx.Conn) error {
				if _, err := c.Exec(ctx, "BEGIN"); err != nil {
					return err
				}
				for range 2 {
					var sum int
					if err := c.QueryRow(ctx, "SELECT sum(v)::int FROM acct WHERE k > $1", 0).Scan(&sum); err != nil {
						return err
					}
					if sum != total {
						mu.Lock()
						wrong = append(wrong, fmt.Sprintf("%s: a read-only transaction's total %d", how, sum))
						mu.Unlock()
					}
				}
				if _, err := c.Exec(ctx, "COMMIT"); err != nil {
					return err
				}
				mu.Lock()
				rotxns++
				mu.Unlock()
				return nil
			})
			wg.Add(1)
			go client(i, "", transferAcct(ctx, 1+i, 10-i))
		}
		time.Sleep(2 * time.Second)
		if how == "fast" {
			pg.restart(t, ctx)
		} else {
			pg.crash(t, ctx)
		}
		time.Sleep(3 * time.Second)
		close(stop)
		wg.Wait()
		t.Logf("%s restart: %d statements interrupted, %d read-only transactions; errors by SQLSTATE %v", how, interrupted, rotxns, errs)
		for _, w := range wrong {
			t.Error(w)
		}
		if interrupted == 0 || rotxns == 0 {
			t.Errorf("%s: nothing ran (%d interrupted, %d read-only transactions)", how, interrupted, rotxns)
		}
		direct, err := pgx.Connect(ctx, pg.url())
		if err != nil {
			t.Fatal(err)
		}
		if got := count(t, ctx, direct, "SELECT sum(v)::int FROM acct", simple(direct)); got != total {
			t.Errorf("%s: the bank's total is %d, want %d", how, got, total)
		}
		if got := count(t, ctx, direct, "SELECT v FROM hot", simple(direct)); got != 0 {
			t.Errorf("%s: an interrupted write landed: the row is %d", how, got)
		}
		eventually(t, 10*time.Second, "no interrupted statement left running", func() bool {
			return activeQueries(t, ctx, direct, marker) == 0
		})
		direct.Close(ctx)
		for i, p := range st.proxies {
			p.awaitHolds(t, 0, fmt.Sprintf("proxy %d after the %s restart", i, how))
			p.mustAlive(t, ctx)
		}
	}
}

// TestFault19CancelBurst: 200 sessions through one proxy each run a
// statement that sleeps (a read of a managed table, or a write to it),
// and all are canceled at once by their driver (a CancelRequest each,
// pgx's context end). Each gets 57014 (user request) and its next
// statement answers; nothing still runs, the write left nothing, and the
// proxy serves on with no read hold. The test's own PostgreSQL, which
// takes the 200 sessions' backends.
func TestFault19CancelBurst(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	pg.cfg.Settings["max_connections"] = "260"
	pg.restart(t, ctx)
	p := startProxy(t, "--backend", pg.url(), "--max-connections", "0", "--metrics-listen", "127.0.0.1:0")
	url := p.URL("postgres", "postgres")
	setup := connectTo(t, ctx, url)
	mustExec(t, ctx, setup, "CREATE TABLE burst (k int PRIMARY KEY, v int NOT NULL)", "INSERT INTO burst VALUES (1, 0)")
	const sessions = 200
	const marker = "/* burst19 */ "
	stmts := []string{
		marker + "SELECT count(*) FROM burst, pg_sleep(60) WHERE k = $1",
		marker + "UPDATE burst SET v = v + 1 WHERE k = (SELECT $1::int FROM pg_sleep(60))",
	}
	conns := make([]*pgx.Conn, sessions)
	for i := range conns {
		c, err := connectCancelable(t, ctx, url)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		conns[i] = c
	}
	cancelAll, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Exec(cancelAll, stmts[i%2], 1)
		}()
	}
	direct, err := pgx.Connect(ctx, pg.url())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	eventually(t, 60*time.Second, "every session's statement running", func() bool {
		return activeQueries(t, ctx, direct, marker) == sessions
	})
	cancel()
	wg.Wait()
	byCode := map[string]int{}
	for i, err := range errs {
		byCode[sqlState(err)]++
		if sqlState(err) != "57014" || !strings.Contains(err.Error(), "user request") {
			t.Errorf("session %d: %v, want 57014 (user request)", i, err)
		}
	}
	t.Logf("answers by SQLSTATE: %v", byCode)
	for i, c := range conns {
		var k int
		if err := c.QueryRow(ctx, "SELECT v + $1 FROM burst WHERE k = 1", 1).Scan(&k); err != nil || k != 1 {
			t.Errorf("session %d after its cancel: %d, %v", i, k, err)
		}
	}
	eventually(t, 20*time.Second, "no canceled statement left running", func() bool {
		return activeQueries(t, ctx, direct, marker) == 0
	})
	p.awaitHolds(t, 0, "after the burst")
	p.mustAlive(t, ctx)
}
