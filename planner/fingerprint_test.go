package planner

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	pg "github.com/pganalyze/pg_query_go/v6"
)

// TestPlanRepeatedLiteralsHits: 1,000 statements that differ only in
// their literals are one miss and 999 hits, and pg_query parses only the
// first. Each gets its own text as SQL.
func TestPlanRepeatedLiteralsHits(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "pgbench_accounts", "aid", "bid", "abalance", "filler")
	p := New(16)
	opts := Options{SearchPath: []string{"public"}}
	var parsesAfterFirst uint64
	for i := 0; i < 1000; i++ {
		text := fmt.Sprintf("SELECT abalance, 'x%d' FROM pgbench_accounts WHERE aid = %d AND bid < -%d.5;", i, i*7919, i)
		stmts, err := p.Plan(text, cat, opts)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			parsesAfterFirst = parseCalls.Load()
		}
		if len(stmts) != 1 || stmts[0].SQL != strings.TrimSuffix(text, ";") || stmts[0].Kind != KindRead ||
			len(stmts[0].Inputs) != 1 || stmts[0].Inputs[0].Name != "pgbench_accounts" {
			t.Fatalf("%s: planned %+v", text, stmts[0])
		}
	}
	if n := parseCalls.Load() - parsesAfterFirst; n != 0 {
		t.Fatalf("pg_query parsed %d statements after the first", n)
	}
	if s := p.Stats(); s.Hits != 999 || s.Misses != 1 || s.Len != 1 {
		t.Fatalf("stats %+v, want 999 hits, 1 miss, 1 plan", s)
	}
}

func TestFingerprint(t *testing.T) {
	same := [][2]string{
		{"SELECT a FROM t WHERE b = 1", "select a  from t where b = 2"},
		{"SELECT a FROM t WHERE b = 1", "SELECT a FROM t -- comment\n WHERE b = /* c /* nested */ */ 42"},
		{"SELECT 'a', E'b\\n', $$c$$, $x$d$x$ FROM t", "SELECT 'zz''z', e'\\'', $$x$ $$, $y$$$y$ FROM t"},
		{"SELECT 1.5, 1e3, .5, 5000000000", "SELECT 2., 1E-3, 0.25, 99999999999999999999"},
		{"SELECT B'101', X'1F', N'n'", "SELECT b'0', x'', n'x'"},
		{"SELECT date '2020-01-01', interval '1 day'", "SELECT date'1999-12-31', INTERVAL '2 hours'"},
		{"INSERT INTO t VALUES (1, 'a'); SELECT 2", "insert into t values(3,'b');select 4"},
		{"SELECT x FROM t LIMIT 10 OFFSET 5", "SELECT x FROM t LIMIT 20 OFFSET 0"},
		{"SELECT $1 FROM t WHERE a = 1", "SELECT $1 FROM t WHERE a = 2"},
		{"SELECT 1 ;", "SELECT 2;"},
	}
	for _, c := range same {
		a, okA := fingerprintOf(c[0])
		b, okB := fingerprintOf(c[1])
		if !okA || !okB || a.key != b.key {
			t.Errorf("want the same fingerprint:\n%q -> %q %v\n%q -> %q %v", c[0], a.key, okA, c[1], b.key, okB)
		}
	}
	different := [][2]string{
		{"SELECT 1", "SELECT 1.5"},               // ICONST, FCONST
		{"SELECT 1", "SELECT 2147483648"},        // too big for ICONST
		{"SELECT 1", "SELECT '1'"},               // number, string
		{"SELECT '1'", "SELECT B'1'"},            // SCONST, BCONST
		{"SELECT B'1'", "SELECT X'1'"},           // BCONST, XCONST
		{"SELECT n'1'", "SELECT n '1'"},          // national string; a value of type n
		{"SELECT e'1'", "SELECT e '1'"},          // escape string; a value of type e
		{`SELECT "A" FROM t`, "SELECT a FROM t"}, // quoted names are kept
		{`SELECT "a" FROM t`, "SELECT a FROM t"},
		{"SELECT $1", "SELECT $2"},
		{"SELECT a FROM t", "SELECT b FROM t"},
		{"SELECT a::int", "SELECT a: :int"},
		{"SELECT a - -1", "SELECT a --1"},
		{"SELECT 1; SELECT 2", "SELECT 1, 2"},
		{"SELECT (1; 2)", "SELECT 1; SELECT 2"},
	}
	for _, c := range different {
		a, okA := fingerprintOf(c[0])
		b, okB := fingerprintOf(c[1])
		if okA && okB && a.key == b.key {
			t.Errorf("want different fingerprints: %q and %q -> %q", c[0], c[1], a.key)
		}
	}
	refused := []string{
		"SELECT 'unterminated", "SELECT $$unterminated", "SELECT 1 /* unterminated", `SELECT "unterminated`,
		"SELECT 'a' 'b'", "SELECT 'a'\n'b'", "SELECT 'a' -- c\n'b'", "SELECT $$a$$ 'b'",
		"SELECT E'\\u00e9'", "SELECT E'\\x41'", "SELECT E'\\101'", "SELECT E'\\0'", "SELECT U&'\\0041'", `SELECT U&"a"`,
		"SELECT 1abc", "SELECT 1.5e", "SELECT 1..2", "SELECT 0x1F", "SELECT 1_000", "SELECT $1abc", "SELECT $1$",
		"SELECT 1::float(54)", "SELECT 1::FLOAT /* c */ (5)",
		"CREATE FUNCTION f() RETURNS int BEGIN ATOMIC SELECT 1; END",
		"SELECT 1\x00", "SELECT '\xff'",
	}
	for _, q := range refused {
		if fp, ok := fingerprintOf(q); ok {
			t.Errorf("%q: fingerprint %q, want none", q, fp.key)
		}
	}
}

