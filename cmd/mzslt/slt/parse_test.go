package slt

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []Record // only the fields set here are compared (see trim)
	}{
		{
			name: "statements",
			src: "statement ok\nCREATE TABLE t(a int)\n\n" +
				"statement error\nSELECT x\n\n" +
				"statement error relation \"t\" does not exist \nSELECT * FROM t\n\n" +
				"statement error pgcode 42P01 rel.*\nSELECT 1\n\n" +
				"statement count 3\nINSERT INTO t\nVALUES (1), (2), (3)\n",
			want: []Record{
				{Line: 1, Directive: DirStatement, SQL: "CREATE TABLE t(a int)", Count: -1},
				{Line: 4, Directive: DirStatement, SQL: "SELECT x", ExpectError: true, Count: -1},
				{Line: 7, Directive: DirStatement, SQL: "SELECT * FROM t", ExpectError: true, ErrorRegex: `relation "t" does not exist`, Count: -1},
				{Line: 10, Directive: DirStatement, SQL: "SELECT 1", ExpectError: true, PGCode: "42P01", ErrorRegex: "rel.*", Count: -1},
				{Line: 13, Directive: DirStatement, SQL: "INSERT INTO t\nVALUES (1), (2), (3)", Count: 3},
			},
		},
		{
			name: "queries",
			src: "query IT rowsort label-1\nSELECT 1,\n 'a'\n----\n1\na\n\n" +
				"query R nosort\nSELECT 1.5\n\n" +
				"query T valuesort\nSELECT 1\n----\n\n" +
				"query error division\nSELECT 1/0\n\n" +
				"query TI rowsort,colnames\nSELECT 1\n----\na b\n1 2\n",
			want: []Record{
				{Line: 1, Directive: DirQuery, Types: "IT", Sort: RowSort, Label: "label-1", SQL: "SELECT 1,\n 'a'", HasOutput: true, Expected: []string{"1", "a"}, Count: -1},
				{Line: 8, Directive: DirQuery, Types: "R", SQL: "SELECT 1.5", Count: -1},
				{Line: 11, Directive: DirQuery, Types: "T", Sort: ValueSort, SQL: "SELECT 1", HasOutput: true, Count: -1},
				{Line: 15, Directive: DirQuery, ExpectError: true, ErrorRegex: "division", SQL: "SELECT 1/0", Count: -1},
				{Line: 18, Directive: DirQuery, Types: "TI", Sort: RowSort, ColNames: true, SQL: "SELECT 1", HasOutput: true, Expected: []string{"a b", "1 2"}, Count: -1},
			},
		},
		{
			name: "multiline keeps blank and comment lines until EOF",
			src:  "query T multiline\nSELECT x\n----\na\n\n# b\nEOF\n\nhalt\n",
			want: []Record{
				{Line: 1, Directive: DirQuery, Types: "T", Multiline: true, SQL: "SELECT x", HasOutput: true, Expected: []string{"a", "", "# b"}, Count: -1},
				{Line: 9, Directive: DirHalt, Count: -1},
			},
		},
		{
			name: "conditions, comments, CRLF and white-space lines",
			src: "# comment\r\nskipif postgresql\r\nonlyif mysql\r\nstatement ok\r\n# dropped\r\nSELECT 1\r\n   \t\r\n" +
				"hash-threshold 0\n\nmode cockroach\n\nreset-server\n\nsubtest foo\n\nuser root\n\nquery I nosort # trailing comment\nSELECT 1\n",
			want: []Record{
				{Line: 4, Directive: DirStatement, Conds: []Cond{{Skip: true, Engine: "postgresql"}, {Skip: false, Engine: "mysql"}}, SQL: "SELECT 1", Count: -1},
				{Line: 8, Directive: DirHashThreshold, Arg: "0", Count: -1},
				{Line: 10, Directive: DirMode, Arg: "cockroach", Count: -1},
				{Line: 12, Directive: DirResetServer, Count: -1},
				{Line: 18, Directive: DirQuery, Types: "I", SQL: "SELECT 1", Count: -1},
			},
		},
		{
			name: "simple",
			src: "simple conn=c1,user=u1\nSELECT 1;\n\nSELECT 2\n----\n1\nCOMPLETE 1\n\n" +
				"simple multiline\nSELECT 'a'\n----\na\n\nEOF\nCOMPLETE 1\n",
			want: []Record{
				{Line: 1, Directive: DirSimple, Conn: "c1", User: "u1", SQL: "SELECT 1;\n\nSELECT 2", HasOutput: true, Expected: []string{"1", "COMPLETE 1"}, Count: -1},
				{Line: 9, Directive: DirSimple, Multiline: true, SQL: "SELECT 'a'", HasOutput: true, Expected: []string{"a", ""}, After: []string{"COMPLETE 1"}, Count: -1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i].outStart, got[i].outEnd = 0, 0
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		src      string
		line     int
		contains string
		before   int // records parsed before the error
	}{
		{"statement ok\nSELECT 1\n\nfrobnicate\n", 4, "unknown record type", 1},
		{"statement maybe\nSELECT 1\n", 1, "statement argument", 0},
		{"query X nosort\nSELECT 1\n", 1, "unknown type character", 0},
		{"query\nSELECT 1\n", 1, "type string", 0},
		{"statement count x\nSELECT 1\n", 1, "bad statement count", 0},
		{"query T multiline\nSELECT 1\n----\na\n", 1, "EOF", 0},
		{"simple\nSELECT 1\n", 1, "----", 0},
		{"simple user=u\nSELECT 1\n----\n", 1, "conn=", 0},
		{"hash-threshold x\n", 1, "hash-threshold", 0},
		{"mode other\n", 1, "unknown mode", 0},
		{"skipif postgresql\n", 1, "end of file", 0},
	} {
		recs, err := Parse([]byte(tc.src))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%q: err = %v, want a ParseError", tc.src, err)
			continue
		}
		if pe.Line != tc.line || !strings.Contains(pe.Msg, tc.contains) || len(recs) != tc.before {
			t.Errorf("%q: line %d %q with %d records, want line %d containing %q with %d records",
				tc.src, pe.Line, pe.Msg, len(recs), tc.line, tc.contains, tc.before)
		}
	}
}

