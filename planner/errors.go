package planner

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/pganalyze/pg_query_go/v6/parser"
)

// ErrSyntax is matched (errors.Is) by every error Plan returns because the
// text does not parse. The proxy may prefer to forward such a statement to
// the backend so that PostgreSQL reports its own error.
var ErrSyntax = errors.New("syntax error")

// SyntaxError is PostgreSQL's parser error for a statement. Plan returns it
// wrapped in a *pgerr.Error with SQLSTATE 42601 whose Extra['P'] holds the
// position.
type SyntaxError struct {
	Message  string
	Position int // 1-based character position in the query string; 0 if unknown
	Hint     string

	off           int  // byte offset inside the statement, before Plan places it
	misplacedAsOf bool // the statement has an AS OF that is not its last clause
}

// ErrAsOf is matched (errors.Is) by mzproxy's own errors about an AS OF
// clause (one that is not the last clause of its query, a parameter in it
// that cannot be read): the backend, which never sees AS OF, could not
// explain them.
var ErrAsOf = errors.New("AS OF")

// asOfError is the cause of an error about an AS OF clause.
type asOfError string

func (e asOfError) Error() string        { return string(e) }
func (e asOfError) Is(target error) bool { return target == ErrAsOf }

func (e *SyntaxError) Error() string { return e.Message }

// Is makes errors.Is(err, ErrSyntax) true.
func (e *SyntaxError) Is(target error) bool {
	return target == ErrSyntax || target == ErrAsOf && e.misplacedAsOf
}

// syntaxAt is a syntax error at byte offset off of stmt, worded as
// PostgreSQL's parser words it.
func syntaxAt(stmt string, off int) *SyntaxError {
	if off >= len(stmt) {
		return &SyntaxError{Message: "syntax error at end of input", off: len(stmt)}
	}
	toks, err := scanTokens(stmt[off:])
	near := stmt[off:]
	if err == nil && len(toks) > 0 {
		near = stmt[off+toks[0].start : off+toks[0].end]
	}
	return &SyntaxError{Message: fmt.Sprintf("syntax error at or near %q", near), off: off}
}

// fromParser converts a pg_query error on text to a SyntaxError; the
// parser's cursor position (1-based, in characters) becomes a byte offset.
func fromParser(text string, err error) *SyntaxError {
	var pe *parser.Error
	if !errors.As(err, &pe) {
		return &SyntaxError{Message: err.Error(), off: -1}
	}
	off := -1
	if pe.Cursorpos > 0 {
		off = byteOffset(text, pe.Cursorpos-1)
	}
	return &SyntaxError{Message: pe.Message, off: off}
}

// byteOffset returns the byte offset of the n-th character of s.
func byteOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// place sets e.Position for a statement starting at byte offset base of
// query, and returns the client-facing error.
func (e *SyntaxError) place(query string, base int) *pgerr.Error {
	if e.off >= 0 {
		b := min(base+e.off, len(query))
		e.Position = utf8.RuneCountInString(query[:b]) + 1
	}
	pe := pgerr.Wrap(pgerr.SyntaxError, e)
	pe.Hint = e.Hint
	if e.Position > 0 {
		pe.Extra = map[byte]string{'P': strconv.Itoa(e.Position)}
	}
	return pe
}

func invalidInterval(s string) error {
	return pgerr.New(pgerr.InvalidParameterValue, "invalid RETAIN HISTORY interval: %q", s)
}
