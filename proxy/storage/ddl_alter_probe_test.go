package storage

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// viewTextOf is the recorded text of a live managed view.
func viewTextOf(t *testing.T, conn *pgx.Conn, view string) string {
	t.Helper()
	return queryText(t, conn, "SELECT view_sql FROM "+Schema+".catalog WHERE oid = $1::regclass AND dropped_ts IS NULL", view)
}

// alterTableViewsFollow checks, on a database at any version since 52,
// what on_ddl_command_end must keep for an ALTER TABLE of a managed
// table under a view: a column's add and drop leave the row and the
// view's text; a column's rename leaves the row and is followed by the
// view's text; the table's rename and its move to another schema are
// followed by the view's text and the row's names;
// a table whose quoted name differs from its name (mixed case, a space,
// a schema of its own) and a session that quotes every identifier keep
// the row at a column change and follow a rename.
func alterTableViewsFollow(t *testing.T, cs string, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	for _, s := range []string{`CREATE SCHEMA moved`, `CREATE SCHEMA "Odd Schema"`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	writeCalls(t, cs, -1, "CREATE TABLE viewed (a int PRIMARY KEY, b text)", "CREATE VIEW viewed_v AS SELECT a, b FROM viewed",
		`CREATE TABLE "Odd Schema"."Odd Name" (a int PRIMARY KEY)`)
	text := viewTextOf(t, conn, "viewed_v")
	for _, stmt := range []string{"ALTER TABLE viewed ADD COLUMN c int", "ALTER TABLE viewed DROP COLUMN c"} {
		expectRowKept(t, cs, conn, "viewed", stmt)
		if got := viewTextOf(t, conn, "viewed_v"); got != text {
			t.Errorf("%s: viewed_v's text %q -> %q, want it kept", stmt, text, got)
		}
	}
	expectRowKept(t, cs, conn, "viewed", "ALTER TABLE viewed RENAME COLUMN b TO b2")
	for _, c := range []struct{ stmt, want string }{
		{"", "b2"},
		{"ALTER TABLE viewed RENAME TO viewed2", "viewed2"},
		{"ALTER TABLE viewed2 SET SCHEMA moved", "moved.viewed2"},
	} {
		if c.stmt != "" {
			writeCalls(t, cs, -1, c.stmt)
		}
		if got := viewTextOf(t, conn, "viewed_v"); !strings.Contains(got, c.want) {
			t.Errorf("after %q: viewed_v's recorded text %q, want it to name %s", c.stmt, got, c.want)
		}
	}
	if got := catalogRowOf(t, conn, "moved.viewed2"); !strings.Contains(got, " moved viewed2 ") {
		t.Errorf("viewed renamed to viewed2 and moved: catalog row %q", got)
	}

	odd := `"Odd Schema"."Odd Name"`
	expectRowKept(t, cs, conn, odd, `ALTER TABLE `+odd+` ADD COLUMN c int`)
	expectRowKept(t, cs, conn, odd, `SET LOCAL quote_all_identifiers = on; ALTER TABLE `+odd+` DROP COLUMN c`)
	writeCalls(t, cs, -1, `ALTER TABLE `+odd+` RENAME TO "Odder Name"`)
	if got := catalogRowOf(t, conn, `"Odd Schema"."Odder Name"`); !strings.Contains(got, " Odd Schema Odder Name ") {
		t.Errorf(`"Odd Name" renamed to "Odder Name": catalog row %q`, got)
	}
}

// TestAlterTableViewsFollow: version 57's on_ddl_command_end (no pg_class
// join, no pg_depend probe at a column's add or drop) keeps every bound
// of alterTableViewsFollow. It passes on version 55 too: it guards what
// the cheaper reading must keep (a view's text after a rename reached
// through the command's column or the object identity, the quoting of
// odd names), not the saving, which docs/ddl-cost.md measures.
func TestAlterTableViewsFollow(t *testing.T) {
	cs, conn := installedDB(t)
	alterTableViewsFollow(t, cs, conn)
}

// TestUpgradeToVersion57: a database at version 56 gets version 57's
// on_ddl_command_end, which keeps alterTableViewsFollow's bounds; before
// the upgrade its ALTER TABLE block still joins pg_class.
func TestUpgradeToVersion57(t *testing.T) {
	cs := newDB(t)
	conn := connect(t, cs)
	installVersion(t, conn, 56)
	const joinsPgClass = "SELECT (pg_get_functiondef('" + Schema + ".on_ddl_command_end()'::regprocedure) LIKE '%catalog t JOIN pg_class c%')::text"
	if got := queryText(t, conn, joinsPgClass); got != "true" {
		t.Fatalf("version 56: on_ddl_command_end joins pg_class: %s, want true", got)
	}
	if err := Install(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got := queryText(t, conn, joinsPgClass); got != "false" {
		t.Errorf("after the upgrade: on_ddl_command_end joins pg_class: %s, want false", got)
	}
	alterTableViewsFollow(t, cs, conn)
}
