package storage

import (
	"context"
	"strings"
	"testing"
)

// syncCalls runs stmt in a proxy write (committed) and returns how often it
// called sync_indexes, sync_triggers and gen_triggers, as "name×calls".
func syncCalls(t *testing.T, cs, stmt string) []string {
	t.Helper()
	ctx := context.Background()
	c := connect(t, cs)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	for _, s := range []string{"SET LOCAL track_functions = 'all'", slotSQL(t, c, -1), stmt} {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	calls, err := collectText(ctx, tx, `SELECT funcname || '×' || calls FROM pg_stat_xact_user_functions
		WHERE schemaname = $1 AND funcname IN ('sync_indexes', 'sync_triggers', 'sync_grants', 'gen_triggers') ORDER BY funcname`, Schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return calls
}

// TestColumnChangeSkipsSyncs: an ADD or DROP COLUMN (or a RENAME) of a
// column outside any index runs neither sync_indexes nor sync_triggers
// (version 24), and history stays exact across it; a change of the
// table's indexes, key or mzproxy's triggers in the same ALTER still
// syncs them.
func TestColumnChangeSkipsSyncs(t *testing.T) {
	cs, conn := installedDB(t)
	// (A plain index has no mirror: it changes nothing the syncs read.)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x')")
	syncCalls(t, cs, "CREATE INDEX k_b ON k (b)")
	for _, stmt := range []string{"ALTER TABLE k ADD COLUMN c int", "ALTER TABLE k RENAME COLUMN c TO d",
		"ALTER TABLE k DROP COLUMN d", "ALTER TABLE k ADD COLUMN e text, ADD COLUMN f int"} {
		if calls := syncCalls(t, cs, stmt); len(calls) > 0 {
			t.Errorf("%s called %v, want none", stmt, calls)
		}
		historyMatches(t, conn, "k", inWrite(t, conn, "INSERT INTO k (a) SELECT max(a) + 1 FROM k", "UPDATE k SET b = b || 'y'"),
			"writes after "+stmt)
	}

	// gen_triggers made again (a later version): each table's next column
	// change checks its triggers.
	var def string
	if err := conn.QueryRow(context.Background(), "SELECT pg_get_functiondef('"+Schema+".gen_triggers(bigint)'::regprocedure)").Scan(&def); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), def); err != nil {
		t.Fatal(err)
	}
	if calls := syncCalls(t, cs, "ALTER TABLE k ADD COLUMN h int"); !strings.Contains(strings.Join(calls, " "), "sync_triggers") {
		t.Errorf("a column change after gen_triggers was made again called %v, want sync_triggers", calls)
	}

	mirrors := func() int64 {
		return queryInt(t, conn, `SELECT count(*) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
			WHERE x.indrelid = (SELECT history FROM `+Schema+`.catalog WHERE oid = 'k'::regclass)::regclass AND i.relname ~ '_k[0-9]+$'`)
	}
	before := mirrors()
	if calls := syncCalls(t, cs, "ALTER TABLE k ADD COLUMN u int UNIQUE"); len(calls) == 0 {
		t.Errorf("ADD COLUMN u int UNIQUE called no sync, want them")
	}
	if got := mirrors(); got != before+1 {
		t.Errorf("%d key mirrors after ADD COLUMN ... UNIQUE, want %d", got, before+1)
	}
	syncCalls(t, cs, "ALTER TABLE k DROP COLUMN u")
	if got := mirrors(); got != before {
		t.Errorf("%d key mirrors after dropping the unique column, want %d", got, before)
	}

	syncCalls(t, cs, "ALTER TABLE k ADD COLUMN g int, DISABLE TRIGGER mzproxy_history_upd")
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'k'::regclass AND tgname LIKE 'mzproxy%' AND tgenabled = 'A'"); n != 4 {
		t.Errorf("%d of mzproxy's triggers enabled after DISABLE TRIGGER with a column change, want 4", n)
	}

	// A new owner (in the same ALTER as a column change) reads history.
	if _, err := conn.Exec(context.Background(), "DROP ROLE IF EXISTS mzshape; CREATE ROLE mzshape"); err != nil {
		t.Fatal(err)
	}
	syncCalls(t, cs, "ALTER TABLE k ADD COLUMN o int, OWNER TO mzshape")
	if queryText(t, conn, "SELECT has_table_privilege('mzshape', (SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass), 'SELECT')::text") != "true" {
		t.Errorf("k's new owner cannot read its history")
	}
	syncCalls(t, cs, "ALTER TABLE k OWNER TO postgres")
	if _, err := conn.Exec(context.Background(), "DROP ROLE mzshape"); err != nil {
		t.Fatal(err)
	}

	// A new key: the triggers are made for it.
	inWrite(t, conn, "UPDATE k SET g = a")
	calls := syncCalls(t, cs, "ALTER TABLE k DROP CONSTRAINT k_pkey, ADD PRIMARY KEY (a, g)")
	if !strings.Contains(strings.Join(calls, " "), "gen_triggers") {
		t.Errorf("a new primary key called %v, want gen_triggers", calls)
	}
	historyMatches(t, conn, "k", inWrite(t, conn, "INSERT INTO k (a, g) VALUES (1, 0)", "UPDATE k SET b = 'z' WHERE a = 1"),
		"writes after a new key")
}

// TestUpgradeToVersion24: a table made at version 23 has no shape; its
// first column change after the upgrade syncs as before and records one,
// its next skips the syncs.
func TestUpgradeToVersion24(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 23)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v int)", "INSERT INTO old VALUES (1, 0)")
	// Only to 24: a later upgrade that makes every table's trigger
	// functions again (27) records the shape itself.
	to24 := strings.ReplaceAll(migrations[23], "@SCHEMA@", Schema)
	if _, err := conn.PgConn().Exec(ctx, "BEGIN; SET LOCAL check_function_bodies = off; "+to24+"; COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != 24 {
		t.Fatalf("version %d after the upgrade, want 24", got)
	}
	if calls := syncCalls(t, cs, "ALTER TABLE old ADD COLUMN w int"); len(calls) == 0 {
		t.Errorf("the first column change after the upgrade called no sync, want them (no shape yet)")
	}
	if calls := syncCalls(t, cs, "ALTER TABLE old DROP COLUMN w"); len(calls) > 0 {
		t.Errorf("the second column change after the upgrade called %v, want none", calls)
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 1", "INSERT INTO old VALUES (2, 2)"), "writes after the upgrade")
}
