package planner

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	pg "github.com/pganalyze/pg_query_go/v6"
)

// This file recognises the bits of Materialize syntax that PostgreSQL's
// grammar does not know (AS OF, EXPLAIN TIMESTAMP, RETAIN HISTORY,
// SUBSCRIBE) and strips them before the text reaches pg_query's parser.
// Everything works on the token stream of pg_query's scanner, never on raw
// text, so string literals, dollar quotes, quoted identifiers and comments
// can never be mistaken for syntax.

// token is one scanner token with its byte offsets in the scanned text.
type token struct {
	start, end int
	tok        pg.Token
	keyword    bool
	unreserved bool // an unreserved keyword (usable as a plain name)
}

// scanTokens tokenizes sql, dropping comments: by the Go scanner
// (scan.go) where it can, else by pg_query's.
func scanTokens(sql string) ([]token, error) {
	if toks, ok := scanGo(sql); ok {
		return toks, nil
	}
	return pgScanTokens(sql)
}

// pgScans counts pgScanTokens' calls (for tests).
var pgScans atomic.Uint64

// pgScanTokens is scanTokens by pg_query's scanner.
func pgScanTokens(sql string) ([]token, error) {
	pgScans.Add(1)
	res, err := pg.Scan(sql)
	if err != nil {
		return nil, err
	}
	toks := make([]token, 0, len(res.Tokens))
	for _, t := range res.Tokens {
		if t.Token == pg.Token_SQL_COMMENT || t.Token == pg.Token_C_COMMENT {
			continue
		}
		toks = append(toks, token{
			start:      int(t.Start),
			end:        int(t.End),
			tok:        t.Token,
			keyword:    t.KeywordKind != pg.KeywordKind_NO_KEYWORD,
			unreserved: t.KeywordKind == pg.KeywordKind_UNRESERVED_KEYWORD,
		})
	}
	return toks, nil
}

// word returns the lower-cased text of a keyword or unquoted identifier,
// and "" for anything else (so a quoted "as" never matches AS).
func (t token) word(sql string) string {
	if !t.keyword && t.tok != pg.Token_IDENT {
		return ""
	}
	s := sql[t.start:t.end]
	if s == "" || s[0] == '"' || s[0] == 'U' && len(s) > 1 && s[1] == '&' {
		return ""
	}
	return strings.ToLower(s)
}

func (t token) is(sql string, c byte) bool {
	return t.end-t.start == 1 && sql[t.start] == c && t.tok != pg.Token_SCONST
}

// stmtText is one statement of a query string: its text without the
// terminating semicolon, its byte offset in the query string and tokens
// (offsets relative to the statement text).
type stmtText struct {
	text   string
	offset int
	toks   []token
}

// splitStatements splits a query string at top-level semicolons. A
// semicolon inside parentheses or inside a BEGIN ATOMIC ... END function
// body does not end a statement.
//
// The parts of recent texts are kept (read-only for every caller), for the
// same reason as recentParses.
func splitStatements(sql string) ([]stmtText, error) {
	if parts, ok := recentSplits.Get(sql); ok {
		return parts, nil
	}
	parts, err := scanAndSplit(sql)
	if err == nil && len(sql) <= maxRecentParseText {
		recentSplits.Add(sql, parts)
	}
	return parts, err
}

var recentSplits, _ = lru.New[string, []stmtText](64)

func scanAndSplit(sql string) ([]stmtText, error) {
	toks, err := scanTokens(sql)
	if err != nil {
		return nil, err
	}
	var out []stmtText
	depth, atomic, first := 0, 0, 0
	emit := func(end int) {
		part := toks[first:end]
		if len(part) > 0 {
			s, e := part[0].start, part[len(part)-1].end
			rel := make([]token, len(part))
			for i, t := range part {
				t.start -= s
				t.end -= s
				rel[i] = t
			}
			out = append(out, stmtText{text: sql[s:e], offset: s, toks: rel})
		}
	}
	for i, t := range toks {
		switch {
		case t.is(sql, '('):
			depth++
		case t.is(sql, ')'):
			depth--
		case t.tok == pg.Token_ATOMIC && i > 0 && toks[i-1].tok == pg.Token_BEGIN_P:
			atomic++
		case atomic > 0 && t.tok == pg.Token_CASE:
			atomic++
		case atomic > 0 && t.tok == pg.Token_END_P:
			atomic--
		case t.is(sql, ';') && depth <= 0 && atomic == 0:
			emit(i)
			first = i + 1
			depth = 0
		}
	}
	emit(len(toks))
	return out, nil
}

