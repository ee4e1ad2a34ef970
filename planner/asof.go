package planner

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mzproxy/mzproxy/pgerr"
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// AS OF's expression, looked at before the proxy evaluates it: a parameter
// whose value only comes with Bind, calls to mz_now() (a function only the
// proxy knows), or plain SQL for the backend.

// Int8OID is PostgreSQL's bigint, the type an AS OF parameter is described
// with unless the client or a cast says otherwise.
const Int8OID = 20

// asOfParamTypes are the types (as pg_query names them after a cast) an AS
// OF parameter may be cast to, with their OIDs.
var asOfParamTypes = map[string]uint32{
	"int2": 21, "int4": 23, "int8": Int8OID, "numeric": 1700,
	"timestamptz": 1184, "timestamp": 1114, "date": 1082,
	"text": 25, "varchar": 1043,
}

// misplacedAsOfHint is the HINT of a syntax error in a query with an AS OF
// that is not its last clause.
const misplacedAsOfHint = "AS OF [AT LEAST] <timestamp> must come last in the SELECT, after ORDER BY, LIMIT and OFFSET."

// analyzeAsOf fills in a.Param, a.ParamType and a.Now from a.Expr.
func analyzeAsOf(a *AsOf) error {
	r, err := parse("SELECT (" + a.Expr + ")")
	if err != nil || len(r.Stmts) != 1 {
		return nil // the backend reports it when it evaluates the text
	}
	sel := r.Stmts[0].Stmt.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 {
		return nil
	}
	val := sel.TargetList[0].GetResTarget().GetVal()
	if p, typ := paramForm(val); p != nil {
		a.Param = int(p.Number)
		a.ParamType = Int8OID
		if typ != nil {
			oid, ok := asOfParamTypes[typeName(typ)]
			if !ok {
				return pgerr.Wrap(pgerr.FeatureNotSupported, asOfError(fmt.Sprintf("AS OF parameter $%d cast to an unsupported type", a.Param))).
					WithHint("Cast it to bigint (milliseconds since the Unix epoch) or timestamptz.")
			}
			a.ParamType = oid
		}
		return nil
	}
	hasParam, hasMzNow := false, false
	visit(val.ProtoReflect(), func(m protoreflect.Message) {
		switch x := m.Interface().(type) {
		case *pg.ParamRef:
			hasParam = true
		case *pg.FuncCall:
			hasMzNow = hasMzNow || isMzNow(x)
		}
	})
	if hasParam {
		return pgerr.Wrap(pgerr.FeatureNotSupported, asOfError("AS OF takes a parameter only on its own")).
			WithHint("Write AS OF $1 or AS OF $1::timestamptz and compute the timestamp in the client.")
	}
	if hasMzNow {
		return nowTemplate(a, sel)
	}
	return nil
}

// paramForm recognises `$n` and `$n::type` (or CAST($n AS type)).
func paramForm(n *pg.Node) (*pg.ParamRef, *pg.TypeName) {
	if p := n.GetParamRef(); p != nil {
		return p, nil
	}
	if c := n.GetTypeCast(); c != nil {
		if p := c.GetArg().GetParamRef(); p != nil {
			return p, c.TypeName
		}
	}
	return nil, nil
}

// typeName is a cast's type as pg_query names it ("timestamptz" for
// timestamp with time zone, "int8" for bigint), "" for arrays and
// qualified names other than pg_catalog's.
func typeName(t *pg.TypeName) string {
	if len(t.ArrayBounds) > 0 || len(t.Names) == 0 || len(t.Names) > 2 {
		return ""
	}
	if len(t.Names) == 2 && t.Names[0].GetString_().GetSval() != "pg_catalog" {
		return ""
	}
	return t.Names[len(t.Names)-1].GetString_().GetSval()
}

