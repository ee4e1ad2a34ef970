package slt

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// Kind is what a record did, for the report.
type Kind string

// The record kinds in a report. Control records (hash-threshold, mode,
// reset-server, halt) appear only when skipped, since the original runner
// counts every skipped record; a file the parser gave up on ends with one
// failed KindParse result.
const (
	KindStatement Kind = "statement"
	KindQuery     Kind = "query"
	KindSimple    Kind = "simple"
	KindControl   Kind = "control"
	KindParse     Kind = "parse"
)

// Outcome is a record's result.
type Outcome int

// The outcomes.
const (
	Passed Outcome = iota
	Failed
	Skipped
)

func (o Outcome) String() string {
	switch o {
	case Passed:
		return "passed"
	case Failed:
		return "failed"
	case Skipped:
		return "skipped"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is the outcome of one record.
type Result struct {
	File    string
	Line    int // the record's directive line, 1-based
	Kind    Kind
	Outcome Outcome
	Message string // why it failed; empty otherwise
}

// Counts are record counts.
type Counts struct {
	Passed, Failed, Skipped int
}

func (c Counts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
}

func (c *Counts) add(o Outcome) {
	switch o {
	case Passed:
		c.Passed++
	case Failed:
		c.Failed++
	case Skipped:
		c.Skipped++
	}
}

// FileReport is the outcome of one file.
type FileReport struct {
	File string
	Counts
	Results []Result
	// Err is a problem with the file as a whole (unreadable, no
	// connection, no fresh database); the records it kept from running are
	// not counted.
	Err error
}

// Report is the outcome of a run.
type Report struct {
	Files []*FileReport
	Counts
}

// OK reports whether every record that ran passed and no file had an error.
func (r *Report) OK() bool {
	if r.Failed > 0 {
		return false
	}
	for _, f := range r.Files {
		if f.Err != nil {
			return false
		}
	}
	return true
}

// Write prints one line per file and then the total, which is always the
// last line: "N passed, N failed, N skipped".
func (r *Report) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, f := range r.Files {
		fmt.Fprintf(bw, "%s: %s", f.File, f.Counts)
		if f.Err != nil {
			fmt.Fprintf(bw, " (error: %v)", f.Err)
		}
		bw.WriteByte('\n')
	}
	fmt.Fprintln(bw, r.Counts)
	return bw.Flush()
}

// Expected per-file counts, as committed in testdata: one line per file,
// "<path> <passed> <failed> <skipped>"; '#' starts a comment line.
type Expected map[string]Counts

// ReadExpected parses an expected-counts file.
func ReadExpected(rd io.Reader) (Expected, error) {
	exp := Expected{}
	sc := bufio.NewScanner(rd)
	n := 0
	for sc.Scan() {
		n++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		f := strings.Fields(t)
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: want <path> <passed> <failed> <skipped>", n)
		}
		var c [3]int
		for i := range c {
			v, err := strconv.Atoi(f[i+1])
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			c[i] = v
		}
		exp[filepath.ToSlash(f[0])] = Counts{c[0], c[1], c[2]}
	}
	return exp, sc.Err()
}

// Compare checks a report against expected counts. A file matches an
// expected path when its path ends with it, so the same expectations serve
// any checkout location. It returns one line per disagreement (a file with
// other counts, an error, or no expectation); none means the report is as
// expected.
func (exp Expected) Compare(r *Report) []string {
	var bad []string
	for _, f := range r.Files {
		key, c, ok := exp.lookup(f.File)
		switch {
		case f.Err != nil:
			bad = append(bad, fmt.Sprintf("%s: error: %v", f.File, f.Err))
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: no expected counts", f.File))
		case c != f.Counts:
			bad = append(bad, fmt.Sprintf("%s: got %s, want %s (as %s)", f.File, f.Counts, c, key))
		}
	}
	return bad
}

func (exp Expected) lookup(file string) (string, Counts, bool) {
	file = filepath.ToSlash(filepath.Clean(file))
	best := ""
	for k := range exp {
		if (file == k || strings.HasSuffix(file, "/"+k)) && len(k) > len(best) {
			best = k
		}
	}
	c, ok := exp[best]
	return best, c, ok && best != ""
}

// Diff compares two runs of the same files record by record (say mzproxy's
// against PostgreSQL's) and returns one line per record whose outcome
// differs, or that only one run has: "file:line: kind: passed vs failed
// (message)". Files are matched by path, records by line. No lines means
// the runs agree on every record.
func Diff(a, b *Report) []string {
	type key struct {
		file string
		line int
	}
	index := func(r *Report) (map[key]Result, []key) {
		m := map[key]Result{}
		var order []key
		for _, f := range r.Files {
			if f.Err != nil {
				k := key{f.File, 0}
				m[k] = Result{File: f.File, Kind: "file", Outcome: Failed, Message: f.Err.Error()}
				order = append(order, k)
			}
			for _, res := range f.Results {
				k := key{res.File, res.Line}
				if _, dup := m[k]; !dup {
					order = append(order, k)
				}
				m[k] = res
			}
		}
		return m, order
	}
	ma, oa := index(a)
	mb, ob := index(b)
	show := func(r Result, ok bool) string {
		switch {
		case !ok:
			return "absent"
		case r.Message != "":
			return fmt.Sprintf("%s (%s)", r.Outcome, r.Message)
		}
		return r.Outcome.String()
	}
	var out []string
	seen := map[key]bool{}
	for _, k := range append(oa, ob...) {
		if seen[k] {
			continue
		}
		seen[k] = true
		ra, okA := ma[k]
		rb, okB := mb[k]
		if okA && okB && ra.Outcome == rb.Outcome && ra.Kind == rb.Kind {
			continue
		}
		kind := ra.Kind
		if !okA {
			kind = rb.Kind
		}
		out = append(out, fmt.Sprintf("%s:%d: %s: %s vs %s", k.file, k.line, kind, show(ra, okA), show(rb, okB)))
	}
	return out
}
