package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// TestCancel20AnyPointInBlock: a cancel (pgx's, at a context's end) that
// lands anywhere in a block's statement, from before its first message
// reaches the server to after its answer: the read's pin and guard, the
// write's slot (deferred after a read), a prepare's round trip, queued in
// mzproxy or running in the backend. Whatever point it hits, the client's
// answer and the block's state must be one PostgreSQL gives for some
// point: the statement answered (or not sent: pgx's "context already
// done") and the block going on, or 57014 and the block aborted (25P02
// until ROLLBACK), the connection open. The cancel comes at a random time
// in the first 3 ms, so the test asserts nothing of where it lands, only
// that every answer is one of those. Directly, then through mzproxy with
// and without the event loop, in pgx's five modes, a read and a write of
// a managed table, first in its block or after a read or a write. On
// 126767b a simple read's cancel that met the transaction's pin before it
// was sent answered 57014 and left the backend's block going (the next
// statement answered, not 25P02).
func TestCancel20AnyPointInBlock(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	proxies := []*proxyProc{startProxy(t), startProxy(t, "--event-loop=false")}
	type target struct {
		name, url string
	}
	var targets []target
	for i, p := range append([]*proxyProc{nil}, proxies...) {
		db := freshDatabase(t, ctx)
		u := directURL("postgres", db)
		name := "direct"
		if p != nil {
			u = p.URL("postgres", db)
			name = []string{"", "mzproxy", "mzproxy/event-loop=false"}[i]
		}
		mustExec(t, ctx, connectTo(t, ctx, u), "CREATE TABLE any20 (k int PRIMARY KEY, v int)", "INSERT INTO any20 VALUES (1, 0), (2, 0)")
		targets = append(targets, target{name, u})
	}
	const read, write = "SELECT v FROM any20 WHERE k = $1", "UPDATE any20 SET v = v + 1 WHERE k = $1"
	// The canceled statement, and what the block ran before it: nothing
	// (its pin, or its first write's slot), a read (a read-then-write
	// block's deferred slot), a write (a read after a write).
	steps := []struct{ before, op string }{{"", read}, {"", write}, {read, write}, {write, read}}
	var wg sync.WaitGroup
	for _, tg := range targets {
		for _, mode := range pgxModes {
			for _, step := range steps {
				n := 15
				if mode == pgx.QueryExecModeSimpleProtocol && step.before == "" && step.op == read {
					n = 200 // where 126767b broke: its window is narrow
				}
				name := fmt.Sprintf("%s/%s/%s", tg.name, mode, strings.Fields(step.op)[0])
				if step.before != "" {
					name += "_after_" + strings.Fields(step.before)[0]
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := cancelAnyPoint(ctx, tg.url, mode, step.before, step.op, n); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}()
			}
		}
	}
	wg.Wait()
	for _, p := range proxies {
		p.mustAlive(t, ctx)
	}
}

