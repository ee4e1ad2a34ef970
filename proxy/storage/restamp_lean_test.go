package storage

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// tableFunctions is the suffixes of the functions in the schema named
// after table's history (h<id>_<suffix>), in order.
func tableFunctions(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	got, err := collectText(context.Background(), conn, `SELECT substr(p.proname, length(k.history) - length('`+Schema+`.') + 2)
		FROM pg_proc p, `+Schema+`.catalog k
		WHERE k.oid = $1::regclass AND p.pronamespace = '`+Schema+`'::regnamespace
		  AND p.proname LIKE replace(k.history, '`+Schema+`.', '') || '\_%'`, table)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, ",")
}

// restampLeftovers counts the schema's _closed and _restamp functions,
// which nothing calls since version 49.
const restampLeftovers = `SELECT count(*) FROM pg_proc p WHERE p.pronamespace = '` + Schema + `'::regnamespace
	AND (p.proname ~ '^h[0-9]+_closed$' OR p.proname ~ '^h[0-9]+_restamp$')`

// Version 50 (restamp_lean.sql): a table's first write makes its restamp
// function _fix and no _closed or _restamp; its blocks commit through it.
func TestFirstWriteMakesOnlyFix(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)",
		"INSERT INTO a VALUES (1, 0), (2, 0)", "INSERT INTO n VALUES (1, 0)")
	for _, table := range []string{"a", "n"} {
		if got := tableFunctions(t, conn, table); got != "del,fix,ins,trunc,upd" {
			t.Errorf("%s's history functions after its first write: %s, want del,fix,ins,trunc,upd", table, got)
		}
	}
	if n := queryInt(t, conn, restampLeftovers); n != 0 {
		t.Errorf("%d _closed or _restamp functions", n)
	}
	ha := strings.TrimPrefix(queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass"), Schema+".")
	calls := blockCalls(t, cs, -1, "UPDATE a SET v = 1 WHERE id = 1", "DELETE FROM a WHERE id = 2", "UPDATE n SET v = 1")
	if callCount(calls, ha+"_fix") != 1 || callCount(calls, "restamp_dynamic") != 0 {
		t.Errorf("a block: %v, want %s_fix once and no restamp_dynamic", calls, ha)
	}
	for _, table := range []string{"a", "n"} {
		historyMatches(t, conn, table, uint64(queryInt(t, conn, ReadTSSQL)), "a block")
	}
}

// The upgrade from 49 drops every table's _closed and _restamp (a dropped
// table's too, whose history is kept) and keeps _fix, not PUBLIC's; blocks
// and autocommit writes after it keep history exact; a table made after
// it gets _fix alone.
func TestUpgradeToVersion50(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 49)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)", "CREATE TABLE d (id int PRIMARY KEY)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g", "INSERT INTO n VALUES (1, 1)", "INSERT INTO d VALUES (1)")
	inWrite(t, conn, "DROP TABLE d")
	fixes := "SELECT count(*) FROM pg_proc p WHERE p.pronamespace = '" + Schema + "'::regnamespace AND p.proname ~ '^h[0-9]+_fix$'"
	if n := queryInt(t, conn, restampLeftovers); n != 6 {
		t.Fatalf("%d _closed and _restamp functions at version 49, want 6 (a, n and the dropped d)", n)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if n := queryInt(t, conn, restampLeftovers); n != 0 {
		t.Errorf("%d _closed and _restamp functions after the upgrade", n)
	}
	if n := queryInt(t, conn, fixes); n != 3 {
		t.Errorf("%d _fix functions after the upgrade, want 3", n)
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM information_schema.routine_privileges WHERE grantee = 'PUBLIC' AND routine_schema = '`+Schema+`'
		AND (routine_name LIKE 'h%\_fix' OR routine_name = 'restamp_functions')`); n != 0 {
		t.Errorf("PUBLIC may run %d restamp functions", n)
	}
	ha := strings.TrimPrefix(queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass"), Schema+".")
	calls := blockCalls(t, cs, -1, "UPDATE a SET v = 2 WHERE id = 1", "UPDATE a SET v = 3 WHERE id = 2", "UPDATE n SET v = 3", "DELETE FROM a WHERE id = 3")
	if callCount(calls, ha+"_fix") != 1 || callCount(calls, "restamp_dynamic") != 0 {
		t.Errorf("a block after the upgrade: %v, want %s_fix once and no restamp_dynamic", calls, ha)
	}
	inWrite(t, conn, "UPDATE a SET v = 4 WHERE id = 4", "DELETE FROM n", "CREATE TABLE b (id int PRIMARY KEY, v int)", "INSERT INTO b VALUES (1, 1)")
	blockCalls(t, cs, -1, "UPDATE b SET v = 2", "INSERT INTO a VALUES (11, 0)")
	if got := tableFunctions(t, conn, "b"); got != "del,fix,ins,trunc,upd" {
		t.Errorf("a table made after the upgrade has %s, want del,fix,ins,trunc,upd", got)
	}
	for _, table := range []string{"a", "n", "b"} {
		historyMatches(t, conn, table, uint64(queryInt(t, conn, ReadTSSQL)), "writes after the upgrade")
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+"."+ha+" WHERE mz_from < 0 OR mz_to < 0"); n != 0 {
		t.Errorf("%d placeholder versions of a", n)
	}
}
