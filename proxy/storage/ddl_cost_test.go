package storage

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// TestAlterTableCatalogReads: ALTER TABLE ADD/DROP COLUMN on a table with a
// primary key reads the user's columns once (version 10 read them six
// times in reconcile; since version 29 a plain column's ADD or DROP reads
// them in plain_column_change, not user_columns), and compares the table's
// rows with their current versions (resync: a scan of both) only when a
// value can have changed.
func TestAlterTableCatalogReads(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k SELECT g, 'v' || g FROM generate_series(1, 50) g")
	for _, st := range []struct {
		sql          string
		resync       int
		reader       string // the function that reads the columns
		otherReaders string
	}{
		{"ALTER TABLE k ADD COLUMN c int", 0, "plain_column_change", "user_columns"},
		{"ALTER TABLE k DROP COLUMN c", 0, "plain_column_change", "user_columns"},
		{"ALTER TABLE k ADD COLUMN d int DEFAULT 7", 1, "user_columns", ""},
		{"ALTER TABLE k ALTER COLUMN d TYPE bigint", 1, "user_columns", ""},
	} {
		calls := writeCalls(t, cs, -1, st.sql)
		if n := callCount(calls, st.reader); n != 1 {
			t.Errorf("%s: %s ran %d times, want 1 (%v)", st.sql, st.reader, n, calls)
		}
		if n := callCount(calls, st.otherReaders); st.otherReaders != "" && n != 0 {
			t.Errorf("%s: %s ran %d times, want none (%v)", st.sql, st.otherReaders, n, calls)
		}
		if n := callCount(calls, "resync"); n != st.resync {
			t.Errorf("%s: resync ran %d times, want %d (%v)", st.sql, n, st.resync, calls)
		}
	}
}

// TestAlterAddColumnHistory: whatever ALTER TABLE ADD/DROP COLUMN skips,
// history at its timestamp is the table: columns added NULL, or filled by
// a default, a domain's default, an identity or a generated expression;
// dropped columns; a table without a primary key (whose versions' hashes
// cover the whole row) keeps retracting by them afterwards.
func TestAlterAddColumnHistory(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE DOMAIN three AS int DEFAULT 3",
		"CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k SELECT g, 'v' || g FROM generate_series(1, 5) g",
		"CREATE TABLE bag (a int, b text)", "INSERT INTO bag SELECT g % 3, 'v' FROM generate_series(1, 6) g")
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	check := func(table, cols string, ts uint64, what string) {
		t.Helper()
		hist := cat.ByName("public", table).History
		got := snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s WHERE mz_from <= $1 AND mz_to > $1", cols, hist), int64(ts))
		want := snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s", cols, table))
		if !slices.Equal(got, want) {
			t.Errorf("%s: %s at %d is %v, the table %v", what, table, ts, got, want)
		}
	}
	for _, st := range []struct{ sql, cols string }{
		{"ALTER TABLE k ADD COLUMN n int", "a, b, n"},
		{"ALTER TABLE k ADD COLUMN d int DEFAULT 7", "a, b, n, d"},
		{"ALTER TABLE k ADD COLUMN dm three", "a, b, n, d, dm"},
		{"ALTER TABLE k ADD COLUMN g int GENERATED ALWAYS AS (a * 2) STORED", "a, b, n, d, dm, g"},
		{"ALTER TABLE k ADD COLUMN i int GENERATED ALWAYS AS IDENTITY", "a, b, n, d, dm, g, i"},
		{"ALTER TABLE k DROP COLUMN n", "a, b, d, dm, g, i"},
		{"ALTER TABLE k ADD COLUMN v timestamptz DEFAULT clock_timestamp()", "a, b, d, dm, g, i, v"},
		{"ALTER TABLE k ADD COLUMN u int UNIQUE", "a, b, d, dm, g, i, v, u"},
		{"CREATE UNIQUE INDEX k_g ON k (g)", "a, b, d, dm, g, i, v, u"},
	} {
		check("k", st.cols, inWrite(t, conn, st.sql), st.sql)
	}
	check("k", "a, b, d, dm, g, i, v, u", inWrite(t, conn, "UPDATE k SET b = 'w', u = a WHERE a < 3", "DELETE FROM k WHERE a = 5"), "writes after the ALTERs")
	if n := queryInt(t, conn, "SELECT count(*) FROM mzproxy.index_mirrors m JOIN pg_index x ON x.indexrelid = m.index_oid WHERE x.indrelid = 'k'::regclass"); n != 3 {
		t.Errorf("lookup mirrors of k: %d, want 3 (primary key, u, k_g)", n)
	}
	for _, st := range []struct{ sql, cols string }{
		{"ALTER TABLE bag ADD COLUMN n int", "a, b, n"},
		{"DELETE FROM bag WHERE a = 1", "a, b, n"},
		{"ALTER TABLE bag DROP COLUMN b", "a, n"},
		{"UPDATE bag SET n = a", "a, n"},
	} {
		check("bag", st.cols, inWrite(t, conn, st.sql), st.sql)
	}
}

// TestCreateIndexCalls: CREATE UNIQUE INDEX on a managed table syncs its
// lookup mirrors and nothing else (version 10 reconciled the table in
// full: columns, names, the trigger functions compared with their text,
// grants), a plain CREATE INDEX not even that (version 28: it has no
// mirror), and the event triggers' check of mzproxy's own DDL costs one
// function call (ddl_mark), not two (tag).
func TestCreateIndexCalls(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text, c int)")
	for sql, syncs := range map[string]int{"CREATE INDEX k_b ON k (b)": 0, "CREATE UNIQUE INDEX k_c ON k (c)": 1} {
		calls := writeCalls(t, cs, -1, sql)
		for name, want := range map[string]int{"sync_indexes": syncs, "reconcile": 0, "gen_triggers": 0, "user_columns": 0, "sync_grants": 0} {
			if n := callCount(calls, name); n != want {
				t.Errorf("%s: %s ran %d times, want %d (%v)", sql, name, n, want, calls)
			}
		}
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM mzproxy.index_mirrors WHERE index_oid = 'k_c'::regclass"); n != 1 {
		t.Errorf("mirror records of the unique index k_c: %d, want 1", n)
	}
	calls := writeCalls(t, cs, -1, "CREATE TABLE k2 (a int PRIMARY KEY, b text)")
	if marks, tags := callCount(calls, "ddl_mark"), callCount(calls, "tag"); marks < 3 || tags >= marks {
		t.Errorf("CREATE TABLE: ddl_mark ran %d times, tag %d: want ddl_mark not to call tag (%v)", marks, tags, calls)
	}
}
