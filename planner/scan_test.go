package planner

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// scanCases are texts for the Go scanner: what it handles, and what it
// must give up on (pg_query's scanner decides).
var scanCases = []string{
	"SELECT a, b FROM t1 WHERE a > 5 ORDER BY 1",
	"select abc, 'x''y', def, \"Q\"\"x\", x.y FROM t WHERE a=-1 AND b<=2 AND c!=3 and d<>4 and e::int",
	"SELECT f ?-1, g := 2, h => 3, $1, 1.5, 2147483648, 2147483647, 1e5, .5, 1., 1.e3, 5E-3, a[1:2]",
	"select 1 not like 2 nulls first with time without ~ ! @ # % ^ & | ` ? +- -+ *- </**/ <-- x\n , 'x' ; ;",
	"SELECT CASE WHEN c>(SELECT avg(c) FROM t1) THEN a*2 ELSE b*10 END FROM t1 ORDER BY 1",
	"SELECT a+b*2+c*3+d*4+e*5, abs(b-c), (a+b+c+d+e)/5 FROM t1 WHERE (e>c OR e<d) AND d>e",
	"SELECT * FROM t AS OF AT LEAST mz_now() - 5",
	"SELECT a FROM t -- comment\nWHERE /* nested /* c */ */ a = 1",
	"SELECT 1 =- 2, 3 !- 4, 5 @- 6, 7 *+ 8, 9 <=> 10, 11 >= 12, 13 =>> 14, 15 <-> 16, 17 ||/ 18",
	"SELECT 'a'\n'b'", "SELECT 'a' 'b'", "SELECT 'a' /* c */ 'b'", "SELECT 'a'\n\t-- c\n'b'",
	"SELECT E'\\n'", "SELECT e'x'", "SELECT B'01', X'1f', N'n', U&'x', U&\"x\"",
	"SELECT $$x$$", "SELECT $t$x$t$", "SELECT $", "SELECT $1abc", "SELECT $1.a", "SELECT $1_2",
	"SELECT 1abc", "SELECT 0x1F", "SELECT 1_000", "SELECT 1..2", "SELECT 1e", "SELECT 1e+",
	"SELECT 1.5.3", "SELECT a.5", "SELECT \"\"", "SELECT \"unterminated", "SELECT 'unterminated",
	"SELECT /* unterminated", "SELECT {}", "SELECT \\", "SELECT é", "SELECT \"é\", 'é'", "SELECTé",
	"SELECT 1\x00", "SELECT '\xff'", "SELECT a" + strings.Repeat("+", 70) + "b",
	"SELECT a" + strings.Repeat("<", 63) + "b", "SELECT a" + strings.Repeat("<", 64) + "b",
	"CREATE TABLE t1(a INTEGER, b INTEGER, c INTEGER, d INTEGER, e INTEGER)",
	"INSERT INTO t1(e,c,b,d,a) VALUES(103,102,100,101,104)",
	"CREATE FUNCTION f() RETURNS int BEGIN ATOMIC SELECT 1; SELECT 2; END",
	"SELECT a FROM t FOR UPDATE OF t NOWAIT; SHOW x; SET y TO 'z'",
	"EXPLAIN TIMESTAMP AS JSON FOR SELECT a FROM t",
	"SELECT ARRAY[1,2][1], x::numeric(10,2), interval '1 day', timestamp with time zone 'now'",
	"SELECT a FROM t WHERE b NOT IN (1,2) AND c IS NOT NULL AND d BETWEEN 1 AND 2 OR e LIKE 'x%'",
	"  ", "", ";", "a", "--x", "/**/",
}

// goScanAgrees checks that the Go scanner, where it does not give up,
// gives pg_query's tokens for sql.
func goScanAgrees(t *testing.T, sql string) (handled bool) {
	t.Helper()
	got, ok := scanGo(sql)
	if !ok {
		return false
	}
	want, err := pgScanTokens(sql)
	if err != nil {
		t.Fatalf("%q: the Go scanner took a text pg_query refuses (%v): %v", sql, err, got)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%q:\nGo scanner %v\npg_query   %v", sql, got, want)
	}
	return true
}

func TestGoScanMatchesPgQuery(t *testing.T) {
	mustHandle := map[string]bool{}
	for _, sql := range scanCases[:9] {
		mustHandle[sql] = true
	}
	for _, sql := range scanCases {
		if !goScanAgrees(t, sql) && mustHandle[sql] {
			t.Errorf("%q: the Go scanner gave up", sql)
		}
	}
	// Every statement of the golden files.
	handled, all := 0, 0
	files, _ := filepath.Glob("testdata/plan/*")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range strings.Split(string(data), "\nplan") {
			_, rest, ok := strings.Cut(block, "\n")
			if !ok {
				continue
			}
			input, _, _ := strings.Cut(rest, "\n----")
			all++
			if goScanAgrees(t, input) {
				handled++
			}
		}
	}
	t.Logf("golden files: the Go scanner took %d of %d texts", handled, all)
	if handled < all*3/4 {
		t.Errorf("the Go scanner took only %d of %d golden texts", handled, all)
	}
	// The sqllogictest corpus, when there is one: every text.
	if dir := os.Getenv("MZPROXY_SLT_DIR"); dir != "" {
		handled, all := 0, 0
		for _, sql := range corpusTexts(t, dir) {
			all++
			switch {
			case goScanAgrees(t, sql):
				handled++
			case !prefixedString.MatchString(sql):
				t.Errorf("the Go scanner gave up on %q", sql)
			}
		}
		t.Logf("corpus: the Go scanner took %d of %d texts", handled, all)
	}
}

