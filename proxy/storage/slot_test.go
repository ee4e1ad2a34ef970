package storage

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// begin_write: the slot with T chosen at once, idempotent in its
// transaction, at or above the upper. A commit does not move the upper
// (pins do), but the next pin is at or above the commit's T.
func TestBeginWrite(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	upper0 := queryInt(t, conn, UpperSQL)

	w := connect(t, conn.Config().ConnString())
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t1 := queryInt(t, tx, BeginWriteSQL)
	if t2 := queryInt(t, tx, BeginWriteSQL); t2 != t1 {
		t.Fatalf("second begin_write in one transaction: %d, first %d", t2, t1)
	}
	if t1 < upper0 {
		t.Fatalf("T %d below upper %d", t1, upper0)
	}
	if got := queryInt(t, tx, "SELECT mzproxy.current_write_ts()"); got != t1 {
		t.Fatalf("write_ts setting %d, want %d", got, t1)
	}
	// A transaction that writes reads its own writes at its T.
	if got := queryInt(t, tx, ReadTSSQL); got != t1 {
		t.Fatalf("pin in the writing transaction %d, want its T %d", got, t1)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, UpperSQL); got != upper0 {
		t.Fatalf("upper moved by a commit: %d -> %d", upper0, got)
	}
	if got := queryInt(t, conn, ReadTSSQL); got < t1 {
		t.Fatalf("pin after a commit at %d: %d", t1, got)
	}
	// The setting does not outlive the transaction.
	if got := queryInt(t, w, "SELECT count(*) WHERE coalesce(current_setting('mzproxy.write_ts', true), '') = ''"); got != 1 {
		t.Fatal("write_ts setting survived the transaction")
	}
}

// begin_write_at(T): T below the upper is MZ001 with the least possible T
// as DETAIL; ahead of the clock, 22008; otherwise exactly T.
func TestBeginWriteAt(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	p := uint64(queryInt(t, conn, ReadTSSQL))

	try := func(ts uint64) (int64, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var got int64
		err = tx.QueryRow(ctx, BeginWriteAtSQL, int64(ts)).Scan(&got)
		if err == nil {
			err = tx.Commit(ctx)
		}
		return got, err
	}
	_, err := try(p)
	if got, ok := UpperConflict(err); !ok || got != p+1 {
		t.Fatalf("begin_write_at(pinned %d): %v (upper %d)", p, err, got)
	}
	var pe *pgconn.PgError
	if _, err := try(p + 1_000_000); !errors.As(err, &pe) || pe.Code != "22008" {
		t.Fatalf("begin_write_at ahead of the clock: %v", err)
	}
	if got, err := try(p + 1); err != nil || uint64(got) != p+1 {
		t.Fatalf("begin_write_at(%d) = %d, %v", p+1, got, err)
	}
}
