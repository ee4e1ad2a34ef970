package storage

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// functionCalls runs stmts in one transaction on a new connection to cs,
// and returns the functions of the schema that ran, with their call counts
// ("name×n", sorted), from track_functions. (A session's counts of earlier
// transactions may still be pending, and shown as the current one's.)
func functionCalls(t *testing.T, cs string, stmts ...string) []string {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, cs)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, s := range append([]string{"SET LOCAL track_functions = 'all'"}, stmts...) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	calls, err := collectText(ctx, tx, `SELECT funcname || '×' || calls FROM pg_stat_xact_user_functions
		WHERE schemaname = $1 ORDER BY funcname`, Schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return calls
}

// writeCalls is functionCalls of stmts after OpenWriteFor(inc), as mzproxy
// runs an autocommit write.
func writeCalls(t *testing.T, cs string, inc int64, stmts ...string) []string {
	t.Helper()
	return functionCalls(t, cs, append([]string{slotSQL(t, connect(t, cs), inc)}, stmts...)...)
}

// callCount is n of functionCalls' "name×n" for function name, 0 if absent.
func callCount(calls []string, name string) int {
	for _, c := range calls {
		if f, n, ok := strings.Cut(c, "×"); ok && f == name {
			v, _ := strconv.Atoi(n)
			return v
		}
	}
	return 0
}

// An autocommit write to a table with a primary key runs one function of
// mzproxy's: the history trigger, which chooses T in a query of its own
// (version 27; stamp_ts before); none of the helpers that read or tag the
// slot with a query of their own (tag, write_slot, set_slot, choose_ts,
// ...). Version 8 ran ten functions, tag three times; until version 43
// the slot was a call of begin_write_occ, since version 44 it is a flat
// statement of the proxy's (OpenWriteFor), for an incarnation here.
func TestAutocommitWriteCalls(t *testing.T) {
	cs, conn := installedDB(t)
	inc := queryInt(t, conn, "SELECT r_id FROM "+Schema+".register(0, 60000, 'test', 0)")
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	fn := strings.TrimPrefix(hist, Schema+".")

	for _, tc := range []struct {
		stmt string
		want []string
	}{
		{"UPDATE k SET v = v + 1 WHERE id = 1", []string{fn + "_upd×1"}},
		{"INSERT INTO k VALUES (2, 0)", []string{fn + "_ins×1"}},
		{"DELETE FROM k WHERE id = 2", []string{fn + "_del×1"}},
	} {
		if got := writeCalls(t, cs, inc, tc.stmt); !slices.Equal(got, tc.want) {
			t.Errorf("%s: functions run %v, want %v", tc.stmt, got, tc.want)
		}
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE id = 1"); got != 2 {
		t.Errorf("history of id 1 has %d versions, want 2 (the insert's, closed, and the update's)", got)
	}
}

// The one-statement retraction keeps the rare cases of the version it
// replaced: a row written and changed again at the same T leaves no empty
// version behind; a statement whose CTEs delete a key and insert it again
// keeps exactly one current version per key (TestOvertakenStatementFails
// has the version written after T, TestHistoryRandom the mixes).
func TestRetractionSameTimestamp(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v text)", "INSERT INTO k VALUES (1, 'a'), (2, 'b')")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")

	tx := beginLazy(t, conn)
	for _, s := range []string{
		"UPDATE k SET v = 'a1' WHERE id = 1",
		"UPDATE k SET v = 'a2' WHERE id = 1",
		"INSERT INTO k VALUES (3, 'c')",
		"DELETE FROM k WHERE id = 3",
		// Same text deleted and inserted again, then a new value.
		"WITH d AS (DELETE FROM k WHERE id = 2 RETURNING *) INSERT INTO k SELECT id, v FROM d",
		"WITH d AS (DELETE FROM k WHERE id = 2 RETURNING *) INSERT INTO k SELECT id, 'b1' FROM d",
	} {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	ts := commitLazy(t, tx)
	got, err := collectText(ctx, conn, fmt.Sprintf(`SELECT id || ' ' || v || ' ' || (mz_from = %[1]d) || ' ' || (mz_to = %[1]d)
		FROM %[2]s ORDER BY id, mz_from, mz_to`, ts, hist))
	if err != nil {
		t.Fatal(err)
	}
	// id 1: the first version closed at T and the last written at T; id 2
	// likewise; id 3 came and went at T: no version.
	want := []string{"1 a false true", "1 a2 true false", "2 b false true", "2 b1 true false"}
	if !slices.Equal(got, want) {
		t.Fatalf("history after writes at one T:\n%v\nwant\n%v", got, want)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from >= mz_to"); n != 0 {
		t.Fatalf("%d empty versions left", n)
	}
}

func queryText(t *testing.T, q Querier, sql string, args ...any) string {
	t.Helper()
	var v string
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// A value that only looks like the pending slot (the request '0 - pending'
// since version 42) fails the write with 42501, also when begin_write_occ
// finds it already set, and writes no history: a tag of version 41's form
// copied from another transaction, a made-up one, none, or the request with
// more after it. (The request itself is no credential: a write with it
// takes the gate and is counted, TestPendingSlotByHostileRole.)
func TestForgedPendingSlot(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	before := queryInt(t, conn, "SELECT count(*) FROM "+hist)

	tx := beginLazy(t, conn)
	copied := "0 - " + queryText(t, tx, "SELECT "+Schema+".key_tag(k, '0 -') FROM "+Schema+".write_key")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, value := range []string{copied, "0 - " + strings.Repeat("0", 64), "0 - ", "0 - " + strings.TrimPrefix(copied, "0 - ") + " x", "0 - pending x"} {
		for _, stmts := range [][]string{
			{"UPDATE k SET v = v + 1"},
			{OpenWriteFor(-1), "UPDATE k SET v = v + 1"},
		} {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", WriteTSSetting, value); err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				if _, err = tx.Exec(ctx, s); err != nil {
					break
				}
			}
			wantCode(t, err, "42501", fmt.Sprintf("%v with %s = %q", stmts, WriteTSSetting, value))
			tx.Rollback(ctx)
		}
	}
	if after := queryInt(t, conn, "SELECT count(*) FROM "+hist); after != before {
		t.Fatalf("history went from %d to %d versions", before, after)
	}
}
