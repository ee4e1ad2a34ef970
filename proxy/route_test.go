package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mzproxy/mzproxy/planner"
)

// TestPlainReadRemembersLastAnswer: the session's plainRead answers as
// planner.PlainRead does for every text, also when texts alternate and
// when an equal text comes in another string.
func TestPlainReadRemembersLastAnswer(t *testing.T) {
	s := &Session{}
	texts := []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = $1",
		"UPDATE pgbench_accounts SET abalance = 1 WHERE aid = $1",
		"SELECT abalance FROM pgbench_accounts WHERE aid = $1",
		strings.Clone("SELECT abalance FROM pgbench_accounts WHERE aid = $1"),
		"select 1; select 2",
		"select mz_now()",
		"",
		"with x as (select 1) select * from x",
		"with x as (delete from t returning 1) select * from x",
	}
	for round := 0; round < 2; round++ {
		for _, sql := range texts {
			for range 2 {
				if got, want := s.plainRead(sql), planner.PlainRead(sql); got != want {
					t.Fatalf("plainRead(%q) = %v, planner.PlainRead says %v", sql, got, want)
				}
			}
		}
	}
}

// TestTimestampedReadChecksSpliceNothing: the checks a simple Query's
// timestamped read goes through before it is planned with the catalog
// (its metric kind, settings, route) take the shape of its cached skeleton
// and splice nothing (issue 15: each spliced the text's literals into a
// plan of its own, half the cost of planning it).
func TestTimestampedReadChecksSpliceNothing(t *testing.T) {
	p := planner.New(64)
	s := &Session{proxy: &Proxy{planner: p}}
	texts := make([]string, 402)
	for i := range texts {
		texts[i] = fmt.Sprintf("SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = %d", 1+i*7919%100000)
	}
	for _, text := range texts[:2] { // the skeleton's literal plan
		if _, err := p.Plan(text, emptyCatalog{}, planner.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	i := 2
	allocs := testing.AllocsPerRun(len(texts)-3, func() {
		text := texts[i]
		i++
		if kind := s.statementKind(text); kind != planner.KindRead.String() {
			t.Fatalf("kind of %q: %s", text, kind)
		}
		if s.trackSettings(text) != nil || s.routeOf(text) != (route{}) {
			t.Fatalf("%q: settings or route", text)
		}
	})
	t.Logf("%.0f allocations per read's checks", allocs)
	// The text's fingerprint and skeleton (the plan with the catalog
	// uses them too), its shape remembered; a spliced plan took 20 more.
	const most = 8
	if allocs > most {
		t.Errorf("%.0f allocations per read's checks, want at most %d", allocs, most)
	}
}

// TestRouteSlotOnlyInBlock: only strings whose slot-taking statements
// are all catalog-neutral DDL, with no transaction control, may run
// outside a block without the write slot.
func TestRouteSlotOnlyInBlock(t *testing.T) {
	s := &Session{proxy: &Proxy{planner: planner.New(64)}}
	for sql, want := range map[string]bool{
		"CREATE INDEX i ON t (a)":                           true,
		"create index on t using hash (a) where b > 0":      true,
		"DROP INDEX i":                                      true,
		"DROP INDEX i, j; CREATE INDEX k ON t (b)":          true,
		"CREATE UNIQUE INDEX i ON t (a)":                    false,
		"CREATE INDEX i ON t (a); INSERT INTO t VALUES (1)": false,
		"BEGIN; CREATE INDEX i ON t (a)":                    false,
		"CREATE INDEX i ON t (a); COMMIT":                   false,
		"DROP TABLE t":                                      false,
		"CREATE VIEW v AS SELECT 1":                         false,
		"ALTER INDEX i RENAME TO j":                         false,
	} {
		r := s.routeOf(sql)
		if !r.write {
			t.Errorf("%q: no write slot at all", sql)
		}
		if r.slotOnlyInBlock != want {
			t.Errorf("%q: slotOnlyInBlock %v, want %v", sql, r.slotOnlyInBlock, want)
		}
	}
}
