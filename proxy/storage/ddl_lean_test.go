package storage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// markerSequences is the number of sequences in mzproxy's schema: the
// markers and spares of ddl_lean.sql, and the schema's own few.
func markerSequences(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	return queryInt(t, conn, "SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relnamespace = $1::regnamespace", Schema)
}

// markerState is "w=<value> c=<value>" of table's marker and check mark
// (NULL: never set, or gone).
func markerState(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	return queryText(t, conn, `SELECT 'w=' || coalesce(pg_sequence_last_value(to_regclass($1 || '.w' || $2::regclass::oid))::text, 'NULL')
		|| ' c=' || coalesce(pg_sequence_last_value(to_regclass($1 || '.c' || $2::regclass::oid))::text, 'NULL')`, Schema, table)
}

// setMarkers makes a checked read-then-write of table (k, v), so its
// marker and check mark are both set.
func setMarkers(t *testing.T, conn *pgx.Conn, table string) {
	t.Helper()
	if err := readThenWrite(t, conn, table, table, func() {}); err != nil {
		t.Fatalf("read %s and wrote it alone: %v", table, err)
	}
	if s := markerState(t, conn, table); strings.Contains(s, "NULL") {
		t.Fatalf("%s's markers after a write and a check: %s, want both set", table, s)
	}
}

// checkedLikeNew: table (k, v) with a row k = 1 is checked per table as a
// new table is: a read-then-write with no other write passes, one with a
// write of the table in between fails with 40001.
func checkedLikeNew(t *testing.T, conn, other *pgx.Conn, table string) {
	t.Helper()
	if err := readThenWrite(t, conn, table, table, func() {}); err != nil {
		t.Errorf("read %s and wrote it alone: %v", table, err)
	}
	if err := readThenWrite(t, conn, table, table, func() { autocommitWrite(t, other, "UPDATE "+table+" SET v = v + 1") }); !isSerializationFailure(err) {
		t.Errorf("read %s, wrote it, another session wrote it: %v, want 40001", table, err)
	}
	endFailed(t, conn)
}

// endFailed ends the transaction a failed readThenWrite left open on conn.
func endFailed(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
}

// A CREATE TABLE after a DROP TABLE takes the dropped table's marker and
// check mark instead of creating two unlogged sequences (each creation
// flushed WAL: version 17 paid two WAL flushes a CREATE TABLE, and never
// dropped a dropped table's pair). The pair comes reset: the new table is
// checked as a new one, its check mark unset.
func TestCreateTableTakesDroppedTablesMarkers(t *testing.T) {
	cs, conn := installedDB(t)
	other := connect(t, cs)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v int)", "INSERT INTO old VALUES (1, 0)")
	setMarkers(t, conn, "old")
	before := markerSequences(t, conn)

	inWrite(t, conn, "DROP TABLE old")
	inWrite(t, conn, "CREATE TABLE fresh (k int PRIMARY KEY, v int)")
	if got := markerSequences(t, conn); got != before {
		t.Errorf("CREATE TABLE after DROP TABLE: %d sequences, want %d (the dropped table's pair taken, none created)", got, before)
	}
	if s := markerState(t, conn, "fresh"); s != "w=NULL c=NULL" {
		t.Errorf("the new table's markers: %s, want w=NULL c=NULL (a new sequence's state)", s)
	}
	inWrite(t, conn, "INSERT INTO fresh VALUES (1, 0)")
	checkedLikeNew(t, conn, other, "fresh")
	// With no spare left, CREATE TABLE makes its pair as before.
	inWrite(t, conn, "CREATE TABLE second (k int PRIMARY KEY, v int)", "INSERT INTO second VALUES (1, 0)")
	if got := markerSequences(t, conn); got != before+2 {
		t.Errorf("CREATE TABLE with no spare: %d sequences, want %d", got, before+2)
	}
	checkedLikeNew(t, conn, other, "second")
}

// A DROP TABLE rolled back leaves the table's markers as they were (their
// names and values); a CREATE TABLE rolled back returns the pair it took.
func TestRolledBackDDLKeepsMarkers(t *testing.T) {
	cs, conn := installedDB(t)
	other := connect(t, cs)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "INSERT INTO a VALUES (1, 0)",
		"CREATE TABLE b (k int PRIMARY KEY, v int)")
	setMarkers(t, conn, "a")
	want := markerState(t, conn, "a")
	rollback := func(stmt string) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, s := range []string{OpenWriteFor(-1), stmt} {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	rollback("DROP TABLE a")
	if got := markerState(t, conn, "a"); got != want {
		t.Errorf("a's markers after a DROP rolled back: %s, want %s", got, want)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".spare_markers"); n != 0 {
		t.Errorf("%d spare pairs after a DROP rolled back, want 0", n)
	}
	inWrite(t, conn, "DROP TABLE b")
	rollback("CREATE TABLE c (k int PRIMARY KEY, v int)")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".spare_markers"); n != 1 {
		t.Errorf("%d spare pairs after a CREATE that took one rolled back, want 1", n)
	}
	checkedLikeNew(t, conn, other, "a")
}

