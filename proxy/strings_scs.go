package proxy

import (
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
)

// The proxy reads every statement text as PostgreSQL does with
// standard_conforming_strings on (pg_query's parser, the fingerprint of
// the plan cache, the Go scans): a backslash in a plain '...' string is a
// character. With the setting off PostgreSQL reads it as an escape, so the
// two readings part at the first plain string with a backslash: a
// rewritten read would answer for another value than the client wrote, and
// a text the proxy takes for one harmless read may be more statements at
// the backend. Such a text is refused while the session has the setting
// off (0A000); every other text reads the same either way. The backend
// reports the setting (ParameterStatus) whenever it changes, however it
// was changed.

// scsParameter is the setting's name.
const scsParameter = "standard_conforming_strings"

// noteParameter keeps a ParameterStatus frame's value.
func (b *backend) noteParameter(frame []byte) {
	var ps pgproto3.ParameterStatus
	if ps.Decode(wire.Body(frame)) != nil {
		return
	}
	b.params[ps.Name] = ps.Value
	switch ps.Name {
	case scsParameter:
		b.escapingStrings = ps.Value == "off"
	case encodingParameter:
		b.foreignText = foreignEncoding(ps.Value)
	}
}

// The proxy reads statement text as UTF-8 too (pg_query's parser), and
// PostgreSQL converts a session's text from its client_encoding. A text
// that is not UTF-8 (a LATIN1 é) is not parsed by the proxy: a read is
// forwarded as it is, but a write or DDL would run unplanned (a CREATE
// TABLE whose text has an é made a table mzproxy did not manage, with no
// history; an INSERT into a managed one was refused with MZ002), and a
// timestamped read lost its AS OF or mz_now(). Such a text is refused
// (0A000) unless it is a plain read; text of the session that is UTF-8
// (ASCII, or a multibyte encoding's text that happens to be) is read
// as it is: the proxy passes its bytes through unchanged.

// encodingParameter is client_encoding's name.
const encodingParameter = "client_encoding"

// foreignEncoding reports whether a client_encoding, as the backend
// reports it, is one whose text the proxy may not read: neither UTF8 nor
// SQL_ASCII (whose bytes PostgreSQL takes as UTF-8 too, and refuses when
// they are not).
func foreignEncoding(enc string) bool {
	return enc != "" && enc != "UTF8" && enc != "SQL_ASCII"
}

// checkStringSyntax refuses sql when the session's backend reads its
// strings otherwise than the proxy does (see above).
func (s *Session) checkStringSyntax(sql string) error {
	if s.be.foreignText && !utf8.ValidString(sql) && !s.plainRead(sql) {
		return pgerr.New(pgerr.FeatureNotSupported,
			"mzproxy reads statement text as UTF-8, and this statement in client_encoding %s is not", s.be.params[encodingParameter]).
			WithHint("Set client_encoding to UTF8, or pass the non-ASCII values as parameters.")
	}
	if !s.be.escapingStrings || !backslashInPlainString(sql) {
		return nil
	}
	return pgerr.New(pgerr.FeatureNotSupported,
		"mzproxy does not support backslashes in plain string literals with standard_conforming_strings off").
		WithHint("Write the string as E'...', or SET standard_conforming_strings = on.")
}

// backslashInPlainString reports whether sql, read as PostgreSQL's scanner
// reads it with standard_conforming_strings on, has a string literal whose
// backslashes depend on the setting: a plain, national or Unicode ('...',
// N'...', U&'...') one with a backslash. Comments, quoted identifiers,
// dollar quotes and E'...' strings read the same either way.
func backslashInPlainString(sql string) bool {
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = commentEnd(sql, i)
		case c == '"':
			i = quoteEnd(sql, i+1, '"', false)
		case c == '\'':
			end := quoteEnd(sql, i+1, '\'', false)
			if hasBackslash(sql[i:end]) {
				return true
			}
			i = end
		case c == '$':
			i = dollarEnd(sql, i)
		case isNameByte(c):
			j := i
			for j < len(sql) && (isNameByte(sql[j]) || sql[j] >= '0' && sql[j] <= '9' || sql[j] == '$') {
				j++
			}
			word := sql[i:j]
			switch {
			case len(word) == 1 && (c|0x20) == 'e' && j < len(sql) && sql[j] == '\'':
				j = quoteEnd(sql, j+1, '\'', true)
			case len(word) == 1 && (c|0x20) == 'u' && j+1 < len(sql) && sql[j] == '&' && sql[j+1] == '\'':
				end := quoteEnd(sql, j+2, '\'', false)
				if hasBackslash(sql[j:end]) {
					return true
				}
				j = end
			}
			i = j
		default:
			i++
		}
	}
	return false
}

func hasBackslash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			return true
		}
	}
	return false
}

// isNameByte: a byte that starts a keyword or an unquoted name (the
// prefixes of N'...', B'...' and X'...' strings included: a national
// string then reads as a plain one, the others have no backslash).
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

// quoteEnd is the offset after the closing quote of a quoted text whose
// body starts at i (a doubled quote is one character; with escapes, a
// backslash escapes the next byte), or len(sql) when it has none.
func quoteEnd(sql string, i int, quote byte, escapes bool) int {
	for i < len(sql) {
		switch sql[i] {
		case '\\':
			if escapes {
				i++
			}
		case quote:
			if i+1 < len(sql) && sql[i+1] == quote {
				i++
			} else {
				return i + 1
			}
		}
		i++
	}
	return len(sql)
}

// commentEnd is the offset after the (nested) block comment at sql[i].
func commentEnd(sql string, i int) int {
	depth := 0
	for i < len(sql) {
		switch {
		case sql[i] == '/' && i+1 < len(sql) && sql[i+1] == '*':
			depth++
			i += 2
		case sql[i] == '*' && i+1 < len(sql) && sql[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return len(sql)
}

// dollarEnd is the offset after the dollar-quoted string at sql[i], or
// after the '$' when none starts there (a parameter's digits follow as
// a number).
func dollarEnd(sql string, i int) int {
	j := i + 1
	for j < len(sql) && (isNameByte(sql[j]) || j > i+1 && sql[j] >= '0' && sql[j] <= '9') {
		j++
	}
	if j >= len(sql) || sql[j] != '$' {
		return i + 1
	}
	tag := sql[i : j+1]
	for k := j + 1; k+len(tag) <= len(sql); k++ {
		if sql[k:k+len(tag)] == tag {
			return k + len(tag)
		}
	}
	return len(sql)
}
