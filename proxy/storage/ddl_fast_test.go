package storage

import (
	"context"
	"fmt"
	"testing"
)

// catalogSeqScans runs stmts in one proxy write transaction on a new
// connection to cs and returns the sequential scans of the system catalogs
// that grow with the number of tables (from pg_stat_xact_sys_tables, read
// in the same transaction), as "catalog×n".
func catalogSeqScans(t *testing.T, cs string, stmts ...string) []string {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, cs)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, s := range append([]string{OpenWriteFor(-1)}, stmts...) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	scans, err := collectText(ctx, tx, `SELECT relname || '×' || seq_scan FROM pg_stat_xact_sys_tables
		WHERE schemaname = 'pg_catalog' AND seq_scan > 0
		  AND relname IN ('pg_class', 'pg_attribute', 'pg_constraint', 'pg_index', 'pg_depend', 'pg_trigger',
		                  'pg_proc', 'pg_description', 'pg_type', 'pg_rewrite', 'pg_attrdef')
		ORDER BY relname`)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return scans
}

// TestDDLScansNoCatalog: bench/ddl.sh's DDL through mzproxy reads the
// catalogs only through their indexes, so its cost does not grow with the
// tables in the database (version 15's sync_triggers scanned all of
// pg_constraint on every ALTER TABLE). 500 other tables with primary keys
// and triggers (as managed tables have) make a sequential scan of those
// catalogs the dearer plan.
func TestDDLScansNoCatalog(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
		DO $$ BEGIN
		FOR i IN 1 .. 500 LOOP
			EXECUTE format('CREATE TABLE other_%s (a int PRIMARY KEY, b text)', i);
			EXECUTE format('CREATE TRIGGER t AFTER INSERT ON other_%s EXECUTE FUNCTION noop()', i);
		END LOOP;
		END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE pg_class, pg_attribute, pg_constraint, pg_index, pg_depend, pg_trigger, pg_proc, pg_description, pg_type"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"CREATE TABLE probe (a int PRIMARY KEY, b text)",
		"CREATE INDEX probe_b ON probe (b)",
		"ALTER TABLE probe ADD COLUMN c int",
		"ALTER TABLE probe DROP COLUMN c",
		"CREATE VIEW probe_v AS SELECT a, b FROM probe",
		"DROP VIEW probe_v",
		"DROP INDEX probe_b",
		"DROP TABLE probe",
		"CREATE TABLE probe (a int PRIMARY KEY, b text)", // takes the dropped table's markers (version 19)
	} {
		if scans := catalogSeqScans(t, cs, stmt); len(scans) > 0 {
			t.Errorf("%s: sequential scans %v, want none", stmt, scans)
		}
	}
}

// TestCreateTableKeepsTriggerSignature: CREATE TABLE records the signature
// of the trigger functions it makes (version 15 left it to the table's
// first ALTER TABLE, which ran gen_triggers to find them unchanged), so no
// column change of an aligned table runs gen_triggers; history stays the
// table after each, with writes in between.
func TestCreateTableKeepsTriggerSignature(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x'), (2, 'y')")
	for _, stmt := range []string{
		"ALTER TABLE k ADD COLUMN c int",
		"ALTER TABLE k DROP COLUMN c",
		"ALTER TABLE k ADD COLUMN d text DEFAULT 'd'",
	} {
		calls := writeCalls(t, cs, -1, stmt)
		if n := callCount(calls, "gen_triggers"); n != 0 {
			t.Errorf("%s: gen_triggers ran %d times, want 0 (%v)", stmt, n, calls)
		}
		historyMatches(t, conn, "k", inWrite(t, conn, "INSERT INTO k (a) SELECT max(a) + 1 FROM k",
			"UPDATE k SET b = b || '!' WHERE a = 1", "DELETE FROM k WHERE a = 2 OR a = 3"), fmt.Sprintf("writes after %s", stmt))
	}
}

// TestUpgradeFromVersion15: tables made at version 15 (whose signature
// waits for their first ALTER TABLE, one with a deferrable key) keep
// recording history through the upgrade to 16 and through column changes
// after it. The upgrade to 20 (ins_gap.sql) makes every table's functions
// again through sync_triggers, which records their signature, so no ALTER
// after the upgrade runs gen_triggers (up to version 19, the first ALTER of
// a table made at 15 made it).
func TestUpgradeFromVersion15(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 15)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x'), (2, 'y')",
		"CREATE TABLE dk (a int PRIMARY KEY DEFERRABLE, b text)", "INSERT INTO dk VALUES (1, 'x'), (2, 'y')",
		"CREATE TABLE signed (a int PRIMARY KEY, b text)", "ALTER TABLE signed ADD COLUMN c int")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	// signed's signature, made at version 15, still holds.
	if n := callCount(writeCalls(t, cs, -1, "ALTER TABLE signed DROP COLUMN c"), "gen_triggers"); n != 0 {
		t.Errorf("ALTER TABLE signed DROP COLUMN c: gen_triggers ran %d times, want 0", n)
	}
	for _, tb := range []string{"k", "dk"} {
		for _, stmt := range []string{"ALTER TABLE " + tb + " ADD COLUMN c int", "ALTER TABLE " + tb + " DROP COLUMN c"} {
			if n := callCount(writeCalls(t, cs, -1, stmt), "gen_triggers"); n != 0 {
				t.Errorf("%s: gen_triggers ran %d times, want 0", stmt, n)
			}
			historyMatches(t, conn, tb, inWrite(t, conn, "INSERT INTO "+tb+" (a) SELECT max(a) + 1 FROM "+tb,
				"UPDATE "+tb+" SET b = 'z' WHERE a = 1", "DELETE FROM "+tb+" WHERE a = 2"), "writes after "+stmt)
		}
	}
}
