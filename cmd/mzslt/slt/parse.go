package slt

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Directive names the kind of record as spelled in the file.
type Directive string

// The directives the parser knows.
const (
	DirStatement     Directive = "statement"
	DirQuery         Directive = "query"
	DirSimple        Directive = "simple"
	DirHashThreshold Directive = "hash-threshold"
	DirHalt          Directive = "halt"
	DirMode          Directive = "mode"
	DirResetServer   Directive = "reset-server"
)

// Sort is a query's sort mode.
type Sort int

// The sort modes.
const (
	NoSort Sort = iota
	RowSort
	ValueSort
)

// Cond is one skipif/onlyif line in front of a record.
type Cond struct {
	Skip   bool   // skipif (true) or onlyif (false)
	Engine string // compared case-insensitively, as the original runner does
}

// Record is one parsed record. Fields that do not apply to a directive are
// zero.
type Record struct {
	Line      int // 1-based line of the record's directive (after skipif/onlyif)
	Directive Directive
	Conds     []Cond
	SQL       string

	// statement / query error
	ExpectError bool
	ErrorRegex  string // unanchored; empty matches any error
	PGCode      string // from "error pgcode XXXXX", cockroach style
	Count       int64  // statement count N; -1 when absent

	// query
	Types     string
	Sort      Sort
	Label     string
	ColNames  bool
	Multiline bool
	HasOutput bool     // a "----" line was present
	Expected  []string // expected lines (for multiline: the raw lines up to EOF)
	After     []string // simple multiline: the lines after EOF (COMPLETE n)

	// simple
	Conn string
	User string

	// hash-threshold, mode
	Arg string

	// Line indexes (0-based) into the file for --rewrite: the expected block
	// spans [outStart, outEnd); when there was no "----", outStart==outEnd
	// is where one would be inserted.
	outStart, outEnd int
}

// ParseError is a syntax error at a line of a file.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// line is one line of a file, with its terminator removed and a trailing \r
// stripped, as the original runner does.
type line struct {
	text  string
	blank bool // empty or only white space
}

func (l line) comment() bool { return strings.HasPrefix(l.text, "#") }

func splitLines(src []byte) []line {
	if len(src) == 0 {
		return nil
	}
	src = bytes.TrimSuffix(src, []byte("\n"))
	raw := strings.Split(string(src), "\n")
	out := make([]line, len(raw))
	for i, r := range raw {
		r = strings.TrimSuffix(r, "\r")
		out[i] = line{text: r, blank: strings.TrimSpace(r) == ""}
	}
	return out
}

// Parse parses a whole file. On a syntax error it returns the records before
// it together with a *ParseError, so a runner can run what it understood and
// then report the error as a failure, the way the original runner stops at an
// unknown record type.
func Parse(src []byte) ([]Record, error) {
	p := &parser{lines: splitLines(src)}
	var recs []Record
	for {
		rec, ok, err := p.next()
		if err != nil {
			return recs, err
		}
		if !ok {
			return recs, nil
		}
		recs = append(recs, rec)
	}
}

type parser struct {
	lines []line
	i     int
}

func (p *parser) errf(i int, format string, args ...any) error {
	return &ParseError{Line: i + 1, Msg: fmt.Sprintf(format, args...)}
}

// skipFiller moves past blank and comment lines.
func (p *parser) skipFiller() {
	for p.i < len(p.lines) && (p.lines[p.i].blank || p.lines[p.i].comment()) {
		p.i++
	}
}

// skipToBlank moves past whatever is left of the current record.
func (p *parser) skipToBlank() {
	for p.i < len(p.lines) && !p.lines[p.i].blank {
		p.i++
	}
}

// headerFields splits a directive line into words, dropping a trailing
// "# comment".
func headerFields(s string) []string {
	f := strings.Fields(s)
	for i, w := range f {
		if strings.HasPrefix(w, "#") {
			return f[:i]
		}
	}
	return f
}

