package planner

import (
	"slices"

	"github.com/mzproxy/mzproxy/pgerr"
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file finds the relations a statement reads and writes, with SQL's
// scoping rules, and (in rewrite mode) replaces every reference to a
// managed object with a read of its history at the statement's timestamp
// parameter. One walker does both so that the two can never disagree about
// what a name refers to.

// maxViewDepth bounds view expansion (and so cycles the catalog should not
// contain anyway).
const maxViewDepth = 32

// scope is one WITH level: the CTE names it makes visible.
type scope struct {
	names  []string
	parent *scope
}

func (s *scope) has(name string) bool {
	for ; s != nil; s = s.parent {
		if slices.Contains(s.names, name) {
			return true
		}
	}
	return false
}

// dep is one catalog lookup a plan depends on.
type dep struct {
	schema, name string
	obj          *Object // nil: resolved to nothing managed
}

// analyzer walks one statement's tree.
type analyzer struct {
	cat  Catalog
	path []string

	reads, writes []Ref
	inputs        []*Object // managed tables read, transitively through views
	deps          []dep
	usesMzNow     bool
	locking       bool // a FOR UPDATE/SHARE clause was seen

	// Rewrite mode.
	rewrite   bool
	param     int      // the timestamp parameter's number
	rewrote   bool     // something was replaced
	qualified []string // "schema\x00table" of rewritten references without alias
	viewDepth int      // > 0 inside an expanded view definition
	viewStack []uint64
	// expandedView: a view's definition was put into the tree, which is
	// then deeper than its statement's text says.
	expandedView bool
	// spliceOnly: the rewrite records its history subqueries (splices)
	// and leaves the tree as parsed, for spliceHistory.
	spliceOnly bool
	splices    []historySplice
	err        error
}

func (a *analyzer) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}

// lookup resolves a name through the catalog and records the dependency.
func (a *analyzer) lookup(schema, name string) *Object {
	for _, d := range a.deps {
		if d.schema == schema && d.name == name {
			return d.obj
		}
	}
	var obj *Object
	if schema != "" || !isSystemRelation(name, a.path) {
		if o, ok := a.cat.Lookup(schema, name, a.path); ok {
			obj = o
		}
	}
	a.deps = append(a.deps, dep{schema: schema, name: name, obj: obj})
	return obj
}

func addRef(refs []Ref, r Ref) []Ref {
	for _, x := range refs {
		if x.Schema == r.Schema && x.Name == r.Name {
			return refs
		}
	}
	return append(refs, r)
}

func (a *analyzer) addInput(o *Object) {
	for _, x := range a.inputs {
		if x.ID == o.ID {
			return
		}
	}
	a.inputs = append(a.inputs, o)
}

// statement walks a top-level statement.
func (a *analyzer) statement(n *pg.Node) {
	a.node(n, nil)
}

