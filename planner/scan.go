package planner

import (
	"strings"
	"sync"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// This file is a scanner in Go for the common texts: it gives the tokens
// pg_query's scanner gives (type, offsets, keyword kind), without the cgo
// call and the protobuf decode of its answer. Every new text the planner
// sees is scanned (splitStatements, before the parse), and under
// --history-reads every read of the sqllogictest corpus is a new text:
// pg_query's scan was about 15% of the proxy's CPU there.
//
// It handles what such texts hold and gives up (scanTokens then asks
// pg_query) on anything whose lexing is not plainly PostgreSQL's default
// one or that the scanner would refuse, so that errors and their positions
// stay pg_query's:
//
//   - NUL bytes, invalid UTF-8, a byte of 0x80 or more outside a quoted
//     string or identifier, and bytes PostgreSQL's scanner returns as
//     themselves ('{', '\', ...);
//   - unterminated quotes and comments, a zero-length quoted identifier;
//   - E'...', B'...', X'...', N'...', U&'...', U&"..." and dollar quotes,
//     and a string literal whose next token is another quote (the
//     continuation of 'a'<newline>'b' is one token);
//   - numbers other than plain decimal ones and numbers followed by a
//     letter, digit, '.', '_' or '$' (the scanner's junk rules);
//   - a '$' that is not a parameter, a parameter followed by a letter,
//     digit, '_', '$' or '.';
//   - operators of 64 bytes or more.
//
// TestGoScanMatchesPgQuery and FuzzGoScan compare it with pg_query's.

// scanWithGo turns the Go scanner off (for the tests that compare it with
// pg_query's).
var scanWithGo = true

// keywords maps a keyword, lower-cased, to its token and kind, as
// pg_query's scanner reports them; made once, by pg_query's scanner.
var keywords = sync.OnceValue(loadKeywords)

type keywordInfo struct {
	tok  pg.Token
	kind pg.KeywordKind
}

// loadKeywords asks pg_query's scanner about every name of the Token
// enum's keyword range (ABORT_P ... ZONE; a name loses its _P suffix) in
// one call. A name that does not come back as its own token (none in
// PostgreSQL 17) is left out: the Go scanner then calls that word an
// identifier, and TestKeywordsComplete fails. nil (the Go scanner off) if
// the scan fails.
func loadKeywords() map[string]keywordInfo {
	var names []string
	for t := pg.Token_ABORT_P; t <= pg.Token_ZONE; t++ {
		name, ok := pg.Token_name[int32(t)]
		if !ok {
			continue
		}
		names = append(names, strings.ToLower(strings.TrimSuffix(name, "_P")))
	}
	text := strings.Join(names, " ")
	res, err := pg.Scan(text)
	if err != nil || len(res.Tokens) != len(names) {
		return nil
	}
	m := make(map[string]keywordInfo, len(names))
	for i, tk := range res.Tokens {
		if tk.KeywordKind == pg.KeywordKind_NO_KEYWORD || text[tk.Start:tk.End] != names[i] {
			continue
		}
		m[names[i]] = keywordInfo{tok: tk.Token, kind: tk.KeywordKind}
	}
	return m
}

// goScanner is the state of one scan.
type goScanner struct {
	sql   string
	kw    map[string]keywordInfo
	toks  []token
	lower []byte // a word lower-cased, reused
}

// scanGo returns sql's tokens (comments dropped) as pg_query's scanner
// gives them, or false where it gives up (see above).
func scanGo(sql string) ([]token, bool) {
	if !scanWithGo || strings.IndexByte(sql, 0) >= 0 || !utf8.ValidString(sql) {
		return nil, false
	}
	kw := keywords()
	if kw == nil {
		return nil, false
	}
	// About a token per four bytes of a query, bounded: a long literal is
	// one token.
	s := &goScanner{sql: sql, kw: kw, toks: make([]token, 0, min(len(sql)/4+1, 256))}
	for i := 0; i < len(sql); {
		j, ok := s.next(i)
		if !ok {
			return nil, false
		}
		i = j
	}
	return s.toks, true
}

func (s *goScanner) add(start, end int, tok pg.Token) {
	s.toks = append(s.toks, token{start: start, end: end, tok: tok})
}

// afterString reports whether the last token is a string literal.
func (s *goScanner) afterString() bool {
	return len(s.toks) > 0 && s.toks[len(s.toks)-1].tok == pg.Token_SCONST
}

// next consumes the token, whitespace or comment at sql[i] and returns the
// offset after it.
func (s *goScanner) next(i int) (int, bool) {
	sql := s.sql
	switch c := sql[i]; {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
		return i + 1, true
	case c == '-' && strings.HasPrefix(sql[i:], "--"):
		return lineCommentEnd(sql, i), true
	case c == '/' && strings.HasPrefix(sql[i:], "/*"):
		return blockCommentEnd(sql, i)
	case c == '\'':
		if s.afterString() {
			return 0, false
		}
		end, ok := quotedEnd(sql, i+1, '\'', false)
		s.add(i, end, pg.Token_SCONST)
		return end, ok
	case c == '"':
		end, ok := quotedEnd(sql, i+1, '"', false)
		if !ok || end == i+2 {
			return 0, false // unterminated, or zero-length
		}
		s.add(i, end, pg.Token_IDENT)
		return end, true
	case c == '$':
		return s.param(i)
	case c == '.' && strings.HasPrefix(sql[i:], ".."):
		s.add(i, i+2, pg.Token_DOT_DOT)
		return i + 2, true
	case isDigit(c) || c == '.' && i+1 < len(sql) && isDigit(sql[i+1]):
		return s.number(i)
	case c < 0x80 && isIdentStart(c):
		return s.word(i)
	case c == ':':
		switch {
		case strings.HasPrefix(sql[i:], "::"):
			s.add(i, i+2, pg.Token_TYPECAST)
			return i + 2, true
		case strings.HasPrefix(sql[i:], ":="):
			s.add(i, i+2, pg.Token_COLON_EQUALS)
			return i + 2, true
		}
		s.add(i, i+1, pg.Token(c))
		return i + 1, true
	case c == '(' || c == ')' || c == ',' || c == '[' || c == ']' || c == ';' || c == '.':
		s.add(i, i+1, pg.Token(c))
		return i + 1, true
	case isOpChar(c):
		return s.operator(i)
	}
	return 0, false
}

// selfChars are the characters PostgreSQL's scanner returns as themselves
// (its "self" rule).
const selfChars = ",()[].;:+-*/%^<>="

// operator consumes an operator as PostgreSQL's scanner does: the longest
// run of operator characters up to a comment's start, without trailing
// '+' and '-' unless it holds a character SQL's operators do not use; one
// character of selfChars is itself, and <=, >=, =>, <> and != their own
// tokens.
func (s *goScanner) operator(i int) (int, bool) {
	sql := s.sql
	end, _ := operatorEnd(sql, i)
	if end-i > 1 && (sql[end-1] == '+' || sql[end-1] == '-') &&
		strings.IndexAny(sql[i:end-1], "~!@#^&|`?%") < 0 {
		for end-i > 1 && (sql[end-1] == '+' || sql[end-1] == '-') {
			end--
		}
	}
	op := sql[i:end]
	switch {
	case len(op) >= 64:
		return 0, false // "operator too long"
	case len(op) == 1 && strings.IndexByte(selfChars, op[0]) >= 0:
		s.add(i, end, pg.Token(op[0]))
	case op == "<=":
		s.add(i, end, pg.Token_LESS_EQUALS)
	case op == ">=":
		s.add(i, end, pg.Token_GREATER_EQUALS)
	case op == "=>":
		s.add(i, end, pg.Token_EQUALS_GREATER)
	case op == "<>" || op == "!=":
		s.add(i, end, pg.Token_NOT_EQUALS)
	default:
		s.add(i, end, pg.Token_Op)
	}
	return end, true
}

// param consumes a parameter ($1); anything else at a '$' gives up.
func (s *goScanner) param(i int) (int, bool) {
	sql := s.sql
	j := digitsEnd(sql, i+1)
	if j == i+1 || j < len(sql) && (isIdentStart(sql[j]) || sql[j] == '$' || sql[j] == '.') {
		return 0, false
	}
	s.add(i, j, pg.Token_PARAM)
	return j, true
}

// number consumes a decimal number (decimalEnd): ICONST when it is an
// integer that fits in 32 bits, else FCONST.
func (s *goScanner) number(i int) (int, bool) {
	j, small, ok := decimalEnd(s.sql, i)
	if !ok {
		return 0, false
	}
	tok := pg.Token_FCONST
	if small {
		tok = pg.Token_ICONST
	}
	s.add(i, j, tok)
	return j, true
}

// word consumes a keyword or an unquoted identifier of ASCII letters,
// digits, '_' and '$'; a one-letter word that prefixes a string (E'...',
// U&'...') gives up.
func (s *goScanner) word(i int) (int, bool) {
	sql := s.sql
	j := identEnd(sql, i)
	if j == i+1 && j < len(sql) && (sql[j] == '\'' || sql[j] == '&') {
		switch sql[i] | 0x20 {
		case 'e', 'b', 'x', 'n', 'u':
			return 0, false
		}
	}
	s.lower = s.lower[:0]
	for k := i; k < j; k++ {
		c := sql[k]
		if c >= 0x80 {
			return 0, false
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		s.lower = append(s.lower, c)
	}
	if k, ok := s.kw[string(s.lower)]; ok {
		s.toks = append(s.toks, token{start: i, end: j, tok: k.tok, keyword: true,
			unreserved: k.kind == pg.KeywordKind_UNRESERVED_KEYWORD})
		return j, true
	}
	s.add(i, j, pg.Token_IDENT)
	return j, true
}
