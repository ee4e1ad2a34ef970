package storage

import (
	"context"
	"strings"
	"testing"
)

// TestAlterTableCatalog: an ALTER TABLE through mzproxy moves the catalog
// revision once and keeps the row of a never-written managed table (ADD,
// DROP, ALTER COLUMN TYPE), and each ALTER that needs more gets it: a view
// over the table has its text follow a column's rename, an ALTER TABLE of
// a view renames the view's row, a table's rename and move are recorded, a
// reserved name in a second subcommand and a parent are refused without
// moving the revision, a serial column (commands of a sequence beside the
// ALTER's) is added, a temporary table's ALTER only moves the revision,
// and a table with history records its new column. Outside mzproxy the
// ALTER is refused (MZ003) before any of it. (Written in session 23 for a
// shortcut through on_ddl_command_end that was measured and not merged,
// docs/ddl-cost.md "Session 23"; these are the bounds any such shortcut
// must keep.)
func TestAlterTableCatalog(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	writeCalls(t, cs, -1, "CREATE TABLE lazy (a int PRIMARY KEY, b text)", "CREATE TABLE viewed (a int PRIMARY KEY, b text)",
		"CREATE VIEW viewed_v AS SELECT a, b FROM viewed", "CREATE VIEW plain_v AS SELECT 1 AS one")
	inWrite(t, conn, "CREATE TABLE written (a int PRIMARY KEY, b text)", "INSERT INTO written VALUES (1, 'x')")

	for _, stmt := range []string{"ALTER TABLE lazy ADD COLUMN c int", "ALTER TABLE lazy ALTER COLUMN c TYPE bigint",
		"ALTER TABLE lazy DROP COLUMN c", "ALTER TABLE lazy ADD COLUMN d int, ADD COLUMN e text"} {
		expectRowKept(t, cs, conn, "lazy", stmt)
	}

	writeCalls(t, cs, -1, "ALTER TABLE viewed RENAME COLUMN b TO b2")
	if got := queryText(t, conn, "SELECT view_sql FROM "+Schema+".catalog WHERE oid = 'viewed_v'::regclass AND dropped_ts IS NULL"); !strings.Contains(got, "b2") {
		t.Errorf("viewed_v's recorded text after the rename of its column: %q", got)
	}
	writeCalls(t, cs, -1, "ALTER TABLE plain_v RENAME TO plain_v2")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE oid = 'plain_v2'::regclass AND name = 'plain_v2' AND dropped_ts IS NULL"); n != 1 {
		t.Errorf("ALTER TABLE plain_v RENAME TO plain_v2: %d catalog rows named plain_v2, want 1", n)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA app"); err != nil {
		t.Fatal(err)
	}
	writeCalls(t, cs, -1, "ALTER TABLE lazy RENAME TO lazier", "ALTER TABLE lazier SET SCHEMA app")
	if got := queryText(t, conn, "SELECT concat_ws('.', schema_name, name) FROM "+Schema+".catalog WHERE oid = 'app.lazier'::regclass AND dropped_ts IS NULL"); got != "app.lazier" {
		t.Errorf("lazy renamed and moved to app.lazier: catalog row %q", got)
	}

	if _, err := conn.Exec(ctx, "CREATE TABLE parent (a int)"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ stmt, code string }{
		{"ALTER TABLE app.lazier ADD COLUMN f int, ADD COLUMN mz_hash int", "42939"},
		{"ALTER TABLE app.lazier INHERIT parent", "0A000"},
	} {
		rev := revision()
		wantCode(t, slotWrite(t, conn, c.stmt), c.code, c.stmt)
		if got := revision(); got != rev {
			t.Errorf("%s refused, but the revision moved %d -> %d", c.stmt, rev, got)
		}
	}

	writeCalls(t, cs, -1, "CREATE TABLE lazy2 (a int PRIMARY KEY)")
	rev := revision()
	writeCalls(t, cs, -1, "ALTER TABLE lazy2 ADD COLUMN n serial")
	if got := revision(); got != rev+1 {
		t.Errorf("ALTER TABLE lazy2 ADD COLUMN n serial: revision %d -> %d, want +1", rev, got)
	}
	if got := queryText(t, conn, "SELECT history_built::text FROM "+Schema+".catalog WHERE oid = 'lazy2'::regclass AND dropped_ts IS NULL"); got != "false" {
		t.Errorf("lazy2 after ADD COLUMN n serial: history_built %s, want false (still managed, never written)", got)
	}

	// A temporary table is not managed: its ALTER moves the revision (as
	// every DDL through mzproxy does) and records nothing.
	rows := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog")
	rev = revision()
	writeCalls(t, cs, -1, "CREATE TEMPORARY TABLE scratch (a int)", "ALTER TABLE scratch ADD COLUMN b int")
	if got := revision(); got != rev+2 {
		t.Errorf("CREATE TEMPORARY TABLE and its ALTER: revision %d -> %d, want +2", rev, got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog"); n != rows {
		t.Errorf("a temporary table's CREATE and ALTER: %d catalog rows, want %d", n, rows)
	}

	inWrite(t, conn, "ALTER TABLE written ADD COLUMN c int")
	if got := recordedColumns(t, conn, "written"); got != "a:integer,b:text,c:integer" {
		t.Errorf("columns recorded after the written table's ADD COLUMN: %s", got)
	}
	historyMatches(t, conn, "written", inWrite(t, conn, "UPDATE written SET c = 1"), "a write after the written table's ALTER")

	rev = revision()
	_, err := conn.Exec(ctx, "ALTER TABLE app.lazier ADD COLUMN g int")
	wantCode(t, err, "MZ003", "ALTER TABLE app.lazier ADD COLUMN g outside mzproxy")
	if got := revision(); got != rev {
		t.Errorf("ALTER TABLE outside mzproxy refused, but the revision moved %d -> %d", rev, got)
	}
}
