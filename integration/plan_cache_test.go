package integration

import (
	"fmt"
	"strconv"
	"testing"
)

// TestPlanCacheRepeatedLiterals: statements that differ only in their
// literals share a plan (the plan cache's misses do not grow with them),
// and each still runs with its own literals: writes land their own
// values, and reads AS OF a literal timestamp, whose plans hold the
// literal, see their own timestamp's data.
func TestPlanCacheRepeatedLiterals(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	addr := p.metricsAddr(t)
	awaitReady(t, addr)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE fp (k int, v text) WITH (RETAIN HISTORY FOR '1h')", simple(conn)); err != nil {
		t.Fatal(err)
	}
	misses := func() float64 {
		_, m := get(t, addr, "/metrics")
		return metricValue(t, m, "mzproxy_plan_cache_misses_total")
	}

	// The first INSERT is planned; the next ones are hits.
	const n = 40
	var ts []uint64
	before := misses()
	for i := 1; i <= n; i++ {
		q := fmt.Sprintf("INSERT INTO fp VALUES (%d, 'v%d')", i, i)
		if _, err := conn.Exec(ctx, q, simple(conn)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		ts = append(ts, readTS(t, ctx, conn))
	}
	// Generous: the proxy plans a few statements of its own, but not one
	// per INSERT (each INSERT was several misses before the fingerprint).
	if d := misses() - before; d >= n/2 {
		t.Fatalf("%d INSERTs differing in literals: %v plan cache misses, want a few", n, d)
	}

	var count, sum int
	if err := conn.QueryRow(ctx, "SELECT count(*), sum(k) FROM fp WHERE v = 'v' || k", simple(conn)).Scan(&count, &sum); err != nil {
		t.Fatal(err)
	}
	if count != n || sum != n*(n+1)/2 {
		t.Fatalf("rows %d with sum %d, want %d with sum %d: an INSERT ran with another's literals", count, sum, n, n*(n+1)/2)
	}

	// AS OF <literal>: each read sees the rows written up to its timestamp.
	for i := n - 1; i >= 0; i -= 7 {
		q := "SELECT count(*) FROM fp WHERE k > 0 AS OF " + strconv.FormatUint(ts[i], 10)
		if err := conn.QueryRow(ctx, q, simple(conn)).Scan(&count); err != nil || count != i+1 {
			t.Fatalf("%s: %d rows, %v; want %d", q, count, err, i+1)
		}
	}
	// A literal-only difference that is a syntax error is still one.
	_, err := conn.Exec(ctx, "INSERT INTO fp VALUES (1, 'unterminated)", simple(conn))
	if code, _, _ := errParts(err); code != "42601" {
		t.Fatalf("unterminated literal: %v, want 42601", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO fp VALUES (99, 'ok')", simple(conn)); err != nil {
		t.Fatalf("after the error: %v", err)
	}
}
