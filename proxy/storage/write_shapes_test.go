package storage

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Every shape of write through the history trigger (one-row, multi-row,
// key changes, zero rows, DELETE, ON CONFLICT, a writable CTE; keys of one
// and two columns and none), autocommit and in a block, each once with a
// T of its own and once sharing T with the write before it (the close
// then finds the key's current version written at T by another
// transaction: the repair after the two counts differ). After each, the
// history at its T is the table, no version is empty, and no two versions
// of a key overlap. Written for session 18's one-row close (branch trig,
// not merged) and kept as the exactness guard of every write shape.
func TestWriteShapesExact(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v text)",
		"CREATE TABLE ck (a int, b text, v int, PRIMARY KEY (a, b))",
		"CREATE TABLE nk (a int, b text)",
		"INSERT INTO k SELECT g, 'v' || g FROM generate_series(1, 8) g",
		"INSERT INTO ck SELECT g % 3, 'b' || g, g FROM generate_series(1, 6) g",
		"INSERT INTO nk VALUES (1, 'x'), (1, 'x'), (2, NULL)")
	writes := []string{
		"UPDATE k SET v = v || '+' WHERE k = 1",
		"UPDATE k SET v = 'same' WHERE k = 1",
		"UPDATE k SET k = 101 WHERE k = 2",
		"UPDATE k SET k = 2 WHERE k = 101",
		"UPDATE k SET v = v || '*' WHERE k BETWEEN 3 AND 5",
		"UPDATE k SET k = k + 10 WHERE k IN (3, 4)",
		"UPDATE k SET k = k - 10 WHERE k IN (13, 14)",
		"UPDATE k SET v = 'none' WHERE k = 999",
		"UPDATE k SET v = v WHERE k = 6",
		"DELETE FROM k WHERE k = 7",
		"INSERT INTO k VALUES (7, 'back')",
		"DELETE FROM k WHERE k IN (7, 8)",
		"INSERT INTO k VALUES (8, 'new'), (1, 'conflict') ON CONFLICT (k) DO UPDATE SET v = excluded.v",
		"INSERT INTO k VALUES (1, 'only') ON CONFLICT (k) DO UPDATE SET v = excluded.v",
		"INSERT INTO k VALUES (1, 'nothing') ON CONFLICT (k) DO NOTHING",
		"WITH d AS (DELETE FROM k WHERE k = 6 RETURNING k) INSERT INTO k SELECT k, 'again' FROM d",
		"UPDATE ck SET v = v + 1 WHERE a = 1 AND b = 'b1'",
		"UPDATE ck SET b = b || 'x' WHERE a = 2 AND b = 'b2'",
		"UPDATE ck SET v = v * 2 WHERE a = 0",
		"UPDATE nk SET b = 'y' WHERE a = 1",
		"UPDATE nk SET b = 'z' WHERE a = 2",
	}
	// check: the history at ts is each table. A block sharing T with the
	// autocommit write before it leaves the version it closed empty
	// (mz_from = mz_to = T: its restamp deletes none);
	// invisible at every time, so only the rows are compared then.
	check := func(ts uint64, what string, emptyOK bool) {
		t.Helper()
		for _, table := range []string{"k", "ck", "nk"} {
			if !emptyOK {
				historyMatches(t, conn, table, ts, what)
				continue
			}
			hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", table)
			cols := map[string]string{"k": "k, v", "ck": "a, b, v", "nk": "a, b"}[table]
			got := snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s WHERE mz_from <= $1 AND mz_to > $1", cols, hist), int64(ts))
			if want := snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s", cols, table)); !slices.Equal(got, want) {
				t.Errorf("%s: history of %s at %d is %v, the table %v", what, table, ts, got, want)
			}
		}
		if n := overlappingVersions(t, conn, "k"); n != 0 {
			t.Fatalf("%s: %d pairs of versions of one key overlap", what, n)
		}
	}
	for _, shared := range []bool{false, true} {
		if shared {
			pinAhead(t, conn)
		}
		for _, w := range writes {
			if !shared {
				movePin(t, conn, 1)
			}
			before := uint64(queryInt(t, conn, "SELECT pg_sequence_last_value('"+Schema+".pinned')"))
			ts := lazyWrite(t, conn, w)
			if shared && ts != before+1 {
				t.Fatalf("%s: T %d, want %d (P + 1, shared)", w, ts, before+1)
			}
			check(ts, fmt.Sprintf("autocommit %s (shared T: %v)", w, shared), false)
		}
		for _, b := range [][]string{
			{"UPDATE k SET v = 'b1' WHERE k = 1"},
			{"UPDATE k SET v = 'b2' WHERE k = 1", "UPDATE k SET v = 'b3' WHERE k = 1"},
			{"UPDATE k SET k = 50 WHERE k = 5", "UPDATE ck SET v = 0 WHERE a = 1"},
			{"UPDATE k SET k = 5 WHERE k = 50", "DELETE FROM k WHERE k = 5", "INSERT INTO k VALUES (5, 'five')"},
			{"UPDATE k SET v = 'multi' WHERE k < 4"},
			{"UPDATE k SET v = 'zero' WHERE k < 0"},
		} {
			blockCalls(t, cs, -1, b...)
			// A pin with P ten minutes ahead would wait for the clock:
			// a block sharing T commits at P + 1.
			ts := "SELECT pg_sequence_last_value('" + Schema + ".pinned') + 1"
			if !shared {
				ts = ReadTSSQL
			}
			check(uint64(queryInt(t, conn, ts)), fmt.Sprintf("block %s (shared T: %v)", strings.Join(b, "; "), shared), shared)
		}
	}
}
