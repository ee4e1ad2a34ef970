package integration

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

// TestSchemaUsageAtTimestamp: an ordinary role granted SELECT on tables
// of a schema it may not use (nouse) reads them at a timestamp (AS OF
// mz_now(), AS OF AT LEAST, mz_now() in the query, history mode; a view there too) through
// mzproxy (event loop on and off) with pgx's simple and extended
// protocols, and gets PostgreSQL's own answer to the statement without
// the timestamp: 42501 "permission denied for schema nouse" for a
// qualified name, 42P01 for an unqualified one the search path finds only
// there. An unqualified name that PostgreSQL's lookup finds in a later
// schema is refused with the same 42501 (README Security). A prepared read
// stops when the role loses SELECT.
func TestSchemaUsageAtTimestamp(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{proxies: [][]string{nil, {"--event-loop=false"}, {"--history-reads"}}})
	ctx, db, role := st.ctx, st.db, st.role
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, `CREATE SCHEMA nouse`, `CREATE SCHEMA hid`,
		`CREATE TABLE nouse.t (v text)`, `CREATE TABLE nouse.only_here (v text)`, `CREATE TABLE public.t (v text)`,
		`INSERT INTO nouse.t VALUES ('nouse')`, `INSERT INTO nouse.only_here VALUES ('nouse')`, `INSERT INTO public.t VALUES ('public')`,
		`CREATE VIEW nouse.vw AS SELECT v FROM public.t`,
		`GRANT SELECT ON nouse.t, nouse.only_here, nouse.vw, public.t TO `+role)
	answer := func(ctx context.Context, conn *pgx.Conn, sql string) string {
		v, err := pgxValue(ctx, conn, sql)
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return pe.Code + " " + pe.Message
		}
		if err != nil {
			return err.Error()
		}
		return v
	}
	direct := map[pgx.QueryExecMode]*pgx.Conn{}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		direct[mode] = connectMode(t, ctx, directURL(role, db), mode)
	}
	const denied = "42501 permission denied for schema nouse"
	cases := []struct {
		path, read string
		want       string // "" : PostgreSQL's answer to the read without the timestamp
	}{
		{"public", "SELECT v FROM nouse.t AS OF mz_now()", ""},
		{"public", "SELECT v FROM nouse.t AS OF AT LEAST mz_now()", ""},
		{"public", "SELECT v FROM nouse.t x WHERE mz_now() > 0", ""},
		{"public", "SELECT (SELECT v FROM nouse.only_here) FROM public.t AS OF mz_now()", ""},
		{"nouse, public", "SELECT v FROM only_here AS OF mz_now()", ""},
		{"public", "SELECT v FROM nouse.vw AS OF mz_now()", ""},
		{"nouse, public", "SELECT v FROM vw AS OF mz_now()", ""},
		{"nouse", "SELECT v FROM t AS OF mz_now()", ""},
		{"public", "SELECT v FROM t AS OF mz_now()", ""},
		// PostgreSQL reads public.t; mzproxy's catalog resolves t to nouse.t.
		{"nouse, public", "SELECT v FROM t AS OF mz_now()", denied},
	}
	for i, p := range st.proxies {
		for mode, dconn := range direct {
			conn := connectMode(t, ctx, p.URL(role, db), mode)
			for _, c := range cases {
				mustExec(t, ctx, conn, "SET search_path = "+c.path)
				mustExec(t, ctx, dconn, "SET search_path = "+c.path)
				want := c.want
				if want == "" {
					text := c.read
					for _, cut := range []string{" AS OF AT LEAST mz_now()", " AS OF mz_now()", " WHERE mz_now() > 0"} {
						text = strings.ReplaceAll(text, cut, "")
					}
					want = answer(ctx, dconn, text)
				}
				if i == 2 {
					// --history-reads: the read without AS OF too.
					c.read = strings.ReplaceAll(c.read, " AS OF mz_now()", "")
				}
				if got := answer(ctx, conn, c.read); got != want {
					t.Errorf("proxy %d, %v, search_path %s: %s: mzproxy answered %q, want %q", i, mode, c.path, c.read, got, want)
				}
			}
		}
	}

	// A prepared read stops when the role loses SELECT.
	conn := connectMode(t, ctx, st.url(1, role), pgx.QueryExecModeCacheStatement)
	const read = "SELECT v FROM public.t AS OF mz_now()"
	if got := answer(ctx, conn, read); got != "public" {
		t.Fatalf("%s: %q", read, got)
	}
	mustExec(t, ctx, owner, "REVOKE SELECT ON public.t FROM "+role)
	// The executor checks the history table first, so its name is the
	// one in the message (README Security).
	if got := answer(ctx, conn, read); !strings.HasPrefix(got, "42501 permission denied for table ") {
		t.Errorf("after REVOKE SELECT: %s: %q", read, got)
	}
}

