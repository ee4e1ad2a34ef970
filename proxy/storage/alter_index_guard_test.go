package storage

import (
	"context"
	"testing"
)

// alterIndexOutside renames, outside mzproxy, the managed table and view
// by ALTER INDEX (PostgreSQL renames any relation that way) and renames a
// real index of the table, and returns the catalog's names afterwards.
func alterIndexOutside(t *testing.T, cs string) (tableErr, viewErr, indexErr error, names string) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, cs)
	_, tableErr = conn.Exec(ctx, "ALTER INDEX renamed_t RENAME TO renamed_t2")
	_, viewErr = conn.Exec(ctx, "ALTER INDEX renamed_v RENAME TO renamed_v2")
	_, indexErr = conn.Exec(ctx, "ALTER INDEX renamed_t_pkey RENAME TO renamed_t_key")
	var s string
	if err := conn.QueryRow(ctx, "SELECT string_agg(name, ',' ORDER BY name) FROM "+Schema+".catalog WHERE dropped_ts IS NULL").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return tableErr, viewErr, indexErr, s
}

// TestAlterIndexRenameOutsideRefused: since version 55 a managed table's
// or view's rename by ALTER INDEX outside mzproxy is refused (MZ003) and
// the catalog keeps the names the relations still have; an index's
// rename goes on. Through the proxy's write transaction the renames are
// allowed and the catalog follows.
func TestAlterIndexRenameOutsideRefused(t *testing.T) {
	cs := newDB(t)
	conn := connect(t, cs)
	if err := Install(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	inWrite(t, conn, "CREATE TABLE renamed_t (k int PRIMARY KEY)", "INSERT INTO renamed_t VALUES (1)",
		"CREATE VIEW renamed_v AS SELECT k FROM renamed_t")
	tableErr, viewErr, indexErr, names := alterIndexOutside(t, cs)
	wantCode(t, tableErr, "MZ003", "ALTER INDEX of a managed table outside mzproxy")
	wantCode(t, viewErr, "MZ003", "ALTER INDEX of a managed view outside mzproxy")
	if indexErr != nil {
		t.Errorf("ALTER INDEX of an index outside mzproxy: %v", indexErr)
	}
	if names != "renamed_t,renamed_v" {
		t.Errorf("catalog names %q after the refused renames", names)
	}
	inWrite(t, conn, "ALTER INDEX renamed_t RENAME TO renamed_t3", "ALTER INDEX renamed_v RENAME TO renamed_v3")
	if got := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE dropped_ts IS NULL AND name IN ('renamed_t3', 'renamed_v3')"); got != 2 {
		t.Errorf("%d catalog rows follow the renames through the proxy, want 2", got)
	}
}

// TestUpgradeToVersion55: at version 54 ALTER INDEX renamed a managed
// table and view outside mzproxy behind the catalog's back; the upgrade
// refuses it.
func TestUpgradeToVersion55(t *testing.T) {
	cs := newDB(t)
	conn := connect(t, cs)
	installVersion(t, conn, 54)
	inWrite(t, conn, "CREATE TABLE renamed_t (k int PRIMARY KEY)", "INSERT INTO renamed_t VALUES (1)",
		"CREATE VIEW renamed_v AS SELECT k FROM renamed_t")
	tableErr, viewErr, _, names := alterIndexOutside(t, cs)
	if tableErr != nil || viewErr != nil || names != "renamed_t,renamed_v" {
		t.Fatalf("version 54: %v, %v, catalog %q: want both renamed behind the catalog's back", tableErr, viewErr, names)
	}
	for _, undo := range []string{"ALTER INDEX renamed_t2 RENAME TO renamed_t", "ALTER INDEX renamed_v2 RENAME TO renamed_v",
		"ALTER INDEX renamed_t_key RENAME TO renamed_t_pkey"} {
		if _, err := conn.Exec(context.Background(), undo); err != nil {
			t.Fatal(err)
		}
	}
	if err := Install(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	tableErr, viewErr, indexErr, names := alterIndexOutside(t, cs)
	wantCode(t, tableErr, "MZ003", "ALTER INDEX of a managed table outside mzproxy after the upgrade")
	wantCode(t, viewErr, "MZ003", "ALTER INDEX of a managed view outside mzproxy after the upgrade")
	if indexErr != nil || names != "renamed_t,renamed_v" {
		t.Errorf("after the upgrade: index rename %v, catalog %q", indexErr, names)
	}
}
