package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// blockCalls is functionCalls of stmts in a transaction block with a
// deferred slot for incarnation inc, as mzproxy runs a client's block, the
// slot fixed as COMMIT would fix it (CommitWriteTxFor).
func blockCalls(t *testing.T, cs string, inc int64, stmts ...string) []string {
	t.Helper()
	block := append([]string{OpenWriteDeferredFor(inc)}, stmts...)
	return functionCalls(t, cs, append(block, CommitWriteTxFor(inc))...)
}

// A block's history writes cost no tag (the written tables are kept in
// its row of deferred_slots), and its COMMIT restamps each table once
// through the table's own functions, not dynamic statements. Version 9
// tagged three times per history write (write_slot, touched, the list's
// new tag). Since version 35 (block_lean.sql) the triggers record their
// table in the row themselves (no stamp_ts call), and neither the slot nor
// COMMIT calls check_incarnation or mark_written.
func TestBlockWriteCalls(t *testing.T) {
	cs, conn := installedDB(t)
	inc := queryInt(t, conn, "SELECT r_id FROM "+Schema+".register(0, 60000, 'test', 0)")
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int, v int)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g")
	ha := strings.TrimPrefix(queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass"), Schema+".")
	hb := strings.TrimPrefix(queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'b'::regclass"), Schema+".")

	one := blockCalls(t, cs, inc, "UPDATE a SET v = v + 1 WHERE id = 1")
	many := blockCalls(t, cs, inc,
		"UPDATE a SET v = v + 1 WHERE id = 1", "UPDATE a SET v = v + 1 WHERE id = 2",
		"INSERT INTO b VALUES (1, 1)", "UPDATE a SET v = v + 1 WHERE id = 3", "INSERT INTO b VALUES (2, 2)")
	for _, fn := range []string{"stamp_ts", "check_incarnation", "mark_written"} {
		if got := callCount(many, fn); got != 0 {
			t.Errorf("%s ran %d times in a block of 5 history writes: %v", fn, got, many)
		}
	}
	if callCount(many, "tag") != callCount(one, "tag") {
		t.Errorf("tags grow with a block's writes: one write %v, five %v", one, many)
	}
	if callCount(many, "touched") != 0 {
		t.Errorf("the tagged list of written tables is still kept: %v", many)
	}
	// Since version 49 (restamp_fold.sql) one _fix per table, which
	// returns what _closed did.
	for _, fn := range []string{ha + "_fix", hb + "_fix"} {
		if got := callCount(many, fn); got != 1 {
			t.Errorf("%s ran %d times, want once: %v", fn, got, many)
		}
	}
	for _, fn := range []string{ha + "_closed", ha + "_restamp", hb + "_closed", hb + "_restamp", "restamp_raise"} {
		if got := callCount(many, fn); got != 0 {
			t.Errorf("%s ran %d times, want none: %v", fn, got, many)
		}
	}
	pending := queryInt(t, conn, fmt.Sprintf("SELECT (SELECT count(*) FROM %[1]s.%[2]s WHERE mz_from < 0 OR mz_to < 0) + (SELECT count(*) FROM %[1]s.%[3]s WHERE mz_from < 0 OR mz_to < 0)", Schema, ha, hb))
	if pending != 0 {
		t.Fatalf("%d placeholder versions committed", pending)
	}
}

// The row of deferred_slots is the authority on what a block wrote: a
// savepoint rolled back takes its tables away with its placeholders; a
// table whose restamp functions are missing (made before gen_triggers
// made them) is restamped by dynamic statements; the settings the client
// can reach decide nothing. A slot taken away or replaced fails COMMIT with
// 42501 (TestDeferredSlot takes both settings away), and a placeholder
// value without the row is refused at the write.
func TestBlockWrittenTables(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)")
	ha := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")
	hb := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'b'::regclass")
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP FUNCTION %[1]s_fix(bigint, bigint)", hb)); err != nil {
		t.Fatal(err)
	}
	placeholders := func() int64 {
		return queryInt(t, conn, fmt.Sprintf(`SELECT (SELECT count(*) FROM %s WHERE mz_from < 0 OR mz_to < 0)
			+ (SELECT count(*) FROM %s WHERE mz_from < 0 OR mz_to < 0)`, ha, hb))
	}
	block := func(stmts ...string) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		queryInt(t, tx, OpenWriteDeferredFor(-1))
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	}

	if err := block("SAVEPOINT s", "UPDATE a SET v = 1", "ROLLBACK TO SAVEPOINT s", "UPDATE b SET v = 1",
		"SELECT set_config('mzproxy.touched', '', true)"); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM "+hb+" WHERE v = 1 AND mz_to = 9223372036854775807 AND mz_from > 0"); got != 1 {
		t.Fatalf("b's new version restamped %d times, want 1", got)
	}
	if n := placeholders(); n != 0 {
		t.Fatalf("%d placeholder versions committed", n)
	}

	err := block("UPDATE a SET v = 2", "SELECT set_config('mzproxy.write_ts', '-1 - '||repeat('0', 64), true)", "UPDATE a SET v = 3")
	wantCode(t, err, "42501", "COMMIT with a replaced deferred slot")
	// Taken away, the slot is still the transaction's row (version 23,
	// slot_state.sql): the block commits, its history restamped.
	if err := block("UPDATE a SET v = 2", "SELECT set_config('mzproxy.write_ts', '', true)"); err != nil {
		t.Fatalf("COMMIT with the deferred slot's setting taken away: %v", err)
	}
	if n := placeholders(); n != 0 {
		t.Fatalf("%d placeholder versions committed", n)
	}

	// A deferred slot's value from another transaction, without its row.
	var copied string
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		queryInt(t, tx, OpenWriteDeferredFor(-1))
		copied = queryText(t, tx, "SELECT current_setting($1)", WriteTSSetting)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", WriteTSSetting, copied); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE a SET v = 4")
		return err
	})
	wantCode(t, err, "42501", fmt.Sprintf("a write with %s = %q copied from another transaction", WriteTSSetting, copied))
	if got := queryInt(t, conn, "SELECT v FROM a"); got != 2 {
		t.Fatalf("a.v = %d after writes rolled back or refused, want 2 (the block whose setting was taken away)", got)
	}
}

