package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's Tour is run as written: each ```sql block that follows a
// comment
//
//	<!-- tour: session=a [expect-error=SQLSTATE] [output=exact|shape] -->
//
// is fed, in order, to that session's psql (one psql process per
// session, so that sessions a and b interleave as the README says).
// Every statement must succeed, except that a block with expect-error
// must end with that error. With output, the next fenced block is the
// block's expected output: exact compares it as it is (trailing blanks
// aside); shape first reads every number as 0 and every run of blanks as
// one (timestamps differ from run to run).

// tourStep is one ```sql block of the tour.
type tourStep struct {
	line        int    // of the block's comment in README.md
	session     string // "a", "b", ...
	expectError string // SQLSTATE the block must end with, or ""
	output      string // "exact", "shape" or "" (not checked)
	sql         string
	want        string // the expected output, when output is set
}

var tourComment = regexp.MustCompile(`^<!-- tour: (.*) -->$`)

// readTour extracts the tour's steps from the README at path.
func readTour(t *testing.T, path string) []tourStep {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var steps []tourStep
	for i := 0; i < len(lines); i++ {
		m := tourComment.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		st := tourStep{line: i + 1}
		for _, field := range strings.Fields(m[1]) {
			key, value, _ := strings.Cut(field, "=")
			switch key {
			case "session":
				st.session = value
			case "expect-error":
				st.expectError = value
			case "output":
				st.output = value
			default:
				t.Fatalf("README.md:%d: unknown tour option %q", i+1, field)
			}
		}
		if st.session == "" || (st.output != "" && st.output != "exact" && st.output != "shape") {
			t.Fatalf("README.md:%d: a tour step needs session=NAME, and output is exact or shape", i+1)
		}
		var ok bool
		if st.sql, i, ok = fencedBlock(lines, i+1, "```sql"); !ok {
			t.Fatalf("README.md:%d: a ```sql block must follow the tour comment", i+1)
		}
		if st.output != "" {
			if st.want, i, ok = fencedBlock(lines, i+1, "```"); !ok {
				t.Fatalf("README.md:%d: output=%s needs a fenced block of the expected output after the SQL", st.line, st.output)
			}
		}
		steps = append(steps, st)
	}
	return steps
}

// fencedBlock reads the fenced block opening with a line starting with
// fence at lines[from] (after blank lines only): its text, and the index of
// its closing line.
func fencedBlock(lines []string, from int, fence string) (string, int, bool) {
	for from < len(lines) && strings.TrimSpace(lines[from]) == "" {
		from++
	}
	if from >= len(lines) || !strings.HasPrefix(lines[from], fence) {
		return "", from, false
	}
	for end := from + 1; end < len(lines); end++ {
		if strings.HasPrefix(lines[end], "```") {
			return strings.Join(lines[from+1:end], "\n") + "\n", end, true
		}
	}
	return "", from, false
}

// tourSession is one psql process, fed a block at a time on its stdin.
type tourSession struct {
	name  string
	stdin io.WriteCloser
	lines chan string // stdout and stderr, in the order psql wrote them
	seq   int
}

func startTourSession(t *testing.T, pt psqlTarget, db, name string) *tourSession {
	t.Helper()
	// ON_ERROR_STOP: an unexpected error ends psql, and with it the step.
	cmd := pt.command(context.Background(), []string{"PGDATABASE=" + db}, "-v", "ON_ERROR_STOP=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// One pipe for both, so that an error shows where it happened.
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &tourSession{name: name, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		for range s.lines {
		}
	})
	return s
}

