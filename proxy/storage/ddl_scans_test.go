package storage

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestColumnChangeScansNoCatalogFewTables: on a new database, with few
// tables, the event triggers of an ALTER TABLE ADD/DROP COLUMN through
// mzproxy read the catalogs only through their indexes (version 33): the
// catalogs scanned sequentially are those PostgreSQL's own ALTER scans,
// as often. Before, the generic plans of table_shape, plain_column_change
// and on_ddl_command_end's lookup of dependent views scanned pg_index,
// pg_constraint, pg_trigger, pg_type and pg_rewrite whole: with small
// catalogs a scan costs the planner less than an index probe, and the
// backend several times the instructions (bench/ddlcost.sh,
// docs/ddl-cost.md). TestDDLScansNoCatalog checks the same with many
// tables.
func TestColumnChangeScansNoCatalogFewTables(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE probe (a int PRIMARY KEY, b text)")
	if _, err := conn.Exec(ctx, "ANALYZE pg_class, pg_attribute, pg_constraint, pg_index, pg_depend, pg_trigger, pg_proc, pg_type, pg_rewrite"); err != nil {
		t.Fatal(err)
	}
	// Each pair leaves the database as it was (the run without event
	// triggers too: history is not changed, and needs no change).
	for _, pair := range [][]string{
		{"ALTER TABLE probe ADD COLUMN c int", "ALTER TABLE probe DROP COLUMN c"},
	} {
		through := catalogSeqScans(t, cs, pair...)
		plain := catalogSeqScans(t, cs, append([]string{"SET LOCAL session_replication_role = replica"}, pair...)...)
		for _, s := range through {
			if !slices.Contains(plain, s) {
				t.Errorf("%v through mzproxy: sequential scans %v; PostgreSQL's alone: %v", pair, through, plain)
				break
			}
		}
	}
	historyMatches(t, conn, "probe", inWrite(t, conn, "ALTER TABLE probe ADD COLUMN d int", "INSERT INTO probe VALUES (1, 'x', 2)",
		"UPDATE probe SET b = 'y' WHERE a = 1"), "writes after the column changes")
}

// TestUpgradeToVersion33: the upgrade from 32 keeps every table's recorded
// shape valid (table_shape's text is unchanged, so no table is synced
// again: an ADD/DROP COLUMN after it runs none of the syncs), puts
// enable_seqscan = off on table_shape and plain_column_change, and on_ddl_command_end,
// edited in place, still finds the views that depend on an altered table.
func TestUpgradeToVersion33(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 32)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a'), (2, 'b')",
		"CREATE VIEW old_v AS SELECT k, v FROM old")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE kind = 'table' AND shape IS DISTINCT FROM "+Schema+".table_shape(id)"); n != 0 {
		t.Fatalf("%d tables' recorded shape differs from table_shape after the upgrade", n)
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM pg_proc WHERE pronamespace = '`+Schema+`'::regnamespace
		AND proname IN ('table_shape', 'plain_column_change') AND 'enable_seqscan=off' = ANY (proconfig)`); n != 2 {
		t.Fatalf("%d of table_shape and plain_column_change run with enable_seqscan = off, want 2", n)
	}
	for _, stmt := range []string{"ALTER TABLE old ADD COLUMN c int", "ALTER TABLE old DROP COLUMN c"} {
		calls := writeCalls(t, cs, -1, stmt)
		for _, f := range []string{"sync_indexes", "sync_triggers", "gen_triggers", "sync_grants"} {
			if n := callCount(calls, f); n != 0 {
				t.Errorf("%s after the upgrade ran %s %d times, want 0 (%v)", stmt, f, n, calls)
			}
		}
	}
	inWrite(t, conn, "ALTER TABLE old RENAME COLUMN v TO w")
	if got := queryText(t, conn, "SELECT view_sql FROM "+Schema+".catalog WHERE oid = 'old_v'::regclass"); !strings.Contains(got, "w") || strings.Contains(got, "old.v") {
		t.Errorf("old_v's recorded text after RENAME COLUMN v TO w: %q", got)
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET w = 'z' WHERE k = 1", "INSERT INTO old VALUES (3, 'c')"), "writes after the upgrade")
}
