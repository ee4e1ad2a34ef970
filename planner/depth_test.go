package planner

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mzproxy/mzproxy/pgerr"
	pg "github.com/pganalyze/pg_query_go/v6"
)

// stackDepthHint is PostgreSQL 15's hint for 54001 at the default
// max_stack_depth.
const stackDepthHint = `Increase the configuration parameter "max_stack_depth" (currently 2048kB), after ensuring the platform's stack depth limit is adequate.`

// nest is open repeated n times around inner and then close n times.
func nest(open, inner, close string, n int) string {
	return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
}

// terms is n copies of term joined by sep.
func terms(term, sep string, n int) string {
	return strings.TrimSuffix(strings.Repeat(term+sep, n), sep)
}

// planTimed plans sql with the catalog of the fuzz tests and fails the
// test if it takes longer than a (generous) bound.
func planTimed(t *testing.T, sql string, opts Options) ([]*Statement, error) {
	t.Helper()
	start := time.Now()
	stmts, err := New(0).Plan(sql, fuzzCatalog(), opts)
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("planning %d bytes took %v", len(sql), d)
	}
	return stmts, err
}

// TestPlanRefusesDeepNesting: statements nested deeper than pg_query can
// parse safely get PostgreSQL's 54001 and its hint, before pg_query sees
// them (the 25,000-term INSERT crashed the process with SIGSEGV in
// protobuf-c; 5,000 terms failed in Go's protobuf decoder with a message
// no client should see).
func TestPlanRefusesDeepNesting(t *testing.T) {
	for name, sql := range map[string]string{
		"insert sum 25000":       "INSERT INTO t VALUES (" + terms("1", "+", 25000) + ")",
		"insert sum 5000":        "INSERT INTO t (a) VALUES (" + terms("1", "+", 5000) + ")",
		"select sum 100000":      "SELECT " + terms("a", "+", 100000) + " FROM t",
		"parentheses":            "UPDATE t SET a = " + nest("(", "1", ")", 20000),
		"unary minus":            "DELETE FROM t WHERE a = " + strings.Repeat("- ", 30000) + "a",
		"not":                    "DELETE FROM t WHERE " + strings.Repeat("NOT ", 30000) + "true",
		"casts":                  "INSERT INTO t VALUES (1" + strings.Repeat("::int", 20000) + ")",
		"scalar subqueries":      "INSERT INTO t VALUES (" + nest("(SELECT ", "1", ")", 3000) + ")",
		"subqueries in where":    "DELETE FROM t WHERE a IN " + nest("(SELECT a FROM t WHERE b OR a AND a IN ", "(1)", ")", 2000),
		"case":                   "INSERT INTO t VALUES (" + nest("CASE WHEN true THEN ", "1", " END", 3000) + ")",
		"array":                  "INSERT INTO t VALUES (" + nest("ARRAY[", "1", "]", 5000) + ")",
		"function calls":         "INSERT INTO t VALUES (" + nest("abs(", "1", ")", 5000) + ")",
		"union":                  "INSERT INTO t " + terms("SELECT 1, 2", " UNION ALL ", 10000),
		"joins":                  "DELETE FROM t USING t x" + strings.Repeat(" JOIN u ON true", 10000),
		"concatenation":          "INSERT INTO t (b) VALUES (" + terms("'x'", " || ", 10000) + ")",
		"between then sum":       "DELETE FROM t WHERE a BETWEEN 1 AND " + terms("1", "+", 10000),
		"deep statement of many": "SELECT 1; SELECT 2; INSERT INTO t VALUES (" + terms("1", "+", 25000) + "); SELECT 3",
		"explain timestamp":      "EXPLAIN TIMESTAMP FOR SELECT " + terms("a", "+", 25000) + " FROM t",
		"as of":                  "SELECT " + terms("a", "+", 25000) + " FROM t AS OF 1",
		"subscribe":              "SUBSCRIBE (SELECT " + terms("a", "+", 25000) + " FROM t)",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := planTimed(t, sql, Options{SearchPath: []string{"public"}})
			var pe *pgerr.Error
			if !errors.As(err, &pe) || pe.Code != pgerr.StatementTooComplex {
				t.Fatalf("got %v (%s), want 54001", err, pgerr.Of(err))
			}
			if pe.Message != "stack depth limit exceeded" || pe.Hint != stackDepthHint {
				t.Fatalf("got %q hint %q", pe.Message, pe.Hint)
			}
		})
	}
}

