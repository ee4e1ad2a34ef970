package storage

import (
	"context"
	"testing"
)

// histBlocks counts the buffers a statement reads of a history table and
// its indexes, within one transaction (pg_stat_get_xact_blocks_fetched
// before and after: the pending counts are flushed only between
// transactions).
type histBlocks struct {
	sql string
}

func newHistBlocks(hist string) histBlocks {
	return histBlocks{sql: "SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(r)), 0)::bigint FROM (SELECT '" + hist +
		"'::regclass::oid UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = '" + hist + "'::regclass) x(r)"}
}

// The plans of the history triggers' close, _closed and the restamp are
// cached per session (PL/pgSQL keeps a generic plan after five custom
// ones). Made while the history table was small and analyzed, as pgbench
// -i or an early autovacuum leaves it, a plan that scans the table whole
// stays until the table is analyzed again; the cost of every write then
// grows with the history. Here a table's history is analyzed at two rows,
// the session's plans are made by autocommit writes and blocks, the
// history grows to 20,000 closed versions of the written key and 20,000
// current versions of other keys (autovacuum off: nothing re-plans), and
// the buffers a write reads of the history may not grow with it.
func TestHistoryPlansStayFlat(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (id int PRIMARY KEY, v int)", "INSERT INTO c VALUES (1, 0), (2, 0)")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'c'::regclass")
	for _, s := range []string{
		"ALTER TABLE " + hist + " SET (autovacuum_enabled = false)",
		"VACUUM ANALYZE c", "VACUUM ANALYZE " + hist,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	hb := newHistBlocks(hist)
	// measured runs stmts in one transaction and returns the history
	// buffers read by all but the first (the slot) and the last (which
	// ends it: commit_write or commit_write_tx, whose restamp is counted).
	measured := func(stmts ...string) int64 {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, stmts[0]); err != nil {
			t.Fatalf("%s: %v", stmts[0], err)
		}
		before := queryInt(t, tx, hb.sql)
		for _, s := range stmts[1:] {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		n := queryInt(t, tx, hb.sql) - before
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return n
	}
	shapes := []struct {
		name  string
		stmts []string
	}{
		{"autocommit UPDATE", []string{OpenWriteFor(-1), "UPDATE c SET v = v + 1 WHERE id = 1", CommitWriteFor(-1)}},
		{"autocommit DELETE and INSERT", []string{OpenWriteFor(-1), "DELETE FROM c WHERE id = 2", "INSERT INTO c VALUES (2, 0)", CommitWriteFor(-1)}},
		{"block, a key written twice", []string{OpenWriteDeferredFor(-1),
			"UPDATE c SET v = v + 1 WHERE id = 1", "UPDATE c SET v = v + 1 WHERE id = 2",
			"UPDATE c SET v = v + 1 WHERE id = 1", CommitWriteTxFor(-1)}},
		{"block, DELETE", []string{OpenWriteDeferredFor(-1),
			"DELETE FROM c WHERE id = 2", "INSERT INTO c VALUES (2, 0)", CommitWriteTxFor(-1)}},
	}
	small := make([]int64, len(shapes))
	for round := 0; round < 8; round++ {
		for i, s := range shapes {
			small[i] = measured(s.stmts...)
		}
	}
	inWrite(t, conn, "INSERT INTO c SELECT g, 0 FROM generate_series(3, 20002) g")
	if _, err := conn.Exec(ctx, "INSERT INTO "+hist+" SELECT g, g + 1, 0, 1, 0 FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	for i, s := range shapes {
		big := measured(s.stmts...)
		t.Logf("%s: %d history buffers at 2 keys, %d at 20,000 keys and 20,000 old versions", s.name, small[i], big)
		// An index probe's depth grows by a level or two; a scan reads
		// hundreds of pages.
		if big > 2*small[i]+12 {
			t.Errorf("%s read %d buffers of the history with 40,000 versions, %d with a few: a plan that scans it",
				s.name, big, small[i])
		}
	}
}
