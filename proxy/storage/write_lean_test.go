package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// A table made at the version before 27 gets trigger functions that choose
// T themselves on upgrade: an autocommit write calls no stamp_ts, and the
// history of UPDATE, INSERT and DELETE (a key retracted by key alone) is the
// table's rows.
func TestUpgradeToVersion27(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 26)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a'), (2, 'b')")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'old'::regclass")
	fn := strings.TrimPrefix(hist, Schema+".")
	if got := writeCalls(t, cs, -1, "UPDATE old SET v = 'a0' WHERE k = 1"); callCount(got, "stamp_ts") != 1 {
		t.Fatalf("before the upgrade an UPDATE ran %v, want stamp_ts once", got)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	for _, stmt := range []string{"UPDATE old SET v = 'a1' WHERE k = 1", "INSERT INTO old VALUES (3, 'c')", "DELETE FROM old WHERE k = 2"} {
		got := writeCalls(t, cs, -1, stmt)
		if callCount(got, "stamp_ts") != 0 || len(got) != 1 {
			t.Errorf("%s after the upgrade ran %v, want %s's trigger only (the slot is a flat statement since version 44)", stmt, got, fn)
		}
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 'a2' WHERE k = 1"), "writes after the upgrade")
	if n := overlappingVersions(t, conn, "old"); n != 0 {
		t.Fatalf("%d pairs of versions of one key overlap", n)
	}
}

// A value of the slot that only looks pending finds no row in the trigger's
// own query for T: the trigger takes the general path, whose stamp_ts fails
// the write with 42501, for each kind of write, of a keyed table and (since
// version 31) a keyless one, and no history is written (TestForgedPendingSlot
// has the UPDATE of every forged form).
func TestForgedPendingSlotEveryWrite(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)",
		"CREATE TABLE nk (id int, v int)", "INSERT INTO nk VALUES (1, 0)")
	forged := "0 - " + strings.Repeat("0", 64)
	for _, table := range []string{"k", "nk"} {
		hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", table)
		before := queryInt(t, conn, "SELECT count(*) FROM "+hist)
		for _, stmt := range []string{"INSERT INTO " + table + " VALUES (2, 0)", "UPDATE " + table + " SET v = 1 WHERE id = 1", "DELETE FROM " + table + " WHERE id = 1"} {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", WriteTSSetting, forged); err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(ctx, stmt)
			wantCode(t, err, "42501", fmt.Sprintf("%s with a forged pending slot", stmt))
			tx.Rollback(ctx)
		}
		if after := queryInt(t, conn, "SELECT count(*) FROM "+hist); after != before {
			t.Fatalf("history of %s went from %d to %d versions", table, before, after)
		}
	}
}

// The retraction of a trigger that chose T itself finds the key's current
// version by key alone. A history holding a second current version of the
// key with another text (written past mzproxy's triggers) is refused: both
// are found, and the count check fails the write with XX000; the table and
// its history are left as they were. (Before version 27 the whole-row text
// chose one, the write committed and the stray version stayed current.)
func TestFreshRetractionOutOfStep(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v text)", "INSERT INTO k VALUES (1, 'a')")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	if _, err := conn.Exec(ctx, "INSERT INTO "+hist+" SELECT mz_from, mz_to, mz_hash, id, 'stray' FROM "+hist); err != nil {
		t.Fatal(err)
	}
	before := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_to = $1", Infinity)
	for _, stmt := range []string{"UPDATE k SET v = 'b' WHERE id = 1", "DELETE FROM k WHERE id = 1"} {
		_, err := conn.Exec(ctx, OpenWriteFor(-1)+"; "+stmt)
		wantCode(t, err, "XX000", stmt+" with two current versions of its key")
	}
	if got := queryText(t, conn, "SELECT v FROM k WHERE id = 1"); got != "a" {
		t.Fatalf("row is %q after the failed writes", got)
	}
	if after := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_to = $1", Infinity); after != before {
		t.Fatalf("current versions went from %d to %d", before, after)
	}
}
