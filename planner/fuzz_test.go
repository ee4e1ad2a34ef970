package planner

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mzproxy/mzproxy/pgerr"
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
			checkSplicedAsDeparsed(t, sql, cat, opts, stmts)
		}
	})
}

// checkSplicedAsDeparsed: where a rewrite was spliced into the text
// (history_splice.go), the rewrite of the parse tree, deparsed, is the
// same statement: both parse to one tree (compared deparsed), and
// everything else planned is the same.
func checkSplicedAsDeparsed(t *testing.T, sql string, cat Catalog, opts Options, stmts []*Statement) {
	t.Helper()
	defer func(was bool) { spliceRewrites = was }(spliceRewrites)
	spliceRewrites = false
	deparsed, err := New(0).Plan(sql, cat, opts)
	if err != nil {
		if pgerr.Of(err) == pgerr.StatementTooComplex {
			return // the deparser's bound, which splicing does not have
		}
		t.Fatalf("planned spliced, not deparsed: %v", err)
	}
	if len(deparsed) != len(stmts) {
		t.Fatalf("%d statements spliced, %d deparsed", len(stmts), len(deparsed))
	}
	for i, st := range stmts {
		var a, b strings.Builder
		formatStatement(&a, st, "")
		formatStatement(&b, deparsed[i], "")
		if withoutTemplates(a.String()) != withoutTemplates(b.String()) {
			t.Fatalf("statement %d planned otherwise when spliced:\n%s\n%s", i, a.String(), b.String())
		}
		dts := templatesOf(deparsed[i])
		for k, tm := range templatesOf(st) {
			d := dts[k]
			if !tm.spliced {
				continue
			}
			if d.Holes() != tm.Holes() || d.param != tm.param {
				t.Fatalf("statement %d: templates differ in holes:\n%s\n%s", i, tm.RenderParam(), d.RenderParam())
			}
			if x, y := normalized(t, tm.RenderParam()), normalized(t, d.RenderParam()); x != y {
				t.Fatalf("statement %d: the spliced rewrite is another statement:\n%s\n%s", i, x, y)
			}
		}
	}
}