// cancelAnyPoint runs n blocks on one connection to url, each BEGIN,
// before (when not empty, with the argument 2), op (in mode, with the
// argument 1) under a context canceled after a random time of up to 3
// ms, SELECT 1, ROLLBACK; it returns the first answer that PostgreSQL
// gives at no point.
//
// A cancel that reaches the backend after its statement ended can still
// cancel a later one (PostgreSQL's own race: the signal is acted on at
// the backend's next check for interrupts): a later statement's 57014 is
// such a stray, and its block is begun again; what is checked is that a
// 57014 of op is never followed by an answer in the same block.
func cancelAnyPoint(ctx context.Context, url string, mode pgx.QueryExecMode, before, op string, n int) error {
	conn, err := pgx.ConnectConfig(ctx, cancelableConfig(url))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// exec runs sql in mode; a stray cancel's 57014 is tried again once
	// when again (BEGIN, ROLLBACK: they change nothing else).
	exec := func(sql string, mode pgx.QueryExecMode, again bool, args ...any) error {
		_, err := conn.Exec(ctx, sql, append([]any{mode}, args...)...)
		if again && sqlState(err) == "57014" {
			_, err = conn.Exec(ctx, sql, append([]any{mode}, args...)...)
		}
		return err
	}
	simple := pgx.QueryExecModeSimpleProtocol
	for i := 0; i < n; i++ {
		if err := exec("BEGIN", simple, true); err != nil {
			return fmt.Errorf("block %d: BEGIN: %w", i, err)
		}
		if before != "" {
			if err := exec(before, mode, false, 2); err != nil {
				if sqlState(err) == "57014" {
					// A stray cancel of the block before.
					if err := exec("ROLLBACK", simple, true); err != nil {
						return fmt.Errorf("block %d: ROLLBACK: %w", i, err)
					}
					continue
				}
				return fmt.Errorf("block %d: %s: %w", i, before, err)
			}
		}
		stmtCtx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(time.Duration(rand.Intn(3000))*time.Microsecond, cancel)
		// A text of its own each time: pgx's cache modes prepare it.
		_, stmtErr := conn.Exec(stmtCtx, fmt.Sprintf("%s /* %d */", op, i), mode, 1)
		timer.Stop()
		cancel()
		if conn.IsClosed() {
			return fmt.Errorf("block %d: the connection closed after %v", i, stmtErr)
		}
		nextErr := exec("SELECT 1", simple, false)
		var pe *pgconn.PgError
		switch {
		case stmtErr == nil || !errors.As(stmtErr, &pe) && pgconn.Timeout(stmtErr) && pgconn.SafeToRetry(stmtErr):
			// Answered, or never sent (the context ended before pgx
			// sent it): the block goes on (or a stray cancel ends it).
			if nextErr != nil && sqlState(nextErr) != "57014" {
				return fmt.Errorf("block %d: statement %v, then SELECT 1: %v (want an answer)", i, stmtErr, nextErr)
			}
		case sqlState(stmtErr) == "57014":
			if c := sqlState(nextErr); c != "25P02" && c != "57014" {
				return fmt.Errorf("block %d: statement %v, then SELECT 1: %v (want 25P02)", i, stmtErr, nextErr)
			}
		default:
			return fmt.Errorf("block %d: statement: %v (want an answer, 57014 or pgx's context already done)", i, stmtErr)
		}
		if err := exec("ROLLBACK", simple, true); err != nil {
			return fmt.Errorf("block %d: ROLLBACK: %w", i, err)
		}
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM any20 WHERE k = 1", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != 0 {
		return fmt.Errorf("after every block rolled back: v = %d, %v (want 0)", v, err)
	}
	return nil
}

// cancelableConfig is url's pgx configuration whose context cancellation
// sends a CancelRequest and waits up to 20 s for the server's answer (as
// connectCancelable's; pgconn's default closes the socket).
func cancelableConfig(url string) *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 20 * time.Second}
	}
	return cfg
}

// TestCancel20JDBC: testdata/java/Cancel20.java interrupts a read of a
// managed table, a write to it and CREATE TABLE AS, in autocommit and in
// blocks, by Statement.cancel() (once the statement sleeps) and
// setQueryTimeout (pgjdbc's timer sends the same CancelRequest): the same
// lines through mzproxy as directly (57014; a block then 25P02 until
// ROLLBACK; nothing of the statement left; the connection goes on). The
// test PostgreSQL listens on a Unix socket only; JDBC reaches it through a
// TCP relay of the test's (tcpToPostgres).
func TestCancel20JDBC(t *testing.T) {
	t.Parallel()
	command, err := jdbcCommand()
	requireDriver(t, err, "apt-get install -y default-jre-headless libpostgresql-jdbc-java")
	ctx := testContext(t)
	p := startProxy(t)
	host, port := p.hostPort()
	direct := tcpToPostgres(t)
	urls := []string{
		fmt.Sprintf("jdbc:postgresql://%s/%s?user=postgres&sslmode=disable", direct, freshDatabase(t, ctx)),
		fmt.Sprintf("jdbc:postgresql://%s:%s/%s?user=postgres&sslmode=disable", host, port, freshDatabase(t, ctx)),
	}
	var outs [2]string
	var wg sync.WaitGroup
	for i, url := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(runCtx, command[0], "-cp", jdbcJar, "Cancel20.java", url)
			cmd.Dir = filepath.Join("testdata", "java")
			cmd.Env = append(os.Environ(), "PGOPTIONS=", "JAVA_TOOL_OPTIONS=-Xshare:auto -XX:TieredStopAtLevel=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			outs[i] = stdout.String()
			if err != nil {
				outs[i] += "exit: " + err.Error() + "\nstderr:\n" + stderr.String()
			}
		}()
	}
	wg.Wait()
	if outs[0] != outs[1] {
		t.Errorf("directly:\n%s\nthrough mzproxy:\n%s", outs[0], outs[1])
	}
	lines := strings.Split(strings.TrimSpace(outs[0]), "\n")
	if len(lines) != 12 {
		t.Errorf("directly: %d lines, want 12:\n%s", len(lines), outs[0])
	}
	for _, line := range lines {
		if !strings.Contains(line, "stmt=57014 ERROR: canceling statement due to user request") {
			t.Errorf("directly, not canceled: %s", line)
		}
	}
	t.Logf("directly and through mzproxy:\n%s", outs[0])
}

