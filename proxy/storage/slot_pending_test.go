package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// pendingSlot is the pending write slot's value since version 42: a
// request, which anyone may set, not a credential.
const pendingSlot = "0 - pending"

// TestPendingSlotByHostileRole: an ordinary role, directly in PostgreSQL,
// sets the pending request itself (for its transaction, and for its
// session) and writes. What a slot guarantees is made true at the write,
// as if it had called begin_write_occ(NULL, 0): its transaction holds the
// gate in ROW SHARE mode from the write to its commit (a pin waits for
// it), the write is counted and the table's marker carries that count, and
// T is above every timestamp handed out before (history below it is
// unchanged). A chosen T it sets, forged or copied from another
// transaction, fails with 42501; the functions that choose T and the
// sequences they move are not the role's to call or set.
func TestPendingSlotByHostileRole(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	db := conn.Config().Database
	loginRole(t, conn, "mzslothostile")
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON k TO mzslothostile")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	hostile := connect(t, server.ConnString("mzslothostile", db))
	before := inWrite(t, conn, "UPDATE k SET v = 1")
	pinned := queryInt(t, conn, "SELECT "+Schema+".pin()")
	asOfBefore := queryText(t, conn, "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM "+hist+" WHERE mz_from <= $1 AND mz_to > $1", before)

	counted := func() int64 { return queryInt(t, conn, "SELECT last_value FROM "+Schema+".writes") }
	gateHeldBy := func(pid uint32) bool {
		return queryInt(t, conn, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND granted
			AND relation = '`+Schema+`.gate'::regclass AND mode = 'RowShareLock'`, pid) == 1
	}
	for _, scope := range []string{"true", "false"} {
		for _, stmt := range []string{"UPDATE k SET v = v + 1 WHERE id = 1", "INSERT INTO k VALUES (2, 0)", "DELETE FROM k WHERE id = 2"} {
			n := counted()
			tx, err := hostile.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, "+scope+")", WriteTSSetting, pendingSlot); err != nil {
				t.Fatal(err)
			}
			if gateHeldBy(hostile.PgConn().PID()) {
				t.Fatalf("%s: the gate is held before the write", stmt)
			}
			if _, err := tx.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s with the pending request set by the role: %v", stmt, err)
			}
			if !gateHeldBy(hostile.PgConn().PID()) {
				t.Errorf("%s: the role's transaction does not hold the gate after its write", stmt)
			}
			if got := counted(); got != n+1 {
				t.Errorf("%s: writes counted %d -> %d, want one more", stmt, n, got)
			}
			if m := queryInt(t, conn, "SELECT last_value FROM "+Schema+".w"+queryText(t, conn, "SELECT 'k'::regclass::oid::text")); m != n+1 {
				t.Errorf("%s: marker %d, want the write's count %d", stmt, m, n+1)
			}
			ts := queryText(t, tx, "SELECT current_setting($1)", WriteTSSetting)
			var chosen int64
			if _, err := fmt.Sscan(ts, &chosen); err != nil || chosen <= pinned {
				t.Errorf("%s: slot %q, want a T above the pin %d", stmt, ts, pinned)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			pinned = queryInt(t, conn, "SELECT "+Schema+".pin()")
			if pinned < chosen {
				t.Errorf("%s: pin %d after the commit at %d", stmt, pinned, chosen)
			}
			if got := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from = $1", chosen); got == 0 && !strings.HasPrefix(stmt, "DELETE") {
				t.Errorf("%s: no version at its T %d", stmt, chosen)
			}
			if _, err := hostile.Exec(ctx, "RESET "+WriteTSSetting); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := queryText(t, conn, "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM "+hist+" WHERE mz_from <= $1 AND mz_to > $1", before); got != asOfBefore {
		t.Errorf("history at %d changed: %q, was %q", before, got, asOfBefore)
	}

	// A T the role chose, or one copied from another of its transactions.
	var copied string
	tx, err := hostile.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", WriteTSSetting, pendingSlot); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE k SET v = 5"); err != nil {
		t.Fatal(err)
	}
	copied = queryText(t, tx, "SELECT current_setting($1)", WriteTSSetting)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tag := copied[strings.LastIndex(copied, " ")+1:]
	for _, value := range []string{copied, fmt.Sprintf("%d - %s", before, tag), fmt.Sprintf("%d - %064d", before, 0),
		"0 - " + tag, "0 - pending x", "0 - Pending", fmt.Sprint(before)} {
		for _, stmt := range []string{"UPDATE k SET v = 7", "INSERT INTO k VALUES (9, 9)", "DELETE FROM k"} {
			tx, err := hostile.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", WriteTSSetting, value); err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(ctx, stmt)
			wantCode(t, err, "42501", fmt.Sprintf("%s with %s = %q", stmt, WriteTSSetting, value))
			tx.Rollback(ctx) //nolint:errcheck // failed
		}
	}
	for _, call := range []string{"SELECT " + Schema + ".choose_ts()", "SELECT " + Schema + ".ddl_ts()",
		"SELECT " + Schema + ".stamp_ts('k'::regclass)", "SELECT " + Schema + ".current_write_ts()",
		"SELECT setval('" + Schema + ".writes', 1)", "SELECT nextval('" + Schema + ".writes')",
		"SELECT setval('" + Schema + ".pinned', 1)", "SELECT k FROM " + Schema + ".write_key",
		"UPDATE " + Schema + ".write_key SET k = 'x'"} {
		_, err := hostile.Exec(ctx, call)
		wantCode(t, err, "42501", call+" by an ordinary role")
	}
	if got := queryText(t, conn, "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM "+hist+" WHERE mz_from <= $1 AND mz_to > $1", before); got != asOfBefore {
		t.Errorf("history at %d changed: %q, was %q", before, got, asOfBefore)
	}
	historyMatches(t, conn, "k", inWrite(t, conn, "UPDATE k SET v = 8"), "writes after the role's")
}

// TestPendingSlotCountedAtT: since version 42 the slot counts the write
// when T is chosen, not when it is taken: a slot taken and left without a
// write counts nothing (a pin after it hands out no new timestamp for
// it), and a write counts once, however many of its statements write.
func TestPendingSlotCountedAtT(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)")
	counted := func() int64 { return queryInt(t, conn, "SELECT last_value FROM "+Schema+".writes") }
	n := counted()
	tx := beginLazy(t, conn)
	if got := queryText(t, tx, "SELECT current_setting($1)", WriteTSSetting); got != pendingSlot {
		t.Fatalf("begin_write_occ set %q, want %q", got, pendingSlot)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counted(); got != n {
		t.Errorf("a slot without a write counted %d -> %d", n, got)
	}
	tx = beginLazy(t, conn)
	for _, s := range []string{"UPDATE k SET v = 1", "INSERT INTO k VALUES (2, 2)", "UPDATE k SET v = 3 WHERE id = 2"} {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	ts := commitLazy(t, tx)
	if got := counted(); got != n+1 {
		t.Errorf("one write transaction counted %d -> %d, want one", n, got)
	}
	historyMatches(t, conn, "k", uint64(ts), "three statements at one T")
}

// TestUpgradeToVersion42: the trigger functions of a table made at
// version 41 are made again (their own query for T takes the request, not
// a tag), its autocommit writes run begin_write_occ and the trigger only,
// a slot taken with the old tag in a transaction that spans the upgrade
// is still honoured (write_slot checks it, choose_ts counts it), and
// history stays exact.
func TestUpgradeToVersion42(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 41)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a'), (2, 'b')",
		"CREATE TABLE old_nk (v text)", "INSERT INTO old_nk VALUES ('a')")
	// A slot of version 41's form, tagged, as a transaction that began
	// before the upgrade holds it.
	tx := beginLazy(t, conn)
	oldSlot := queryText(t, tx, "SELECT current_setting($1)", WriteTSSetting)
	tx.Rollback(ctx) //nolint:errcheck // only its form was wanted
	if oldSlot == pendingSlot || !strings.HasPrefix(oldSlot, "0 - ") {
		t.Fatalf("version 41's pending slot is %q", oldSlot)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	for _, table := range []string{"old", "old_nk"} {
		src := queryText(t, conn, "SELECT prosrc FROM pg_proc WHERE proname = (SELECT substr(history, length($2) + 2) FROM "+Schema+".catalog WHERE oid = $1::regclass) || '_upd'", table, Schema)
		if !strings.Contains(src, "'"+pendingSlot+"'") || strings.Contains(src, "key_tag(k.k, '0 -')") {
			t.Errorf("%s's UPDATE trigger after the upgrade does not take the request:\n%s", table, src)
		}
	}
	for _, stmt := range []string{"UPDATE old SET v = 'a1' WHERE k = 1", "INSERT INTO old VALUES (3, 'c')", "DELETE FROM old WHERE k = 2", "UPDATE old_nk SET v = 'b'"} {
		got := writeCalls(t, cs, -1, stmt)
		if callCount(got, "stamp_ts") != 0 || len(got) != 1 {
			t.Errorf("%s after the upgrade ran %v, want the trigger only (the slot is a flat statement since version 44)", stmt, got)
		}
	}
	// The old form, taken in the same transaction (its tag is bound to
	// the xid), set again by hand as a transaction of before the upgrade
	// would still hold it.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldForm := "0 - " + queryText(t, tx, "SELECT "+Schema+".key_tag(k, '0 -') FROM "+Schema+".write_key")
	if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", WriteTSSetting, oldForm); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE old SET v = 'a2' WHERE k = 1"); err != nil {
		t.Fatalf("a write with version 41's slot after the upgrade: %v", err)
	}
	ts := commitLazy(t, tx)
	historyMatches(t, conn, "old", uint64(ts), "a write with version 41's slot")
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 'a3'", "INSERT INTO old VALUES (4, 'd')"), "writes after the upgrade")
}
