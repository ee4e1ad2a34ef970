package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestCommitWriteCompareAndAppend: two optimistic write transactions from
// the same snapshot of the upper; the first to commit_write wins, the
// second fails with MZ001 carrying the actual upper and writes nothing.
// Under REPEATABLE READ the loser gets PostgreSQL's own 40001.
func TestCommitWriteCompareAndAppend(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE t (x int)")
	other := connect(t, cs)

	begin := func(c *pgx.Conn, iso pgx.TxIsoLevel) (pgx.Tx, uint64) {
		t.Helper()
		tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		if err != nil {
			t.Fatal(err)
		}
		var ts int64
		if err := tx.QueryRow(ctx, BeginWriteOCCFor(-1, 0)).Scan(&ts); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		return tx, uint64(ts)
	}

	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		a, ta := begin(conn, iso)
		b, tb := begin(other, iso)
		if ta < 1 || tb < 1 {
			t.Fatalf("timestamps %d %d", ta, tb)
		}
		var got int64
		if err := a.QueryRow(ctx, CommitWriteFor(-1)).Scan(&got); err != nil || uint64(got) != ta {
			t.Fatalf("%s: first commit_write = %d, %v; want %d", iso, got, err, ta)
		}
		// Idempotent once the slot is held.
		if err := a.QueryRow(ctx, CommitWriteFor(-1)).Scan(&got); err != nil || uint64(got) != ta {
			t.Fatalf("%s: second commit_write = %d, %v", iso, got, err)
		}
		if err := a.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := b.Exec(ctx, CommitWriteFor(-1))
		var pe *pgconn.PgError
		switch iso {
		case pgx.ReadCommitted:
			upper, ok := UpperConflict(err)
			if !ok || upper != ta+1 {
				t.Fatalf("loser: %v; want MZ001 with upper %d", err, ta+1)
			}
		default:
			if !errors.As(err, &pe) || pe.Code != "40001" {
				t.Fatalf("loser under repeatable read: %v; want 40001", err)
			}
		}
		_ = b.Rollback(ctx)
		if u := queryInt(t, conn, UpperSQL); uint64(u) != ta+1 {
			t.Fatalf("upper %d, want %d", u, ta+1)
		}
		if r := queryInt(t, conn, ReadTSSQL); uint64(r) != ta {
			t.Fatalf("read_ts %d, want %d", r, ta)
		}
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM t"); n != 2 {
		t.Fatalf("%d rows, want 2 (one per winner)", n)
	}

	// commit_write_tx reports the conflict as a serialization failure.
	a, _ := begin(conn, pgx.ReadCommitted)
	b, _ := begin(other, pgx.ReadCommitted)
	if _, err := a.Exec(ctx, CommitWriteTxFor(-1)); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := b.Exec(ctx, CommitWriteTxFor(-1))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "40001" || pe.Message != "could not serialize access due to concurrent update" {
		t.Fatalf("commit_write_tx loser: %v", err)
	}
	_ = b.Rollback(ctx)

	// A slot held by another transaction is not waited for: MZ004, and
	// await_slot waits for it without taking it.
	holder, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, BeginWriteSQL); err != nil {
		t.Fatal(err)
	}
	a, _ = begin(conn, pgx.ReadCommitted)
	_, err = a.Exec(ctx, CommitWriteFor(-1))
	if !errors.As(err, &pe) || pe.Code != string(CodeSlotBusy) {
		t.Fatalf("commit_write with the slot held elsewhere: %v; want MZ004", err)
	}
	_ = a.Rollback(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, AwaitSlotSQL)
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("await_slot returned (%v) while the slot is held", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}

	// Without a slot there is nothing to append.
	var none *int64
	if err := conn.QueryRow(ctx, CommitWriteFor(-1)).Scan(&none); err != nil || none != nil {
		t.Fatalf("commit_write without a slot = %v, %v", none, err)
	}
}