// tcpToPostgres relays TCP connections on a loopback port to the test
// PostgreSQL's Unix socket, for drivers that speak TCP only (JDBC); it
// returns host:port. It stops when the test ends.
func tcpToPostgres(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(env.pg.SocketDir(), fmt.Sprintf(".s.PGSQL.%d", env.pg.Port()))
	var mu sync.Mutex
	var open []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.DialTimeout("unix", socket, 10*time.Second)
			if err != nil {
				client.Close()
				continue
			}
			mu.Lock()
			open = append(open, client, server)
			mu.Unlock()
			wg.Add(2)
			for _, pair := range [][2]net.Conn{{client, server}, {server, client}} {
				go func() {
					defer wg.Done()
					io.Copy(pair[1], pair[0])
					// The other way's copy ends too: a closed side
					// closes the relay.
					pair[0].Close()
					pair[1].Close()
				}()
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// TestCancel20PrepareWaitingOnLock: a cancel that lands while a
// statement's first message waits in the backend, not yet running: the
// Parse (pgx's prepare round trip in its cache modes, or the Parse of its
// batch in the others, or the simple Query) waits for a lock another
// session holds on the table, and pgx's context ends once
// pg_stat_activity shows the wait. The same answers through mzproxy as
// directly: 57014, a block then aborted (25P02), nothing written, the
// connection open. pgx in its five modes, a read and a write of a managed
// table, in autocommit and in a block.
func TestCancel20PrepareWaitingOnLock(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	dbs := []string{freshDatabase(t, ctx), freshDatabase(t, ctx)}
	url := func(i int) string {
		if i == 0 {
			return directURL("postgres", dbs[0])
		}
		return p.URL("postgres", dbs[1])
	}
	type lockCase struct {
		name, table, op string
		mode            pgx.QueryExecMode
		block           bool
		got             [2]string
	}
	var cases []*lockCase
	for _, mode := range pgxModes {
		for _, op := range []string{"SELECT v FROM %s WHERE k = $1", "UPDATE %s SET v = v + 1 WHERE k = $1"} {
			for _, block := range []bool{false, true} {
				cases = append(cases, &lockCase{
					name:  fmt.Sprintf("%s/%s/block=%v", mode, strings.Fields(op)[0], block),
					table: fmt.Sprintf("lk20_%d", len(cases)), op: op, mode: mode, block: block,
				})
			}
		}
	}
	for i := range dbs {
		var b strings.Builder
		for _, c := range cases {
			fmt.Fprintf(&b, "CREATE TABLE %[1]s (k int PRIMARY KEY, v int); INSERT INTO %[1]s VALUES (1, 0);", c.table)
		}
		mustExec(t, ctx, connectTo(t, ctx, url(i)), b.String())
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, c := range cases {
		for i := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				c.got[i] = cancelWaitingOnLock(ctx, url(i), dbs[i], c.table, c.op, c.mode, c.block)
			}()
		}
	}
	wg.Wait()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.got[0] != c.got[1] {
				t.Errorf("directly:\n  %s\nthrough mzproxy:\n  %s", c.got[0], c.got[1])
			}
			if !strings.Contains(c.got[0], "stmt=57014") {
				t.Errorf("directly, not canceled: %s", c.got[0])
			}
		})
	}
}

