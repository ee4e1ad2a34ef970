package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/lib/pq"
)

// TestCancel19HeldExecuteOwnName: an ordinary role prepares a statement
// named mzproxy_canceled, the name of the Parse that mzproxy sends in place
// of a held Execute whose batch was canceled before its Sync
// (proxy/deadline.go failHeldExecute), and then sends a write to a managed
// table in the extended protocol, cancels it before its Sync, and sends
// the Sync. Whether the write is canceled (57014) or the cancel is dropped
// (it ran), as PostgreSQL may answer either, the answer is the client's
// own (not the proxy's Parse's 42P05 or 42601), the block is aborted or
// the autocommit write is undone or done as said, the role's statement is
// still its own, and the session and the proxy go on. Through the proxy
// with and without the event loop, in autocommit and in a block.
func TestCancel19HeldExecuteOwnName(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{create: true, proxies: [][]string{nil, {"--event-loop=false"}}})
	ctx := st.ctx
	c := connectTo(t, ctx, st.url(0, st.role))
	mustExec(t, ctx, c, "CREATE TABLE held19 (k int PRIMARY KEY)")
	for i, p := range st.proxies {
		for _, block := range []bool{false, true} {
			w := dialWire(t, p.addr, st.role, st.db, "cancel19")
			w.send(&pgproto3.Query{String: "PREPARE mzproxy_canceled AS SELECT 'mine'::text"})
			if out := strings.Join(w.answers(1), "\n"); strings.Contains(out, "Error") {
				t.Fatalf("proxy %d: PREPARE: %s", i, out)
			}
			if block {
				w.send(&pgproto3.Query{String: "BEGIN"})
				w.answers(1)
			}
			w.send(&pgproto3.Parse{Query: "INSERT INTO held19 VALUES (1)"}, &pgproto3.Bind{}, &pgproto3.Execute{})
			time.Sleep(300 * time.Millisecond)
			w.cancel(p.addr)
			time.Sleep(300 * time.Millisecond)
			w.send(&pgproto3.Sync{})
			out := strings.Join(w.answers(1), "\n")
			canceled := strings.Contains(out, "Error ERROR 57014 canceling statement due to user request")
			done := strings.Contains(out, "CommandComplete INSERT 0 1")
			if canceled == done || strings.Count(out, "Error") > 1 {
				t.Fatalf("proxy %d block %v: want the INSERT canceled (57014) or done, got:\n%s", i, block, out)
			}
			wantZ := "ReadyForQuery I"
			if block {
				wantZ = "ReadyForQuery T"
				if canceled {
					wantZ = "ReadyForQuery E"
				}
			}
			if !strings.HasSuffix(out, wantZ) {
				t.Errorf("proxy %d block %v: want %s last, got:\n%s", i, block, wantZ, out)
			}
			if block {
				w.send(&pgproto3.Query{String: "ROLLBACK"})
				w.answers(1)
			}
			w.send(&pgproto3.Query{String: "EXECUTE mzproxy_canceled"})
			if out := strings.Join(w.answers(1), "\n"); !strings.Contains(out, "DataRow mine") {
				t.Errorf("proxy %d block %v: the role's own statement: %s", i, block, out)
			}
			want := "0"
			if done && !block {
				want = "1"
			}
			w.send(&pgproto3.Query{String: "SELECT count(*) FROM held19"})
			if out := strings.Join(w.answers(1), "\n"); !strings.Contains(out, "DataRow "+want) {
				t.Errorf("proxy %d block %v: count after the INSERT (%s): %s", i, block, map[bool]string{true: "canceled", false: "done"}[canceled], out)
			}
			w.send(&pgproto3.Query{String: "DELETE FROM held19"})
			w.answers(1)
			t.Logf("proxy %d block %v: canceled %v", i, block, canceled)
		}
		p.mustAlive(t, ctx)
	}
}

// cancel19Ops are the statements the cancel matrix interrupts: each
// sleeps far longer than the test waits, and is a read of a managed
// table, a write to one (read-then-write), or DDL (CREATE TABLE AS,
// which also writes). %[1]s is the case's table.
var cancel19Ops = []struct{ name, sql string }{
	{"read", "SELECT count(*) FROM %[1]s, pg_sleep(30)"},
	{"write", "UPDATE %[1]s SET v = v + 1 WHERE k = (SELECT 1 FROM pg_sleep(30))"},
	{"ddl", "CREATE TABLE %[1]s_ctas AS SELECT k FROM %[1]s, pg_sleep(30)"},
}

// cancel19Step is what a cancel-matrix driver can do on one connection:
// run a statement (args pass the driver's extended protocol where it has
// a choice) with a context that the caller may cancel.
type cancel19Step func(ctx context.Context, sql string, args ...any) error

