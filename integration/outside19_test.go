package integration

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestOutside19SelectWritingFunction: a statement that does not write
// (SELECT f()) calling a function that writes a never-written managed
// table meets the refusing trigger (40001, "might succeed if retried").
// The retry must not get the same 40001 forever: the session's next
// statement, whatever its kind, builds that table first, so the retry gets
// the answer it gets once the table is built (MZ002, a write outside
// mzproxy's write path), in autocommit and in a block, in every pgx mode.
// An INSERT that calls f() is a write of mzproxy's and lands. On 9b0837e
// the retry got 40001 again.
func TestOutside19SelectWritingFunction(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	direct := connectTo(t, ctx, directURL("postgres", db))
	for _, mode := range pgxModes {
		c := connectMode(t, ctx, p.URL("postgres", db), mode)
		tb := tableName(t)
		fn := tb + "_f"
		mustExec(t, ctx, c, "CREATE TABLE "+tb+" (k int)",
			"CREATE FUNCTION "+fn+"() RETURNS int LANGUAGE sql AS $$ INSERT INTO "+tb+" VALUES (1) RETURNING k $$")
		wantLazy(t, ctx, direct, tb)

		// Autocommit: one 40001, then what a built table answers.
		var k int
		err := c.QueryRow(ctx, "SELECT "+fn+"()").Scan(&k)
		wantCode(t, err, "40001")
		for try := 0; try < 2; try++ {
			err = c.QueryRow(ctx, "SELECT "+fn+"()").Scan(&k)
			wantCode(t, err, "MZ002")
		}
		wantHistory(t, ctx, direct, tb, 0)

		// The session goes on, and a write of mzproxy's through f lands.
		if _, err := c.Exec(ctx, "INSERT INTO "+tb+" SELECT "+fn+"() + 1"); err != nil {
			t.Fatalf("%v: INSERT through the function: %v", mode, err)
		}
		if n := count(t, ctx, c, "SELECT count(*) FROM "+tb, pgx.QueryExecModeSimpleProtocol); n != 2 {
			t.Errorf("%v: %d rows, want 2", mode, n)
		}

		// A block whose first statement is such a read, on a second
		// never-written table: 40001 aborts it; the client's retry of the
		// block gets MZ002, as for a built table.
		tb2 := tb + "_b"
		fn2 := tb2 + "_f"
		mustExec(t, ctx, c, "CREATE TABLE "+tb2+" (k int)",
			"CREATE FUNCTION "+fn2+"() RETURNS int LANGUAGE sql AS $$ INSERT INTO "+tb2+" VALUES (1) RETURNING k $$")
		for try, want := range []string{"40001", "MZ002"} {
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatalf("%v: begin %d: %v", mode, try, err)
			}
			err = tx.QueryRow(ctx, "SELECT "+fn2+"()").Scan(&k)
			wantCode(t, err, want)
			if err := tx.Rollback(ctx); err != nil {
				t.Fatalf("%v: rollback %d: %v", mode, try, err)
			}
		}
		if n := count(t, ctx, c, "SELECT count(*) FROM "+tb2, pgx.QueryExecModeSimpleProtocol); n != 0 {
			t.Errorf("%v: %d rows in %s, want 0", mode, n, tb2)
		}
	}
}

// TestHostile19DatabaseSettings: a role with CREATEDB sets, on a
// database it owns, settings that PostgreSQL applies to every session
// that connects to it, mzproxy's own (install, catalog, leases,
// compaction) included: settings that change what the proxy's own SQL
// means (NULL comparisons, array literals, date and interval styles, the
// time zone, float and bytea output). (Plan settings that make each
// statement JIT-compile, enable_seqscan = off above all, slow the
// database's sessions, as directly: docs/outside.md.) A proxy
// started afterwards serves the database exactly: writes, reads of the
// present, AS OF an earlier timestamp and the history it keeps agree
// with what was written; the role is no superuser; the proxy serves on.
func TestHostile19DatabaseSettings(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	execDirect(t, ctx, "ALTER ROLE "+role+" CREATEDB")
	db := databaseOwnedBy(t, ctx, role)
	var settings []string
	for _, s := range []string{
		"transform_null_equals = on", "array_nulls = off", "DateStyle = 'SQL, DMY'",
		"IntervalStyle = sql_standard", "TimeZone = 'Pacific/Chatham'", "extra_float_digits = -15",
		"bytea_output = escape", "lc_monetary = 'C'", "xmloption = document",
		"backslash_quote = off", "check_function_bodies = off", "quote_all_identifiers = on",
	} {
		settings = append(settings, "ALTER DATABASE "+db+" SET "+s)
	}
	mustExec(t, ctx, connectAs(t, ctx, directURL(role, db)), settings...)

	// (History kept long enough for AS OF the first writes however
	// slowly a loaded machine runs the test.)
	p := startProxy(t, matrixProxyFlags...)
	conn := connectAs(t, ctx, p.URL(role, db))
	mustExec(t, ctx, conn,
		"CREATE TABLE public.t (k int PRIMARY KEY, v int)",
		"CREATE TABLE public.n (v int)",
		"INSERT INTO public.t VALUES (1, 1), (2, 2)",
		"INSERT INTO public.n VALUES (NULL), (1)")
	var before int64
	if err := conn.QueryRow(ctx, "SELECT mz_now()::text::bigint FROM public.t LIMIT 1", pgx.QueryExecModeSimpleProtocol).Scan(&before); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, conn,
		"UPDATE public.t SET v = v + 10 WHERE k = 1",
		"UPDATE public.n SET v = 5 WHERE v IS NULL",
		"BEGIN", "INSERT INTO public.t VALUES (3, 3)", "DELETE FROM public.t WHERE k = 2", "COMMIT")
	for _, mode := range pgxModes {
		var got string
		if err := conn.QueryRow(ctx, "SELECT string_agg(k || ':' || v, ',' ORDER BY k) FROM public.t AS OF mz_now()", mode).Scan(&got); err != nil || got != "1:11,3:3" {
			t.Errorf("%v: the present: %q, %v", mode, got, err)
		}
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT string_agg(k || ':' || v, ',' ORDER BY k) FROM public.t AS OF %d", before), mode).Scan(&got); err != nil || got != "1:1,2:2" {
			t.Errorf("%v: AS OF %d: %q, %v", mode, before, got, err)
		}
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT string_agg(coalesce(v::text, 'null'), ',' ORDER BY v) FROM public.n AS OF %d", before), mode).Scan(&got); err != nil || got != "1,null" {
			t.Errorf("%v: n AS OF %d: %q, %v", mode, before, got, err)
		}
		if err := conn.QueryRow(ctx, "SELECT string_agg(v::text, ',' ORDER BY v) FROM public.n AS OF mz_now()", mode).Scan(&got); err != nil || got != "1,5" {
			t.Errorf("%v: n now: %q, %v", mode, got, err)
		}
	}
	p.mustAlive(t, ctx)
	admin := connectAs(t, ctx, directURL("postgres", "postgres"))
	var super bool
	if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1", role).Scan(&super); err != nil || super {
		t.Fatalf("the role is a superuser: %v %v", super, err)
	}
	// Another database served on by the same proxy.
	other := p.connect(t, ctx)
	if _, err := other.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}
