package storage

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestTypedTableDropAttribute: ALTER TYPE ... DROP ATTRIBUTE ... CASCADE
// drops the column of a managed typed table as the statement's own
// (original) drop, in an ALTER TYPE that on_ddl_command_end does not
// reconcile. Since version 39 on_sql_drop reconciles every column dropped
// but an ALTER TABLE's own, so the column leaves history and
// mzproxy.columns; before, both kept it. Outside mzproxy it is refused.
func TestTypedTableDropAttribute(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TYPE comp AS (a int, x int, y text)",
		"CREATE TABLE typed OF comp (PRIMARY KEY (a))", "INSERT INTO typed VALUES (1, 2, 'p'), (3, 4, 'q')")
	_, err := conn.Exec(ctx, "ALTER TYPE comp DROP ATTRIBUTE x CASCADE")
	wantCode(t, err, string(CodeDDLOutsideProxy), "ALTER TYPE ... DROP ATTRIBUTE CASCADE outside mzproxy")
	before := inWrite(t, conn, "UPDATE typed SET y = y || 'u'")
	at := inWrite(t, conn, "ALTER TYPE comp DROP ATTRIBUTE x CASCADE")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'typed'::regclass")
	if got := queryText(t, conn, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, hist); got != "mz_from,mz_to,mz_hash,a,y" {
		t.Errorf("history of typed has columns %s, want mz_from,mz_to,mz_hash,a,y", got)
	}
	if got := queryText(t, conn, "SELECT string_agg(name, ',' ORDER BY attnum) FROM "+Schema+".columns WHERE id = (SELECT id FROM "+Schema+".catalog WHERE oid = 'typed'::regclass)"); got != "a,y" {
		t.Errorf("typed's recorded columns are %s, want a,y", got)
	}
	if got := rowsAt(t, conn, "typed", "a, y", before); !slices.Equal(got, []string{"(1,pu)", "(3,qu)"}) {
		t.Errorf("history before the drop is %v, want [(1,pu) (3,qu)]", got)
	}
	historyMatches(t, conn, "typed", at, "at the drop's T")
	historyMatches(t, conn, "typed", inWrite(t, conn, "INSERT INTO typed VALUES (5, 'r')", "UPDATE typed SET y = 'v' WHERE a = 1", "DELETE FROM typed WHERE a = 3"),
		"writes after the drop")
}

// TestAlterTableDropColumnGuards: on_sql_drop leaves a column dropped by
// its own ALTER TABLE to on_ddl_command_end (version 39), which still
// refuses it outside mzproxy (MZ003) and with a forged slot (42501), and
// takes the drop's timestamp once.
func TestAlterTableDropColumnGuards(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text, c int)", "INSERT INTO k VALUES (1, 'x', 2)")
	_, err := conn.Exec(ctx, "ALTER TABLE k DROP COLUMN c")
	wantCode(t, err, string(CodeDDLOutsideProxy), "ALTER TABLE DROP COLUMN outside mzproxy")
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT set_config('"+WriteTSSetting+"', '0 - "+strings.Repeat("0", 64)+"', true)")
	if err == nil {
		_, err = tx.Exec(ctx, "ALTER TABLE k DROP COLUMN c")
	}
	wantCode(t, err, "42501", "DROP COLUMN with a forged slot")
	tx.Rollback(ctx) //nolint:errcheck // failed
	if got := queryInt(t, conn, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'k'::regclass AND attname = 'c' AND NOT attisdropped"); got != 1 {
		t.Fatalf("column c gone after the refused drops")
	}
	before := inWrite(t, conn, "UPDATE k SET c = 3")
	calls := writeCalls(t, cs, -1, "ALTER TABLE k DROP COLUMN c")
	if n := callCount(calls, "ddl_ts"); n != 1 {
		t.Errorf("DROP COLUMN called ddl_ts %d times, want 1 (%v)", n, calls)
	}
	if got := rowsAt(t, conn, "k", "a, b", before); !slices.Equal(got, []string{"(1,x)"}) {
		t.Errorf("history before the drop is %v, want [(1,x)]", got)
	}
	historyMatches(t, conn, "k", inWrite(t, conn, "UPDATE k SET b = 'y'", "INSERT INTO k VALUES (2, 'z')"), "writes after DROP COLUMN")
}

// TestUpgradeToVersion39: after the upgrade from 37 a table made before it
// keeps its recorded shape (an ADD/DROP COLUMN runs no sync), the views
// that depend on an altered table are still found (a column renamed is
// renamed in their recorded text), and history stays exact.
func TestUpgradeToVersion39(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 37)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a'), (2, 'b')",
		"CREATE VIEW old_v AS SELECT k, v FROM old")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	for _, stmt := range []string{"ALTER TABLE old ADD COLUMN c int", "ALTER TABLE old DROP COLUMN c"} {
		calls := writeCalls(t, cs, -1, stmt)
		for _, f := range []string{"sync_indexes", "sync_triggers", "gen_triggers", "sync_grants", "user_columns"} {
			if n := callCount(calls, f); n != 0 {
				t.Errorf("%s after the upgrade ran %s %d times, want 0 (%v)", stmt, f, n, calls)
			}
		}
	}
	inWrite(t, conn, "ALTER TABLE old RENAME COLUMN v TO w")
	if got := queryText(t, conn, "SELECT view_sql FROM "+Schema+".catalog WHERE oid = 'old_v'::regclass"); !strings.Contains(got, "w") || strings.Contains(got, "old.v") {
		t.Errorf("old_v's recorded text after RENAME COLUMN v TO w: %q", got)
	}
	inWrite(t, conn, "ALTER TABLE old RENAME TO older")
	if got := queryText(t, conn, "SELECT name FROM "+Schema+".catalog WHERE oid = 'older'::regclass"); got != "older" {
		t.Errorf("catalog name after RENAME TO older: %q", got)
	}
	historyMatches(t, conn, "older", inWrite(t, conn, "UPDATE older SET w = 'z' WHERE k = 1", "INSERT INTO older VALUES (3, 'c')"), "writes after the upgrade")
}
