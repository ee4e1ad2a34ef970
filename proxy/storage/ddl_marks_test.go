package storage

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// walWrites is the writes of WAL the server has counted (pg_stat_wal's
// wal_write: one per flush of WAL, which writes what is not yet written),
// with conn's own pending statistics flushed first. (wal_sync would be
// the same count but for fsync = off, which the tests' server runs with.)
func walWrites(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	// The flush happens when the backend goes idle after this query.
	if _, err := conn.Exec(context.Background(), "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	return queryInt(t, conn, "SELECT wal_write FROM pg_stat_wal")
}

// fewestWALFlushes runs create(i) for i in 0..tries-1 and returns the
// fewest WAL writes the server counted across one of them: the minimum
// discounts those of other processes (the WAL writer, the checkpointer).
func fewestWALFlushes(t *testing.T, conn *pgx.Conn, tries int, create func(i int)) int64 {
	t.Helper()
	fewest := int64(-1)
	for i := 0; i < tries; i++ {
		before := walWrites(t, conn)
		create(i)
		if n := walWrites(t, conn) - before; fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return fewest
}

// A managed CREATE TABLE (no dropped table's pair to take) flushes WAL no
// more often than the same CREATE TABLE directly: once, at its commit.
// Version 17's markers were unlogged sequences, whose creation flushed
// WAL: three flushes against one.
func TestCreateTableFlushesWALOnce(t *testing.T) {
	_, conn := installedDB(t)
	// The tests' server commits without a flush by default.
	if _, err := conn.Exec(context.Background(), "SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	const shape = " (a int PRIMARY KEY, b text)"
	// Ten tries each: under a loaded machine five were not always enough
	// to find one without a background process's flush.
	const tries = 10
	direct := fewestWALFlushes(t, conn, tries, func(i int) {
		if _, err := conn.Exec(context.Background(), fmt.Sprintf("CREATE TABLE direct_%d", i)+shape); err != nil {
			t.Fatal(err)
		}
	})
	managed := fewestWALFlushes(t, conn, tries, func(i int) { inWrite(t, conn, fmt.Sprintf("CREATE TABLE managed_%d", i)+shape) })
	t.Logf("WAL flushes per CREATE TABLE: %d directly, %d managed", direct, managed)
	if managed > direct {
		t.Errorf("a managed CREATE TABLE flushed WAL %d times, a direct one %d: want no more", managed, direct)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE kind = 'table' AND name LIKE 'managed_%'"); n != tries {
		t.Errorf("%d managed tables, want %d", n, tries)
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relpersistence = 'u'
		AND relname ~ '^[wc][0-9]+$'`, Schema); n != 0 {
		t.Errorf("%d unlogged markers after managed CREATE TABLEs, want 0", n)
	}
}

// crashUnlogged resets every unlogged sequence of mzproxy's schema as
// crash recovery does (to its START value, not called): the count of
// writes, P, and the markers of tables made before version 20. Logged
// sequences keep their values.
func crashUnlogged(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	seqs, err := collectText(ctx, conn, `SELECT c.oid::regclass::text FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'S' AND c.relpersistence = 'u'`, Schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seqs {
		if _, err := conn.Exec(ctx, "ALTER SEQUENCE "+s+" RESTART"); err != nil {
			t.Fatal(err)
		}
	}
}

// After a crash the count of writes starts over while a logged marker
// keeps the count of its last write: the check skips a marker above the
// count, so the table's readers are not failed until the new count
// passes it; a write after the crash is still caught.
func TestMarkerKeptAcrossCrash(t *testing.T) {
	cs, conn := installedDB(t)
	other := connect(t, cs)
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)",
		"CREATE TABLE busy (k int PRIMARY KEY, v int)", "INSERT INTO busy VALUES (1, 0)")
	for i := 0; i < 20; i++ {
		autocommitWrite(t, other, "UPDATE busy SET v = v + 1")
	}
	setMarkers(t, conn, "k")
	if p := queryText(t, conn, "SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass($1 || '.w' || 'k'::regclass::oid)", Schema); p != "p" {
		t.Fatalf("k's marker has relpersistence %q, want p (logged)", p)
	}
	before := markerState(t, conn, "k")

	crashUnlogged(t, conn)
	if got := markerState(t, conn, "k"); got != before {
		t.Fatalf("k's markers after the crash: %s, want %s (logged)", got, before)
	}
	if err := readThenWrite(t, conn, "k", "k", func() {}); err != nil {
		t.Errorf("read k and wrote it alone after a crash: %v, want no error (its marker predates the crash)", err)
	}
	checkedLikeNew(t, conn, other, "k")
}

// TestUpgradeFromVersion19: a table made at version 19 keeps its unlogged
// markers and its per-table check through the upgrade and a crash after
// it; a table made after it gets logged ones; the spare pair a table
// dropped at 19 left is still taken first.
func TestUpgradeFromVersion19(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	other := connect(t, cs)
	installVersion(t, conn, 19)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v int)", "INSERT INTO old VALUES (1, 0)",
		"CREATE TABLE gone (k int PRIMARY KEY, v int)")
	setMarkers(t, conn, "old")
	oldMarkers := markerState(t, conn, "old")
	inWrite(t, conn, "DROP TABLE gone")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got := markerState(t, conn, "old"); got != oldMarkers {
		t.Errorf("old's markers after the upgrade: %s, want %s", got, oldMarkers)
	}
	checkedLikeNew(t, conn, other, "old")

	inWrite(t, conn, "CREATE TABLE spare (k int PRIMARY KEY, v int)", "INSERT INTO spare VALUES (1, 0)",
		"CREATE TABLE fresh (k int PRIMARY KEY, v int)", "INSERT INTO fresh VALUES (1, 0)")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".spare_markers"); n != 0 {
		t.Errorf("%d spare pairs after two CREATE TABLEs, want 0 (gone's taken)", n)
	}
	want := map[string]string{"old": "u", "spare": "u", "fresh": "p"}
	for table, persistence := range want {
		got := queryText(t, conn, `SELECT string_agg(DISTINCT relpersistence::text, ',') FROM pg_class
			WHERE oid IN (to_regclass($1 || '.w' || $2::regclass::oid), to_regclass($1 || '.c' || $2::regclass::oid))`, Schema, table)
		if got != persistence {
			t.Errorf("%s's markers have relpersistence %q, want %q", table, got, persistence)
		}
		setMarkers(t, conn, table)
	}
	crashUnlogged(t, conn)
	for table := range want {
		checkedLikeNew(t, conn, other, table)
	}
}

// A read-only transaction sets no mark (a logged one's setval would give
// it WAL to flush at its COMMIT): pinned, reading managed tables, it
// commits without a WAL flush. A write of no row, which sets its
// table's marker, now commits with one (ddl_marks.sql).
func TestReadOnlyTransactionFlushesNoWAL(t *testing.T) {
	_, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)")
	if _, err := conn.Exec(context.Background(), "SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	before := markerState(t, conn, "k")
	reads := fewestWALFlushes(t, conn, 5, func(int) {
		tx, _ := pinnedReader(t, conn)
		queryInt(t, tx, "SELECT count(*) FROM k")
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	if reads != 0 {
		t.Errorf("a pinned read-only transaction flushed WAL %d times, want 0", reads)
	}
	if got := markerState(t, conn, "k"); got != before {
		t.Errorf("k's markers after reads: %s, want %s", got, before)
	}
	noRow := fewestWALFlushes(t, conn, 5, func(int) { autocommitWrite(t, conn, "UPDATE k SET v = v + 1 WHERE k = 0") })
	t.Logf("WAL flushes of an autocommit write of no row: %d", noRow)
}
