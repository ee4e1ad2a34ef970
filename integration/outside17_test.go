package integration

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
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

// lazyCases are writes that meet tables never written before (storage
// 38's lazy history), each case with tables of its own, checked against
// what README says: a first write, in a block or not, lands; a write
// mzproxy cannot see coming (a trigger writing a never-written table) is
// run again once when autocommit, and fails with 40001 in a block, whose
// retry lands. Every driver program under testdata/ named lazy17 runs the
// same cases.
func lazyCases(ctx context.Context, db matrixDB) caseResults {
	var c caseRunner
	rows := func(table string) (string, error) {
		var v string
		err := db.queryRow(ctx, "SELECT count(*)::text FROM "+table, nil, &v)
		return v, err
	}
	setup := func(sqls ...string) error {
		for _, sql := range sqls {
			if _, err := db.exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		return nil
	}
	c.run("first_write_in_block", func() error {
		if err := setup("CREATE TABLE lz_block (k int)"); err != nil {
			return err
		}
		err := db.inTx(ctx, func(exec func(string, ...any) error) error {
			for k := 1; k <= 2; k++ {
				if err := exec("INSERT INTO lz_block VALUES ($1)", k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return wantValue(rows("lz_block"))("2")
	})
	if err := setup("CREATE TABLE lz_src (k int)", "CREATE TABLE lz_audit (k int)", "CREATE TABLE lz_audit2 (k int)",
		`CREATE FUNCTION lz_copy() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO lz_audit VALUES (NEW.k); IF NEW.k > 100 THEN INSERT INTO lz_audit2 VALUES (NEW.k); END IF; RETURN NEW; END $$`,
		"CREATE TRIGGER lz_src_audit AFTER INSERT ON lz_src FOR EACH ROW EXECUTE FUNCTION lz_copy()"); err != nil {
		c.results["hidden_writer_autocommit"] = err.Error()
		return c.results
	}
	c.run("hidden_writer_autocommit", func() error {
		if err := wantAffected(db.exec(ctx, "INSERT INTO lz_src VALUES ($1)", 1)); err != nil {
			return err
		}
		return wantValue(rows("lz_audit"))("1")
	})
	c.run("hidden_writer_block", func() error {
		insert := func(exec func(string, ...any) error) error { return exec("INSERT INTO lz_src VALUES ($1)", 101) }
		if err := wantSQLState(db.inTx(ctx, insert), "40001"); err != nil {
			return err
		}
		if err := db.inTx(ctx, insert); err != nil {
			return fmt.Errorf("the block again: %w", err)
		}
		return wantValue(rows("lz_audit2"))("1")
	})
	return c.results
}

// lazyCaseNames are lazyCases' cases.
var lazyCaseNames = []string{"first_write_in_block", "hidden_writer_autocommit", "hidden_writer_block"}

// TestOutside17LazyHistoryDrivers: lazyCases through lib/pq and pgx in
// each exec mode, with pgx's batch and COPY of a never-written table, and
// through the driver programs (psycopg with its pipeline, asyncpg's
// executemany and COPY, JDBC's executeBatch, node-postgres, postgres.js).
// Before (b63d217), a hidden writer's autocommit INSERT with a
// parameter in pgx's exec and cache_describe modes got the 40001 README
// says it does not.
func TestOutside17LazyHistoryDrivers(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	report := func(t *testing.T, r caseResults, extra ...string) {
		t.Helper()
		for _, name := range append(append([]string(nil), lazyCaseNames...), extra...) {
			if failure, ran := r[name]; !ran {
				t.Errorf("%s: not run", name)
			} else if failure != "" {
				t.Errorf("%s: %s", name, failure)
			}
		}
	}
	t.Run("lib/pq", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		db, err := sql.Open("postgres", p.URL("postgres", freshDatabase(t, ctx)))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		report(t, lazyCases(ctx, libpqDB{db}))
	})
	for _, mode := range pgxModes {
		t.Run("pgx/"+mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			conn := connectMode(t, ctx, p.URL("postgres", freshDatabase(t, ctx)), mode)
			r := lazyCases(ctx, pgxDB{conn})
			var c caseRunner
			c.results = r
			c.run("batch", func() error {
				if _, err := conn.Exec(ctx, "CREATE TABLE lz_batch (k int)"); err != nil {
					return err
				}
				b := &pgx.Batch{}
				for k := 1; k <= 3; k++ {
					b.Queue("INSERT INTO lz_batch VALUES ($1)", k)
				}
				if err := conn.SendBatch(ctx, b).Close(); err != nil {
					return err
				}
				return wantValue(fmt.Sprint(count(t, ctx, conn, "SELECT count(*) FROM lz_batch", mode)), nil)("3")
			})
			c.run("copy", func() error {
				if _, err := conn.Exec(ctx, "CREATE TABLE lz_copy (k int)"); err != nil {
					return err
				}
				n, err := conn.CopyFrom(ctx, pgx.Identifier{"lz_copy"}, []string{"k"}, pgx.CopyFromRows([][]any{{1}, {2}}))
				if err != nil || n != 2 {
					return fmt.Errorf("COPY: %d rows, %v", n, err)
				}
				return wantValue(fmt.Sprint(count(t, ctx, conn, "SELECT count(*) FROM lz_copy", mode)), nil)("2")
			})
			report(t, r, "batch", "copy")
		})
	}
	host, port := p.hostPort()
	for _, d := range []struct {
		name, dir string
		command   func() ([]string, error)
		arg       string
		extra     []string
	}{
		{"psycopg", "python", pythonModule("psycopg"), "psycopg", []string{"batch", "copy"}},
		{"asyncpg", "python", pythonModule("asyncpg"), "asyncpg", []string{"batch", "copy"}},
		{"node-postgres", "node", nodeModule("pg", "lazy17.js"), "pg", []string{"batch"}},
		{"postgres.js", "node", nodeModule("postgres", "lazy17.js"), "postgres", []string{"batch"}},
		{"jdbc", "java", jdbcCommand, "", []string{"batch", "copy"}},
	} {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			command, err := d.command()
			requireDriver(t, err, "see driverPrograms")
			ctx := testContext(t)
			db := freshDatabase(t, ctx)
			var args []string
			switch d.dir {
			case "python":
				args = []string{"lazy17.py", d.arg, libpqURL(host, port, db)}
			case "node":
				args = []string{command[1], d.arg, libpqURL(host, port, db)}
			default:
				args = []string{"-cp", jdbcJar, "Lazy17.java",
					fmt.Sprintf("jdbc:postgresql://%s:%s/%s?user=postgres&sslmode=disable", host, port, db)}
			}
			var env []string
			if d.dir == "java" {
				env = []string{"JAVA_TOOL_OPTIONS=-Xshare:auto -XX:TieredStopAtLevel=1"}
			}
			report(t, runDriverProgram(t, filepath.Join("testdata", d.dir), env, command[0], args...), d.extra...)
		})
	}
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
