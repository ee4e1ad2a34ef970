package planner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Session 23's outside probe of the Go scanner (scan.go) and of the plan
// cache keyed by what it feeds (fingerprint.go, literals.go): for every
// text, the Go scanner either gives up or gives pg_query's tokens, the
// fingerprint's literals are pg_query's, and a text that differs from a
// planned one only in its literals plans as a planner without a cache
// plans it.

// scanEdgeCases are texts a hostile or careless client may send, next to
// the ones the scanner must take (numbers, quotes, comments, operators,
// parameters, mixed case, long texts).
var scanEdgeCases = []string{
	// Numbers, and what PostgreSQL 15 does not take as one (0x1F, 1_000:
	// PostgreSQL 16's forms; pg_query is 17's).
	"SELECT 1e5, .5, 5., 1.5e-3, 00012, 1.5E+3, 0.0, 000000000000000000000000000001, 1.e3",
	"SELECT 2147483647, 2147483648, -2147483648, -2147483649, 4294967296, 9223372036854775808",
	"SELECT 1_000", "SELECT 0x1F", "SELECT 0X1f", "SELECT 0b101", "SELECT 0o17", "SELECT 1__0",
	"SELECT 1e", "SELECT 1e+", "SELECT 1.5e", "SELECT 1e-5e", "SELECT 1ee", "SELECT 1.a", "SELECT 1..2",
	"SELECT 1.5.3", "SELECT 1$", "SELECT 1é", "SELECT a.5, t.1",
	// Names: non-ASCII letters, quoted names with "" inside, U&"...".
	"SELECT ñame, aé, \"é\", \"a\"\"b\", \"\"\"\", \"x y\", \"" + strings.Repeat("x", 70) + "\"",
	"SELECT ä FROM t", "SELECT aé FROM t", "SELECT U&\"d\\0061t\\+000061\" FROM t",
	"SELECT u&\"x\" UESCAPE '!'", "SELECT xu&'a'", "SELECT a" + strings.Repeat("x", 80),
	// Strings: '' inside, prefixes, continuation across a newline.
	"SELECT 'a''b', '''', '', 'é', 'x\ny'", "SELECT E'x', e'\\'', E'\\x41', B'0101', b'1', X'1F', x'ff', N'n', n'x'",
	"SELECT U&'d\\0061t'", "SELECT U&'d!0061t' UESCAPE '!'", "SELECT 'a' \n 'b'", "SELECT 'a'\n'b'",
	"SELECT 'a' -- c\n 'b'", "SELECT 'a' /* c */ 'b'", "SELECT 'a' 'b'", "SELECT 'a'\r\n'b'",
	"SELECT 'a'\n\"b\"", "SELECT 'a'\nE'b'", "SELECT 'a'\n$$b$$",
	"SELECT B'1''0'", "SELECT X'1F''20'", "SELECT B''''", "SELECT N'a''b'", "SELECT E'a''b'",
	// Comments: nested, unterminated, '--' at the end without a newline.
	"SELECT /* /* */ */ 1", "SELECT /* /* */ 1", "SELECT 1 --", "SELECT 1 -- x", "SELECT --1\n1",
	"SELECT 1 /* a */ + /**/ 2", "SELECT 1-/**/1", "SELECT a+/**/b", "SELECT a*/**/b", "/* x */",
	"SELECT 1\r\n-- x\r\n, 2", "SELECT 1 -- x\r2",
	// Parameters and dollar quotes.
	"SELECT $1, $12, $0, $01, $1::int, a[$1], $2147483647, $2147483648, $99999999999",
	"SELECT $$x$$, $tag$y$tag$, $a$ $b$ $a$", "SELECT $", "SELECT $1a", "SELECT $1.5", "SELECT $$", "SELECT $x",
	// Operators.
	"SELECT a != b, a <> b, a::int, a @-@ b, a ->> 'x', a ~~* b, a +- b, a */ b, -1, - 1, a-1, a--1\n",
	"SELECT +-1, -+1, 1 =- 2, 1 <=- 2, 1 !=- 2, 1 >=+ 2, a%-b, a^-b, a&-b, a|-b, a#-b, a?-b, a`-b, a!-b, a~-b, a@-b",
	"SELECT ~1, !1, @1, #1, ?1, ` 1, &1, |1, a := 1, b => 2, c : d, e::f, g..h",
	"SELECT */ 1", "SELECT 1 */", "SELECT a */* c */ b", "SELECT a -/* c */ b", "SELECT a <-- c\n b",
	"SELECT a" + strings.Repeat("<", 63) + "b", "SELECT a" + strings.Repeat("<", 64) + "b",
	// Keywords in mixed case, whitespace PostgreSQL 17's scanner takes.
	"SeLeCt A, nULLs, NoT, fRoM FrOm T wHeRe A iS nOt NuLl", "SELECT\v1", "SELECT a\f, b\t,c",
	// Long texts.
	"SELECT " + strings.Repeat("a + ", 5000) + "1",
	"SELECT '" + strings.Repeat("x''", 30000) + "'",
	"SELECT " + strings.Repeat("/* c */ ", 2000) + "1" + strings.Repeat(" -- c\n", 2000),
	strings.Repeat("SELECT 1; ", 2000),
	// Junk.
	"SELECT {}", "SELECT \\", "SELECT 1\x00", "SELECT '\xff'", "SELECT \"unterminated", "SELECT 'unterminated",
}

