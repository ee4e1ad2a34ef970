package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// deepRole is an ordinary login role (not superuser) that may write the
// test's table; its name is unique to the test.
func deepRole(t *testing.T, ctx context.Context, proxy *proxyProc, table string) string {
	t.Helper()
	role := "deep_" + strings.TrimPrefix(table, "t_")
	passwordRole(t, ctx, role, "unused", "")
	admin := proxy.connect(t, ctx)
	for _, sql := range []string{
		fmt.Sprintf("CREATE TABLE %s (a int)", table),
		fmt.Sprintf("GRANT SELECT, INSERT ON %s TO %s", table, role),
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	return role
}

// wantStackDepth checks err is PostgreSQL's 54001 with its hint.
func wantStackDepth(t *testing.T, err error) {
	t.Helper()
	wantCode(t, err, "54001")
	var pe *pgconn.PgError
	errors.As(err, &pe)
	const hint = `Increase the configuration parameter "max_stack_depth" (currently 2048kB), after ensuring the platform's stack depth limit is adequate.`
	if pe.Message != "stack depth limit exceeded" || pe.Hint != hint {
		t.Fatalf("got %q, hint %q", pe.Message, pe.Hint)
	}
}

// mustWork runs a read and a write on conn.
func mustWork(t *testing.T, ctx context.Context, conn *pgx.Conn, table, who string) {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx, "SELECT 1 + 1").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%s: SELECT after the deep statement: %v", who, err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES (1)", table)); err != nil {
		t.Fatalf("%s: INSERT after the deep statement: %v", who, err)
	}
}

// TestDeepStatementDoesNotKillTheProxy: issue #13's INSERT of a sum of
// 25,000 terms crashed mzproxy with SIGSEGV in the parser's C code,
// dropping every session. Sent by an ordinary role, it now gets
// PostgreSQL's 54001 over both protocols; that session and one opened
// before keep working, and nothing was written.
func TestDeepStatementDoesNotKillTheProxy(t *testing.T) {
	ctx := testContext(t)
	proxy := startProxy(t)
	table := tableName(t)
	role := deepRole(t, ctx, proxy, table)
	bystander := connectURL(t, ctx, proxy.URL(role, "postgres"))
	attacker := connectURL(t, ctx, proxy.URL(role, "postgres"))
	if err := bystander.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	deep := fmt.Sprintf("INSERT INTO %s VALUES (%s1)", table, strings.Repeat("1+", 25000))
	_, err := attacker.PgConn().Exec(ctx, deep).ReadAll()
	wantStackDepth(t, err)
	_, err = attacker.PgConn().ExecParams(ctx, deep, nil, nil, nil, nil).Close()
	wantStackDepth(t, err)

	mustWork(t, ctx, attacker, table, "the same session")
	mustWork(t, ctx, bystander, table, "the session opened before")
	proxy.mustAlive(t, ctx)
	var rows int
	if err := bystander.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("rows: %d, %v; want the two inserts after the deep one", rows, err)
	}
}

// TestDeepStatementIsNotForwarded: a write nested deeper than the planner
// parses but not as deep as PostgreSQL's own limit (1,000 scalar
// subqueries; PostgreSQL 15 takes up to 2,111) is refused with 54001, not
// forwarded to the backend unplanned (where the managed table's guard
// answered MZ002, "cannot write to managed table ... outside mzproxy").
func TestDeepStatementIsNotForwarded(t *testing.T) {
	ctx := testContext(t)
	proxy := startProxy(t)
	table := tableName(t)
	role := deepRole(t, ctx, proxy, table)
	conn := connectURL(t, ctx, proxy.URL(role, "postgres"))

	subqueries := strings.Repeat("(SELECT ", 1000) + "1" + strings.Repeat(")", 1000)
	deep := fmt.Sprintf("INSERT INTO %s VALUES (%s)", table, subqueries)
	_, err := conn.PgConn().Exec(ctx, deep).ReadAll()
	wantStackDepth(t, err)
	_, err = conn.PgConn().ExecParams(ctx, deep, nil, nil, nil, nil).Close()
	wantStackDepth(t, err)

	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("rows: %d, %v; want none", rows, err)
	}
	// PostgreSQL itself takes it: the refusal is the proxy's.
	direct := connectDirect(t, ctx)
	if _, err := direct.Exec(ctx, "SELECT "+subqueries); err != nil {
		t.Fatalf("PostgreSQL refuses it too: %v", err)
	}
}
