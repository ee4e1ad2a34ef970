package planner

import (
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// A repeated timestamped read differs from the last one only in its
// literals, which the proxy splices into the cached Template: the backend
// then parses and plans a new text at every call (issue 15). A Bound is
// the same Template with some literals as parameters instead, so that the
// proxy can prepare it once per backend session and send only their
// values.
//
// A literal becomes a parameter only where a parameter of its own type is
// provably the same: an integer literal that fits int4 (the only integers
// literals.go splices) compared with a column (=, <>, <, >, <=, >=) at the
// top of a WHERE clause (through AND, OR, NOT) of a SELECT that is not
// inside an expression: the statement itself, a set operation's arm, a
// CTE or a subquery in FROM. There a Const and a Param of type int4 select
// the same operator and give the same value; nothing compares that
// expression with another (GROUP BY and ORDER BY match the select list's
// expressions, where a Param would not equal its twin as a Const does),
// and a comparison with a column cannot be folded at plan time (where a
// Const's error, 1/0, would come from a branch never run). Everything else
// stays spliced in the text: positions (ORDER BY 1), type modifiers,
// strings (typed unknown, resolved from context), literals in the select
// list (SELECT 1 would be named int4 if cast), LIMIT.

// Bound is a Template with some of the statement's literals as parameters
// $1..$n (their values in Values, text format, of type OIDs), and its
// timestamp holes still holes: the proxy renders those as a parameter
// $n+1 (Template.Param) or as an expression. Only statements without
// parameters of their own (a simple Query's) have one.
type Bound struct {
	Template *Template
	Values   []string
	OIDs     []uint32
}

// int4OID is PostgreSQL's int4 type.
const int4OID = 23

// comparisonOps are the operators a parameterized literal may be an
// operand of.
var comparisonOps = map[string]bool{"=": true, "<>": true, "!=": true, "<": true, ">": true, "<=": true, ">=": true}

// boundLiterals returns the literals (by index) of the marker Template mt
// that may be parameters: the integer markers compared with a column at
// the top of a WHERE clause of a SELECT outside expressions.
func boundLiterals(mt *Template, markedLits []literal) map[int]bool {
	r, err := pg.Parse(mt.RenderLiteral(0))
	if err != nil || len(r.Stmts) != 1 {
		return nil
	}
	markers := map[int64]int{}
	for k, l := range markedLits {
		if l.class == litInteger {
			v, _ := strconv.ParseInt(marker(k, litInteger), 10, 64)
			markers[v], markers[-v] = k, k
		}
	}
	out := map[int]bool{}
	boundInSelect(r.Stmts[0].Stmt, markers, out)
	return out
}

// boundInSelect collects the markers of a statement-level SELECT n.
func boundInSelect(n *pg.Node, markers map[int64]int, out map[int]bool) {
	sel := n.GetSelectStmt()
	if sel == nil {
		return
	}
	boundInWhere(sel.WhereClause, markers, out)
	for _, f := range sel.FromClause {
		boundInFrom(f, markers, out)
	}
	if w := sel.WithClause; w != nil {
		for _, c := range w.Ctes {
			if cte := c.GetCommonTableExpr(); cte != nil {
				boundInSelect(cte.Ctequery, markers, out)
			}
		}
	}
	if sel.Larg != nil {
		boundInSelect(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sel.Larg}}, markers, out)
	}
	if sel.Rarg != nil {
		boundInSelect(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sel.Rarg}}, markers, out)
	}
}

// boundInFrom follows a FROM item to the subqueries in it.
func boundInFrom(n *pg.Node, markers map[int64]int, out map[int]bool) {
	switch {
	case n.GetRangeSubselect() != nil:
		boundInSelect(n.GetRangeSubselect().Subquery, markers, out)
	case n.GetJoinExpr() != nil:
		boundInFrom(n.GetJoinExpr().Larg, markers, out)
		boundInFrom(n.GetJoinExpr().Rarg, markers, out)
	}
}

