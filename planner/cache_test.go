package planner

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestCacheHitsAndRevisions(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a")
	p := New(16)
	opts := Options{SearchPath: []string{"public"}}
	q := "SELECT * FROM t AS OF 5"

	first, err := p.Plan(q, cat, opts)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := p.Plan(q, cat, opts)
	if &first[0] != &second[0] || first[0] != second[0] {
		t.Fatal("a hit must return the cached plan")
	}
	// Two entries: the text's plan, and its skeleton seen once (literals.go).
	if s := p.Stats(); s.Hits != 1 || s.Misses != 1 || s.Len != 2 {
		t.Fatalf("stats %+v", s)
	}

	// Other keys: search_path and history mode.
	p.Plan(q, cat, Options{SearchPath: []string{"s", "public"}})
	p.Plan(q, cat, Options{SearchPath: []string{"public"}, ExplicitTimestamp: true})
	if s := p.Stats(); s.Misses != 3 {
		t.Fatalf("stats %+v", s)
	}

	// DDL on an unrelated table: the revision moves, the plan is re-validated
	// and reused.
	cat.addTable("public", "other", "x")
	again, _ := p.Plan(q, cat, opts)
	if again[0] != first[0] {
		t.Fatal("an unrelated change must not invalidate the plan")
	}
	if s := p.Stats(); s.Hits != 2 || s.Misses != 3 {
		t.Fatalf("stats %+v", s)
	}

	// A change to t (new column) invalidates it.
	cat.addTable("public", "t", "a", "b")
	changed, _ := p.Plan(q, cat, opts)
	if changed[0] == first[0] || changed[0].Inputs[0].ID == first[0].Inputs[0].ID {
		t.Fatal("a change to a dependency must re-plan")
	}
	// A name that was unmanaged and becomes managed invalidates too.
	q2 := "SELECT * FROM later"
	before, _ := p.Plan(q2, cat, opts)
	if before[0].Reads[0].Managed() {
		t.Fatal("later is not managed yet")
	}
	cat.addTable("public", "later", "z")
	after, _ := p.Plan(q2, cat, opts)
	if !after[0].Reads[0].Managed() {
		t.Fatal("later is managed now")
	}
	// Dropping a view's base changes nothing for the view's plan but the
	// lookup of the base: re-plan.
	cat.addView("public", "v", "SELECT later.z FROM public.later;", "z")
	p.Plan("SELECT * FROM v", cat, opts)
	cat.drop("public", "later")
	if _, err := p.Plan("SELECT * FROM v", cat, Options{SearchPath: []string{"public"}, ExplicitTimestamp: true}); err != nil {
		t.Fatal(err)
	}

	// Errors are not cached.
	if _, err := p.Plan("SELEC 1", cat, opts); err == nil {
		t.Fatal("want a syntax error")
	}
	n := p.Stats().Len
	p.Plan("SELEC 1", cat, opts)
	if p.Stats().Len != n {
		t.Fatal("errors must not be cached")
	}
	p.Purge()
	if p.Stats().Len != 0 {
		t.Fatal("purge")
	}
}

