package planner

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file computes a query string's fingerprint: its text with every
// literal replaced by a placeholder of the literal's token class, comments
// and the amount of whitespace dropped, and keywords and unquoted
// identifiers lower-cased (as PostgreSQL folds them). Statements that differ
// only in their literals (pgbench's `... WHERE aid = 4711`) share one
// fingerprint, and so one cached plan, found without calling pg_query.
//
// It is lexical, in Go, with the lexing helpers of depth.go (pg_query's own
// scanner is a cgo call too). Two texts with the same fingerprint must
// have the same tokens but for the values of their literals, so that
// pg_query would build the same tree but for the constants' values. So the
// fingerprint gives up (and the plan is cached under the exact text)
// wherever the lexing is not obviously PostgreSQL's, or a literal's value
// or spelling could change the tokens or the parse:
//
//   - unterminated quotes, dollar quotes and comments (a syntax error the
//     parser must report), NUL bytes and invalid UTF-8;
//   - a string literal right after another one ('a' 'b' is an error,
//     'a'<newline>'b' is one string);
//   - escape strings with \u, \U, \x or octal escapes (the scanner checks
//     them), U&'...' and U&"..." (UESCAPE);
//   - numbers other than plain decimal ones (0x1F, 1_000) and numbers
//     followed by a letter, digit or '.' (1abc is an error, not 1 AS abc);
//   - float(<n>): the grammar checks the precision's value;
//   - BEGIN ATOMIC bodies (splitStatements cuts them differently).
//
// Whitespace is kept, as one space, only between two tokens that could
// run together without it (words, operators, parameters, '.', ':'): not
// next to punctuation or a literal placeholder, which cannot.
//
// The classes are those of PostgreSQL's scanner, since the grammar accepts
// them in different places: integer (ICONST: fits in 32 bits), other
// numbers (FCONST), strings ('...', E'...', $$...$$: SCONST), bit strings
// (B'...'), hex strings (X'...') and national strings (N'...').
//
// The plan cached under a fingerprint is only reused when nothing in it
// depends on the literals but the statements' SQL text, which is taken
// from the new query string (see literalFree in cache.go).

// span is a statement's byte range in its query string.
type span struct{ start, end int }

// fingerprint is a query string's fingerprint (key) and the range of each
// of its statements, cut as splitStatements cuts them.
type fingerprint struct {
	key   string
	stmts []span
	lits  []literal // the literals replaced, in the order of the text
}

// literal is a literal token of a query string and its class (litInteger,
// ...).
type literal struct {
	span
	class string
}

// skeleton is sql, whose literals are lits, with each literal replaced by
// its class's placeholder and nothing else changed: two texts with the same
// skeleton are byte for byte the same between their literals.
func skeleton(sql string, lits []literal) string {
	var b strings.Builder
	b.Grow(len(sql))
	last := 0
	for _, l := range lits {
		b.WriteString(sql[last:l.start])
		b.WriteString(l.class)
		last = l.end
	}
	b.WriteString(sql[last:])
	return b.String()
}

// Placeholder bytes: NUL never occurs in a fingerprinted text.
const (
	litInteger  = "\x00i"
	litNumeric  = "\x00f"
	litString   = "\x00s"
	litBits     = "\x00b"
	litHex      = "\x00x"
	litNational = "\x00n"
)

// fingerprinter is the state of one fingerprint computation.
type fingerprinter struct {
	sql        string
	buf        []byte
	space      bool // whitespace or a comment since the last token
	glue       bool // the last token could run into a following one
	afterStr   bool // the last token is a string literal
	depth      int  // parentheses, as splitStatements counts them
	start, end int  // the current statement's range; start < 0 before its first token
	stmts      []span
	lits       []literal
}

// fingerprintOf returns the fingerprint of sql, or false when sql has
// something the fingerprint does not handle (see above).
func fingerprintOf(sql string) (fingerprint, bool) {
	if strings.IndexByte(sql, 0) >= 0 || !utf8.ValidString(sql) {
		return fingerprint{}, false
	}
	f := &fingerprinter{sql: sql, buf: make([]byte, 0, len(sql)), start: -1}
	for i := 0; i < len(sql); {
		j, ok := f.next(i)
		if !ok {
			return fingerprint{}, false
		}
		i = j
	}
	f.endStatement()
	return fingerprint{key: string(f.buf), stmts: f.stmts, lits: f.lits}, true
}