// run feeds the step to psql and returns what psql printed for it, the
// SQLSTATE of the last error (00000 if none) and whether the block's last
// statement failed. An error where none is expected ends psql: the step
// fails with psql's output.
func (s *tourSession) run(t *testing.T, st tourStep) (out, sqlstate, lastFailed string) {
	t.Helper()
	s.seq++
	marker := fmt.Sprintf("tour-step-%d-done", s.seq)
	var in strings.Builder
	if st.expectError != "" {
		in.WriteString("\\set ON_ERROR_STOP 0\n\\set LAST_ERROR_SQLSTATE 00000\n")
	}
	in.WriteString(st.sql)
	fmt.Fprintf(&in, "\\echo %s :LAST_ERROR_SQLSTATE :ERROR\n\\set ON_ERROR_STOP 1\n", marker)
	if _, err := io.WriteString(s.stdin, in.String()); err != nil {
		t.Fatalf("README.md:%d: writing to psql (session %s): %v", st.line, s.name, err)
	}
	var got strings.Builder
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("README.md:%d: psql (session %s) ended during the step:\n%s\n%s", st.line, s.name, st.sql, got.String())
			}
			if rest, found := strings.CutPrefix(line, marker+" "); found {
				sqlstate, lastFailed, _ = strings.Cut(rest, " ")
				return got.String(), sqlstate, lastFailed
			}
			got.WriteString(line + "\n")
		case <-timeout:
			t.Fatalf("README.md:%d: session %s still running the step after 60s:\n%s\n%s", st.line, s.name, st.sql, got.String())
		}
	}
}

var (
	numbers = regexp.MustCompile(`[0-9]+`)
	blanks  = regexp.MustCompile(`[ \t]+`)
)

// normalizeOutput drops trailing blanks and blank lines at the ends; shape
// also reads every number as 0 and every run of blanks as one.
func normalizeOutput(s string, shape bool) string {
	if shape {
		s = blanks.ReplaceAllString(numbers.ReplaceAllString(s, "0"), " ")
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

// TestTour runs the README's Tour through a real mzproxy with psql, one
// psql per session, in a database of its own (where, as in the README's
// fresh ./mzdata, the tour's table is the first managed one). The proxy
// runs without the tick: an empty commit landing between a block's read
// and its write would fail the 40001 step's first COMMIT, which a person
// pasting the blocks risks only rarely and the README tells how to read.
func TestTour(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql is not installed (apt-get install -y postgresql-client)")
	}
	steps := readTour(t, filepath.Join("..", "README.md"))
	checkTourCoverage(t, steps)
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--tick-interval", "0")
	sessions := map[string]*tourSession{}
	for _, st := range steps {
		s := sessions[st.session]
		if s == nil {
			s = startTourSession(t, p.psqlTarget(), db, st.session)
			sessions[st.session] = s
		}
		out, sqlstate, lastFailed := s.run(t, st)
		if st.expectError != "" && (sqlstate != st.expectError || lastFailed != "true" || strings.Count(out, "ERROR:") != 1) {
			t.Fatalf("README.md:%d: session %s: want the block's last statement to fail with %s, got SQLSTATE %s (last failed: %s):\n%s\n%s",
				st.line, st.session, st.expectError, sqlstate, lastFailed, st.sql, out)
		}
		if st.output == "" {
			continue
		}
		shape := st.output == "shape"
		if shape {
			// The README's database is postgres.
			out = strings.ReplaceAll(out, db, "postgres")
		}
		if got, want := normalizeOutput(out, shape), normalizeOutput(st.want, shape); got != want {
			t.Errorf("README.md:%d: session %s: output (%s):\n%s\nwant:\n%s", st.line, st.session, st.output, out, st.want)
		}
	}
}

// checkTourCoverage makes sure the tour still has what the README
// promises: both sessions, an expected 40001, and the statements it
// explains.
func checkTourCoverage(t *testing.T, steps []tourStep) {
	t.Helper()
	var all strings.Builder
	sessions, codes := map[string]bool{}, map[string]bool{}
	for _, st := range steps {
		all.WriteString(st.sql)
		sessions[st.session] = true
		codes[st.expectError] = true
	}
	if !sessions["a"] || !sessions["b"] || !codes["40001"] {
		t.Fatalf("the tour has sessions %v and expected errors %v; it needs sessions a and b and a 40001", sessions, codes)
	}
	for _, want := range []string{"CREATE TABLE", "mz_now()", "AS OF :", "AS OF AT LEAST", "EXPLAIN TIMESTAMP", "BEGIN;", "RETAIN HISTORY"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("no tour step contains %q", want)
		}
	}
}