// cancelWaitingOnLock is one case of TestCancel20PrepareWaitingOnLock,
// spelled as what the client saw.
func cancelWaitingOnLock(ctx context.Context, url, db, table, op string, mode pgx.QueryExecMode, block bool) string {
	var out []string
	note := func(what string, err error) {
		s := "none"
		if err != nil {
			s = sqlState(err) + " " + err.Error()
		}
		out = append(out, what+"="+s)
	}
	locker, err := pgx.Connect(ctx, directURL("postgres", db))
	if err != nil {
		return "connect: " + err.Error()
	}
	defer locker.Close(context.Background())
	conn, err := pgx.ConnectConfig(ctx, cancelableConfig(url))
	if err != nil {
		return "connect: " + err.Error()
	}
	defer conn.Close(context.Background())
	if _, err := locker.Exec(ctx, "BEGIN; LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return "lock: " + err.Error()
	}
	if block {
		_, err := conn.Exec(ctx, "BEGIN")
		note("begin", err)
	}
	sql := fmt.Sprintf(op, table)
	stmtCtx, cancel := context.WithCancel(ctx)
	go cancelWhenSeen(stmtCtx, cancel, db, table, "wait_event_type = 'Lock'")
	_, err = conn.Exec(stmtCtx, sql, mode, 1)
	cancel()
	note("stmt", err)
	if _, err := locker.Exec(ctx, "ROLLBACK"); err != nil {
		return "unlock: " + err.Error()
	}
	_, err = conn.Exec(ctx, "SELECT 1")
	note("next", err)
	if block {
		_, err = conn.Exec(ctx, "ROLLBACK")
		note("rollback", err)
	}
	var v int
	err = conn.QueryRow(ctx, fmt.Sprintf("SELECT v FROM %s WHERE k = 1", table)).Scan(&v)
	note(fmt.Sprintf("after(v=%d)", v), err)
	out = append(out, fmt.Sprintf("closed=%v", conn.IsClosed()))
	return strings.Join(out, "; ")
}

// TestTimeout20AnyPoint: an ordinary role sets statement_timeout to a few
// milliseconds, so that the proxy's deadline and the backend's own end
// statements anywhere (a pin, a guard, a write's slot, the refold of an
// autocommit write, a block's COMMIT), and runs autocommit increments and
// read-then-write blocks of one managed row, each under a timeout drawn
// from 1 to 6 ms, in the simple protocol and pgx's exec, cache_statement
// and cache_describe modes in turn, through mzproxy with and without the
// event loop, the sessions at once. Every error is 57014 (or 25P02 after one in its
// block; 40001 where a block lost to the other session), the row counts
// exactly the increments whose statement or COMMIT was answered, no read
// hold is left, and the proxies go on.
func TestTimeout20AnyPoint(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{create: true, proxies: [][]string{nil, {"--event-loop=false"}}})
	ctx := st.ctx
	mustExec(t, ctx, connectTo(t, ctx, st.url(0, st.role)), "CREATE TABLE tmo20 (k int PRIMARY KEY, v int)", "INSERT INTO tmo20 VALUES (1, 0)")
	var acked [2]int
	var trails [2]string
	var wg sync.WaitGroup
	for i := range st.proxies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, trail, err := timeoutAnyPoint(ctx, st.url(i, st.role), 320)
			acked[i], trails[i] = n, trail
			if err != nil {
				t.Errorf("proxy %d: %v; its last statements:\n%s", i, err, trail)
			}
		}()
	}
	wg.Wait()
	c := connectTo(t, ctx, st.url(0, st.role))
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM tmo20 WHERE k = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != acked[0]+acked[1] {
		t.Errorf("v = %d, want the %d+%d increments answered; the last statements:\n%s\n\n%s", v, acked[0], acked[1], trails[0], trails[1])
	}
	noHoldsOn(t, ctx, connectTo(t, ctx, directURL("postgres", st.db)), "tmo20")
	for _, p := range st.proxies {
		p.mustAlive(t, ctx)
	}
	t.Logf("increments answered: %d and %d", acked[0], acked[1])
}

