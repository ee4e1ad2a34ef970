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

// Session 18's faults: bursts on the paths sessions 16 and 17 added.

// TestFault18FirstWriteBurst: 40 sessions, through two proxies, in each
// of pgx's exec modes, open at once and write a table nobody wrote
// before (its history is built at its first write, lazy_history.go): each
// inserts a row of its own, then all increment one row. Every autocommit
// statement succeeds (the optimistic loop runs a conflicted one again; no
// 40001 reaches a client), nothing is lost or doubled, AS OF the moment
// before the first write reads no row and AS OF the end reads what the
// present reads; then the proxies hold no read hold and keep no backend
// connection of a closed session. On 79addbc sessions in pgx's exec and
// cache_describe modes got 40P01: the client's Parse, forwarded in front
// of the write slot, locked the table, and ensure_history's stronger lock
// deadlocked with another session's (proxy/write.go, oneTrip).
func TestFault18FirstWriteBurst(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true, proxies: [][]string{{"--metrics-listen", "127.0.0.1:0"}, {"--metrics-listen", "127.0.0.1:0"}}})
	ctx, db := st.ctx, st.db
	setup := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, setup, "CREATE TABLE b (k int PRIMARY KEY, v int NOT NULL)")
	var before int64
	if err := setup.QueryRow(ctx, "SELECT mz_now()::text::bigint", pgx.QueryExecModeSimpleProtocol).Scan(&before); err != nil {
		t.Fatal(err)
	}
	direct := connectTo(t, ctx, directURL("postgres", db))
	backends := func() int {
		return count(t, ctx, direct, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name <> 'mzproxy internal' AND pid <> pg_backend_pid()", pgx.QueryExecModeSimpleProtocol)
	}
	const sessions, each = 40, 5
	conns := make([]*pgx.Conn, sessions)
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	start := make(chan struct{})
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg, err := pgx.ParseConfig(st.url(i%2, "postgres"))
			if err != nil {
				errs <- err
				return
			}
			qm := pgxModes[i%len(pgxModes)]
			cfg.DefaultQueryExecMode = qm
			<-start
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				errs <- fmt.Errorf("session %d: connect: %w", i, err)
				return
			}
			conns[i] = conn
			if _, err := conn.Exec(ctx, "INSERT INTO b VALUES ($1, 0)", i+1); err != nil {
				errs <- fmt.Errorf("session %d (%v): insert: %w", i, qm, err)
				return
			}
			// Row 1 exists once session 0 inserted it.
			deadline := time.Now().Add(time.Minute)
			for n := 0; n < each; {
				tag, err := conn.Exec(ctx, "UPDATE b SET v = v + $1 WHERE k = $2", 1, 1)
				switch {
				case err != nil:
					errs <- fmt.Errorf("session %d (%v): increment %d: %w", i, qm, n, err)
					return
				case tag.RowsAffected() == 1:
					n++
				case time.Now().After(deadline):
					errs <- fmt.Errorf("session %d: row 1 never came", i)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if got := count(t, ctx, setup, "SELECT count(*) FROM b", simple(setup)); got != sessions {
		t.Errorf("%d rows, want %d", got, sessions)
	}
	if got := count(t, ctx, setup, "SELECT v FROM b WHERE k = 1", simple(setup)); got != sessions*each {
		t.Errorf("row 1 = %d, want %d: an increment lost or doubled", got, sessions*each)
	}
	if got := count(t, ctx, setup, fmt.Sprintf("SELECT count(*) FROM b AS OF %d", before), simple(setup)); got != 0 {
		t.Errorf("AS OF %d, before the first write: %d rows", before, got)
	}
	var now int64
	if err := setup.QueryRow(ctx, "SELECT mz_now()::text::bigint", pgx.QueryExecModeSimpleProtocol).Scan(&now); err != nil {
		t.Fatal(err)
	}
	present := count(t, ctx, setup, "SELECT sum(k * 1000 + v)::int FROM b", simple(setup))
	if got := count(t, ctx, setup, fmt.Sprintf("SELECT sum(k * 1000 + v)::int FROM b AS OF %d", now), simple(setup)); got != present {
		t.Errorf("AS OF %d reads %d, the present %d", now, got, present)
	}
	for _, c := range conns {
		c.Close(ctx)
	}
	for i, p := range st.proxies {
		p.awaitHolds(t, 0, fmt.Sprintf("proxy %d after the burst", i))
		p.mustAlive(t, ctx)
	}
	// setup's own backend session is the one left.
	eventually(t, 10*time.Second, "the closed sessions' backend connections gone", func() bool { return backends() == 1 })
}

// restartStage is the restart tests' stage: a durable PostgreSQL of the
// test's own (to restart or crash), two proxies on it with fast leases
// (the first without the event loop), a bank of ten accounts of 100 (acct)
// and one row to increment (hot).
func restartStage(t *testing.T, ctx context.Context) (*privateCluster, *stage) {
	t.Helper()
	pg := newDurableCluster(t, ctx)
	st := newStage(t, stageOpts{ctx: ctx, postgres: true, backend: pg.url(), db: "postgres",
		proxies: [][]string{append([]string{"--event-loop=false", "--metrics-listen", "127.0.0.1:0"}, fastLease...),
			append([]string{"--metrics-listen", "127.0.0.1:0"}, fastLease...)}})
	setup := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, setup, "CREATE TABLE acct (k int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO acct SELECT g, 100 FROM generate_series(1, 10) g",
		"CREATE TABLE hot (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO hot VALUES (1, 0)")
	setup.Close(ctx)
	return pg, st
}

