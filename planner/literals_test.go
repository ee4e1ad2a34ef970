package planner

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTimestampedReadsHitWithoutParsing: pgbench's timestamped reads,
// repeated with other literals, are one miss and then hits, and pg_query
// parses nothing after the first; each hit is the plan a planner without a
// cache makes of its text.
func TestTimestampedReadsHitWithoutParsing(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "pgbench_accounts", "aid", "bid", "abalance", "filler")
	opts := Options{SearchPath: []string{"public"}}
	for _, form := range []string{
		"SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = %d;",
		"SELECT abalance FROM pgbench_accounts WHERE aid = %d AS OF AT LEAST 1%012d;",
		"SELECT abalance FROM pgbench_accounts WHERE aid = %d AS OF '2026-12-01 14:%02d:00+00';",
	} {
		p := New(16)
		var parsesAfterFirst uint64
		for i := 0; i < 200; i++ {
			args := []any{i * 7919 % 100000, i}
			text := fmt.Sprintf(form, args[:strings.Count(form, "%")]...)
			got, err := p.Plan(text, cat, opts)
			if err != nil {
				t.Fatal(err)
			}
			if i <= 1 { // the second text makes the literal plan
				parsesAfterFirst = parseCalls.Load()
				continue
			}
			if i%50 == 1 { // a fresh plan parses: compare only now and then
				n := parseCalls.Load()
				want, _ := New(0).Plan(text, cat, opts)
				checkBounds(t, got)
				if !reflect.DeepEqual(withoutBound(got), want) {
					t.Fatalf("%s: cached plan\n%s\nfresh plan\n%s", text, dumpPlan(got), dumpPlan(want))
				}
				parsesAfterFirst += parseCalls.Load() - n
			}
		}
		if n := parseCalls.Load() - parsesAfterFirst; n != 0 {
			t.Errorf("%s: pg_query parsed %d statements after the first", form, n)
		}
		if s := p.Stats(); s.Hits != 198 || s.Misses != 2 || s.Len != 2 {
			t.Errorf("%s: stats %+v, want 198 hits, 2 misses, 2 plans (the first text's, the skeleton's)", form, s)
		}
	}
}

// literalPlanCases are statements whose plans depend on their literals,
// planned with literalCatalog; cached says whether another text of the
// skeleton is a hit (otherwise the plan is only checked to be right).
var literalPlanCases = []struct {
	sql     string
	cached  bool
	history bool
	// spliced: cached when the rewrite is spliced (history_splice.go),
	// which puts literals in as written, not as the deparser prints them.
	spliced bool
}{
	{sql: "SELECT abalance, mz_now() FROM t WHERE a = 5", cached: true},
	{sql: "SELECT a FROM t WHERE a = 5 AS OF 1700000000000", cached: true},
	{sql: "SELECT a FROM t WHERE a = 5 AS OF AT LEAST 1700000000000", cached: true},
	{sql: "SELECT a FROM t AS OF '2026-01-01 00:00:00+00'::timestamptz", cached: true},
	{sql: "SELECT a FROM t AS OF timestamptz '2026-01-01'", cached: true},
	{sql: "SELECT a FROM t AS OF 5.5", cached: true},
	{sql: "SELECT a FROM t AS OF 5 + 5", cached: true},
	{sql: "SELECT a FROM t WHERE a = -5 AS OF AT LEAST mz_now()", cached: true},
	{sql: "SELECT a FROM t WHERE a = 1 AS OF mz_now() - 5"},
	{sql: "SELECT a, 1 FROM t ORDER BY 1 LIMIT 5 AS OF 7", cached: true},
	{sql: "SELECT a, count(*) FROM t GROUP BY 1 HAVING count(*) > 2 ORDER BY 2 DESC, 1 OFFSET 3 AS OF 7", cached: true},
	{sql: "SELECT a FROM t WHERE a::numeric(10,2) > -1.5 AND a > - 3 AND a < - - 4 AND a <> -(7) AS OF 7", cached: true},
	{sql: "SELECT (-5)::int, -5::int, 2.5::int, (- 2147483648)::int8, a FROM t AS OF 7", cached: true},
	{sql: "SELECT date '2024-01-01' + interval '1 day', a, 'x'::date FROM t WHERE a > 5 AS OF 7", cached: true},
	{sql: "SELECT interval '1' second(3), interval(2) '1', a::varchar(10), a::bit(3) FROM t AS OF 7", cached: true},
	{sql: "SELECT 'x'::bool, a FROM t AS OF 7", cached: true}, // bool is a name: 't'::bool stays
	{sql: "SELECT 'x'::boolean, a FROM t AS OF 7"},            // 't'::boolean is printed true
	{sql: "SELECT CAST('t' AS boolean), a FROM t AS OF 7", spliced: true},
	{sql: "SELECT extract('year' from now()), a FROM t AS OF 7", cached: true},
	{sql: "SELECT E'a\\nb', 'it''s', $$x'y$$, $q$y\\$q$, e'\\\\', '' FROM t AS OF 7", cached: true},
	{sql: "SELECT a FROM t WHERE a IN (1, 2, 3) AND a::text LIKE 'x%' ESCAPE '!' AS OF 9", cached: true},
	{sql: "SELECT a FROM t FETCH FIRST 3 ROWS ONLY AS OF 9", cached: true},
	{sql: "SELECT a, mz_now() FROM t WHERE a > 3; SELECT 5; INSERT INTO t VALUES (1)", cached: true},
	{sql: "EXPLAIN SELECT a, mz_now() FROM t WHERE a = 5", cached: true},
	{sql: "COPY (SELECT a, mz_now() FROM t WHERE a = 5) TO STDOUT", cached: true},
	{sql: "COPY (SELECT a, mz_now() FROM t WHERE a = 5) TO STDOUT WITH (FORMAT csv, DELIMITER ';')", cached: true},
	{sql: "SELECT 1, 'a' AS OF 5", cached: true},
	{sql: "SELECT 'a' || 'b', '2000000000', 2000000000 FROM t AS OF 5", cached: true},
	{sql: "SELECT a AS \"2000000000\" FROM t WHERE a = 1 AS OF 7"},
	{sql: "SELECT * FROM v WHERE b > 3 AS OF 5", cached: true},
	{sql: "SELECT a FROM t WHERE a = 5", cached: true, history: true},
	{sql: "SELECT a FROM t WHERE a = 5 AND b = 'x'; SELECT b FROM u, t WHERE x = 3", cached: true, history: true},
	{sql: "/* c */ SELECT a FROM t WHERE a = 5 -- x\n AS OF 7 ;", cached: true},
	{sql: "SELECT a FROM t WHERE a = $1 AND b > 5 AS OF $2", cached: true},
	{sql: "SELECT a FROM t WHERE a = $1 AND b > 5 AS OF $1::timestamptz", cached: true},
	{sql: "SELECT a FROM t WHERE b = 0 AND a = -5 AS OF 0", cached: true},
	{sql: "SELECT a FROM t WHERE a = -0 AS OF 0", spliced: true},            // deparsed, (-0)::int would not be (-5)::int
	{sql: "SELECT a FROM t TABLESAMPLE SYSTEM (10) REPEATABLE (5) AS OF 5"}, // an error
	{sql: "SELECT a FROM t WHERE a = 5 FOR UPDATE AS OF 5"},
	{sql: "SELECT B'101', a FROM t AS OF 5"},
	{sql: "SELECT a FROM t WHERE a = 5 AS of"},
	{sql: "SELECT a FROM t WHERE a = 5 AS OF"},
	{sql: "SELECT json_object('a': 1), a FROM t AS OF 5", cached: true},
	{sql: "SELECT a FROM t WHERE a = 5 AS OF 7 LIMIT 3"},
}

