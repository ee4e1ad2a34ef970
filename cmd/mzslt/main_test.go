package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mzproxy/mzproxy/proxy/embedded"
	"github.com/mzproxy/mzproxy/proxy/embedded/embeddedtest"
)

var url string // of the PostgreSQL TestMain started; "" when there is none

func TestMain(m *testing.M) {
	var srv *embedded.Server
	var dir string
	if _, err := embedded.FindBinDir(""); err == nil {
		dir, err = os.MkdirTemp("", "mzslt-cli-test-")
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			srv, err = embedded.Start(ctx, embedded.Config{
				DataDir: filepath.Join(dir, "data"), ChmodParents: true,
				Settings: map[string]string{"fsync": "off"},
			})
			cancel()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting PostgreSQL:", err)
			os.Exit(1)
		}
		url = srv.ConnString("", "")
	}
	code := m.Run()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		srv.Stop(ctx)
		cancel()
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
	if code == 0 {
		if err := embeddedtest.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func needServer(t *testing.T) {
	if url == "" {
		t.Skip("no PostgreSQL server binaries, so no server to run against")
	}
}

var summary = regexp.MustCompile(`^\d+ passed, \d+ failed, \d+ skipped$`)

func TestCLI(t *testing.T) {
	needServer(t)
	dir := t.TempDir()
	exp := filepath.Join(dir, "expected.txt")
	os.WriteFile(exp, []byte("slt/testdata/pass.slt 24 0 3\nslt/testdata/fail.slt 3 19 1\n"), 0o644)
	badExp := filepath.Join(dir, "bad-expected.txt")
	os.WriteFile(badExp, []byte("slt/testdata/fail.slt 21 0 0\n"), 0o644)

	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		last     string // the summary line, when code < 2
		contains string // in stdout+stderr
	}{
		{"pass", []string{"--url", url, "slt/testdata/pass.slt"}, 0, "24 passed, 0 failed, 3 skipped", "slt/testdata/pass.slt: 24 passed"},
		{"pass simple", []string{"--url", url, "--protocol", "simple", "slt/testdata/pass.slt"}, 0, "24 passed, 0 failed, 3 skipped", ""},
		{"flags after files", []string{"slt/testdata/pass.slt", "--url", url, "slt/testdata/fail.slt", "--verbose"}, 1, "27 passed, 19 failed, 4 skipped", "fail.slt:10: wrong result"},
		{"fail", []string{"--url", url, "slt/testdata/pass.slt", "slt/testdata/fail.slt"}, 1, "27 passed, 19 failed, 4 skipped", ""},
		{"verbose", []string{"--url", url, "--verbose", "slt/testdata/fail.slt"}, 1, "3 passed, 19 failed, 1 skipped", "slt/testdata/fail.slt:10: wrong result"},
		{"expect", []string{"--url", url, "--expect", exp, "slt/testdata/pass.slt", "slt/testdata/fail.slt"}, 0, "27 passed, 19 failed, 4 skipped", ""},
		{"expect mismatch", []string{"--url", url, "--expect", badExp, "slt/testdata/fail.slt"}, 1, "3 passed, 19 failed, 1 skipped", "unexpected counts"},
		{"engine", []string{"--url", url, "--engine", "sqlite", "slt/testdata/pass.slt"}, 1, "", ""},
		{"missing file", []string{"--url", url, "no/such.slt"}, 1, "0 passed, 0 failed, 0 skipped", "no such file"},
		{"no url", []string{"slt/testdata/pass.slt"}, 2, "", "usage"},
		{"bad protocol", []string{"--url", url, "--protocol", "binary", "slt/testdata/pass.slt"}, 2, "", "unknown protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no url" {
				t.Setenv("MZSLT_URL", "")
			}
			var out, errOut strings.Builder
			code := run(tc.args, &out, &errOut)
			all := out.String() + errOut.String()
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, all)
			}
			if tc.code < 2 {
				lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
				last := lines[len(lines)-1]
				if !summary.MatchString(last) || (tc.last != "" && last != tc.last) {
					t.Errorf("last line %q, want %q", last, tc.last)
				}
			}
			if !strings.Contains(all, tc.contains) {
				t.Errorf("output lacks %q:\n%s", tc.contains, all)
			}
		})
	}
}

func TestURLFromEnv(t *testing.T) {
	needServer(t)
	t.Setenv("MZSLT_URL", url)
	var out, errOut strings.Builder
	if code := run([]string{"--no-fresh-db", "slt/testdata/pass.slt"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// TestTimings checks --timings: a line per record run, with its line in
// the file, per connection opened and per wait for a file's database.
func TestTimings(t *testing.T) {
	needServer(t)
	path := filepath.Join(t.TempDir(), "timings.tsv")
	var out, errOut strings.Builder
	if code := run([]string{"--url", url, "--timings", path, "slt/testdata/pass.slt", "slt/testdata/pass.slt"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		file int // 0 or 1: which of the two runs of pass.slt
		what string
	}
	counts := map[key]int{}
	records := map[int]string{} // line -> what, of the first run
	file := -1
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 4 || f[0] != "slt/testdata/pass.slt" || !regexp.MustCompile(`^\d+$`).MatchString(f[3]) {
			t.Fatalf("bad line %q", l)
		}
		if f[2] == "database" {
			file++
		}
		if file < 0 {
			t.Fatalf("line %q before the file's database", l)
		}
		what := f[2]
		if f[1] != "0" {
			what = "record"
			if file == 0 {
				records[atoi(t, f[1])] = f[2]
			}
		}
		counts[key{file, what}]++
	}
	// pass.slt runs 24 records and skips 3; reset-server opens the main
	// connection again, and two simple records open one each.
	for _, f := range []int{0, 1} {
		if got := counts[key{f, "record"}]; got != 24 {
			t.Errorf("run %d: %d record lines, want 24", f, got)
		}
		if got := counts[key{f, "database"}]; got != 1 {
			t.Errorf("run %d: %d database lines, want 1", f, got)
		}
	}
	if got := counts[key{0, "connect"}]; got != 4 {
		t.Errorf("first run: %d connect lines, want 4 (main, other, admin, main after reset-server)", got)
	}
	if records[5] != "CREATE TABLE" || records[8] != "INSERT INTO" || records[124] != "SELECT 1" {
		t.Errorf("records 5, 8, 124: %q, %q, %q", records[5], records[8], records[124])
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