func (p *parser) next() (Record, bool, error) {
	var rec Record
	rec.Count = -1
	for {
		p.skipFiller()
		if p.i >= len(p.lines) {
			if len(rec.Conds) > 0 {
				return rec, false, p.errf(p.i-1, "skipif/onlyif at end of file")
			}
			return rec, false, nil
		}
		f := headerFields(p.lines[p.i].text)
		if len(f) == 0 {
			p.i++
			continue
		}
		if f[0] != "skipif" && f[0] != "onlyif" {
			break
		}
		if len(f) < 2 {
			return rec, false, p.errf(p.i, "%s needs an engine name", f[0])
		}
		rec.Conds = append(rec.Conds, Cond{Skip: f[0] == "skipif", Engine: f[1]})
		p.i++
	}

	hdr := p.lines[p.i].text
	f := headerFields(hdr)
	rec.Line = p.i + 1
	start := p.i
	p.i++
	var err error
	switch Directive(f[0]) {
	case DirStatement:
		err = p.statement(&rec, hdr, f, start)
	case DirQuery:
		err = p.query(&rec, hdr, f, start)
	case DirSimple:
		err = p.simple(&rec, f, start)
	case DirHashThreshold:
		rec.Directive = DirHashThreshold
		if len(f) < 2 {
			return rec, false, p.errf(start, "hash-threshold needs a number")
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			return rec, false, p.errf(start, "bad hash-threshold %q", f[1])
		}
		rec.Arg = f[1]
	case DirHalt:
		rec.Directive = DirHalt
	case DirResetServer:
		rec.Directive = DirResetServer
	case DirMode:
		rec.Directive = DirMode
		if len(f) < 2 {
			return rec, false, p.errf(start, "mode needs cockroach or standard")
		}
		switch f[1] {
		case "cockroach", "standard", "sqlite":
		default:
			return rec, false, p.errf(start, "unknown mode %q", f[1])
		}
		rec.Arg = f[1]
	case "subtest", "user", "kv-batch-size":
		// CockroachDB directives Materialize's runner ignores too.
		p.skipToBlank()
		return p.next()
	default:
		return rec, false, p.errf(start, "unknown record type %q", f[0])
	}
	if err != nil {
		return rec, false, err
	}
	p.skipToBlank()
	return rec, true, nil
}

// rest returns what follows the first n words of s, trimmed.
func rest(s string, n int) string {
	s = strings.TrimLeft(s, " \t")
	for ; n > 0; n-- {
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			return ""
		}
		s = strings.TrimLeft(s[i:], " \t")
	}
	return strings.TrimRight(s, " \t")
}

// errorSpec parses what follows "statement error" / "query error": an
// optional "pgcode XXXXX" and a regular expression.
func errorSpec(rec *Record, s string) {
	rec.ExpectError = true
	if f := strings.Fields(s); len(f) >= 2 && f[0] == "pgcode" && len(f[1]) == 5 {
		rec.PGCode = f[1]
		s = rest(s, 2)
	}
	rec.ErrorRegex = s
}

// sqlUntilBlank collects SQL lines up to a blank line; comment lines are
// dropped, as the original runner drops them everywhere.
func (p *parser) sqlUntilBlank() string {
	var b strings.Builder
	for p.i < len(p.lines) && !p.lines[p.i].blank {
		if !p.lines[p.i].comment() {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.lines[p.i].text)
		}
		p.i++
	}
	return b.String()
}