// AsOf is a trailing `AS OF [AT LEAST] <expr>` of a SELECT.
type AsOf struct {
	Expr    string // the timestamp expression's SQL text, for the proxy to evaluate
	AtLeast bool
	// Param is n when the timestamp is the statement's parameter $n, alone
	// or cast ($n::timestamptz): its value comes with each Bind. 0 otherwise.
	Param int
	// ParamType is the OID the parameter is described with when the
	// client did not give one: the cast's type, else bigint.
	ParamType uint32
	// ParamElsewhere is true when the statement itself uses $Param too.
	ParamElsewhere bool
	// Now is Expr with each mz_now() call a hole for the timestamp of the
	// present (Template.RenderLiteral); nil when Expr calls no mz_now().
	Now *Template
}

// ExplainFormat is the output format of EXPLAIN TIMESTAMP.
type ExplainFormat int

const (
	ExplainText ExplainFormat = iota
	ExplainJSON
)

func (f ExplainFormat) String() string {
	if f == ExplainJSON {
		return "json"
	}
	return "text"
}

// Retention is a RETAIN HISTORY option found on CREATE TABLE or ALTER TABLE.
type Retention struct {
	Reset    bool          // ALTER TABLE ... RESET (RETAIN HISTORY): back to the default
	Duration time.Duration // valid unless Reset
}

// SubscribeOption is one `name [= value]` of SUBSCRIBE ... WITH (...).
type SubscribeOption struct {
	Name  string // lower-cased
	Value string // SQL text of the value, "" when absent
}

// Subscribe is the shape of a SUBSCRIBE statement. It is only recognised
// here; running it is the proxy's business.
type Subscribe struct {
	Object  *QualifiedName // SUBSCRIBE [TO] name
	Query   *Statement     // SUBSCRIBE [TO] (select)
	Options []SubscribeOption
	AsOf    *AsOf
	UpTo    string // SQL text of the UP TO expression, "" when absent
	// CopyTo is set for COPY (SUBSCRIBE ...) TO <CopyTo>: the text after
	// TO ("STDOUT WITH (FORMAT binary)").
	CopyTo string
}

// mzSyntax is what preparse found in one statement.
type mzSyntax struct {
	text      string // PostgreSQL text, Materialize syntax removed
	asOf      *AsOf
	explainTS *ExplainFormat
	inner     string // EXPLAIN TIMESTAMP ... FOR <inner>
	retention *Retention
	subscribe bool
	// DECLARE c CURSOR FOR SUBSCRIBE ... and COPY (SUBSCRIBE ...) TO ...:
	// the SUBSCRIBE's offset in the text (and its end for COPY).
	wrappedSub       bool
	subStart, subEnd int
	cursor           *Cursor
	copyTail         string // COPY (SUBSCRIBE ...) <copyTail>
	// stripped is true when text differs from the input (positions of
	// syntax errors past the edit no longer map 1:1).
	stripped bool
}

