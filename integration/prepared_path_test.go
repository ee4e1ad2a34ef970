package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"
)

// preparedPathRead is the timestamped read the clients prepare: SELECT *
// so that a table of another shape changes its result.
const preparedPathRead = "SELECT * FROM t AS OF mz_now()"

// preparedPathSteps change the search_path in every way a client can, the
// read ("read") run after each: SET, set_config, RESET, SET LOCAL and a
// SET that a ROLLBACK undoes (both ended by the transaction's end), a
// function's SET clause (in force only while it runs), and a schema whose
// t has other columns (PostgreSQL: 0A000, cached plan must not change
// result type; the statement stays usable).
var preparedPathSteps = []string{
	"read",
	"SET search_path = a", "read",
	"SET search_path = b", "read",
	"SELECT pg_catalog.set_config('search_path', 'a', false)", "read",
	"RESET search_path", "read",
	"BEGIN", "SET LOCAL search_path = b", "read", "COMMIT", "read",
	"BEGIN", "SET search_path = a", "read", "ROLLBACK", "read",
	"SELECT in_b()", "read",
	"SET search_path = c", "read",
	"SET search_path = a", "read",
}

// preparedPathWant is what PostgreSQL answers preparedPathSteps' reads with
// (checked against it below too), for a named statement; unnamedPathWant
// for a client that parses the read again at each execution.
var (
	preparedPathWant = []string{"public", "a", "b", "a", "public", "b", "public", "a", "public", "public", "0A000", "a"}
	unnamedPathWant  = []string{"public", "a", "b", "a", "public", "b", "public", "a", "public", "public", "c", "a"}
)

// TestPreparedReadFollowsSearchPath: a timestamped read the client
// prepared (a named statement: pgx's cache_statement mode or Prepare,
// lib/pq's Prepare, psycopg's prepare=True) reads the table its name
// resolves to under the search_path in force at each execution, as
// PostgreSQL plans a prepared statement again when the path changed; the
// unnamed-statement modes likewise. Each client runs the same steps
// against PostgreSQL itself (the read without AS OF) and through mzproxy,
// and must get the same answers. Before, mzproxy's rewrite kept the
// schema of its Parse.
func TestPreparedReadFollowsSearchPath(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true})
	ctx, db, p := st.ctx, st.db, st.proxies[0]
	owner := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, owner, "CREATE SCHEMA a", "CREATE SCHEMA b", "CREATE SCHEMA c",
		"CREATE TABLE public.t (v text)", "CREATE TABLE a.t (v text)", "CREATE TABLE b.t (v text)",
		"CREATE TABLE c.t (v text, w int)",
		"INSERT INTO public.t VALUES ('public')", "INSERT INTO a.t VALUES ('a')",
		"INSERT INTO b.t VALUES ('b')", "INSERT INTO c.t VALUES ('c', 1)",
		"CREATE FUNCTION in_b() RETURNS text LANGUAGE sql SET search_path = b AS 'SELECT pg_catalog.current_setting(''search_path'')'")
	targets := []struct{ name, url, read string }{
		{"postgres", directURL("postgres", db), directText(preparedPathRead, true)},
		{"mzproxy", p.URL("postgres", db), preparedPathRead},
	}
	check := func(t *testing.T, got, want []string) {
		t.Helper()
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("reads answered %q, want %q", got, want)
		}
	}
	for _, target := range targets {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
			pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
			t.Run("pgx "+mode.String()+" "+target.name, func(t *testing.T) {
				conn := connectMode(t, ctx, target.url, mode)
				want := unnamedPathWant
				if mode == pgx.QueryExecModeCacheStatement {
					want = preparedPathWant
				}
				check(t, runPathSteps(func(sql string) (string, error) { return pgxValue(ctx, conn, sql) }, target.read), want)
			})
		}
		t.Run("pgx Prepare "+target.name, func(t *testing.T) {
			conn := connectTo(t, ctx, target.url)
			if _, err := conn.Prepare(ctx, "r", target.read); err != nil {
				t.Fatal(err)
			}
			check(t, runPathSteps(func(sql string) (string, error) {
				if sql == target.read {
					sql = "r"
				}
				return pgxValue(ctx, conn, sql)
			}, target.read), preparedPathWant)
		})
		t.Run("lib/pq Prepare "+target.name, func(t *testing.T) {
			pool, err := sql.Open("postgres", target.url)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			conn, err := pool.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			stmt, err := conn.PrepareContext(ctx, target.read)
			if err != nil {
				t.Fatal(err)
			}
			defer stmt.Close()
			check(t, runPathSteps(func(text string) (string, error) {
				if text != target.read {
					_, err := conn.ExecContext(ctx, text)
					return "", err
				}
				var v string
				return v, stmt.QueryRowContext(ctx).Scan(&v)
			}, target.read), preparedPathWant)
		})
		t.Run("psycopg "+target.name, func(t *testing.T) {
			command, err := pythonModule("psycopg")()
			requireDriver(t, err, "apt-get install -y python3-psycopg")
			url := target.url
			if target.name == "mzproxy" {
				host, port := p.hostPort()
				url = libpqURL(host, port, db)
			}
			steps, _ := json.Marshal(preparedPathSteps)
			want, _ := json.Marshal(preparedPathWant)
			results := runDriverProgram(t, filepath.Join("testdata", "python"), nil, command[0], "psycopg_prepared_path.py",
				url, target.read, string(steps), string(want))
			if failure, ran := results["reads"]; !ran || failure != "" {
				t.Errorf("ran %v: %s", ran, failure)
			}
		})
	}
	p.mustAlive(t, ctx)
}

// runPathSteps runs preparedPathSteps with run, "read" as read, and
// returns each read's first column or SQLSTATE.
func runPathSteps(run func(sql string) (string, error), read string) []string {
	return runSteps(run, read, preparedPathSteps)
}

// runSteps runs steps with run, "read" as read, and returns each read's
// first column or SQLSTATE, and the errors of the other steps.
func runSteps(run func(sql string) (string, error), read string, steps []string) []string {
	var got []string
	for _, step := range steps {
		if step != "read" {
			if _, err := run(step); err != nil {
				got = append(got, step+": "+sqlState(err))
			}
			continue
		}
		v, err := run(read)
		if err != nil {
			var pqErr *pq.Error
			if errors.As(err, &pqErr) {
				v = string(pqErr.Code)
			} else {
				v = sqlState(err)
			}
			if v == "" {
				v = fmt.Sprintf("%T %v", err, err)
			}
		}
		got = append(got, v)
	}
	return got
}

// pgxValue runs sql with args and returns its first row's first column
// as text.
func pgxValue(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var v string
	if rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return "", err
		}
		if s, ok := values[0].(string); ok {
			v = s
		}
	}
	rows.Close()
	return v, rows.Err()
}