// node walks n, which may be replaced in place.
func (a *analyzer) node(n *pg.Node, sc *scope) {
	if n == nil || a.err != nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_RangeVar:
		a.rangeVarRead(n, x.RangeVar, sc)
	case *pg.Node_SelectStmt:
		if checksOnly(x.SelectStmt) {
			return
		}
		a.selectStmt(x.SelectStmt, sc)
	case *pg.Node_InsertStmt:
		s := x.InsertStmt
		sc = a.with(s.WithClause, sc)
		a.target(s.Relation)
		w, rel := s.WithClause, s.Relation
		s.WithClause, s.Relation = nil, nil
		a.msg(s.ProtoReflect(), sc)
		s.WithClause, s.Relation = w, rel
	case *pg.Node_UpdateStmt:
		s := x.UpdateStmt
		sc = a.with(s.WithClause, sc)
		a.target(s.Relation)
		w, rel := s.WithClause, s.Relation
		s.WithClause, s.Relation = nil, nil
		a.msg(s.ProtoReflect(), sc)
		s.WithClause, s.Relation = w, rel
	case *pg.Node_DeleteStmt:
		s := x.DeleteStmt
		sc = a.with(s.WithClause, sc)
		a.target(s.Relation)
		w, rel := s.WithClause, s.Relation
		s.WithClause, s.Relation = nil, nil
		a.msg(s.ProtoReflect(), sc)
		s.WithClause, s.Relation = w, rel
	case *pg.Node_MergeStmt:
		s := x.MergeStmt
		sc = a.with(s.WithClause, sc)
		a.target(s.Relation)
		w, rel := s.WithClause, s.Relation
		s.WithClause, s.Relation = nil, nil
		a.msg(s.ProtoReflect(), sc)
		s.WithClause, s.Relation = w, rel
	case *pg.Node_CopyStmt:
		s := x.CopyStmt
		if s.Relation != nil {
			if s.IsFrom {
				a.target(s.Relation)
			} else {
				a.read(s.Relation.Schemaname, s.Relation.Relname)
			}
		}
		a.node(s.Query, sc)
	case *pg.Node_TruncateStmt:
		for _, r := range x.TruncateStmt.Relations {
			if rv := r.GetRangeVar(); rv != nil {
				a.target(rv)
			}
		}
	case *pg.Node_DropStmt:
		a.dropStmt(x.DropStmt)
	case *pg.Node_GrantStmt:
		// GRANT ... ON t: t is the DDL's target.
		for _, o := range x.GrantStmt.Objects {
			if rv := o.GetRangeVar(); rv != nil {
				a.target(rv)
			}
		}
	case *pg.Node_Constraint:
		// REFERENCES t reads t; everything else in a constraint is an
		// expression.
		c := x.Constraint
		if c.Pktable != nil {
			a.read(c.Pktable.Schemaname, c.Pktable.Relname)
		}
		pk := c.Pktable
		c.Pktable = nil
		a.msg(c.ProtoReflect(), sc)
		c.Pktable = pk
	case *pg.Node_RangeTableSample:
		// TABLESAMPLE applies to tables only, so a managed relation under it
		// cannot be replaced by a subquery.
		if rv := x.RangeTableSample.Relation.GetRangeVar(); a.rewrite && rv != nil && !(rv.Schemaname == "" && sc.has(rv.Relname)) {
			if o := a.lookup(rv.Schemaname, rv.Relname); o != nil {
				a.fail(pgerr.New(pgerr.FeatureNotSupported, "TABLESAMPLE is not supported on %q at an explicit timestamp", rv.Relname))
				return
			}
		}
		a.msg(x.RangeTableSample.ProtoReflect(), sc)
	case *pg.Node_ResTarget:
		// A bare mz_now() output column is named mz_now, as PostgreSQL
		// (and Materialize) name a function call's column: its rewrite
		// $N::bigint alone would be named int8, and drivers that read
		// columns by name (asyncpg's Record, postgres.js) would miss it.
		if rt := x.ResTarget; a.rewrite && rt.Name == "" && rt.Val.GetFuncCall() != nil && isMzNow(rt.Val.GetFuncCall()) {
			rt.Name = "mz_now"
		}
		a.msg(x.ResTarget.ProtoReflect(), sc)
	case *pg.Node_FuncCall:
		if isMzNow(x.FuncCall) {
			a.usesMzNow = true
			if a.rewrite {
				n.Node = a.mzNowExpr().Node
				a.rewrote = true
				return
			}
		}
		a.msg(x.FuncCall.ProtoReflect(), sc)
	default:
		a.msg(n.ProtoReflect(), sc)
	}
}

// msg walks every field of a message generically.
func (a *analyzer) msg(m protoreflect.Message, sc *scope) {
	eachMessage(m, func(c protoreflect.Message) bool {
		a.any(c, sc)
		return a.err == nil
	})
}

// eachMessage calls fn for each message-typed field value of m (list
// elements one by one), in field declaration order: protoreflect's Range
// has an undefined order, and plans must be deterministic. fn returns
// false to stop.
func eachMessage(m protoreflect.Message, fn func(protoreflect.Message) bool) {
	md := m.Descriptor()
	fds := md.Fields()
	if oos := md.Oneofs(); oos.Len() == 1 && oos.Get(0).Fields().Len() == fds.Len() {
		// pg_query's Node: a oneof of ~270 node types, one of them set.
		if fd := m.WhichOneof(oos.Get(0)); fd != nil {
			eachField(m, fd, fn)
		}
		return
	}
	for i := 0; i < fds.Len(); i++ {
		if !eachField(m, fds.Get(i), fn) {
			return
		}
	}
}

func eachField(m protoreflect.Message, fd protoreflect.FieldDescriptor, fn func(protoreflect.Message) bool) bool {
	if fd.Kind() != protoreflect.MessageKind || !m.Has(fd) {
		return true
	}
	v := m.Get(fd)
	if !fd.IsList() {
		return fn(v.Message())
	}
	l := v.List()
	for j := 0; j < l.Len(); j++ {
		if !fn(l.Get(j).Message()) {
			return false
		}
	}
	return true
}

func (a *analyzer) any(m protoreflect.Message, sc *scope) {
	switch x := m.Interface().(type) {
	case *pg.Node:
		a.node(x, sc)
	case *pg.RangeVar:
		// A relation that is a field of its own (not a FROM item): the
		// target of DDL (CREATE TABLE t, ALTER TABLE t, CREATE INDEX ON t,
		// SELECT INTO t, ...).
		a.target(x)
	default:
		a.msg(m, sc)
	}
}

