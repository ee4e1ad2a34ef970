package storage

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
)

// nullableInt runs sql and returns its one bigint, nil for NULL.
func nullableInt(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string) *int64 {
	t.Helper()
	var v *int64
	if err := q.QueryRow(context.Background(), sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// The gate-less pin of a read-only transaction: pin_peek answers only when
// every write counted is settled by a pin; pin_check, in the snapshot
// taken after it, answers P when no slot was taken since the peek (the
// snapshot then holds exactly the writes at or below P) and NULL when one
// was, also one that committed before the snapshot.
func TestPinPeekCheck(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (x int)")
	other := connect(t, cs)

	w := beginLazy(t, conn)
	if _, err := w.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if peek := nullableInt(t, other, PinPeekSQL); peek != nil {
		t.Fatalf("pin_peek with a write in progress = %d, want NULL", *peek)
	}
	tw := commitLazy(t, w)
	if peek := nullableInt(t, other, PinPeekSQL); peek != nil {
		t.Fatalf("pin_peek after a write no pin settled = %d, want NULL", *peek)
	}
	tp := queryInt(t, other, ReadTSSQL)
	peek := nullableInt(t, other, PinPeekSQL)
	if peek == nil {
		t.Fatal("pin_peek after a pin = NULL")
	}

	check := func(peek int64) (*int64, int64) {
		t.Helper()
		tx, err := other.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		ts := nullableInt(t, tx, PinCheckSQL(strconv.FormatInt(peek, 10)))
		return ts, queryInt(t, tx, "SELECT count(*) FROM c")
	}
	ts, rows := check(*peek)
	if ts == nil || *ts != tp || *ts < tw || rows != 1 {
		t.Fatalf("pin_check after a settled peek = %v with %d rows; want the pin's %d (>= the write's %d) with 1 row", ts, rows, tp, tw)
	}

	// A write counted after the peek, committed before the snapshot: P
	// is not a valid time for that snapshot.
	w = beginLazy(t, conn)
	if _, err := w.Exec(ctx, "INSERT INTO c VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	commitLazy(t, w)
	if ts, _ := check(*peek); ts != nil {
		t.Fatalf("pin_check after a write since the peek = %d, want NULL", *ts)
	}
}
