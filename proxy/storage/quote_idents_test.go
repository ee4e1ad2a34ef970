package storage

import (
	"context"
	"strings"
	"testing"
)

// TestUpgradeToVersion43: a table made at version 41 by a session with
// quote_all_identifiers on had its history recorded as mzproxy."h<id>",
// and its writes failed with 42602 (invalid name syntax) for good. After
// the upgrade its catalog row names mzproxy.h<id>, and with the setting on
// a table made then and the old one are built, written and read back at
// their timestamps, as with it off.
func TestUpgradeToVersion43(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 41)
	if _, err := conn.Exec(ctx, "SET quote_all_identifiers = on"); err != nil {
		t.Fatal(err)
	}
	// (Not inWrite: its build would fail, as every write's did.)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, BeginWriteSQL); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE quoted (k int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'quoted'::regclass"); !strings.Contains(got, `"`) {
		t.Fatalf("at version 41 with quote_all_identifiers on, the history is recorded as %s: want it quoted (the bug this version fixes)", got)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE kind = 'table' AND history <> '"+Schema+".h' || id"); n != 0 {
		t.Errorf("%d tables' history names are not %s.h<id> after the upgrade", n, Schema)
	}
	inWrite(t, conn, "CREATE TABLE quoted_new (k int PRIMARY KEY, v text)", "CREATE TABLE quoted_nokey (v text)")
	for _, table := range []string{"quoted", "quoted_new", "quoted_nokey"} {
		ts := inWrite(t, conn, "INSERT INTO "+table+" (v) SELECT 'a'"+map[bool]string{true: "", false: " WHERE false"}[table == "quoted_nokey"])
		if table != "quoted_nokey" {
			ts = inWrite(t, conn, "INSERT INTO "+table+" VALUES (1, 'a'), (2, 'b')")
		}
		historyMatches(t, conn, table, ts, "inserts with quote_all_identifiers on")
		historyMatches(t, conn, table, inWrite(t, conn, "UPDATE "+table+" SET v = 'c'"), "an update with quote_all_identifiers on")
		historyMatches(t, conn, table, inWrite(t, conn, "DELETE FROM "+table+" WHERE v = 'c' AND ctid = (SELECT min(ctid) FROM "+table+")"), "a delete with quote_all_identifiers on")
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE kind = 'table' AND history <> '"+Schema+".h' || id"); n != 0 {
		t.Errorf("%d tables made with quote_all_identifiers on have a history name other than %s.h<id>", n, Schema)
	}
}