// cancel19Case interrupts one statement on one connection, by a cancel
// (the driver's own: a context's end) or statement_timeout, in autocommit
// or in a block, and spells what the client saw then: the statement's
// SQLSTATE and message, a block's next statement's SQLSTATE, and the
// table's state read afterwards. The same string is expected through
// mzproxy and directly.
func cancel19Case(ctx context.Context, exec cancel19Step, read func(sql string) (string, error), db, table, op string, timeout, block bool) string {
	var out []string
	note := func(what string, err error) {
		code, msg := sqlState(err), ""
		var pe *pgconn.PgError
		var qe *pq.Error
		switch {
		case errors.As(err, &pe):
			msg = pe.Message
		case errors.As(err, &qe):
			code, msg = string(qe.Code), qe.Message
		case err != nil:
			msg = "not a server error: " + err.Error()
		}
		out = append(out, fmt.Sprintf("%s=%s %s", what, code, msg))
	}
	if timeout {
		note("set", exec(ctx, "SET statement_timeout = '1s'"))
	}
	if block {
		note("begin", exec(ctx, "BEGIN"))
	}
	stmtCtx, cancel := context.WithCancel(ctx)
	if !timeout {
		go cancelWhenSleeping(stmtCtx, cancel, db, table)
	}
	note("stmt", exec(stmtCtx, fmt.Sprintf(op, table), 1))
	cancel()
	if block {
		note("in_block", exec(ctx, "SELECT 1"))
		note("rollback", exec(ctx, "ROLLBACK"))
	}
	if timeout {
		note("reset", exec(ctx, "RESET statement_timeout"))
	}
	v, err := read(fmt.Sprintf("SELECT v::text || ' ' || (to_regclass('%[1]s_ctas') IS NULL)::text FROM %[1]s WHERE k = 1", table))
	if err != nil {
		v = err.Error()
	}
	out = append(out, "after="+v)
	return strings.Join(out, "; ")
}

// cancelWhenSleeping calls cancel once a backend of database db runs a
// statement of table's in its pg_sleep (seen directly in
// pg_stat_activity), or after 20 s: a cancel at a fixed time could come,
// on a loaded machine, while a driver's statement is still being prepared
// (pgx's describe round trip), which PostgreSQL and mzproxy need not
// answer alike.
func cancelWhenSleeping(ctx context.Context, cancel context.CancelFunc, db, table string) {
	cancelWhenSeen(ctx, cancel, db, table, "wait_event = 'PgSleep'")
}

