package planner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// fuzzCatalog is the catalog FuzzRewrite plans against: the names the seed
// corpus uses.
func fuzzCatalog() *fakeCatalog {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a", "b")
	cat.addTable("public", "u", "x")
	cat.addTable("s", "w", "k")
	cat.addView("public", "v", "SELECT t.a, t.b FROM public.t WHERE (t.b > 0);", "a", "b")
	cat.addView("public", "vv", "SELECT v.a FROM public.v UNION ALL SELECT u.x FROM public.u;", "a")
	return cat
}

// FuzzRewrite checks, for any input: planning never panics (nor crashes
// the deparser) and is deterministic; a rewritten statement re-parses; and
// planning the rewritten
// text again (it reads only history tables, which are unmanaged) changes
// nothing.
//
//	go test ./planner -run XXX -fuzz FuzzRewrite -fuzztime 30s
func FuzzRewrite(f *testing.F) {
	// Seeds: every statement of the golden files.
	files, _ := filepath.Glob("testdata/plan/*")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, block := range strings.Split(string(data), "\nplan") {
			_, rest, ok := strings.Cut(block, "\n")
			if !ok {
				continue
			}
			input, _, _ := strings.Cut(rest, "\n----")
			f.Add(input)
		}
	}
	cat := fuzzCatalog()
	f.Fuzz(func(t *testing.T, sql string) {
		for _, history := range []bool{false, true} {
			opts := Options{SearchPath: []string{"public"}, ExplicitTimestamp: history}
			stmts, err := New(0).Plan(sql, cat, opts)
			if err != nil {
				continue
			}
			again, err := New(0).Plan(sql, cat, opts)
			if err != nil || len(again) != len(stmts) {
				t.Fatalf("planning twice differs: %v", err)
			}
			for i, st := range stmts {
				if st.Template == nil {
					continue
				}
				if again[i].Template == nil || again[i].Template.RenderParam() != st.Template.RenderParam() {
					t.Fatalf("planning is not deterministic:\n%s", st.Template.RenderParam())
				}
				checkTemplate(t, st, cat)
			}
		}
	})
}

func checkTemplate(t *testing.T, st *Statement, cat Catalog) {
	t.Helper()
	out := st.Template.RenderParam()
	if _, err := pg.Parse(out); err != nil {
		t.Fatalf("rewritten statement does not parse: %v\n%s\nfrom: %s", err, out, st.SQL)
	}
	lit := st.Template.RenderLiteral(1700000000000)
	if _, err := pg.Parse(lit); err != nil {
		t.Fatalf("rewritten statement (literal) does not parse: %v\n%s", err, lit)
	}
	if st.Template.Holes() == 0 {
		return
	}
	again, err := New(0).Plan(out, cat, Options{SearchPath: []string{"public"}, ExplicitTimestamp: true})
	if err != nil {
		t.Fatalf("planning the rewritten statement: %v\n%s", err, out)
	}
	if len(again) != 1 {
		t.Fatalf("rewritten statement became %d statements\n%s", len(again), out)
	}
	if a := again[0].Template; a == nil || a.Holes() != 0 || a.RenderParam() != out {
		t.Fatalf("rewriting the rewritten statement is not a no-op:\n%s\n%v", out, a)
	}
}
