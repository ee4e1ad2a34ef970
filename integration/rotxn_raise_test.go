package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestReadOnlyTxnRaiseInBegin (issue 15): a read-only transaction whose
// plain BEGIN the event loop answered is begun REPEATABLE READ by the
// BEGIN the loop sends with its first read (proxy/loop_txn.go,
// sendPinBegin), so the backend runs no raise (SET TRANSACTION ISOLATION
// LEVEL REPEATABLE READ) per transaction, nor the Parse of an extended
// BEGIN that the first read's Parse replaces: with the BEGIN as a Query in
// front of Queries, as a Query in front of a driver's extended reads
// (pgx's Begin), as an unnamed Parse, Bind and Execute (pgbench -M
// extended), and as a prepared statement. In each the transaction is
// REPEATABLE READ (as current_setting tells, and its second read does not see a
// write acknowledged after its first), and a session whose default is
// SERIALIZABLE stays so.
func TestReadOnlyTxnRaiseInBegin(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	tap := startBackendTap(t)
	tap.recordBinds()
	p := startProxy(t, "--backend", tap.url(), "--event-loop=true", "--metrics-listen", "127.0.0.1:0")
	conn := connectTo(t, ctx, p.URL("postgres", db))
	writer := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE rrb (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO rrb SELECT g, g * 10 FROM generate_series(1, 100) g")
	if _, err := conn.PgConn().Prepare(ctx, "rrb_begin", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	const read = "SELECT v FROM rrb WHERE id = $1"
	type mode struct {
		name  string
		begin func() error
		reads pgx.QueryExecMode
		trips int // backend round trips per transaction, at most
	}
	query := func() error { _, err := execSimple(ctx, conn, "BEGIN"); return err }
	modes := []mode{
		{"query", query, pgx.QueryExecModeSimpleProtocol, 3},
		// pgx's Begin, asyncpg: a Query, then named statements.
		{"query then cache_statement", query, pgx.QueryExecModeCacheStatement, 3},
		// lib/pq, psycopg 3, node-postgres: a Query, then the unnamed
		// statement parsed with each read.
		{"query then exec", query, pgx.QueryExecModeExec, 3},
		{"query then cache_describe", query, pgx.QueryExecModeCacheDescribe, 3},
		// Each read parsed and described in a batch of its own, then
		// bound: two round trips a read (directly: six a transaction).
		{"query then describe_exec", query, pgx.QueryExecModeDescribeExec, 5},
		// pgbench -M extended.
		{"parsed", func() error { return conn.PgConn().ExecParams(ctx, "BEGIN", nil, nil, nil, nil).Read().Err }, pgx.QueryExecModeExec, 3},
		// pgbench -M prepared.
		{"prepared", func() error { return conn.PgConn().ExecPrepared(ctx, "rrb_begin", nil, nil, nil).Read().Err }, pgx.QueryExecModeCacheStatement, 3},
	}
	txn := func(m mode, id int) {
		t.Helper()
		if err := m.begin(); err != nil {
			t.Fatalf("%s: BEGIN: %v", m.name, err)
		}
		for _, k := range []int{id, id + 1} {
			var v int
			if err := conn.QueryRow(ctx, read, m.reads, k).Scan(&v); err != nil || v != k*10 {
				t.Fatalf("%s: read %d: %d, %v; want %d", m.name, k, v, err, k*10)
			}
		}
		mustExec(t, ctx, conn, "COMMIT")
	}
	const n = 6
	for _, m := range modes {
		// The session's pins come to agree and it prepares its BEGINs:
		// the loop answers the BEGIN from here on.
		for i := range 3 {
			txn(m, 1+i)
		}
		start, end := "raise-start-"+m.name, "raise-end-"+m.name
		if _, err := execSimple(ctx, conn, "SELECT '"+start+"'"); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			txn(m, 10+i*2)
		}
		if _, err := execSimple(ctx, conn, "SELECT '"+end+"'"); err != nil {
			t.Fatal(err)
		}
		statements, writes := 0, 0
		for _, e := range tap.between(start, end) {
			if e == "W" {
				writes++
			}
			switch {
			case strings.HasPrefix(e, "B ") && strings.Contains(e, "mzproxy_pin_raise"):
				t.Errorf("%s: the backend was sent the raise to REPEATABLE READ: %q", m.name, e)
			case strings.HasPrefix(e, "P mzproxy_"):
				t.Errorf("%s: the backend was sent a Parse of the proxy's: %q", m.name, e)
			case e == "P : BEGIN":
				// The first read's Parse of the unnamed statement replaces
				// it at once: the BEGIN's is not sent.
				t.Errorf("%s: the backend was sent the BEGIN's Parse: %q", m.name, e)
			}
			if strings.HasPrefix(e, "B ") || strings.HasPrefix(e, "Q ") {
				statements++
			}
		}
		// BEGIN, the guard, two reads and COMMIT (9b0837e: the raise too).
		t.Logf("%s: %.1f statements (Binds and Queries) per read-only transaction", m.name, float64(statements)/n)
		if statements > 5*n {
			t.Errorf("%s: the backend ran %d statements for %d read-only transactions, want at most 5 each", m.name, statements, n)
		}
		// The BEGIN still rides with the first read in every form. The
		// window's last write is the Query of the end mark.
		if roundTrips := writes - 1; roundTrips > m.trips*n {
			t.Errorf("%s: %d backend round trips for %d read-only transactions, want at most %d each", m.name, roundTrips, n, m.trips)
		}

		// The transaction is REPEATABLE READ: a write acknowledged after
		// its first read is not seen by its second.
		if err := m.begin(); err != nil {
			t.Fatalf("%s: BEGIN: %v", m.name, err)
		}
		var before, after int
		var level string
		if err := conn.QueryRow(ctx, read, m.reads, 5).Scan(&before); err != nil {
			t.Fatal(err)
		}
		mustExec(t, ctx, writer, "UPDATE rrb SET v = v + 1 WHERE id = 5")
		if err := conn.QueryRow(ctx, read, m.reads, 5).Scan(&after); err != nil || after != before {
			t.Fatalf("%s: second read %d, %v; want %d (the first read's snapshot)", m.name, after, err, before)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('transaction_isolation')", pgx.QueryExecModeSimpleProtocol).Scan(&level); err != nil || level != "repeatable read" {
			t.Fatalf("%s: transaction_isolation %q, %v; want repeatable read", m.name, level, err)
		}
		mustExec(t, ctx, conn, "COMMIT")
	}

	// A session whose default is SERIALIZABLE is not begun REPEATABLE
	// READ: the loop's BEGIN is plain, and the transaction serializable.
	ser := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, ser, "SET default_transaction_isolation = 'serializable'")
	for i := range 5 {
		if _, err := execSimple(ctx, ser, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		var v int
		if err := ser.QueryRow(ctx, read, pgx.QueryExecModeSimpleProtocol, 7).Scan(&v); err != nil {
			t.Fatal(err)
		}
		var level string
		if err := ser.QueryRow(ctx, "SELECT pg_catalog.current_setting('transaction_isolation')", pgx.QueryExecModeSimpleProtocol).Scan(&level); err != nil || level != "serializable" {
			t.Fatalf("transaction %d: transaction_isolation %q, %v; want serializable", i, level, err)
		}
		mustExec(t, ctx, ser, "COMMIT")
	}
	p.awaitHolds(t, 0, "after the transactions")
	p.mustAlive(t, context.Background())
}
