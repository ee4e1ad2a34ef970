package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Faults under session 9's surfaces: statements the proxy prepared on a
// session's backend connection (repeated simple reads, prepared reads
// behind the read guard) when the backend restarts or the proxy dies
// between a guard and its read, and a burst of connections doing
// timestamped reads.

// boundReads runs, on conn, the reads a session warms the proxy's
// prepared statements with: a repeated simple read of the present
// (prepared at its second use) and a prepared extended read (pgx's
// statement cache), for each of keys; rows of k hold 'v<k>'.
func boundReads(ctx context.Context, conn *pgx.Conn, keys ...int) error {
	for _, k := range keys {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			var v string
			var ts int64
			sql := fmt.Sprintf("SELECT v, mz_now() FROM g WHERE k = %d", k)
			args := []any{mode}
			if mode == pgx.QueryExecModeCacheStatement {
				sql = "SELECT v, mz_now() FROM g WHERE k = $1"
				args = append(args, k)
			}
			if err := conn.QueryRow(ctx, sql, args...).Scan(&v, &ts); err != nil {
				return fmt.Errorf("%s (k = %d): %w", sql, k, err)
			}
			if v != fmt.Sprintf("v%d", k) {
				return fmt.Errorf("%s (k = %d): %q", sql, k, v)
			}
		}
	}
	return nil
}

// TestFault9RestartBoundReads: the backend restarts immediately (SIGQUIT,
// as pg_ctl restart -m immediate) while sessions have reads prepared on
// their backend connections. A session's next read either fails as the
// connection it was on is gone (an 08 or 57P SQLSTATE, or the socket
// closed), or answers right; never 26000 "prepared statement does not
// exist". A new session, with the same reads, answers right and prepares
// them again.
func TestFault9RestartBoundReads(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newDurableCluster(t, ctx)
	st := newStage(t, stageOpts{ctx: ctx, postgres: true, backend: pg.url(), db: "postgres", rows: 10,
		proxies: [][]string{fastLease, append([]string{"--event-loop"}, fastLease...)}})
	p, loop, url := st.proxies[0], st.proxies[1], st.url(0, "postgres")
	var sessions []*pgx.Conn
	for _, u := range []string{url, loop.URL("postgres", "postgres")} {
		for range 3 {
			c := connectTo(t, ctx, u)
			if err := boundReads(ctx, c, 1, 2, 3, 4); err != nil {
				t.Fatal(err)
			}
			sessions = append(sessions, c)
		}
	}
	pg.crash(t, ctx)
	for i, c := range sessions {
		err := boundReads(ctx, c, 5, 6)
		t.Logf("session %d's next reads after the restart: %v", i, err)
		if strings.Contains(fmt.Sprint(err), "26000") || strings.Contains(fmt.Sprint(err), "does not exist") {
			t.Errorf("session %d after the restart: %v", i, err)
		}
		if code := sqlState(err); err != nil && code != "" && !strings.HasPrefix(code, "08") && !strings.HasPrefix(code, "57P") {
			t.Errorf("session %d after the restart: %v, want a lost connection's error", i, err)
		}
	}
	for _, proxy := range []*proxyProc{p, loop} {
		var conn *pgx.Conn
		var last error
		eventually(t, time.Minute, "the proxy serves after the restart", func() bool {
			c, err := pgx.Connect(ctx, proxy.URL("postgres", "postgres"))
			if err == nil {
				err = boundReads(ctx, c, 1)
			}
			if err == nil {
				conn = c
				return true
			}
			if fmt.Sprint(err) != fmt.Sprint(last) {
				t.Logf("after the restart: %v", err)
				last = err
			}
			if c != nil {
				c.Close(ctx)
			}
			return false
		})
		if err := boundReads(ctx, conn, 2, 3, 4, 5, 6, 7); err != nil {
			t.Errorf("a new session after the restart: %v", err)
		}
		if n, _, _ := preparedReads(t, ctx, conn); n == 0 {
			t.Errorf("a new session after the restart prepared no read")
		}
		conn.Close(ctx)
		proxy.mustAlive(t, ctx)
	}
}