// TestScanEdgeCases: the Go scanner gives up or agrees with pg_query on
// each of scanEdgeCases, and the fingerprint's literals are pg_query's.
func TestScanEdgeCases(t *testing.T) {
	handled := 0
	for _, sql := range scanEdgeCases {
		if goScanAgrees(t, sql) {
			handled++
		}
		checkScannerLiterals(t, sql)
	}
	t.Logf("the Go scanner took %d of %d edge cases", handled, len(scanEdgeCases))
	// The common forms must stay in Go (else the scan's saving is lost).
	for _, sql := range []string{
		"SELECT 1e5, .5, 5., 1.5e-3, 00012, 1.5E+3, 0.0, 000000000000000000000000000001, 1.e3",
		"SELECT /* /* */ */ 1", "SELECT 1 --", "SELECT $1, $12, $0, $01, $1::int, a[$1], $2147483647, $2147483648, $99999999999",
		"SeLeCt A, nULLs, NoT, fRoM FrOm T wHeRe A iS nOt NuLl",
	} {
		if _, ok := scanGo(sql); !ok {
			t.Errorf("%q: the Go scanner gave up", sql)
		}
	}
}

// sltDir is the sqllogictest corpus: MZPROXY_SLT_DIR, else the shared one.
func sltDir(t *testing.T) string {
	dir := os.Getenv("MZPROXY_SLT_DIR")
	if dir == "" {
		dir = "/work/shared/slt/sqlite"
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.test")); len(files) == 0 {
		t.Skipf("no sqllogictest corpus at %s (set MZPROXY_SLT_DIR): the corpus's texts are not compared", dir)
	}
	return dir
}

// TestScanCorpusMatchesPgQuery: every statement and query text of the
// sqllogictest corpus, through the Go scanner (which must take all but
// the prefixed strings, and agree) and the fingerprint (whose literals
// must be pg_query's).
func TestScanCorpusMatchesPgQuery(t *testing.T) {
	texts := corpusTexts(t, sltDir(t))
	if len(texts) < 1000 {
		t.Fatalf("only %d texts in the corpus", len(texts))
	}
	handled := 0
	for _, sql := range texts {
		switch {
		case goScanAgrees(t, sql):
			handled++
		case !prefixedString.MatchString(sql):
			t.Errorf("the Go scanner gave up on %q", sql)
		}
		checkScannerLiterals(t, sql)
	}
	t.Logf("corpus: the Go scanner took %d of %d texts", handled, len(texts))
}

