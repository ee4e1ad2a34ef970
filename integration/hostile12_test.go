package integration

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestHostile12PreparedPath: an ordinary role's prepared timestamped
// reads, with a parameter, across search_path changes PostgreSQL resolves
// in its own ways: a schema whose name needs quoting, a path naming no
// schema with t (42P01, and the prepared statement serves again once the
// path has t again), an empty path (a schema the role may not use:
// TestSchemaUsageAtTimestamp). Through pgx's five modes and lib/pq
// (Prepare, and QueryRow with arguments), each against PostgreSQL itself
// as the same role: the same answers or SQLSTATEs.
func TestHostile12PreparedPath(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{})
	ctx, db, role, p := st.ctx, st.db, st.role, st.proxies[0]
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, `CREATE SCHEMA a`, `CREATE SCHEMA "we""ird"`, `CREATE SCHEMA empty`,
		`CREATE TABLE public.t (v text)`, `CREATE TABLE a.t (v text)`, `CREATE TABLE "we""ird".t (v text)`,
		`INSERT INTO public.t VALUES ('public')`, `INSERT INTO a.t VALUES ('a')`, `INSERT INTO "we""ird".t VALUES ('weird')`,
		`GRANT USAGE ON SCHEMA a, "we""ird", empty TO `+role,
		`GRANT SELECT ON public.t, a.t, "we""ird".t TO `+role)
	const read = "SELECT v FROM t WHERE v <> $1 AS OF mz_now()"
	steps := []string{
		"read",
		"SET search_path = empty, a", "read",
		`SET search_path = "we""ird"`, "read",
		"SET search_path = empty", "read",
		"SELECT pg_catalog.set_config('search_path', '', false)", "read",
		"SET search_path = a", "read",
		"RESET search_path", "read",
	}
	targets := []struct{ name, url, read string }{
		{"postgres", directURL(role, db), directText(read, true)},
		{"mzproxy", p.URL(role, db), read},
	}
	answers := map[string][]string{}
	record := func(t *testing.T, client, target string, got []string) {
		t.Helper()
		answers[client+" "+target] = got
		if target == "mzproxy" {
			if want := answers[client+" postgres"]; strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("%s: mzproxy answered %q, PostgreSQL %q", client, got, want)
			}
		}
	}
	for _, target := range targets {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
			pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
			conn := connectMode(t, ctx, target.url, mode)
			record(t, mode.String(), target.name, runSteps(func(text string) (string, error) {
				if text != target.read {
					return pgxValue(ctx, conn, text)
				}
				return pgxValue(ctx, conn, text, "zzz")
			}, target.read, steps))
		}
		pool, err := sql.Open("postgres", target.url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		for _, prepared := range []bool{true, false} {
			conn, err := pool.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var stmt *sql.Stmt
			if prepared {
				if stmt, err = conn.PrepareContext(ctx, target.read); err != nil {
					t.Fatal(err)
				}
				defer stmt.Close()
			}
			record(t, fmt.Sprintf("lib/pq prepared=%v", prepared), target.name, runSteps(func(text string) (string, error) {
				if text != target.read {
					_, err := conn.ExecContext(ctx, text)
					return "", err
				}
				var row *sql.Row
				if stmt != nil {
					row = stmt.QueryRowContext(ctx, "zzz")
				} else {
					row = conn.QueryRowContext(ctx, text, "zzz")
				}
				var v string
				if err := row.Scan(&v); err != sql.ErrNoRows {
					return v, err
				}
				return "", nil
			}, target.read, steps))
		}
	}
	t.Logf("PostgreSQL's answers: %q", answers[pgx.QueryExecModeCacheStatement.String()+" postgres"])
	p.mustAlive(t, ctx)
}