// eagerPlanner is a Planner that makes a skeleton's literal plan from its
// first text, the text each case gives.
func eagerPlanner(size int) *Planner {
	p := New(size)
	p.literalsAtFirst = true
	return p
}

func literalCatalog() *fakeCatalog {
	cat := fuzzCatalog()
	cat.addTable("public", "t", "a", "b", "abalance")
	return cat
}

// TestLiteralPlansMatchFreshPlans plans each case through a cache, then
// the case with other literals of every kind: each answer (plan or error)
// must be the one a planner without a cache gives, and the cacheable cases
// must be hits.
func TestLiteralPlansMatchFreshPlans(t *testing.T) {
	for _, splice := range []bool{true, false} {
		t.Run(fmt.Sprintf("spliced=%v", splice), func(t *testing.T) {
			defer func(was bool) { spliceRewrites = was }(spliceRewrites)
			spliceRewrites = splice
			testLiteralPlansMatchFreshPlans(t)
		})
	}
}

func testLiteralPlansMatchFreshPlans(t *testing.T) {
	cat := literalCatalog()
	for _, c := range literalPlanCases {
		cached := c.cached || c.spliced && spliceRewrites
		opts := Options{SearchPath: []string{"public"}, ExplicitTimestamp: c.history}
		p := eagerPlanner(16)
		p.Plan(c.sql, cat, opts)
		seen := map[string]bool{c.sql: true}
		for round := range literalValues[litString] {
			other, ok := literalVariant(c.sql, round)
			if !ok {
				t.Fatalf("%q: no literals", c.sql)
			}
			hits := p.Stats().Hits
			checkSamePlan(t, p, cat, other, opts)
			hit := p.Stats().Hits > hits
			if !seen[other] && hit != cached && !spelledByValue.MatchString(other) {
				t.Errorf("%q: hit %v, want %v", other, hit, cached)
			}
			seen[other] = true
		}
		// Each literal on its own, through every value of its class.
		for _, other := range singleLiteralVariants(c.sql) {
			checkSamePlan(t, p, cat, other, opts)
		}
	}
}

