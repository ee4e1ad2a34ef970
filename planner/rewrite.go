package planner

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/mzproxy/mzproxy/pgerr"
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Replacement nodes are never assembled field by field: pg_query's deparser
// is C and a node shape it does not expect crashes the process. Each one is
// cut out of a tree the parser itself produced for equivalent SQL.

// replaceTable replaces the FROM item n (a reference to managed table o)
// with `(SELECT <cols> FROM <history> <guard> WHERE mz_from <= $N AND
// mz_to > $N) AS <alias>`.
func (a *analyzer) replaceTable(n *pg.Node, rv *pg.RangeVar, o *Object) {
	if o.RowSecurity {
		// The history table has no policies: reading it would show a role
		// the rows the table's policies hide from it.
		a.fail(pgerr.New(pgerr.FeatureNotSupported,
			"row-level security of %q is not applied at an explicit timestamp: it cannot be read at one", o.Name))
		return
	}
	var b strings.Builder
	b.WriteString("(SELECT ")
	for i, c := range o.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteAlways(c))
	}
	p := "$" + strconv.Itoa(a.param)
	fmt.Fprintf(&b, " FROM %s.%s%s WHERE mz_from <= %s AND mz_to > %s)",
		quoteAlways(o.History.Schema), quoteAlways(o.History.Name), a.guard(rv, o), p, p)
	if o.History.Name == "" {
		a.fail(pgerr.New(pgerr.InternalError, "cannot build the history read of %q: no history relation", o.Name))
		return
	}
	a.rewrote = true
	a.noteQualified(rv, o)
	if a.viewDepth == 0 {
		a.splices = append(a.splices, historySplice{rv: rv, subquery: b.String()})
	}
	if a.spliceOnly {
		// The tree is not deparsed (spliceHistory): it stays as parsed.
		return
	}
	r, err := parse("SELECT * FROM " + b.String() + " AS x")
	if err != nil {
		a.fail(pgerr.New(pgerr.InternalError, "cannot build the history read of %q: %v", o.Name, err))
		return
	}
	sub := r.Stmts[0].Stmt.GetSelectStmt().FromClause[0].GetRangeSubselect()
	sub.Alias = aliasFor(rv)
	n.Node = &pg.Node_RangeSubselect{RangeSubselect: sub}
}

// guard is ` LEFT JOIN (SELECT FROM <the reference as written>, <o
// qualified> HAVING false) AS c ON true` for a reference the statement
// itself makes (not one inside a view's definition, which PostgreSQL
// checks with the view owner's rights): it reads no row, but PostgreSQL
// resolves both names and checks them as the statement's own reference
// would be. The name as written is looked up by PostgreSQL's own rules (a
// qualified schema needs USAGE: 42501 "permission denied for schema"; the
// search path skips schemas without USAGE: 42P01 when nothing else is
// there), before the name mzproxy resolved it to, which fails in the same
// way when PostgreSQL's lookup would find another relation (mzproxy's
// catalog does not know the role's rights); and the executor checks
// SELECT on each (on the table or any of its columns) at every execution,
// so a prepared read stops when the role loses it.
//
// The shape is what makes it cheap: a subquery of at most one row (HAVING
// makes it an aggregate) that nothing reads is removed by the planner's
// left-join removal before it is planned, so neither relation is opened
// or estimated; PostgreSQL still keeps the relations of a subquery it
// never planned in the range table the executor checks
// (flatten_unplanned_rtes). An `AND NOT EXISTS (SELECT FROM ... WHERE
// false)` in the WHERE clause checked the same but made the planner plan
// both relations: 122k backend instructions per simple-protocol read,
// against 67k (docs/read-cost.md).
func (a *analyzer) guard(rv *pg.RangeVar, o *Object) string {
	if a.viewDepth > 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" LEFT JOIN (SELECT FROM ")
	writeChecked(&b, rv.Catalogname, rv.Schemaname, rv.Relname, o, "")
	b.WriteString(" HAVING false) AS c ON true")
	return b.String()
}

// writeChecked writes `<the name as written> AS a<suffix>` and, when it
// was not written with o's schema, `, <o qualified> AS b<suffix>`: the
// relations of a guard (see guard).
func writeChecked(b *strings.Builder, catalog, schema, name string, o *Object, suffix string) {
	if catalog != "" {
		b.WriteString(quoteAlways(catalog) + ".")
	}
	if schema != "" {
		b.WriteString(quoteAlways(schema) + ".")
	}
	b.WriteString(quoteAlways(name) + " AS a" + suffix)
	if o != nil && schema != o.Schema {
		fmt.Fprintf(b, ", %s.%s AS b%s", quoteAlways(o.Schema), quoteAlways(o.Name), suffix)
	}
}

