package planner

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/mzproxy/mzproxy/pgerr"
	pg "github.com/pganalyze/pg_query_go/v6"
)

// Options are the session state a plan depends on (and is cached under).
type Options struct {
	// SearchPath is the session's search_path, passed unchanged to
	// Catalog.Lookup (expand "$user" before, if the catalog needs it).
	SearchPath []string
	// ExplicitTimestamp forces the history rewrite of every read even at
	// the present ("history mode", used to prove the rewrite changes no
	// answer).
	ExplicitTimestamp bool
}

// Statement is one planned statement. Statements returned by Plan may be
// shared by concurrent callers through the cache: treat them as read-only.
type Statement struct {
	Kind Kind
	// Tag is the command tag PostgreSQL reports ("SELECT", "INSERT",
	// "CREATE TABLE", ...; "SELECT" for CREATE TABLE AS and SELECT INTO, as
	// on the wire). "" when unknown.
	Tag string
	// SQL is the statement's text, without its semicolon and without
	// Materialize syntax (AS OF, RETAIN HISTORY). "" when nothing is left
	// for PostgreSQL (ALTER TABLE t SET (RETAIN HISTORY FOR ...)).
	SQL string
	// Params is the highest $n the statement uses.
	Params int
	// Reads and Writes are the relations referenced, as written, resolved.
	// Writes include the targets of DDL.
	Reads, Writes []Ref
	// Inputs are the managed tables read, transitively through views.
	Inputs    []*Object
	UsesMzNow bool
	// Locking is true when a SELECT has FOR UPDATE/SHARE (it takes row
	// locks, so it is not a pure read).
	Locking bool
	// CopyFromStdin is true for COPY ... FROM STDIN: the client sends COPY
	// data next. (COPY (INSERT ... RETURNING) TO is a write too, but copies
	// out.)
	CopyFromStdin bool

	AsOf             *AsOf
	ExplainTimestamp *ExplainTimestampStmt
	Subscribe        *Subscribe
	Retention        *Retention
	Txn              *Transaction // KindTransaction
	Var              *Var         // KindSet, KindShow, KindReset
	Cursor           *Cursor      // KindCursor
	// Deallocate is the prepared statement DEALLOCATE drops ("" for
	// DEALLOCATE ALL).
	Deallocate string
	// CatalogNeutral marks DDL that changes nothing mzproxy records or
	// plans by: CREATE INDEX that is not UNIQUE (a unique one gets a
	// lookup mirror on the history table) and DROP INDEX (a mirror goes
	// with its index whoever drops it). It needs no timestamp and no
	// catalog revision.
	CatalogNeutral bool
	// Inner is the statement inside EXPLAIN, DECLARE, PREPARE and COPY
	// (query) TO: Kind and Tag only (relations, template etc. are on the
	// outer statement). For SUBSCRIBE it is the subscribed read (TABLE
	// name, or the query), planned with a Template; for DECLARE ... FOR
	// SUBSCRIBE and COPY (SUBSCRIBE ...) TO it is the planned SUBSCRIBE.
	Inner *Statement

	// Template is the statement rewritten to read at the timestamp
	// parameter; nil when the statement runs as SQL unchanged (a read of
	// the present, a write, DDL, ...). A Template is made for reads with
	// AS OF, reads calling mz_now(), and every read in history mode.
	Template *Template
	// Bound is Template with some literals as parameters, for a read
	// planned from a cached skeleton (bound.go); nil otherwise.
	Bound *Bound
}

// ExplainTimestampStmt is EXPLAIN TIMESTAMP [AS TEXT|JSON] FOR <select>.
type ExplainTimestampStmt struct {
	Format ExplainFormat
	Inner  *Statement // the SELECT, planned (with its AsOf and Template)
}

// NeedsTimestamp reports whether the statement's SQL must be rendered from
// Template.
func (s *Statement) NeedsTimestamp() bool { return s.Template != nil }

// plan plans a query string without the cache, returning the catalog
// lookups the plan depends on.
func plan(sql string, cat Catalog, opts Options) ([]*Statement, []dep, error) {
	if err := checkNesting(sql); err != nil {
		return nil, nil, err // before any text reaches pg_query
	}
	parts, err := splitStatements(sql)
	if err != nil {
		return nil, nil, fromParser(sql, err).place(sql, 0)
	}
	var (
		out  []*Statement
		deps []dep
	)
	for _, p := range parts {
		st, d, err := planOne(p.text, p.toks, cat, opts)
		if err != nil {
			var se *SyntaxError
			if errors.As(err, &se) {
				return nil, nil, se.place(sql, p.offset)
			}
			return nil, nil, err
		}
		out = append(out, st)
		deps = append(deps, d...)
	}
	return out, deps, nil
}

