package storage

import (
	"context"
	"strings"
	"testing"
)

// A block's first write of a table closes the key's current version by
// key alone (block_lean.sql): the table has no version at the placeholder
// yet. A stray second current version of the key (written past mzproxy's
// triggers) is then refused with XX000, as an autocommit write refuses it
// (TestFreshRetractionOutOfStep), where up to version 34 the whole-row
// text chose one and the block committed. A later write of the table in
// the block keeps the general path, which the text still decides.
func TestBlockFirstWriteByKey(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v text)", "INSERT INTO k VALUES (1, 'a'), (2, 'b')")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	if _, err := conn.Exec(ctx, "INSERT INTO "+hist+" SELECT mz_from, mz_to, mz_hash, id, 'stray' FROM "+hist+" WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	current := func() int64 {
		return queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_to = $1", Infinity)
	}
	before := current()
	block := func(stmts ...string) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, s := range append([]string{OpenWriteDeferredFor(-1)}, stmts...) {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	}
	for _, stmt := range []string{"UPDATE k SET v = 'c' WHERE id = 1", "DELETE FROM k WHERE id = 1"} {
		wantCode(t, block(stmt), "XX000", "a block's first "+stmt+" with two current versions of its key")
	}
	if after := current(); after != before {
		t.Fatalf("current versions went from %d to %d", before, after)
	}
	// The key's second write in the block: the general path closes the
	// version whose text is the row's.
	if err := block("UPDATE k SET v = 'c' WHERE id = 2", "UPDATE k SET v = 'd' WHERE id = 1"); err != nil {
		t.Fatalf("a block's second write of the table: %v", err)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_to = $1 AND v = 'stray'", Infinity); got != 1 {
		t.Fatalf("%d current stray versions after the general path, want the 1 it left", got)
	}
}

// Blocks whose statements write a table first, again, and again in one
// statement with writable CTEs (a key deleted and inserted anew, after the
// block wrote it, and before): the history at the final T is the table, and no
// placeholder is committed.
func TestBlockLeanHistory(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 20) g", "INSERT INTO n VALUES (1, 1), (1, 1)")
	blocks := [][]string{
		{"UPDATE a SET v = v + 1 WHERE id = 1", "UPDATE n SET v = 2 WHERE id = 1", "DELETE FROM a WHERE id = 2"},
		{"UPDATE a SET id = id + 100 WHERE id <= 5", "UPDATE a SET v = 7 WHERE id = 101"},
		{"INSERT INTO a VALUES (30, 0)", "WITH d AS (DELETE FROM a WHERE id = 30 RETURNING id) INSERT INTO a SELECT id, 9 FROM d"},
		{"WITH d AS (DELETE FROM a WHERE id = 6 RETURNING id) INSERT INTO a SELECT id, 6 FROM d", "UPDATE a SET v = v + 1 WHERE id IN (6, 7)"},
		{"DELETE FROM a WHERE id = 8", "INSERT INTO a VALUES (8, 8)", "UPDATE a SET v = v WHERE id = 8"},
	}
	for _, b := range blocks {
		blockCalls(t, cs, -1, b...)
		historyMatches(t, conn, "a", uint64(queryInt(t, conn, ReadTSSQL)), strings.Join(b, "; "))
		historyMatches(t, conn, "n", uint64(queryInt(t, conn, ReadTSSQL)), strings.Join(b, "; "))
	}
	for _, h := range []string{"a", "n"} {
		hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", h)
		if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from < 0 OR mz_to < 0"); n != 0 {
			t.Fatalf("%d placeholder versions of %s committed", n, h)
		}
	}
}

// The upgrade to 35 makes every table's trigger functions again; blocks
// then record their tables without stamp_ts, and commit as before.
func TestUpgradeToVersion35(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 34)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g")
	upd := "SELECT p.prosrc FROM pg_proc p, " + Schema + ".catalog k WHERE p.proname = 'h' || k.id || '_upd' AND k.oid = 'a'::regclass"
	if src := queryText(t, conn, upd); strings.Contains(src, "deferred_slots") {
		t.Fatalf("before the upgrade the trigger already records its table: %s", src)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if src := queryText(t, conn, upd); !strings.Contains(src, "UPDATE mzproxy.deferred_slots d SET rels") {
		t.Fatalf("after the upgrade the trigger is %s", src)
	}
	calls := blockCalls(t, cs, -1, "UPDATE a SET v = 1 WHERE id = 1", "UPDATE a SET v = 2 WHERE id = 2")
	if got := callCount(calls, "stamp_ts"); got != 0 {
		t.Fatalf("stamp_ts ran %d times after the upgrade: %v", got, calls)
	}
	historyMatches(t, conn, "a", uint64(queryInt(t, conn, ReadTSSQL)), "a block after the upgrade")
}
