package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// pendingFirst and blockElse are how a keyed table's _upd and _del begin
// since version 58 (hist_record.sql): the pending slot and the block's
// deferred slot as one IF and its ELSIF.
const (
	pendingFirst = "BEGIN\n    IF left(current_setting('mzproxy.write_ts', true), 4) = '0 - ' THEN\n"
	blockElse    = "\n    ELSIF left(current_setting('mzproxy.write_ts', true), 3) = '-1 ' THEN\n        UPDATE " + Schema + ".deferred_slots d"
)

// checkVersionsChained fails unless every key of hist (its column id) has
// versions that follow each other without a gap or an overlap, none empty
// or carrying a placeholder, and its current versions are table's rows.
func checkVersionsChained(t *testing.T, conn *pgx.Conn, table, hist string) {
	t.Helper()
	ctx := context.Background()
	if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from < 0 OR mz_to < 0 OR mz_from >= mz_to"); n != 0 {
		t.Fatalf("%s: %d placeholder or empty versions", table, n)
	}
	gaps := queryInt(t, conn, `SELECT count(*) FROM (SELECT mz_to, lead(mz_from) OVER (PARTITION BY id ORDER BY mz_from) AS next
		FROM `+hist+`) v WHERE v.next IS NOT NULL AND v.next <> v.mz_to`)
	if gaps != 0 {
		t.Fatalf("%s: %d versions not followed by the next at their end", table, gaps)
	}
	if err := checkHistoryEqualsTable(ctx, conn, table, "id, v", hist); err != nil {
		t.Fatal(err)
	}
}

// The upgrade from 57 makes every keyed table's UPDATE and DELETE
// trigger again with the pending slot and the block's deferred slot as
// one IF and its ELSIF and no _fresh branch around the record and
// stamp_ts (hist_record.sql's edits of gen_triggers); the keyless table's
// and the INSERT triggers keep theirs. Blocks, autocommit writes and a
// write outside mzproxy after it behave as before: history exact, MZ002
// outside. Fails on version 57 (_fresh := coalesce(...) first, the
// block's slot inside IF NOT _fresh).
func TestUpgradeToVersion58(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 57)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g", "INSERT INTO n VALUES (1, 1)")
	trigger := func(table, fn string) string {
		return queryText(t, conn, "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure((SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass) || $2)", table, fn)
	}
	if upd := trigger("a", "_upd()"); strings.Contains(upd, pendingFirst) || strings.Contains(upd, blockElse) {
		t.Fatalf("a's UPDATE trigger at version 57 has version 58's slot part:\n%s", upd)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	for _, fn := range []string{"_upd()", "_del()"} {
		src := trigger("a", fn)
		if !strings.Contains(src, pendingFirst) || strings.Count(src, blockElse) != 1 || strings.Contains(src, "_fresh := coalesce(") ||
			strings.Contains(src, "IF NOT _fresh THEN\n    IF left(") || strings.Count(src, "UPDATE "+Schema+".deferred_slots") != 1 {
			t.Errorf("a's %s after the upgrade:\n%s", fn, src)
		}
	}
	for _, c := range [][2]string{{"n", "_upd()"}, {"n", "_del()"}, {"a", "_ins()"}, {"n", "_ins()"}} {
		if src := trigger(c[0], c[1]); strings.Contains(src, pendingFirst) || strings.Contains(src, blockElse) {
			t.Errorf("%s's %s after the upgrade:\n%s", c[0], c[1], src)
		}
	}
	ha := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")
	blockCalls(t, cs, -1, "UPDATE a SET v = 1 WHERE id <= 3", "UPDATE a SET v = 2 WHERE id = 2", "UPDATE n SET v = 2",
		"UPDATE a SET v = 3 WHERE id = 4", "DELETE FROM a WHERE id = 5", "INSERT INTO a VALUES (5, 5)", "DELETE FROM a WHERE id = 6")
	inWrite(t, conn, "UPDATE a SET v = 4 WHERE id IN (1, 7)")
	inWrite(t, conn, "DELETE FROM a WHERE id = 8")
	blockCalls(t, cs, -1, "DELETE FROM a WHERE id = 9", "UPDATE a SET v = v + 1", "UPDATE a SET v = v + 1 WHERE id = 1")
	checkVersionsChained(t, conn, "a", ha)
	if got := queryInt(t, conn, "SELECT count(*) FROM "+ha+" WHERE id = 1"); got != 4 {
		t.Errorf("%d versions of a's row 1, want 4 (v = 0, 1, 4, 6: the last block's 5 and 6 in one version)", got)
	}
	_, err := conn.Exec(ctx, "UPDATE a SET v = 0 WHERE id = 1")
	wantCode(t, err, "MZ002", "an UPDATE outside mzproxy after the upgrade")
	_, err = conn.Exec(ctx, "DELETE FROM a WHERE id = 1")
	wantCode(t, err, "MZ002", "a DELETE outside mzproxy after the upgrade")
}

// A block's record of the tables it wrote (its row of deferred_slots) is
// transactional: a savepoint rolled back takes a table it recorded out
// with its history rows, and the table's next write records it again and
// takes the fresh path (its version closed once, at the block's
// placeholder); a table recorded before the savepoint stays recorded. The
// COMMIT restamps what is left. (Session 25 measured cheaper records; any
// that replaces this one must keep this test.)
func TestBlockRecordSavepoint(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 3) g", "INSERT INTO b VALUES (1, 0)")
	ha := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")
	hb := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'b'::regclass")
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		queryInt(t, tx, OpenWriteDeferredFor(-1))
		recorded := func(when string, want ...string) {
			t.Helper()
			got, err := collectText(ctx, tx, `SELECT r::regclass::text FROM `+Schema+`.deferred_slots d, unnest(d.rels) r
				WHERE d.xid = pg_current_xact_id()::text::bigint ORDER BY 1`)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: the block's record %v, want %v", when, got, want)
			}
		}
		placeholders := func(hist string) int64 {
			return queryInt(t, tx, "SELECT count(*) FROM "+hist+" WHERE mz_from < 0 OR mz_to < 0")
		}
		for _, s := range []string{"UPDATE b SET v = 1", "SAVEPOINT s", "UPDATE a SET v = 1 WHERE id = 1", "UPDATE b SET v = 2"} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		recorded("after the writes in the savepoint", "a", "b")
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			return err
		}
		recorded("after ROLLBACK TO SAVEPOINT", "b")
		if n := placeholders(ha); n != 0 {
			t.Fatalf("%d of a's history rows with the block's placeholder after ROLLBACK TO SAVEPOINT", n)
		}
		if _, err := tx.Exec(ctx, "UPDATE a SET v = 2 WHERE id = 2"); err != nil {
			return err
		}
		recorded("after a's write again", "a", "b")
		// The fresh path: the old version closed at the placeholder, the
		// new one written at it; nothing else of a's touched.
		if n := placeholders(ha); n != 2 {
			t.Fatalf("%d of a's history rows with the block's placeholder after one row's UPDATE, want 2", n)
		}
		if n := placeholders(hb); n != 2 {
			t.Fatalf("%d of b's history rows with the block's placeholder, want 2 (its write before the savepoint)", n)
		}
		_, err := tx.Exec(ctx, CommitWriteTxFor(-1))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checkVersionsChained(t, conn, "a", ha)
	checkVersionsChained(t, conn, "b", hb)
	if got := queryInt(t, conn, "SELECT count(*) FROM "+ha+" WHERE v = 1"); got != 0 {
		t.Errorf("%d versions of the write rolled back to the savepoint", got)
	}
}
