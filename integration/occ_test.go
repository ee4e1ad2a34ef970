package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Optimistic writes (issue #5): autocommit writes through the simple
// protocol commit by compare-and-append on the shared upper and retry on a
// conflict; transaction blocks are validated at COMMIT.

const retriesExhausted = "read-then-write exceeded maximum retry attempts under contention"

// occRetries counts the optimistic writes the proxy logged as retried.
func occRetries(p *proxyProc) int {
	return strings.Count(p.log.String(), "optimistic write retried after conflicts")
}

// execSimple runs sql as one simple-protocol Query and returns its last
// command tag.
func execSimple(ctx context.Context, conn *pgx.Conn, sql string) (pgconn.CommandTag, error) {
	results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if len(results) == 0 {
		return pgconn.CommandTag{}, nil
	}
	return results[len(results)-1].CommandTag, nil
}

// TestOCCCounter: 8 connections each increment one row 50 times. Every
// increment lands, no client sees an error (no 40001: the writes queue on
// the row's lock, and each one's T is chosen after it), and the history
// holds the increments in timestamp order.
func TestOCCCounter(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--occ-max-concurrent", "8")
	setup := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE counter (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO counter VALUES (1, 0)"} {
		if _, err := execSimple(ctx, setup, sql); err != nil {
			t.Fatal(err)
		}
	}
	const clients, each = 8, 50
	conns := make([]*pgx.Conn, clients)
	for c := range conns {
		conns[c] = connectTo(t, ctx, p.URL("postgres", db))
	}
	versions, distinct := incrementCounter(t, ctx, conns, each)
	t.Logf("%d increments: %d versions in history at %d timestamps (increments at one timestamp keep the last)",
		clients*each, versions, distinct)
}

// incrementCounter has each connection run `UPDATE counter SET v = v + 1
// WHERE id = 1` each times; none may fail. The counter must then hold
// every increment, and its history one version per timestamp, in order:
// no two versions overlap in time, and the value grows with the time.
// versions and distinct count its history's versions and their timestamps.
func incrementCounter(t *testing.T, ctx context.Context, conns []*pgx.Conn, each int) (versions, distinct int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for _, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; done++ {
				tag, err := execSimple(ctx, conn, "UPDATE counter SET v = v + 1 WHERE id = 1")
				if err != nil || tag.String() != "UPDATE 1" {
					errs <- fmt.Errorf("tag %q: %v", tag, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var v int
	if err := conns[0].QueryRow(ctx, "SELECT v FROM counter WHERE id = 1").Scan(&v); err != nil || v != len(conns)*each {
		t.Fatalf("counter = %d (%v), want %d", v, err, len(conns)*each)
	}
	hist := historyOf(t, ctx, conns[0], "counter")
	q := fmt.Sprintf("SELECT count(*), count(DISTINCT mz_from) FROM %s", hist)
	if err := conns[0].QueryRow(ctx, q).Scan(&versions, &distinct); err != nil {
		t.Fatal(err)
	}
	if versions != distinct {
		t.Fatalf("history has %d versions at %d timestamps: two at one time", versions, distinct)
	}
	var disorder int
	q = fmt.Sprintf(`SELECT count(*) FROM (SELECT mz_from, mz_to, v, lead(mz_from) OVER w AS next_from, lead(v) OVER w AS next_v
		FROM %s WINDOW w AS (ORDER BY mz_from)) x WHERE next_from IS NOT NULL AND (mz_to <> next_from OR next_v <= v)`, hist)
	if err := conns[0].QueryRow(ctx, q).Scan(&disorder); err != nil || disorder != 0 {
		t.Fatalf("%d versions out of order in history (%v)", disorder, err)
	}
	return versions, distinct
}

// holdRowLock locks the rows of table (in database db) that match where,
// directly, until release: a write of them meanwhile waits.
func holdRowLock(t *testing.T, ctx context.Context, db, table, where string) (release func()) {
	t.Helper()
	conn := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, conn, "BEGIN", "SELECT FROM "+table+" WHERE "+where+" FOR UPDATE")
	return func() {
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			t.Errorf("releasing the row lock: %v", err)
		}
	}
}

// historyOf is the history relation of managed table name.
func historyOf(t *testing.T, ctx context.Context, conn *pgx.Conn, name string) string {
	t.Helper()
	var hist string
	if err := conn.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE name = $1 AND dropped_ts IS NULL", name).Scan(&hist); err != nil {
		t.Fatal(err)
	}
	return hist
}

// TestOCCNoOverDelete: five identical rows in a table without a key and
// five concurrent DELETEs of them: the row counts add up to exactly 5,
// the table ends empty and its history retracts each version once.
func TestOCCNoOverDelete(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--occ-max-concurrent", "5")
	setup := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE dup (x int)", "INSERT INTO dup SELECT 1 FROM generate_series(1, 5)"} {
		if _, err := execSimple(ctx, setup, sql); err != nil {
			t.Fatal(err)
		}
	}
	conns := make([]*pgx.Conn, 5)
	for i := range conns {
		conns[i] = connectTo(t, ctx, p.URL("postgres", db))
	}
	var wg sync.WaitGroup
	counts := make([]int64, len(conns))
	errs := make([]error, len(conns))
	start := make(chan struct{})
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tag, err := execSimple(ctx, conn, "DELETE FROM dup WHERE x = 1")
			counts[i], errs[i] = tag.RowsAffected(), err
		}()
	}
	close(start)
	wg.Wait()
	var total int64
	for i := range conns {
		if errs[i] != nil {
			t.Fatalf("DELETE %d: %v", i, errs[i])
		}
		total += counts[i]
	}
	if total != 5 {
		t.Fatalf("row counts %v add up to %d, want 5", counts, total)
	}
	hist := historyOf(t, ctx, setup, "dup")
	var left, current, retracted int
	if err := setup.QueryRow(ctx, "SELECT count(*) FROM dup").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left (%v)", left, err)
	}
	q := fmt.Sprintf("SELECT count(*) FILTER (WHERE mz_to = 9223372036854775807), count(*) FILTER (WHERE mz_to < 9223372036854775807) FROM %s", hist)
	if err := setup.QueryRow(ctx, q).Scan(&current, &retracted); err != nil {
		t.Fatal(err)
	}
	if current != 0 || retracted != 5 {
		t.Fatalf("history: %d current, %d retracted versions; want 0 and 5", current, retracted)
	}
}

