package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// beginLazy opens a transaction on c holding a write slot whose T is
// pending (begin_write_occ, as mzproxy takes it for a client's writes).
func beginLazy(t *testing.T, c *pgx.Conn) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, tx, BeginWriteOCCFor(-1, 0)); got != 0 {
		t.Fatalf("begin_write_occ = %d, want 0 (pending)", got)
	}
	return tx
}

// commitLazy ends tx, returning the T commit_write reports for it.
func commitLazy(t *testing.T, tx pgx.Tx) int64 {
	t.Helper()
	ts := queryInt(t, tx, CommitWriteFor(-1))
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ts
}

// Writers do not wait for each other or validate against each other's
// commits: two transactions interleaved on disjoint tables, and two on the
// same table, both commit, under either isolation level.
func TestConcurrentWritesBothCommit(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE a (x int)", "CREATE TABLE b (x int)")
	other := connect(t, cs)
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		for _, tables := range [][2]string{{"a", "b"}, {"a", "a"}} {
			x, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			y, err := other.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct {
				tx    pgx.Tx
				table string
			}{{x, tables[0]}, {y, tables[1]}} {
				queryInt(t, w.tx, BeginWriteOCCFor(-1, 0))
				if _, err := w.tx.Exec(ctx, "INSERT INTO "+w.table+" VALUES (1)"); err != nil {
					t.Fatal(err)
				}
			}
			tx, ty := commitLazy(t, x), commitLazy(t, y)
			if tx <= 0 || ty <= 0 {
				t.Fatalf("%s %v: timestamps %d %d", iso, tables, tx, ty)
			}
		}
	}
	if n := queryInt(t, conn, "SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b)"); n != 8 {
		t.Fatalf("%d rows, want 8", n)
	}
}