// literalPairs are texts that differ only in literals (the spellings
// scanEdgeCases probes): the second, planned after the first through one
// cache, must plan as a planner without a cache plans it, for a read at
// mz_now(), a read AS OF, a plain read and a write, with and without
// --history-reads.
var literalPairs = [][2]string{
	{"SELECT a, mz_now() FROM t WHERE a = 1e5", "SELECT a, mz_now() FROM t WHERE a = 1e6"},
	{"SELECT a, mz_now() FROM t WHERE b = 'x'", "SELECT a, mz_now() FROM t WHERE b = E'x'"},
	{"SELECT a, mz_now() FROM t WHERE b = E'x'", "SELECT a, mz_now() FROM t WHERE b = 'x'"},
	{"SELECT a, mz_now() FROM t WHERE a = -1", "SELECT a, mz_now() FROM t WHERE a = - 1"},
	{"SELECT a, mz_now() FROM t WHERE a = - 1", "SELECT a, mz_now() FROM t WHERE a = -1"},
	{"SELECT a, mz_now() FROM t WHERE a = -2147483648", "SELECT a, mz_now() FROM t WHERE a = -2147483649"},
	{"SELECT a, mz_now() FROM t WHERE a = 00012", "SELECT a, mz_now() FROM t WHERE a = 12"},
	{"SELECT a, mz_now() FROM t WHERE a = .5", "SELECT a, mz_now() FROM t WHERE a = 5."},
	{"SELECT a, mz_now() FROM t WHERE b = 'it''s'", "SELECT a, mz_now() FROM t WHERE b = $$it's$$"},
	{"SELECT a, mz_now() FROM t WHERE b = 'a\\b'", "SELECT a, mz_now() FROM t WHERE b = E'a\\\\b'"},
	{"SELECT a FROM t WHERE a = 1e5 AS OF 1700000000000", "SELECT a FROM t WHERE a = 1e6 AS OF 1700000000001"},
	{"SELECT a FROM t WHERE b = 'x' AS OF AT LEAST 5", "SELECT a FROM t WHERE b = E'x' AS OF AT LEAST 6"},
	{"SELECT a FROM t WHERE a = -1 AS OF 5", "SELECT a FROM t WHERE a = - 1 AS OF 6"},
	{"SELECT a FROM t WHERE a = -1", "SELECT a FROM t WHERE a = - 1"},
	{"SELECT a FROM t WHERE b = 'x'", "SELECT a FROM t WHERE b = E'x'"},
	{"UPDATE t SET b = 'x' WHERE a = 1e5", "UPDATE t SET b = E'x' WHERE a = 1e6"},
	{"INSERT INTO t VALUES (-1, 'x')", "INSERT INTO t VALUES (- 1, E'x\\n')"},
	{"DELETE FROM t WHERE a = 1.5e-3", "DELETE FROM t WHERE a = 2147483648"},
	// A bit or hex string ends at its next quote ('' is not a quote in
	// it): the second text is B'1' and '0', a syntax error, which the
	// fingerprint took for one literal until session 23: a hit of the
	// first text's plan.
	{"SELECT a FROM t WHERE b = B'1'", "SELECT a FROM t WHERE b = B'1''0'"},
	{"SELECT a FROM t WHERE b = X'1F'", "SELECT a FROM t WHERE b = x'1F''20'"},
	{"SELECT a, mz_now() FROM t WHERE b = B'1'", "SELECT a, mz_now() FROM t WHERE b = B'1''0'"},
}

// TestLiteralPairsPlanAsFresh: literalPairs, each second text planned
// from the cache the first left (eager: the literal plan made at once).
func TestLiteralPairsPlanAsFresh(t *testing.T) {
	cat := literalCatalog()
	for _, history := range []bool{false, true} {
		opts := Options{SearchPath: []string{"public"}, ExplicitTimestamp: history}
		for _, pair := range literalPairs {
			for _, p := range []*Planner{eagerPlanner(16), New(16)} {
				checkSamePlan(t, p, cat, pair[0], opts)
				checkSamePlan(t, p, cat, pair[1], opts)
				checkSamePlan(t, p, cat, pair[1], opts)
				checkSamePlan(t, p, cat, pair[0], opts)
			}
		}
	}
}

// FuzzScanEdges: FuzzGoScan's comparison and the fingerprint's, seeded
// with scanEdgeCases (the long ones cut) and the corpus's first texts.
//
//	go test ./planner -run XXX -fuzz FuzzScanEdges -fuzztime 60s
func FuzzScanEdges(f *testing.F) {
	for _, c := range scanEdgeCases {
		f.Add(c[:min(len(c), 300)])
	}
	for _, pair := range literalPairs {
		f.Add(pair[0])
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 4000 {
			return
		}
		goScanAgrees(t, sql)
		checkScannerLiterals(t, sql)
	})
}