// withoutTemplates is formatStatement's text without its template lines.
func withoutTemplates(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l := strings.TrimSpace(l); !strings.HasPrefix(l, "template (") && !strings.HasPrefix(l, "inner template: ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// templatesOf are the Templates of st and the statements in it.
func templatesOf(st *Statement) []*Template {
	if st == nil {
		return nil
	}
	var out []*Template
	if st.Template != nil {
		out = append(out, st.Template)
	}
	out = append(out, templatesOf(st.Inner)...)
	if st.ExplainTimestamp != nil {
		out = append(out, templatesOf(st.ExplainTimestamp.Inner)...)
	}
	if st.Subscribe != nil {
		out = append(out, templatesOf(st.Subscribe.Query)...)
	}
	return out
}

// normalized is sql parsed and deparsed.
func normalized(t *testing.T, sql string) string {
	t.Helper()
	r, err := pg.Parse(sql)
	if err != nil {
		t.Fatalf("%v: %s", err, sql)
	}
	out, err := pg.Deparse(r)
	if err != nil {
		t.Fatalf("%v: %s", err, sql)
	}
	return out
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

// nestingShape makes an expression of n copies of a construct around (or
// beside) x: nested when it has an open and a close, chained with sep
// otherwise.
type nestingShape struct{ open, sep, close string }

func (s nestingShape) build(x string, n int) string {
	if s.sep != "" {
		return s.open + terms(x, s.sep, n) + s.close
	}
	return nest(s.open, x, s.close, n)
}

// nestingShapes are the constructs FuzzPlanNesting stacks: every way the
// grammar nests, and the lists and chains it keeps flat.
var nestingShapes = []nestingShape{
	{open: "(", close: ")"},
	{sep: " + "},
	{open: "(SELECT ", close: ")"},
	{open: "- "},
	{open: "NOT "},
	{close: "::int"},
	{open: "CASE WHEN true THEN ", close: " END"},
	{open: "ARRAY[", close: "]"},
	{open: "abs(", close: ")"},
	{sep: " AND "},
	{sep: " OR "},
	{open: "a IN (", sep: ", ", close: ")"},
	{sep: "; SELECT "},
	{open: "(SELECT a FROM t WHERE b OR a AND a IN (", close: "))"},
	{sep: " UNION SELECT "},
	{sep: " BETWEEN 1 AND "},
	{close: ` COLLATE "C"`},
	{close: " IS NULL"},
	{open: "(VALUES (", close: "))"},
	{open: "EXISTS (SELECT ", close: ")"},
	{close: " AT TIME ZONE 'UTC'"},
	{sep: " || "},
	{open: "ROW(", close: ")"},
	{open: "coalesce(1, ", close: ")"},
	{open: "(SELECT 1 FROM t JOIN u ON ", close: ")"},
	{open: "(WITH w AS (SELECT ", close: ") SELECT 1)"},
	{open: "(SELECT * FROM (SELECT ", close: ") s)"},
	{open: "a[", close: "]"},
	{open: "(SELECT 1 FROM t WHERE a = 1 AND b = 2 OR ", close: ")"},
	{open: "CASE WHEN a AND b THEN 1 ELSE ", close: " END"},
}

// nestingStatements put an expression where a statement takes one.
var nestingStatements = []string{
	"SELECT %s FROM t",
	"INSERT INTO t VALUES (%s)",
	"DELETE FROM t WHERE %s",
	"UPDATE t SET a = %s",
	"%s",
	"SELECT 1; INSERT INTO t (a) SELECT %s; SELECT 2",
}

// FuzzPlanNesting stacks nestingShapes around a fuzzed atom (each pair of
// bytes of recipe is a shape and a count, up to about 10,000) and checks
// that planning, in both modes, never crashes, answers in bounded time,
// fails only with a SQLSTATE-coded error, and that the lexical estimate
// bounds the depth of every tree pg_query builds.
//
//	go test ./planner -run XXX -fuzz FuzzPlanNesting -fuzztime 10m
func FuzzPlanNesting(f *testing.F) {
	f.Add("1", []byte{0, 200, 1, 50})
	f.Add("a", []byte{1, 255})
	f.Add("'('", []byte{2, 30, 10, 100})
	f.Add("$$)$$", []byte{11, 255, 3, 3})
	f.Add("1", []byte{12, 255})
	f.Add("x", []byte{13, 20, 14, 40, 4, 30})
	f.Add("E'\\''", []byte{5, 80, 6, 9})
	f.Fuzz(func(t *testing.T, atom string, recipe []byte) {
		if len(atom) > 200 || len(recipe) > 16 {
			return
		}
		// Statements up to 64 KiB: deeper than the bound in every shape,
		// and planned within the fuzzer's 10 s per input even when the
		// machine is busy (the largest plan in ~1 s).
		const maxLen = 64 << 10
		x := atom
		for i := 0; i+1 < len(recipe); i += 2 {
			shape := nestingShapes[int(recipe[i])%len(nestingShapes)]
			n := 1 + int(recipe[i+1])*int(recipe[i+1])/6 // 1 .. 10,838
			x = shape.build(x, min(n, maxLen/(len(x)+len(shape.open)+len(shape.sep)+len(shape.close)+1)))
		}
		format := nestingStatements[len(recipe)%len(nestingStatements)]
		sql := strings.Replace(format, "%s", x, 1)
		for _, history := range []bool{false, true} {
			_, err := planTimed(t, sql, Options{SearchPath: []string{"public"}, ExplicitTimestamp: history})
			if err != nil && !errors.As(err, new(*pgerr.Error)) {
				t.Fatalf("error without SQLSTATE: %v", err)
			}
		}
		checkDepthBound(t, sql)
	})
}

// FuzzParamTokens checks the Go lexing of a rewritten statement's
// timestamp parameter against pg_query's scanner: wherever paramTokens
// answers, it finds exactly the PARAM tokens the scanner finds.
//
//	go test ./planner -run XXX -fuzz FuzzParamTokens -fuzztime 30s
func FuzzParamTokens(f *testing.F) {
	for _, s := range paramTokenSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		checkParamTokens(t, sql, "$1")
		checkParamTokens(t, sql, "$2")
	})
}

var paramTokenSeeds = []string{
	"SELECT $1",
	"SELECT * FROM (SELECT a FROM h WHERE mz_from <= $2 AND mz_to > $2) x WHERE b = $1",
	"SELECT '$2', \"$2\", $$ $2 $$, $q$ $2 $q$, E'\\' $2', x$2, $2 -- $2\n /* $2 /* $2 */ */",
	"SELECT 'it''s $2', e'\\\\', $20, $2::int8, 1$2",
	"SELECT U&'\\0024' UESCAPE '!', B'01', X'1f', N'$2', $21",
	"SELECT $2abc",
	"SELECT 'unterminated $2",
}

func checkParamTokens(t *testing.T, sql, want string) {
	t.Helper()
	got, ok := paramTokens(sql, want)
	if !ok {
		return
	}
	toks, err := pgScanTokens(sql)
	if err != nil {
		return
	}
	var exp []int
	for _, tk := range toks {
		if tk.tok == pg.Token_PARAM && sql[tk.start:tk.end] == want {
			exp = append(exp, tk.start)
		}
	}
	if !slices.Equal(got, exp) {
		t.Fatalf("%q in %q: Go lexing %v, pg_query %v", want, sql, got, exp)
	}
}

func TestParamTokens(t *testing.T) {
	for _, s := range paramTokenSeeds {
		checkParamTokens(t, s, "$1")
		checkParamTokens(t, s, "$2")
	}
	if got, ok := paramTokens(paramTokenSeeds[2], "$2"); !ok || len(got) != 1 {
		t.Fatalf("only the bare $2 is a parameter: %v %v", got, ok)
	}
}
