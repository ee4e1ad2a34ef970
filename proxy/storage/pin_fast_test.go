package storage

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pinWithin runs pin() on c under a statement timeout of ms: its answer, or
// false when it waited past the timeout (for the writers' gate).
func pinWithin(t *testing.T, c *pgx.Conn, ms string) (int64, bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Exec(ctx, "SET statement_timeout = "+ms); err != nil {
		t.Fatal(err)
	}
	defer c.Exec(ctx, "RESET statement_timeout")
	var ts int64
	if err := c.QueryRow(ctx, ReadTSSQL).Scan(&ts); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "57014" {
			return 0, false
		}
		t.Fatal(err)
	}
	return ts, true
}

// A read of the present pins without the gate when every write counted was
// settled by a pin and P is less than a second old: pin() answers P at once
// while another session holds the gate in EXCLUSIVE mode. A write since the
// last pin makes it take the gate (it waits), and its answer is then at or
// above the write's T; so does a P a second behind the clock, which
// pin_check refuses too (mz_now() within a second of the clock, ticking or
// not).
func TestPinFastPath(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (x int)")
	reader, locker := connect(t, cs), connect(t, cs)
	lockGate := func() pgx.Tx {
		t.Helper()
		tx, err := locker.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+Schema+".gate IN EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		return tx
	}

	tp := queryInt(t, reader, ReadTSSQL)
	gate := lockGate()
	ts, ok := pinWithin(t, reader, "'10s'")
	if !ok || ts != tp {
		t.Fatalf("pin() with no write since the last pin, the gate held elsewhere = %d (answered: %v), want P = %d at once", ts, ok, tp)
	}
	gate.Rollback(ctx)

	w := beginLazy(t, conn)
	if _, err := w.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	tw := commitLazy(t, w)
	gate = lockGate()
	if ts, ok := pinWithin(t, reader, "'300ms'"); ok {
		t.Fatalf("pin() after a write no pin settled answered %d without the gate", ts)
	}
	gate.Rollback(ctx)
	if ts := queryInt(t, reader, ReadTSSQL); ts < tw {
		t.Fatalf("pin() after a write at %d = %d", tw, ts)
	}

	peek := nullableInt(t, reader, PinPeekSQL)
	if peek == nil {
		t.Fatal("pin_peek after a pin = NULL")
	}
	time.Sleep(1100 * time.Millisecond)
	if ts := nullableInt(t, reader, PinCheckSQL(strconv.FormatInt(*peek, 10))); ts != nil {
		t.Fatalf("pin_check with P over a second old = %d, want NULL", *ts)
	}
	gate = lockGate()
	if ts, ok := pinWithin(t, reader, "'300ms'"); ok {
		t.Fatalf("pin() with P over a second old answered %d without the gate", ts)
	}
	gate.Rollback(ctx)
}
