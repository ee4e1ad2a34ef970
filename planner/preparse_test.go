package planner

import (
	"testing"
	"time"
)

func TestPreparseAsOf(t *testing.T) {
	for _, tc := range []struct {
		sql, text, expr string
		atLeast         bool
	}{
		{sql: "SELECT 'as of 5'", text: "SELECT 'as of 5'"},
		{sql: "SELECT 1 -- AS OF 3", text: "SELECT 1 -- AS OF 3"},
		{sql: "SELECT $$AS OF$$", text: "SELECT $$AS OF$$"},
		{sql: "SELECT $x$ AS OF 5 $x$", text: "SELECT $x$ AS OF 5 $x$"},
		{sql: `SELECT "as" FROM t AS OF 5`, text: `SELECT "as" FROM t`, expr: "5"},
		{sql: `SELECT 1 "AS" OF`, text: `SELECT 1 "AS" OF`},
		{sql: "SELECT 1 AS of", text: "SELECT 1 AS of"},
		{sql: "SELECT * FROM t as of at least now()", text: "SELECT * FROM t", expr: "now()", atLeast: true},
		{sql: "SELECT (SELECT 1 AS OF 3)", text: "SELECT (SELECT 1 AS OF 3)"},
		{sql: "SELECT * FROM (SELECT 1) AS of AS OF (1 + (2))", text: "SELECT * FROM (SELECT 1) AS of", expr: "(1 + (2))"},
		{sql: "SELECT 1 AS OF 2 AS OF 3", text: "SELECT 1 AS OF 2", expr: "3"},
		{sql: "SELECT * FROM t AS OF 5 /* c */", text: "SELECT * FROM t", expr: "5 /* c */"},
		{sql: "SELECT * FROM t AS OF 5) (", text: "SELECT * FROM t AS OF 5) ("},
		{sql: "SELECT E'\\' AS OF 1' AS OF 2", text: "SELECT E'\\' AS OF 1'", expr: "2"},
		{sql: "INSERT INTO t SELECT 1 AS OF 2", text: "INSERT INTO t SELECT 1 AS OF 2"},
	} {
		toks, err := scanTokens(tc.sql)
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		mz, err := preparse(tc.sql, toks)
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		if mz.text != tc.text {
			t.Errorf("%s: text %q, want %q", tc.sql, mz.text, tc.text)
		}
		switch {
		case tc.expr == "" && mz.asOf != nil:
			t.Errorf("%s: unexpected AS OF %+v", tc.sql, mz.asOf)
		case tc.expr != "" && (mz.asOf == nil || mz.asOf.Expr != tc.expr || mz.asOf.AtLeast != tc.atLeast):
			t.Errorf("%s: AS OF %+v, want %q (at least %v)", tc.sql, mz.asOf, tc.expr, tc.atLeast)
		}
	}
}

func TestSplitStatements(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want []string
	}{
		{"SELECT 1; SELECT 2;", []string{"SELECT 1", "SELECT 2"}},
		{"SELECT ';'; SELECT $$;$$ -- ;\n; /* ; */ SELECT \";\"", []string{"SELECT ';'", "SELECT $$;$$", `SELECT ";"`}},
		{"  ;; ", nil},
		{"SELECT (1;2)", []string{"SELECT (1;2)"}},
		{"CREATE PROCEDURE p() BEGIN ATOMIC INSERT INTO t VALUES (1); END; CALL p()",
			[]string{"CREATE PROCEDURE p() BEGIN ATOMIC INSERT INTO t VALUES (1); END", "CALL p()"}},
		{"BEGIN; SELECT 1; END", []string{"BEGIN", "SELECT 1", "END"}},
	} {
		parts, err := splitStatements(tc.sql)
		if err != nil {
			t.Fatalf("%q: %v", tc.sql, err)
		}
		var got []string
		for _, p := range parts {
			got = append(got, p.text)
			if tc.sql[p.offset:p.offset+len(p.text)] != p.text {
				t.Errorf("%q: offset %d does not locate %q", tc.sql, p.offset, p.text)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%q: got %q, want %q", tc.sql, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%q: got %q, want %q", tc.sql, got, tc.want)
			}
		}
	}
}

func TestParseInterval(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "1h", want: time.Hour},
		{in: "30s", want: 30 * time.Second},
		{in: "1 day", want: 24 * time.Hour},
		{in: "2 days", want: 48 * time.Hour},
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "1000", want: time.Second},
		{in: " 1 hour 30 minutes ", want: 90 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "1.5h", want: 90 * time.Minute},
		{in: "1 HOUR", want: time.Hour},
		{in: "0", want: 0},
		{in: "1 week", want: 7 * 24 * time.Hour},
		{in: "", bad: true},
		{in: "h", bad: true},
		{in: "1 month", bad: true},
		{in: "1 year", bad: true},
		{in: "-1h", bad: true},
		{in: "1 fortnight", bad: true},
		{in: "99999999999999999999", bad: true},
		{in: "9999999999999 days", bad: true},
	} {
		got, err := ParseInterval(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseInterval(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseInterval(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
