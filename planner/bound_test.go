package planner

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// checkBounds checks that each statement's Bound, its values put back in
// place of its parameters, is its Template.
func checkBounds(t *testing.T, stmts []*Statement) {
	t.Helper()
	for _, st := range stmts {
		bd := st.Bound
		if bd == nil {
			continue
		}
		if len(bd.Values) != len(bd.OIDs) || len(bd.Values) == 0 {
			t.Fatalf("%q: bound %+v", st.SQL, bd)
		}
		segs := slicesClone(bd.Template.segs)
		for j := len(bd.Values); j >= 1; j-- { // $12 before $1
			for i := range segs {
				segs[i] = strings.ReplaceAll(segs[i], "$"+strconv.Itoa(j), bd.Values[j-1])
			}
		}
		if !reflect.DeepEqual(segs, st.Template.segs) || bd.Template.param != len(bd.Values)+1 {
			t.Errorf("%q: bound template %q with %q is not the template %q", st.SQL, bd.Template.segs, bd.Values, st.Template.segs)
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// TestBoundParametersOnlyComparedIntegers: the literals a cached
// timestamped read takes as parameters are exactly the integers compared
// with a column at the top of a WHERE clause outside expressions.
func TestBoundParametersOnlyComparedIntegers(t *testing.T) {
	cat := literalCatalog()
	opts := Options{SearchPath: []string{"public"}}
	for _, c := range []struct {
		sql  string
		want []string // the bound values, nil: no Bound
	}{
		{"SELECT abalance, mz_now() FROM t WHERE a = 5", []string{"5"}},
		{"SELECT a FROM t WHERE a = 5 AS OF 1700000000000", []string{"5"}},
		{"SELECT a FROM t WHERE 5 < a AND (b >= -7 OR NOT a <> 3) AS OF 7", []string{"5", "-7", "3"}},
		// Spliced (history_splice.go), the text keeps its sign: a = - $1.
		{"SELECT a FROM t WHERE a = - 5 AND b = 'x' AS OF 7", []string{"5"}},
		{"SELECT a FROM t WHERE a = 5.5 AS OF 7", nil},               // numeric
		{"SELECT a FROM t WHERE a = '5' AS OF 7", nil},               // unknown
		{"SELECT a FROM t WHERE a + 1 = 5 AS OF 7", nil},             // not a column
		{"SELECT a FROM t WHERE 1 = 1 AS OF 7", nil},                 // foldable
		{"SELECT a FROM t WHERE a IN (1, 2) AS OF 7", nil},           // not a comparison
		{"SELECT a, 1 FROM t ORDER BY 1 LIMIT 5 AS OF 7", nil},       // positions, LIMIT
		{"SELECT a = 5 FROM t GROUP BY a = 5 AS OF 7", nil},          // select list
		{"SELECT (SELECT b FROM t WHERE a = 5) FROM t AS OF 7", nil}, // an expression's
		{"SELECT a FROM t WHERE a IN (SELECT b FROM t WHERE b = 5) AS OF 7", nil},
		{"SELECT a FROM t JOIN t AS u USING (a) WHERE u.b = 5 AS OF 7", []string{"5"}},
		{"SELECT * FROM (SELECT a FROM t WHERE a = 5) AS s WHERE a > 2 AS OF 7", []string{"5", "2"}},
		{"WITH w AS (SELECT a FROM t WHERE a = 5) SELECT a FROM w AS OF 7", []string{"5"}},
		{"SELECT a FROM t WHERE a = 5 UNION SELECT b FROM t WHERE b = 6 AS OF 7", []string{"5", "6"}},
		{"SELECT a FROM t WHERE a = 2147483647 AS OF 7", []string{"2147483647"}},
		{"SELECT a FROM t WHERE a = 2147483648 AS OF 7", nil}, // not int4: not cached
	} {
		p := eagerPlanner(16)
		p.Plan(c.sql, cat, opts)
		// A text of the same skeleton: from the cache.
		other, _ := literalVariant(c.sql, 5) // every literal another value
		got, err := p.Plan(c.sql, cat, opts)
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		checkBounds(t, got)
		var values []string
		if got[0].Bound != nil {
			values = got[0].Bound.Values
		}
		if fmt.Sprint(values) != fmt.Sprint(c.want) {
			t.Errorf("%q: bound %q, want %q", c.sql, values, c.want)
		}
		checkSamePlan(t, p, cat, other, opts)
	}
}
