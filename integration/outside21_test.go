package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// TestOutside21SlotCallKeepsSkewCheck: an ordinary role's two blocks
// each read the sum of two rows (100 each) at their timestamp, then each
// takes 150 from a different row and commits: write skew, which
// mzproxy's read-then-write check refuses (one COMMIT gets 40001). A call
// PUBLIC may make in the block between the read and the write (the
// pending write slot begin_write_occ(NULL, NULL) takes, the same request
// set by hand, begin_write(), which chooses T at once) no longer skips
// the check: never do both blocks commit, the errors are 40001 (the
// pending slot, checked at COMMIT) or 25000 (a T chosen before the
// check), and the sessions go on. In every pgx mode. On bb2708d the
// blocks with a call both committed (the sum -100).
func TestOutside21SlotCallKeepsSkewCheck(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	admin := connectTo(t, ctx, p.URL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)",
		"INSERT INTO "+tb+" VALUES (1, 100), (2, 100)",
		"GRANT SELECT, UPDATE ON "+tb+" TO "+role)
	calls := []string{
		"", // no call: the check as mzproxy makes it
		"SELECT mzproxy.begin_write_occ(NULL, NULL)",
		"SELECT pg_catalog.set_config('mzproxy.write_ts', '0 - pending', true)",
		"SELECT mzproxy.begin_write()",
	}
	for _, mode := range pgxModes {
		a := connectMode(t, ctx, p.URL(role, db), mode)
		b := connectMode(t, ctx, p.URL(role, db), mode)
		for _, call := range calls {
			what := fmt.Sprintf("%v, call %q", mode, call)
			mustExec(t, ctx, admin, "UPDATE "+tb+" SET v = 100")
			committed, errs := skewRound(ctx, []*pgx.Conn{a, b}, tb, call)
			for _, err := range errs {
				if c := sqlState(err); c != "40001" && c != "25000" {
					t.Errorf("%s: %v, want 40001 or 25000", what, err)
				}
			}
			if committed > 1 {
				t.Errorf("%s: both blocks committed (write skew)", what)
			}
			sum := count(t, ctx, admin, "SELECT sum(v)::int FROM "+tb, pgx.QueryExecModeSimpleProtocol)
			if sum != 200-150*committed {
				t.Errorf("%s: sum %d with %d blocks committed", what, sum, committed)
			}
			for _, c := range []*pgx.Conn{a, b} {
				if n := count(t, ctx, c, "SELECT count(*)::int FROM "+tb, mode); n != 2 {
					t.Fatalf("%s: the session's next read: %d rows", what, n)
				}
			}
		}
	}
}

// skewRound runs the two blocks of TestOutside21SlotCallKeepsSkewCheck,
// their statements interleaved (both read before either writes), and
// returns how many committed and the errors of those that did not.
func skewRound(ctx context.Context, conns []*pgx.Conn, tb, call string) (int, []error) {
	txs := make([]pgx.Tx, len(conns))
	failed := make([]error, len(conns))
	step := func(i int, f func(tx pgx.Tx) error) {
		if failed[i] == nil {
			failed[i] = f(txs[i])
		}
	}
	for i, c := range conns {
		tx, err := c.Begin(ctx)
		txs[i], failed[i] = tx, err
	}
	for i := range conns {
		step(i, func(tx pgx.Tx) error {
			var sum int
			return tx.QueryRow(ctx, "SELECT sum(v)::int FROM "+tb).Scan(&sum)
		})
	}
	if call != "" {
		for i := range conns {
			step(i, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, call); return err })
		}
	}
	for i := range conns {
		step(i, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET v = v - 150 WHERE k = %d", tb, i+1))
			return err
		})
	}
	committed := 0
	var errs []error
	for i := range conns {
		step(i, func(tx pgx.Tx) error { return tx.Commit(ctx) })
		if failed[i] == nil {
			committed++
			continue
		}
		if txs[i] != nil {
			txs[i].Rollback(ctx) //nolint:errcheck // the block failed
		}
		errs = append(errs, failed[i])
	}
	return committed, errs
}

