package storage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pinnedReader begins a REPEATABLE READ transaction on conn pinned as
// mzproxy pins a read-only transaction (PinSnapshotSQL), and returns it
// with the writes counted at its pin.
func pinnedReader(t *testing.T, conn *pgx.Conn) (pgx.Tx, int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	var writes int64
	for _, q := range PinSnapshotSQL {
		if q == PinSQL {
			queryInt(t, tx, q)
			writes = queryInt(t, tx, "SELECT "+Schema+".pinned_writes()")
			continue
		}
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return tx, writes
}

// autocommitWrite runs stmt as mzproxy runs a client's autocommit write.
func autocommitWrite(t *testing.T, conn *pgx.Conn, stmt string) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, OpenWriteFor(-1)+"; "+stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// readThenWrite reads table "read" in a pinned transaction, lets
// concurrent run, then writes table "write" with the slot checked against
// the pin, and returns COMMIT's error.
func readThenWrite(t *testing.T, conn *pgx.Conn, read, write string, concurrent func()) error {
	t.Helper()
	ctx := context.Background()
	tx, writes := pinnedReader(t, conn)
	queryInt(t, tx, "SELECT count(*) FROM "+read)
	concurrent()
	queryInt(t, tx, OpenWriteAfterReadFor(-1, writes))
	if _, err := tx.Exec(ctx, "UPDATE "+write+" SET v = v + 1 WHERE k = 1"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func isSerializationFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40001"
}

// A transaction that read at its timestamp and then writes is checked
// against the tables it read: writes to other tables since its pin do not
// fail it (version 15 failed it on any write counted since), a committed
// write to a table it read does, and so does one in progress that commits
// (its COMMIT waits for it); one that rolls back does not.
func TestReadThenWriteChecksTablesRead(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"CREATE VIEW va AS SELECT * FROM a",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)")
	other := connect(t, cs)
	ctx := context.Background()

	if err := readThenWrite(t, conn, "a", "a", func() { autocommitWrite(t, other, "UPDATE b SET v = v + 1") }); err != nil {
		t.Fatalf("read a, wrote a, another session wrote b: %v", err)
	}
	// A block (deferred slot) writing b meanwhile: the same.
	if err := readThenWrite(t, conn, "a", "a", func() {
		inBlock(t, other, "UPDATE b SET v = v + 1")
	}); err != nil {
		t.Fatalf("read a, wrote a, a block wrote b: %v", err)
	}
	if err := readThenWrite(t, conn, "a", "b", func() { autocommitWrite(t, other, "INSERT INTO a VALUES (2, 0)") }); !isSerializationFailure(err) {
		t.Fatalf("read a, wrote b, another session inserted into a: %v, want 40001", err)
	}
	if err := readThenWrite(t, conn, "va", "b", func() { inBlock(t, other, "DELETE FROM a WHERE k = 2") }); !isSerializationFailure(err) {
		t.Fatalf("read a through a view, wrote b, a block deleted from a: %v, want 40001", err)
	} else if !strings.Contains(err.(*pgconn.PgError).Detail, "a changed") {
		t.Errorf("the failure does not name the table read: %v", err.(*pgconn.PgError).Detail)
	}
	// Read through the history table (a timestamped read) counts as a
	// read of the table.
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")
	if err := readThenWrite(t, conn, hist, "b", func() { autocommitWrite(t, other, "UPDATE a SET v = 7") }); !isSerializationFailure(err) {
		t.Fatalf("read a's history, wrote b, another session wrote a: %v, want 40001", err)
	}

	// A write to a in progress at the COMMIT, its T chosen, fails it too
	// (it commits below this T), at once; a block writing a that has not
	// reached its COMMIT does not (it will choose its T after this one).
	pending, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Rollback(ctx)
	start := time.Now()
	err = readThenWrite(t, conn, "a", "b", func() {
		queryInt(t, pending, OpenWriteFor(-1))
		if _, err := pending.Exec(ctx, "UPDATE a SET v = v + 1"); err != nil {
			t.Fatal(err)
		}
	})
	if !isSerializationFailure(err) {
		t.Fatalf("read a, wrote b, a write of a with its T chosen still open: %v, want 40001", err)
	}
	t.Logf("failed in %v", time.Since(start))
	if err := pending.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	block, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer block.Rollback(ctx)
	err = readThenWrite(t, conn, "a", "b", func() {
		queryInt(t, block, OpenWriteDeferredFor(-1))
		if _, err := block.Exec(ctx, "UPDATE a SET v = v + 1"); err != nil {
			t.Fatal(err)
		}
	})
	if err != nil {
		t.Fatalf("read a, wrote b, a block writing a before its COMMIT: %v", err)
	}
	if err := block.Commit(ctx); err != nil {
		t.Fatalf("the block, committed after: %v", err)
	}
	if n := queryInt(t, conn, "SELECT count(DISTINCT mz_from) FROM "+queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'b'::regclass")+
		" WHERE mz_from > (SELECT max(mz_from) FROM "+queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")+")"); n != 0 {
		t.Fatalf("the transaction that read a committed after the block that wrote a, in T order")
	}
	// VACUUM's lock is not a write.
	if err := readThenWrite(t, conn, "a", "a", func() {
		if _, err := other.Exec(ctx, "VACUUM a"); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatalf("read a, wrote a after a VACUUM of a: %v", err)
	}
}

// A transaction that only read never makes a write fail, and two
// read-then-write transactions on disjoint tables, overlapping, both
// commit; on the same table (each read what the other wrote) one fails.
func TestReadThenWriteDisjointTables(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)")
	other := connect(t, cs)
	third := connect(t, cs)
	ctx := context.Background()

	reader, _ := pinnedReader(t, third)
	queryInt(t, reader, "SELECT count(*) FROM a")
	ta, wa := pinnedReader(t, conn)
	tb, wb := pinnedReader(t, other)
	queryInt(t, ta, "SELECT v FROM a WHERE k = 1")
	queryInt(t, tb, "SELECT v FROM b WHERE k = 1")
	queryInt(t, ta, OpenWriteAfterReadFor(-1, wa))
	queryInt(t, tb, OpenWriteAfterReadFor(-1, wb))
	for _, w := range []struct {
		tx  pgx.Tx
		sql string
	}{{ta, "UPDATE a SET v = v + 1"}, {tb, "UPDATE b SET v = v + 1"}} {
		if _, err := w.tx.Exec(ctx, w.sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := ta.Commit(ctx); err != nil {
		t.Fatalf("read and wrote a: %v", err)
	}
	if err := tb.Commit(ctx); err != nil {
		t.Fatalf("read and wrote b while another read and wrote a: %v", err)
	}
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// Write skew on one table: both read a, both write it.
	ta, wa = pinnedReader(t, conn)
	tb, wb = pinnedReader(t, other)
	queryInt(t, ta, "SELECT sum(v) FROM a")
	queryInt(t, tb, "SELECT sum(v) FROM a")
	queryInt(t, ta, OpenWriteAfterReadFor(-1, wa))
	if _, err := ta.Exec(ctx, "INSERT INTO a VALUES (10, 0)"); err != nil {
		t.Fatal(err)
	}
	if err := ta.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	queryInt(t, tb, OpenWriteAfterReadFor(-1, wb))
	if _, err := tb.Exec(ctx, "INSERT INTO a VALUES (11, 0)"); err != nil {
		t.Fatal(err)
	}
	if err := tb.Commit(ctx); !isSerializationFailure(err) {
		t.Fatalf("the second of two transactions that read a and inserted into it: %v, want 40001", err)
	}
}
