package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mzproxy/mzproxy/proxy/storage"
)

// TestHostileFlatWriteSlot: since storage 44 an autocommit write's slot is
// a flat statement the proxy runs as the client's role, under the
// client's search_path. An ordinary role puts a schema of its own before
// pg_catalog, with look-alikes of what the statement names (set_config,
// current_setting and clock_timestamp that do nothing, "=", ">=" and "<>"
// that always answer the same, a table gate), and writes through mzproxy
// in both protocols: every write commits at a T above what was read
// before it, history before stays exact, and the row's history is the
// writes'. A T it sets, through mzproxy or directly with the proxy's own
// slot statement after it, fails with 42501, and mzproxy's tables stay
// out of its reach.
func TestHostileFlatWriteSlot(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	tbl := tableName(t)
	execDirect(t, ctx, fmt.Sprintf("CREATE SCHEMA %s AUTHORIZATION %s", role, role))
	viaProxy := connectAs(t, ctx, p.URL(role, "postgres"))
	direct := connectAs(t, ctx, directURL(role, "postgres"))
	admin := connectDirect(t, ctx)
	mustExec(t, ctx, viaProxy, "CREATE TABLE public."+tbl+" (k int PRIMARY KEY, v int)", "INSERT INTO public."+tbl+" VALUES (1, 0)")
	for _, s := range []string{
		"CREATE FUNCTION set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$",
		"CREATE FUNCTION current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT '' $$",
		"CREATE FUNCTION clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '1970-01-01'::timestamptz $$",
		"CREATE FUNCTION yes(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$",
		"CREATE FUNCTION yes(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$",
		"CREATE FUNCTION no(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$",
		"CREATE OPERATOR = (FUNCTION = yes, LEFTARG = bigint, RIGHTARG = bigint)",
		"CREATE OPERATOR >= (FUNCTION = yes, LEFTARG = timestamptz, RIGHTARG = timestamptz)",
		"CREATE OPERATOR <> (FUNCTION = no, LEFTARG = text, RIGHTARG = text)",
		"CREATE TABLE gate ()",
	} {
		if _, err := direct.Exec(ctx, "SET search_path = "+role+"; "+s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	hostilePath := "SET search_path = " + role + ", public, pg_catalog"
	mustExec(t, ctx, viaProxy, hostilePath)
	mustExec(t, ctx, direct, hostilePath)

	var hist string
	if err := admin.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE oid = $1::regclass AND dropped_ts IS NULL", tbl).Scan(&hist); err != nil {
		t.Fatal(err)
	}
	asOf := func(ts int64) string {
		t.Helper()
		var s *string
		if err := admin.QueryRow(ctx, "SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM "+hist+" WHERE mz_from <= $1 AND mz_to > $1", ts).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s == nil {
			return ""
		}
		return *s
	}
	t0 := oracleReadTS(t, ctx, admin)
	before := asOf(t0)
	want := 0
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
		read := oracleReadTS(t, ctx, admin)
		if _, err := viaProxy.Exec(ctx, "UPDATE "+tbl+" SET v = v + 1 WHERE k = $1", mode, 1); err != nil {
			t.Fatalf("UPDATE through mzproxy under a hostile search_path (%v): %v", mode, err)
		}
		want++
		var from int64
		if err := admin.QueryRow(ctx, "SELECT max(mz_from) FROM "+hist).Scan(&from); err != nil {
			t.Fatal(err)
		}
		if from <= read {
			t.Errorf("write %d at %d, at or below the read before it at %d", i, from, read)
		}
		if got := asOf(from); got != fmt.Sprintf("1=%d", want) {
			t.Errorf("AS OF the write's T %d: %q, want 1=%d", from, got, want)
		}
		if got := asOf(from - 1); got != fmt.Sprintf("1=%d", want-1) {
			t.Errorf("AS OF just before the write's T %d: %q, want 1=%d", from, got, want-1)
		}
	}
	if _, err := viaProxy.Exec(ctx, "INSERT INTO "+tbl+" VALUES (2, 2)"); err != nil {
		t.Fatal(err)
	}
	if _, err := viaProxy.Exec(ctx, "DELETE FROM "+tbl+" WHERE k = 2", pgx.QueryExecModeExec); err != nil {
		t.Fatal(err)
	}

	// T chosen by the role: through mzproxy; directly with the proxy's
	// slot statement after it (the slot keeps a setting it finds, and
	// begin_write_occ refuses a forged one).
	forged := fmt.Sprintf("%d - %064d", t0, 0)
	if _, err := viaProxy.Exec(ctx, "SELECT pg_catalog.set_config('mzproxy.write_ts', $1, false)", forged); err != nil {
		t.Fatal(err)
	}
	_, err := viaProxy.Exec(ctx, "UPDATE "+tbl+" SET v = 50", pgx.QueryExecModeSimpleProtocol)
	wantCode(t, err, "42501")
	mustExec(t, ctx, viaProxy, "RESET mzproxy.write_ts")
	_, err = direct.Exec(ctx, "SELECT pg_catalog.set_config('mzproxy.write_ts', '"+forged+"', true); "+
		storage.OpenWriteFor(-1)+"; UPDATE public."+tbl+" SET v = 51")
	wantCode(t, err, "42501")
	// The slot statement by the role itself: a request, T still the oracle's.
	read := oracleReadTS(t, ctx, admin)
	if _, err := direct.Exec(ctx, storage.OpenWriteFor(-1)+"; UPDATE public."+tbl+" SET v = v + 1"); err != nil {
		t.Fatalf("the proxy's slot statement run by the role directly: %v", err)
	}
	want++
	var from int64
	if err := admin.QueryRow(ctx, "SELECT max(mz_from) FROM "+hist).Scan(&from); err != nil {
		t.Fatal(err)
	}
	if from <= read || asOf(from) != fmt.Sprintf("1=%d", want) {
		t.Errorf("the role's own slot statement: write at %d (read before at %d), AS OF it %q", from, read, asOf(from))
	}
	for _, s := range []string{"INSERT INTO mzproxy.gate DEFAULT VALUES", "TRUNCATE mzproxy.gate",
		"INSERT INTO " + hist + " SELECT 1, 9223372036854775807, 0, 9, 9", "UPDATE " + hist + " SET mz_to = 1",
		"SELECT pg_catalog.setval('mzproxy.pinned', 1)"} {
		_, err := direct.Exec(ctx, s)
		if sqlState(err) != "42501" {
			t.Errorf("%s by an ordinary role: %v, want 42501", s, err)
		}
	}
	if after := asOf(t0); after != before {
		t.Errorf("AS OF %d changed after the fact: %q, was %q", t0, after, before)
	}
	if strings.Contains(asOf(oracleReadTS(t, ctx, admin)), "5") {
		t.Errorf("a refused write is in history: %q", asOf(oracleReadTS(t, ctx, admin)))
	}
}