// TestFault18RestartExtendedPaths: the backend restarts, fast (57P01 to
// every session) and immediate (a crash: SIGQUIT), while clients of two
// proxies (with and without the event loop) send, with pgx's exec mode
// (the unnamed statement's Parse, Bind, Execute in one batch), the paths
// sessions 16 and 17 added: a repeated timestamped read with an argument
// (bound to a statement of the proxy's from its second use), autocommit
// increments of one row (held by the proxy for a retry), and transfers
// in blocks; one more session holds a block open with a read in it. A
// client whose connection broke connects again. Every error is a lost
// connection's (08xxx, 57Pxx, or the socket closed), never 26000 or XX000;
// every read sees the bank's total; the total is conserved; the row holds
// every acknowledged increment and no more than were sent; afterwards the
// proxies serve, and hold no read hold.
func TestFault18RestartExtendedPaths(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg, st := restartStage(t, ctx)
	const total = 1000
	// Increments of the row across both restarts.
	sentBefore, ackedBefore := 0, 0
	for _, how := range []string{"fast", "immediate"} {
		var (
			mu          sync.Mutex
			errs        = map[string]int{}
			wrong       []string
			reads       int
			sent, acked int
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
		client := func(i int, op func(c *pgx.Conn) error) {
			defer wg.Done()
			runReconnecting(ctx, stop, func() string { return st.url(i%2, "postgres") }, op, note)
		}
		for i := range 4 {
			wg.Add(1)
			go client(i, func(c *pgx.Conn) error {
				var sum int
				if err := c.QueryRow(ctx, "SELECT sum(v)::int, mz_now() > 0 FROM acct WHERE k > $1", 0).Scan(&sum, new(bool)); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				reads++
				if sum != total {
					wrong = append(wrong, fmt.Sprintf("%s: a read's total %d", how, sum))
				}
				return nil
			})
		}
		for i := range 4 {
			wg.Add(1)
			go client(i, incrementHot(ctx, &mu, &sent, &acked))
		}
		for i := range 2 {
			wg.Add(1)
			go client(i, transferAcct(ctx, 1+i, 10-i))
		}
		wg.Add(1)
		go client(1, func(c *pgx.Conn) error {
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				var sum int
				if err := tx.QueryRow(ctx, "SELECT sum(v)::int FROM acct WHERE k > $1", 0).Scan(&sum); err != nil {
					return err
				}
				if sum != total {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%s: a block's total %d", how, sum))
					mu.Unlock()
				}
				time.Sleep(300 * time.Millisecond)
				return nil
			})
		})
		time.Sleep(time.Second)
		if how == "fast" {
			pg.restart(t, ctx)
		} else {
			pg.crash(t, ctx)
		}
		time.Sleep(3 * time.Second)
		close(stop)
		wg.Wait()
		t.Logf("%s restart: %d reads, %d increments sent, %d acknowledged; errors by SQLSTATE %v", how, reads, sent, acked, errs)
		for _, w := range wrong {
			t.Error(w)
		}
		direct, err := pgx.Connect(ctx, pg.url())
		if err != nil {
			t.Fatal(err)
		}
		if got := count(t, ctx, direct, "SELECT sum(v)::int FROM acct", simple(direct)); got != total {
			t.Errorf("%s: the bank's total is %d, want %d", how, got, total)
		}
		sentBefore, ackedBefore = sentBefore+sent, ackedBefore+acked
		if got := count(t, ctx, direct, "SELECT v FROM hot", simple(direct)); got < ackedBefore || got > sentBefore {
			t.Errorf("%s: the row is %d, after %d increments acknowledged of %d sent", how, got, ackedBefore, sentBefore)
		}
		direct.Close(ctx)
		if reads == 0 || acked == 0 {
			t.Errorf("%s: nothing succeeded (%d reads, %d increments)", how, reads, acked)
		}
		for i, p := range st.proxies {
			p.awaitHolds(t, 0, fmt.Sprintf("proxy %d after the %s restart", i, how))
			p.mustAlive(t, ctx)
		}
	}
}

