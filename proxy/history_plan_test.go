package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// historySession is a history-mode session against the test server with
// a new managed table of one row, (1, 4711).
func historySession(tb testing.TB, ctx context.Context) (*Session, *clientBuffer, string) {
	s, client := openSession(tb, ctx, Config{HistoryReads: true})
	table := fmt.Sprintf("hplan_%d", time.Now().UnixNano())
	for _, sql := range []string{
		"CREATE TABLE " + table + " (k int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO " + table + " VALUES (1, 4711)",
	} {
		if out := query(tb, ctx, s, client, sql); strings.Contains(out, "ERROR") {
			tb.Fatalf("%s: %s", sql, out)
		}
	}
	return s, client, table
}

// TestHistoryReadPlannedOnce: in history mode a plain read that misses the
// plan cache (the SLT corpus's reads: each text another shape) is planned
// once, with the catalog, over both protocols: not first with the empty
// catalog for its shape (the session-setting check and planExplicit's
// own), which parsed and analysed it a second time (docs/corpus-cost.md).
// A locking read, which that path leaves to the shape, still answers.
func TestHistoryReadPlannedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, client, table := historySession(t, ctx)
	send := func(msgs ...pgproto3.FrontendMessage) string {
		t.Helper()
		for _, m := range msgs {
			frame, err := m.Encode(nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Handle(ctx, m, frame); err != nil {
				t.Fatalf("%T: %v", m, err)
			}
		}
		return client.take()
	}
	// Each text its own shape: one more condition each time.
	text := func(i int) string {
		return "SELECT v FROM " + table + " WHERE k = 1" + strings.Repeat(" AND k > 0", i)
	}
	query(t, ctx, s, client, text(0)) // the catalog seen, the guard prepared
	const n = 10
	for _, protocol := range []string{"simple", "extended"} {
		before := s.proxy.planner.Stats()
		for i := 1; i <= n; i++ {
			sql := text(i)
			if protocol == "extended" {
				sql = text(n + i)
			}
			var out string
			if protocol == "simple" {
				out = query(t, ctx, s, client, sql)
			} else {
				out = send(&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'},
					&pgproto3.Execute{}, &pgproto3.Sync{})
			}
			if !strings.Contains(out, "4711") || strings.Contains(out, "ERROR") {
				t.Fatalf("%s (%s): %q", sql, protocol, out)
			}
		}
		after := s.proxy.planner.Stats()
		if misses := after.Misses - before.Misses; misses != n {
			t.Errorf("%d new reads (%s) missed the plan cache %d times, want %d (planned once each)", n, protocol, misses, n)
		}
	}
	// A locking read is no history read (planExplicit's shape decides).
	if out := query(t, ctx, s, client, "SELECT v FROM "+table+" WHERE k = 1 FOR SHARE"); !strings.Contains(out, "4711") || strings.Contains(out, "ERROR") {
		t.Fatalf("FOR SHARE: %q", out)
	}
}

// BenchmarkHistoryReadNewText is a history-mode read of a text the plan
// cache has not seen (the SLT corpus's case; the cache is emptied before
// each): the proxy's allocations and CPU per read, the backend's round
// trips included in its time.
func BenchmarkHistoryReadNewText(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, client, table := historySession(b, ctx)
	sql := "SELECT v FROM " + table + " WHERE k = 1 AND v > 0"
	query(b, ctx, s, client, sql)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		s.proxy.planner.Purge()
		if out := query(b, ctx, s, client, sql); !strings.Contains(out, "4711") {
			b.Fatalf("%q", out)
		}
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}
