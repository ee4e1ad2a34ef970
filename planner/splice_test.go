package planner

import (
	"fmt"
	"testing"
)

// TestSplicedPlanAllocations: planning a cached timestamped read with new
// literals (a Template and a Bound spliced from the skeleton's pieces)
// takes a bounded number of allocations (issue 15: the proxy plans each
// simple-Query read twice, with no catalog and with the database's; the
// texts grown piece by piece took a dozen more; a Bound whose literals are
// all parameters shares its Template, made once: 5 fewer).
func TestSplicedPlanAllocations(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "pgbench_accounts", "aid", "bid", "abalance", "filler")
	opts := Options{SearchPath: []string{"public"}}
	for _, c := range []struct {
		name, format string
		most         float64
	}{
		{"tsread", "SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = %d", 16},
		{"asof", "SELECT abalance FROM pgbench_accounts WHERE aid = %d AND bid > 2 AS OF 1796137811143", 21},
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

// TestShapeAllocations: Shape of a text whose skeleton's plan is cached
// splices nothing, only fingerprints the text (Plan: 20, 25 and 9), and
// the shape of the same text again is remembered (issue 15: the proxy's kind, settings and route checks
// of each timestamped read spliced a plan they did not use), and its
// statements have the kinds and flags of the text's own plan.
func TestShapeAllocations(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "pgbench_accounts", "aid", "bid", "abalance", "filler")
	opts := Options{SearchPath: []string{"public"}}
	for _, c := range []struct {
		name, format string
		most         float64
	}{
		{"tsread", "SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = %d", 7},
		{"asof", "SELECT abalance FROM pgbench_accounts WHERE aid = %d AND bid > 2 AS OF 1796137811143", 11},
		{"write", "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = %d", 7},
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
			stmts, err := p.Shape(texts[i], cat, opts)
			i++
			if err != nil || len(stmts) != 1 {
				t.Fatalf("%q: %v, %+v", texts[i-1], err, stmts)
			}
		})
		t.Logf("%s: %.0f allocations per shape", c.name, allocs)
		if allocs > c.most {
			t.Errorf("%s: %.0f allocations per shape, want at most %.0f", c.name, allocs, c.most)
		}
		text := fmt.Sprintf(c.format, 31337)
		shape, err := p.Shape(text, cat, opts)
		if err != nil {
			t.Fatal(err)
		}
		if again := testing.AllocsPerRun(10, func() { _, _ = p.Shape(text, cat, opts) }); again != 0 {
			t.Errorf("%s: %.0f allocations per shape of the same text again", c.name, again)
		}
		full, err := New(0).Plan(text, cat, opts)
		if err != nil {
			t.Fatal(err)
		}
		s, f := shape[0], full[0]
		if s.Kind != f.Kind || s.Tag != f.Tag || s.Params != f.Params || s.UsesMzNow != f.UsesMzNow ||
			s.Locking != f.Locking || (s.AsOf == nil) != (f.AsOf == nil) || (s.Template == nil) != (f.Template == nil) {
			t.Errorf("%s: shape %+v, plan %+v", c.name, s, f)
		}
		// Plan still gives the text's own statement, not the shape's.
		planned, err := p.Plan(text, cat, opts)
		if err != nil || planned[0].SQL != f.SQL {
			t.Errorf("%s: plan after shape: %v, SQL %q, want %q", c.name, err, planned[0].SQL, f.SQL)
		}
	}
}