// TestRowSecurityAtTimestamp: a managed table's history has no row-level
// security policies, so a read at a timestamp of a table with row-level
// security enabled is refused (0A000) rather than showing the rows its
// policies hide; the same read works before ENABLE ROW LEVEL SECURITY,
// and directly PostgreSQL applies the policy.
func TestRowSecurityAtTimestamp(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{proxies: [][]string{nil, {"--event-loop=false"}}})
	ctx, db, role := st.ctx, st.db, st.role
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, `CREATE TABLE rls (v text)`, `INSERT INTO rls VALUES ('mine'), ('hidden')`,
		`GRANT SELECT ON rls TO `+role)
	const read = "SELECT count(*)::text FROM rls AS OF mz_now()"
	var conns []*pgx.Conn
	for _, p := range st.proxies {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			conn := connectMode(t, ctx, p.URL(role, db), mode)
			if v, err := pgxValue(ctx, conn, read); err != nil || v != "2" {
				t.Fatalf("before row-level security: %q, %v", v, err)
			}
			conns = append(conns, conn)
		}
	}
	mustExec(t, ctx, owner, `ALTER TABLE rls ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY mine ON rls FOR SELECT USING (v = 'mine')`)
	if v, err := pgxValue(ctx, connectTo(t, ctx, directURL(role, db)), strings.ReplaceAll(read, " AS OF mz_now()", "")); err != nil || v != "1" {
		t.Fatalf("directly: %q, %v", v, err)
	}
	for i, conn := range conns {
		if v, err := pgxValue(ctx, conn, read); sqlState(err) != "0A000" {
			t.Errorf("connection %d: %s: %q, %v; want 0A000", i, read, v, err)
		}
	}
}

// TestExplainTimestampRights: EXPLAIN TIMESTAMP, which mzproxy answers
// itself with a table's frontiers, requires what PostgreSQL requires to
// read the tables it explains: schema USAGE and SELECT, with PostgreSQL's
// SQLSTATE and message (those of EXPLAIN of the same SELECT directly), in
// every pgx exec mode, on a proxy with and without the event loop; a role
// that may read them gets its answer; a failure inside a transaction
// block aborts it, as directly. On the old code every one of them was
// answered.
func TestExplainTimestampRights(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{proxies: [][]string{nil, {"--event-loop=false"}}})
	ctx, db, role := st.ctx, st.db, st.role
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, `CREATE SCHEMA nouse`,
		`CREATE TABLE nouse.t (v text)`, `CREATE TABLE public.secret (v text)`, `CREATE TABLE public.open (v text)`,
		`CREATE TABLE public.cols (k int, v text)`, `CREATE VIEW public.secret_vw AS SELECT v FROM public.open`,
		`INSERT INTO public.open VALUES ('x')`,
		`GRANT SELECT ON nouse.t, public.open TO `+role, `GRANT SELECT (k) ON public.cols TO `+role)
	answer := func(conn *pgx.Conn, sql string) string {
		rows, err := conn.Query(ctx, sql)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return pe.Code + " " + pe.Message
		}
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	directConn := connectTo(t, ctx, directURL(role, db))
	for _, sel := range []string{
		"SELECT v FROM nouse.t",
		"SELECT v FROM public.secret",
		"SELECT v FROM secret",
		"SELECT o.v FROM public.open o JOIN public.secret s ON true",
		"SELECT v FROM public.secret_vw",
		"SELECT v FROM nosuch",
		"SELECT k FROM public.cols",
		"SELECT v FROM public.open",
	} {
		want := answer(directConn, "EXPLAIN "+sel)
		for i, p := range st.proxies {
			for _, mode := range pgxModes {
				conn := connectMode(t, ctx, p.URL(role, db), mode)
				for _, stmt := range []string{"EXPLAIN TIMESTAMP FOR " + sel, "EXPLAIN TIMESTAMP AS JSON FOR " + sel + " AS OF AT LEAST 0"} {
					if got := answer(conn, stmt); got != want {
						t.Errorf("proxy %d, %v: %s: mzproxy answered %q, PostgreSQL %q", i, mode, stmt, got, want)
					}
				}
				// In a block, a refused EXPLAIN TIMESTAMP aborts it.
				mustExec(t, ctx, conn, "BEGIN")
				got := answer(conn, "EXPLAIN TIMESTAMP FOR "+sel)
				after := answer(conn, "SELECT 1")
				mustExec(t, ctx, conn, "ROLLBACK")
				if want == "ok" && (got != "ok" || after != "ok") || want != "ok" && !strings.HasPrefix(after, "25P02 ") {
					t.Errorf("proxy %d, %v: in a block, EXPLAIN TIMESTAMP FOR %s: %q, then SELECT 1: %q", i, mode, sel, got, after)
				}
			}
		}
	}
}