// prefixedString finds a string literal of another kind (X'...'), which
// the Go scanner leaves to pg_query's.
var prefixedString = regexp.MustCompile(`(?i)(^|[^a-z0-9_$])[bexnu]&?'`)

// corpusTexts are the statements and queries of the sqllogictest files
// under dir.
func corpusTexts(t *testing.T, dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.test"))
	more, _ := filepath.Glob(filepath.Join(dir, "evidence", "*.test"))
	var out []string
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range strings.Split(string(data), "\n\n") {
			var sql []string
			in := false
			for _, line := range strings.Split(strings.TrimLeft(rec, "\n"), "\n") {
				switch {
				case strings.HasPrefix(line, "statement") || strings.HasPrefix(line, "query"):
					in = true
				case line == "----":
					in = false
				case in:
					sql = append(sql, line)
				}
			}
			if len(sql) > 0 {
				out = append(out, strings.Join(sql, "\n"))
			}
		}
	}
	return out
}

// TestNewReadsScannedInGo: planning reads of new texts, as the corpus
// sends them under --history-reads, asks pg_query's scanner nothing; a
// text the Go scanner leaves to it does.
func TestNewReadsScannedInGo(t *testing.T) {
	cat := newFakeCatalog()
	cat.addTable("public", "t1", "a", "b", "c", "d", "e")
	opts := Options{SearchPath: []string{"public"}, ExplicitTimestamp: true}
	p := New(100)
	before := pgScans.Load()
	// Twenty shapes (texts differing only in literals would share a plan).
	cols, ops := []string{"a", "b", "c", "d", "e"}, []string{"+", "*", "-", "/"}
	for i := range 20 {
		x, op := cols[i%5], ops[i/5]
		sql := fmt.Sprintf("SELECT %s%sb*2, CASE WHEN c>(SELECT avg(c) FROM t1) THEN a*2 ELSE b*10 END FROM t1 WHERE d<>%s ORDER BY 1", x, op, x)
		stmts, err := p.Plan(sql, cat, opts)
		if err != nil || len(stmts) != 1 || stmts[0].Template == nil {
			t.Fatalf("%s: %v, %v", sql, stmts, err)
		}
	}
	if n := pgScans.Load() - before; n != 0 {
		t.Errorf("20 new reads: pg_query's scanner called %d times, want 0", n)
	}
	if _, err := p.Plan("SELECT a FROM t1 WHERE b = E'x'", cat, opts); err != nil {
		t.Fatal(err)
	}
	if n := pgScans.Load() - before; n == 0 {
		t.Errorf("E'x': pg_query's scanner not called")
	}
}

// TestKeywordsComplete: every keyword token of pg_query's enum is in the
// Go scanner's table, with its kind.
func TestKeywordsComplete(t *testing.T) {
	kw := keywords()
	n := 0
	for tk := pg.Token_ABORT_P; tk <= pg.Token_ZONE; tk++ {
		if _, ok := pg.Token_name[int32(tk)]; ok {
			n++
		}
	}
	if len(kw) != n || n < 400 {
		t.Fatalf("%d keywords in the table, %d in the enum", len(kw), n)
	}
	for word, want := range map[string]keywordInfo{
		"select": {pg.Token_SELECT, pg.KeywordKind_RESERVED_KEYWORD},
		"of":     {pg.Token_OF, pg.KeywordKind_UNRESERVED_KEYWORD},
		"int":    {pg.Token_INT_P, pg.KeywordKind_COL_NAME_KEYWORD},
		"like":   {pg.Token_LIKE, pg.KeywordKind_TYPE_FUNC_NAME_KEYWORD},
		"nulls":  {pg.Token_NULLS_P, pg.KeywordKind_UNRESERVED_KEYWORD},
	} {
		if kw[word] != want {
			t.Errorf("%s: %v, want %v", word, kw[word], want)
		}
	}
}

// FuzzGoScan: where the Go scanner takes a text, its tokens are
// pg_query's.
//
//	go test ./planner -run XXX -fuzz FuzzGoScan -fuzztime 60s
func FuzzGoScan(f *testing.F) {
	for _, c := range scanCases {
		f.Add(c)
	}
	for _, c := range literalCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 4000 {
			return
		}
		goScanAgrees(t, sql)
	})
}

func BenchmarkScan(b *testing.B) {
	q := "SELECT CASE WHEN c>(SELECT avg(c) FROM t1) THEN a*2 ELSE b*10 END, a+b*2+c*3+d*4, abs(b-c) FROM t1 WHERE (e>c OR e<d) AND d>e ORDER BY 1,2,3"
	for _, goScan := range []bool{true, false} {
		name := "pg_query"
		if goScan {
			name = "go"
		}
		b.Run(name, func(b *testing.B) {
			defer func(was bool) { scanWithGo = was }(scanWithGo)
			scanWithGo = goScan
			b.ReportAllocs()
			for b.Loop() {
				if _, err := scanTokens(q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
