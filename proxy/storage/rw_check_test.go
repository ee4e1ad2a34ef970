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

// earlyTimestampWriter begins a write transaction on conn whose T is
// chosen before it writes table a: by its first statement (the later
// statements of an autocommit query string run so) or, for a block, by a
// read of its own writes (pin). It writes b to get there and returns the
// transaction and its T.
func earlyTimestampWriter(t *testing.T, conn *pgx.Conn, block bool) (pgx.Tx, int64) {
	t.Helper()
	return earlyTimestampWriterIso(t, conn, pgx.ReadCommitted, block)
}

// earlyTimestampWriterIso is earlyTimestampWriter at isolation level iso.
func earlyTimestampWriterIso(t *testing.T, conn *pgx.Conn, iso pgx.TxIsoLevel, block bool) (pgx.Tx, int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	open := OpenWriteFor(-1)
	if block {
		open = OpenWriteDeferredFor(-1)
	}
	for _, s := range []string{open, "UPDATE b SET v = v + 1"} {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if block {
		queryInt(t, tx, ReadTSSQL)
	}
	return tx, queryInt(t, tx, CommitWriteFor(-1))
}

// checkedAfter reads table read in tx (pinned by pinnedReader when writes
// were counted) and writes table write with its slot checked against the
// pin, once the clock is past ts, so that its T is above ts. It returns
// the T fix_write chose, or the check's error.
func checkedAfter(t *testing.T, tx pgx.Tx, writes int64, read, write string, ts int64) (int64, error) {
	t.Helper()
	ctx := context.Background()
	for queryInt(t, tx, "SELECT "+Schema+".now_ms()") <= ts {
		time.Sleep(time.Millisecond)
	}
	queryInt(t, tx, "SELECT count(*) FROM "+read)
	queryInt(t, tx, OpenWriteAfterReadFor(-1, writes))
	if _, err := tx.Exec(ctx, "UPDATE "+write+" SET v = v + 1"); err != nil {
		return 0, err
	}
	var tsX int64
	err := tx.QueryRow(ctx, CommitWriteTxFor(-1)).Scan(&tsX)
	return tsX, err
}

// A write whose T was chosen before it wrote table a (Y), and a
// transaction that read a at its timestamp and then wrote (X), pinned
// before Y's T: X checked at a later T than Y's passes (Y had not written
// a), so Y's write to a after the check fails with 40001, whether X is
// still open or has committed; a write to a before X's check fails X
// instead. (Both committed before the check marks: X missed
// Y's write at a lower T.)
func TestEarlyTimestampWriteAfterCheck(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"CREATE TABLE c (k int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)", "INSERT INTO c VALUES (1, 0)")
	other := connect(t, cs)
	ctx := context.Background()

	for _, tc := range []struct {
		name          string
		block, xEnded bool
	}{
		{"later statement, checked reader open", false, false},
		{"later statement, checked reader committed", false, true},
		{"block with T fixed early, checked reader open", true, false},
		{"block with T fixed early, checked reader committed", true, true},
	} {
		x, writes := pinnedReader(t, conn)
		y, tsY := earlyTimestampWriter(t, other, tc.block)
		tsX, err := checkedAfter(t, x, writes, "a", "c", tsY)
		if err != nil {
			t.Fatalf("%s: the check before Y wrote a: %v", tc.name, err)
		}
		if tc.xEnded {
			if err := x.Commit(ctx); err != nil {
				t.Fatalf("%s: X's commit: %v", tc.name, err)
			}
		}
		_, err = y.Exec(ctx, "UPDATE a SET v = v + 1")
		if !isSerializationFailure(err) {
			t.Fatalf("%s: Y (T %d) wrote a after X (T %d) read it: %v, want 40001", tc.name, tsY, tsX, err)
		}
		if !strings.Contains(err.(*pgconn.PgError).Detail, "a was read") {
			t.Errorf("%s: the failure does not name the table: %q", tc.name, err.(*pgconn.PgError).Detail)
		}
		y.Rollback(ctx)
		if err := x.Commit(ctx); err != nil && !tc.xEnded {
			t.Fatalf("%s: X's commit: %v", tc.name, err)
		}
	}

	// The reverse order: Y writes a before X's check; X fails.
	x, writes := pinnedReader(t, conn)
	y, tsY := earlyTimestampWriter(t, other, false)
	if _, err := y.Exec(ctx, "UPDATE a SET v = v + 1"); err != nil {
		t.Fatalf("Y wrote a before X's check: %v", err)
	}
	if _, err := checkedAfter(t, x, writes, "a", "c", tsY); !isSerializationFailure(err) {
		t.Fatalf("X read a and was checked after Y wrote it: %v, want 40001", err)
	}
	x.Rollback(ctx)
	if err := y.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// The check marks fail only a write below the T of a checked transaction
// that read the same table: one that read another table, open or
// committed, fails no one, and a mark below the writer's T does not
// either.
func TestEarlyTimestampWriteOtherTable(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"CREATE TABLE c (k int PRIMARY KEY, v int)", "CREATE TABLE d (k int PRIMARY KEY, v int)", "CREATE TABLE e (k int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)", "INSERT INTO c VALUES (1, 0)")
	other := connect(t, cs)
	third := connect(t, cs)
	ctx := context.Background()

	for _, block := range []bool{false, true} {
		x, writes := pinnedReader(t, conn)
		x2, writes2 := pinnedReader(t, third)
		y, tsY := earlyTimestampWriter(t, other, block)
		if _, err := checkedAfter(t, x, writes, "d", "c", tsY); err != nil {
			t.Fatalf("X read d: %v", err)
		}
		if err := x.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := checkedAfter(t, x2, writes2, "e", "e", tsY); err != nil {
			t.Fatalf("X2 read e: %v", err)
		}
		if _, err := y.Exec(ctx, "UPDATE a SET v = v + 1"); err != nil {
			t.Fatalf("block %v: Y wrote a while X2, which read e, is open after its check: %v", block, err)
		}
		if err := y.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := x2.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// X read a and committed before Y chose its T: Y's T is above the mark.
	x, writes := pinnedReader(t, conn)
	tsX, err := checkedAfter(t, x, writes, "a", "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	y, tsY := earlyTimestampWriter(t, other, true)
	if _, err := y.Exec(ctx, "UPDATE a SET v = v + 1"); err != nil {
		t.Fatalf("Y (T %d) wrote a after X (T %d), which read it, committed: %v", tsY, tsX, err)
	}
	if err := y.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