// planOne plans one statement (text without its semicolon). Syntax errors
// carry offsets into text.
func planOne(text string, toks []token, cat Catalog, opts Options) (*Statement, []dep, error) {
	mz, err := preparse(text, toks)
	if err != nil {
		return nil, nil, err
	}
	st := &Statement{SQL: mz.text, Params: maxParam(text, toks), AsOf: mz.asOf, Retention: mz.retention}

	switch {
	case mz.explainTS != nil:
		return planExplainTimestamp(st, text, mz, cat, opts)
	case mz.subscribe:
		return planSubscribe(st, text, toks, cat, opts)
	case mz.wrappedSub:
		return planWrappedSubscribe(st, text, mz, cat, opts)
	case mz.retention != nil && mz.text == "":
		return planRetentionOnly(st, text, toks, cat, opts)
	}

	if mz.asOf != nil {
		if err := analyzeAsOf(mz.asOf); err != nil {
			return nil, nil, err
		}
		mz.asOf.ParamElsewhere = mz.asOf.Param > 0 && usesParam(text, toks[:statementTokens(toks, len(mz.text))], mz.asOf.Param)
	}
	r, err := parse(mz.text)
	if err != nil {
		if pgerr.Of(err) == pgerr.StatementTooComplex {
			return nil, nil, err
		}
		se := fromParser(mz.text, err)
		if mz.asOf == nil && startsQuery(text, toks) {
			misplacedAsOf(text, toks, se)
		}
		return nil, nil, se
	}
	if len(r.Stmts) != 1 {
		// The splitter and the parser disagree about statement
		// boundaries (should not happen).
		return nil, nil, syntaxAt(text, 0)
	}
	n := r.Stmts[0].Stmt
	classify(st, n)
	setInner(st, n)

	// A read that will be rewritten by splicing is analysed once, by the
	// walk that finds its splices (history_splice.go). That walk also
	// fails where a rewrite would (a TABLESAMPLE or row-level security of
	// a managed table): the statement may turn out to be no read (a
	// data-modifying WITH), so a failure is looked at again by the plain
	// walk. Neither changes the tree.
	spliceToks := tokensOf(text, toks, st.SQL)
	merged := spliceRewrites && spliceToks != nil && (st.AsOf != nil || opts.ExplicitTimestamp) &&
		rewritable(st) && !mayMention(st.SQL, "mz_now")
	a := &analyzer{cat: cat, path: opts.SearchPath}
	if merged {
		a.rewrite, a.spliceOnly, a.param = true, true, st.Params+1
	}
	a.statement(n)
	if a.err != nil && merged {
		merged = false
		a = &analyzer{cat: cat, path: opts.SearchPath}
		a.statement(n)
	}
	if a.err != nil {
		return nil, nil, a.err
	}
	st.Reads, st.Writes, st.Inputs, st.UsesMzNow, st.Locking = a.reads, a.writes, a.inputs, a.usesMzNow, a.locking
	if st.Kind == KindRead && len(a.writes) > 0 {
		// WITH d AS (DELETE ... RETURNING ...) SELECT ...
		st.Kind = KindWrite
	}

	if st.UsesMzNow && st.Kind != KindRead && st.Kind != KindExplain && st.Kind != KindCursor && st.Kind != KindCopyTo {
		return nil, nil, pgerr.New(pgerr.FeatureNotSupported, "calls to mz_now in write statements are not supported")
	}
	if st.AsOf != nil && st.Kind != KindRead {
		return nil, nil, pgerr.New(pgerr.FeatureNotSupported, "AS OF is only supported for SELECT")
	}
	if st.Txn != nil && st.Txn.Kind == TxnPrepare {
		// A prepared transaction outlives its session and every timeout:
		// one that wrote keeps the writers' gate (its T was chosen at
		// PREPARE), and every pin of the database waits for it until
		// someone runs COMMIT or ROLLBACK PREPARED. Materialize has no
		// two-phase commit either.
		return nil, nil, pgerr.New(pgerr.FeatureNotSupported, "PREPARE TRANSACTION is not supported").
			WithHint("mzproxy does not support two-phase commit: use COMMIT.")
	}
	if (st.AsOf != nil || st.UsesMzNow || opts.ExplicitTimestamp) && rewritable(st) {
		if hasParamZero(text, toks) {
			// The raw parser takes $0 and pg_query's deparser prints it as
			// "?"; PostgreSQL refuses it later, with this error.
			return nil, nil, pgerr.New("42P02", "there is no parameter $0")
		}
		var walked *analyzer
		if merged {
			walked = a
		}
		if err := rewriteStatement(st, n, spliceToks, walked, cat, opts); err != nil {
			return nil, nil, err
		}
	}
	return st, a.deps, nil
}