// preparse recognises Materialize syntax in one statement.
func preparse(sql string, toks []token) (*mzSyntax, error) {
	res := &mzSyntax{text: sql}
	if len(toks) == 0 {
		return res, nil
	}
	w0 := toks[0].word(sql)
	switch w0 {
	case "explain":
		if len(toks) > 2 && toks[1].word(sql) == "timestamp" {
			i := 2
			f := ExplainText
			if toks[i].word(sql) == "as" && i+1 < len(toks) {
				switch toks[i+1].word(sql) {
				case "text":
				case "json":
					f = ExplainJSON
				default:
					return nil, syntaxAt(sql, toks[i+1].start)
				}
				i += 2
			}
			if i >= len(toks) || toks[i].word(sql) != "for" || i+1 >= len(toks) {
				if i < len(toks) {
					return nil, syntaxAt(sql, toks[i].start)
				}
				return nil, syntaxAt(sql, len(sql))
			}
			res.explainTS = &f
			res.inner = sql[toks[i+1].start:]
			res.stripped = true
			return res, nil
		}
	case "subscribe":
		res.subscribe = true
		return res, nil
	case "declare":
		// DECLARE name [options] CURSOR [WITH[OUT] HOLD] FOR SUBSCRIBE ...
		for i := 2; i+1 < len(toks); i++ {
			if toks[i].tok == pg.Token_FOR && toks[i+1].word(sql) == "subscribe" {
				c := &Cursor{Name: identValue(sql, toks[1]), Declare: true}
				for j := 2; j+1 < i; j++ {
					if toks[j].tok == pg.Token_WITH && toks[j+1].word(sql) == "hold" {
						c.Hold = true
					}
				}
				res.wrappedSub, res.cursor, res.subStart, res.subEnd = true, c, toks[i+1].start, len(sql)
				return res, nil
			}
			if toks[i].is(sql, '(') || toks[i].tok == pg.Token_SELECT {
				break
			}
		}
	case "copy":
		if len(toks) > 3 && toks[1].is(sql, '(') && toks[2].word(sql) == "subscribe" {
			c := matchParen(sql, toks, 1)
			switch {
			case c < 0 || c+1 >= len(toks):
				return nil, syntaxAt(sql, len(sql))
			case toks[c+1].tok != pg.Token_TO:
				return nil, syntaxAt(sql, toks[c+1].start)
			}
			res.wrappedSub, res.subStart, res.subEnd = true, toks[2].start, toks[c-1].end
			res.copyTail = sql[toks[c+1].start:]
			return res, nil
		}
	case "create", "alter":
		return res, preparseRetention(sql, toks, res)
	}
	if startsQuery(sql, toks) {
		if a, cut := findAsOf(sql, toks); a != nil {
			res.asOf = a
			res.text = strings.TrimRight(sql[:cut], " \t\r\n")
			res.stripped = true
		}
	}
	return res, nil
}

// startsQuery reports whether a statement is a query: SELECT, WITH,
// VALUES, TABLE or a parenthesised query.
func startsQuery(sql string, toks []token) bool {
	if toks[0].is(sql, '(') {
		return true
	}
	switch toks[0].word(sql) {
	case "select", "with", "values", "table":
		return true
	}
	return false
}

// findAsOf finds a trailing `AS OF [AT LEAST] expr` at paren depth 0. `AS
// of` is also valid PostgreSQL (an alias named "of"), so a candidate counts
// only if what follows is one complete expression; the last such candidate
// wins. It returns the byte offset where the clause starts.
func findAsOf(sql string, toks []token) (*AsOf, int) {
	depth := 0
	var cands []int
	for i, t := range toks {
		switch {
		case t.is(sql, '('):
			depth++
		case t.is(sql, ')'):
			depth--
		case depth == 0 && t.tok == pg.Token_AS && i+1 < len(toks) && toks[i+1].word(sql) == "of":
			cands = append(cands, i)
		}
	}
	for c := len(cands) - 1; c >= 0; c-- {
		i := cands[c]
		j := i + 2
		a := &AsOf{}
		if j+1 < len(toks) && toks[j].word(sql) == "at" && toks[j+1].word(sql) == "least" {
			a.AtLeast = true
			j += 2
		}
		if j >= len(toks) || !isExpression(sql, toks[j:]) {
			continue
		}
		a.Expr = sql[toks[j].start:]
		return a, toks[i].start
	}
	return nil, 0
}

// isExpression reports whether toks (to the end of sql) are one scalar
// expression: balanced parentheses that never close more than they open, and
// `SELECT (<text>)` parses.
func isExpression(sql string, toks []token) bool {
	depth := 0
	for _, t := range toks {
		if t.is(sql, '(') {
			depth++
		} else if t.is(sql, ')') {
			depth--
			if depth < 0 {
				return false
			}
		}
	}
	if depth != 0 {
		return false
	}
	r, err := parse("SELECT (" + sql[toks[0].start:] + ")")
	return err == nil && len(r.Stmts) == 1
}

