package storage

import (
	"context"
	"strings"
	"testing"
)

// recordedColumns is table's rows in mzproxy.columns ("name:type", in
// attnum order), "-" when it has none.
func recordedColumns(t *testing.T, conn Querier, table string) string {
	t.Helper()
	return queryText(t, conn, `SELECT coalesce((SELECT string_agg(c.name || ':' || c.type, ',' ORDER BY c.attnum)
		FROM `+Schema+`.columns c WHERE c.id = k.id), '-')
		FROM `+Schema+`.catalog k WHERE k.oid = $1::regclass AND k.dropped_ts IS NULL`, table)
}

// TestUnbuiltColumnChanges: a table without history has no rows in
// mzproxy.columns (version 41: they are recorded when its history is
// made), so an ALTER of it through mzproxy runs no user_columns and no
// reconcile: on_ddl_command_end's lookup statement follows its name and
// moves the catalog's revision, once, at the slot's timestamp (since
// version 52 the row's own revision moves only with its name or schema,
// or an index, not at a column change). Reserved column
// names are refused (42939) as before, by ADD, RENAME and CREATE TABLE; an
// ALTER rolled back leaves nothing. The first write records the columns
// as they are then, and the history has them; a later ALTER of the
// written table keeps both.
func TestUnbuiltColumnChanges(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	if err := slotWrite(t, conn, "CREATE TABLE p (a int PRIMARY KEY, b text)"); err != nil {
		t.Fatal(err)
	}
	if got := recordedColumns(t, conn, "p"); got != "-" {
		t.Errorf("columns recorded for p without history: %s, want none", got)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA s"); err != nil {
		t.Fatal(err)
	}
	qualified := func(table string) string {
		if strings.Contains(table, ".") {
			return table
		}
		return "public." + table
	}
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	table := "p"
	for _, st := range []struct {
		sql, table string
		rowMoves   bool // the row's own revision (version 52)
	}{
		{"ALTER TABLE p ADD COLUMN c int", "p", false},
		{"ALTER TABLE p RENAME COLUMN b TO bb", "p", false},
		{"ALTER TABLE p ALTER COLUMN c TYPE bigint", "p", false},
		{"ALTER TABLE p DROP COLUMN c", "p", false},
		{"ALTER TABLE p ADD COLUMN d numeric(10, 2), ADD COLUMN e text", "p", false},
		{"ALTER TABLE p DROP COLUMN e, ADD COLUMN e int", "p", false},
		{"ALTER TABLE p RENAME TO p2", "p2", true},
		{"CREATE INDEX p2_bb ON p2 (bb)", "p2", true},
		{"ALTER TABLE p2 SET SCHEMA s", "s.p2", true},
		{"ALTER TABLE s.p2 SET SCHEMA public", "p2", true},
	} {
		before := revision()
		rowBefore := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog WHERE oid = $1::regclass AND dropped_ts IS NULL", table)
		calls := writeCalls(t, cs, -1, st.sql)
		for _, f := range []string{"user_columns", "reconcile", "reconcile_built", "ddl_mark"} {
			if n := callCount(calls, f); n != 0 {
				t.Errorf("%s: %d calls of %s, want none (%v)", st.sql, n, f, calls)
			}
		}
		// (Version 46: none; nothing records a T for a table without
		// history.)
		if n := callCount(calls, "ddl_ts"); n != 0 {
			t.Errorf("%s: %d calls of ddl_ts, want none (%v)", st.sql, n, calls)
		}
		after := revision()
		if after != before+1 {
			t.Errorf("%s: catalog revision %d -> %d, want it moved once", st.sql, before, after)
		}
		table = st.table
		wantRev := rowBefore
		if st.rowMoves {
			wantRev = after
		}
		if got := queryText(t, conn, "SELECT format('%I.%I', schema_name, name) || ' ' || (revision = $2) || ' ' || history_built FROM "+Schema+".catalog WHERE oid = $1::regclass AND dropped_ts IS NULL",
			table, wantRev); got != qualified(table)+" true false" {
			t.Errorf("%s: catalog row %q, want the name %s at revision %d, without history", st.sql, got, table, wantRev)
		}
		if got := recordedColumns(t, conn, table); got != "-" {
			t.Errorf("%s: columns recorded without history: %s", st.sql, got)
		}
	}
	for _, sql := range []string{"ALTER TABLE p2 ADD COLUMN mz_from int", "ALTER TABLE p2 RENAME COLUMN a TO mz_to",
		"CREATE TABLE bad (a int, mz_hash int)"} {
		wantCode(t, slotWrite(t, conn, sql), "42939", sql)
	}
	before := revision()
	if _, err := conn.Exec(ctx, "BEGIN; "+OpenWriteFor(-1)+"; ALTER TABLE p2 ADD COLUMN z int; ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'p2'::regclass AND attname = 'z'"); n != 0 || revision() != before {
		t.Errorf("a rolled-back ADD COLUMN left %d columns z and the revision at %d (was %d)", n, revision(), before)
	}

	// A view of the table: its recorded text follows a column's rename.
	if err := slotWrite(t, conn, "CREATE VIEW pv AS SELECT a, bb FROM p2", "ALTER TABLE p2 RENAME COLUMN bb TO b2"); err != nil {
		t.Fatal(err)
	}
	if got := queryText(t, conn, "SELECT view_sql FROM "+Schema+".catalog WHERE oid = 'pv'::regclass"); !strings.Contains(got, "b2") {
		t.Errorf("pv's recorded text after the rename of its column: %q", got)
	}
	if err := slotWrite(t, conn, "ALTER TABLE p2 RENAME COLUMN b2 TO bb"); err != nil {
		t.Fatal(err)
	}
	// Made an inheritance child (of a table not managed): refused.
	if _, err := conn.Exec(ctx, "CREATE TABLE par (a int)"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, slotWrite(t, conn, "ALTER TABLE p2 INHERIT par"), "0A000", "ALTER TABLE p2 INHERIT par")

	ts := inWrite(t, conn, "INSERT INTO p2 VALUES (1, 'x', 2.5, 7)")
	historyMatches(t, conn, "p2", ts, "the first write after the column changes")
	if got := recordedColumns(t, conn, "p2"); got != "a:integer,bb:text,d:numeric(10,2),e:integer" {
		t.Errorf("columns recorded at the first write: %s", got)
	}
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'p2'::regclass")
	if got := queryText(t, conn, "SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped", hist); got != "mz_from,mz_to,mz_hash,a,bb,d,e" {
		t.Errorf("history columns %q", got)
	}
	inWrite(t, conn, "ALTER TABLE p2 ADD COLUMN f int", "ALTER TABLE p2 RENAME COLUMN bb TO b3")
	historyMatches(t, conn, "p2", inWrite(t, conn, "UPDATE p2 SET f = 1"), "a write after the written table's ALTER")
	if got := recordedColumns(t, conn, "p2"); got != "a:integer,b3:text,d:numeric(10,2),e:integer,f:integer" {
		t.Errorf("columns after the written table's ALTER: %s", got)
	}
}

