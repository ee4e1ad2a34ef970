package proxy

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/planner"
)

// boundStatement plans sql's skeleton twice (a skeleton's literal plan is
// made at its second text) and returns sql's statement, which has a Bound.
func boundStatement(t *testing.T, other, sql string) *planner.Statement {
	t.Helper()
	p := planner.New(16)
	for _, text := range []string{other, sql} {
		if _, err := p.Plan(text, emptyCatalog{}, planner.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	stmts, err := p.Plan(sql, emptyCatalog{}, planner.Options{})
	if err != nil || len(stmts) != 1 || stmts[0].Bound == nil {
		t.Fatalf("plan of %q: %v, %+v", sql, err, stmts)
	}
	return stmts[0]
}

// TestBoundReadMessages: a prepared read's messages carry its literals
// and its timestamp as parameters, and the statement is parsed once.
func TestBoundReadMessages(t *testing.T) {
	st := boundStatement(t, "SELECT a, mz_now() FROM t WHERE id = 1 AND b > 2",
		"SELECT a, mz_now() FROM t WHERE id = 17 AND b > 3")
	var r readStatements
	g := guardKey{rev: 1, path: "public"}
	if br := r.boundReadOf(st.Bound, g, "", 5); br != nil {
		t.Fatalf("first use prepared: %+v", br.msgs)
	}
	for i, wantParse := range []bool{true, false} {
		br := r.boundReadOf(st.Bound, g, "", uint64(1000+i))
		if br == nil || br.parsed != wantParse {
			t.Fatalf("use %d: %+v, want parsed %v", i+2, br, wantParse)
		}
		bind := br.msgs[len(br.msgs)-4].(*pgproto3.Bind)
		var got []string
		for _, v := range bind.Parameters {
			got = append(got, string(v))
		}
		want := []string{"17", "3", []string{"1000", "1001"}[i]}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("use %d: parameters %q, want %q", i+2, got, want)
		}
		if len(br.msgs) != len(br.units) {
			t.Errorf("use %d: %d messages, %d units", i+2, len(br.msgs), len(br.units))
		}
	}
}

// TestBoundReadAllocations: a repeated prepared read's messages are made
// with a bounded number of allocations (issue 15: the proxy's CPU per
// timestamped read; growing its message and unit slices one message at a
// time took eight more, rendering the text of each read's Bound three
// more). Each read has its own literal, as a client's do.
func TestBoundReadAllocations(t *testing.T) {
	p := planner.New(16)
	bounds := make([]*planner.Bound, 203)
	for i := range bounds {
		stmts, err := p.Plan(fmt.Sprintf("SELECT a, mz_now() FROM t WHERE id = %d", 17+i), emptyCatalog{}, planner.Options{})
		if err != nil {
			t.Fatal(err)
		}
		bounds[i] = stmts[0].Bound
	}
	var r readStatements
	g := guardKey{rev: 1, path: "public"}
	r.boundReadOf(bounds[1], g, "", 5)
	r.boundReadOf(bounds[2], g, "", 5) // prepared now
	i := 3
	allocs := testing.AllocsPerRun(len(bounds)-4, func() {
		br := r.boundReadOf(bounds[i], g, "", 12345)
		if br == nil || br.parsed {
			t.Fatalf("read %d: %+v, not prepared before", i, br)
		}
		i++
	})
	// The parameter string, buffer, slices, the four messages, the read
	// and its forget function.
	const most = 9
	if allocs > most {
		t.Errorf("%.0f allocations per prepared read, want at most %d", allocs, most)
	}
	t.Logf("%.0f allocations per prepared read", allocs)
}