// TestFault18ProxyKillExtendedWrites: of two proxies (fast leases), one
// is killed with SIGKILL while clients of both send, with pgx's exec
// mode, autocommit increments of one row (held by the proxy for a retry)
// and transfers in blocks, and one of its sessions holds a block open
// with a read. The killed proxy's clients connect to the other one. The
// bank's total is conserved, the row holds every acknowledged increment
// and no more than were sent, the killed proxy's incarnation is shown
// expired and its hold stops holding the since back, and the other proxy
// serves on with no hold left.
func TestFault18ProxyKillExtendedWrites(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true, proxies: [][]string{append([]string{"--metrics-listen", "127.0.0.1:0"}, fastLease...),
		append([]string{"--metrics-listen", "127.0.0.1:0"}, fastLease...)}})
	ctx, db, dead, live := st.ctx, st.db, st.proxies[0], st.proxies[1]
	setup := connectTo(t, ctx, live.URL("postgres", db))
	mustExec(t, ctx, setup, "CREATE TABLE acct (k int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO acct SELECT g, 100 FROM generate_series(1, 10) g",
		"CREATE TABLE hot (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO hot VALUES (1, 0)")
	const total = 1000
	var (
		mu          sync.Mutex
		wrong       []string
		sent, acked int
		killed      = make(chan struct{})
		stop        = make(chan struct{})
		wg          sync.WaitGroup
	)
	// A client of the killed proxy connects to the live one from then on.
	url := func(i int) string {
		select {
		case <-killed:
			return live.URL("postgres", db)
		default:
			return st.url(i%2, "postgres")
		}
	}
	client := func(i int, op func(c *pgx.Conn) error) {
		defer wg.Done()
		runReconnecting(ctx, stop, func() string { return url(i) }, op, func(err error) {
			if code := sqlState(err); code != "" && code != "40001" && !strings.HasPrefix(code, "08") && !strings.HasPrefix(code, "57P") {
				mu.Lock()
				wrong = append(wrong, err.Error())
				mu.Unlock()
			}
		})
	}
	for i := range 4 {
		wg.Add(1)
		go client(i, incrementHot(ctx, &mu, &sent, &acked))
	}
	for i := range 4 {
		wg.Add(1)
		go client(i, transferAcct(ctx, 1+i, 10-i))
	}
	// A block on the proxy to be killed holds a read.
	holder := connectTo(t, ctx, dead.URL("postgres", db))
	mustExec(t, ctx, holder, "BEGIN")
	var sum int
	if err := holder.QueryRow(ctx, "SELECT sum(v)::int FROM acct WHERE k > $1", 0).Scan(&sum); err != nil || sum != total {
		t.Fatalf("the holder's read: %d, %v", sum, err)
	}
	time.Sleep(time.Second)
	dead.signal(syscall.SIGKILL)
	close(killed)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	for _, w := range wrong {
		t.Errorf("an error other than a lost connection's or a block's conflict: %s", w)
	}
	direct := connectTo(t, ctx, directURL("postgres", db))
	if got := count(t, ctx, direct, "SELECT sum(v)::int FROM acct", simple(direct)); got != total {
		t.Errorf("the bank's total is %d, want %d", got, total)
	}
	if got := count(t, ctx, direct, "SELECT v FROM hot", simple(direct)); got < acked || got > sent || acked == 0 {
		t.Errorf("the row is %d, after %d increments acknowledged of %d sent", got, acked, sent)
	}
	eventually(t, 30*time.Second, "the killed proxy's incarnation expired", func() bool {
		return count(t, ctx, direct, "SELECT count(*) FROM mz_internal.mz_incarnations WHERE status = 'lease expired'", simple(direct)) >= 1
	})
	// The live proxy writes and reads on; its holds are released.
	mustExec(t, ctx, setup, "UPDATE hot SET v = v + 0 WHERE id = 1")
	if got := count(t, ctx, setup, "SELECT sum(v)::int FROM acct AS OF mz_now()", simple(setup)); got != total {
		t.Errorf("AS OF mz_now() through the live proxy: %d", got)
	}
	live.awaitHolds(t, 0, "on the live proxy")
	live.mustAlive(t, ctx)
}