// TestUpgradeToVersion41: the upgrade deletes the columns recorded for
// tables without history (their history records them when it is made);
// a table with history keeps its own. Both take column changes and writes
// after it.
func TestUpgradeToVersion41(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 40)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a')")
	if err := slotWrite(t, conn, "CREATE TABLE lazy (k int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	if got := recordedColumns(t, conn, "lazy"); got != "k:integer,v:text" {
		t.Fatalf("lazy's columns at version 40: %s (the test tests nothing)", got)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got := recordedColumns(t, conn, "lazy"); got != "-" {
		t.Errorf("lazy's columns after the upgrade: %s, want none", got)
	}
	if got := recordedColumns(t, conn, "old"); got != "k:integer,v:text" {
		t.Errorf("old's columns after the upgrade: %s", got)
	}
	if err := slotWrite(t, conn, "ALTER TABLE lazy ADD COLUMN c int", "ALTER TABLE old ADD COLUMN c int"); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"lazy", "old"} {
		historyMatches(t, conn, table, inWrite(t, conn, "INSERT INTO "+table+" VALUES (2, 'b', 3)"), "a write to "+table+" after the upgrade")
		if got := recordedColumns(t, conn, table); got != "k:integer,v:text,c:integer" {
			t.Errorf("%s's columns after a write: %s", table, got)
		}
	}
}