// cancelWhenSeen calls cancel once a backend of database db shows a
// statement of table's in the state pg_stat_activity's condition says,
// or after 20 s.
func cancelWhenSeen(ctx context.Context, cancel context.CancelFunc, db, table, condition string) {
	defer cancel()
	conn, err := pgx.Connect(ctx, directURL("postgres", "postgres"))
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE `+condition+` AND datname = $2 AND query ~ ($1 || '\M')`, table, db).Scan(&n); err != nil || n > 0 {
			return
		}
	}
}

// TestCancel19GoDrivers: a cancel (the driver's own, at a context's end)
// and statement_timeout interrupt a read of a managed table, a write to
// it and DDL, in autocommit and in a block, through pgx in its five modes
// (a context's end sends a CancelRequest: connectCancelable) and lib/pq,
// through mzproxy and directly: the same answers (57014 with its
// message; a block then aborted, 25P02, until ROLLBACK), nothing of the
// statement left, and the session goes on.
func TestCancel19GoDrivers(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	targets := []struct{ name, db string }{{"direct", freshDatabase(t, ctx)}, {"mzproxy", freshDatabase(t, ctx)}}
	url := func(target int) string {
		if target == 0 {
			return directURL("postgres", targets[0].db)
		}
		return p.URL("postgres", targets[1].db)
	}
	type driver struct {
		name string
		// open connects; done closes (t's helpers are not for the
		// cases' goroutines).
		open func(url string) (exec cancel19Step, read func(string) (string, error), done func(), err error)
	}
	drivers := []driver{{"lib/pq", func(url string) (cancel19Step, func(string) (string, error), func(), error) {
		db, err := sql.Open("postgres", url)
		if err != nil {
			return nil, nil, nil, err
		}
		conn, err := db.Conn(ctx)
		if err != nil {
			db.Close()
			return nil, nil, nil, err
		}
		exec := func(ctx context.Context, sql string, args ...any) error {
			if !strings.Contains(sql, "$1") {
				args = nil
			}
			_, err := conn.ExecContext(ctx, sql, args...)
			return err
		}
		read := func(sql string) (v string, err error) {
			// (On a connection of its own: lib/pq gives up a
			// connection whose statement a context canceled, directly
			// too.)
			err = db.QueryRowContext(ctx, sql).Scan(&v)
			return v, err
		}
		return exec, read, func() { conn.Close(); db.Close() }, nil
	}}}
	for _, mode := range pgxModes {
		drivers = append(drivers, driver{"pgx/" + mode.String(), func(url string) (cancel19Step, func(string) (string, error), func(), error) {
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				return nil, nil, nil, err
			}
			cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
				return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 20 * time.Second}
			}
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return nil, nil, nil, err
			}
			exec := func(ctx context.Context, sql string, args ...any) error {
				if !strings.Contains(sql, "$1") {
					args = nil
				}
				_, err := conn.Exec(ctx, sql, append([]any{mode}, args...)...)
				return err
			}
			read := func(sql string) (v string, err error) {
				err = conn.QueryRow(ctx, sql, mode).Scan(&v)
				return v, err
			}
			return exec, read, func() { conn.Close(context.Background()) }, nil
		}})
	}
	// Every case's table, made first on each side; then the cases run
	// twelve at a time (each sleeps one or two seconds; -parallel would
	// run two at a time), each through mzproxy and directly.
	type matrixCase struct {
		name, table, op string
		d               driver
		timeout, block  bool
		got             [2]string
	}
	var cases []*matrixCase
	for _, d := range drivers {
		for _, op := range cancel19Ops {
			for _, timeout := range []bool{false, true} {
				for _, block := range []bool{false, true} {
					cases = append(cases, &matrixCase{
						name:  fmt.Sprintf("%s/%s/timeout=%v/block=%v", d.name, op.name, timeout, block),
						table: fmt.Sprintf("c19_%d", len(cases)), op: op.sql, d: d, timeout: timeout, block: block,
					})
				}
			}
		}
	}
	for i := range targets {
		setup := connectTo(t, ctx, url(i))
		var b strings.Builder
		for _, c := range cases {
			fmt.Fprintf(&b, "CREATE TABLE %[1]s (k int PRIMARY KEY, v int); INSERT INTO %[1]s VALUES (1, 0);", c.table)
		}
		mustExec(t, ctx, setup, b.String())
	}
	sem := make(chan struct{}, 24)
	var wg sync.WaitGroup
	for _, c := range cases {
		for i := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				exec, read, done, err := c.d.open(url(i))
				if err != nil {
					c.got[i] = "connect: " + err.Error()
					return
				}
				defer done()
				c.got[i] = cancel19Case(ctx, exec, read, targets[i].db, c.table, c.op, c.timeout, c.block)
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

// TestCancel19DriverPrograms: testdata/python/cancel19.py interrupts a read
// of a managed table, a write to it and CREATE TABLE AS, in autocommit and
// in blocks: psycopg 3 by conn.cancel() and statement_timeout, also in
// pipeline mode; asyncpg by a cancelled task (which sends the
// CancelRequest its timeout= sends) and statement_timeout; the cancels
// once a second connection sees the statement in its pg_sleep;
// testdata/node/cancel19.js the same with
// node-postgres's statement_timeout and query_timeout (which cancels
// nothing: the statement runs to its end). Each case's line (what the statement and a
// block's next statement raised, the next statement's answer, the table
// afterwards) must be the same through mzproxy as directly.
func TestCancel19DriverPrograms(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	host, port := p.hostPort()
	for _, driver := range []string{"psycopg", "asyncpg", "node-postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			name, args, dir := systemPython, []string{"cancel19.py", driver}, "python"
			if driver == "node-postgres" {
				command, err := nodeModule("pg", "cancel19.js")()
				requireDriver(t, err, "apt-get install -y nodejs npm, then (cd integration/testdata/node && npm ci)")
				name, args, dir = command[0], []string{command[1]}, "node"
			} else {
				_, err := pythonModule(driver)()
				requireDriver(t, err, "apt-get install -y python3-"+driver)
			}
			ctx := testContext(t)
			urls := []string{directURL("postgres", freshDatabase(t, ctx)), libpqURL(host, port, freshDatabase(t, ctx))}
			var outs [2]string
			var wg sync.WaitGroup
			for i, url := range urls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					runCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
					defer cancel()
					cmd := exec.CommandContext(runCtx, name, append(args, url)...)
					cmd.Dir = filepath.Join("testdata", dir)
					cmd.Env = append(os.Environ(), "PGOPTIONS=")
					out, err := cmd.CombinedOutput()
					outs[i] = string(out)
					if err != nil {
						outs[i] += "exit: " + err.Error()
					}
				}()
			}
			wg.Wait()
			if outs[0] != outs[1] {
				t.Errorf("directly:\n%s\nthrough mzproxy:\n%s", outs[0], outs[1])
			}
			for _, line := range strings.Split(strings.TrimSpace(outs[0]), "\n") {
				if !strings.Contains(line, "stmt=57014") && !strings.Contains(line, "stmt=CancelledError") &&
					!strings.Contains(line, "stmt=Query read timeout") {
					t.Errorf("directly, not interrupted: %s", line)
				}
			}
			t.Logf("directly and through mzproxy:\n%s", outs[0])
		})
	}
}