func TestCacheConcurrent(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a")
	p := New(4)
	queries := []string{"SELECT 1", "SELECT * FROM t", "SELECT * FROM t AS OF 3", "INSERT INTO t VALUES (1)",
		"SELECT a FROM t WHERE a = $1", "BEGIN", "COMMIT"}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				q := queries[(i+g)%len(queries)]
				st, err := p.Plan(q, cat, Options{SearchPath: []string{"public"}, ExplicitTimestamp: i%2 == 0})
				if err != nil || len(st) != 1 {
					t.Errorf("%s: %v", q, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	s := p.Stats()
	if s.Hits+s.Misses != 8*200 {
		t.Fatalf("stats %+v", s)
	}
}

func BenchmarkPlanCached(b *testing.B) {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a", "b")
	p := New(128)
	opts := Options{SearchPath: []string{"public"}}
	q := "SELECT a, b FROM t WHERE a = $1"
	if _, err := p.Plan(q, cat, opts); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Plan(q, cat, opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlanUncached(b *testing.B) {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a", "b")
	p := New(0)
	opts := Options{SearchPath: []string{"public"}}
	q := "SELECT a, b FROM t WHERE a = $1"
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := p.Plan(q, cat, opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlanRewrite(b *testing.B) {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a", "b")
	p := New(0)
	opts := Options{SearchPath: []string{"public"}}
	q := "SELECT a, b FROM t WHERE a = $1 AS OF 1700000000000"
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := p.Plan(q, cat, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanRepeatedLiterals plans pgbench-style simple-protocol
// statements that differ only in their literals, as a client sends them:
// each one is new text.
func BenchmarkPlanRepeatedLiterals(b *testing.B) {
	cat := newFakeCatalog()
	cat.addTable("public", "pgbench_accounts", "aid", "bid", "abalance", "filler")
	opts := Options{SearchPath: []string{"public"}}
	for _, bc := range []struct {
		name string
		text func(i int) string
	}{
		{"select", func(i int) string {
			return fmt.Sprintf("SELECT abalance FROM pgbench_accounts WHERE aid = %d;", i*7919%100000)
		}},
		{"update", func(i int) string {
			return fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = %d;", i%5000-2500, i*7919%100000)
		}},
		{"tsread", func(i int) string {
			return fmt.Sprintf("SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = %d;", i*7919%100000)
		}},
		{"asof", func(i int) string {
			return fmt.Sprintf("SELECT abalance FROM pgbench_accounts WHERE aid = %d AS OF 1796137811143;", i*7919%100000)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := New(128)
			texts := make([]string, 1024)
			for i := range texts {
				texts[i] = bc.text(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				if _, err := p.Plan(texts[i%len(texts)], cat, opts); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time, unlike ns/op, does not count the time other
			// processes of a busy machine take.
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the process's user and system CPU time in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestFingerprintedOncePerText (issue 15): a session plans a timestamped
// read's text several times in a row (with no catalog for its kind, then
// with the catalog); its new literals are lexed once, not at each plan, and
// every plan is the one the text gets alone.
func TestFingerprintedOncePerText(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a", "b")
	opts := Options{SearchPath: []string{"public"}}
	p := New(16)
	for i := range 3 {
		q := fmt.Sprintf("SELECT b, mz_now() FROM t WHERE a = %d", 100+i)
		for range 2 {
			if _, err := p.Plan(q, newFakeCatalog(), Options{}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := p.Plan(q, cat, opts)
		if err != nil {
			t.Fatal(err)
		}
		want, err := New(16).Plan(q, cat, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].SQL != want[0].SQL || got[0].Template.Render("T") != want[0].Template.Render("T") {
			t.Fatalf("%s: planned as %q, alone as %q", q, got[0].Template.Render("T"), want[0].Template.Render("T"))
		}
	}
	if made := p.fingerprints.made.Load(); made != 3 {
		t.Fatalf("%d fingerprints made for 3 texts planned 3 times each; want 3", made)
	}
}

// TestPlanMemoRepeatedText (issue 15): a session plans one query string
// several times in a row with the same catalog; a timestamped read whose
// plan the cache makes from its skeleton (literals.go) is spliced once,
// not at each call: the calls after the first return the same statements.
func TestPlanMemoRepeatedText(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a")
	p := New(16)
	opts := Options{SearchPath: []string{"public"}}
	// Two texts of the skeleton: its literal plan is made.
	for _, q := range []string{"SELECT a, mz_now() FROM t WHERE a = 1", "SELECT a, mz_now() FROM t WHERE a = 2"} {
		if _, err := p.Plan(q, cat, opts); err != nil {
			t.Fatal(err)
		}
	}
	q := "SELECT a, mz_now() FROM t WHERE a = 3"
	first, err := p.Plan(q, cat, opts)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := p.Plan(q, cat, opts)
	if again[0] != first[0] {
		t.Fatal("the same text with the same catalog must return the statements returned last")
	}
	// Another catalog value, or a new revision, plans again.
	cat.addTable("public", "other", "x")
	moved, _ := p.Plan(q, cat, opts)
	if moved[0] == first[0] {
		t.Fatal("a plan remembered at another revision must not be returned unchecked")
	}
}

// TestPlanCacheTellsCatalogsApart: the catalogs of two databases may be at
// the same revision with other tables under the same names; a plan made
// with one is not returned for the other without checking its lookups.
func TestPlanCacheTellsCatalogsApart(t *testing.T) {
	one, two := newFakeCatalog(), newFakeCatalog()
	one.addTable("public", "t", "a")
	two.addTable("public", "unrelated", "z")
	two.drop("public", "unrelated")
	two.addTable("public", "t", "a", "b")
	for one.Revision() < two.Revision() {
		one.addTable("public", fmt.Sprintf("pad%d", one.Revision()), "p")
	}
	if one.Revision() != two.Revision() {
		t.Fatalf("revisions %d and %d", one.Revision(), two.Revision())
	}
	p := New(16)
	opts := Options{SearchPath: []string{"public"}}
	for _, q := range []string{"SELECT * FROM t AS OF 5", "SELECT a, mz_now() FROM t WHERE a = 1"} {
		if _, err := p.Plan(q, one, opts); err != nil {
			t.Fatal(err)
		}
		got, err := p.Plan(q, two, opts)
		if err != nil {
			t.Fatal(err)
		}
		want := two.objs[QualifiedName{"public", "t"}]
		if in := got[0].Inputs; len(in) != 1 || in[0].ID != want.ID || got[0].Template.RenderParam() == "" ||
			!strings.Contains(got[0].Template.RenderParam(), want.History.Name) {
			t.Fatalf("%s with the second catalog: inputs %v, %q; want table %d read from %s",
				q, in, got[0].Template.RenderParam(), want.ID, want.History.Name)
		}
	}
}