// TestFault9KillBetweenGuardAndRead: a proxy is killed with SIGKILL while
// its sessions' prepared reads run behind their guards (each read sleeps
// after the guard pinned its timestamp), and while others run repeated
// simple reads. The sessions' backends end, the killed proxy's holds
// lapse, and through the other proxy reads answer right, writes commit
// and read-then-write transactions commit.
func TestFault9KillBetweenGuardAndRead(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	d := newLeaseDB(t, ctx)
	// g is made through b, the proxy that lives.
	st := newStage(t, stageOpts{ctx: ctx, postgres: true, db: d.name, rows: 10, proxies: [][]string{fastLease, fastLease}})
	b, a := st.proxies[0], st.proxies[1]
	var wg sync.WaitGroup
	for i := range 6 {
		c := connectTo(t, ctx, a.URL("postgres", d.name)+"&application_name=killed")
		if err := boundReads(ctx, c, 1, 2, 3); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var err error
				if i%2 == 0 {
					_, err = c.Exec(ctx, "SELECT v, pg_sleep(0.5) FROM g WHERE k = $1", 1+i)
				} else {
					err = boundReads(ctx, c, 1+i)
				}
				if err != nil {
					return // the proxy is gone
				}
			}
		}()
	}
	// A session through b keeps b serving the database (its lease there
	// compacts, which retires the killed proxy's incarnation); without
	// one b lets go of the database after --idle-release.
	conn := connectTo(t, ctx, b.URL("postgres", d.name))
	time.Sleep(time.Second)
	inc := d.incarnation(a)
	a.signal(syscall.SIGKILL)
	wg.Wait()
	d.eventually(30*time.Second, "the killed proxy's sessions' backends ended", func() bool {
		return d.int("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'killed'") == 0
	})
	d.eventually(20*time.Second, "the killed proxy's holds lapsed", func() bool {
		return d.int("SELECT count(*) FROM mz_internal.mz_read_holds WHERE incarnation = $1", inc) == 0
	})
	if err := boundReads(ctx, conn, 1, 2, 3, 4, 5, 6); err != nil {
		t.Fatalf("through the other proxy: %v", err)
	}
	mustExec(t, ctx, conn, "UPDATE g SET v = 'after' WHERE k = 10")
	var v string
	if err := conn.QueryRow(ctx, "SELECT v FROM g WHERE k = 10").Scan(&v); err != nil || v != "after" {
		t.Fatalf("the write after the kill: %q, %v", v, err)
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT v FROM g WHERE k = 1").Scan(&v); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE g SET v = 'v1' WHERE k = 1")
		return err
	}); err != nil {
		t.Fatalf("a read-then-write transaction after the kill: %v", err)
	}
	noHoldsOn(t, ctx, d.direct, "g")
}