// TestFingerprintStatementSpans: the statements of a fingerprint are those
// splitStatements cuts.
func TestFingerprintStatementSpans(t *testing.T) {
	for _, q := range []string{
		"", "  ;; ", "-- only a comment", "SELECT 1", " SELECT 1 ; /* c */ SELECT (2;3) ; ",
		"/* a */ SELECT 'x;' -- b\n; INSERT INTO t VALUES ($1)",
		"SELECT ((1);", "SELECT 1); SELECT 2",
	} {
		fp, ok := fingerprintOf(q)
		if !ok {
			t.Fatalf("%q: no fingerprint", q)
		}
		parts, err := splitStatements(q)
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		for _, p := range parts {
			want = append(want, p.text)
		}
		for _, s := range fp.stmts {
			got = append(got, q[s.start:s.end])
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: statements %q, want %q", q, got, want)
		}
	}
}

// literalTokens are the scanner's tokens for literals.
var literalTokens = map[pg.Token]bool{
	pg.Token_ICONST: true, pg.Token_FCONST: true, pg.Token_SCONST: true,
	pg.Token_BCONST: true, pg.Token_XCONST: true, pg.Token_USCONST: true,
}

// otherLiterals returns sql with every literal PostgreSQL's scanner finds
// replaced by another of the same token class, or false when it has none.
func otherLiterals(sql string) (string, bool) {
	res, err := pg.Scan(sql)
	if err != nil {
		return "", false
	}
	var b strings.Builder
	last, n := 0, 0
	for _, tok := range res.Tokens {
		if !literalTokens[tok.Token] {
			continue
		}
		start, end := int(tok.Start), int(tok.End)
		b.WriteString(sql[last:start])
		b.WriteString(otherLiteral(sql[start:end], tok.Token))
		last, n = end, n+1
	}
	b.WriteString(sql[last:])
	return b.String(), n > 0
}

// otherLiteral is a literal of the same token class as lit.
func otherLiteral(lit string, tok pg.Token) string {
	switch tok {
	case pg.Token_ICONST:
		if lit == "7" {
			return "8"
		}
		return "7"
	case pg.Token_FCONST:
		if v, err := strconv.ParseFloat(lit, 64); err == nil && v == 2.5 {
			return "3.5"
		}
		return "2.5"
	}
	if strings.HasPrefix(lit, "$") {
		tag := lit[:strings.IndexByte(lit[1:], '$')+2]
		return tag + "zz" + tag
	}
	q := strings.IndexByte(lit, '\'')
	if q < 0 {
		return lit
	}
	body := "zz"
	switch tok {
	case pg.Token_BCONST:
		body = "1"
	case pg.Token_XCONST:
		body = "ab"
	}
	if strings.Trim(lit[q:], "'") == body {
		body += body
	}
	return lit[:q] + "'" + body + "'"
}