// rewritable reports whether a statement reads at a timestamp: SELECT and
// the SELECT inside EXPLAIN, DECLARE and COPY (...) TO. CREATE TABLE AS and
// views are DDL and read the present.
func rewritable(st *Statement) bool {
	switch st.Kind {
	case KindRead:
		return true
	case KindExplain, KindCopyTo:
		return st.Inner != nil && st.Inner.Kind == KindRead
	case KindCursor:
		return st.Cursor.Declare && st.Inner != nil && st.Inner.Kind == KindRead
	}
	return false
}

// rewriteStatement makes st.Template. n is mutated. toks are st.SQL's
// tokens, nil when they are not at hand; walked, when not nil, is the
// splices' walk of n, done already.
func rewriteStatement(st *Statement, n *pg.Node, toks []token, walked *analyzer, cat Catalog, opts Options) error {
	mentionsMzNow := mayMention(st.SQL, "mz_now")
	if toks != nil && !mentionsMzNow && spliceRewrites {
		// Most rewrites only put history subqueries in place of table
		// names: those are spliced into the text, without the rewritten
		// tree's deparse and the subqueries' parse (spliceHistory).
		a := walked
		if a == nil {
			a = &analyzer{cat: cat, path: opts.SearchPath, rewrite: true, spliceOnly: true, param: st.Params + 1}
			a.statement(n)
		}
		if done, err := a.finishRewrite(st); done || err != nil {
			return err
		}
		if !a.expandedView && !a.mentionsQualified(st.SQL) {
			if out, ok := spliceHistory(st.SQL, toks, a.splices); ok {
				return setTemplate(st, out, a.param, true)
			}
		}
		// Otherwise the tree, left as parsed, is rewritten below.
	}
	if mentionsMzNow {
		nameMzNowColumns(n)
	}
	a := &analyzer{cat: cat, path: opts.SearchPath, rewrite: true, param: st.Params + 1}
	a.statement(n)
	if done, err := a.finishRewrite(st); done || err != nil {
		return err
	}
	if a.mentionsQualified(st.SQL) {
		fixQualified(n, a.qualified)
	}
	var out string
	var err error
	if a.expandedView {
		out, err = deparse(n)
	} else {
		out, err = deparseParsed(n, st.SQL)
	}
	if pgerr.Of(err) == pgerr.StatementTooComplex {
		return err
	}
	if err != nil {
		return pgerr.New(pgerr.InternalError, "deparsing the rewritten statement: %v", err)
	}
	return setTemplate(st, out, a.param, false)
}

// finishRewrite ends a rewrite's walk: done (with the error, if any)
// when the walk failed, replaced nothing (st's own text is its template)
// or must fail.
func (a *analyzer) finishRewrite(st *Statement) (done bool, err error) {
	if a.err != nil {
		return true, a.err
	}
	if !a.rewrote {
		st.Template = &Template{segs: []string{st.SQL}, param: a.param, size: len(st.SQL)}
		return true, nil
	}
	if a.locking && len(st.Inputs) > 0 {
		return true, pgerr.New(pgerr.FeatureNotSupported, "FOR UPDATE/SHARE is not supported at an explicit timestamp")
	}
	return false, nil
}

// mentionsQualified reports whether sql may qualify a column with the
// schema of a replaced reference without alias (fixQualified).
func (a *analyzer) mentionsQualified(sql string) bool {
	return slices.ContainsFunc(a.qualified, func(q string) bool { return mayMention(sql, q[:strings.IndexByte(q, 0)]) })
}

