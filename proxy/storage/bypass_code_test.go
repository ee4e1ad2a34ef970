package storage

import (
	"context"
	"testing"
)

// bypassingWritesRefused runs each write of a table with a primary key
// past mzproxy, on a new connection (a session that never set
// mzproxy.write_ts), and wants MZ002 for each.
func bypassingWritesRefused(t *testing.T, cs, what string) {
	t.Helper()
	for _, stmt := range []string{"UPDATE bypass SET v = 1 WHERE k = 1", "DELETE FROM bypass WHERE k = 1", "INSERT INTO bypass VALUES (2, 0)"} {
		_, err := connect(t, cs).Exec(context.Background(), stmt)
		wantCode(t, err, "MZ002", what+": "+stmt+" past mzproxy")
	}
}

// A write past mzproxy to a table with a primary key, in a session that
// never set mzproxy.write_ts, is refused with MZ002 (versions 27 to 29
// failed an UPDATE or DELETE with 23502 on the history table's NOT NULL
// column instead), and so is one in a session that set it once.
func TestBypassingWriteRefused(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE bypass (k int PRIMARY KEY, v int)", "INSERT INTO bypass VALUES (1, 0)")
	bypassingWritesRefused(t, cs, "a new session")
	_, err := conn.Exec(context.Background(), "UPDATE bypass SET v = 1 WHERE k = 1")
	wantCode(t, err, "MZ002", "an UPDATE past mzproxy in a session that took a slot before")
}

// A table made at version 29 gets the trigger functions of version 30 on
// upgrade: its writes past mzproxy are refused with MZ002.
func TestUpgradeToVersion30(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 29)
	inWrite(t, conn, "CREATE TABLE bypass (k int PRIMARY KEY, v int)", "INSERT INTO bypass VALUES (1, 0)")
	_, err := connect(t, cs).Exec(ctx, "UPDATE bypass SET v = 1 WHERE k = 1")
	wantCode(t, err, "23502", "an UPDATE past mzproxy at version 29")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	bypassingWritesRefused(t, cs, "after the upgrade")
	historyMatches(t, conn, "bypass", inWrite(t, conn, "UPDATE bypass SET v = 2 WHERE k = 1"), "a write through the slot after the upgrade")
}
