package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Session 17's tests from outside: drivers in every call mode, an
// ordinary role, faults. Each test here failed on the code before its fix
// (b63d217), or says why it is here.

// TestOutside17ExtendedWriteRetries: clients racing increments of one row
// with arguments, in each of pgx's exec modes, all land, and
// every one of them went through the optimistic loop (which runs a
// statement PostgreSQL fails with 40001 or 40P01 again): before, a Bind
// that followed its Parse in one batch (exec, cache_describe,
// describe_exec) took the write slot with no retry, so a transient
// conflict reached the client.
func TestOutside17ExtendedWriteRetries(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup, "CREATE TABLE counter (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO counter VALUES (1, 0)")
	const clients, each = 4, 25
	total := 0
	for _, qm := range pgxModes {
		_, m := get(t, p.metricsAddr(t), "/metrics")
		before := metricValue(t, m, "mzproxy_occ_writes_total")
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for c := 0; c < clients; c++ {
			conn := connectMode(t, ctx, p.URL("postgres", db), qm)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					tag, err := conn.Exec(ctx, "UPDATE counter SET v = v + $1 WHERE id = $2", 1, 1)
					if err != nil || tag.String() != "UPDATE 1" {
						errs <- fmt.Errorf("%v: increment %d: %q, %v", qm, i, tag, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		total += clients * each
		if got := count(t, ctx, setup, "SELECT v FROM counter", pgx.QueryExecModeSimpleProtocol); got != total {
			t.Fatalf("%v: counter = %d, want %d", qm, got, total)
		}
		_, m = get(t, p.metricsAddr(t), "/metrics")
		if n := metricValue(t, m, "mzproxy_occ_writes_total") - before; n != clients*each {
			t.Errorf("%v: %v of %d increments went through the optimistic loop", qm, n, clients*each)
		}
		// A write whose Parse fails gets the backend's error, and the
		// session goes on.
		conn := connectMode(t, ctx, p.URL("postgres", db), qm)
		_, err := conn.Exec(ctx, "UPDATE no_such_table SET v = $1", 1)
		wantCode(t, err, "42P01")
		if _, err := conn.Exec(ctx, "UPDATE counter SET v = v + $1 WHERE id = $2", 0, 1); err != nil {
			t.Fatalf("%v: a write after a failed Parse: %v", qm, err)
		}
	}
}

// execAs runs sql, which takes no arguments, on conn in exec mode qm as
// that mode sends a statement with arguments: pgx's Exec of a statement
// without arguments is a simple Query in every mode, so a test that
// passes a mode to it tests the simple protocol only. The cached modes
// prepare a named statement (named by its text, kept by pgx); exec and
// describe_exec send an unnamed one with the Execute in the same batch.
func execAs(ctx context.Context, conn *pgx.Conn, qm pgx.QueryExecMode, sql string) (pgconn.CommandTag, error) {
	switch qm {
	case pgx.QueryExecModeSimpleProtocol:
		return conn.Exec(ctx, sql, qm)
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
		sd, err := conn.Prepare(ctx, sql, sql)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return conn.PgConn().ExecPrepared(ctx, sd.Name, nil, nil, nil).Close()
	}
	return conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Close()
}

// TestOutside17FailedParseThenBlockWrite: in a block, a write whose Parse
// fails in the same batch as its Execute (pgx's exec and cache_describe
// modes) gets the backend's error, and a write in the next block works.
// Before, the proxy's own slot statement queued behind the failed Parse
// was skipped by the backend but counted as prepared, so every later
// block's write failed with 26000 (prepared statement "mzproxy_..." does
// not exist).
func TestOutside17FailedParseThenBlockWrite(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup, "CREATE TABLE fp (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO fp VALUES (1, 0)")
	for _, qm := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe} {
		conn := connectMode(t, ctx, p.URL("postgres", db), qm)
		mustExec(t, ctx, conn, "BEGIN")
		_, err := conn.Exec(ctx, "UPDATE no_such_table SET v = $1", 1)
		wantCode(t, err, "42P01")
		mustExec(t, ctx, conn, "ROLLBACK", "BEGIN")
		if _, err := conn.Exec(ctx, "UPDATE fp SET v = v + $1 WHERE id = $2", 1, 1); err != nil {
			t.Fatalf("%v: a block's write after a block whose write's Parse failed: %v", qm, err)
		}
		mustExec(t, ctx, conn, "COMMIT")
	}
	if got := count(t, ctx, setup, "SELECT v FROM fp", pgx.QueryExecModeSimpleProtocol); got != 2 {
		t.Fatalf("v = %d, want 2", got)
	}
}