// singleLiteralVariants are sql with one of its literals replaced by each
// value of literalValues of its class, and with a '-' put before a number
// (another skeleton).
func singleLiteralVariants(sql string) []string {
	fp, ok := fingerprintOf(sql)
	if !ok {
		return nil
	}
	var out []string
	for _, l := range fp.lits {
		vals := literalValues[l.class]
		if l.class != litString {
			vals = append(slices.Clone(vals), "- "+sql[l.start:l.end])
		}
		for _, v := range vals {
			out = append(out, sql[:l.start]+v+sql[l.end:])
		}
	}
	return out
}

// spelledByValue matches the texts with a literal the deparser may spell
// by its value (65535, -0): they may be planned.
var spelledByValue = regexp.MustCompile(`65535|-0+([^0-9.]|$)`)

// checkSamePlan checks that p plans sql as a planner without a cache does.
func checkSamePlan(t *testing.T, p *Planner, cat Catalog, sql string, opts Options) {
	t.Helper()
	got, gotErr := p.Plan(sql, cat, opts)
	want, wantErr := New(0).Plan(sql, cat, opts)
	if (gotErr != nil) != (wantErr != nil) || gotErr != nil && formatErr(gotErr) != formatErr(wantErr) {
		t.Errorf("%q: error %v, want %v", sql, gotErr, wantErr)
		return
	}
	checkBounds(t, got)
	if !reflect.DeepEqual(withoutBound(got), want) {
		t.Errorf("%q: plan differs from a fresh one:\n%s\nwant\n%s", sql, dumpPlan(got), dumpPlan(want))
	}
}

// literalValues are literals of each class, one per round (strings has
// the most rounds; the others repeat).
var literalValues = map[string][]string{
	litInteger: {"7", "0", "65535", "2147483647", "007", "1", "12", "3"},
	litNumeric: {"2.5", "1e5", "2147483648", ".5", "1.", "0.0", "1700000000000", "3E-2"},
	litString: {"'zz'", "''", "'it''s'", `E'a\\b'`, `E'\n\''`, "$$a'b$$", "$t$x$t$", "'t'", "'f'",
		"'2026-12-01 14:17:15+00'", `'back\slash'`, "'\x01'", "'ünï'", "e'x''y'"},
}

// literalVariant is sql with the literals of round: false when sql has
// none (or no fingerprint).
func literalVariant(sql string, round int) (string, bool) {
	fp, ok := fingerprintOf(sql)
	if !ok || len(fp.lits) == 0 {
		return "", false
	}
	var b strings.Builder
	last := 0
	for k, l := range fp.lits {
		b.WriteString(sql[last:l.start])
		vals, ok := literalValues[l.class]
		if !ok {
			b.WriteString(sql[l.start:l.end])
		} else {
			b.WriteString(vals[(round+k)%len(vals)])
		}
		last = l.end
	}
	b.WriteString(sql[last:])
	return b.String(), true
}

// FuzzLiteralPlans checks, for any input with literals: once it is
// planned through a cache, the same text with other literals (all of them,
// or one) plans as a planner without a cache plans it.
//
//	go test ./planner -run XXX -fuzz FuzzLiteralPlans -fuzztime 30s
func FuzzLiteralPlans(f *testing.F) {
	for _, c := range literalPlanCases {
		f.Add(c.sql, uint8(0), c.history)
	}
	cat := literalCatalog()
	f.Fuzz(func(t *testing.T, sql string, round uint8, history bool) {
		other, ok := literalVariant(sql, int(round))
		if !ok {
			return
		}
		opts := Options{SearchPath: []string{"public"}, ExplicitTimestamp: history}
		p := eagerPlanner(4)
		if _, err := p.Plan(sql, cat, opts); err != nil {
			return
		}
		checkSamePlan(t, p, cat, other, opts)
		if single := singleLiteralVariants(sql); len(single) > 0 {
			checkSamePlan(t, p, cat, single[int(round)%len(single)], opts)
		}
	})
}

// TestUniqueTimestampedReadsPlanOnce: a timestamped read whose skeleton
// never repeats (a test corpus under --history-reads) is parsed as often
// as without a cache; the literal plan, another plan with markers, is made
// only when a second text of the skeleton comes.
func TestUniqueTimestampedReadsPlanOnce(t *testing.T) {
	cat := literalCatalog()
	opts := Options{SearchPath: []string{"public"}, ExplicitTimestamp: true}
	run := 0
	parses := func(p *Planner) uint64 {
		t.Helper()
		run++
		n := parseCalls.Load()
		for i := range 4 {
			// Another alias per run and text: another skeleton, and no
			// parse tree remembered from an earlier run.
			q := fmt.Sprintf("SELECT a AS c%d_%d FROM t WHERE b = %d", run, i, i+1)
			if _, err := p.Plan(q, cat, opts); err != nil {
				t.Fatal(err)
			}
		}
		return parseCalls.Load() - n
	}
	fresh := parses(New(0))
	if cached := parses(New(16)); cached != fresh {
		t.Errorf("4 reads of new skeletons parsed %d times through the cache, %d without it", cached, fresh)
	}
	if eager := parses(eagerPlanner(16)); eager <= fresh {
		t.Errorf("a planner making literal plans at once parsed %d times, %d without a cache: the test cannot see the marker plans", eager, fresh)
	}
}
