package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// mzproxyFunctionCalls is how many times the role's sessions in the
// database called each of mzproxy's functions, as counted with
// track_functions = all. conn, a session of the role, first has its own
// counts flushed to the shared statistics: pg_stat_force_next_flush makes
// its backend flush them before it answers ReadyForQuery.
func mzproxyFunctionCalls(t *testing.T, ctx context.Context, conn, admin *pgx.Conn) map[string]int64 {
	t.Helper()
	if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.Query(ctx, "SELECT funcname::text, calls FROM pg_stat_user_functions WHERE schemaname = 'mzproxy'")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		calls[name] += n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return calls
}

// TestGuardPinCallsNoFunction (issue 15): a timestamped read of the present
// whose pin needs no lock (no write since the last pin) runs none of
// mzproxy's functions, PL/pgSQL or other: its guard reads the view
// settled_pin, and calls pin() only when that is NULL. Simple and
// prepared reads, as an ordinary role whose functions calls the backend
// counts (track_functions = all for that role only: the proxy's own work
// as the backend role is not counted). A read after a write still sees it.
func TestGuardPinCallsNoFunction(t *testing.T) {
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	admin := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, admin, "GRANT CREATE ON SCHEMA public TO "+role,
		"ALTER ROLE "+role+" IN DATABASE "+db+" SET track_functions = 'all'")
	p := startProxy(t)
	c := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, c, "CREATE TABLE acct (k int PRIMARY KEY, v bigint)", "INSERT INTO acct VALUES (1, 0)")
	const tsread = "SELECT v, mz_now() FROM acct WHERE k = 1"
	var last int64
	read := func(mode pgx.QueryExecMode, want int64) {
		t.Helper()
		var v, ts int64
		if err := c.QueryRow(ctx, tsread, mode).Scan(&v, &ts); err != nil || v != want || ts < last {
			t.Fatalf("%s: %d at %d, %v; want %d at or after %d", tsread, v, ts, err, want, last)
		}
		last = ts
	}

	var v int64
	for round := range 2 {
		// A write: the next read's pin settles it (pin(), or the tick).
		if err := c.QueryRow(ctx, "UPDATE acct SET v = v + 1 WHERE k = 1 RETURNING v", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil {
			t.Fatal(err)
		}
		read(pgx.QueryExecModeSimpleProtocol, v)
		read(pgx.QueryExecModeCacheStatement, v)
		before := mzproxyFunctionCalls(t, ctx, c, admin)
		const reads = 40
		for range reads / 2 {
			read(pgx.QueryExecModeSimpleProtocol, v)
			read(pgx.QueryExecModeCacheStatement, v)
		}
		after := mzproxyFunctionCalls(t, ctx, c, admin)
		var total int64
		for name, n := range after {
			total += n - before[name]
		}
		t.Logf("round %d: %d reads called mzproxy's functions %d times (pin() %d)", round, reads, total, after["pin"]-before["pin"])
		// Every timestamped read has its timestamp from the guard or from
		// pin() (ReadTSSQL): none called means the guard's view answered.
		// pin() runs when P fell a second behind the clock (the tick on
		// a loaded machine): not more than a few times in 40 reads.
		if total > reads/4 {
			t.Fatalf("round %d: %d lock-free timestamped reads called mzproxy's functions %d times (pin() %d); want (almost) none",
				round, reads, total, after["pin"]-before["pin"])
		}
	}

}