// TestTimestampedReadRightsEveryProtocol: a role's timestamped read with a
// parameter (mz_now(), AS OF AT LEAST) fails as PostgreSQL fails the read
// without the timestamp, in every pgx exec mode and through lib/pq's Query
// and Exec with arguments (the Bind behind the read guard, the unnamed
// statement parsed and bound in one batch, the simple protocol with
// interpolated arguments): 42501 for a schema without USAGE, 42P01, 42501
// for a table without SELECT (whose message names the history table:
// README Security), and the rows for a table it may read.
func TestTimestampedReadRightsEveryProtocol(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{})
	ctx, db, role := st.ctx, st.db, st.role
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, `CREATE SCHEMA nouse`,
		`CREATE TABLE nouse.t (k int, v text)`, `CREATE TABLE public.secret (k int, v text)`, `CREATE TABLE public.open (k int, v text)`,
		`INSERT INTO public.open VALUES (1, 'x')`, `GRANT SELECT ON nouse.t, public.open TO `+role)
	code := func(err error) string {
		var pe *pgconn.PgError
		var qe *pq.Error
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &pe):
			return pe.Code + " " + pe.Message
		case errors.As(err, &qe):
			return string(qe.Code) + " " + qe.Message
		}
		return err.Error()
	}
	same := func(got, want string) bool {
		const table = "42501 permission denied for table "
		return got == want || strings.HasPrefix(got, table) && strings.HasPrefix(want, table)
	}
	direct := connectTo(t, ctx, directURL(role, db))
	pool, err := sql.Open("postgres", st.url(0, role))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	for _, rel := range []string{"nouse.t", "public.secret", "nosuch", "public.open"} {
		plain := "SELECT v FROM " + rel + " WHERE k = $1"
		var v string
		want := code(direct.QueryRow(ctx, plain, 1).Scan(&v))
		for _, read := range []string{"SELECT v, mz_now() FROM " + rel + " WHERE k = $1", plain + " AS OF AT LEAST mz_now()"} {
			for _, mode := range pgxModes {
				conn := connectMode(t, ctx, st.url(0, role), mode)
				rows, err := conn.Query(ctx, read, 1)
				if err == nil {
					for rows.Next() {
					}
					rows.Close()
					err = rows.Err()
				}
				if got := code(err); !same(got, want) {
					t.Errorf("%v: %s: mzproxy %q, PostgreSQL %q", mode, read, got, want)
				}
			}
			rows, err := pool.QueryContext(ctx, read, 1)
			if err == nil {
				for rows.Next() {
				}
				rows.Close()
				err = rows.Err()
			}
			if got := code(err); !same(got, want) {
				t.Errorf("lib/pq Query: %s: mzproxy %q, PostgreSQL %q", read, got, want)
			}
			if _, err := pool.ExecContext(ctx, read, 1); !same(code(err), want) {
				t.Errorf("lib/pq Exec: %s: mzproxy %q, PostgreSQL %q", read, code(err), want)
			}
		}
	}
}
