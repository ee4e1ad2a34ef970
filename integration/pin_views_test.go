package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestReadOnlyTxnCallsNoFunction (issue 15): a read-only transaction whose
// pin needs no lock (no write since the last pin) runs none of mzproxy's
// functions in the backend, in either protocol: its peek before the BEGIN
// and its check in the first read's snapshot read the views
// settled_writes and pin_state (storage version 25). Before, each called
// the PL/pgSQL functions pin_peek and pin_check, about 30 us of backend
// CPU per call. It counts the calls as pg_stat_user_functions does
// (track_functions = all for the client's role).
func TestReadOnlyTxnCallsNoFunction(t *testing.T) {
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	admin := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, admin, "GRANT CREATE ON SCHEMA public TO "+role,
		"ALTER ROLE "+role+" IN DATABASE "+db+" SET track_functions = 'all'")
	p := startProxy(t)
	c := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, c, "CREATE TABLE rofn (k int PRIMARY KEY, v bigint)", "INSERT INTO rofn VALUES (1, 0), (2, 0)")

	for round, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		// A write: the first transaction's pin settles it (with the
		// gate), the others need no lock.
		var v int64
		if err := c.QueryRow(ctx, "UPDATE rofn SET v = v + 1 WHERE k = 1 RETURNING v", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil {
			t.Fatal(err)
		}
		txn := func() {
			t.Helper()
			if _, err := execSimple(ctx, c, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			for k := 1; k <= 2; k++ {
				var got int64
				if err := c.QueryRow(ctx, "SELECT v FROM rofn WHERE k = $1", mode, k).Scan(&got); err != nil {
					t.Fatalf("read %d in the transaction: %v", k, err)
				}
				if k == 1 && got != v {
					t.Fatalf("read in the transaction: v = %d, want %d", got, v)
				}
			}
			if _, err := execSimple(ctx, c, "COMMIT"); err != nil {
				t.Fatal(err)
			}
		}
		txn()
		before := mzproxyFunctionCalls(t, ctx, c, admin)
		const txns = 20
		for range txns {
			txn()
		}
		after := mzproxyFunctionCalls(t, ctx, c, admin)
		var total int64
		for name, n := range after {
			total += n - before[name]
		}
		t.Logf("round %d (%v): %d read-only transactions called mzproxy's functions %d times (pin_peek %d, pin_check %d)",
			round, mode, txns, total, after["pin_peek"]-before["pin_peek"], after["pin_check"]-before["pin_check"])
		// The gated pin (a function) runs when P fell a second behind the
		// clock (the tick on a loaded machine): a few times at most.
		if total > txns/4 {
			t.Fatalf("round %d (%v): %d lock-free read-only transactions called mzproxy's functions %d times; want (almost) none",
				round, mode, txns, total)
		}
	}
}