// A pending T is chosen once the statement holds its row locks, so a
// writer that began first but waited for a later one's row gets a T no
// lower than the one it waited for, and history stays in T order.
func TestLazyTimestampFollowsRowLocks(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (k int PRIMARY KEY, v int)", "INSERT INTO c VALUES (1, 0)")
	other := connect(t, cs)

	first := beginLazy(t, conn)
	time.Sleep(5 * time.Millisecond) // the clock moves on: a T chosen at begin would be lower
	second := beginLazy(t, other)
	if _, err := second.Exec(ctx, "UPDATE c SET v = v + 1 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	updated := make(chan error, 1)
	go func() {
		_, err := first.Exec(ctx, "UPDATE c SET v = v + 10 WHERE k = 1")
		updated <- err
	}()
	time.Sleep(50 * time.Millisecond) // first now waits for second's row lock
	tSecond := commitLazy(t, second)
	if err := <-updated; err != nil {
		t.Fatal(err)
	}
	tFirst := commitLazy(t, first)
	if tFirst < tSecond {
		t.Fatalf("the writer that waited committed at %d, before the one it waited for (%d)", tFirst, tSecond)
	}
	hist := queryInt(t, conn, "SELECT count(*) FROM mzproxy.h1 WHERE mz_from > mz_to")
	if hist != 0 {
		t.Fatalf("%d versions end before they begin", hist)
	}
	if v := queryInt(t, conn, "SELECT v FROM mzproxy.h1 WHERE mz_to = $1", Infinity); v != 11 {
		t.Fatalf("current version %d, want 11", v)
	}
}

// Once a transaction's T is chosen, a later statement of it that would
// close a version committed at a higher T fails with PostgreSQL's
// serialization failure, and nothing of the transaction is written.
func TestOvertakenStatementFails(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (k int PRIMARY KEY, v int)", "INSERT INTO c VALUES (1, 0), (2, 0)")
	other := connect(t, cs)

	slow := beginLazy(t, conn)
	if _, err := slow.Exec(ctx, "UPDATE c SET v = 1 WHERE k = 2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	fast := beginLazy(t, other)
	if _, err := fast.Exec(ctx, "UPDATE c SET v = 2 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	commitLazy(t, fast)
	_, err := slow.Exec(ctx, "UPDATE c SET v = 3 WHERE k = 1")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "40001" || pe.Message != "could not serialize access due to concurrent update" {
		t.Fatalf("overtaken statement: %v; want 40001", err)
	}
	t.Log(pe.Detail)
	_ = slow.Rollback(ctx)
	if n := queryInt(t, conn, "SELECT count(*) FROM c WHERE v IN (1, 3)"); n != 0 {
		t.Fatalf("%d rows of the failed transaction", n)
	}
}

// A pin waits for the writers in progress (it cannot know their T), and
// then hands out a t at or above each of their commits; a write after it
// commits above t. A tick gives up instead of waiting long.
func TestPinWaitsForWriters(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (x int)")
	other := connect(t, cs)

	w := beginLazy(t, conn)
	if _, err := w.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	pinned := make(chan int64, 1)
	go func() {
		var ts int64
		if err := other.QueryRow(ctx, "SELECT "+Schema+".pin()").Scan(&ts); err != nil {
			t.Error(err)
		}
		pinned <- ts
	}()
	select {
	case ts := <-pinned:
		t.Fatalf("pin returned %d while a write was in progress", ts)
	case <-time.After(200 * time.Millisecond):
	}
	tw := commitLazy(t, w)
	tp := <-pinned
	if tp < tw {
		t.Fatalf("pin %d below the commit at %d it waited for", tp, tw)
	}
	if u := queryInt(t, conn, UpperSQL); u != tp+1 {
		t.Fatalf("upper %d after a pin at %d", u, tp)
	}
	after := beginLazy(t, conn)
	if _, err := after.Exec(ctx, "INSERT INTO c VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if ta := commitLazy(t, after); ta <= tp {
		t.Fatalf("write after the pin at %d committed at %d", tp, ta)
	}

	holder := beginLazy(t, conn)
	var ticked *int64
	if err := other.QueryRow(ctx, "SELECT "+Schema+".tick(20)").Scan(&ticked); err != nil || ticked != nil {
		t.Fatalf("tick with a write in progress = %v, %v; want NULL", ticked, err)
	}
	_ = holder.Rollback(ctx)
	if err := other.QueryRow(ctx, "SELECT "+Schema+".tick(20)").Scan(&ticked); err != nil || ticked == nil {
		t.Fatalf("idle tick = %v, %v", ticked, err)
	}
	if d := queryInt(t, conn, "SELECT upper FROM "+Schema+".txns_durable"); d != *ticked+1 {
		t.Fatalf("durable upper %d after a tick at %d", d, *ticked)
	}

	// Without a slot there is nothing to commit.
	var none *int64
	if err := conn.QueryRow(ctx, CommitWriteFor(-1)).Scan(&none); err != nil || none != nil {
		t.Fatalf("commit_write without a slot = %v, %v", none, err)
	}
}

// A transaction block's deferred slot holds no lock while the block runs:
// a pin does not wait for it. Its history is stamped with a placeholder
// until commit_write_tx chooses its T (past the pin, and past every
// version it closed), and none is left after.
func TestDeferredSlot(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE d (k int PRIMARY KEY, v int)", "INSERT INTO d VALUES (1, 0), (2, 0)")
	other := connect(t, cs)

	block, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer block.Rollback(ctx)
	queryInt(t, block, OpenWriteDeferredFor(-1))
	if _, err := block.Exec(ctx, "UPDATE d SET v = 1 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, block, "SELECT count(*) FROM mzproxy.h1 WHERE mz_from < 0"); n != 1 {
		t.Fatalf("%d placeholder versions in the block, want 1", n)
	}
	pinCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var pinned int64
	if err := other.QueryRow(pinCtx, ReadTSSQL).Scan(&pinned); err != nil {
		t.Fatalf("a pin while a block with a deferred slot is open: %v", err)
	}
	// Another writer commits a newer version of k = 2, which the block
	// then closes: its T must not be below it.
	time.Sleep(5 * time.Millisecond)
	newer := inWrite(t, other, "UPDATE d SET v = 5 WHERE k = 2")
	if _, err := block.Exec(ctx, "UPDATE d SET v = v + 1 WHERE k = 2"); err != nil {
		t.Fatal(err)
	}
	// COMMIT alone chooses T (a deferred constraint trigger).
	if err := block.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ts := queryInt(t, conn, "SELECT max(mz_from) FROM mzproxy.h1")
	if ts <= pinned || uint64(ts) < newer {
		t.Fatalf("the block committed at %d; a pin was at %d and it closed a version of %d", ts, pinned, newer)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM mzproxy.h1 WHERE mz_from < 0 OR mz_to < 0 OR mz_from > mz_to"); n != 0 {
		t.Fatalf("%d placeholder or inverted versions left", n)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM mzproxy.h1 WHERE mz_from = $1", ts); n != 2 {
		t.Fatalf("%d versions at the block's T, want 2", n)
	}
	if v := queryInt(t, conn, "SELECT v FROM mzproxy.h1 WHERE k = 2 AND mz_from <= $1 AND mz_to > $1", ts); v != 6 {
		t.Fatalf("k = 2 at the block's T is %d, want 6", v)
	}

	// The settings of the slot taken away (the list of written tables is
	// not one since version 11).
	forged, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer forged.Rollback(ctx)
	queryInt(t, forged, OpenWriteDeferredFor(-1))
	if _, err := forged.Exec(ctx, "UPDATE d SET v = 9 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := forged.Exec(ctx, "SELECT set_config('mzproxy.touched', '', true), set_config('mzproxy.write_ts', '', true)"); err != nil {
		t.Fatal(err)
	}
	// The slot is the transaction's row since version 23 (slot_state.sql):
	// taking the settings away changes nothing.
	if err := forged.Commit(ctx); err != nil {
		t.Fatalf("commit with the slot's setting and the list of written tables taken away: %v", err)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM mzproxy.h1 WHERE mz_from < 0 OR mz_to < 0"); n != 0 {
		t.Fatalf("%d placeholder versions committed", n)
	}
}

// After a crash the unlogged sequence behind P starts over (as ALTER
// SEQUENCE ... RESTART leaves it). Until a pin repairs it, writers and pins
// take a floor no timestamp handed out before can exceed: the clock plus a
// second, or the upper the tick recorded durably. Nothing goes back.
func TestPinnedAfterReset(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (x int)")
	before := queryInt(t, conn, ReadTSSQL)
	if _, err := conn.Exec(ctx, "SELECT mzproxy.tick(1000)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ALTER SEQUENCE mzproxy.pinned RESTART"); err != nil {
		t.Fatal(err)
	}
	if u := queryInt(t, conn, UpperSQL); u <= before+1000 {
		t.Fatalf("upper %d after the reset, want past %d + 1 s", u, before)
	}
	w := inWrite(t, conn, "INSERT INTO c VALUES (1)")
	if int64(w) <= before+1000 {
		t.Fatalf("a write after the reset at %d, want past %d + 1 s", w, before)
	}
	if p := queryInt(t, conn, ReadTSSQL); p < int64(w) {
		t.Fatalf("a pin after the reset at %d, below the write at %d", p, w)
	}
}