// Concurrent CREATE TABLEs (which wait for each other: each bumps the
// catalog revision) each end with their own pair: one takes the spare, the
// other makes its own.
func TestConcurrentCreateTableMarkers(t *testing.T) {
	cs, conn := installedDB(t)
	other := connect(t, cs)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE d1 (k int PRIMARY KEY, v int)", "DROP TABLE d1")

	first, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	for _, s := range []string{OpenWriteFor(-1), "CREATE TABLE x (k int PRIMARY KEY, v int)"} {
		if _, err := first.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	second := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, OpenWriteFor(-1)+"; CREATE TABLE y (k int PRIMARY KEY, v int)")
		second <- err
	}()
	time.Sleep(200 * time.Millisecond) // let it wait for first
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("CREATE TABLE y after x took the spare: %v", err)
	}

	for _, tb := range []string{"x", "y"} {
		inWrite(t, conn, "INSERT INTO "+tb+" VALUES (1, 0)")
		checkedLikeNew(t, conn, other, tb)
	}
}

// TestUpgradeFromVersion17: a table made at version 17 keeps its markers
// and its per-table check through the upgrade and its column changes
// after it; the pair a table dropped at 17 left behind becomes a spare,
// taken by the next CREATE TABLE.
func TestUpgradeFromVersion17(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	other := connect(t, cs)
	installVersion(t, conn, 17)
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0), (2, 0)",
		"CREATE TABLE gone (k int PRIMARY KEY, v int)", "INSERT INTO gone VALUES (1, 0)")
	setMarkers(t, conn, "k")
	kMarkers := markerState(t, conn, "k")
	inWrite(t, conn, "DROP TABLE gone")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got := markerState(t, conn, "k"); got != kMarkers {
		t.Errorf("k's markers after the upgrade: %s, want %s", got, kMarkers)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".spare_markers"); n != 1 {
		t.Errorf("%d spare pairs after the upgrade, want 1 (gone's)", n)
	}
	checkedLikeNew(t, conn, other, "k")
	for _, stmt := range []string{"ALTER TABLE k ADD COLUMN c int", "ALTER TABLE k DROP COLUMN c"} {
		inWrite(t, conn, stmt)
		historyMatches(t, conn, "k", inWrite(t, conn, "INSERT INTO k (k, v) SELECT max(k) + 1, 0 FROM k",
			"UPDATE k SET v = v + 1 WHERE k = 1", "DELETE FROM k WHERE k = 2"), "writes after "+stmt)
	}
	checkedLikeNew(t, conn, other, "k")
	before := markerSequences(t, conn)
	inWrite(t, conn, "CREATE TABLE fresh (k int PRIMARY KEY, v int)", "INSERT INTO fresh VALUES (1, 0)")
	if got := markerSequences(t, conn); got != before {
		t.Errorf("CREATE TABLE after the upgrade: %d sequences, want %d (gone's pair taken)", got, before)
	}
	checkedLikeNew(t, conn, other, "fresh")
}

// A column change of a table made through mzproxy calls no SQL-language
// function of pg_catalog (such a function is planned again at every call:
// sync_triggers' obj_description was a third of its time), and keeps the
// trigger functions' signature: gen_triggers does not run.
func TestColumnChangeCallsNoCatalogSQLFunction(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x')")
	for _, stmt := range []string{"ALTER TABLE k ADD COLUMN c int", "ALTER TABLE k DROP COLUMN c"} {
		ctx := context.Background()
		c := connect(t, cs)
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"SET LOCAL track_functions = 'all'", OpenWriteFor(-1), stmt} {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		calls, err := collectText(ctx, tx, `SELECT schemaname || '.' || funcname || '×' || calls FROM pg_stat_xact_user_functions
			WHERE schemaname = 'pg_catalog' OR funcname = 'gen_triggers'`)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) > 0 {
			t.Errorf("%s called %v, want none", stmt, calls)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		historyMatches(t, conn, "k", inWrite(t, conn, "INSERT INTO k (a) SELECT max(a) + 1 FROM k", "UPDATE k SET b = 'y' WHERE a = 1"),
			"writes after "+stmt)
	}
}