// setTemplate makes st.Template of the rewritten text out (spliced: by
// spliceHistory).
func setTemplate(st *Statement, out string, param int, spliced bool) error {
	t, err := newTemplate(out, param)
	if err != nil {
		return pgerr.New(pgerr.InternalError, "scanning the rewritten statement: %v", err)
	}
	t.spliced = spliced
	st.Template = t
	return nil
}

// setInner classifies the statement inside EXPLAIN, DECLARE, PREPARE and
// COPY (query) TO.
func setInner(st *Statement, n *pg.Node) {
	var q *pg.Node
	switch x := n.Node.(type) {
	case *pg.Node_ExplainStmt:
		q = x.ExplainStmt.Query
	case *pg.Node_DeclareCursorStmt:
		q = x.DeclareCursorStmt.Query
	case *pg.Node_PrepareStmt:
		q = x.PrepareStmt.Query
	case *pg.Node_CopyStmt:
		q = x.CopyStmt.Query
	}
	if q == nil {
		return
	}
	in := &Statement{}
	classify(in, q)
	if in.Kind == KindRead {
		if s := q.GetSelectStmt(); s != nil && s.WithClause != nil && hasDMLCTE(s.WithClause) {
			in.Kind = KindWrite
		}
	}
	st.Inner = in
	if st.Kind == KindCopyTo && in.Kind == KindWrite {
		st.Kind = KindWrite // COPY (INSERT ... RETURNING ...) TO STDOUT
	}
}

func hasDMLCTE(w *pg.WithClause) bool {
	for _, c := range w.Ctes {
		switch c.GetCommonTableExpr().GetCtequery().GetNode().(type) {
		case *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt, *pg.Node_MergeStmt:
			return true
		}
	}
	return false
}

// maxParam is the highest $n among the tokens.
func maxParam(sql string, toks []token) int {
	m := 0
	for _, t := range toks {
		if t.tok == pg.Token_PARAM {
			if v, err := strconv.Atoi(sql[t.start+1 : t.end]); err == nil && v > m {
				m = v
			}
		}
	}
	return m
}

func hasParamZero(sql string, toks []token) bool {
	for _, t := range toks {
		if t.tok == pg.Token_PARAM && strings.TrimLeft(sql[t.start+1:t.end], "0") == "" {
			return true
		}
	}
	return false
}

// shiftErr moves a syntax error of a sub-text starting at byte k of its
// statement.
func shiftErr(err error, k int) error {
	var se *SyntaxError
	if errors.As(err, &se) && se.off >= 0 {
		if k < 0 {
			se.off = -1 // text the user did not write
		} else {
			se.off += k
		}
	}
	return err
}

func planExplainTimestamp(st *Statement, text string, mz *mzSyntax, cat Catalog, opts Options) (*Statement, []dep, error) {
	k := len(text) - len(mz.inner)
	toks, err := scanTokens(mz.inner)
	if err != nil {
		return nil, nil, shiftErr(fromParser(mz.inner, err), k)
	}
	inner, deps, err := planOne(mz.inner, toks, cat, opts)
	if err != nil {
		return nil, nil, shiftErr(err, k)
	}
	if inner.Kind != KindRead {
		return nil, nil, pgerr.New(pgerr.FeatureNotSupported, "EXPLAIN TIMESTAMP is only supported for SELECT")
	}
	st.Kind, st.Tag, st.SQL = KindExplainTimestamp, "EXPLAIN", text
	st.ExplainTimestamp = &ExplainTimestampStmt{Format: *mz.explainTS, Inner: inner}
	st.AsOf = inner.AsOf
	st.Reads, st.Inputs, st.UsesMzNow = inner.Reads, inner.Inputs, inner.UsesMzNow
	return st, deps, nil
}

