package integration

import (
	"context"
	"fmt"
	"math/rand"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statement timeouts and cancellation through mzproxy (issue 6): every
// phase of a statement honours its deadline and the client's cancel, the
// backend's work stops, read holds are released, the session goes on.

// wantCanceled fails the test unless err is 57014 with PostgreSQL's
// message for why (timeout: "statement timeout", else "user request").
func wantCanceled(t testing.TB, err error, timeout bool) {
	t.Helper()
	wantCode(t, err, "57014")
	want := "canceling statement due to user request"
	if timeout {
		want = "canceling statement due to statement timeout"
	}
	if msg := err.(*pgconn.PgError).Message; msg != want {
		t.Fatalf("57014 with message %q, want %q", msg, want)
	}
}

// timingSlack is how late past its deadline an interruption may reach the
// client in these tests. The target is about 100 ms; the bound is generous
// because the tests share two cores with everything else.
const timingSlack = 1500 * time.Millisecond

// wantWithin fails the test unless elapsed is at least want (less 50 ms for
// clocks) and at most want+timingSlack, and logs how late it was.
func wantWithin(t testing.TB, what string, elapsed, want time.Duration) {
	t.Helper()
	if elapsed < want-50*time.Millisecond || elapsed > want+timingSlack {
		t.Fatalf("%s after %v, want about %v", what, elapsed.Round(time.Millisecond), want)
	}
	t.Logf("%s after %v (%v past the deadline)", what, elapsed.Round(time.Millisecond), (elapsed - want).Round(time.Millisecond))
}

// wantNoLeftover waits until no backend runs a query containing marker.
func wantNoLeftover(t testing.TB, ctx context.Context, direct *pgx.Conn, marker string) {
	t.Helper()
	eventually(t, 5*time.Second, "no backend still running "+marker, func() bool {
		return activeQueries(t, ctx, direct, marker) == 0
	})
}

// wantUsable checks a session answers a statement.
func wantUsable(t testing.TB, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx, "SELECT 7").Scan(&n); err != nil || n != 7 {
		t.Fatalf("session not usable after the interruption: %d, %v", n, err)
	}
}

// holdsNow is the proxy's mzproxy_read_holds gauge.
func holdsNow(t testing.TB, addr string) float64 {
	t.Helper()
	_, body := get(t, addr, "/metrics")
	return metricValue(t, body, "mzproxy_read_holds")
}

// TestTimeoutBackendExecution: a statement the backend runs past the
// proxy's deadline (--statement-timeout, which the backend does not know)
// ends with 57014 "statement timeout" on time, the backend query is gone,
// the session goes on; SET statement_timeout changes the deadline and SHOW
// reports the value in force.
func TestTimeoutBackendExecution(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--statement-timeout", "1s")
	direct := connectDirect(t, ctx)
	conn := p.connect(t, ctx)

	var show string
	if err := conn.QueryRow(ctx, "SHOW statement_timeout", simple(conn)).Scan(&show); err != nil || show != "1s" {
		t.Fatalf("SHOW statement_timeout under --statement-timeout 1s: %q, %v", show, err)
	}
	marker := "/* " + tableName(t) + " */"
	start := time.Now()
	_, err := conn.Exec(ctx, marker+" SELECT pg_sleep(30)")
	wantCanceled(t, err, true)
	wantWithin(t, "timeout", time.Since(start), time.Second)
	wantNoLeftover(t, ctx, direct, marker)
	wantUsable(t, ctx, conn)

	// A SET made by the session wins over the configured default; RESET
	// returns to it.
	for _, step := range []struct{ sql, show string }{
		{"SET statement_timeout = '2500ms'", "2500ms"},
		{"SET statement_timeout TO 0", "0"},
		{"RESET statement_timeout", "1s"},
		{"SET statement_timeout = 3000", "3s"},
		{"SET statement_timeout TO DEFAULT", "1s"},
	} {
		if _, err := conn.Exec(ctx, step.sql); err != nil {
			t.Fatalf("%s: %v", step.sql, err)
		}
		if err := conn.QueryRow(ctx, "SHOW statement_timeout", simple(conn)).Scan(&show); err != nil || show != step.show {
			t.Fatalf("after %s: SHOW statement_timeout = %q (%v), want %q", step.sql, show, err, step.show)
		}
	}
	// A bad value is refused with PostgreSQL's error and changes nothing.
	_, err = conn.Exec(ctx, "SET statement_timeout = '5 parsecs'")
	wantCode(t, err, "22023")
	if err := conn.QueryRow(ctx, "SHOW statement_timeout", simple(conn)).Scan(&show); err != nil || show != "1s" {
		t.Fatalf("after a refused SET: %q, %v", show, err)
	}

	// Disabled: a statement longer than the default runs to the end.
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_sleep(1.3)"); err != nil {
		t.Fatalf("statement with statement_timeout 0: %v", err)
	}
}