// TestPlanAcceptsWideStatements: what PostgreSQL accepts in practice still
// plans: sums of a few thousand terms, long lists, long AND/OR chains,
// many rows and many statements.
func TestPlanAcceptsWideStatements(t *testing.T) {
	for name, sql := range map[string]string{
		"sum of 4000 constants":   "INSERT INTO t VALUES (" + terms("1", "+", 4000) + ")",
		"sum of 2000 columns":     "SELECT " + terms("a", "+", 2000) + " FROM t",
		"in list of 100000":       "DELETE FROM t WHERE a IN (" + terms("1", ",", 100000) + ")",
		"values of 20000 rows":    "INSERT INTO t VALUES " + terms("(1+1, 'a(b')", ",", 20000),
		"or chain of 20000":       "DELETE FROM t WHERE " + terms("(a = 1 AND b = 2)", " OR ", 20000),
		"and chain of 20000":      "UPDATE t SET b = 1 WHERE " + terms("a <> 1", " AND ", 20000),
		"between chain":           "DELETE FROM t WHERE " + terms("a BETWEEN 1 AND 2", " AND ", 20000),
		"10000 statements":        terms("INSERT INTO t VALUES (1, 2)", ";", 10000),
		"1000 columns with alias": "SELECT " + terms("a + 1 AS x", ", ", 1000) + " FROM t",
		"500 nested parentheses":  "INSERT INTO t VALUES (" + nest("(", "1", ")", 500) + ")",
		"300 nested subqueries":   "INSERT INTO t VALUES (" + nest("(SELECT ", "1", ")", 300) + ")",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := planTimed(t, sql, Options{SearchPath: []string{"public"}}); err != nil {
				t.Fatalf("%v (%s)", err, pgerr.Of(err))
			}
		})
	}
}

// TestPlanRewritesAtTheBound: a read at an explicit timestamp as deep as
// the deparse bound admits is rewritten (pg_query's deparser is C and
// recursive too, and needs more stack than its parser); a deeper one gets
// 54001 when its rewrite is deparsed, and still plans as a read of the
// present. Spliced (history_splice.go), nothing is deparsed: the deeper
// one is rewritten too, and PostgreSQL parses it as it would the client's.
func TestPlanRewritesAtTheBound(t *testing.T) {
	for _, splice := range []bool{true, false} {
		t.Run(fmt.Sprintf("spliced=%v", splice), func(t *testing.T) {
			defer func(was bool) { spliceRewrites = was }(spliceRewrites)
			spliceRewrites = splice
			testPlanRewritesAtTheBound(t)
		})
	}
}

func testPlanRewritesAtTheBound(t *testing.T) {
	history := Options{SearchPath: []string{"public"}, ExplicitTimestamp: true}
	sql := "SELECT " + terms("a", "+", maxDeparseMessages/2-20) + " FROM t"
	stmts, err := planTimed(t, sql, history)
	if err != nil {
		t.Fatal(err)
	}
	if stmts[0].Template == nil || stmts[0].Template.Holes() == 0 {
		t.Fatal("not rewritten")
	}
	deep := "SELECT " + terms("a", "+", 2000) + " FROM t"
	for _, c := range []struct {
		sql  string
		opts Options
		want pgerr.Code
	}{
		{deep, history, map[bool]pgerr.Code{true: "", false: pgerr.StatementTooComplex}[spliceRewrites]},
		{deep, Options{SearchPath: []string{"public"}}, ""},
		{deep + " AS OF 1", Options{SearchPath: []string{"public"}}, map[bool]pgerr.Code{true: "", false: pgerr.StatementTooComplex}[spliceRewrites]},
		{"SELECT " + terms("1", "+", 4400) + ", mz_now()", Options{}, pgerr.StatementTooComplex},
	} {
		_, err := planTimed(t, c.sql, c.opts)
		if got := pgerr.Of(err); err != nil && got != c.want || err == nil && c.want != "" {
			t.Fatalf("%.30s...%s (history %v): %v, want %q", c.sql, c.sql[len(c.sql)-12:], c.opts.ExplicitTimestamp, err, c.want)
		}
	}
}