// boundInWhere collects the markers compared with a column in a WHERE
// clause's boolean structure.
func boundInWhere(n *pg.Node, markers map[int64]int, out map[int]bool) {
	if n == nil {
		return
	}
	if b := n.GetBoolExpr(); b != nil {
		for _, a := range b.Args {
			boundInWhere(a, markers, out)
		}
		return
	}
	e := n.GetAExpr()
	if e == nil || e.Kind != pg.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 || !comparisonOps[e.Name[0].GetString_().GetSval()] {
		return
	}
	for _, pair := range [2][2]*pg.Node{{e.Lexpr, e.Rexpr}, {e.Rexpr, e.Lexpr}} {
		c, other := pair[0].GetAConst(), pair[1]
		if c == nil || c.GetIval() == nil || other.GetColumnRef() == nil {
			continue
		}
		if k, ok := markers[int64(c.GetIval().Ival)]; ok {
			out[k] = true
		}
	}
}

// bound makes the Bound of a statement whose Template pieces are ls.tmpl,
// for sql's literals lits; nil when no literal is a parameter. Its
// Template and OIDs are the ones made once for the statement when every
// literal is a parameter (markBound): they are the same for every text
// (issue 15: a Bound is made at every call of a cached timestamped read,
// and the proxy renders its text at each). Like template, it writes its
// values into one buffer sized first.
func (ls *literalStmt) bound(sql string, lits []literal) *Bound {
	if !ls.anyBound {
		return nil
	}
	bd := ls.boundShared
	if bd == nil {
		bd = ls.boundTemplate(sql, lits)
	}
	n := len(bd.OIDs)
	var values strings.Builder
	values.Grow(11 * n) // an int4's digits and sign
	valueEnds := make([]int, 0, n)
	for _, p := range ls.tmpl {
		if p.lit >= 0 && p.bound {
			ls.writeLiteral(&values, p, sql, lits) // an int4's text: 007 and -007 are values too
			valueEnds = append(valueEnds, values.Len())
		}
	}
	out := &Bound{Template: bd.Template, OIDs: bd.OIDs, Values: make([]string, n)}
	all, start := values.String(), 0
	for i, e := range valueEnds {
		out.Values[i] = all[start:e]
		start = e
	}
	return out
}

// boundTemplate is the Bound of a statement without its Values: its
// Template, the pieces with each bound literal as $k and the others
// spliced from sql's literals lits (none when every literal is bound),
// and the parameters' types.
func (ls *literalStmt) boundTemplate(sql string, lits []literal) *Bound {
	var text strings.Builder
	n, size := 0, 0
	for _, p := range ls.tmpl {
		size += len(p.text)
		switch {
		case p.lit < 0:
		case p.bound:
			n++
			size += 4 // "$n"
		default:
			size += lits[p.lit].end - lits[p.lit].start + 1 // a folded '-'
		}
	}
	text.Grow(size)
	ends := make([]int, 0, ls.holes())
	k := 0
	for _, p := range ls.tmpl {
		text.WriteString(p.text)
		switch {
		case p.lit < 0:
		case !p.bound:
			ls.writeLiteral(&text, p, sql, lits) // checked by template
		default:
			k++
			text.WriteByte('$')
			var digits [20]byte
			text.Write(strconv.AppendInt(digits[:0], int64(k), 10))
		}
		if p.tsHole {
			ends = append(ends, text.Len())
		}
	}
	oids := make([]uint32, n)
	for i := range oids {
		oids[i] = int4OID
	}
	return &Bound{Template: templateOf(text.String(), ends, n+1), OIDs: oids} // the timestamp's, after the literals
}

// boundPieces is the number of the pieces' literals that are parameters.
func (ls *literalStmt) boundPieces() int {
	n := 0
	for _, p := range ls.tmpl {
		if p.bound {
			n++
		}
	}
	return n
}