// timeoutAnyPoint runs n rounds on one connection to url, each under a
// statement_timeout of 1 to 6 ms: an autocommit increment of tmo20's row,
// then a block that reads it, increments it and commits. It returns how
// many increments were answered, and the first answer PostgreSQL would
// not give.
func timeoutAnyPoint(ctx context.Context, url string, n int) (acked int, trail string, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close(context.Background())
	simple := pgx.QueryExecModeSimpleProtocol
	// run runs sql, a statement that PostgreSQL itself may time out; only
	// 57014, or 25P02 after an error in the block, or 40001 from a
	// block's read-then-write check, are an answer it gives.
	var trails []string
	defer func() {
		trail = strings.Join(trails[max(0, len(trails)-16):], "\n")
	}()
	note := func(sql string, tag pgconn.CommandTag, err error) {
		trails = append(trails, fmt.Sprintf("%s -> %q %v [%c]", sql, tag.String(), err, conn.PgConn().TxStatus()))
	}
	// The round's reads and writes go in the simple protocol or in one
	// of pgx's extended modes, in turn; BEGIN and COMMIT in the simple.
	modes := []pgx.QueryExecMode{simple, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe}
	mode := simple
	run := func(sql string) (bool, error) {
		m := simple
		if !strings.HasPrefix(sql, "BEGIN") && !strings.HasPrefix(sql, "COMMIT") {
			m = mode
		}
		tag, err := conn.Exec(ctx, sql, m)
		note(sql, tag, err)
		if err != nil && conn.PgConn().TxStatus() == 'T' {
			// PostgreSQL's error ends the transaction or aborts the
			// block: never a block going on.
			return false, fmt.Errorf("%w, then ReadyForQuery T", err)
		}
		switch sqlState(err) {
		case "":
			if err != nil {
				return false, err
			}
			return true, nil
		case "57014", "25P02", "40001":
			return false, nil
		}
		return false, err
	}
	// untimed runs sql until it is not timed out (a SET or ROLLBACK runs
	// under the timeout set before it, and may itself time out: it is
	// sent again, up to 1,000 times, each a round trip).
	untimed := func(sql string) error {
		for tries := 0; ; tries++ {
			tag, err := conn.Exec(ctx, sql, simple)
			note(sql, tag, err)
			if err == nil || sqlState(err) != "57014" || tries == 1000 {
				return err
			}
		}
	}
	for i := 0; i < n; i++ {
		mode = modes[i%len(modes)]
		if conn.PgConn().TxStatus() == 'E' {
			// A BEGIN stopped after it began the block (PostgreSQL's
			// TBLOCK_BEGIN aborted): the block is left aborted.
			if err := untimed("ROLLBACK"); err != nil {
				return acked, "", fmt.Errorf("round %d: ROLLBACK: %w", i, err)
			}
		}
		if err := untimed(fmt.Sprintf("SET statement_timeout = '%dms'", 1+rand.Intn(6))); err != nil {
			return acked, "", fmt.Errorf("round %d: SET: %w", i, err)
		}
		ok, err := run("UPDATE tmo20 SET v = v + 1 WHERE k = 1")
		if err != nil {
			return acked, "", fmt.Errorf("round %d: autocommit UPDATE: %w", i, err)
		}
		if ok {
			acked++
		}
		if ok, err := run("BEGIN"); err != nil || !ok {
			if err != nil {
				return acked, "", fmt.Errorf("round %d: BEGIN: %w", i, err)
			}
			continue
		}
		blockOK := true
		for _, sql := range []string{"SELECT v FROM tmo20 WHERE k = 1", "UPDATE tmo20 SET v = v + 1 WHERE k = 1"} {
			ok, err := run(sql)
			if err != nil {
				return acked, "", fmt.Errorf("round %d: %s: %w", i, sql, err)
			}
			blockOK = blockOK && ok
		}
		tag, err := conn.Exec(ctx, "COMMIT", simple)
		note("COMMIT", tag, err)
		switch {
		case err == nil && tag.String() == "COMMIT":
			if !blockOK {
				return acked, "", fmt.Errorf("round %d: COMMIT of a block whose statement failed answered COMMIT", i)
			}
			acked++
		case err == nil:
			// A failed block's COMMIT answers ROLLBACK.
		case sqlState(err) != "57014" && sqlState(err) != "40001":
			return acked, "", fmt.Errorf("round %d: COMMIT: %w", i, err)
		}
		switch status := conn.PgConn().TxStatus(); {
		case status == 'E' && sqlState(err) == "57014":
			// Stopped before the COMMIT ran (PostgreSQL's too, when
			// its timeout fires while it parses the COMMIT): the block
			// is left aborted.
			if err := untimed("ROLLBACK"); err != nil {
				return acked, "", fmt.Errorf("round %d: ROLLBACK: %w", i, err)
			}
		case status != 'I':
			return acked, "", fmt.Errorf("round %d: after COMMIT (%v), transaction status %c", i, err, status)
		}
	}
	return acked, "", untimed("RESET statement_timeout")
}