func TestSkipped(t *testing.T) {
	for _, tc := range []struct {
		conds []Cond
		want  bool
	}{
		{nil, false},
		{[]Cond{{Skip: true, Engine: "postgresql"}}, true},
		{[]Cond{{Skip: true, Engine: "PostgreSQL"}}, true},
		{[]Cond{{Skip: true, Engine: "mysql"}}, false},
		{[]Cond{{Skip: false, Engine: "postgresql"}}, false},
		{[]Cond{{Skip: false, Engine: "sqlite"}}, true},
		{[]Cond{{Skip: true, Engine: "mysql"}, {Skip: true, Engine: "postgresql"}}, true},
		{[]Cond{{Skip: false, Engine: "postgresql"}, {Skip: true, Engine: "mssql"}}, false},
	} {
		r := Record{Conds: tc.conds}
		if got := r.skipped("postgresql"); got != tc.want {
			t.Errorf("%+v: skipped = %v, want %v", tc.conds, got, tc.want)
		}
	}
	// Another engine name flips the outcome.
	r := Record{Conds: []Cond{{Skip: false, Engine: "sqlite"}}}
	if r.skipped("sqlite") {
		t.Error("onlyif sqlite skipped for engine sqlite")
	}
}

func TestRewrite(t *testing.T) {
	src := "query I nosort\r\nSELECT 1\r\n----\r\n2\r\n\r\nquery I nosort\r\nSELECT 3\r\n\r\nstatement ok\r\nSELECT 1"
	recs, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	out, err := rewrite([]byte(src), []edit{{rec: &recs[1], lines: []string{"3"}}, {rec: &recs[0], lines: []string{"1"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "query I nosort\r\nSELECT 1\r\n----\r\n1\r\n\r\nquery I nosort\r\nSELECT 3\r\n----\r\n3\r\n\r\nstatement ok\r\nSELECT 1"
	if string(out) != want {
		t.Errorf("got\n%q\nwant\n%q", out, want)
	}
}

func TestExpected(t *testing.T) {
	exp, err := ReadExpected(strings.NewReader("# c\nselect1.test 10 0 0\nevidence/in1.test 1 2 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Files: []*FileReport{
		{File: "/x/sqlite/select1.test", Counts: Counts{10, 0, 0}},
		{File: "sqlite/evidence/in1.test", Counts: Counts{1, 2, 4}},
		{File: "other.test"},
	}}
	got := exp.Compare(rep)
	if len(got) != 2 || !strings.Contains(got[0], "in1.test: got 1 passed, 2 failed, 4 skipped") ||
		!strings.Contains(got[1], "no expected counts") {
		t.Errorf("Compare = %q", got)
	}
	if _, err := ReadExpected(strings.NewReader("a 1 2\n")); err == nil {
		t.Error("short line accepted")
	}
	var b strings.Builder
	rep.Counts = Counts{11, 2, 4}
	rep.Write(&b)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if lines[len(lines)-1] != "11 passed, 2 failed, 4 skipped" || lines[0] != "/x/sqlite/select1.test: 10 passed, 0 failed, 0 skipped" {
		t.Errorf("Write:\n%s", b.String())
	}
}

func TestDiff(t *testing.T) {
	a := &Report{Files: []*FileReport{{File: "f", Results: []Result{
		{File: "f", Line: 1, Kind: KindStatement, Outcome: Passed},
		{File: "f", Line: 5, Kind: KindQuery, Outcome: Passed},
		{File: "f", Line: 9, Kind: KindQuery, Outcome: Skipped},
	}}}}
	b := &Report{Files: []*FileReport{{File: "f", Results: []Result{
		{File: "f", Line: 1, Kind: KindStatement, Outcome: Passed},
		{File: "f", Line: 5, Kind: KindQuery, Outcome: Failed, Message: "wrong result"},
	}}}}
	got := Diff(a, b)
	want := []string{"f:5: query: passed vs failed (wrong result)", "f:9: query: skipped vs absent"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Diff = %q, want %q", got, want)
	}
	if d := Diff(a, a); len(d) != 0 {
		t.Errorf("Diff of a run with itself = %q", d)
	}
}