// TestOutside21TimeoutInGatedPin: a block's first read whose pin waits
// for the writers' gate (another session's block holds it from its DDL's
// T to its end) is interrupted by the client's statement_timeout, and by
// a cancel sent once pg_stat_activity shows the wait (as pgjdbc's
// setQueryTimeout timer sends one): 57014, the block aborted (25P02)
// until ROLLBACK, no hold left, the session goes on; never a statement
// that waits on past its timeout or cancel for the gate (session 20 saw
// a JDBC timeout's cancel lost in that wait once). In pgx's five modes,
// and BEGIN and the read in one simple Query (JDBC's batch). A read that
// does not wait for the gate may answer instead.
func TestOutside21TimeoutInGatedPin(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)", "INSERT INTO "+tb+" VALUES (1, 0), (2, 0)",
		"CREATE TABLE "+tb+"_hold (k int)", "INSERT INTO "+tb+"_hold VALUES (1)")
	read := "SELECT count(*)::int FROM " + tb
	type shape struct {
		mode  pgx.QueryExecMode
		batch bool // BEGIN and the read in one request (a simple Query, or a pgx batch: one Sync, as JDBC sends them)
	}
	var shapes []shape
	for _, m := range pgxModes {
		shapes = append(shapes, shape{m, false}, shape{m, true})
	}
	waited := 0
	for i, sh := range shapes {
		for _, how := range []string{"statement_timeout", "cancel"} {
			what := fmt.Sprintf("%v (batch %v), %s", sh.mode, sh.batch, how)
			holder := connectTo(t, ctx, p.URL("postgres", db))
			// An ALTER of a written table chooses the block's T: the gate is
			// the block's till its end.
			mustExec(t, ctx, holder, "BEGIN", fmt.Sprintf("ALTER TABLE %s_hold ADD COLUMN c%d_%s int", tb, i, how[:1]))
			var gateHeld int
			// (The pid a client of mzproxy sees is not its backend's.)
			if err := direct.QueryRow(ctx, `SELECT count(*)::int FROM pg_locks WHERE granted
				AND relation = 'mzproxy.gate'::regclass AND mode = 'RowShareLock'`).Scan(&gateHeld); err != nil || gateHeld < 1 {
				t.Fatalf("%s: the holder's block does not hold the gate (%d, %v)", what, gateHeld, err)
			}
			victim := connectCancelableMode(t, ctx, p.URL("postgres", db), sh.mode)
			if how == "statement_timeout" {
				mustExec(t, ctx, victim, "SET statement_timeout = '300ms'")
			}
			if !sh.batch {
				mustExec(t, ctx, victim, "BEGIN")
			}
			stmtCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				var n int
				var err error
				switch {
				case sh.batch && sh.mode == pgx.QueryExecModeSimpleProtocol:
					_, err = victim.Exec(stmtCtx, "BEGIN; "+read, pgx.QueryExecModeSimpleProtocol)
				case sh.batch:
					b := &pgx.Batch{}
					b.Queue("BEGIN")
					b.Queue(read).QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
					err = victim.SendBatch(stmtCtx, b).Close()
				default:
					err = victim.QueryRow(stmtCtx, read, sh.mode).Scan(&n)
				}
				done <- err
			}()
			sawWait := make(chan bool, 1)
			go func() { sawWait <- whenGateWait(stmtCtx, db, cancel, how == "cancel") }()
			var got error
			select {
			case got = <-done:
			case <-time.After(30 * time.Second):
				// Lost: the read waits on for the gate. Release it to end the test.
				t.Errorf("%s: the read still waits 30 s later (its %s lost)", what, how)
				mustExec(t, ctx, holder, "ROLLBACK")
				got = <-done
			}
			cancel()
			if <-sawWait {
				waited++
			}
			if got == nil {
				t.Logf("%s: answered (no wait for the gate)", what)
			} else {
				if c := sqlState(got); c != "57014" {
					t.Errorf("%s: %v, want 57014", what, got)
				}
				_, err := victim.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol)
				if c := sqlState(err); c != "25P02" {
					t.Errorf("%s: the block's next statement: %v, want 25P02", what, err)
				}
			}
			mustExec(t, ctx, victim, "ROLLBACK", "RESET statement_timeout")
			mustExec(t, ctx, holder, "ROLLBACK")
			if n := count(t, ctx, victim, read, sh.mode); n != 2 {
				t.Errorf("%s: the session's next read: %d rows", what, n)
			}
			p.awaitHolds(t, 0, "after "+what)
		}
	}
	t.Logf("%d of %d statements seen waiting for the gate", waited, 2*len(shapes))
	if waited == 0 {
		t.Errorf("no statement was seen waiting for the gate: the test tested nothing")
	}
}