// TestFault9ConnectionBurst: 200 clients connect at once and each runs
// timestamped reads (repeated simple reads, prepared reads) while a writer
// bumps a counter. Every read answers right and sees every counter value
// acknowledged before it began (linearizable), no read fails, and no read
// hold is left. Against a proxy whose limit of client sessions is 40, the
// clients beyond it are refused at connect with 53300, and the others
// read right.
func TestFault9ConnectionBurst(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	pg.cfg.Settings["max_connections"] = "300"
	pg.restart(t, ctx)
	st := newStage(t, stageOpts{ctx: ctx, postgres: true, backend: pg.url(), db: "postgres", rows: 10,
		proxies: [][]string{{"--metrics-listen", "127.0.0.1:0", "--max-connections", "250"}}})
	p, url := st.proxies[0], st.url(0, "postgres")
	writer := connectTo(t, ctx, url)
	mustExec(t, ctx, writer, "CREATE TABLE counter (id int PRIMARY KEY, n int)", "INSERT INTO counter VALUES (1, 0)")
	var mu sync.Mutex
	acked := 0
	stop := make(chan struct{})
	var writes sync.WaitGroup
	writes.Add(1)
	go func() {
		defer writes.Done()
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := writer.Exec(ctx, "UPDATE counter SET n = $1 WHERE id = 1", n); err != nil {
				t.Errorf("write %d: %v", n, err)
				return
			}
			mu.Lock()
			acked = n
			mu.Unlock()
		}
	}()
	var errs []error
	floor := func() int { mu.Lock(); defer mu.Unlock(); return acked }
	// A session start once waited a minute for its backend (08006) under
	// load: what the backends do then is logged.
	defer watchBackends(t, ctx, pg.url(), 20*time.Second)()
	start := time.Now()
	errs = burst(ctx, url, 200, floor)
	t.Logf("200 clients in %v, %d failed", time.Since(start), len(errs))
	for _, err := range errs[:min(len(errs), 5)] {
		t.Error(err)
	}
	// Over another proxy's limit of client sessions: the clients beyond
	// it are refused at connect with 53300, the others read right.
	small := startProxy(t, "--backend", pg.url(), "--metrics-listen", "127.0.0.1:0", "--max-connections", "40")
	errs = burst(ctx, small.URL("postgres", "postgres"), 200, floor)
	t.Logf("200 clients over a limit of 40: %d refused", len(errs))
	for _, err := range errs {
		if sqlState(err) != "53300" || !strings.Contains(err.Error(), "connecting") {
			t.Errorf("over the limit: %v, want 53300 at connect", err)
		}
	}
	if len(errs) == 200 {
		t.Errorf("over the limit: every client was refused")
	}
	close(stop)
	writes.Wait()
	p.awaitHolds(t, 0, "after the burst")
	small.awaitHolds(t, 0, "after the burst over the limit")
	p.mustAlive(t, ctx)
	small.mustAlive(t, ctx)
}

// burst runs n clients (burstClient) at once on url and returns their
// errors.
func burst(ctx context.Context, url string, n int, acked func() int) []error {
	errs := make(chan error, n)
	var readers sync.WaitGroup
	for i := range n {
		readers.Add(1)
		go func() {
			defer readers.Done()
			errs <- burstClient(ctx, url, i, acked)
		}()
	}
	readers.Wait()
	close(errs)
	var out []error
	for err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// burstClient is one client of TestFault9ConnectionBurst: it connects and
// runs the reads, each checked against the rows and the counter value
// acknowledged before it began.
func burstClient(ctx context.Context, url string, i int, acked func() int) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("client %d: connecting: %w", i, err)
	}
	defer conn.Close(ctx)
	for round := range 4 {
		if err := boundReads(ctx, conn, 1+(i+round)%10); err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		floor := acked()
		var n int
		if err := conn.QueryRow(ctx, "SELECT n FROM counter WHERE id = 1", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
			return fmt.Errorf("client %d: the counter: %w", i, err)
		}
		if n < floor {
			return fmt.Errorf("client %d: the counter read %d, after %d was acknowledged", i, n, floor)
		}
	}
	return nil
}

// watchBackends logs, once after d unless stopped (the returned func), what
// the backends of url that are not idle do and the locks they wait for,
// and the backends idle for over half of d: one that answered a session's
// start and was never read shows as idle after its start's query (as when
// pgconn's background reader took that answer: TestConnectBackendSlowStartupWrite).
func watchBackends(t *testing.T, ctx context.Context, url string, d time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-done:
			return
		case <-time.After(d):
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Logf("watching the backends: %v", err)
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT a.pid, a.state, a.wait_event_type, a.wait_event, left(a.query, 200),
			(SELECT string_agg(l.locktype || ' ' || coalesce(l.relation::regclass::text, '') || ' ' || l.mode, '; ')
			   FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted)
			FROM pg_stat_activity a WHERE a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
			AND (a.state IS DISTINCT FROM 'idle' OR a.wait_event_type = 'Lock' OR a.state_change < now() - $1::interval)`,
			(d / 2).String())
		if err != nil {
			t.Logf("watching the backends: %v", err)
			return
		}
		for rows.Next() {
			vals, _ := rows.Values()
			t.Logf("after %v, a backend: %v", d, vals)
		}
	}()
	return func() { close(done); wg.Wait() }
}