// TestFingerprintPlansMatchFreshPlans plans each statement of the golden
// files, and of the cases below, through a cache, then the same statement
// with other literals: the answer (plan or error) must be the one a
// planner without a cache gives for it. The cases are the statements
// whose literals matter.
func TestFingerprintPlansMatchFreshPlans(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a")
	for _, history := range []bool{false, true} {
		p := New(64)
		for _, c := range literalCases {
			checkFreshPlan(t, cat, p, c, Options{SearchPath: []string{"public"}, ExplicitTimestamp: history})
		}
	}
	// The golden files, with their catalogs and options.
	eachGoldenPlan(t, checkFreshPlan)
}

// literalCases are statements whose literals matter.
var literalCases = []string{
	"SELECT a FROM t AS OF 5",
	"SELECT a FROM t WHERE a = 1 AS OF AT LEAST 1700000000000",
	"SELECT a FROM t WHERE a = 1 AS OF mz_now() - 5",
	"SELECT a, mz_now() FROM t WHERE a > 3",
	"SELECT a FROM t WHERE a > 3 LIMIT 5",
	"SET statement_timeout = 5", "SET search_path = 'a'", "SET LOCAL x.y TO 'z'", "SHOW x",
	"BEGIN ISOLATION LEVEL SERIALIZABLE", "SAVEPOINT s", "PREPARE TRANSACTION 'g'",
	"DECLARE c CURSOR FOR SELECT a FROM t WHERE a = 1", "FETCH 5 FROM c",
	"CREATE TABLE r (x int) WITH (RETAIN HISTORY = FOR '1 hour')",
	"ALTER TABLE t SET (RETAIN HISTORY = FOR '2h')",
	"EXPLAIN TIMESTAMP FOR SELECT a FROM t WHERE a = 1 AS OF 7",
	"SUBSCRIBE (SELECT a FROM t WHERE a = 1) AS OF 5 UP TO 10",
	"SELECT 'a'\n'b'", "SELECT 1::float(5)", "SELECT 1 AS of", "SELECT a FROM t AS of WHERE of.a = 1",
	"INSERT INTO t VALUES (1); SELECT a FROM t WHERE a = 2; UPDATE t SET a = 3",
	"EXPLAIN SELECT a FROM t WHERE a = 1", "COPY (SELECT a FROM t WHERE a = 1) TO STDOUT",
	"COPY t FROM '/tmp/x'", "DO $$ BEGIN PERFORM 1; END $$", "SELECT * FROM t TABLESAMPLE SYSTEM (10)",
	"SELECT a FROM t WHERE a = 1 FOR UPDATE", "SELECT 1 INTO x",
}

// checkFreshPlan plans input through p, then input with other literals:
// the answer (plan or error) must be the one a planner without a cache
// gives.
func checkFreshPlan(t *testing.T, cat *fakeCatalog, p *Planner, input string, opts Options) {
	t.Helper()
	other, ok := otherLiterals(input)
	if !ok {
		return
	}
	p.Plan(input, cat, opts)
	got, gotErr := p.Plan(other, cat, opts)
	want, wantErr := New(0).Plan(other, cat, opts)
	if (gotErr != nil) != (wantErr != nil) || gotErr != nil && formatErr(gotErr) != formatErr(wantErr) {
		t.Errorf("after %q, %q: error %v, want %v", input, other, gotErr, wantErr)
		return
	}
	checkBounds(t, got)
	if !reflect.DeepEqual(withoutBound(got), want) {
		t.Errorf("after %q, %q: plan differs from a fresh one:\n%s\nwant\n%s", input, other, dumpPlan(got), dumpPlan(want))
	}
}

// eachGoldenPlan calls fn for each plan command of the golden files under
// testdata/plan, with the file's catalog and one Planner per file (the
// files' expectations are not checked here).
func eachGoldenPlan(t *testing.T, fn func(t *testing.T, cat *fakeCatalog, p *Planner, input string, opts Options)) {
	datadriven.Walk(t, "testdata/plan", func(t *testing.T, path string) {
		cat, p := newFakeCatalog(), New(64)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "catalog":
				if err := cat.define(d.Input); err != nil {
					t.Fatal(err)
				}
			case "plan":
				opts := Options{SearchPath: []string{"$user", "public"}}
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "history":
						opts.ExplicitTimestamp = true
					case "path":
						opts.SearchPath = a.Vals
					}
				}
				fn(t, cat, p, d.Input, opts)
			}
			return d.Expected
		})
	})
}