// preparseRetention strips RETAIN HISTORY from CREATE TABLE ... WITH (...),
// ALTER TABLE ... SET (...) and ALTER TABLE ... RESET (...).
func preparseRetention(sql string, toks []token, res *mzSyntax) error {
	isAlter := toks[0].word(sql) == "alter"
	// The option list: WITH ( for CREATE, SET ( / RESET ( for ALTER, at
	// depth 0.
	depth := 0
	hasTable := false
	for i, t := range toks {
		if depth == 0 && t.tok == pg.Token_TABLE {
			hasTable = true
		}
		switch {
		case t.is(sql, '('):
			depth++
			continue
		case t.is(sql, ')'):
			depth--
			continue
		}
		if depth != 0 || !hasTable || i+1 >= len(toks) || !toks[i+1].is(sql, '(') {
			continue
		}
		w := t.word(sql)
		reset := w == "reset"
		if !(isAlter && (w == "set" || reset) || !isAlter && w == "with") {
			continue
		}
		open := i + 1
		closeIdx := matchParen(sql, toks, open)
		if closeIdx < 0 {
			return nil // let the parser report it
		}
		items := splitItems(sql, toks, open+1, closeIdx)
		var keep []string
		found := false
		for _, it := range items {
			// RETAIN HISTORY ..., or the relation option pg_dump writes
			// for it (retain_history = '<interval>').
			keyLen := 0
			switch {
			case len(it) >= 2 && it[0].word(sql) == "retain" && it[1].word(sql) == "history":
				keyLen = 2
			case len(it) >= 1 && it[0].word(sql) == RetainHistoryOption:
				keyLen = 1
			}
			if keyLen > 0 {
				found = true
				if reset {
					if len(it) != keyLen {
						return syntaxAt(sql, it[keyLen].start)
					}
					res.retention = &Retention{Reset: true}
					continue
				}
				value := retentionValue
				if keyLen == 1 {
					value = retentionOptionValue
				}
				d, err := value(sql, it[keyLen:])
				if err != nil {
					return err
				}
				res.retention = &Retention{Duration: d}
				continue
			}
			if len(it) > 0 {
				keep = append(keep, sql[it[0].start:it[len(it)-1].end])
			}
		}
		if !found {
			continue
		}
		res.stripped = true
		if len(keep) > 0 {
			res.text = sql[:toks[open].start] + "(" + strings.Join(keep, ", ") + ")" + sql[toks[closeIdx].end:]
			return nil
		}
		// The whole clause goes. In ALTER TABLE a subcommand is removed
		// with one neighbouring comma.
		from, to := toks[i].start, toks[closeIdx].end
		if isAlter {
			switch {
			case i > 0 && toks[i-1].is(sql, ','):
				from = toks[i-1].start
			case closeIdx+1 < len(toks) && toks[closeIdx+1].is(sql, ','):
				to = toks[closeIdx+1].end
			default:
				res.text = "" // the only subcommand
				return nil
			}
		}
		res.text = strings.TrimSpace(sql[:from] + sql[to:])
		return nil
	}
	return nil
}

