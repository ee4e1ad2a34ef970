package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// rowsAt is table's history at ts as whole-row text of cols (a
// comma-separated list of the table's columns).
func rowsAt(t *testing.T, conn *pgx.Conn, table, cols string, ts uint64) []string {
	t.Helper()
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", table)
	return snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s WHERE mz_from <= $1 AND mz_to > $1", cols, hist), int64(ts))
}

// TestPlainColumnChangeCalls: an ALTER TABLE that adds nullable columns
// without a default or drops columns, on a table with a primary key, runs
// in the event triggers only the functions listed here (version 29): one
// read of the columns (plain_column_change) instead of user_columns and
// five comparisons, one ALTER of the history table for all its columns
// (each fires on_ddl_command_end once more), the timestamp in one
// statement (ddl_ts) instead of current_write_ts' five calls. History
// stays exact before and after each, writes after it land in history, and
// the catalog revision moves.
func TestPlainColumnChangeCalls(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x'), (2, 'y')")
	// The table's first ALTER records its shape (made at CREATE TABLE).
	inWrite(t, conn, "ALTER TABLE k ADD COLUMN first int")
	// What every such ALTER runs: the slot, the timestamp, the guard's
	// mark set for reconcile, one read of the columns, the shape's check.
	// (Version 41: reconcile_built without reconcile's wrapper, which read
	// the row again to tell a table without history.)
	common := []string{"plain_column_change×1", "reconcile_built×1", "table_shape×1"}
	// Columns added: the history's ALTER fires on_ddl_command_end, whose
	// guard compares the mark.
	added := append([]string{"ddl_mark×2", "ddl_ts×1", "on_ddl_command_end×2"}, common...)
	// A column dropped: the history's ALTER fires both guards; on_sql_drop
	// leaves the client's column to on_ddl_command_end, which takes the
	// timestamp once (version 39; before, on_sql_drop took it first).
	dropped := append([]string{"ddl_mark×3", "ddl_ts×1", "on_ddl_command_end×2", "on_sql_drop×2"}, common...)
	for _, st := range []struct {
		sql  string
		want []string
	}{
		{"ALTER TABLE k ADD COLUMN c int", added},
		{"ALTER TABLE k ADD COLUMN d text, ADD COLUMN e numeric(10, 2)", added},
		{"ALTER TABLE k DROP COLUMN c", dropped},
		{"ALTER TABLE k DROP COLUMN d, ADD COLUMN f int, DROP COLUMN first", dropped},
		// Dropped and added again by name in one statement.
		{"ALTER TABLE k DROP COLUMN f, ADD COLUMN f text", dropped},
		// No column changed: nothing of history's to alter.
		{"ALTER TABLE k ALTER COLUMN b SET NOT NULL", append([]string{"ddl_mark×1", "ddl_ts×1", "on_ddl_command_end×1"}, common...)},
	} {
		st.want = slices.Sorted(slices.Values(st.want))
		cols := queryText(t, conn, `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
			WHERE attrelid = 'k'::regclass AND attnum > 0 AND NOT attisdropped`)
		before := inWrite(t, conn, "UPDATE k SET b = b || 'u'")
		want := snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM k", cols))
		revision := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision")
		if got := writeCalls(t, cs, -1, st.sql); !slices.Equal(got, st.want) {
			t.Errorf("%s called %v, want %v", st.sql, got, st.want)
		}
		if got := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision"); got <= revision {
			t.Errorf("%s: catalog revision %d, was %d: want it bumped", st.sql, got, revision)
		}
		// The columns still there, before the ALTER (an added column NULL
		// in every old version).
		kept := queryText(t, conn, `SELECT coalesce(string_agg(quote_ident(c), ', '), '') FROM unnest(string_to_array($1, ', ')) c
			WHERE EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'k'::regclass AND quote_ident(attname) = c AND NOT attisdropped)`, cols)
		if kept == cols {
			if got := rowsAt(t, conn, "k", cols, before); !slices.Equal(got, want) {
				t.Errorf("%s: history before it is %v, was %v", st.sql, got, want)
			}
		}
		historyMatches(t, conn, "k", inWrite(t, conn, "INSERT INTO k (a, b) SELECT max(a) + 1, 'n' FROM k", "UPDATE k SET b = b || 'v' WHERE a = 1"),
			"autocommit writes after "+st.sql)
		historyMatches(t, conn, "k", inBlock(t, conn, "UPDATE k SET b = b || 'w' WHERE a = 2", "DELETE FROM k WHERE a = 1"),
			"a block's writes after "+st.sql)
		inWrite(t, conn, "INSERT INTO k (a, b) VALUES (1, 'again')")
	}
	if got := queryText(t, conn, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = (SELECT history FROM `+Schema+`.catalog WHERE oid = 'k'::regclass)::regclass AND attnum > 0 AND NOT attisdropped`); got != "mz_from,mz_to,mz_hash,a,b,e,f" {
		t.Errorf("history of k has columns %s, want mz_from,mz_to,mz_hash,a,b,e,f", got)
	}
	if got := queryText(t, conn, "SELECT string_agg(name || ' ' || type, ', ' ORDER BY attnum) FROM "+Schema+".columns WHERE id = (SELECT id FROM "+Schema+".catalog WHERE oid = 'k'::regclass)"); got != "a integer, b text, e numeric(10,2), f text" {
		t.Errorf("k's recorded columns are %s", got)
	}
}

// TestColumnChangesOffTheFastPath: column changes that may change a row's
// value, rename a column, or whose type text user_columns spells
// otherwise, and any change of a table without a primary key, take
// reconcile's full path (user_columns), and history is exact after each.
func TestColumnChangesOffTheFastPath(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE DOMAIN posint AS int CHECK (VALUE > 0)",
		"CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x'), (2, 'y')",
		"CREATE TABLE bag (a int, b text)", "INSERT INTO bag VALUES (1, 'x'), (1, 'x')")
	inWrite(t, conn, "ALTER TABLE k ADD COLUMN first int")
	for _, st := range []struct{ table, sql string }{
		{"k", "ALTER TABLE k ADD COLUMN c int DEFAULT 7"},
		{"k", "ALTER TABLE k ADD COLUMN g int GENERATED ALWAYS AS (a * 2) STORED"},
		{"k", "ALTER TABLE k ADD COLUMN i int GENERATED BY DEFAULT AS IDENTITY"},
		{"k", "ALTER TABLE k ADD COLUMN p posint"},
		{"k", "ALTER TABLE k ADD COLUMN arr int[]"},
		{"k", `ALTER TABLE k ADD COLUMN co text COLLATE "C"`},
		{"k", "ALTER TABLE k RENAME COLUMN c TO c2"},
		{"k", "ALTER TABLE k ALTER COLUMN c2 TYPE bigint"},
		{"k", "ALTER TABLE k ADD COLUMN mz_from int"},
		{"bag", "ALTER TABLE bag ADD COLUMN c int"},
		{"bag", "ALTER TABLE bag DROP COLUMN c"},
	} {
		calls := writeCallsOrError(t, cs, st.sql)
		if st.sql == "ALTER TABLE k ADD COLUMN mz_from int" {
			if !strings.Contains(calls, "42939") {
				t.Errorf("%s: %s, want 42939", st.sql, calls)
			}
			continue
		}
		if !strings.Contains(calls, "user_columns×") {
			t.Errorf("%s called %s, want the full path (user_columns)", st.sql, calls)
		}
		historyMatches(t, conn, st.table, inWrite(t, conn, "UPDATE "+st.table+" SET b = b || 'u'"), "a write after "+st.sql)
		// Also at the ALTER's own T: a column with a value has it in the
		// current versions.
		historyMatches(t, conn, st.table, inWrite(t, conn, "ALTER TABLE "+st.table+" ALTER COLUMN b DROP NOT NULL"), "after "+st.sql)
	}
}

// writeCallsOrError is writeCalls of stmt joined by spaces, or the
// statement's error as text when it fails (rolled back).
func writeCallsOrError(t *testing.T, cs, stmt string) string {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, cs)
	if _, err := conn.Exec(ctx, "BEGIN; "+OpenWriteFor(-1)+"; "+stmt); err != nil {
		conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // the error is the answer
		return err.Error()
	}
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	return strings.Join(writeCalls(t, cs, -1, stmt), " ")
}

// TestDDLTimestampSlot: the event triggers' one-statement timestamp
// (ddl_ts) is the one current_write_ts chose before: DDL commits at the
// slot's T; a slot with a forged tag is refused (42501) as before; DDL
// outside mzproxy on a managed table is refused (MZ003).
func TestDDLTimestampSlot(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY)")
	ts := inWrite(t, conn, "CREATE VIEW v AS SELECT a FROM k")
	if got := queryInt(t, conn, "SELECT created_ts FROM "+Schema+".catalog WHERE name = 'v'"); uint64(got) != ts {
		t.Errorf("view made at %d, the write's T is %d", got, ts)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A forged pending slot: the right shape, not mzproxy's tag.
	_, err = tx.Exec(ctx, "SELECT set_config('"+WriteTSSetting+"', '0 - "+strings.Repeat("0", 64)+"', true)")
	if err == nil {
		_, err = tx.Exec(ctx, "ALTER TABLE k ADD COLUMN c int")
	}
	wantCode(t, err, "42501", "DDL with a forged slot")
	tx.Rollback(ctx) //nolint:errcheck // failed
	_, err = conn.Exec(ctx, "ALTER TABLE k ADD COLUMN c int")
	wantCode(t, err, "MZ003", "DDL outside mzproxy")
}

// TestUpgradeToVersion29: a table made at version 28 takes the fast path
// at its first column change after the upgrade, and its history is exact.
func TestUpgradeToVersion29(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 28)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v int)", "INSERT INTO old VALUES (1, 0)")
	inWrite(t, conn, "ALTER TABLE old ADD COLUMN w int")
	before := inWrite(t, conn, "UPDATE old SET w = 5")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got := queryText(t, conn, `SELECT string_agg(p.proname || ' ' || array_to_string(p.proconfig, ','), '; ' ORDER BY p.proname)
		FROM pg_proc p WHERE p.pronamespace = $1::regnamespace AND p.proname IN ('on_ddl_command_end', 'on_sql_drop')`, Schema); strings.Count(got, "plan_cache_mode=force_generic_plan") != 2 {
		t.Errorf("the event triggers' settings are %q, want plan_cache_mode=force_generic_plan in both", got)
	}
	calls := writeCalls(t, cs, -1, "ALTER TABLE old DROP COLUMN v, ADD COLUMN x text")
	if callCount(calls, "plain_column_change") != 1 || callCount(calls, "user_columns") != 0 {
		t.Errorf("the first column change after the upgrade called %v, want plain_column_change and no user_columns", calls)
	}
	if got := rowsAt(t, conn, "old", "k, w", before); !slices.Equal(got, []string{"(1,5)"}) {
		t.Errorf("history before the change is %v, want [(1,5)]", got)
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET x = 'a'", "INSERT INTO old VALUES (2, 2, 'b')"), "writes after the upgrade")
}