// TestNestingDepthSkipsQuotedText: brackets and operators inside string
// literals, quoted identifiers, dollar quotes and comments are not syntax.
func TestNestingDepthSkipsQuotedText(t *testing.T) {
	deep := strings.Repeat("(1+", 50000)
	for name, sql := range map[string]string{
		"string":              "SELECT '" + deep + "'",
		"doubled quote":       "SELECT 'it''s " + deep + "'",
		"escape string":       `SELECT E'\' ` + deep + `'`,
		"escape string e":     `SELECT e'\\' || '` + deep + `'`,
		"quoted identifier":   `SELECT 1 AS "a"" ` + deep + `"`,
		"dollar quote":        "SELECT $$ " + deep + " $$",
		"tagged dollar quote": "SELECT $fn$ $$ " + deep + " $fn$",
		"tag then body":       "SELECT $a$b" + deep + "$a$",
		"line comment":        "SELECT 1 -- " + deep + "\n",
		"nested comment":      "SELECT 1 /* /* */ " + deep + " */",
		"bit string":          "SELECT B'" + deep + "'",
		"unicode string":      "SELECT U&'" + deep + "'",
	} {
		t.Run(name, func(t *testing.T) {
			if d := nestingDepth(sql, maxNestingLevels); d > statementLevels+10 {
				t.Fatalf("depth %d", d)
			}
			if _, err := planTimed(t, sql, Options{}); pgerr.Of(err) == pgerr.StatementTooComplex {
				t.Fatal(err)
			}
		})
	}
	// And what the scanner takes for text is never more than that: a
	// parameter is not a dollar quote, "$" inside a word is not one either,
	// and E'' ends where PostgreSQL ends it.
	for name, sql := range map[string]string{
		"parameter":        "SELECT $1" + deep,
		"dollar in word":   "SELECT a$b$ " + deep,
		"escaped quote":    `SELECT E'\'' ` + deep,
		"standard string":  `SELECT '\' ` + deep,
		"comment then sql": "SELECT 1 /* */ " + deep,
	} {
		t.Run(name, func(t *testing.T) {
			if d := nestingDepth(sql, maxNestingLevels); d <= maxNestingLevels {
				t.Fatalf("depth %d", d)
			}
		})
	}
}

// TestNestingDepthBoundsTrees: for statements of every shape the fuzz
// test builds, the tree pg_query builds is at most two protobuf messages
// per level of the estimate.
func TestNestingDepthBoundsTrees(t *testing.T) {
	for i, shape := range nestingShapes {
		sql := shape.build("a", 400)
		checkDepthBound(t, sql)
		if t.Failed() {
			t.Fatalf("shape %d: %.200s", i, sql)
		}
	}
}

// checkDepthBound parses sql with pg_query directly when the estimate
// admits it, and fails if a statement's tree is deeper than the estimate
// allows.
func checkDepthBound(t *testing.T, sql string) {
	t.Helper()
	est := nestingDepth(sql, maxNestingLevels)
	if est > maxNestingLevels {
		return
	}
	r, err := pg.Parse(sql)
	if err != nil {
		if isStackDepth(err) {
			t.Fatalf("estimate %d, but pg_query: %v", est, err)
		}
		return
	}
	for _, st := range r.Stmts {
		if d := messageDepth(st.ProtoReflect()); d > 2*est {
			t.Fatalf("estimate %d levels, tree %d messages deep", est, d)
		}
	}
}

// BenchmarkPlanNesting measures planning at and past the nesting bound and
// for wide statements (each iteration plans without the cache).
//
//	go test ./planner -run XXX -bench BenchmarkPlanNesting -benchtime 5x
func BenchmarkPlanNesting(b *testing.B) {
	for _, bc := range []struct{ name, sql string }{
		{"refused sum of 25000", "INSERT INTO t VALUES (" + terms("1", "+", 25000) + ")"},
		{"sum of 4400", "INSERT INTO t VALUES (" + terms("1", "+", 4400) + ")"},
		{"sum of 1000", "INSERT INTO t VALUES (" + terms("1", "+", 1000) + ")"},
		{"in list of 100000", "DELETE FROM t WHERE a IN (" + terms("1", ",", 100000) + ")"},
		{"10000 statements", terms("INSERT INTO t VALUES (1, 2)", ";", 10000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cat := fuzzCatalog()
			b.SetBytes(int64(len(bc.sql)))
			for b.Loop() {
				_, _ = New(0).Plan(bc.sql, cat, Options{SearchPath: []string{"public"}})
			}
		})
	}
}