// matchParen returns the index of the token closing the paren at open, or -1.
func matchParen(sql string, toks []token, open int) int {
	depth := 0
	for i := open; i < len(toks); i++ {
		if toks[i].is(sql, '(') {
			depth++
		} else if toks[i].is(sql, ')') {
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// splitItems splits toks[from:to] at commas of depth 0.
func splitItems(sql string, toks []token, from, to int) [][]token {
	var items [][]token
	depth, start := 0, from
	for i := from; i < to; i++ {
		switch {
		case toks[i].is(sql, '('):
			depth++
		case toks[i].is(sql, ')'):
			depth--
		case toks[i].is(sql, ',') && depth == 0:
			items = append(items, toks[start:i])
			start = i + 1
		}
	}
	return append(items, toks[start:to])
}

// RetainHistoryOption is RETAIN HISTORY as a relation option,
// `retain_history = '<interval>'`, in CREATE TABLE ... WITH (...) and ALTER
// TABLE ... SET/RESET (...): what a pg_dump through the proxy writes for a
// table with RETAIN HISTORY, so that restoring the dump through the proxy
// sets it again.
const RetainHistoryOption = "retain_history"

// retentionValue parses `[=] FOR '<interval>'` (or a bare number of ms).
func retentionValue(sql string, toks []token) (time.Duration, error) {
	if len(toks) > 0 && toks[0].is(sql, '=') {
		toks = toks[1:]
	}
	if len(toks) != 2 || toks[0].tok != pg.Token_FOR {
		if len(toks) > 0 {
			return 0, syntaxAt(sql, toks[0].start)
		}
		return 0, syntaxAt(sql, len(sql))
	}
	return intervalValue(sql, toks[1])
}

// retentionOptionValue parses the value of RetainHistoryOption: `=
// '<interval>'` (or a bare number of ms).
func retentionOptionValue(sql string, toks []token) (time.Duration, error) {
	if len(toks) != 2 || !toks[0].is(sql, '=') {
		if len(toks) > 0 {
			return 0, syntaxAt(sql, toks[0].start)
		}
		return 0, syntaxAt(sql, len(sql))
	}
	return intervalValue(sql, toks[1])
}

// intervalValue parses a retention interval token: a string literal or an
// integer (milliseconds).
func intervalValue(sql string, tok token) (time.Duration, error) {
	v := sql[tok.start:tok.end]
	switch tok.tok {
	case pg.Token_SCONST:
		if len(v) < 2 || v[0] != '\'' {
			return 0, syntaxAt(sql, tok.start)
		}
		v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
	case pg.Token_ICONST:
	default:
		return 0, syntaxAt(sql, tok.start)
	}
	return ParseInterval(v)
}

// intervalUnits maps the unit spellings PostgreSQL and Materialize accept
// to a duration. Months and years have no fixed length and are refused.
var intervalUnits = map[string]time.Duration{
	"us": time.Microsecond, "usec": time.Microsecond, "usecs": time.Microsecond,
	"microsecond": time.Microsecond, "microseconds": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond, "msecs": time.Millisecond,
	"millisecond": time.Millisecond, "milliseconds": time.Millisecond,
	"s": time.Second, "sec": time.Second, "secs": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "mins": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hrs": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
}

// ParseInterval parses a retention interval: a bare number is milliseconds
// ('1000'); otherwise a sequence of <number><unit> pairs, with or without
// spaces ('1h', '30s', '1 day', '500ms', '1 hour 30 minutes', '1h30m').
// Fractions are allowed ('1.5h'). Months and years are refused (no fixed
// length). Errors carry SQLSTATE 22023.
func ParseInterval(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, invalidInterval(s)
	}
	if n, err := strconv.ParseUint(in, 10, 63); err == nil {
		if n > uint64(1<<63-1)/uint64(time.Millisecond) {
			return 0, invalidInterval(s)
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	var total time.Duration
	rest := strings.ToLower(in)
	for rest != "" {
		rest = strings.TrimLeft(rest, " \t")
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, invalidInterval(s)
		}
		num, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, invalidInterval(s)
		}
		rest = strings.TrimLeft(rest[i:], " \t")
		j := 0
		for j < len(rest) && rest[j] >= 'a' && rest[j] <= 'z' {
			j++
		}
		unit, ok := intervalUnits[rest[:j]]
		if !ok {
			return 0, invalidInterval(s)
		}
		rest = rest[j:]
		v := num * float64(unit)
		if v > float64(1<<62) || total+time.Duration(v) < total {
			return 0, invalidInterval(s)
		}
		total += time.Duration(v)
	}
	return total, nil
}

// preparseSubscribe splits SUBSCRIBE [TO] <name | (query)> [WITH (opts)]
// [AS OF [AT LEAST] expr] [UP TO expr] into its parts. The query, if any, is
// returned as text for the caller to plan.
func preparseSubscribe(sql string, toks []token) (sub *Subscribe, query string, queryOff int, err error) {
	sub = &Subscribe{}
	i := 1
	if i < len(toks) && toks[i].tok == pg.Token_TO {
		i++
	}
	if i >= len(toks) {
		return nil, "", 0, syntaxAt(sql, len(sql))
	}
	if toks[i].is(sql, '(') {
		c := matchParen(sql, toks, i)
		if c < 0 {
			return nil, "", 0, syntaxAt(sql, len(sql))
		}
		if c == i+1 {
			return nil, "", 0, syntaxAt(sql, toks[c].start)
		}
		query, queryOff = sql[toks[i+1].start:toks[c-1].end], toks[i+1].start
		i = c + 1
	} else {
		// A possibly qualified name: ident [. ident [. ident]].
		j := i
		for j < len(toks) && (toks[j].tok == pg.Token_IDENT || toks[j].keyword) {
			if j+1 < len(toks) && toks[j+1].is(sql, '.') && j+2 < len(toks) {
				j += 2
				continue
			}
			j++
			break
		}
		if j == i {
			return nil, "", 0, syntaxAt(sql, toks[i].start)
		}
		r, perr := parse("TABLE " + sql[toks[i].start:toks[j-1].end])
		if perr != nil || len(r.Stmts) != 1 {
			return nil, "", 0, syntaxAt(sql, toks[i].start)
		}
		from := r.Stmts[0].Stmt.GetSelectStmt().GetFromClause()
		if len(from) != 1 || from[0].GetRangeVar() == nil {
			return nil, "", 0, syntaxAt(sql, toks[i].start)
		}
		rv := from[0].GetRangeVar()
		sub.Object = &QualifiedName{Schema: rv.Schemaname, Name: rv.Relname}
		i = j
	}
	if i < len(toks) && toks[i].tok == pg.Token_WITH {
		if i+1 >= len(toks) || !toks[i+1].is(sql, '(') {
			return nil, "", 0, syntaxAt(sql, toks[min(i+1, len(toks)-1)].start)
		}
		c := matchParen(sql, toks, i+1)
		if c < 0 {
			return nil, "", 0, syntaxAt(sql, len(sql))
		}
		for _, it := range splitItems(sql, toks, i+2, c) {
			if len(it) == 0 {
				continue
			}
			o := SubscribeOption{Name: it[0].word(sql)}
			if o.Name == "" {
				return nil, "", 0, syntaxAt(sql, it[0].start)
			}
			v := it[1:]
			if len(v) > 0 && v[0].is(sql, '=') {
				v = v[1:]
			}
			if len(v) > 0 {
				o.Value = sql[v[0].start:v[len(v)-1].end]
			}
			sub.Options = append(sub.Options, o)
		}
		i = c + 1
	}
	// AS OF [AT LEAST] expr [UP TO expr] | UP TO expr
	upTo := -1
	depth := 0
	for j := i; j < len(toks); j++ {
		switch {
		case toks[j].is(sql, '('):
			depth++
		case toks[j].is(sql, ')'):
			depth--
		case depth == 0 && toks[j].word(sql) == "up" && j+1 < len(toks) && toks[j+1].tok == pg.Token_TO:
			upTo = j
		}
	}
	end := len(toks)
	if upTo >= 0 {
		if upTo+2 >= len(toks) {
			return nil, "", 0, syntaxAt(sql, len(sql))
		}
		sub.UpTo = sql[toks[upTo+2].start:]
		end = upTo
	}
	if i < end {
		if toks[i].tok != pg.Token_AS || i+1 >= end || toks[i+1].word(sql) != "of" {
			return nil, "", 0, syntaxAt(sql, toks[i].start)
		}
		j := i + 2
		a := &AsOf{}
		if j+1 < end && toks[j].word(sql) == "at" && toks[j+1].word(sql) == "least" {
			a.AtLeast = true
			j += 2
		}
		if j >= end {
			return nil, "", 0, syntaxAt(sql, len(sql))
		}
		a.Expr = strings.TrimSpace(sql[toks[j].start:toks[end-1].end])
		sub.AsOf = a
	}
	return sub, query, queryOff, nil
}

// identValue is the name an identifier token stands for: folded to lower
// case, or unquoted.
func identValue(sql string, t token) string {
	s := sql[t.start:t.end]
	if len(s) >= 2 && s[0] == '"' {
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	}
	return strings.ToLower(s)
}