// next consumes the token, whitespace or comment at sql[i] and returns the
// offset after it.
func (f *fingerprinter) next(i int) (int, bool) {
	sql := f.sql
	switch c := sql[i]; {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
		f.space = true
		return i + 1, true
	case c == '-' && strings.HasPrefix(sql[i:], "--"):
		f.space = true
		return lineCommentEnd(sql, i), true
	case c == '/' && strings.HasPrefix(sql[i:], "/*"):
		f.space = true
		return blockCommentEnd(sql, i)
	case c == '\'':
		return f.quoted(i, i+1, litString)
	case c == '"':
		end, ok := quotedEnd(sql, i+1, '"', false)
		f.token(i, end, sql[i:end], true)
		return end, ok
	case c == '$':
		return f.dollar(i)
	case c == '.' && strings.HasPrefix(sql[i:], ".."):
		f.token(i, i+2, "..", true) // DOT_DOT, even before a digit
		return i + 2, true
	case isDigit(c) || c == '.' && i+1 < len(sql) && isDigit(sql[i+1]):
		return f.number(i)
	case isIdentStart(c):
		return f.word(i)
	case isOpChar(c):
		end, _ := operatorEnd(sql, i)
		f.token(i, end, sql[i:end], true)
		return end, true
	case c == '(' || c == ')' || c == ',' || c == '[' || c == ']':
		if c == '(' {
			f.depth++
		} else if c == ')' {
			f.depth--
		}
		f.token(i, i+1, sql[i:i+1], false)
		return i + 1, true
	case c == ';':
		if f.depth > 0 {
			f.token(i, i+1, ";", false)
			return i + 1, true
		}
		f.endStatement()
		f.depth = 0
		f.buf = append(f.buf, ';')
		f.glue, f.space, f.afterStr = false, false, false
		return i + 1, true
	}
	// '.', ':' and anything else: one byte, as it is.
	f.token(i, i+1, sql[i:i+1], true)
	return i + 1, true
}

// token appends the token sql[start:end] as text.
func (f *fingerprinter) token(start, end int, text string, glue bool) {
	f.begin(start, end, glue)
	f.buf = append(f.buf, text...)
}

// begin starts a token at sql[start:end]: one space first if whitespace
// separated it from a token it could run into.
func (f *fingerprinter) begin(start, end int, glue bool) {
	if f.space && f.glue && glue {
		f.buf = append(f.buf, ' ')
	}
	f.space, f.glue, f.afterStr = false, glue, false
	if f.start < 0 {
		f.start = start
	}
	f.end = end
}

// literal appends a placeholder for the literal sql[start:end].
func (f *fingerprinter) literal(start, end int, class string) {
	f.token(start, end, class, false)
	f.lits = append(f.lits, literal{span{start, end}, class})
	f.afterStr = class != litInteger && class != litNumeric
}

func (f *fingerprinter) endStatement() {
	if f.start >= 0 {
		f.stmts = append(f.stmts, span{f.start, f.end})
	}
	f.start = -1
}

// quoted consumes a quoted string literal starting at sql[start] whose
// text (after the opening quote) starts at sql[body].
func (f *fingerprinter) quoted(start, body int, class string) (int, bool) {
	if f.afterStr {
		return 0, false // 'a' 'b', or 'a' continued on the next line
	}
	escapes := start < body-1 && (f.sql[start] == 'e' || f.sql[start] == 'E')
	end, ok := quotedEnd(f.sql, body, '\'', escapes)
	if !ok || escapes && !plainEscapes(f.sql[body:end-1]) {
		return 0, false
	}
	// A bit or hex string ends at its next quote: PostgreSQL's scanner
	// reads '' there as the end and another string (B'1''0' is B'1' and
	// '0'), not as a quote in the text.
	if (class == litBits || class == litHex) && strings.IndexByte(f.sql[body:end-1], '\'') >= 0 {
		return 0, false
	}
	f.literal(start, end, class)
	return end, true
}

// plainEscapes reports whether the text of an escape string has no escape
// the scanner checks (Unicode, hex and octal ones, which may make invalid
// characters).
func plainEscapes(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		switch c := s[i+1]; {
		case c == 'u' || c == 'U' || c == 'x' || c >= '0' && c <= '7':
			return false
		}
		i++
	}
	return true
}

