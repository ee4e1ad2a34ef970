package storage

import (
	"context"
	"errors"
	"testing"

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
// settled by a pin: pin() answers P at once while another session holds
// the gate in EXCLUSIVE mode. A write since the last pin makes it take the
// gate (it waits), and its answer is then at or above the write's T.
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
}