func planSubscribe(st *Statement, text string, toks []token, cat Catalog, opts Options) (*Statement, []dep, error) {
	sub, query, k, err := preparseSubscribe(text, toks)
	if err != nil {
		return nil, nil, err
	}
	st.Kind, st.Tag, st.Subscribe, st.SQL = KindSubscribe, "SUBSCRIBE", sub, text
	st.AsOf = sub.AsOf
	if sub.AsOf != nil {
		if err := analyzeAsOf(sub.AsOf); err != nil {
			return nil, nil, err
		}
	}
	var (
		inner *Statement
		deps  []dep
	)
	if sub.Object != nil {
		query, k = "TABLE "+sub.Object.String(), -1
	}
	qt, err := scanTokens(query)
	if err != nil {
		return nil, nil, shiftErr(fromParser(query, err), k)
	}
	// In history mode, so that Inner.Template reads the subscribed query
	// at any timestamp (its snapshot at the AS OF).
	inner, deps, err = planOne(query, qt, cat, Options{SearchPath: opts.SearchPath, ExplicitTimestamp: true})
	if err != nil {
		return nil, nil, shiftErr(err, k)
	}
	if inner.Kind != KindRead {
		return nil, nil, pgerr.New(pgerr.FeatureNotSupported, "SUBSCRIBE is only supported for SELECT")
	}
	if sub.Object == nil {
		sub.Query = inner
	}
	st.Inner = inner
	st.Reads, st.Inputs, st.UsesMzNow = inner.Reads, inner.Inputs, inner.UsesMzNow
	return st, deps, nil
}

// planRetentionOnly plans an ALTER TABLE whose only subcommand was SET/RESET
// (RETAIN HISTORY ...): nothing is left for PostgreSQL.
func planRetentionOnly(st *Statement, text string, toks []token, cat Catalog, opts Options) (*Statement, []dep, error) {
	// ALTER TABLE [IF EXISTS] [ONLY] name SET|RESET (...)
	i := 2
	if i+1 < len(toks) && toks[i].tok == pg.Token_IF_P && toks[i+1].tok == pg.Token_EXISTS {
		i += 2
	}
	j := i
	for j < len(toks) && !(toks[j].word(text) == "set" || toks[j].word(text) == "reset") {
		j++
	}
	if i >= j {
		return nil, nil, syntaxAt(text, toks[min(i, len(toks)-1)].start)
	}
	r, err := parse("TABLE " + text[toks[i].start:toks[j-1].end])
	if err != nil || len(r.Stmts) != 1 || len(r.Stmts[0].Stmt.GetSelectStmt().GetFromClause()) != 1 {
		return nil, nil, syntaxAt(text, toks[i].start)
	}
	rv := r.Stmts[0].Stmt.GetSelectStmt().FromClause[0].GetRangeVar()
	if rv == nil {
		return nil, nil, syntaxAt(text, toks[i].start)
	}
	a := &analyzer{cat: cat, path: opts.SearchPath}
	a.target(rv)
	st.Kind, st.Tag, st.Writes = KindDDL, "ALTER TABLE", a.writes
	return st, a.deps, nil
}

// planWrappedSubscribe plans DECLARE c CURSOR FOR SUBSCRIBE ... (a cursor
// over a subscription, Materialize's usual way to read one) and COPY
// (SUBSCRIBE ...) TO STDOUT.
func planWrappedSubscribe(st *Statement, text string, mz *mzSyntax, cat Catalog, opts Options) (*Statement, []dep, error) {
	sub := text[mz.subStart:mz.subEnd]
	toks, err := scanTokens(sub)
	if err != nil {
		return nil, nil, shiftErr(fromParser(sub, err), mz.subStart)
	}
	inner, deps, err := planOne(sub, toks, cat, opts)
	if err != nil {
		return nil, nil, shiftErr(err, mz.subStart)
	}
	st.SQL, st.Inner, st.Subscribe, st.AsOf = text, inner, inner.Subscribe, inner.AsOf
	st.Reads, st.Inputs, st.UsesMzNow = inner.Reads, inner.Inputs, inner.UsesMzNow
	if mz.cursor != nil {
		st.Kind, st.Tag, st.Cursor = KindCursor, "DECLARE CURSOR", mz.cursor
	} else {
		st.Kind, st.Tag = KindSubscribe, "COPY"
		sc := *inner.Subscribe
		sc.CopyTo = strings.TrimSpace(mz.copyTail[len("TO"):]) // copyTail starts at the TO token
		st.Subscribe = &sc
	}
	return st, deps, nil
}

// ReadOnly reports whether the statement only reads user data: a SELECT
// without FOR UPDATE/SHARE, or one inside EXPLAIN, EXPLAIN TIMESTAMP,
// DECLARE or COPY (...) TO. Such a statement may begin a read-only
// transaction.
func (s *Statement) ReadOnly() bool {
	if s.Kind == KindExplainTimestamp {
		return true
	}
	return rewritable(s) && !s.Locking
}