func dumpPlan(stmts []*Statement) string {
	var b strings.Builder
	for _, s := range stmts {
		formatStatement(&b, s, "")
	}
	return b.String()
}

// TestFingerprintLiteralsMatchScanner: where the fingerprint takes a query
// string, its placeholders are PostgreSQL's scanner's literals, of the same
// classes.
func TestFingerprintLiteralsMatchScanner(t *testing.T) {
	inputs := []string{
		"SELECT 1, 1.5, .5, 1e3, 2., 2147483647, 2147483648, -3, 'a', E'b\\n', $$c$$, $t$d$t$, B'1', X'ff'",
		"SELECT a.b, t.* FROM t WHERE a = 1 AND b::text = '2' AND c = ANY ('{1,2}') AND d = $1",
		"SELECT date '2020-01-01', interval '1' day, 1 +-2, 3*-4, 5<=6, x->>'k', '{}'::jsonb @> '[1]'",
		"SELECT a FROM t WHERE x BETWEEN 1 AND 2 OR y IN (1, 2.0, 'z') ORDER BY 1 LIMIT 10 OFFSET 20",
		"INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y') ON CONFLICT (a) DO UPDATE SET b = 'z' RETURNING a",
		"SELECT 00012, 0.000, 1.0e-10, 1E+10, 'it''s', E'it\\'s', $a$ $b$ $a$",
	}
	eachGoldenPlan(t, func(t *testing.T, _ *fakeCatalog, _ *Planner, input string, _ Options) {
		inputs = append(inputs, input)
	})
	for _, in := range inputs {
		checkScannerLiterals(t, in)
	}
}

// checkScannerLiterals checks that where the fingerprint takes a query
// string the scanner takes too, its placeholders are the scanner's
// literals, of the same classes.
func checkScannerLiterals(t *testing.T, in string) {
	t.Helper()
	fp, ok := fingerprintOf(in)
	if !ok {
		return
	}
	res, err := pg.Scan(in)
	if err != nil {
		return // "" is no identifier, ...: the parser says so, and errors are not cached
	}
	classOf := map[pg.Token]string{
		pg.Token_ICONST: litInteger, pg.Token_FCONST: litNumeric, pg.Token_SCONST: litString,
		pg.Token_BCONST: litBits, pg.Token_XCONST: litHex, pg.Token_USCONST: "U&",
	}
	var want []string
	for i, tok := range res.Tokens {
		c, lit := classOf[tok.Token]
		if !lit {
			continue
		}
		if prev := res.Tokens[max(i-1, 0)]; tok.Token == pg.Token_SCONST && prev.Token == pg.Token_NCHAR && prev.End == tok.Start {
			c = litNational // N'...' is NCHAR and the string
		}
		want = append(want, c)
	}
	var got []string
	for k := strings.IndexByte(fp.key, 0); k >= 0; k = strings.IndexByte(fp.key, 0) {
		got = append(got, fp.key[k:k+2])
		fp.key = fp.key[k+2:]
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q: placeholders %q, scanner's literals %q", in, got, want)
	}
}

// FuzzFingerprint: the fingerprint's literals are the scanner's, and a
// query string with other literals gets the plan a fresh planner makes.
//
//	go test ./planner -run XXX -fuzz FuzzFingerprint -fuzztime 60s
func FuzzFingerprint(f *testing.F) {
	for _, c := range literalCases {
		f.Add(c)
	}
	f.Add("SELECT 1, 1.5, .5, 1e3, 2., 2147483648, 'a', E'b\\n', $$c$$, $t$d$t$, B'1', X'ff', N'n'")
	cat := fuzzCatalog()
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 2000 {
			return
		}
		checkScannerLiterals(t, sql)
		checkFreshPlan(t, cat, New(8), sql, Options{SearchPath: []string{"public"}})
	})
}

func BenchmarkFingerprint(b *testing.B) {
	q := "SELECT abalance FROM pgbench_accounts WHERE aid = 4711;"
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, ok := fingerprintOf(q); !ok {
			b.Fatal("no fingerprint")
		}
	}
}