// dollar consumes a parameter ($1), a dollar-quoted string or a lone '$'.
func (f *fingerprinter) dollar(i int) (int, bool) {
	sql := f.sql
	if j := i + 1; j < len(sql) && isDigit(sql[j]) {
		for j < len(sql) && isDigit(sql[j]) {
			j++
		}
		if j < len(sql) && (isIdentStart(sql[j]) || sql[j] == '$') {
			return 0, false // $1abc: an error
		}
		f.token(i, j, sql[i:j], true)
		return j, true
	}
	tag := dollarTag(sql, i)
	if tag == "" {
		f.token(i, i+1, "$", true)
		return i + 1, true
	}
	if f.afterStr {
		return 0, false
	}
	end, ok := dollarQuotedEnd(sql, i, tag)
	if !ok {
		return 0, false
	}
	f.literal(i, end, litString)
	return end, true
}

// number consumes a decimal number (decimalEnd); anything else that starts
// with a digit gives up.
func (f *fingerprinter) number(i int) (int, bool) {
	j, small, ok := decimalEnd(f.sql, i)
	if !ok {
		return 0, false
	}
	class := litNumeric
	if small {
		class = litInteger
	}
	f.literal(i, j, class)
	return j, true
}

// decimalEnd is the end of the decimal number at sql[i] (digits [. digits]
// [e [+-] digits], or . digits [e ...]), and whether it is an integer that
// fits in 32 bits (PostgreSQL's ICONST); not ok when a letter, digit, '.'
// or '$' follows it, which PostgreSQL's scanner reads otherwise.
func decimalEnd(sql string, i int) (end int, small, ok bool) {
	j := digitsEnd(sql, i)
	integer := true
	if j < len(sql) && sql[j] == '.' {
		integer = false
		j = digitsEnd(sql, j+1)
	}
	if j < len(sql) && (sql[j] == 'e' || sql[j] == 'E') {
		k := j + 1
		if k < len(sql) && (sql[k] == '+' || sql[k] == '-') {
			k++
		}
		if e := digitsEnd(sql, k); e > k {
			integer, j = false, e
		}
	}
	if j < len(sql) && (isIdentStart(sql[j]) || isDigit(sql[j]) || sql[j] == '.' || sql[j] == '$') {
		return 0, false, false
	}
	_, err := strconv.ParseInt(sql[i:j], 10, 32)
	return j, integer && err == nil, true
}

func digitsEnd(sql string, i int) int {
	for i < len(sql) && isDigit(sql[i]) {
		i++
	}
	return i
}

// stringPrefixes are the letters that, right before a quote, make a
// string literal of another kind.
var stringPrefixes = map[byte]string{'e': litString, 'b': litBits, 'x': litHex, 'n': litNational}

// word consumes a keyword or unquoted identifier, or a prefixed string
// literal (E'...', B'...', X'...', N'...').
func (f *fingerprinter) word(i int) (int, bool) {
	sql := f.sql
	j := identEnd(sql, i)
	if j == i+1 && j < len(sql) {
		lower := sql[i] | 0x20
		if class, ok := stringPrefixes[lower]; ok && sql[j] == '\'' {
			return f.quoted(i, j+1, class)
		}
		if lower == 'u' && sql[j] == '&' {
			return 0, false
		}
	}
	w := sql[i:j]
	if oneOf(w, "atomic") || oneOf(w, "float") && f.nextByte(j) == '(' {
		return 0, false
	}
	// Lower-cased as PostgreSQL folds unquoted names in UTF-8: ASCII only.
	f.begin(i, j, true)
	for k := 0; k < len(w); k++ {
		c := w[k]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		f.buf = append(f.buf, c)
	}
	return j, true
}

// nextByte is the first byte at or after sql[i] that is not whitespace or
// in a comment (0 at the end).
func (f *fingerprinter) nextByte(i int) byte {
	sql := f.sql
	for i < len(sql) {
		switch c := sql[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(sql[i:], "--"):
			i = lineCommentEnd(sql, i)
		case strings.HasPrefix(sql[i:], "/*"):
			i, _ = blockCommentEnd(sql, i)
		default:
			return c
		}
	}
	return 0
}