// RightsCheck is a statement that reads no row and fails as PostgreSQL
// fails a read of the relations st names itself (its Reads; for EXPLAIN
// TIMESTAMP, those of the SELECT it explains) when the role may not read
// them: `SELECT FROM <each as written>[, <its managed object qualified>]
// HAVING false`, the relations of a rewrite's guard. PostgreSQL resolves
// each name (42P01; 42501 "permission denied for schema" without USAGE)
// and checks SELECT on each (42501 "permission denied for table t"),
// naming the relation as PostgreSQL's own read would. "" when st names
// none.
func RightsCheck(st *Statement) string {
	if len(st.Reads) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("SELECT FROM ")
	for i, r := range st.Reads {
		if i > 0 {
			b.WriteString(", ")
		}
		writeChecked(&b, "", r.Schema, r.Name, r.Object, strconv.Itoa(i))
	}
	b.WriteString(" HAVING false")
	return b.String()
}

// mzNowExpr is `$N::bigint`. mz_now() is of type mz_timestamp in
// Materialize; here it is the chosen timestamp as a bigint (milliseconds
// since the Unix epoch), which compares and does arithmetic with integer
// columns the way Materialize's casts allow.
func (a *analyzer) mzNowExpr() *pg.Node {
	r, err := parse("SELECT $" + strconv.Itoa(a.param) + "::bigint")
	if err != nil {
		panic("planner: parsing a parameter cast: " + err.Error())
	}
	return r.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val
}

