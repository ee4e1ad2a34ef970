package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestReadOnlyTxnCallsNoFunction (issue 15): a read-only transaction whose
// pin needs no lock (no write since the last pin) runs none of mzproxy's
// functions in the backend, in either protocol: its peek before the BEGIN
// and its check in the first read's snapshot read the views
// settled_writes and pin_state (storage version 26). Before, each called
// the PL/pgSQL functions pin_peek and pin_check, about 30 us of backend
// CPU per call. In a session that restricts non-system views (as pg_dump's
// does), which cannot read them, the peek's refusal is not shown and the
// session calls pin_peek instead, still without the gate; once two of its
// pins counted the same writes it calls pin_peek no more (the last pin's
// count stands in for it: proxy/txn.go, settledWrites); and the check
// that rides with its first read calls no pin_check: it reads the
// sequences, which are no views (storage version 32). It counts
// the calls as pg_stat_user_functions does (track_functions = all for the
// client's role).
func TestReadOnlyTxnCallsNoFunction(t *testing.T) {
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	admin := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, admin, "GRANT CREATE ON SCHEMA public TO "+role,
		"ALTER ROLE "+role+" IN DATABASE "+db+" SET track_functions = 'all'")
	p := startProxy(t)
	free := connectTo(t, ctx, p.URL(role, db))
	restricted := connectTo(t, ctx, p.URL(role, db)+"&options=-c%20restrict_nonsystem_relation_kind%3Dview")
	mustExec(t, ctx, free, "CREATE TABLE rofn (k int PRIMARY KEY, v bigint)", "INSERT INTO rofn VALUES (1, 0), (2, 0)")

	round := 0
	for _, c := range []*pgx.Conn{free, restricted} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			round++
			// A write: the first transaction's pin settles it (with the
			// gate), the others need no lock.
			var v int64
			if err := free.QueryRow(ctx, "UPDATE rofn SET v = v + 1 WHERE k = 1 RETURNING v", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil {
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
			peeks, checks := after["pin_peek"]-before["pin_peek"], after["pin_check"]-before["pin_check"]
			t.Logf("round %d (%v): %d read-only transactions called mzproxy's functions %d times (pin_peek %d, pin_check %d)",
				round, mode, txns, total, peeks, checks)
			// The gated pin (a function) runs when P fell a second behind
			// the clock (the tick on a loaded machine): a few times at most.
			if c == free && total > txns/4 {
				t.Fatalf("round %d (%v): %d lock-free read-only transactions called mzproxy's functions %d times; want (almost) none",
					round, mode, txns, total)
			}
			if c == restricted && (peeks > 2 || total-peeks > txns/4) {
				t.Fatalf("round %d (%v), views restricted: %d read-only transactions called pin_peek %d times, pin_check %d, others %d; want pin_peek only until two pins agree, (almost) no pin_check or gated pin",
					round, mode, txns, peeks, checks, total-peeks-checks)
			}
		}
	}
}
