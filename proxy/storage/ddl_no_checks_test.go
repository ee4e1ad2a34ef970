package storage

import (
	"context"
	"strings"
	"testing"
)

// catalogChecks counts the CHECK constraints of catalog and
// catalog_revision (version 48 drops all three).
func catalogChecks(t *testing.T, q Querier) int64 {
	t.Helper()
	return queryInt(t, q, `SELECT count(*) FROM pg_constraint
		WHERE contype = 'c' AND conrelid IN ('`+Schema+`.catalog'::regclass, '`+Schema+`.catalog_revision'::regclass)`)
}

// TestDropColumnCascade: on_sql_drop returns at once for an ALTER TABLE
// that drops only its own columns (version 48), but a DROP COLUMN ...
// CASCADE that drops a managed view still records the view as dropped
// and moves the revision, for a never-written table (no T) and a written
// one (its T, and the history still matches after it); outside mzproxy
// both are refused (MZ003) and leave the catalog as it was.
func TestDropColumnCascade(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	if n := catalogChecks(t, conn); n != 0 {
		t.Errorf("catalog and catalog_revision have %d CHECK constraints, want none (version 48)", n)
	}
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	live := func(name string) bool {
		return queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = $1 AND dropped_ts IS NULL", name) == 1
	}
	inWrite(t, conn, "CREATE TABLE written (a int PRIMARY KEY, b text, c int)", "INSERT INTO written VALUES (1, 'x', 1)",
		"CREATE VIEW written_v AS SELECT a, b FROM written")
	// (writeCalls builds no history, inWrite every table's: lazy is
	// made after the last inWrite before its ALTERs.)
	writeCalls(t, cs, -1, "CREATE TABLE lazy (a int PRIMARY KEY, b text, c int)")
	writeCalls(t, cs, -1, "CREATE VIEW lazy_v AS SELECT a, b FROM lazy")

	// Outside mzproxy: refused, whether or not the drop cascades.
	for _, stmt := range []string{"ALTER TABLE lazy DROP COLUMN c", "ALTER TABLE lazy DROP COLUMN b CASCADE",
		"ALTER TABLE written DROP COLUMN b CASCADE"} {
		rev := revision()
		_, err := conn.Exec(ctx, stmt)
		wantCode(t, err, "MZ003", stmt+" outside mzproxy")
		if got := revision(); got != rev {
			t.Errorf("%s refused, but the revision moved %d -> %d", stmt, rev, got)
		}
	}
	if !live("lazy_v") || !live("written_v") {
		t.Fatalf("a refused DROP COLUMN ... CASCADE left its view dropped in the catalog")
	}

	// Through mzproxy: a column of its own, then a cascade to the view.
	rev := revision()
	if calls := writeCalls(t, cs, -1, "ALTER TABLE lazy DROP COLUMN c"); callCount(calls, "ddl_ts") != 0 {
		t.Errorf("DROP COLUMN of a never-written table: calls %v, want no ddl_ts", calls)
	}
	if got := revision(); got != rev+1 {
		t.Errorf("DROP COLUMN c: revision %d -> %d, want +1", rev, got)
	}
	if !live("lazy_v") {
		t.Errorf("DROP COLUMN c dropped lazy_v from the catalog")
	}
	rev = revision()
	writeCalls(t, cs, -1, "ALTER TABLE lazy DROP COLUMN b CASCADE")
	if live("lazy_v") {
		t.Errorf("ALTER TABLE lazy DROP COLUMN b CASCADE dropped lazy_v, but its catalog row is still live")
	}
	if queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'lazy_v' AND revision > $1", rev) != 1 {
		t.Errorf("lazy_v's drop recorded at a revision not past %d", rev)
	}
	if got := revision(); got <= rev {
		t.Errorf("DROP COLUMN b CASCADE: revision %d -> %d, want it moved", rev, got)
	}
	ts := inWrite(t, conn, "ALTER TABLE written DROP COLUMN b CASCADE")
	if got := queryInt(t, conn, "SELECT dropped_ts FROM "+Schema+".catalog WHERE name = 'written_v' AND dropped_ts IS NOT NULL"); uint64(got) != ts {
		t.Errorf("written_v dropped with its table's column at %d, want the ALTER's T %d", got, ts)
	}
	historyMatches(t, conn, "written", inWrite(t, conn, "UPDATE written SET c = 2", "INSERT INTO written VALUES (2, 3)"), "writes after DROP COLUMN b CASCADE")
}