// incrementHot is the faults' counter client: one autocommit increment of
// hot's row, counted as sent before and as acknowledged after.
func incrementHot(ctx context.Context, mu *sync.Mutex, sent, acked *int) func(c *pgx.Conn) error {
	return func(c *pgx.Conn) error {
		mu.Lock()
		*sent++
		mu.Unlock()
		if _, err := c.Exec(ctx, "UPDATE hot SET v = v + $1 WHERE id = $2", 1, 1); err != nil {
			return err
		}
		mu.Lock()
		*acked++
		mu.Unlock()
		return nil
	}
}

// transferAcct is the faults' bank client: a block moving 5 from one
// account to another, so the total is conserved whatever fails.
func transferAcct(ctx context.Context, from, to int) func(c *pgx.Conn) error {
	return func(c *pgx.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "UPDATE acct SET v = v - $1 WHERE k = $2", 5, from); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE acct SET v = v + $1 WHERE k = $2", 5, to)
			return err
		})
	}
}

// runReconnecting runs op again and again on a connection to url() (pgx's
// exec mode) until stop closes; after an error, which it hands to failed,
// it connects again: the faults' clients, whose server restarts or whose
// proxy is killed under them.
func runReconnecting(ctx context.Context, stop <-chan struct{}, url func() string, op func(c *pgx.Conn) error, failed func(error)) {
	var c *pgx.Conn
	defer func() {
		if c != nil {
			c.Close(ctx)
		}
	}()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if c == nil {
			cfg, err := pgx.ParseConfig(url())
			if err != nil {
				failed(err)
				return
			}
			cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
			if c, err = pgx.ConnectConfig(ctx, cfg); err != nil {
				c = nil
				time.Sleep(50 * time.Millisecond)
				continue
			}
		}
		if err := op(c); err != nil {
			failed(err)
			c.Close(ctx)
			c = nil
		}
	}
}
