package slt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

func run(t *testing.T, opts Options, files ...string) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if opts.URL == "" {
		opts.URL = serverURL(t)
	}
	opts.FreshDB = true
	rep, err := Run(ctx, opts, files...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Files {
		if f.Err != nil {
			t.Fatalf("%s: %v", f.File, f.Err)
		}
	}
	return rep
}

func outcomes(fr *FileReport) string {
	var b strings.Builder
	for _, r := range fr.Results {
		fmt.Fprintf(&b, "%d %s %s", r.Line, r.Kind, r.Outcome)
		if r.Message != "" {
			fmt.Fprintf(&b, ": %s", r.Message)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%s\n", fr.Counts)
	return b.String()
}

// TestOutcomes is the golden record of what the runner decides for crafted
// files, in both protocols: pass.slt must pass throughout, fail.slt must
// fail everywhere after its setup.
func TestOutcomes(t *testing.T) {
	datadriven.RunTest(t, "testdata/outcomes", func(t *testing.T, d *datadriven.TestData) string {
		var file, proto string
		d.ScanArgs(t, "file", &file)
		path := filepath.Join("testdata", file)
		switch d.Cmd {
		case "run":
			d.ScanArgs(t, "protocol", &proto)
			rep := run(t, Options{Protocol: Protocol(proto)}, path)
			return outcomes(rep.Files[0])
		case "rewrite":
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(t.TempDir(), file)
			if err := os.WriteFile(tmp, src, 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, Options{Rewrite: true}, tmp)
			// What was rewritten must now pass.
			if rep := run(t, Options{}, tmp); rep.Failed != 0 {
				t.Errorf("after rewrite:\n%s", outcomes(rep.Files[0]))
			}
			out, err := os.ReadFile(tmp)
			if err != nil {
				t.Fatal(err)
			}
			return string(out)
		}
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	})
}

// TestProvenAbleToFail checks, beyond the golden file, that every record
// of fail.slt after its two setup statements fails, except the first use of
// a label (which only sets it), in both protocols.
func TestProvenAbleToFail(t *testing.T) {
	for _, p := range []Protocol{Extended, Simple} {
		t.Run(string(p), func(t *testing.T) {
			rep := run(t, Options{Protocol: p}, "testdata/fail.slt", "testdata/pass.slt")
			fail, pass := rep.Files[0], rep.Files[1]
			if pass.Failed != 0 || pass.Passed == 0 {
				t.Errorf("pass.slt: %s\n%s", pass.Counts, outcomes(pass))
			}
			labelSet := false
			for i, r := range fail.Results {
				if r.Outcome == Skipped {
					continue // the record that gives a label its value
				}
				want := Failed
				if i < 2 {
					want = Passed
				} else if r.Kind == KindQuery && !labelSet && r.Outcome == Passed {
					labelSet = true // "query I rowsort lab", first of two
					continue
				}
				if r.Outcome != want {
					t.Errorf("fail.slt:%d: %s, want %s", r.Line, r.Outcome, want)
				}
				if want == Failed && r.Message == "" {
					t.Errorf("fail.slt:%d: failed without a message", r.Line)
				}
			}
			if fail.Failed != 19 {
				t.Errorf("fail.slt: %s, want 19 failed", fail.Counts)
			}
			if rep.OK() {
				t.Error("Report.OK with failures")
			}
		})
	}
}