// TestOCCCommitDuringWrite: a DELETE paused by the failpoint between its
// statement and its COMMIT; an INSERT of a matching row commits meanwhile.
// Nothing is validated at COMMIT, so the DELETE commits as it ran, without
// a retry: it deleted the two rows it saw, and the new row, whose T is not
// below the DELETE's, is left; history says the same at every time.
func TestOCCCommitDuringWrite(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	pause := filepath.Join(t.TempDir(), "pause")
	p := launchProxy(t, append(os.Environ(), "MZPROXY_METRICS_LISTEN=", "MZPROXY_TEST_OCC_PAUSE_FILE="+pause),
		[]string{"--listen", "127.0.0.1:0", "--backend", directURL("postgres", db), "--log-level", "debug", "--occ-max-concurrent", "2"})
	setup := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE fc (x int)", "INSERT INTO fc VALUES (1), (1), (2)"} {
		if _, err := execSimple(ctx, setup, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deleter := connectTo(t, ctx, p.URL("postgres", db))
	type result struct {
		tag pgconn.CommandTag
		err error
	}
	done := make(chan result, 1)
	go func() {
		tag, err := execSimple(ctx, deleter, "DELETE FROM fc WHERE x = 1 "+"/*mzproxy:occ-pause*/")
		done <- result{tag, err}
	}()
	eventually(t, 10*time.Second, "the DELETE reaches the failpoint", func() bool {
		_, err := os.Stat(pause + ".paused")
		return err == nil
	})
	if tag, err := execSimple(ctx, setup, "INSERT INTO fc VALUES (1)"); err != nil || tag.String() != "INSERT 0 1" {
		t.Fatalf("INSERT while the DELETE is paused: %v %v", tag, err)
	}
	if err := os.Remove(pause); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the DELETE did not finish")
	}
	if r.err != nil || r.tag.String() != "DELETE 2" {
		t.Fatalf("DELETE: %q %v; want DELETE 2 (the rows it saw)", r.tag, r.err)
	}
	if strings.Contains(p.log.String(), "optimistic write retried") {
		t.Fatalf("the DELETE was retried:\n%s", p.log.String())
	}
	var left int
	if err := setup.QueryRow(ctx, "SELECT count(*) FROM fc WHERE x = 1").Scan(&left); err != nil || left != 1 {
		t.Fatalf("%d rows with x = 1 left (%v), want the inserted one", left, err)
	}
	// At no timestamp does history hold the new row beside the deleted
	// ones (three rows with x = 1): the INSERT is after the DELETE.
	var bad int
	q := fmt.Sprintf(`SELECT count(*) FROM (SELECT t, count(*) FILTER (WHERE x = 1) AS ones FROM
		(SELECT DISTINCT mz_from AS t FROM %[1]s) ts JOIN %[1]s h ON h.mz_from <= ts.t AND h.mz_to > ts.t GROUP BY t) c
		WHERE ones > 2`, historyOf(t, ctx, setup, "fc"))
	if err := setup.QueryRow(ctx, q).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d timestamps with an impossible set of rows (%v)", bad, err)
	}
}

