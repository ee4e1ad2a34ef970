package storage

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestColumnChangeKeepsCatalogRow: since version 52 an ALTER TABLE of a
// managed table reads its catalog row, and writes it only when the table
// was renamed or moved. ADD and DROP COLUMN of a never-written and of a
// written table leave the row as it was (its xmin: no new version) while
// the catalog revision moves once each; RENAME TO and SET SCHEMA write the
// new name and schema with the revision. A reserved name is still refused
// by ADD COLUMN and RENAME COLUMN (each of the three, the range's ends
// included), a name inside the reserved names' index range is not, and an
// inheritance child is refused.
func TestColumnChangeKeepsCatalogRow(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	inWrite(t, conn, "CREATE TABLE written (a int PRIMARY KEY, b text)", "INSERT INTO written VALUES (1, 'x')")
	writeCalls(t, cs, -1, "CREATE TABLE lazy (a int PRIMARY KEY, b text)")

	for _, c := range []struct{ table, stmt string }{
		{"lazy", "ALTER TABLE lazy ADD COLUMN c int"}, {"lazy", "ALTER TABLE lazy DROP COLUMN c"},
		{"written", "ALTER TABLE written ADD COLUMN c int"}, {"written", "ALTER TABLE written DROP COLUMN c"},
		{"lazy", "ALTER TABLE lazy ADD COLUMN mz_more int"}, {"lazy", "ALTER TABLE lazy RENAME COLUMN mz_more TO mz_g"},
	} {
		expectRowKept(t, cs, conn, c.table, c.stmt)
	}
	historyMatches(t, conn, "written", inWrite(t, conn, "UPDATE written SET b = 'y'", "INSERT INTO written VALUES (2, 'z')"), "writes after the column changes")

	if _, err := conn.Exec(ctx, "CREATE SCHEMA app"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ stmt, oid, schema, name string }{
		{"ALTER TABLE lazy RENAME TO lazier", "lazier", "public", "lazier"},
		{"ALTER TABLE lazier SET SCHEMA app", "app.lazier", "app", "lazier"},
		{"ALTER TABLE written RENAME TO written2", "written2", "public", "written2"},
	} {
		writeCalls(t, cs, -1, c.stmt)
		rev := revision()
		want := c.schema + " " + c.name
		if got := queryText(t, conn, "SELECT concat_ws(' ', schema_name, name) FROM "+Schema+".catalog WHERE oid = $1::regclass AND dropped_ts IS NULL AND revision = $2", c.oid, rev); got != want {
			t.Errorf("%s: catalog row %q at revision %d, want %q", c.stmt, got, rev, want)
		}
	}

	for _, c := range []struct{ stmt, code string }{
		{"ALTER TABLE app.lazier ADD COLUMN mz_from int", "42939"},
		{"ALTER TABLE app.lazier ADD COLUMN mz_to int", "42939"},
		{"ALTER TABLE app.lazier RENAME COLUMN b TO mz_hash", "42939"},
		{"ALTER TABLE written2 ADD COLUMN mz_to int", "42939"},
		{"ALTER TABLE written2 RENAME COLUMN b TO mz_from", "42939"},
	} {
		rev := revision()
		_, err := conn.Exec(ctx, "BEGIN; "+OpenWriteFor(-1)+"; "+c.stmt)
		wantCode(t, err, c.code, c.stmt)
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		if got := revision(); got != rev {
			t.Errorf("%s refused, but the revision moved %d -> %d", c.stmt, rev, got)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE parent (a int)"); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, "BEGIN; "+OpenWriteFor(-1)+"; ALTER TABLE app.lazier INHERIT parent")
	wantCode(t, err, "0A000", "ALTER TABLE app.lazier INHERIT parent")
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
}

// TestDropViewMovesRevisionOnce: since version 52 on_sql_drop marks a view
// that a DROP VIEW drops under the pending slot without reading its row
// first, and moves the revision itself even for a view mzproxy does not
// manage. Each DROP VIEW still moves the revision exactly once (two views
// in one statement, one dropped with CASCADE, a temporary view) and
// records each managed view dropped at one timestamp without a T; outside
// mzproxy a managed view's DROP is refused (MZ003) and changes nothing.
func TestDropViewMovesRevisionOnce(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	dropped := func(names ...string) int64 {
		return queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE kind = 'view' AND name = ANY ($1) AND dropped_ts IS NOT NULL", names)
	}
	writeCalls(t, cs, -1, "CREATE TABLE base (a int PRIMARY KEY, b text)")
	for _, v := range []string{"CREATE VIEW v1 AS SELECT a FROM base", "CREATE VIEW v2 AS SELECT a, b FROM base",
		"CREATE VIEW v3 AS SELECT a FROM base", "CREATE VIEW v3_on AS SELECT a FROM v3"} {
		writeCalls(t, cs, -1, v)
	}

	rev := revision()
	_, err := conn.Exec(ctx, "DROP VIEW v1")
	wantCode(t, err, "MZ003", "DROP VIEW v1 outside mzproxy")
	if got := revision(); got != rev || dropped("v1") != 0 {
		t.Fatalf("DROP VIEW v1 refused, but the revision moved %d -> %d or v1 is marked dropped", rev, got)
	}

	for _, c := range []struct {
		stmt  string
		views []string
	}{
		{"DROP VIEW v1, v2", []string{"v1", "v2"}},
		{"DROP VIEW v3 CASCADE", []string{"v3", "v3_on"}},
		{"DROP VIEW temp_v", nil},
	} {
		if c.views == nil {
			// A temporary view, made and dropped in one transaction (it
			// lives in that session): never managed. Each statement moves
			// the revision once (the DROP's now in on_sql_drop).
			rev = revision()
			writeCalls(t, cs, -1, "CREATE TEMPORARY VIEW temp_v AS SELECT 1 AS one", c.stmt)
			if got := revision(); got != rev+2 {
				t.Errorf("CREATE TEMPORARY VIEW and %s: revision %d -> %d, want +2", c.stmt, rev, got)
			}
			continue
		}
		rev = revision()
		calls := writeCalls(t, cs, -1, c.stmt)
		if n := callCount(calls, "ddl_ts"); n != 0 {
			t.Errorf("%s: %d calls of ddl_ts, want none (a view takes no T)", c.stmt, n)
		}
		if got := revision(); got != rev+1 {
			t.Errorf("%s: revision %d -> %d, want +1", c.stmt, rev, got)
		}
		if n := dropped(c.views...); n != int64(len(c.views)) {
			t.Errorf("%s: %d of %v marked dropped", c.stmt, n, c.views)
		}
		if n := queryInt(t, conn, "SELECT count(DISTINCT (dropped_ts, revision)) FROM "+Schema+".catalog WHERE name = ANY ($1)", c.views); n != 1 {
			t.Errorf("%s: %d distinct (dropped_ts, revision) among %v, want one", c.stmt, n, c.views)
		}
		if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = ANY ($1) AND revision = $2", c.views, rev+1); n != int64(len(c.views)) {
			t.Errorf("%s: %d of %v recorded at revision %d", c.stmt, n, c.views, rev+1)
		}
	}
}

// TestUpgradeToVersion52: from version 51, objects made before the upgrade
// are altered and dropped by version 52's functions: a column change of a
// never-written and of a written table leaves their rows alone (the
// revision moves), a rename is recorded, a reserved name is refused, a
// view's DROP VIEW is recorded without a T and moves the revision once.
func TestUpgradeToVersion52(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 51)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a')",
		"CREATE VIEW old_v AS SELECT k, v FROM old")
	writeCalls(t, cs, -1, "CREATE TABLE lazy (k int PRIMARY KEY, c text)")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	for _, c := range []struct{ table, stmt string }{
		{"lazy", "ALTER TABLE lazy ADD COLUMN d int"}, {"old", "ALTER TABLE old ADD COLUMN d int"},
	} {
		expectRowKept(t, cs, conn, c.table, c.stmt)
	}
	_, err := conn.Exec(ctx, "BEGIN; "+OpenWriteFor(-1)+"; ALTER TABLE lazy ADD COLUMN mz_hash int")
	wantCode(t, err, "42939", "ALTER TABLE lazy ADD COLUMN mz_hash after the upgrade")
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	rev := revision()
	if n := callCount(writeCalls(t, cs, -1, "DROP VIEW old_v"), "ddl_ts"); n != 0 {
		t.Errorf("DROP VIEW old_v after the upgrade: %d calls of ddl_ts, want none", n)
	}
	if got := revision(); got != rev+1 {
		t.Errorf("DROP VIEW old_v after the upgrade: revision %d -> %d, want +1", rev, got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'old_v' AND dropped_ts IS NOT NULL AND revision = $1", rev+1); n != 1 {
		t.Errorf("old_v not recorded dropped at revision %d", rev+1)
	}
	writeCalls(t, cs, -1, "ALTER TABLE lazy RENAME TO lazier")
	if got := queryText(t, conn, "SELECT name FROM "+Schema+".catalog WHERE oid = 'lazier'::regclass AND dropped_ts IS NULL"); got != "lazier" {
		t.Errorf("lazy renamed to lazier after the upgrade: catalog name %q", got)
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 'b'", "INSERT INTO old VALUES (2, 'c', 3)"), "writes after the upgrade")
}

// catalogRowOf is a live table's catalog row as "xmin schema name
// revision": its xmin tells a rewritten row from the same one.
func catalogRowOf(t *testing.T, conn *pgx.Conn, oid string) string {
	t.Helper()
	return queryText(t, conn, "SELECT concat_ws(' ', xmin, schema_name, name, revision) FROM "+Schema+".catalog WHERE oid = $1::regclass AND dropped_ts IS NULL", oid)
}

// expectRowKept runs stmt through mzproxy's slot and checks that table's
// catalog row was left as it was while the catalog revision moved once.
func expectRowKept(t *testing.T, cs string, conn *pgx.Conn, table, stmt string) {
	t.Helper()
	const revisionSQL = "SELECT revision FROM " + Schema + ".catalog_revision"
	before, rev := catalogRowOf(t, conn, table), queryInt(t, conn, revisionSQL)
	writeCalls(t, cs, -1, stmt)
	if got := catalogRowOf(t, conn, table); got != before {
		t.Errorf("%s: catalog row (xmin, schema, name, revision) %q -> %q, want it left alone", stmt, before, got)
	}
	if got := queryInt(t, conn, revisionSQL); got != rev+1 {
		t.Errorf("%s: revision %d -> %d, want +1", stmt, rev, got)
	}
}
