package planner

import (
	"reflect"
	"strconv"
	"strings"
)

// This file caches the plans whose contents depend on their literals: a
// rewritten read (its Template is deparsed SQL, literals and all) and a
// read AS OF a literal timestamp. They are cached under the query's
// skeleton (fingerprint.go: its literals replaced by placeholders, nothing
// else changed), with a literalPlan that makes, without parsing, the
// statements another text of that skeleton plans to: its SQL and AS OF
// expression are its own text, and its Template is the cached one with
// the new literals spliced in, spelled as pg_query's deparser spells them.
//
// The literals' places in the Template are found by planning the text once
// more with every literal replaced by a marker of the same token class (so
// the same parse, but for the constants' values) and finding each marker in
// the deparsed output. Nothing is cached unless
//
//   - the marker text plans to the same statements but for their SQL, AS OF
//     expression and Template (so nothing else depends on the literals);
//   - each literal of a statement's SQL is found exactly once in its
//     Template, as a constant (a string marker printed bare, as a name
//     would be, or not printed at all, is not);
//   - splicing the original literals back gives exactly the original plan.
//
// Where the deparser spells a constant by its value, rather than by a rule
// of its token, the plan is not cached this way, or the new text is planned:
// a string cast to boolean ('t'::boolean is printed true; ::bool, a type
// name like any other, is not special), the integer 65535
// (INTERVAL_FULL_PRECISION: interval(65535) is printed interval) and a
// negated 0 ((-5)::int keeps its parentheses, (-0)::int is printed
// 0::int). Bit strings, hex strings and national strings (N'...') give up
// too.

// literalPlan is how to make the statements of a text with a cached plan's
// skeleton.
type literalPlan struct {
	stmts []literalStmt
}

// literalStmt is how to make one statement.
type literalStmt struct {
	sql  textRange
	expr textRange // AsOf.Expr, when the statement has an AS OF
	// tmpl is the Template in pieces; nil when the statement has none, or
	// when it is the statement's SQL itself (tmplIsSQL: nothing rewritten).
	tmpl      []piece
	tmplIsSQL bool
	// verbatim: the Template is spliced (Template.spliced), so a literal
	// is put in as the text spells it.
	verbatim bool
	anyBound bool // a piece is bound: the statement has a Bound (bound.go)
	// boundShared is the Bound's Template and OIDs, made once, when every
	// literal of the pieces is bound (the same for every text).
	boundShared *Bound
}

// anchor is a place in a query string: off bytes after the end of literal
// lit (after the start of the text for lit -1). It is the same place in
// every text of the skeleton.
type anchor struct{ lit, off int }

type textRange struct{ from, to anchor }

// piece is a part of a Template: text, a timestamp hole, or a literal.
type piece struct {
	text    string
	tsHole  bool // a hole for the timestamp (after text)
	lit     int  // the literal spliced here (after text), -1 for none
	negated bool // the literal is negated: the parser folded a '-' into it
	bound   bool // the literal is a parameter of the statement's Bound
}

// intervalFullPrecision is the one integer the deparser leaves out
// (interval(65535) is printed interval).
const intervalFullPrecision = 65535

// newLiteralPlan returns how to plan the texts of sql's skeleton, given
// its plan stmts and fingerprint fp, or nil when it cannot be done exactly
// (see above).
//
// It returns the statements as the plan makes them for sql: stmts with
// their Bound (bound.go).
func newLiteralPlan(sql string, fp fingerprint, stmts []*Statement, cat Catalog, opts Options) (*literalPlan, []*Statement) {
	if len(stmts) != len(fp.stmts) || !markableLiterals(fp.lits) || !literalPlannable(stmts) {
		return nil, nil
	}
	marked, markedLits := markerText(sql, fp.lits)
	mstmts, _, err := plan(marked, cat, opts)
	if err != nil || len(mstmts) != len(stmts) {
		return nil, nil
	}
	lp := &literalPlan{}
	for i, st := range stmts {
		ls, ok := newLiteralStmt(sql, fp, i, st, mstmts[i], markedLits)
		if !ok {
			return nil, nil
		}
		lp.stmts = append(lp.stmts, ls)
	}
	// The proof: the original literals give the original plan.
	again, ok := lp.statements(stmts, sql, fp.lits)
	if !ok || !reflect.DeepEqual(withoutBound(again), stmts) {
		return nil, nil
	}
	return lp, again
}

// withoutBound is stmts without their Bounds.
func withoutBound(stmts []*Statement) []*Statement {
	if stmts == nil {
		return nil
	}
	out := make([]*Statement, len(stmts))
	for i, st := range stmts {
		c := *st
		c.Bound = nil
		out[i] = &c
	}
	return out
}

