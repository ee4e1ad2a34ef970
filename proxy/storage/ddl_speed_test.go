package storage

import (
	"context"
	"testing"
)

// TestDDLKeepsHistoryTriggers: DDL that changes nothing the history
// triggers spell out (a non-key index, a view) leaves the generated trigger
// functions and the triggers as they were, where each made them again
// (four functions, four triggers: most of a managed CREATE INDEX's cost);
// DDL that does change them (a column) still makes them again. And each
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
		{"ALTER TABLE ddl_probe ADD COLUMN c int", false, 2},
		{"ALTER TABLE ddl_probe ADD CONSTRAINT ddl_probe_uc UNIQUE (c)", true, 3},
		{"ALTER TABLE ddl_probe DROP COLUMN c", false, 2},
		{"CREATE VIEW ddl_probe_v AS SELECT a, b FROM ddl_probe", true, 2},
		{"DROP VIEW ddl_probe_v", true, 2},
		{"DROP INDEX ddl_probe_b", true, 2},
		{"DROP INDEX ddl_probe_ub", true, 1},
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
