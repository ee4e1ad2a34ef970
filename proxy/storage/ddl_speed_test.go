package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestDDLKeepsHistoryTriggers: DDL that changes nothing the history
// triggers spell out (a non-key index, a view) leaves the generated trigger
// functions and the triggers as they were, where each made them again
// (four functions, four triggers: most of a managed CREATE INDEX's cost);
// DDL that does change them (the primary key; a column until version 13)
// still makes them again. And each
// unique index's mirror is recorded in index_mirrors for as long as the
// index exists, so that DROP INDEX finds it by oid (no scan of pg_class)
// and the record goes with the index however it goes.
func TestDDLKeepsHistoryTriggers(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	// The generated trigger functions and triggers of ddl_probe, as rows
	// with their xmin: a row made again has a new one.
	const triggerRows = `SELECT string_agg(x, ' ' ORDER BY x) FROM (
		SELECT p.proname || ':' || p.xmin AS x FROM pg_proc p, mzproxy.catalog k
		 WHERE k.name = 'ddl_probe' AND k.dropped_ts IS NULL AND p.pronamespace = 'mzproxy'::regnamespace
		   AND p.proname LIKE 'h' || k.id || '\_%'
		UNION ALL
		SELECT t.tgname || ':' || t.xmin FROM pg_trigger t WHERE t.tgrelid = 'ddl_probe'::regclass) s`
	const mirrorRecords = `SELECT count(*) FROM mzproxy.index_mirrors m JOIN pg_class c ON c.oid = m.index_oid
		 WHERE c.relname LIKE 'ddl\_probe%' AND to_regclass('mzproxy.' || quote_ident(m.mirror)) IS NOT NULL`
	var before string
	for _, st := range []struct {
		sql string
		// same: the trigger functions and triggers stay as they were.
		same    bool
		mirrors int64
	}{
		{"CREATE TABLE ddl_probe (a int PRIMARY KEY, b text)", false, 1},
		{"CREATE INDEX ddl_probe_b ON ddl_probe (b)", true, 1},
		{"CREATE UNIQUE INDEX ddl_probe_ub ON ddl_probe (b)", true, 2},
		// (Since version 13 the trigger functions name no column.)
		{"ALTER TABLE ddl_probe ADD COLUMN c int", true, 2},
		{"ALTER TABLE ddl_probe ADD CONSTRAINT ddl_probe_uc UNIQUE (c)", true, 3},
		{"ALTER TABLE ddl_probe DROP COLUMN c", true, 2},
		{"CREATE VIEW ddl_probe_v AS SELECT a, b FROM ddl_probe", true, 2},
		{"DROP VIEW ddl_probe_v", true, 2},
		{"DROP INDEX ddl_probe_b", true, 2},
		{"DROP INDEX ddl_probe_ub", true, 1},
		{"ALTER TABLE ddl_probe DROP CONSTRAINT ddl_probe_pkey", false, 0},
	} {
		inWrite(t, conn, st.sql)
		var after string
		if err := conn.QueryRow(ctx, triggerRows).Scan(&after); err != nil {
			t.Fatal(err)
		}
		if st.same && after != before {
			t.Errorf("%s made the history triggers again: %s, were %s", st.sql, after, before)
		}
		if !st.same && after == before {
			t.Errorf("%s kept the history triggers: %s", st.sql, after)
		}
		before = after
		if got := queryInt(t, conn, mirrorRecords); got != st.mirrors {
			t.Errorf("after %s: %d recorded mirrors, want %d", st.sql, got, st.mirrors)
		}
	}
	inWrite(t, conn, "DROP TABLE ddl_probe")
	if got := queryInt(t, conn, "SELECT count(*) FROM mzproxy.index_mirrors"); got != 0 {
		t.Errorf("after DROP TABLE: %d mirror records, want 0 (the mirror stays with the history table)", got)
	}
}

// TestAlterDeparsesOnlyDependentViews: after ALTER TABLE the stored SQL of
// the views over that table follows its new names, and no other view is
// deparsed again (each ALTER deparsed every managed view: work per view
// present). Counted by view_definition's calls in the transaction.
func TestAlterDeparsesOnlyDependentViews(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	const others = 20
	stmts := []string{"CREATE TABLE t (a int)", "CREATE VIEW v AS SELECT a FROM t", "CREATE TABLE o (a int)"}
	for i := range others {
		stmts = append(stmts, fmt.Sprintf("CREATE VIEW o%d AS SELECT a FROM o", i))
	}
	inWrite(t, conn, stmts...)
	if _, err := conn.Exec(ctx, "SET track_functions = 'all'"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Counts not yet reported include earlier transactions': the
	// difference is the ALTERs'.
	const calls = "SELECT coalesce(pg_stat_get_xact_function_calls('mzproxy.view_definition'::regproc), 0)"
	before := queryInt(t, tx, calls)
	for _, sql := range []string{BeginWriteSQL, "ALTER TABLE t RENAME COLUMN a TO b", "ALTER TABLE t ADD COLUMN c int"} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	n := queryInt(t, tx, calls) - before
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Two calls per dependent view and statement (compare, then set).
	if n > 4 {
		t.Errorf("two ALTER TABLEs of t deparsed views %d times, want at most 4 (v's), with %d other views present", n, others)
	}
	var stored string
	if err := conn.QueryRow(ctx, "SELECT view_sql FROM mzproxy.catalog WHERE name = 'v'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stored, "b AS a") && !strings.Contains(stored, "t.b") {
		t.Errorf("v's stored SQL after the column rename: %q", stored)
	}
}
