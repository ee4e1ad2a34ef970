package integration

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"
)

// The driver matrix: every driver, Go's and the programs under testdata/,
// runs the same cases against a managed table of a database of its own,
// through one real mzproxy. Each case is reported on its own, so a failure
// names the driver and the case (TestDriverMatrix/asyncpg/as_of_param).
//
// A program reports each case as one line on standard output, "ok <case>"
// or "FAIL <case>: <detail>", goes on with the next case after a failure,
// and exits non-zero when any case failed.

// matrixCases are the cases every driver runs, in this order (later cases
// use what earlier ones wrote):
//
//	ddl                  CREATE TABLE t (k int PRIMARY KEY, v text)
//	insert               INSERT INTO t VALUES ($1, $2) for (1,'one'), (2,'two'), (3,'three')
//	update               UPDATE t SET v = $1 WHERE k = $2 ('uno', 1): one row
//	select               SELECT v FROM t WHERE k = $1 (1): 'uno'
//	mz_now_param         SELECT v, mz_now() FROM t WHERE k = $1 (1): 'uno' and a timestamp T > 0
//	plain_after_mz_now   SELECT 1 on the same connection: 1
//	param_after_mz_now   SELECT $1::int (42) on the same connection: 42
//	as_of_param          UPDATE t SET v = 'eins' WHERE k = 1, then
//	                     SELECT v FROM t WHERE k = $1 AS OF $2 (1, T): 'uno'
//	as_of_at_least_param SELECT v FROM t WHERE k = $1 AS OF AT LEAST $2 (1, T): 'uno' or 'eins'
//	mz_now_repeated      three times: UPDATE t SET v = 'r<n>' WHERE k = 1, then four
//	                     SELECT v, mz_now() FROM t WHERE k = $1 (1): 'r<n>', mz_now()
//	                     never going back (the read guard's shapes, see
//	                     repeatedPresentReads)
//	rollback             BEGIN; DELETE FROM t WHERE k = $1 (2); ROLLBACK; then 3 rows
//	unique_violation     INSERT INTO t VALUES ($1, $2) (1, 'dup'): SQLSTATE 23505, then 3 rows
//	timeout              SET statement_timeout = '100ms'; SELECT pg_sleep(5): SQLSTATE 57014,
//	                     then RESET statement_timeout and SELECT 1 works
var matrixCases = []string{
	"ddl", "insert", "update", "select",
	"mz_now_param", "plain_after_mz_now", "param_after_mz_now",
	"as_of_param", "as_of_at_least_param", "mz_now_repeated",
	"rollback", "unique_violation", "timeout",
}

// matrixProxyFlags: history kept long enough that T is still readable by
// AS OF however slowly a loaded machine runs a driver program.
var matrixProxyFlags = []string{"--retain-history", "10m"}

// caseResults are a driver's outcomes by case name: "" passed, otherwise
// what went wrong.
type caseResults map[string]string

// report makes one subtest per case the driver must run (matrixCases and
// its extra ones): a case that failed or was never reported fails.
func (r caseResults) report(t *testing.T, extra ...string) {
	t.Helper()
	for _, name := range append(append([]string(nil), matrixCases...), extra...) {
		t.Run(name, func(t *testing.T) {
			failure, ran := r[name]
			switch {
			case !ran:
				t.Errorf("case %s was not reported by the driver", name)
			case failure != "":
				t.Error(failure)
			}
		})
	}
}

// parseCaseLines reads a driver program's "ok <case>" and "FAIL <case>:
// <detail>" lines; other output is ignored.
func parseCaseLines(out string) caseResults {
	r := caseResults{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "ok "); ok {
			r[strings.TrimSpace(name)] = ""
		} else if rest, ok := strings.CutPrefix(line, "FAIL "); ok {
			name, detail, _ := strings.Cut(rest, ":")
			r[strings.TrimSpace(name)] = "FAIL " + strings.TrimSpace(detail)
		}
	}
	return r
}

// requireDriver skips a driver that is not installed, saying how to
// install it, except in CI (CI=true), where every driver must run.
func requireDriver(t *testing.T, missing error, install string) {
	t.Helper()
	if missing == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("driver missing in CI (%v): .ci/run must install it: %s", missing, install)
	}
	t.Skipf("driver missing (%v): %s", missing, install)
}

// driverSQLState is the SQLSTATE of an error from pgx or lib/pq.
func driverSQLState(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return string(pqErr.Code)
	}
	return sqlState(err)
}

// matrixDB is what the Go drivers' cases need of a connection: statements
// with arguments, one row read into dest, and a transaction.
type matrixDB interface {
	exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	queryRow(ctx context.Context, query string, args []any, dest ...any) error
	inTx(ctx context.Context, work func(exec func(query string, args ...any) error) error) error
}