// quoteAlways double-quotes an identifier.
func quoteAlways(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// fixQualified rewrites column references qualified with a schema
// (public.t.a, db.public.t.a) whose relation was replaced by a subquery
// aliased t: a subquery has no schema, so they become t.a.
func fixQualified(n *pg.Node, qualified []string) {
	if len(qualified) == 0 {
		return
	}
	visit(n.ProtoReflect(), func(m protoreflect.Message) {
		cr, ok := m.Interface().(*pg.ColumnRef)
		if !ok || len(cr.Fields) < 3 {
			return
		}
		f := cr.Fields
		k := len(f) - 3 // index of the schema
		key := f[k].GetString_().GetSval() + "\x00" + f[k+1].GetString_().GetSval()
		for _, q := range qualified {
			if q == key {
				cr.Fields = f[k+1:]
				return
			}
		}
	})
}

// visit calls fn for every message under m.
func visit(m protoreflect.Message, fn func(protoreflect.Message)) {
	fn(m)
	eachMessage(m, func(c protoreflect.Message) bool {
		visit(c, fn)
		return true
	})
}

// deparse turns one statement back into SQL. A tree deeper than
// maxDeparseMessages is refused before pg_query's C deparser recurses
// through it.
func deparse(n *pg.Node) (string, error) {
	deparses.Add(1)
	if messageDepth(n.ProtoReflect()) > maxDeparseMessages {
		return "", errStackDepth()
	}
	return pg.Deparse(&pg.ParseResult{Version: 170007, Stmts: []*pg.RawStmt{{Stmt: n}}})
}

// deparses counts the rewrites deparsed (for tests).
var deparses atomic.Uint64

// rewriteLevels bounds what the rewrite adds to the depth of a statement's
// tree, in protobuf messages: a table reference becomes a subquery
// (RangeSubselect, SelectStmt, BoolExpr, A_Expr, ColumnRef, String, each
// under a Node: 12), mz_now() a cast of a parameter (fewer).
const rewriteLevels = 16

// deparseParsed is deparse for n, a tree parsed from sql and rewritten (no
// view definition put in): the lexical estimate of sql's depth, which
// bounds its tree at twice as many messages (TestNestingDepthBoundsTrees,
// FuzzPlanNesting), spares walking the tree when it is far from the
// deparser's limit.
func deparseParsed(n *pg.Node, sql string) (string, error) {
	if 2*nestingDepth(sql, maxNestingLevels)+rewriteLevels > maxDeparseMessages {
		return deparse(n)
	}
	deparses.Add(1)
	return pg.Deparse(&pg.ParseResult{Version: 170007, Stmts: []*pg.RawStmt{{Stmt: n}}})
}

// mayMention reports whether word (an identifier) may be spelled in sql:
// false only when sql cannot name it, case-insensitively, nor spell any
// name with Unicode escapes (U&"...").
func mayMention(sql, word string) bool {
	return ContainsAnyFold(sql, asciiLower(word), `u&"`)
}

// ContainsAnyFold reports whether s contains one of words,
// case-insensitively (strings.EqualFold): words' ASCII letters must be
// lower case. It looks at each byte of s once, in a table of the words'
// first bytes (either case), and compares words only where one may begin,
// so it is cheap enough for every statement's text. A caller that asks
// about the same words for every statement builds the table once:
// NewFoldWords.
func ContainsAnyFold(s string, words ...string) bool {
	f := newFoldWords(words)
	return f.In(s)
}

// FoldWords is ContainsAnyFold's question with its words' table built
// once.
type FoldWords struct {
	words []string
	// starts has, for each byte, bit i%16 set when words[i] may begin
	// with it (either case): at a byte of s, In compares only the words
	// of its bits (words i, i+16, ...), not every word. Every simple
	// Query's text is scanned for a dozen words (noteStatementText): a
	// point read's text has a dozen bytes that begin one of them.
	starts [256]uint16
	// seconds has, for each byte, the bits of the words whose second
	// byte it may be (either case; every byte for a word of one byte, and
	// for every word unless ascii), singles the bits of the words of one
	// byte: a candidate that the next byte of s (or its end) rules out is
	// not compared.
	seconds [256]uint16
	singles uint16
	// ascii: every word is ASCII, compared byte by byte.
	ascii bool
}

// NewFoldWords is the set of words (ASCII letters in lower case).
func NewFoldWords(words ...string) *FoldWords {
	f := newFoldWords(words)
	return &f
}

func newFoldWords(words []string) FoldWords {
	f := FoldWords{words: words, ascii: true}
	for i, w := range words {
		for j := 0; j < len(w); j++ {
			f.ascii = f.ascii && w[j] < utf8.RuneSelf
		}
		if w != "" {
			bit := uint16(1) << (i % 16)
			foldedBit(&f.starts, w[0], bit)
			if len(w) == 1 {
				f.singles |= bit
			}
		}
	}
	for i, w := range words {
		bit := uint16(1) << (i % 16)
		switch {
		case w == "":
		case len(w) == 1 || !f.ascii:
			// (A word that is not ASCII may match bytes that differ
			// from its own: strings.EqualFold.)
			for b := range f.seconds {
				f.seconds[b] |= bit
			}
		default:
			foldedBit(&f.seconds, w[1], bit)
		}
	}
	return f
}

// foldedBit sets bit in table at b, and at b's upper case when b is a
// lower-case ASCII letter.
func foldedBit(table *[256]uint16, b byte, bit uint16) {
	table[b] |= bit
	if 'a' <= b && b <= 'z' {
		table[b-'a'+'A'] |= bit
	}
}

// In reports whether s contains one of the words, case-insensitively.
// ASCII words are compared byte by byte, as strings.EqualFold would: a
// slice of s as long as an ASCII word in bytes that holds a longer UTF-8
// sequence has fewer runes, which EqualFold does not match either.
func (f *FoldWords) In(s string) bool {
	for i := 0; i < len(s); i++ {
		m := f.starts[s[i]]
		if m == 0 {
			continue
		}
		if i+1 < len(s) {
			m &= f.seconds[s[i+1]]
		} else {
			m &= f.singles
		}
		for ; m != 0; m &= m - 1 {
			for j := bits.TrailingZeros16(m); j < len(f.words); j += 16 {
				if f.at(s[i:], f.words[j]) {
					return true
				}
			}
		}
	}
	return false
}

// at: w is spelled at the start of s (w not empty).
func (f *FoldWords) at(s, w string) bool {
	if w == "" || len(s) < len(w) {
		return false
	}
	if f.ascii {
		return asciiEqualFoldLower(s[:len(w)], w)
	}
	return strings.EqualFold(s[:len(w)], w)
}

// asciiEqualFoldLower: s is w with some ASCII letters in upper case (w's
// letters are lower case; len(s) == len(w)).
func asciiEqualFoldLower(s, w string) bool {
	for j := 0; j < len(w); j++ {
		c := s[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[j] {
			return false
		}
	}
	return true
}

// asciiLower lower-cases the ASCII letters of s (PostgreSQL folds only
// those in unquoted names).
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// Template is a rewritten statement with holes for the timestamp. The
// proxy splices the timestamp into every hole: "$N" under the extended
// protocol (the timestamp then travels as an extra int8 parameter), or a
// literal like '1700000000000'::int8 under the simple protocol.
type Template struct {
	segs  []string // len(segs) = holes + 1
	param int
	size  int
	// spliced: the text is the client's with history subqueries spliced
	// in (spliceHistory), its literals as the client wrote them, not as
	// pg_query's deparser prints them (literals.go).
	spliced bool
}

// newTemplate splits sql at every parameter token $param. The positions come
// from pg_query's scanner, so a "$3" inside a string literal, a comment or
// a dollar-quoted body is never a hole.
func newTemplate(sql string, param int) (*Template, error) {
	want := "$" + strconv.Itoa(param)
	holes, ok := paramTokens(sql, want)
	if !ok {
		toks, err := scanTokens(sql)
		if err != nil {
			return nil, err
		}
		holes = holes[:0]
		for _, tk := range toks {
			if tk.tok == pg.Token_PARAM && sql[tk.start:tk.end] == want {
				holes = append(holes, tk.start)
			}
		}
	}
	t := &Template{param: param}
	last := 0
	for _, at := range holes {
		t.segs = append(t.segs, sql[last:at])
		last = at + len(want)
	}
	t.segs = append(t.segs, sql[last:])
	for _, s := range t.segs {
		t.size += len(s)
	}
	return t, nil
}

// paramTokens returns the offsets of the parameter tokens want ("$3") in
// sql, deparser output, lexed in Go (pg_query's scanner is a cgo call):
// string literals (escape strings too), quoted identifiers, dollar quotes
// and comments are skipped whole, and a '$' inside an identifier or
// number is part of it. ok is false on anything unterminated or unusual
// ($1abc); the caller then asks pg_query's scanner.
func paramTokens(sql, want string) (at []int, ok bool) {
	if strings.IndexByte(sql, 0) >= 0 || !utf8.ValidString(sql) {
		return nil, false // the C scanner stops at NUL
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'':
			i, ok = quotedEnd(sql, i+1, '\'', false)
		case c == '"':
			i, ok = quotedEnd(sql, i+1, '"', false)
		case (c == 'e' || c == 'E') && i+1 < len(sql) && sql[i+1] == '\'':
			i, ok = quotedEnd(sql, i+2, '\'', true)
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			i, ok = lineCommentEnd(sql, i), true
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			i, ok = blockCommentEnd(sql, i)
		case isIdentStart(c):
			i, ok = identEnd(sql, i), true
		case isDigit(c):
			// 1$2 is a number and a parameter; odder numbers go to the
			// scanner.
			j := i
			for j < len(sql) && (isDigit(sql[j]) || sql[j] == '.') {
				j++
			}
			i, ok = j, j == len(sql) || !isIdentStart(sql[j]) && sql[j] != '_'
		case c == '.' && i+1 < len(sql) && isDigit(sql[i+1]):
			return nil, false
		case c == '$' && i+1 < len(sql) && isDigit(sql[i+1]):
			j := i + 1
			for j < len(sql) && isDigit(sql[j]) {
				j++
			}
			if j < len(sql) && (isIdentStart(sql[j]) || sql[j] == '$') {
				return nil, false
			}
			if sql[i:j] == want {
				at = append(at, i)
			}
			i, ok = j, true
		case c == '$':
			tag := dollarTag(sql, i)
			if tag == "" {
				i, ok = i+1, true
				break
			}
			i, ok = dollarQuotedEnd(sql, i, tag)
		default:
			i, ok = i+1, true
		}
		if !ok {
			return nil, false
		}
	}
	return at, true
}

// Param is the number of the timestamp parameter: the statement's own
// parameter count plus one.
func (t *Template) Param() int { return t.param }

// Holes is the number of places the timestamp goes. With no hole (a read
// at an explicit timestamp of unmanaged relations only) the timestamp is
// not needed: do not bind it.
func (t *Template) Holes() int { return len(t.segs) - 1 }

// Segments returns the text between the holes (do not modify).
func (t *Template) Segments() []string { return t.segs }

// Render splices param into every hole, e.g. Render("$3") or
// Render("'1700000000000'::int8").
func (t *Template) Render(param string) string {
	if len(t.segs) == 1 {
		return t.segs[0]
	}
	var b strings.Builder
	b.Grow(t.size + len(param)*(len(t.segs)-1))
	for i, s := range t.segs {
		if i > 0 {
			b.WriteString(param)
		}
		b.WriteString(s)
	}
	return b.String()
}

// RenderParam renders the template for the extended protocol: every hole
// becomes $N.
func (t *Template) RenderParam() string { return t.Render("$" + strconv.Itoa(t.param)) }

// RenderLiteral renders the template for the simple protocol with ts as a
// literal.
func (t *Template) RenderLiteral(ts uint64) string {
	return t.Render("'" + strconv.FormatUint(ts, 10) + "'::int8")
}