func (p *parser) statement(rec *Record, hdr string, f []string, start int) error {
	rec.Directive = DirStatement
	if len(f) < 2 {
		return p.errf(start, "statement needs ok, error or count")
	}
	switch f[1] {
	case "ok", "OK":
	case "error":
		errorSpec(rec, rest(hdr, 2))
	case "count":
		if len(f) < 3 {
			return p.errf(start, "statement count needs a number")
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || n < 0 {
			return p.errf(start, "bad statement count %q", f[2])
		}
		rec.Count = n
	default:
		return p.errf(start, "statement argument should be ok, error or count, not %q", f[1])
	}
	rec.SQL = p.sqlUntilBlank()
	return nil
}

func (p *parser) query(rec *Record, hdr string, f []string, start int) error {
	rec.Directive = DirQuery
	if len(f) >= 2 && f[1] == "error" {
		errorSpec(rec, rest(hdr, 2))
		rec.SQL = p.sqlUntilBlank()
		return nil
	}
	if len(f) < 2 {
		return p.errf(start, "query needs a type string")
	}
	for _, c := range f[1] {
		if !strings.ContainsRune("TIRBO", c) {
			return p.errf(start, "unknown type character %q in type string", c)
		}
	}
	rec.Types = f[1]
	// The original reads "<sort> [label]"; Materialize packs options into
	// one comma-separated word. Accept both: known options anywhere, the
	// first unknown word is the label.
	for _, w := range f[2:] {
		for _, o := range strings.Split(w, ",") {
			switch {
			case o == "":
			case o == "nosort":
				rec.Sort = NoSort
			case o == "rowsort" || strings.HasPrefix(o, "partialsort"):
				rec.Sort = RowSort
			case o == "valuesort":
				rec.Sort = ValueSort
			case o == "colnames":
				rec.ColNames = true
			case o == "multiline":
				rec.Multiline = true
			case o == "retry":
			default:
				if rec.Label == "" {
					rec.Label = o
				}
			}
		}
	}

	// SQL runs until "----" or a blank line.
	var b strings.Builder
	for p.i < len(p.lines) && !p.lines[p.i].blank && p.lines[p.i].text != "----" {
		if !p.lines[p.i].comment() {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.lines[p.i].text)
		}
		p.i++
	}
	rec.SQL = b.String()
	if p.i >= len(p.lines) || p.lines[p.i].text != "----" {
		rec.outStart, rec.outEnd = p.i, p.i
		return nil
	}
	rec.HasOutput = true
	p.i++
	rec.outStart = p.i
	if rec.Multiline {
		for ; p.i < len(p.lines) && p.lines[p.i].text != "EOF"; p.i++ {
			rec.Expected = append(rec.Expected, p.lines[p.i].text)
		}
		if p.i >= len(p.lines) {
			return p.errf(start, "multiline query without an EOF line")
		}
		rec.outEnd = p.i
		p.i++ // EOF
		return nil
	}
	for ; p.i < len(p.lines) && !p.lines[p.i].blank; p.i++ {
		if !p.lines[p.i].comment() {
			rec.Expected = append(rec.Expected, p.lines[p.i].text)
		}
	}
	rec.outEnd = p.i
	return nil
}

func (p *parser) simple(rec *Record, f []string, start int) error {
	rec.Directive = DirSimple
	if len(f) >= 2 {
		for _, o := range strings.Split(strings.Join(f[1:], ","), ",") {
			switch {
			case o == "":
			case strings.HasPrefix(o, "conn="):
				rec.Conn = strings.TrimPrefix(o, "conn=")
			case strings.HasPrefix(o, "user="):
				rec.User = strings.TrimPrefix(o, "user=")
			case o == "multiline":
				rec.Multiline = true
			default:
				return p.errf(start, "unknown simple option %q", o)
			}
		}
	}
	if rec.User != "" && rec.Conn == "" {
		return p.errf(start, "simple: user= needs conn=")
	}
	// As in Materialize, the SQL runs until "----" (it may hold blank lines).
	var sql []string
	for ; p.i < len(p.lines) && p.lines[p.i].text != "----"; p.i++ {
		sql = append(sql, p.lines[p.i].text)
	}
	if p.i >= len(p.lines) {
		return p.errf(start, "simple without ----")
	}
	rec.SQL = strings.Join(sql, "\n")
	rec.HasOutput = true
	p.i++
	rec.outStart = p.i
	if rec.Multiline {
		for ; p.i < len(p.lines) && p.lines[p.i].text != "EOF"; p.i++ {
			rec.Expected = append(rec.Expected, p.lines[p.i].text)
		}
		if p.i >= len(p.lines) {
			return p.errf(start, "multiline simple without an EOF line")
		}
		p.i++
		for ; p.i < len(p.lines) && !p.lines[p.i].blank; p.i++ {
			rec.After = append(rec.After, p.lines[p.i].text)
		}
		rec.outEnd = p.i
		return nil
	}
	for ; p.i < len(p.lines) && !p.lines[p.i].blank; p.i++ {
		rec.Expected = append(rec.Expected, p.lines[p.i].text)
	}
	rec.outEnd = p.i
	return nil
}

// skipped reports whether the conditions skip the record for engine: any
// skipif naming it, or any onlyif naming another engine.
func (r *Record) skipped(engine string) bool {
	for _, c := range r.Conds {
		match := strings.EqualFold(c.Engine, engine)
		if c.Skip == match {
			return true
		}
	}
	return false
}