// markableLiterals reports whether every literal is of a class a marker
// stands for.
func markableLiterals(lits []literal) bool {
	for _, l := range lits {
		switch l.class {
		case litInteger, litNumeric, litString:
		default:
			return false
		}
	}
	return true
}

// literalPlannable reports whether the statements' plans may depend on
// their literals at most through their SQL, AS OF expression and Template:
// reads, writes, EXPLAIN and COPY ... TO (newLiteralPlan checks that they
// do).
func literalPlannable(stmts []*Statement) bool {
	for _, st := range stmts {
		switch st.Kind {
		case KindRead, KindWrite, KindExplain, KindCopyTo:
		default:
			return false
		}
		if st.Retention != nil || st.Subscribe != nil || st.ExplainTimestamp != nil || st.Txn != nil ||
			st.Var != nil || st.Cursor != nil || st.Deallocate != "" {
			return false
		}
	}
	return true
}

// markerText is sql with literal k replaced by marker(k), and the
// markers' places in it.
func markerText(sql string, lits []literal) (string, []literal) {
	var b strings.Builder
	out := make([]literal, len(lits))
	last := 0
	for k, l := range lits {
		b.WriteString(sql[last:l.start])
		m := marker(k, l.class)
		out[k] = literal{span{b.Len(), b.Len() + len(m)}, l.class}
		b.WriteString(m)
		last = l.end
	}
	b.WriteString(sql[last:])
	return b.String(), out
}

// marker is a literal of class that stands for literal k: a number no
// query has by chance, or a string of control characters.
func marker(k int, class string) string {
	switch class {
	case litInteger:
		return strconv.Itoa(2000000000 + k) // an ICONST still
	case litNumeric:
		return strconv.Itoa(3000000000+k) + ".5"
	}
	return "'\x01" + strconv.Itoa(k) + "\x01'"
}

// newLiteralStmt finds how to make statement i (st, and mst planned from
// the marker text whose literals are markedLits).
func newLiteralStmt(sql string, fp fingerprint, i int, st, mst *Statement, markedLits []literal) (literalStmt, bool) {
	if !reflect.DeepEqual(shapeOf(st), shapeOf(mst)) {
		return literalStmt{}, false // a literal changes more than the text
	}
	sp := fp.stmts[i]
	text := sql[sp.start:sp.end]
	if !strings.HasPrefix(text, st.SQL) {
		return literalStmt{}, false
	}
	var ls literalStmt
	var ok bool
	if ls.sql, ok = rangeOf(fp.lits, sp.start, sp.start+len(st.SQL)); !ok {
		return literalStmt{}, false
	}
	if st.AsOf != nil {
		if !strings.HasSuffix(text, st.AsOf.Expr) {
			return literalStmt{}, false
		}
		if ls.expr, ok = rangeOf(fp.lits, sp.end-len(st.AsOf.Expr), sp.end); !ok {
			return literalStmt{}, false
		}
	}
	switch t, mt := st.Template, mst.Template; {
	case t == nil:
	case t.Holes() == 0 && t.segs[0] == st.SQL && mt.Holes() == 0 && mt.segs[0] == mst.SQL:
		ls.tmplIsSQL = true
	default:
		if t.spliced != mt.spliced {
			return literalStmt{}, false
		}
		ls.verbatim = mt.spliced
		from, to := ls.sql.from.lit+1, ls.sql.to.lit+1 // the literals of the SQL
		if ls.tmpl, ok = templatePieces(mt, markedLits, from, to); !ok {
			return literalStmt{}, false
		}
		// Only in a statement without parameters of its own (a simple
		// Query's): the literals' are $1..$n.
		if st.Kind == KindRead && st.Cursor == nil && st.Inner == nil && t.param == 1 {
			ls.markBound(boundLiterals(mt, markedLits))
		}
	}
	return ls, true
}

// markBound marks the pieces of the literals that may be parameters.
func (ls *literalStmt) markBound(bound map[int]bool) {
	allBound := true
	for i := range ls.tmpl {
		if p := &ls.tmpl[i]; p.lit >= 0 && bound[p.lit] {
			p.bound, ls.anyBound = true, true
		} else if p.lit >= 0 {
			allBound = false
		}
	}
	if ls.anyBound && allBound {
		ls.boundShared = ls.boundTemplate("", nil)
	}
}

// shapeOf is a statement without what literals may change.
func shapeOf(st *Statement) Statement {
	c := *st
	c.SQL, c.Template, c.Bound = "", nil, nil
	if c.AsOf != nil {
		a := *c.AsOf
		a.Expr = ""
		c.AsOf = &a
	}
	return c
}

