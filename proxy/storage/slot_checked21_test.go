package storage

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// slotTakers are what a role may run in its block before mzproxy takes
// the block's slot, each leaving a slot mzproxy never makes there: a
// pending one (the first two), a chosen T (the others: begin_write()
// chooses T at once, as current_write_ts does).
var slotTakers = []struct {
	name    string
	stmts   []string
	chosenT bool
}{
	{"begin_write_occ(NULL, NULL)", []string{"SELECT " + Schema + ".begin_write_occ(NULL, NULL)"}, false},
	{"the pending request by hand", []string{"SELECT set_config('" + WriteTSSetting + "', '0 - pending', true)"}, false},
	{"begin_write()", []string{"SELECT " + Schema + ".begin_write()"}, true},
	{"begin_write_occ then commit_write", []string{"SELECT " + Schema + ".begin_write_occ(NULL, NULL)", "SELECT " + Schema + ".commit_write(NULL)"}, true},
	{"begin_write_at(write_ts())", []string{"SELECT " + Schema + ".begin_write_at(" + Schema + ".write_ts())"}, true},
}

// readTakeWrite is readThenWrite with takers run after the read, before
// mzproxy's slot: it returns the first error of the slot, the write or
// COMMIT.
func readTakeWrite(t *testing.T, conn *pgx.Conn, takers []string, concurrent func()) error {
	t.Helper()
	ctx := context.Background()
	tx, writes := pinnedReader(t, conn)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below, or failed
	queryInt(t, tx, "SELECT sum(v) FROM a")
	for _, s := range takers {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	concurrent()
	if _, err := tx.Exec(ctx, OpenWriteAfterReadFor(-1, writes)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "UPDATE a SET v = v - 150 WHERE k = 1"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// TestTakenSlotKeepsReadCheck (version 47): a block that read at its pin
// and then writes is checked against what it read even when a function
// PUBLIC may call took a slot first. Before version 47 open_write_deferred
// returned at once for any slot taken, and the block committed over a
// concurrent write of the table it read (write skew). A pending slot is
// now checked as the block's deferred slot (40001 at COMMIT); a T chosen
// before the check is refused at the slot (25000). Without a concurrent
// write a pending slot's block commits; the slot fix_write fixed (a DDL,
// commit_write_tx) passes as before.
func TestTakenSlotKeepsReadCheck(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "INSERT INTO a VALUES (1, 100), (2, 100)")
	other := connect(t, cs)
	for _, tk := range slotTakers {
		err := readTakeWrite(t, conn, tk.stmts, func() { autocommitWrite(t, other, "UPDATE a SET v = v - 150 WHERE k = 2") })
		switch {
		case tk.chosenT:
			wantCode(t, err, "25000", tk.name+" after a read, a concurrent write of the table read")
		default:
			wantCode(t, err, "40001", tk.name+" after a read, a concurrent write of the table read")
		}
		inWrite(t, conn, "UPDATE a SET v = 100")
		err = readTakeWrite(t, conn, tk.stmts, func() {})
		switch {
		case tk.chosenT:
			wantCode(t, err, "25000", tk.name+" after a read, no concurrent write")
		case err != nil:
			t.Errorf("%s after a read, no concurrent write: %v", tk.name, err)
		}
		inWrite(t, conn, "UPDATE a SET v = 100")
	}
	// A T fix_write fixed after the read (as a block's DDL does) passes a
	// second slot call (the extended protocol's slot is prepared again).
	ctx := context.Background()
	tx, writes := pinnedReader(t, conn)
	queryInt(t, tx, "SELECT sum(v) FROM a")
	queryInt(t, tx, OpenWriteAfterReadFor(-1, writes))
	queryInt(t, tx, CommitWriteTxFor(-1))
	if _, err := tx.Exec(ctx, OpenWriteAfterReadFor(-1, writes)); err != nil {
		t.Fatalf("the slot again after fix_write fixed T: %v", err)
	}
	if _, err := tx.Exec(ctx, "UPDATE a SET v = v + 1 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("COMMIT after fix_write fixed T: %v", err)
	}
	// A block that did not read keeps what it had: a chosen T writes at it.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	chosen := queryInt(t, tx, "SELECT "+Schema+".begin_write_at("+Schema+".write_ts())")
	queryInt(t, tx, OpenWriteDeferredFor(-1))
	if _, err := tx.Exec(ctx, "UPDATE a SET v = v + 1 WHERE k = 2"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE k = 2 AND mz_from = $1", chosen); n != 1 {
		t.Errorf("a block that did not read, its T chosen by begin_write_at: %d versions at %d, want 1", n, chosen)
	}
}

// TestUpgradeToVersion47: from version 46, a pending slot taken in a
// block that read no longer skips the check.
func TestUpgradeToVersion47(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 46)
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "INSERT INTO a VALUES (1, 100), (2, 100)")
	other := connect(t, cs)
	concurrent := func() { autocommitWrite(t, other, "UPDATE a SET v = v - 150 WHERE k = 2") }
	if err := readTakeWrite(t, conn, slotTakers[0].stmts, concurrent); err != nil {
		t.Fatalf("version 46: %v, want the check skipped (the bug this version fixes)", err)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	wantCode(t, readTakeWrite(t, conn, slotTakers[0].stmts, concurrent), "40001", "after the upgrade")
}
