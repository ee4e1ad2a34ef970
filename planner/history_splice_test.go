package planner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHistoryRewriteSpliced: the reads a rewrite can splice into their
// text are spliced (their plan makes no deparse), the others take the
// parse tree's way; both ways give one statement (FuzzRewrite, whose
// seeds include these, checks that for each).
func TestHistoryRewriteSpliced(t *testing.T) {
	cat := fuzzCatalog()
	opts := Options{SearchPath: []string{"public"}, ExplicitTimestamp: true}
	for _, c := range []struct {
		sql     string
		spliced bool
	}{
		{"SELECT a FROM t WHERE a = 5", true},
		{"select a from t x where x.a > 1", true},
		{"SELECT * FROM t AS x(c, d), u WHERE c = u.x", true},
		{"SELECT * FROM (t JOIN u ON t.a = u.x) LEFT JOIN t AS t2 USING (a)", true},
		{`SELECT * FROM "t" WHERE a IN (SELECT x FROM "u" AS "U")`, true},
		{"SELECT * FROM public.t", false}, // public.t.a could be written
		{"SELECT a FROM t WHERE a = 5 AS OF 7", true},
		{"WITH w AS (SELECT * FROM t) SELECT * FROM w, u", true},
		{"SELECT a - 5, - 5 FROM t", true},
		{"SELECT public.t.a FROM public.t", false}, // a column qualified with the schema
		{"SELECT * FROM ONLY t", false},
		{"SELECT * FROM t *", false},
		{"TABLE t", false},
		{"SELECT a FROM t -- after the statement\n", true},
		{"SELECT a /* in it */ FROM t", false},
		{"SELECT a, mz_now() FROM t", false},
		{"SELECT * FROM v", false}, // a view's definition put in
		{`SELECT * FROM U&"t"`, false},
	} {
		before := deparses.Load()
		stmts, err := New(0).Plan(c.sql, cat, opts)
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		tm := stmts[0].Template
		if tm == nil || tm.Holes() == 0 {
			t.Fatalf("%q: not rewritten", c.sql)
		}
		if tm.spliced != c.spliced || (deparses.Load() == before) != c.spliced {
			t.Errorf("%q: spliced %v (deparsed %d), want spliced %v:\n%s", c.sql, tm.spliced, deparses.Load()-before, c.spliced, tm.RenderParam())
		}
		checkTemplate(t, stmts[0], cat)
		checkSplicedAsDeparsed(t, c.sql, cat, opts, stmts)
	}
}

// BenchmarkHistoryPlanCorpus plans the queries of the sqllogictest
// corpus's select1.test (MZPROXY_SLT_DIR) under --history-reads, each
// text new to the cache as in the corpus, spliced and deparsed:
//
//	MZPROXY_SLT_DIR=/work/shared/slt/sqlite go test ./planner -run XXX -bench HistoryPlanCorpus
func BenchmarkHistoryPlanCorpus(b *testing.B) {
	dir := os.Getenv("MZPROXY_SLT_DIR")
	if dir == "" {
		b.Skip("MZPROXY_SLT_DIR is not set")
	}
	data, err := os.ReadFile(filepath.Join(dir, "select1.test"))
	if err != nil {
		b.Fatal(err)
	}
	var queries []string
	for _, rec := range strings.Split(string(data), "\n\n") {
		if !strings.HasPrefix(rec, "query") {
			continue
		}
		_, body, _ := strings.Cut(rec, "\n")
		sql, _, _ := strings.Cut(body, "\n----")
		queries = append(queries, sql)
	}
	cat := newFakeCatalog()
	cat.addTable("public", "t1", "a", "b", "c", "d", "e")
	opts := Options{SearchPath: []string{"public"}, ExplicitTimestamp: true}
	for _, splice := range []bool{true, false} {
		b.Run(fmt.Sprintf("spliced=%v", splice), func(b *testing.B) {
			defer func(was bool) { spliceRewrites = was }(spliceRewrites)
			spliceRewrites = splice
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := New(0).Plan(queries[i%len(queries)], cat, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
