package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A read-only transaction's pin (proxy/txn.go, storage pin_trim.sql): when
// no write slot was taken since pin_peek, which rides in front of its
// BEGIN, the transaction reads at the oracle's P without the writers'
// gate; otherwise it is begun anew and pinned with the gate.

// rotxnBegin begins a transaction block through the proxy: a simple Query,
// or the extended protocol with BEGIN prepared earlier (Bind, Describe,
// Execute, Sync, as pgbench -M prepared and drivers with a statement cache
// send it).
func rotxnBegin(t *testing.T, ctx context.Context, conn *pgx.Conn, mode pgx.QueryExecMode) {
	t.Helper()
	if mode == pgx.QueryExecModeSimpleProtocol {
		if _, err := execSimple(ctx, conn, "BEGIN"); err != nil {
			t.Fatalf("BEGIN: %v", err)
		}
		return
	}
	if err := conn.PgConn().ExecPrepared(ctx, "rotxn_begin", nil, nil, nil).Read().Err; err != nil {
		t.Fatalf("BEGIN (prepared): %v", err)
	}
}

// rotxnRead reads the row and mz_now() in the transaction.
func rotxnRead(t *testing.T, ctx context.Context, conn *pgx.Conn, mode pgx.QueryExecMode, table string) (v int, ts uint64) {
	t.Helper()
	var now string
	if err := conn.QueryRow(ctx, "SELECT v, mz_now()::text FROM "+table+" WHERE id = 1", mode).Scan(&v, &now); err != nil {
		t.Fatalf("read in the transaction: %v", err)
	}
	ts, err := strconv.ParseUint(now, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v, ts
}

// TestReadOnlyTxnPinWithoutGate: with the writers' gate held by another
// session (as a stalled pin or a queue of writers would hold it), a
// read-only transaction through mzproxy still pins, reads and commits, in
// both protocols; the backend is never asked to lock the gate for it.
func TestReadOnlyTxnPinWithoutGate(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	tap := startBackendTap(t)
	p := startProxy(t, "--backend", tap.url())
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE rp (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO rp VALUES (1, 7)")
	if _, err := conn.PgConn().Prepare(ctx, "rotxn_begin", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement}
	for _, mode := range modes {
		// The first transaction learns the session's defaults.
		rotxnBegin(t, ctx, conn, mode)
		rotxnRead(t, ctx, conn, mode, "rp")
		mustExec(t, ctx, conn, "COMMIT")
	}

	gate := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, gate, "BEGIN", "LOCK TABLE mzproxy.gate IN EXCLUSIVE MODE")
	// Before, the pin waited for the gate: the statement timeout ends that.
	mustExec(t, ctx, conn, "SET statement_timeout = '5s'")
	if _, err := execSimple(ctx, conn, "SELECT 'rotxn-start'"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		rotxnBegin(t, ctx, conn, mode)
		if v, _ := rotxnRead(t, ctx, conn, mode, "rp"); v != 7 {
			t.Fatalf("%v: read %d, want 7", mode, v)
		}
		mustExec(t, ctx, conn, "COMMIT")
	}
	if _, err := execSimple(ctx, conn, "SELECT 'rotxn-end'"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, gate, "ROLLBACK")
	for _, e := range tap.between("rotxn-start", "rotxn-end") {
		if strings.Contains(e, "mzproxy.gate") || strings.Contains(e, "pin_held") {
			t.Errorf("a read-only transaction took the gate: the backend was sent %q", e)
		}
	}
}

// TestReadOnlyTxnPinAfterWrite: a write acknowledged after a read-only
// transaction's BEGIN, before its first read (the gate-less pin's check
// fails: a slot was taken since pin_peek), is seen by that read; and its
// timestamp is at or after a read of the present that finished before it
// (real-time order), in both protocols.
func TestReadOnlyTxnPinAfterWrite(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	reader := connectTo(t, ctx, p.URL("postgres", db))
	writer := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, writer, "CREATE TABLE rw (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO rw VALUES (1, 0)")
	if _, err := reader.PgConn().Prepare(ctx, "rotxn_begin", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	presentTS := func() uint64 {
		var now string
		if err := writer.QueryRow(ctx, "SELECT mz_now()::text", pgx.QueryExecModeSimpleProtocol).Scan(&now); err != nil {
			t.Fatal(err)
		}
		ts, _ := strconv.ParseUint(now, 10, 64)
		return ts
	}
	want := 0
	for round := 0; round < 3; round++ {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			// No write since the last pin: the next BEGIN's peek succeeds.
			presentTS()
			rotxnBegin(t, ctx, reader, mode)
			mustExec(t, ctx, writer, "UPDATE rw SET v = v + 1 WHERE id = 1")
			want++
			before := presentTS()
			v, ts := rotxnRead(t, ctx, reader, mode, "rw")
			if v != want || ts < before {
				t.Errorf("%v round %d: read %d at %d; want %d, at or after %d (a read that finished before)", mode, round, v, ts, want, before)
			}
			if v2, ts2 := rotxnRead(t, ctx, reader, mode, "rw"); v2 != v || ts2 != ts {
				t.Errorf("%v: a second read in the transaction: %d at %d, the first %d at %d", mode, v2, ts2, v, ts)
			}
			mustExec(t, ctx, reader, "COMMIT")

			// Without a write in between, the gate-less pin's timestamp
			// is also at or after the reads that finished before.
			rotxnBegin(t, ctx, reader, mode)
			before = presentTS()
			if v, ts := rotxnRead(t, ctx, reader, mode, "rw"); v != want || ts < before {
				t.Errorf("%v round %d, no write: read %d at %d; want %d, at or after %d", mode, round, v, ts, want, before)
			}
			mustExec(t, ctx, reader, "COMMIT")
		}
	}

	// The pin's prepared statements, deallocated by the client, are
	// prepared again: the next transaction does not fail for it.
	mustExec(t, ctx, reader, "DEALLOCATE mzproxy_pin_peek", "DEALLOCATE mzproxy_pin_check")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		rotxnBegin(t, ctx, reader, mode)
		if v, _ := rotxnRead(t, ctx, reader, mode, "rw"); v != want {
			t.Errorf("%v after DEALLOCATE: read %d, want %d", mode, v, want)
		}
		mustExec(t, ctx, reader, "COMMIT")
	}
}