// retryable reports whether err is a serialization failure or deadlock,
// which a client retries: the transaction wrote nothing.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// TestOCCBank: 10 accounts, concurrent transfers in explicit transactions
// through two proxy processes (one client kind per proxy: simple-protocol
// query strings, pgx transactions with parameters), and concurrent
// readers: the total is the same in every read and at the end, and each
// balance is exactly what the acknowledged transfers made it.
func TestOCCBank(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p1, p2 := startProxy(t), startProxy(t)
	setup := connectTo(t, ctx, p1.URL("postgres", db))
	const accounts, initial = 10, 100
	for _, sql := range []string{
		"CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL)",
		fmt.Sprintf("INSERT INTO acct SELECT g, %d FROM generate_series(0, %d) g", initial, accounts-1),
	} {
		if _, err := execSimple(ctx, setup, sql); err != nil {
			t.Fatal(err)
		}
	}
	const workers, transfers = 3, 25
	var mu sync.Mutex
	delta := make([]int, accounts) // from acknowledged transfers
	conflicts := 0
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers+4)
	transfer := func(conn *pgx.Conn, simpleProtocol bool, from, to, amount int) error {
		if simpleProtocol {
			for _, sql := range []string{
				"BEGIN",
				fmt.Sprintf("SELECT balance FROM acct WHERE id = %d", from),
				fmt.Sprintf("UPDATE acct SET balance = balance - %d WHERE id = %d", amount, from),
				fmt.Sprintf("UPDATE acct SET balance = balance + %d WHERE id = %d", amount, to),
				"COMMIT",
			} {
				if _, err := execSimple(ctx, conn, sql); err != nil {
					_, _ = execSimple(ctx, conn, "ROLLBACK")
					return err
				}
			}
			return nil
		}
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var b int
			if err := tx.QueryRow(ctx, "SELECT balance FROM acct WHERE id = $1", from).Scan(&b); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "UPDATE acct SET balance = balance - $1 WHERE id = $2", amount, from); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE acct SET balance = balance + $1 WHERE id = $2", amount, to)
			return err
		})
	}
	for w := 0; w < 2*workers; w++ {
		p := p1
		if w%2 == 1 {
			p = p2
		}
		conn := connectTo(t, ctx, p.URL("postgres", db))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < transfers; {
				from, to, amount := (w*7+i*3)%accounts, (w*5+i*7+1)%accounts, 1+(w+i)%9
				if from == to {
					to = (to + 1) % accounts
				}
				err := transfer(conn, w%2 == 0, from, to, amount)
				switch {
				case err == nil:
					mu.Lock()
					delta[from] -= amount
					delta[to] += amount
					mu.Unlock()
					i++
				case retryable(err):
					mu.Lock()
					conflicts++
					mu.Unlock()
				default:
					errs <- fmt.Errorf("transfer: %w", err)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	reads := 0
	for _, p := range []*proxyProc{p1, p2} {
		conn := connectTo(t, ctx, p.URL("postgres", db))
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var total int
				if err := conn.QueryRow(ctx, "SELECT sum(balance) FROM acct").Scan(&total); err != nil {
					errs <- fmt.Errorf("reader: %w", err)
					return
				}
				if total != accounts*initial {
					errs <- fmt.Errorf("a reader saw a total of %d", total)
					return
				}
				mu.Lock()
				reads++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows, err := setup.Query(ctx, "SELECT id, balance FROM acct ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for rows.Next() {
		var id, b int
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		total += b
		if b != initial+delta[id] {
			t.Errorf("account %d: balance %d, acknowledged transfers make it %d", id, b, initial+delta[id])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if total != accounts*initial {
		t.Fatalf("total %d, want %d", total, accounts*initial)
	}
	t.Logf("%d transfers, %d retried after 40001/40P01, %d reads", 2*workers*transfers, conflicts, reads)
}

// TestOCCPgbench: pgbench's TPC-B-like script through mzproxy with
// --max-tries completes without failed transactions, and the balances add
// up: the history's deltas sum to each table's balances.
func TestOCCPgbench(t *testing.T) {
	if testing.Short() {
		t.Skip("pgbench runs for about 10s; skipped with -short")
	}
	if _, err := exec.LookPath("pgbench"); err != nil {
		t.Skip("pgbench is not installed")
	}
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	host, port := p.hostPort()
	pgbench := pgbenchRunner(t, ctx, host, port, db, 120*time.Second)
	pgbench("-i", "-s", "1", "-q")
	for _, mode := range []string{"simple", "prepared"} {
		out := pgbench("-n", "-T", "4", "-c", "4", "-j", "2", "-M", mode, "--max-tries", "1000")
		if !strings.Contains(out, "number of failed transactions: 0") {
			t.Fatalf("pgbench -M %s:\n%s", mode, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "number of transactions actually processed") || strings.HasPrefix(line, "number of transactions retried") || strings.HasPrefix(line, "tps") {
				t.Logf("-M %s: %s", mode, line)
			}
		}
	}
	conn := connectTo(t, ctx, p.URL("postgres", db))
	var hist, acct, tell, branch, n int64
	err := conn.QueryRow(ctx, `SELECT (SELECT coalesce(sum(delta), 0) FROM pgbench_history), (SELECT count(*) FROM pgbench_history),
		(SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(tbalance) FROM pgbench_tellers), (SELECT sum(bbalance) FROM pgbench_branches)`).
		Scan(&hist, &n, &acct, &tell, &branch)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || hist != acct || hist != tell || hist != branch {
		t.Fatalf("%d history rows with deltas summing to %d; balances: accounts %d, tellers %d, branches %d", n, hist, acct, tell, branch)
	}
}

// TestOCCCancel: the cancellation contract. A cancel while the statement
// runs, at the failpoint before the commit, and while the statement waits
// for another transaction's row lock: each time the client gets 57014 and
// nothing was written; the session goes on working.
func TestOCCCancel(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	pause := filepath.Join(t.TempDir(), "pause")
	p := launchProxy(t, append(os.Environ(), "MZPROXY_METRICS_LISTEN=", "MZPROXY_TEST_OCC_PAUSE_FILE="+pause),
		[]string{"--listen", "127.0.0.1:0", "--backend", directURL("postgres", db), "--log-level", "debug", "--occ-max-retries", "1000000",
			"--tick-interval", "0"})
	setup := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE cc (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO cc VALUES (1, 0)"} {
		if _, err := execSimple(ctx, setup, sql); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := connectCancelable(t, ctx, p.URL("postgres", db))
	if err != nil {
		t.Fatal(err)
	}
	direct := connectTo(t, ctx, directURL("postgres", db))
	versions := func() int64 {
		var n int64
		if err := direct.QueryRow(ctx, "SELECT count(*) FROM "+historyOf(t, ctx, direct, "cc")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	unchanged := func(what string, before int64) {
		t.Helper()
		var v int
		if err := setup.QueryRow(ctx, "SELECT v FROM cc WHERE id = 1").Scan(&v); err != nil || v != 0 {
			t.Fatalf("%s: v = %d (%v), want 0: the canceled write was applied", what, v, err)
		}
		if n := versions(); n != before {
			t.Fatalf("%s: history went from %d to %d versions", what, before, n)
		}
	}
	// cancelWhen runs the UPDATE sql and cancels it once ready() holds.
	cancelWhen := func(what, sql string, ready func() bool) {
		t.Helper()
		before := versions()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := execSimple(cctx, conn, sql)
			done <- err
		}()
		eventually(t, 10*time.Second, what+": the write reaches the point to cancel", ready)
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the canceled write did not end", what)
		}
		wantCode(t, err, "57014")
		unchanged(what, before)
	}

	cancelWhen("while the statement runs", "UPDATE cc SET v = v + 1 + (SELECT 0 FROM pg_sleep(30)) WHERE id = 1 /*occ-cancel-1*/",
		func() bool { return activeQueries(t, ctx, direct, "occ-cancel-1") == 1 })

	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cancelWhen("at the failpoint before the append", "UPDATE cc SET v = v + 1 WHERE id = 1 /*mzproxy:occ-pause*/", func() bool {
		_, err := os.Stat(pause + ".paused")
		return err == nil
	})
	_ = os.Remove(pause)

	// Hold the row directly: the UPDATE waits for its lock until the cancel.
	release := holdRowLock(t, ctx, db, "cc", "id = 1")
	cancelWhen("while waiting for a row lock", "UPDATE cc SET v = v + 1 WHERE id = 1 /*occ-cancel-3*/", func() bool {
		return activeQueries(t, ctx, direct, "occ-cancel-3") == 1
	})
	release()

	// Cancels at random moments, also while the append is in flight: the
	// client is told the truth each time (success: the row was written;
	// 57014: it was not).
	rng := rand.New(rand.NewSource(1))
	succeeded := 0
	for i := 0; i < 40; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Duration(rng.Intn(3000))*time.Microsecond)
		_, err := execSimple(cctx, conn, "UPDATE cc SET v = v + 1 WHERE id = 1")
		cancel()
		switch {
		case err == nil:
			succeeded++
		case sqlState(err) == "57014" || errors.Is(err, context.DeadlineExceeded):
		default:
			t.Fatalf("write %d: %v", i, err)
		}
		var v int
		if err := setup.QueryRow(ctx, "SELECT v FROM cc WHERE id = 1").Scan(&v); err != nil || v != succeeded {
			t.Fatalf("after write %d (%v): v = %d (%v), but %d writes were acknowledged", i, err, v, err, succeeded)
		}
	}
	t.Logf("%d of 40 writes under random cancels succeeded", succeeded)
	base := succeeded

	// The session still works, and a write now commits.
	if tag, err := execSimple(ctx, conn, "UPDATE cc SET v = v + 1 WHERE id = 1 RETURNING v"); err != nil || tag.String() != "UPDATE 1" {
		t.Fatalf("after the cancels: %q %v", tag, err)
	}
	var v int
	if err := setup.QueryRow(ctx, "SELECT v FROM cc WHERE id = 1").Scan(&v); err != nil || v != base+1 {
		t.Fatalf("v = %d (%v), want %d", v, err, base+1)
	}
}

// TestOCCTransactions: a transaction block's writes commit at one
// timestamp or not at all; a commit elsewhere does not make it fail, and a
// block that waits for another's row lock commits after it; savepoints
// undo the writes after them.
func TestOCCTransactions(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	b := connectTo(t, ctx, p.URL("postgres", db))
	run := func(conn *pgx.Conn, sqls ...string) error {
		t.Helper()
		for _, sql := range sqls {
			if _, err := execSimple(ctx, conn, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		return nil
	}
	must := func(conn *pgx.Conn, sqls ...string) {
		t.Helper()
		if err := run(conn, sqls...); err != nil {
			t.Fatal(err)
		}
	}
	rows := func(table string) string {
		t.Helper()
		var got string
		if err := b.QueryRow(ctx, "SELECT coalesce(string_agg(x::text, ',' ORDER BY x), '') FROM "+table).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	must(a, "CREATE TABLE tx1 (x int)", "CREATE TABLE tx2 (x int)")

	// A write to another table commits between the block's write and its
	// COMMIT: both commit (nothing is validated against other tables).
	must(a, "BEGIN", "INSERT INTO tx1 VALUES (1)", "INSERT INTO tx1 VALUES (2)")
	var inBlock string
	if err := a.QueryRow(ctx, "SELECT string_agg(x::text, ',' ORDER BY x) FROM tx1").Scan(&inBlock); err != nil || inBlock != "1,2" {
		t.Fatalf("the block reads %q (%v), want its own writes 1,2", inBlock, err)
	}
	must(b, "INSERT INTO tx2 VALUES (9)")
	must(a, "COMMIT")
	if got := rows("tx1"); got != "1,2" {
		t.Fatalf("tx1 = %q after COMMIT, want 1,2", got)
	}
	// The block's rows are at one timestamp.
	var stamps int
	if err := b.QueryRow(ctx, fmt.Sprintf("SELECT count(DISTINCT mz_from) FROM %s", historyOf(t, ctx, b, "tx1"))).Scan(&stamps); err != nil || stamps != 1 {
		t.Fatalf("the block's rows are at %d timestamps (%v), want 1", stamps, err)
	}
	must(a, "DELETE FROM tx1")

	// Two blocks updating the same row: the second waits for the first's
	// row lock and commits after it (READ COMMITTED), both increments land.
	must(a, "CREATE TABLE tx3 (id int PRIMARY KEY, v int)", "INSERT INTO tx3 VALUES (1, 0)")
	must(a, "BEGIN", "UPDATE tx3 SET v = v + 1 WHERE id = 1")
	second := make(chan error, 1)
	go func() { second <- run(b, "BEGIN", "UPDATE tx3 SET v = v + 10 WHERE id = 1", "COMMIT") }()
	time.Sleep(100 * time.Millisecond)
	must(a, "COMMIT")
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	var v int
	if err := a.QueryRow(ctx, "SELECT v FROM tx3").Scan(&v); err != nil || v != 11 {
		t.Fatalf("v = %d (%v), want 11", v, err)
	}

	// Savepoints: the slot taken before the savepoint survives ROLLBACK TO;
	// one taken after it is rolled back with it, and taken again.
	must(a, "BEGIN", "INSERT INTO tx1 VALUES (3)", "SAVEPOINT s", "INSERT INTO tx1 VALUES (4)", "ROLLBACK TO SAVEPOINT s",
		"INSERT INTO tx1 VALUES (5)", "COMMIT")
	must(a, "BEGIN", "SAVEPOINT s", "INSERT INTO tx1 VALUES (6)", "ROLLBACK TO SAVEPOINT s", "INSERT INTO tx1 VALUES (7)", "COMMIT")
	must(a, "BEGIN", "SAVEPOINT s", "INSERT INTO tx1 VALUES (8)", "ROLLBACK TO SAVEPOINT s", "COMMIT")
	if got := rows("tx1"); got != "3,5,7" {
		t.Fatalf("tx1 = %q, want 3,5,7", got)
	}
	var current int
	if err := b.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE mz_to = 9223372036854775807", historyOf(t, ctx, b, "tx1"))).Scan(&current); err != nil || current != 3 {
		t.Fatalf("history has %d current versions (%v), want 3", current, err)
	}

	// A query string that ends the block writes and commits.
	must(a, "BEGIN", "INSERT INTO tx2 VALUES (10)")
	must(a, "INSERT INTO tx2 VALUES (11); COMMIT")
	if got := rows("tx2"); got != "9,10,11" {
		t.Fatalf("tx2 = %q, want 9,10,11", got)
	}
	// ROLLBACK discards.
	must(a, "BEGIN", "DELETE FROM tx2", "ROLLBACK")
	if got := rows("tx2"); got != "9,10,11" {
		t.Fatalf("tx2 = %q after ROLLBACK, want 9,10,11", got)
	}
	// mz_now() in a write is refused.
	wantCode(t, run(a, "INSERT INTO tx2 SELECT 1 WHERE mz_now() > 0"), "0A000")
}

// TestOCCExtended: autocommit writes over the extended protocol (pgx's
// prepared statements: Bind, Execute, Sync) take the same path, and none
// fails under contention.
// Each client gets, through RETURNING, the value its own committed attempt
// wrote: all values are distinct and make up exactly 1..N, so no client saw
// the answers of an attempt that lost.
func TestOCCExtended(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--occ-max-concurrent", "4", "--occ-max-retries", "1000")
	setup := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE ctr (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO ctr VALUES (1, 0)"} {
		if _, err := execSimple(ctx, setup, sql); err != nil {
			t.Fatal(err)
		}
	}
	const clients, each = 4, 30
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		conn := connectTo(t, ctx, p.URL("postgres", db))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var v int
				if err := conn.QueryRow(ctx, "UPDATE ctr SET v = v + $1 WHERE id = $2 RETURNING v", 1, 1).Scan(&v); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				dup := seen[v]
				seen[v] = true
				mu.Unlock()
				if dup {
					errs <- fmt.Errorf("value %d returned twice", v)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for v := 1; v <= clients*each; v++ {
		if !seen[v] {
			t.Fatalf("value %d never returned", v)
		}
	}
	var v int
	if err := setup.QueryRow(ctx, "SELECT v FROM ctr").Scan(&v); err != nil || v != clients*each {
		t.Fatalf("v = %d (%v), want %d", v, err, clients*each)
	}
	// A failing write over the extended protocol reports its own error
	// and leaves the session usable.
	_, err := setup.Exec(ctx, "INSERT INTO ctr VALUES ($1, $2)", 1, 0)
	wantCode(t, err, "23505")
	if _, err := setup.Exec(ctx, "INSERT INTO ctr VALUES ($1, $2)", 2, 0); err != nil {
		t.Fatal(err)
	}
}

// TestOCCConcurrentInserts: 16 sessions insert concurrently, each in its
// own backend session: every acknowledged row is there, a PRIMARY KEY
// violation or a bad value fails only its own statement (with the
// backend's SQLSTATE, constraint and position), a trailing comment does no
// harm, and a session's search_path, however set, decides which table it
// writes.
func TestOCCConcurrentInserts(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup,
		"CREATE TABLE g (id int PRIMARY KEY, who int NOT NULL)",
		"INSERT INTO g VALUES (0, -1)",
		"CREATE SCHEMA other",
		"CREATE TABLE other.g (id int PRIMARY KEY, who int NOT NULL)")
	const sessions, each = 16, 10
	const bad = "INSERT INTO g VALUES ('x', 1)"
	wantPos := int32(strings.Index(bad, "'x'") + 1)
	var wg sync.WaitGroup
	errs := make(chan error, sessions*each)
	for c := 0; c < sessions; c++ {
		conn := connectTo(t, ctx, p.URL("postgres", db))
		if c == 1 {
			mustExec(t, ctx, conn, "SET search_path = other, public")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var pe *pgconn.PgError
				switch {
				case c == 0 && i == each/2: // among the others' inserts: id 0 exists
					_, err := execSimple(ctx, conn, "INSERT INTO g VALUES (0, 0)")
					if !errors.As(err, &pe) || pe.Code != "23505" || pe.ConstraintName != "g_pkey" {
						errs <- fmt.Errorf("duplicate key insert: %v, want 23505 on g_pkey", err)
					}
				case c == 2 && i == each/2:
					_, err := execSimple(ctx, conn, bad)
					if !errors.As(err, &pe) || pe.Code != "22P02" || pe.Position != wantPos {
						errs <- fmt.Errorf("bad integer: %v (%+v), want 22P02 at position %d", err, pe, wantPos)
					}
				}
				id := 1 + c*each + i
				tag, err := execSimple(ctx, conn, fmt.Sprintf("INSERT INTO g VALUES (%d, %d) -- trailing comment", id, c))
				if err != nil || tag.String() != "INSERT 0 1" {
					errs <- fmt.Errorf("session %d insert %d: tag %q, %v", c, id, tag, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var public, other, who int
	if err := setup.QueryRow(ctx, "SELECT (SELECT count(*) FROM public.g), (SELECT count(*) FROM other.g), (SELECT who FROM g WHERE id = 0)").Scan(&public, &other, &who); err != nil {
		t.Fatal(err)
	}
	if public != 1+(sessions-1)*each || other != each || who != -1 {
		t.Fatalf("public.g has %d rows, other.g %d, row 0's who is %d; want %d, %d and -1 (the failed insert changed nothing)",
			public, other, who, 1+(sessions-1)*each, each)
	}

	// The search_path of each insert is the session's at that moment.
	conn := connectTo(t, ctx, p.URL("postgres", db))
	for i, step := range []struct{ before, want string }{
		{"", "public"},
		{"SET search_path = other, public", "other"},
		{"", "other"},
		{"RESET search_path", "public"},
		{"SELECT set_config('search_path', 'other', false)", "other"},
		{"SELECT set_config('search_path', 'public', false)", "public"},
	} {
		if step.before != "" {
			mustExec(t, ctx, conn, step.before)
		}
		id := 20000 + i
		mustExec(t, ctx, conn, fmt.Sprintf("INSERT INTO g VALUES (%d, 0)", id))
		var in string
		q := fmt.Sprintf("SELECT CASE WHEN EXISTS (SELECT FROM public.g WHERE id = %d) THEN 'public' ELSE 'other' END", id)
		if err := setup.QueryRow(ctx, q).Scan(&in); err != nil || in != step.want {
			t.Fatalf("after %q, the insert went to %s.g (%v), want %s.g", step.before, in, err, step.want)
		}
	}
}

// TestOCCSessionState: an autocommit write runs in its session's own
// backend session: under its session's statement_timeout (stuck on a row
// lock, it fails alone with 57014 and writes nothing while another
// session's write commits), with its sequences (currval sees a serial
// insert) and its notices (a trigger's reaches the client).
func TestOCCSessionState(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup,
		"CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO t VALUES (1, 0), (2, 0)",
		"CREATE TABLE s (id serial, x int)",
		"CREATE TABLE tr (x int)",
		"CREATE FUNCTION tell() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE NOTICE 'inserted %', NEW.x; RETURN NEW; END$$",
		"CREATE TRIGGER tell BEFORE INSERT ON tr FOR EACH ROW EXECUTE FUNCTION tell()")

	locker := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, locker, "BEGIN", "SELECT FROM t WHERE id = 1 FOR UPDATE")
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "SET statement_timeout = '500ms'")
	failed := make(chan error, 1)
	go func() {
		_, err := execSimple(ctx, a, "UPDATE t SET v = 1 WHERE id = 1")
		failed <- err
	}()
	mustExec(t, ctx, setup, "UPDATE t SET v = 2 WHERE id = 2")
	select {
	case err := <-failed:
		wantCode(t, err, "57014")
	case <-time.After(30 * time.Second):
		t.Fatal("the update stuck on a lock outlived its statement_timeout")
	}
	mustExec(t, ctx, locker, "COMMIT")
	var v1, v2 int
	if err := setup.QueryRow(ctx, "SELECT (SELECT v FROM t WHERE id = 1), (SELECT v FROM t WHERE id = 2)").Scan(&v1, &v2); err != nil || v1 != 0 || v2 != 2 {
		t.Fatalf("rows: id 1 v = %d, id 2 v = %d (%v); want 0 (timed out) and 2", v1, v2, err)
	}

	cfg, err := pgx.ParseConfig(p.URL("postgres", db))
	if err != nil {
		t.Fatal(err)
	}
	notices := make(chan string, 1)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices <- n.Message }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	mustExec(t, ctx, conn, "INSERT INTO s (x) VALUES (7)")
	var id int
	if err := conn.QueryRow(ctx, "SELECT currval('s_id_seq')", pgx.QueryExecModeSimpleProtocol).Scan(&id); err != nil || id != 1 {
		t.Fatalf("currval after the insert: %d (%v), want 1", id, err)
	}
	mustExec(t, ctx, conn, "INSERT INTO tr VALUES (5)")
	select {
	case n := <-notices:
		if n != "inserted 5" {
			t.Fatalf("notice %q", n)
		}
	default:
		t.Fatal("the trigger's notice did not reach the client")
	}
}

// TestWritesTwoProxies: two proxy processes on one database, 8 clients (4
// each; half of them pgx's default extended protocol, half simple) x 50
// increments of one row: all 400 land, and no client sees an error (no
// 40001: the writes queue on the row's lock across proxies, and each one's
// timestamp is chosen after it got the lock). History holds them in order.
func TestWritesTwoProxies(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	a, b := startProxy(t), startProxy(t)
	setup := connectTo(t, ctx, a.URL("postgres", db))
	mustExec(t, ctx, setup, "CREATE TABLE counter (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO counter VALUES (1, 0)")
	const clients, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		p := a
		if c%2 == 1 {
			p = b
		}
		conn := connectTo(t, ctx, p.URL("postgres", db))
		extended := c%4 < 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var err error
				if extended {
					_, err = conn.Exec(ctx, "UPDATE counter SET v = v + $1 WHERE id = $2", 1, 1)
				} else {
					_, err = execSimple(ctx, conn, "UPDATE counter SET v = v + 1 WHERE id = 1")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("an increment failed: %v", err)
	}
	var v int
	if err := setup.QueryRow(ctx, "SELECT v FROM counter").Scan(&v); err != nil || v != clients*each {
		t.Fatalf("counter = %d (%v), want %d", v, err, clients*each)
	}
	var disorder int
	q := fmt.Sprintf(`SELECT count(*) FROM (SELECT mz_to, v, lead(mz_from) OVER w AS next_from, lead(v) OVER w AS next_v
		FROM %s WINDOW w AS (ORDER BY mz_from)) x WHERE next_from IS NOT NULL AND (mz_to <> next_from OR next_v <= v)`,
		historyOf(t, ctx, setup, "counter"))
	if err := setup.QueryRow(ctx, q).Scan(&disorder); err != nil || disorder != 0 {
		t.Fatalf("%d versions out of order in history (%v)", disorder, err)
	}
}

// TestReadsDoNotAbortOrWaitForBlocks: a transaction block that writes and
// then sits idle neither makes reads of the present wait (mz_now(), a
// read-only transaction) nor is failed by them; its COMMIT then lands
// after every read that came before it.
func TestReadsDoNotAbortOrWaitForBlocks(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	writer := connectTo(t, ctx, p.URL("postgres", db))
	reader := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, writer, "CREATE TABLE rw (x int)", "BEGIN", "INSERT INTO rw VALUES (1)")
	var last int64
	for i := 0; i < 5; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := reader.QueryRow(rctx, "SELECT mz_now()::bigint", pgx.QueryExecModeSimpleProtocol).Scan(&last)
		cancel()
		if err != nil {
			t.Fatalf("mz_now() while a block that wrote is open: %v", err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int
	mustExec(t, ctx, reader, "BEGIN")
	if err := reader.QueryRow(rctx, "SELECT count(*) FROM rw", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a read-only transaction while a block that wrote is open: %d, %v", n, err)
	}
	mustExec(t, ctx, reader, "COMMIT")
	mustExec(t, ctx, writer, "INSERT INTO rw VALUES (2)", "COMMIT")
	var ts int64
	q := fmt.Sprintf("SELECT min(mz_from) FROM %s", historyOf(t, ctx, reader, "rw"))
	if err := reader.QueryRow(ctx, q).Scan(&ts); err != nil || ts <= last {
		t.Fatalf("the block committed at %d (%v), not after the reads at %d", ts, err, last)
	}
}