// caseRunner runs cases in order, recording each outcome; a case is a
// function returning an error that says what was wrong.
type caseRunner struct {
	results caseResults
}

func (c *caseRunner) run(name string, f func() error) {
	if c.results == nil {
		c.results = caseResults{}
	}
	if err := f(); err != nil {
		c.results[name] = err.Error()
		return
	}
	c.results[name] = ""
}

// runMatrixCases runs matrixCases (see there) on db against table.
func runMatrixCases(ctx context.Context, db matrixDB, table string) caseResults {
	var c caseRunner
	one := func(query string, args ...any) (string, error) {
		var v string
		err := db.queryRow(ctx, query, args, &v)
		return v, err
	}
	c.run("ddl", func() error {
		_, err := db.exec(ctx, "CREATE TABLE "+table+" (k int PRIMARY KEY, v text)")
		return err
	})
	c.run("insert", func() error {
		for k, v := range []string{"one", "two", "three"} {
			if err := wantAffected(db.exec(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", k+1, v)); err != nil {
				return err
			}
		}
		return nil
	})
	c.run("update", func() error {
		return wantAffected(db.exec(ctx, "UPDATE "+table+" SET v = $1 WHERE k = $2", "uno", 1))
	})
	c.run("select", func() error {
		return wantValue(one("SELECT v FROM "+table+" WHERE k = $1", 1))("uno")
	})
	var ts int64
	c.run("mz_now_param", func() error {
		var v string
		if err := db.queryRow(ctx, "SELECT v, mz_now() FROM "+table+" WHERE k = $1", []any{1}, &v, &ts); err != nil {
			return err
		}
		if v != "uno" || ts <= 0 {
			return fmt.Errorf("got v=%q mz_now()=%d, want 'uno' and a timestamp", v, ts)
		}
		return nil
	})
	c.run("plain_after_mz_now", func() error { return wantValue(one("SELECT 1"))("1") })
	c.run("param_after_mz_now", func() error { return wantValue(one("SELECT $1::int", 42))("42") })
	c.run("as_of_param", func() error {
		if err := wantAffected(db.exec(ctx, "UPDATE "+table+" SET v = $1 WHERE k = $2", "eins", 1)); err != nil {
			return err
		}
		return wantValue(one("SELECT v FROM "+table+" WHERE k = $1 AS OF $2", 1, ts))("uno")
	})
	c.run("as_of_at_least_param", func() error {
		v, err := one("SELECT v FROM "+table+" WHERE k = $1 AS OF AT LEAST $2", 1, ts)
		if err == nil && v != "uno" && v != "eins" {
			err = fmt.Errorf("got %q, want 'uno' (at T) or 'eins' (later)", v)
		}
		return err
	})
	c.run("mz_now_repeated", func() error { return repeatedPresentReads(ctx, db, table) })
	c.run("rollback", func() error {
		errRollback := errors.New("roll back")
		err := db.inTx(ctx, func(exec func(string, ...any) error) error {
			if err := exec("DELETE FROM "+table+" WHERE k = $1", 2); err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			return fmt.Errorf("transaction: %v", err)
		}
		return wantValue(one("SELECT count(*)::text FROM " + table))("3")
	})
	c.run("unique_violation", func() error {
		_, err := db.exec(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", 1, "dup")
		if err := wantSQLState(err, "23505"); err != nil {
			return err
		}
		return wantValue(one("SELECT count(*)::text FROM " + table))("3")
	})
	c.run("timeout", func() error { return timeoutCase(ctx, db) })
	return c.results
}

// repeatedPresentReads: runs of reads of the present between writes, long
// enough for the session's read guards to learn the settled count of
// writes and read through it (proxy's guardShape: learning, with the
// revision, without); each write is in every later read, which the guard
// that read through the count it learned before the write must refuse,
// and mz_now() never goes back.
func repeatedPresentReads(ctx context.Context, db matrixDB, table string) error {
	var last int64
	for i := range 12 {
		want := fmt.Sprintf("r%d", i/4)
		if i%4 == 0 {
			if err := wantAffected(db.exec(ctx, "UPDATE "+table+" SET v = $1 WHERE k = $2", want, 1)); err != nil {
				return err
			}
		}
		var v string
		var now int64
		if err := db.queryRow(ctx, "SELECT v, mz_now() FROM "+table+" WHERE k = $1", []any{1}, &v, &now); err != nil {
			return fmt.Errorf("read %d: %w", i, err)
		}
		if v != want || now < last {
			return fmt.Errorf("read %d: v=%q mz_now()=%d, want %q at or after %d", i, v, now, want, last)
		}
		last = now
	}
	// The later cases' row.
	return wantAffected(db.exec(ctx, "UPDATE "+table+" SET v = $1 WHERE k = $2", "eins", 1))
}

// timeoutCase: statement_timeout ends a statement with 57014, and the
// session goes on once it is reset.
func timeoutCase(ctx context.Context, db matrixDB) error {
	if _, err := db.exec(ctx, "SET statement_timeout = '100ms'"); err != nil {
		return err
	}
	var v string
	if err := wantSQLState(db.queryRow(ctx, "SELECT pg_sleep(5)::text", nil, &v), "57014"); err != nil {
		return err
	}
	if _, err := db.exec(ctx, "RESET statement_timeout"); err != nil {
		return err
	}
	var one string
	if err := db.queryRow(ctx, "SELECT 1", nil, &one); err != nil || one != "1" {
		return fmt.Errorf("SELECT 1 after the timeout: %q, %v", one, err)
	}
	return nil
}

func wantAffected(n int64, err error) error {
	if err == nil && n != 1 {
		err = fmt.Errorf("%d rows affected, want 1", n)
	}
	return err
}

// wantValue checks a query's one value: wantValue(one(...))("expected").
func wantValue(got string, err error) func(want string) error {
	return func(want string) error {
		if err == nil && got != want {
			err = fmt.Errorf("got %q, want %q", got, want)
		}
		return err
	}
}

func wantSQLState(err error, code string) error {
	if err == nil {
		return fmt.Errorf("no error, want SQLSTATE %s", code)
	}
	if got := driverSQLState(err); got != code {
		return fmt.Errorf("error %v (SQLSTATE %q), want SQLSTATE %s", err, got, code)
	}
	return nil
}

// libpqDB runs the cases through database/sql and lib/pq: db.Exec for
// statements, db.Query for reads, db.Begin for the transaction. One
// connection, so that every case runs in the same session.
type libpqDB struct{ db *sql.DB }

func (l libpqDB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := l.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (l libpqDB) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	rows, err := l.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

func (l libpqDB) inTx(ctx context.Context, work func(exec func(string, ...any) error) error) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	err = work(func(query string, args ...any) error {
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	})
	if err != nil {
		if rbErr := tx.Rollback(); rbErr != nil {
			return fmt.Errorf("rollback after %v: %w", err, rbErr)
		}
		return err
	}
	return tx.Commit()
}

// libpqPrepared: db.Prepare of the mz_now() read and of an INSERT, each
// executed twice, then a plain query on the same connection.
func libpqPrepared(ctx context.Context, db *sql.DB, table string) error {
	read, err := db.PrepareContext(ctx, "SELECT v, mz_now() FROM "+table+" WHERE k = $1")
	if err != nil {
		return err
	}
	defer read.Close()
	for range 2 {
		var v string
		var ts int64
		if err := read.QueryRowContext(ctx, 3).Scan(&v, &ts); err != nil || v != "three" || ts <= 0 {
			return fmt.Errorf("prepared mz_now() read: v=%q ts=%d, %v", v, ts, err)
		}
	}
	insert, err := db.PrepareContext(ctx, "INSERT INTO "+table+" VALUES ($1, $2)")
	if err != nil {
		return err
	}
	defer insert.Close()
	for k := 10; k < 12; k++ {
		if _, err := insert.ExecContext(ctx, k, "prepared"); err != nil {
			return fmt.Errorf("prepared insert: %v", err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 5 {
		return fmt.Errorf("count after the prepared inserts: %d, %v; want 5", n, err)
	}
	return nil
}

// pgxDB runs the cases through one pgx connection in one QueryExecMode.
type pgxDB struct {
	conn *pgx.Conn
}

func (p pgxDB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.conn.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (p pgxDB) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return p.conn.QueryRow(ctx, query, args...).Scan(dest...)
}

func (p pgxDB) inTx(ctx context.Context, work func(exec func(string, ...any) error) error) error {
	return pgx.BeginFunc(ctx, p.conn, func(tx pgx.Tx) error {
		return work(func(query string, args ...any) error {
			_, err := tx.Exec(ctx, query, args...)
			return err
		})
	})
}

func TestDriverMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("driver programs (JVM start, Python imports) are slow; skipped with -short")
	}
	t.Parallel()
	p := startProxy(t, matrixProxyFlags...)

	t.Run("lib/pq", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		db, err := sql.Open("postgres", p.URL("postgres", freshDatabase(t, ctx)))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		table := tableName(t)
		results := runMatrixCases(ctx, libpqDB{db}, table)
		var c caseRunner
		c.results = results
		c.run("prepare", func() error { return libpqPrepared(ctx, db, table) })
		results.report(t, "prepare")
	})

	for _, mode := range pgxModes {
		t.Run("pgx/"+mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			conn := connectMode(t, ctx, p.URL("postgres", freshDatabase(t, ctx)), mode)
			runMatrixCases(ctx, pgxDB{conn}, tableName(t)).report(t)
		})
	}

	runDriverPrograms(t, p)
}
