package planner

import (
	"fmt"
	"testing"
)

// TestSplicedPlanAllocations: planning a cached timestamped read with new
// literals (a Template and a Bound spliced from the skeleton's pieces)
// takes a bounded number of allocations (issue 15: the proxy plans each
// simple-Query read twice, with no catalog and with the database's; the
// texts grown piece by piece took a dozen more).
func TestSplicedPlanAllocations(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "pgbench_accounts", "aid", "bid", "abalance", "filler")
	opts := Options{SearchPath: []string{"public"}}
	for _, c := range []struct {
		name, format string
		most         float64
	}{
		{"tsread", "SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = %d", 22},
		{"asof", "SELECT abalance FROM pgbench_accounts WHERE aid = %d AND bid > 2 AS OF 1796137811143", 26},
	} {
		p := New(128)
		texts := make([]string, 512)
		for i := range texts {
			texts[i] = fmt.Sprintf(c.format, 100+i*7919%100000)
		}
		for _, text := range texts[:2] { // the skeleton's literal plan
			if _, err := p.Plan(text, cat, opts); err != nil {
				t.Fatal(err)
			}
		}
		i := 2
		allocs := testing.AllocsPerRun(len(texts)-3, func() {
			stmts, err := p.Plan(texts[i], cat, opts)
			i++
			if err != nil || len(stmts) != 1 || stmts[0].Bound == nil {
				t.Fatalf("%q: %v, %+v", texts[i-1], err, stmts)
			}
		})
		t.Logf("%s: %.0f allocations per plan", c.name, allocs)
		if allocs > c.most {
			t.Errorf("%s: %.0f allocations per plan, want at most %.0f", c.name, allocs, c.most)
		}
	}
}