// whenGateWait polls pg_locks of database db until a client's backend
// waits for mzproxy.gate in EXCLUSIVE mode (a pin) and then calls cancel if
// cancelIt, for up to 20 s or until ctx ends; it reports whether it saw
// the wait.
func whenGateWait(ctx context.Context, db string, cancel context.CancelFunc, cancelIt bool) bool {
	conn, err := pgx.Connect(ctx, directURL("postgres", db))
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		// (mzproxy's own tick waits for the gate too, briefly, on a
		// connection named proxy.InternalApplicationName: not counted.)
		if err := conn.QueryRow(ctx, `SELECT count(*)::int FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND l.relation = 'mzproxy.gate'::regclass AND l.mode = 'ExclusiveLock'
			  AND a.application_name IS DISTINCT FROM 'mzproxy internal'`).Scan(&n); err != nil {
			return false
		}
		if n > 0 {
			if cancelIt {
				cancel()
			}
			return true
		}
	}
	return false
}

// connectCancelableMode is connectCancelable with mode as the
// connection's default (what a pgx batch runs in).
func connectCancelableMode(t *testing.T, ctx context.Context, url string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 20 * time.Second}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestOutside21JDBCTimeoutInGatedPin: TestOutside21TimeoutInGatedPin's
// wait through pgjdbc (testdata/java/Gate21.java): a block's first read
// (BEGIN and the read in one batch) waits for the writers' gate another
// block holds; setQueryTimeout's timer and Statement.cancel() once the
// wait is seen answer 57014, the block is aborted (25P02), and the
// session goes on. Session 20 saw such a timeout lost once.
func TestOutside21JDBCTimeoutInGatedPin(t *testing.T) {
	t.Parallel()
	command, err := jdbcCommand()
	requireDriver(t, err, "apt-get install -y default-jre-headless libpostgresql-jdbc-java")
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	tb := tableName(t)
	mustExec(t, ctx, connectTo(t, ctx, p.URL("postgres", db)),
		"CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)", "INSERT INTO "+tb+" VALUES (1, 0), (2, 0)",
		"CREATE TABLE "+tb+"_hold (k int)", "INSERT INTO "+tb+"_hold VALUES (1)")
	host, port := p.hostPort()
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, command[0], "-cp", jdbcJar, "Gate21.java",
		fmt.Sprintf("jdbc:postgresql://%s:%s/%s?user=postgres&sslmode=disable", host, port, db), tb)
	cmd.Dir = filepath.Join("testdata", "java")
	cmd.Env = append(os.Environ(), "PGOPTIONS=", "JAVA_TOOL_OPTIONS=-Xshare:auto -XX:TieredStopAtLevel=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := strings.TrimSpace(stdout.String())
	want := []string{
		"cancel: stmt=57014 ERROR: canceling statement due to user request; in_block=25P02 ERROR: current transaction is aborted, commands ignored until end of transaction block; next=2",
		"query_timeout: stmt=57014 ERROR: canceling statement due to user request; in_block=25P02 ERROR: current transaction is aborted, commands ignored until end of transaction block; next=2",
	}
	if out != strings.Join(want, "\n") {
		t.Errorf("through mzproxy:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	t.Logf("through mzproxy:\n%s", out)
}