// with opens the scope of a WITH clause, walking its CTE bodies.
func (a *analyzer) with(w *pg.WithClause, sc *scope) *scope {
	if w == nil {
		return sc
	}
	inner := &scope{parent: sc}
	if w.Recursive {
		for _, c := range w.Ctes {
			if cte := c.GetCommonTableExpr(); cte != nil {
				inner.names = append(inner.names, cte.Ctename)
			}
		}
	}
	for _, c := range w.Ctes {
		cte := c.GetCommonTableExpr()
		if cte == nil {
			continue
		}
		a.node(cte.Ctequery, inner)
		if !w.Recursive {
			inner.names = append(inner.names, cte.Ctename)
		}
	}
	return inner
}

func (a *analyzer) selectStmt(s *pg.SelectStmt, sc *scope) {
	if s == nil {
		return
	}
	sc = a.with(s.WithClause, sc)
	if s.IntoClause != nil && s.IntoClause.Rel != nil {
		a.target(s.IntoClause.Rel)
	}
	if len(s.LockingClause) > 0 {
		a.locking = true
	}
	// FOR UPDATE OF t names range-table entries, not relations: skip.
	w, into, lock := s.WithClause, s.IntoClause, s.LockingClause
	s.WithClause, s.IntoClause, s.LockingClause = nil, nil, nil
	a.msg(s.ProtoReflect(), sc)
	s.WithClause, s.IntoClause, s.LockingClause = w, into, lock
}

// target records a written (or DDL-targeted) relation.
func (a *analyzer) target(rv *pg.RangeVar) {
	if rv == nil || a.viewDepth > 0 {
		return
	}
	a.writes = addRef(a.writes, Ref{Schema: rv.Schemaname, Name: rv.Relname, Object: a.lookup(rv.Schemaname, rv.Relname)})
}

// read records a read relation that cannot be rewritten (COPY t TO,
// REFERENCES t).
func (a *analyzer) read(schema, name string) {
	o := a.lookup(schema, name)
	if a.viewDepth == 0 {
		a.reads = addRef(a.reads, Ref{Schema: schema, Name: name, Object: o})
	}
	if o != nil && o.Kind == Table {
		a.addInput(o)
	}
}

// rangeVarRead handles a relation in FROM (or JOIN, USING, ...): record it,
// and in rewrite mode replace it with its history at the parameter.
func (a *analyzer) rangeVarRead(n *pg.Node, rv *pg.RangeVar, sc *scope) {
	if rv.Schemaname == "" && rv.Catalogname == "" && sc.has(rv.Relname) {
		return // a CTE
	}
	o := a.lookup(rv.Schemaname, rv.Relname)
	if a.viewDepth == 0 {
		a.reads = addRef(a.reads, Ref{Schema: rv.Schemaname, Name: rv.Relname, Object: o})
	}
	if o == nil {
		return
	}
	switch o.Kind {
	case Table:
		a.addInput(o)
		if a.rewrite {
			a.replaceTable(n, rv, o)
		}
	case View:
		a.expandView(n, rv, o)
	}
}

// checksOnly reports a `SELECT FROM <relations> HAVING false`, the shape
// of a rewrite's guard: it has no row and no column, PostgreSQL only
// resolves and checks its relations, so they are not read and must stay as
// written (a rewritten statement rewrites to itself).
func checksOnly(s *pg.SelectStmt) bool {
	if len(s.TargetList) != 0 || len(s.FromClause) == 0 || s.WhereClause != nil || len(s.GroupClause) != 0 ||
		s.WithClause != nil || s.Op != pg.SetOperation_SETOP_NONE {
		return false
	}
	if c := s.HavingClause.GetAConst(); c == nil || c.GetBoolval() == nil || c.GetBoolval().Boolval {
		return false
	}
	for _, f := range s.FromClause {
		if f.GetRangeVar() == nil {
			return false
		}
	}
	return true
}

func isMzNow(f *pg.FuncCall) bool {
	if len(f.Args) != 0 || f.AggStar || f.Over != nil || f.AggFilter != nil || len(f.AggOrder) != 0 ||
		f.AggDistinct || f.AggWithinGroup || f.FuncVariadic {
		return false
	}
	switch len(f.Funcname) {
	case 1:
		return f.Funcname[0].GetString_().GetSval() == "mz_now"
	case 2:
		return f.Funcname[0].GetString_().GetSval() == "mz_catalog" && f.Funcname[1].GetString_().GetSval() == "mz_now"
	}
	return false
}