// A block's mix of writes over a table with a key and one without, some
// rows written more than once, is restamped to one T: history at T is the
// tables, history just before T what they were, and no placeholder or
// empty version is left.
func TestBlockHistoryMix(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v text)", "CREATE TABLE n (id int, v text)",
		"INSERT INTO k VALUES (1, 'a'), (2, 'b'), (3, 'c')", "INSERT INTO n VALUES (1, 'x'), (1, 'x'), (2, 'y')")
	hk := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	hn := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'n'::regclass")
	rows := func(q Querier, sql string, args ...any) []string {
		got, err := collectText(ctx, q, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	const tableRows = "SELECT id || v FROM %s ORDER BY 1"
	beforeK, beforeN := rows(conn, fmt.Sprintf(tableRows, "k")), rows(conn, fmt.Sprintf(tableRows, "n"))

	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		queryInt(t, tx, OpenWriteDeferredFor(-1))
		for _, s := range []string{
			"UPDATE k SET v = 'a1' WHERE id = 1", "UPDATE k SET v = 'a2' WHERE id = 1",
			"INSERT INTO k VALUES (4, 'd')", "DELETE FROM k WHERE id = 4", "DELETE FROM k WHERE id = 2",
			"INSERT INTO k VALUES (5, 'e')", "UPDATE k SET v = v || '!' WHERE id >= 3",
			"DELETE FROM n WHERE id = 1", "INSERT INTO n VALUES (1, 'x'), (3, 'z')", "UPDATE n SET v = 'y1' WHERE id = 2",
		} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := queryInt(t, conn, fmt.Sprintf("SELECT greatest((SELECT max(mz_from) FROM %s), (SELECT max(mz_from) FROM %s))", hk, hn))
	for _, c := range []struct {
		table, hist string
		before      []string
	}{{"k", hk, beforeK}, {"n", hn, beforeN}} {
		if n := queryInt(t, conn, "SELECT count(*) FROM "+c.hist+" WHERE mz_from < 0 OR mz_to < 0 OR mz_from >= mz_to"); n != 0 {
			t.Fatalf("%s: %d placeholder or empty versions", c.table, n)
		}
		if got, want := rows(conn, "SELECT id || v FROM "+c.hist+" WHERE mz_from <= $1 AND mz_to > $1 ORDER BY 1", ts), rows(conn, fmt.Sprintf(tableRows, c.table)); !slices.Equal(got, want) {
			t.Errorf("%s at the block's T: history %v, table %v", c.table, got, want)
		}
		if got := rows(conn, "SELECT id || v FROM "+c.hist+" WHERE mz_from <= $1 AND mz_to > $1 ORDER BY 1", ts-1); !slices.Equal(got, c.before) {
			t.Errorf("%s just before the block's T: history %v, want %v", c.table, got, c.before)
		}
	}
}