// TestTimeoutInTransaction: a statement that times out inside a
// transaction block aborts it (25P02 until ROLLBACK); a SET LOCAL ends
// with the block, and a SET made in a block that rolls back is undone.
func TestTimeoutInTransaction(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--statement-timeout", "1s")
	conn := p.connect(t, ctx)
	show := func() string {
		t.Helper()
		var v string
		if err := conn.QueryRow(ctx, "SHOW statement_timeout", simple(conn)).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, sql := range []string{"BEGIN", "SET statement_timeout = '700ms'", "SET LOCAL statement_timeout = '500ms'"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if v := show(); v != "500ms" {
		t.Fatalf("SET LOCAL in the block: SHOW says %q", v)
	}
	start := time.Now()
	_, err := conn.Exec(ctx, "SELECT pg_sleep(10)")
	wantCanceled(t, err, true)
	wantWithin(t, "timeout in a transaction", time.Since(start), 500*time.Millisecond)
	_, err = conn.Exec(ctx, "SELECT 1")
	wantCode(t, err, "25P02")
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if v := show(); v != "1s" {
		t.Fatalf("after ROLLBACK of a block that SET 700ms: SHOW says %q, want the default 1s", v)
	}
	// Committed, the SET stays and the SET LOCAL goes.
	if _, err := conn.Exec(ctx, "BEGIN; SET statement_timeout = '1200ms'; SET LOCAL statement_timeout = '300ms'; COMMIT"); err != nil {
		t.Fatal(err)
	}
	if v := show(); v != "1200ms" {
		t.Fatalf("after COMMIT: SHOW says %q, want 1200ms", v)
	}
	wantUsable(t, ctx, conn)
}

// TestTimeoutUpperWait: a read AS OF a time in the future waits for the
// upper in the proxy; the deadline ends the wait on time, no read hold is
// left, the session goes on. A cancel ends the same wait.
func TestTimeoutUpperWait(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	addr := p.metricsAddr(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE uw (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET statement_timeout = '1s'"); err != nil {
		t.Fatal(err)
	}
	future := func(where string) string {
		return fmt.Sprintf("SELECT * FROM uw %s AS OF %d", where, time.Now().Add(time.Minute).UnixMilli())
	}
	start := time.Now()
	_, err := conn.Exec(ctx, future(""), simple(conn))
	wantCanceled(t, err, true)
	wantWithin(t, "timeout in the upper wait", time.Since(start), time.Second)
	if n := holdsNow(t, addr); n != 0 {
		t.Fatalf("%v read holds left after the timeout", n)
	}
	wantUsable(t, ctx, conn)

	// Cancel, over the extended protocol this time (the wait is in Bind).
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := conn.Exec(ctx, future("WHERE x > $1"), 0); errc <- err }()
	time.Sleep(500 * time.Millisecond)
	start = time.Now()
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		wantCanceled(t, err, false)
		wantWithin(t, "cancel of the upper wait", time.Since(start), 0)
	case <-time.After(20 * time.Second):
		t.Fatal("the upper wait was not canceled")
	}
	if n := holdsNow(t, addr); n != 0 {
		t.Fatalf("%v read holds left after the cancel", n)
	}
	wantUsable(t, ctx, conn)
	if !strings.Contains(p.log.String(), `phase="upper wait"`) {
		t.Errorf("no log line naming the upper-wait phase")
	}
}

// TestTimeoutStreaming: a read that streams rows slowly is stopped by its
// deadline while rows flow, the backend stops, the session goes on; the
// client sees the rows sent before the error. A cancel does the same.
func TestTimeoutStreaming(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	addr := p.metricsAddr(t)
	direct := connectDirect(t, ctx)
	conn := p.connect(t, ctx)
	marker := "/* " + tableName(t) + " */"
	// Rows larger than PostgreSQL's 8 kB output buffer leave one by one.
	slow := marker + " SELECT g, repeat('x', 10000), pg_sleep(0.05) FROM generate_series(1, 400) g"

	for _, timeout := range []bool{true, false} {
		if timeout {
			if _, err := conn.Exec(ctx, "SET statement_timeout = '1500ms'"); err != nil {
				t.Fatal(err)
			}
		} else if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rows, err := conn.Query(ctx, slow, simple(conn))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
			if !timeout && n == 10 {
				if err := conn.PgConn().CancelRequest(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		rows.Close()
		wantCanceled(t, rows.Err(), timeout)
		if timeout {
			wantWithin(t, "streaming timeout", time.Since(start), 1500*time.Millisecond)
		}
		if n < 5 || n >= 400 {
			t.Fatalf("got %d rows before the error, want some but not all", n)
		}
		wantNoLeftover(t, ctx, direct, marker)
		wantUsable(t, ctx, conn)
	}
	_, body := get(t, addr, "/metrics")
	for _, series := range []string{
		`mzproxy_statement_interruptions_total{cause="timeout",phase="stream"`,
		`mzproxy_statement_interruptions_total{cause="cancel",phase="stream"`,
	} {
		if !strings.Contains(body, series) {
			t.Errorf("no series %s in the scrape", series)
		}
	}
}

// TestCancelBackendExecution: a cancel during the backend's execution ends
// it with 57014 "user request" at once, and the query is gone.
func TestCancelBackendExecution(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--statement-timeout", "1m")
	direct := connectDirect(t, ctx)
	conn := p.connect(t, ctx)
	marker := "/* " + tableName(t) + " */"
	errc := make(chan error, 1)
	go func() { _, err := conn.Exec(ctx, marker+" SELECT pg_sleep(30)"); errc <- err }()
	eventually(t, 10*time.Second, "query running", func() bool { return activeQueries(t, ctx, direct, marker) == 1 })
	start := time.Now()
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		// The deadline did not cause it: the message stays the user's.
		wantCanceled(t, err, false)
		wantWithin(t, "cancel", time.Since(start), 0)
	case <-time.After(20 * time.Second):
		t.Fatal("not canceled")
	}
	wantNoLeftover(t, ctx, direct, marker)
	wantUsable(t, ctx, conn)
}

// TestCancelRacingCompletion: 100 rounds of a cancel sent about when a
// short statement completes. Each round's statement either completes or
// is canceled; the statement after it is never canceled (a stray cancel
// is PgBouncer #38's and Supavisor #1148's bug).
func TestCancelRacingCompletion(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	conn := p.connect(t, ctx)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	canceled, completed := 0, 0
	for round := 0; round < 100; round++ {
		errc := make(chan error, 1)
		go func() { _, err := conn.Exec(ctx, "SELECT pg_sleep(0.01)"); errc <- err }()
		time.Sleep(time.Duration(rng.Intn(20000)) * time.Microsecond)
		// CancelRequest returns when the proxy has closed the cancel
		// connection, that is, when the cancel has been dealt with.
		if err := conn.PgConn().CancelRequest(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err == nil {
			completed++
		} else {
			wantCanceled(t, err, false)
			canceled++
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT pg_sleep(0.02), 1").Scan(nil, &n); err != nil {
			t.Fatalf("round %d: the statement after the cancel failed: %v", round, err)
		}
	}
	t.Logf("%d canceled, %d completed before their cancel", canceled, completed)
}

// TestTimeoutStartupOptions: statement_timeout from the startup packet's
// options (pgx connection string; psql through PGOPTIONS) is the session's,
// over mzproxy's configured default.
func TestTimeoutStartupOptions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--statement-timeout", "1m")
	conn := connectTo(t, ctx, p.URL("postgres", "postgres")+"&options="+strings.ReplaceAll(url.QueryEscape("-c statement_timeout=800ms"), "+", "%20"))
	var show string
	if err := conn.QueryRow(ctx, "SHOW statement_timeout", simple(conn)).Scan(&show); err != nil || show != "800ms" {
		t.Fatalf("SHOW statement_timeout with options -c statement_timeout=800ms: %q, %v", show, err)
	}
	start := time.Now()
	_, err := conn.Exec(ctx, "SELECT pg_sleep(10)")
	wantCanceled(t, err, true)
	wantWithin(t, "timeout from the startup options", time.Since(start), 800*time.Millisecond)
	// RESET goes back to the startup value, not the configured default.
	if _, err := conn.Exec(ctx, "SET statement_timeout = '5s'; RESET statement_timeout"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SHOW statement_timeout", simple(conn)).Scan(&show); err != nil || show != "800ms" {
		t.Fatalf("after RESET: %q, %v", show, err)
	}

	out, stderr, _ := p.psqlTarget().run(t, "", []string{"PGOPTIONS=-c statement_timeout=700ms"},
		"-c", "SHOW statement_timeout", "-c", "SELECT pg_sleep(10)")
	if !strings.Contains(out, "700ms") {
		t.Errorf("psql with PGOPTIONS: SHOW printed %q", out)
	}
	if !strings.Contains(stderr, "canceling statement due to statement timeout") {
		t.Errorf("psql with PGOPTIONS: stderr %q, want the statement timeout", stderr)
	}
}

// TestIdleInTransactionTimeout: a session idle in a transaction past
// idle_in_transaction_session_timeout is ended by its backend with 25P03;
// the client gets that error, and the read holds of its transaction are
// released at once.
func TestIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	addr := p.metricsAddr(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE it (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO it VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	ts := readTS(t, ctx, conn)
	for _, sql := range []string{"SET idle_in_transaction_session_timeout = '1s'", "BEGIN"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// An AS OF read over the extended protocol holds its timestamp until
	// the transaction ends.
	var x int
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT x FROM it WHERE x = $1 AS OF %d", ts), 1).Scan(&x); err != nil {
		t.Fatal(err)
	}
	if n := holdsNow(t, addr); n != 1 {
		t.Fatalf("%v read holds in the transaction, want 1", n)
	}
	eventually(t, 10*time.Second, "holds released after the idle-in-transaction timeout", func() bool {
		return holdsNow(t, addr) == 0
	})
	_, err := conn.Exec(ctx, "SELECT 1")
	wantCode(t, err, "25P03")
}

// TestBackendAdminFunctions: pg_cancel_backend and pg_terminate_backend
// work on a proxy session's backend pid (pg_backend_pid() through the
// proxy); the pid in the proxy's BackendKeyData is the proxy's, not a
// backend's, and pg_cancel_backend refuses it.
func TestBackendAdminFunctions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	a, b := p.connect(t, ctx), p.connect(t, ctx)
	var pid uint32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := a.Exec(ctx, "SELECT pg_sleep(30)"); errc <- err }()
	time.Sleep(300 * time.Millisecond)
	var ok bool
	if err := b.QueryRow(ctx, "SELECT pg_cancel_backend($1)", int(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_cancel_backend(%d): %v, %v", pid, ok, err)
	}
	select {
	case err := <-errc:
		wantCanceled(t, err, false)
	case <-time.After(20 * time.Second):
		t.Fatal("pg_cancel_backend did not cancel the session's statement")
	}
	wantUsable(t, ctx, a)

	if a.PgConn().PID() != pid {
		if err := b.QueryRow(ctx, "SELECT pg_cancel_backend($1)", int(a.PgConn().PID())).Scan(&ok); err != nil || ok {
			t.Fatalf("pg_cancel_backend of the proxy-issued pid: %v, %v; want false", ok, err)
		}
	}

	if err := b.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, ok, err)
	}
	_, err := a.Exec(ctx, "SELECT 1")
	if code := sqlState(err); code != "57P01" && !a.IsClosed() {
		t.Fatalf("after pg_terminate_backend: %v (SQLSTATE %q), want 57P01 or a closed connection", err, code)
	}
	wantUsable(t, ctx, b)
}