// rangeOf anchors the range [from, to) of a text whose literals are lits;
// false if an end is inside a literal.
func rangeOf(lits []literal, from, to int) (textRange, bool) {
	a, ok1 := anchorOf(lits, from)
	b, ok2 := anchorOf(lits, to)
	return textRange{a, b}, ok1 && ok2
}

func anchorOf(lits []literal, at int) (anchor, bool) {
	a := anchor{lit: -1, off: at}
	for k, l := range lits {
		switch {
		case l.end <= at:
			a = anchor{lit: k, off: at - l.end}
		case l.start < at:
			return anchor{}, false
		}
	}
	return a, true
}

// at is the anchor's offset in a text whose literals are lits.
func (a anchor) at(lits []literal) int {
	if a.lit < 0 {
		return a.off
	}
	return lits[a.lit].end + a.off
}

func (r textRange) in(sql string, lits []literal) string {
	return sql[r.from.at(lits):r.to.at(lits)]
}

// templatePieces cuts mt, the Template planned from the marker text, into
// text, timestamp holes and the literals from..to-1, each of which must be
// in it exactly once, as a constant.
func templatePieces(mt *Template, markedLits []literal, from, to int) ([]piece, bool) {
	found := make([]bool, to-from)
	var out []piece
	for h, seg := range mt.segs {
		for seg != "" {
			k, at, end := nextMarker(seg, markedLits, from, to)
			if k < 0 {
				out = append(out, piece{text: seg, lit: -1})
				break
			}
			class := markedLits[k].class
			if found[k-from] || !constantContext(seg, at, end, class) {
				return nil, false
			}
			found[k-from] = true
			// In a verbatim Template a '-' before a number may be binary
			// (a-5): it is cut and put back all the same.
			negated := class != litString && at > 0 && seg[at-1] == '-'
			if class == litString || negated {
				at-- // the quote, or the sign
			}
			if class == litString {
				end++
			}
			out = append(out, piece{text: seg[:at], lit: k, negated: negated})
			seg = seg[end:]
		}
		if h < len(mt.segs)-1 {
			out = append(out, piece{tsHole: true, lit: -1})
		}
	}
	for _, f := range found {
		if !f {
			return nil, false
		}
	}
	return out, true
}

// nextMarker finds the first marker of the literals from..to-1 in seg: the
// literal, and the marker's start and end (a string's without its quotes),
// or k = -1.
func nextMarker(seg string, markedLits []literal, from, to int) (k, at, end int) {
	k, at = -1, len(seg)
	for j := from; j < to; j++ {
		m := marker(j, markedLits[j].class)
		if markedLits[j].class == litString {
			m = m[1 : len(m)-1]
		}
		if i := strings.Index(seg, m); i >= 0 && i < at {
			k, at, end = j, i, i+len(m)
		}
	}
	return k, at, end
}

// constantContext reports whether the marker seg[at:end] is printed as a
// constant: a string between quotes (and not cast to boolean, which the
// deparser spells by value), a number as a whole token.
func constantContext(seg string, at, end int, class string) bool {
	if class == litString {
		return at > 0 && seg[at-1] == '\'' && end < len(seg) && seg[end] == '\'' &&
			!strings.HasPrefix(seg[end+1:], "::boolean")
	}
	return (at == 0 || !continuesToken(seg[at-1])) && (end == len(seg) || !continuesToken(seg[end]))
}

// continuesToken reports whether c next to a number makes it part of
// another token (a name, a longer number, a quoted text).
func continuesToken(c byte) bool {
	return isWordByte(c) || c == '.' || c == '$' || c == '"' || c == '\''
}

// statements makes the statements of sql, a text of the skeleton whose
// literals are lits, from orig, the cached plan's statements. false when
// a new literal's value is one the deparser spells by its value.
func (lp *literalPlan) statements(orig []*Statement, sql string, lits []literal) ([]*Statement, bool) {
	out := make([]*Statement, len(orig))
	copies := make([]Statement, len(orig))
	for i, ls := range lp.stmts {
		c := &copies[i]
		*c = *orig[i]
		c.SQL = ls.sql.in(sql, lits)
		if c.AsOf != nil {
			a := *c.AsOf
			a.Expr = ls.expr.in(sql, lits)
			c.AsOf = &a
		}
		switch {
		case ls.tmplIsSQL:
			c.Template = &Template{segs: []string{c.SQL}, param: c.Template.param, size: len(c.SQL)}
		case ls.tmpl != nil:
			t, ok := ls.template(c.Template.param, sql, lits)
			if !ok {
				return nil, false
			}
			c.Template, c.Bound = t, ls.bound(sql, lits)
		}
		out[i] = c
	}
	return out, true
}