// nowTemplate makes a.Now: the expression with every mz_now() call a hole
// for the timestamp of the present, numbered $1 (the expression has no
// parameters of its own).
func nowTemplate(a *AsOf, sel *pg.SelectStmt) error {
	an := &analyzer{param: 1}
	visit(sel.ProtoReflect(), func(m protoreflect.Message) {
		if n, ok := m.Interface().(*pg.Node); ok {
			if f := n.GetFuncCall(); f != nil && isMzNow(f) {
				n.Node = an.mzNowExpr().Node
			}
		}
	})
	out, err := deparse(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sel}})
	if err != nil {
		return pgerr.New(pgerr.InternalError, "deparsing the AS OF expression: %v", err)
	}
	t, err := newTemplate(strings.TrimPrefix(out, "SELECT "), 1)
	if err != nil {
		return pgerr.New(pgerr.InternalError, "scanning the AS OF expression: %v", err)
	}
	a.Now = t
	return nil
}

// usesParam reports whether toks (of sql) include the parameter $n.
func usesParam(sql string, toks []token, n int) bool {
	for _, t := range toks {
		if t.tok == pg.Token_PARAM && sql[t.start+1:t.end] == strconv.Itoa(n) {
			return true
		}
	}
	return false
}

// nameMzNowColumns names the output column of a bare mz_now() call
// "mz_now", as PostgreSQL would name a function's column and Materialize
// names it: the rewrite turns the call into a cast, which PostgreSQL would
// name after the type.
func nameMzNowColumns(n *pg.Node) {
	visit(n.ProtoReflect(), func(m protoreflect.Message) {
		rt, ok := m.Interface().(*pg.ResTarget)
		if !ok || rt.Name != "" || rt.Val == nil {
			return
		}
		if f := rt.Val.GetFuncCall(); f != nil && isMzNow(f) {
			rt.Name = "mz_now"
		}
	})
}

// misplacedAsOf explains a syntax error in a query that has an AS OF
// clause at its top level but not at its end (so preparse left it in):
// Materialize's message when a clause follows the AS OF, and in any case a
// hint saying where AS OF goes.
func misplacedAsOf(sql string, toks []token, se *SyntaxError) {
	depth, at := 0, -1
	for i, t := range toks {
		switch {
		case t.is(sql, '('):
			depth++
		case t.is(sql, ')'):
			depth--
		case depth == 0 && at < 0 && t.tok == pg.Token_AS && i+2 < len(toks) && toks[i+1].word(sql) == "of" &&
			mayStartTimestamp(sql, toks[i+2]):
			at = i
		case depth == 0 && at >= 0 && i > at+2 && isClauseKeyword(t.tok):
			se.Message = "Expected end of statement, found " + strings.ToUpper(t.word(sql))
			se.off = t.start
			se.misplacedAsOf, se.Hint = true, misplacedAsOfHint
			return
		}
	}
	if at >= 0 {
		se.misplacedAsOf, se.Hint = true, misplacedAsOfHint
	}
}

// mayStartTimestamp reports whether t may begin AS OF's timestamp: not
// when `AS of` is an alias followed by the next item or clause.
func mayStartTimestamp(sql string, t token) bool {
	return !t.is(sql, ',') && !t.is(sql, ')') && t.tok != pg.Token_FROM && t.tok != pg.Token_INTO && !isClauseKeyword(t.tok)
}

// isClauseKeyword reports whether a keyword starts a clause of a SELECT.
func isClauseKeyword(t pg.Token) bool {
	switch t {
	case pg.Token_WHERE, pg.Token_GROUP_P, pg.Token_HAVING, pg.Token_WINDOW, pg.Token_ORDER,
		pg.Token_LIMIT, pg.Token_OFFSET, pg.Token_FETCH, pg.Token_FOR, pg.Token_UNION,
		pg.Token_INTERSECT, pg.Token_EXCEPT:
		return true
	}
	return false
}

// statementTokens is the number of tokens that lie within the first n
// bytes of the statement (the statement without its AS OF clause).
func statementTokens(toks []token, n int) int {
	i := 0
	for i < len(toks) && toks[i].end <= n {
		i++
	}
	return i
}
