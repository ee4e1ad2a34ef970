package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// readOnlyTxn returns a read-only transaction as bench/managed.sh's rotxn
// sends it (BEGIN, two point reads whose keys change, COMMIT, each a
// simple Query), on a session against the test server with a managed
// table of 1,000 rows, checking its answers; s is the session (its
// proxy's planner cache counts hits and misses).
func readOnlyTxn(tb testing.TB) (next func(), s *Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	tb.Cleanup(cancel)
	s, client := openSession(tb, ctx, Config{})
	table := fmt.Sprintf("rotxn_%d", time.Now().UnixNano())
	for _, sql := range []string{
		"CREATE TABLE " + table + " (aid int PRIMARY KEY, abalance int NOT NULL)",
		"INSERT INTO " + table + " SELECT g, 0 FROM generate_series(1, 1000) g",
	} {
		if out := query(tb, ctx, s, client, sql); strings.Contains(out, "ERROR") {
			tb.Fatalf("%s: %s", sql, out)
		}
	}
	aid := 0
	run := func(sql, want string) {
		if out := query(tb, ctx, s, client, sql); !strings.Contains(out, want) || strings.Contains(out, "ERROR") {
			tb.Fatalf("%s answered %q", sql, out)
		}
	}
	read := "SELECT abalance FROM " + table + " WHERE aid = "
	return func() {
		aid = aid%999 + 1
		run("BEGIN", "BEGIN")
		run(read+fmt.Sprint(aid), "SELECT 1")
		run(read+fmt.Sprint(aid+1), "SELECT 1")
		run("COMMIT", "COMMIT")
	}, s
}

// BenchmarkReadOnlyTxn is the proxy's side of bench/managed.sh's rotxn on
// the session's own path: its allocations are the proxy's (and the
// test's), its time includes the backend's four round trips.
func BenchmarkReadOnlyTxn(b *testing.B) {
	next, _ := readOnlyTxn(b)
	next()
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		next()
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// TestReadOnlyTxnPlanCacheHits: the reads of a read-only transaction that
// differ only in their literals are planned from the planner's cache (no
// parse: the cache normalizes literals), once the first has been planned.
func TestReadOnlyTxnPlanCacheHits(t *testing.T) {
	next, s := readOnlyTxn(t)
	next()
	next()
	before := s.proxy.planner.Stats()
	for range 20 {
		next()
	}
	after := s.proxy.planner.Stats()
	if misses := after.Misses - before.Misses; misses != 0 {
		t.Errorf("20 read-only transactions missed the plan cache %d times, want 0", misses)
	}
	t.Logf("20 transactions: %d cache hits", after.Hits-before.Hits)
}

// TestReadOnlyTxnAllocations bounds the allocations of a read-only
// transaction (BEGIN, two point reads, COMMIT) on the session's path, the
// test's own included (about 20: four Query encodings, texts and
// answers): 63 in session 13 (docs/read-cost.md).
func TestReadOnlyTxnAllocations(t *testing.T) {
	next, _ := readOnlyTxn(t)
	next()
	next()
	got := fewestAllocsPerRun(20, 5, next)
	t.Logf("%.1f allocations per read-only transaction", got)
	if got > 68 {
		t.Errorf("%.1f allocations per read-only transaction, want at most 68", got)
	}
}