// template splices the literals of sql into the pieces.
func (ls *literalStmt) template(param int, sql string, lits []literal) (*Template, bool) {
	var b strings.Builder
	b.Grow(ls.splicedSize(sql, lits))
	ends := make([]int, 0, ls.holes())
	for _, p := range ls.tmpl {
		b.WriteString(p.text)
		if p.lit >= 0 && !ls.writeLiteral(&b, p, sql, lits) {
			return nil, false
		}
		if p.tsHole {
			ends = append(ends, b.Len())
		}
	}
	t := templateOf(b.String(), ends, param)
	t.spliced = ls.verbatim
	return t, true
}

// writeLiteral writes p's literal of sql: as the text spells it in a
// verbatim Template, else as the deparser prints it (false for a value it
// spells otherwise in some places).
func (ls *literalStmt) writeLiteral(b *strings.Builder, p piece, sql string, lits []literal) bool {
	tok := sql[lits[p.lit].start:lits[p.lit].end]
	if ls.verbatim {
		if p.negated {
			b.WriteByte('-')
		}
		b.WriteString(tok)
		return true
	}
	return spellConstant(b, tok, lits[p.lit].class, p.negated)
}

// splicedSize is about the size of the pieces with sql's literals spliced
// in (a string literal's quotes may make it a little more): a Template is
// made at every call of a cached timestamped read, and growing its text
// piece by piece was most of what the proxy allocates to plan one (issue
// 15).
func (ls *literalStmt) splicedSize(sql string, lits []literal) int {
	n := 0
	for _, p := range ls.tmpl {
		n += len(p.text)
		if p.lit >= 0 {
			n += lits[p.lit].end - lits[p.lit].start + 1 // a folded '-'
		}
	}
	return n
}

// holes is the number of the pieces' timestamp holes.
func (ls *literalStmt) holes() int {
	n := 0
	for _, p := range ls.tmpl {
		if p.tsHole {
			n++
		}
	}
	return n
}

// templateOf is the Template of text with holes at the offsets ends: its
// segments share text.
func templateOf(text string, ends []int, param int) *Template {
	t := &Template{param: param, size: len(text), segs: make([]string, 0, len(ends)+1)}
	start := 0
	for _, e := range ends {
		t.segs = append(t.segs, text[start:e])
		start = e
	}
	t.segs = append(t.segs, text[start:])
	return t
}

// spellConstant writes the literal tok of class as pg_query's deparser
// prints the constant the parser makes of it (negated: with a '-' folded
// in). false for a value the deparser spells otherwise in some places.
func spellConstant(b *strings.Builder, tok, class string, negated bool) bool {
	switch class {
	case litInteger:
		v, err := strconv.ParseInt(tok, 10, 32)
		if err != nil || v == intervalFullPrecision || negated && v == 0 {
			return false // -0 is 0, which a cast does not parenthesize as it does -5
		}
		if negated {
			v = -v
		}
		var digits [20]byte
		b.Write(strconv.AppendInt(digits[:0], v, 10)) // "%d": 007 is 7
	case litNumeric:
		if negated {
			b.WriteByte('-')
		}
		b.WriteString(tok) // as written
	default:
		v, ok := stringValue(tok)
		if !ok {
			return false
		}
		quoteString(b, v)
	}
	return true
}

// stringValue is the value of a string literal the fingerprint took: '...'
// (standard_conforming_strings), E'...' without Unicode, hex or octal
// escapes, or $tag$...$tag$.
func stringValue(tok string) (string, bool) {
	switch {
	case tok[0] == '$':
		tag := tok[:strings.IndexByte(tok[1:], '$')+2]
		return tok[len(tag) : len(tok)-len(tag)], true
	case tok[0] == '\'':
		return strings.ReplaceAll(tok[1:len(tok)-1], "''", "'"), true
	case tok[0] == 'e' || tok[0] == 'E':
		return unescape(tok[2 : len(tok)-1])
	}
	return "", false
}

// unescape is the value of an escape string's body: ” and \' are a
// quote, \b \f \n \r \t \v control characters, \ and any other
// character that character.
func unescape(body string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\'' && i+1 < len(body) && body[i+1] == '\'':
			i++
		case c == '\\' && i+1 < len(body):
			i++
			c = body[i]
			switch c {
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'v':
				c = '\v'
			}
		case c == '\\':
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// quoteString writes v as the deparser quotes a string constant: E'...'
// when it has a backslash, quotes and backslashes doubled.
func quoteString(b *strings.Builder, v string) {
	if strings.IndexByte(v, '\\') >= 0 {
		b.WriteByte('E')
	}
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' || v[i] == '\\' {
			b.WriteByte(v[i])
		}
		b.WriteByte(v[i])
	}
	b.WriteByte('\'')
}