// expandView walks a managed view's definition. Its managed tables are
// inputs of the statement; in rewrite mode, if the definition reads any
// managed table, the reference is replaced by the rewritten definition.
func (a *analyzer) expandView(n *pg.Node, rv *pg.RangeVar, o *Object) {
	if slices.Contains(a.viewStack, o.ID) || len(a.viewStack) >= maxViewDepth {
		a.fail(pgerr.New("42P17", "infinite recursion detected in rules for relation %q", o.Name))
		return
	}
	body, err := parseViewSQL(o.ViewSQL)
	if pgerr.Of(err) == pgerr.StatementTooComplex {
		a.fail(err)
		return
	}
	if err != nil {
		a.fail(pgerr.New(pgerr.InternalError, "cannot parse the definition of view %q: %v", o.Name, err))
		return
	}
	a.viewStack = append(a.viewStack, o.ID)
	a.viewDepth++
	a.expandedView = true
	before := a.rewrote
	a.rewrote = false
	a.node(body, nil)
	inner := a.rewrote
	a.rewrote = before || inner
	a.viewDepth--
	a.viewStack = a.viewStack[:len(a.viewStack)-1]
	if a.err != nil || !a.rewrite || !inner || a.spliceOnly {
		return
	}
	alias := aliasFor(rv)
	if len(alias.Colnames) == 0 {
		for _, c := range o.Columns {
			alias.Colnames = append(alias.Colnames, stringNode(c))
		}
	}
	if g := a.guard(rv, o); g != "" {
		// The view's own name is checked as the table's is (replaceTable).
		r, err := parse("SELECT * FROM (SELECT) AS v" + g)
		if err != nil {
			a.fail(pgerr.New(pgerr.InternalError, "cannot build the read of view %q: %v", o.Name, err))
			return
		}
		wrap := r.Stmts[0].Stmt
		wrap.GetSelectStmt().FromClause[0].GetJoinExpr().Larg.GetRangeSubselect().Subquery = body
		body = wrap
	}
	a.noteQualified(rv, o)
	n.Node = &pg.Node_RangeSubselect{RangeSubselect: &pg.RangeSubselect{Subquery: body, Alias: alias}}
}

// parseViewSQL parses a view definition (pg_get_viewdef output, which ends
// with a semicolon) into its query node.
func parseViewSQL(sql string) (*pg.Node, error) {
	r, err := parse(sql)
	if err != nil {
		return nil, err
	}
	if len(r.Stmts) != 1 || r.Stmts[0].Stmt.GetSelectStmt() == nil {
		return nil, errNotQuery
	}
	return r.Stmts[0].Stmt, nil
}

var errNotQuery = pgerr.New(pgerr.InternalError, "view definition is not a single query")

// aliasFor is the alias a replacement subquery takes: the reference's own
// alias (with its column aliases) or the relation's name.
func aliasFor(rv *pg.RangeVar) *pg.Alias {
	if rv.Alias != nil {
		al := &pg.Alias{Aliasname: rv.Alias.Aliasname}
		al.Colnames = append(al.Colnames, rv.Alias.Colnames...)
		return al
	}
	return &pg.Alias{Aliasname: rv.Relname}
}

// noteQualified remembers a replaced reference without alias: column
// references qualified with its schema (public.t.a) must become t.a.
func (a *analyzer) noteQualified(rv *pg.RangeVar, o *Object) {
	if rv.Alias != nil {
		return
	}
	if rv.Schemaname != "" {
		a.qualified = append(a.qualified, rv.Schemaname+"\x00"+rv.Relname)
	}
	a.qualified = append(a.qualified, o.Schema+"\x00"+rv.Relname)
}

func stringNode(s string) *pg.Node {
	return &pg.Node{Node: &pg.Node_String_{String_: &pg.String{Sval: s}}}
}

// dropStmt records the relations DROP TABLE/VIEW/... names as targets.
func (a *analyzer) dropStmt(d *pg.DropStmt) {
	switch d.RemoveType {
	case pg.ObjectType_OBJECT_TABLE, pg.ObjectType_OBJECT_VIEW, pg.ObjectType_OBJECT_MATVIEW,
		pg.ObjectType_OBJECT_INDEX, pg.ObjectType_OBJECT_SEQUENCE, pg.ObjectType_OBJECT_FOREIGN_TABLE:
	default:
		return
	}
	for _, o := range d.Objects {
		items := o.GetList().GetItems()
		if len(items) == 0 {
			continue
		}
		rv := &pg.RangeVar{Relname: items[len(items)-1].GetString_().GetSval()}
		if len(items) > 1 {
			rv.Schemaname = items[len(items)-2].GetString_().GetSval()
		}
		a.target(rv)
	}
}