// TestHostileCatalogWrites: with the CHECK constraints gone (version 48)
// the catalog holds only what mzproxy's functions write: a role that
// bypasses mzproxy may read catalog and catalog_revision but not insert,
// update or delete a row (42501), nor drop a managed view by dropping
// the column it names (MZ003); with the pending request set by hand (as
// PUBLIC may, TestHostileDDLWithoutT) the cascade is managed DDL, which
// records the view's drop: the catalog is not left stale.
func TestHostileCatalogWrites(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	db := conn.Config().Database
	loginRole(t, conn, "mznochecks")
	writeCalls(t, cs, -1, "CREATE TABLE ht (a int PRIMARY KEY, b text)", "ALTER TABLE ht OWNER TO mznochecks",
		"CREATE VIEW hv AS SELECT a, b FROM ht", "ALTER VIEW hv OWNER TO mznochecks")
	hostile := connect(t, server.ConnString("mznochecks", db))
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	rows := func() string {
		return queryText(t, conn, "SELECT string_agg(concat_ws(' ', id, kind, oid, name, history, view_sql, created_ts, dropped_ts, revision), '; ' ORDER BY id) FROM "+Schema+".catalog")
	}
	before, rev := rows(), revision()
	if n := queryInt(t, hostile, "SELECT count(*) FROM "+Schema+".catalog WHERE name IN ('ht', 'hv')"); n != 2 {
		t.Errorf("the role reads %d of ht's and hv's catalog rows, want 2", n)
	}
	for _, stmt := range []string{
		"INSERT INTO " + Schema + ".catalog (id, kind, oid, schema_name, name, created_ts, revision) VALUES (999, 'bogus', 1, 'public', 'x', 0, 0)",
		"UPDATE " + Schema + ".catalog SET kind = 'bogus', history = NULL WHERE name = 'ht'",
		"UPDATE " + Schema + ".catalog SET dropped_ts = 0 WHERE name = 'hv'",
		"DELETE FROM " + Schema + ".catalog WHERE name = 'hv'",
		"INSERT INTO " + Schema + ".catalog_revision (one, revision) VALUES (false, 0)",
		"UPDATE " + Schema + ".catalog_revision SET revision = revision - 1",
		"DELETE FROM " + Schema + ".catalog_revision",
		"ALTER TABLE ht DROP COLUMN b CASCADE",
	} {
		_, err := hostile.Exec(ctx, stmt)
		code := "42501"
		if strings.HasPrefix(stmt, "ALTER") {
			code = "MZ003"
		}
		wantCode(t, err, code, stmt)
	}
	if got := rows(); got != before {
		t.Errorf("the catalog changed under refused statements:\n%s\nwas\n%s", got, before)
	}
	if got := revision(); got != rev {
		t.Errorf("the revision moved %d -> %d under refused statements", rev, got)
	}
	if _, err := hostile.Exec(ctx, "BEGIN; SELECT set_config('mzproxy.write_ts', '0 - pending', true); ALTER TABLE ht DROP COLUMN b CASCADE; COMMIT"); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'hv' AND dropped_ts IS NOT NULL AND revision > $1", rev); n != 1 {
		t.Errorf("hv dropped by the role's DROP COLUMN ... CASCADE, but not recorded as dropped at a new revision")
	}
}

// TestUpgradeToVersion48: from version 46 (through 47, slot_checked.sql), the
// CHECK constraints go, and DDL made before the upgrade is altered and
// dropped as before: a never-written table's column without a T, a
// written one's with one, a view dropped, the revision moved once each.
func TestUpgradeToVersion48(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 46)
	if n := catalogChecks(t, conn); n != 3 {
		t.Fatalf("version 46 has %d CHECK constraints on catalog and catalog_revision, want 3", n)
	}
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a')",
		"CREATE VIEW old_v AS SELECT k, v FROM old")
	writeCalls(t, cs, -1, "CREATE TABLE lazy (k int PRIMARY KEY, c text)")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if n := catalogChecks(t, conn); n != 0 {
		t.Errorf("%d CHECK constraints on catalog and catalog_revision after the upgrade, want none", n)
	}
	before := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision")
	for _, c := range []struct {
		stmt string
		ts   int
	}{{"DROP VIEW old_v", 0}, {"ALTER TABLE lazy DROP COLUMN c", 0}, {"ALTER TABLE old ADD COLUMN c text", 1}, {"ALTER TABLE old DROP COLUMN v", 1}} {
		if n := callCount(writeCalls(t, cs, -1, c.stmt), "ddl_ts"); n != c.ts {
			t.Errorf("%s after the upgrade: %d calls of ddl_ts, want %d", c.stmt, n, c.ts)
		}
	}
	if after := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision"); after != before+4 {
		t.Errorf("four DDL statements: revision %d -> %d, want +4", before, after)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'old_v' AND dropped_ts IS NOT NULL"); n != 1 {
		t.Errorf("old_v not recorded as dropped")
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET c = 'b'", "INSERT INTO old VALUES (2, 'c')"), "writes after the upgrade")
}