// TestTimeoutOCCSemaphore: with --occ-max-concurrent 1 and one write
// parked in its optimistic loop (at the test failpoint), a second write on
// another table waits for the semaphore; its deadline ends the wait on time
// with 57014, a cancel ends it at once, and neither writes anything. The
// parked write then commits.
func TestTimeoutOCCSemaphore(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	pause := filepath.Join(t.TempDir(), "pause")
	p := launchProxy(t, append(os.Environ(), "MZPROXY_METRICS_LISTEN=", "MZPROXY_TEST_OCC_PAUSE_FILE="+pause),
		[]string{"--listen", "127.0.0.1:0", "--backend", directURL("postgres", db), "--log-level", "debug", "--occ-max-concurrent", "1"})
	parked := connectTo(t, ctx, p.URL("postgres", db))
	waiter := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE sem_a (x int)", "CREATE TABLE sem_b (x int)"} {
		if _, err := execSimple(ctx, parked, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	parkedDone := make(chan error, 1)
	go func() {
		_, err := execSimple(ctx, parked, "INSERT INTO sem_a VALUES (1) /*mzproxy:occ-pause*/")
		parkedDone <- err
	}()
	eventually(t, 10*time.Second, "the first write parked at the failpoint", func() bool {
		_, err := os.Stat(pause + ".paused")
		return err == nil
	})

	if _, err := execSimple(ctx, waiter, "SET statement_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := execSimple(ctx, waiter, "INSERT INTO sem_b VALUES (1)")
	wantCanceled(t, err, true)
	wantWithin(t, "timeout waiting for the OCC semaphore", time.Since(start), 2*time.Second)

	if _, err := execSimple(ctx, waiter, "SET statement_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := execSimple(ctx, waiter, "INSERT INTO sem_b VALUES (2)"); errc <- err }()
	time.Sleep(500 * time.Millisecond)
	if err := waiter.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		wantCanceled(t, err, false)
	case <-time.After(20 * time.Second):
		t.Fatal("the wait for the OCC semaphore was not canceled")
	}

	if err := os.Remove(pause); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-parkedDone:
		if err != nil {
			t.Fatalf("the parked write: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the parked write did not finish")
	}
	var a, b int
	if err := waiter.QueryRow(ctx, "SELECT (SELECT count(*) FROM sem_a), (SELECT count(*) FROM sem_b)").Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	if a != 1 || b != 0 {
		t.Fatalf("sem_a has %d rows (want 1), sem_b %d (want 0: both waits failed)", a, b)
	}
	if _, err := execSimple(ctx, waiter, "INSERT INTO sem_b VALUES (3)"); err != nil {
		t.Fatalf("a write after the semaphore was free: %v", err)
	}
	eventually(t, 10*time.Second, "log lines naming the semaphore phase", func() bool {
		return strings.Count(p.log.String(), `phase="semaphore wait"`) >= 2
	})
}

// TestTimeoutWriteWaitingForRowLock: an autocommit write that waits for a
// row lock held directly in PostgreSQL is ended by its deadline on time
// with 57014; nothing is written, and the session goes on.
func TestTimeoutWriteWaitingForRowLock(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	for _, sql := range []string{"CREATE TABLE storm (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO storm VALUES (1, 0)", "SET statement_timeout = '1s'"} {
		if _, err := execSimple(ctx, conn, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	versions := func() int64 {
		var n int64
		if err := direct.QueryRow(ctx, "SELECT count(*) FROM "+historyOf(t, ctx, direct, "storm")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := versions()
	release := holdRowLock(t, ctx, db, "storm", "id = 1")
	start := time.Now()
	_, err := execSimple(ctx, conn, "UPDATE storm SET v = v + 1 WHERE id = 1")
	wantCanceled(t, err, true)
	wantWithin(t, "timeout of a waiting write", time.Since(start), time.Second)
	release()
	var v int
	if err := direct.QueryRow(ctx, "SELECT v FROM storm WHERE id = 1").Scan(&v); err != nil || v != 0 {
		t.Fatalf("v = %d (%v), want 0: the timed-out write was applied", v, err)
	}
	if n := versions(); n != before {
		t.Fatalf("history went from %d to %d versions", before, n)
	}
	if tag, err := execSimple(ctx, conn, "UPDATE storm SET v = v + 1 WHERE id = 1"); err != nil || tag.String() != "UPDATE 1" {
		t.Fatalf("a write after the timed-out one: %q %v", tag, err)
	}
}

// TestCancelOnClientDisconnect: a client that goes away mid-statement has
// its backend work canceled.
func TestCancelOnClientDisconnect(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	direct := connectDirect(t, ctx)
	conn, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	marker := "/* " + tableName(t) + " */"
	errc := make(chan error, 1)
	go func() { _, err := conn.Exec(ctx, marker+" SELECT pg_sleep(60)"); errc <- err }()
	eventually(t, 10*time.Second, "query running", func() bool { return activeQueries(t, ctx, direct, marker) == 1 })
	_ = conn.PgConn().Conn().Close()
	<-errc
	wantNoLeftover(t, ctx, direct, marker)
}
