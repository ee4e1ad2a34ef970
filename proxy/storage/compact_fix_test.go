package storage

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// fixFunctions counts the schema's h<id>_fix functions.
const fixFunctions = `SELECT count(*) FROM pg_proc p WHERE p.pronamespace = '` + Schema + `'::regnamespace
	AND p.proname ~ '^h[0-9]+_fix$'`

// compactAway drops table as the proxy does (writeCalls: inWrite would
// build its history first) and compacts until compaction removed it.
func compactAway(t *testing.T, cs string, conn *pgx.Conn, table string) {
	t.Helper()
	id := queryInt(t, conn, "SELECT id FROM "+Schema+".catalog WHERE oid = $1::regclass AND dropped_ts IS NULL", table)
	writeCalls(t, cs, -1, "DROP TABLE "+table)
	compactUntilRemoved(t, conn, id, table)
}

// compactUntilRemoved runs ticks and compaction until the catalog row of
// id (the dropped table name) is gone, at most 20 s.
func compactUntilRemoved(t *testing.T, conn *pgx.Conn, id int64, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE id = $1", id) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("compaction did not remove the dropped %s in 20 s", name)
		}
		queryInt(t, conn, "SELECT count(*) FROM "+Schema+".tick(1)") // the upper past the drop
		queryInt(t, conn, "SELECT count(*) FROM "+Schema+".compact(0, NULL)")
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCompactionDropsFix: since version 53 compaction drops a removed
// table's _fix with its history (a written table's; a never-written one
// has none, and its removal sends no error), and leaves a live table's.
func TestCompactionDropsFix(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE kept (k int PRIMARY KEY)", "CREATE TABLE gone (k int PRIMARY KEY)",
		"INSERT INTO kept VALUES (1)", "INSERT INTO gone VALUES (1)")
	writeCalls(t, cs, -1, "CREATE TABLE unwritten (k int PRIMARY KEY)")
	if n := queryInt(t, conn, fixFunctions); n != 2 {
		t.Fatalf("%d _fix functions after two tables' first writes, want 2", n)
	}
	compactAway(t, cs, conn, "gone")
	compactAway(t, cs, conn, "unwritten")
	if got := tableFunctions(t, conn, "kept"); got != "del,fix,ins,trunc,upd" {
		t.Errorf("the live table's functions after compaction: %s, want del,fix,ins,trunc,upd", got)
	}
	if n := queryInt(t, conn, fixFunctions); n != 1 {
		t.Errorf("%d _fix functions after compaction removed the written table, want 1 (the live one's)", n)
	}
}

// TestUpgradeToVersion53: a table compaction removed at version 52 left
// its _fix; the upgrade drops it and keeps the _fix of a live table and of
// a dropped table compaction has not removed yet (its history is still
// read), which compaction after the upgrade drops.
func TestUpgradeToVersion53(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 52)
	inWrite(t, conn, "CREATE TABLE kept (k int PRIMARY KEY)", "CREATE TABLE removed (k int PRIMARY KEY)",
		"CREATE TABLE later (k int PRIMARY KEY)", "INSERT INTO kept VALUES (1)", "INSERT INTO removed VALUES (1)",
		"INSERT INTO later VALUES (1)")
	compactAway(t, cs, conn, "removed")
	if n := queryInt(t, conn, fixFunctions); n != 3 {
		t.Fatalf("%d _fix functions at version 52 after compaction removed a table, want 3 (its own left behind)", n)
	}
	laterID := queryInt(t, conn, "SELECT id FROM "+Schema+".catalog WHERE oid = 'later'::regclass")
	inWrite(t, conn, "DROP TABLE later")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if n := queryInt(t, conn, fixFunctions); n != 2 {
		t.Errorf("%d _fix functions after the upgrade, want 2 (kept's and the dropped later's)", n)
	}
	inWrite(t, conn, "CREATE TABLE again (k int PRIMARY KEY)", "INSERT INTO again VALUES (1)")
	compactAway(t, cs, conn, "again")
	compactUntilRemoved(t, conn, laterID, "later")
	if got := tableFunctions(t, conn, "kept"); got != "del,fix,ins,trunc,upd" {
		t.Errorf("the live table's functions after the upgrade: %s, want del,fix,ins,trunc,upd", got)
	}
	if n := queryInt(t, conn, fixFunctions); n != 1 {
		t.Errorf("%d _fix functions after compaction removed two more tables, want 1", n)
	}
	historyMatches(t, conn, "kept", inWrite(t, conn, "INSERT INTO kept VALUES (2)"), "a write after the upgrade")
}
