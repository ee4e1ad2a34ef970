package integration

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mzproxy/mzproxy/cmd/mzslt/slt"
)

// corpusDir is the sqllogictest corpus (a directory of select*.test and
// evidence/*.test, such as SQLite's): $MZPROXY_SLT_DIR, else the team's
// shared corpus beside the repository (../shared/slt/sqlite), where CI
// lays it. Without one the conformance tests skip, except under CI or
// when MZPROXY_SLT_DIR names a directory that is not there.
func corpusDir(t *testing.T) string {
	dir := os.Getenv("MZPROXY_SLT_DIR")
	chosen := dir != ""
	if !chosen {
		dir = filepath.Join(moduleRoot(), "..", "shared", "slt", "sqlite")
	}
	if _, err := os.Stat(dir); err != nil {
		if chosen || os.Getenv("CI") != "" {
			t.Fatalf("conformance corpus not found at %s: set MZPROXY_SLT_DIR to a sqllogictest tree (e.g. SQLite's)", dir)
		}
		t.Skip("conformance corpus not found: set MZPROXY_SLT_DIR to a sqllogictest tree (e.g. SQLite's); skipping")
	}
	return dir
}

func corpusFiles(t *testing.T, dir string) []string {
	files, err := filepath.Glob(filepath.Join(dir, "select*.test"))
	if err != nil {
		t.Fatal(err)
	}
	evidence, err := filepath.Glob(filepath.Join(dir, "evidence", "*.test"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, evidence...)
	sort.Strings(files)
	if len(files) < 5 {
		t.Fatalf("only %d corpus files in %s", len(files), dir)
	}
	return files
}

// TestConformance is the conformance net: the sqllogictest corpus, run
// directly against PostgreSQL and through mzproxy over both protocols,
// must give the same outcome for every record, and the per-file counts
// must stay those committed in cmd/mzslt/testdata/sqlite-expected.txt (so a
// change on either side shows up).
func TestConformance(t *testing.T) {
	dir := corpusDir(t)
	files := corpusFiles(t, dir)
	f, err := os.Open(filepath.Join(moduleRoot(), "cmd", "mzslt", "testdata", "sqlite-expected.txt"))
	if err != nil {
		t.Fatal(err)
	}
	expected, err := slt.ReadExpected(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t)
	directRuns := map[slt.Protocol]*slt.Report{}
	for _, protocol := range []slt.Protocol{slt.Simple, slt.Extended} {
		t.Run(string(protocol), func(t *testing.T) {
			// The corpus runs twice per protocol (direct, then through
			// mzproxy): about 15 s on an idle machine, but over 2 minutes on
			// a loaded one, where testContext's bound cut it short.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			run := func(url string) (*slt.Report, time.Duration) {
				start := time.Now()
				rep, err := slt.Run(ctx, slt.Options{URL: url, Protocol: protocol, FreshDB: true, Timeout: time.Minute}, files...)
				if err != nil {
					t.Fatal(err)
				}
				for _, fr := range rep.Files {
					if fr.Err != nil {
						t.Errorf("%s: %v", fr.File, fr.Err)
					}
				}
				return rep, time.Since(start)
			}
			direct, directTime := run(directURL("postgres", "postgres"))
			directRuns[protocol] = direct
			proxied, proxyTime := run(p.URL("postgres", "postgres"))
			for _, line := range slt.Diff(direct, proxied) {
				t.Errorf("direct vs mzproxy: %s", line)
			}
			for name, rep := range map[string]*slt.Report{"direct": direct, "mzproxy": proxied} {
				if diffs := expected.Compare(rep); len(diffs) > 0 {
					t.Errorf("%s: counts differ from sqlite-expected.txt:\n%s", name, strings.Join(diffs, "\n"))
				}
			}
			t.Logf("%s protocol: direct %s (%s), mzproxy %s (%s): %.2fx",
				protocol, direct.Counts, directTime.Round(time.Millisecond),
				proxied.Counts, proxyTime.Round(time.Millisecond),
				proxyTime.Seconds()/directTime.Seconds())
		})
	}
	// The two protocols agree record by record, not only in counts.
	if len(directRuns) == 2 {
		for _, line := range slt.Diff(directRuns[slt.Simple], directRuns[slt.Extended]) {
			t.Errorf("simple vs extended protocol, directly: %s", line)
		}
	}
}

// TestOwnSLT runs mzproxy's own sqllogictest files (testdata/slt) through
// the proxy, and directly against PostgreSQL: they describe PostgreSQL's
// behaviour that mzproxy must keep, so both must pass.
func TestOwnSLT(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "slt", "*.slt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no SLT files in testdata/slt")
	}
	p := startProxy(t)
	for _, target := range []struct{ name, url string }{
		{"mzproxy", p.URL("postgres", "postgres")},
		{"direct", directURL("postgres", "postgres")},
	} {
		for _, protocol := range []slt.Protocol{slt.Simple, slt.Extended} {
			t.Run(target.name+"/"+string(protocol), func(t *testing.T) {
				var failures strings.Builder
				rep, err := slt.Run(testContext(t), slt.Options{
					URL: target.url, Protocol: protocol, FreshDB: true, Verbose: &failures, Timeout: time.Minute,
				}, files...)
				if err != nil {
					t.Fatal(err)
				}
				if !rep.OK() {
					t.Errorf("%s\n%s", rep.Counts, failures.String())
				}
				if rep.Passed == 0 {
					t.Error("no record passed")
				}
			})
		}
	}
}

// TestConformanceHistoryReads is the proof that the history rewrite changes
// no answer: with --history-reads every read of a managed table (every
// table the corpus creates is managed) is rewritten into a read of its
// history table at the oracle's timestamp, and the corpus must still give
// PostgreSQL's outcome for every record, over both protocols.
func TestConformanceHistoryReads(t *testing.T) {
	dir := corpusDir(t)
	files := corpusFiles(t, dir)
	p := startProxy(t, "--history-reads")
	for _, protocol := range []slt.Protocol{slt.Simple, slt.Extended} {
		t.Run(string(protocol), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			opts := slt.Options{Protocol: protocol, FreshDB: true, Timeout: time.Minute}
			opts.URL = directURL("postgres", "postgres")
			direct, err := slt.Run(ctx, opts, files...)
			if err != nil {
				t.Fatal(err)
			}
			opts.URL = p.URL("postgres", "postgres")
			start := time.Now()
			history, err := slt.Run(ctx, opts, files...)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range slt.Diff(direct, history) {
				t.Errorf("direct vs mzproxy --history-reads: %s", line)
			}
			t.Logf("history reads, %s protocol: %s in %s", protocol, history.Counts, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestHistoryReadsReadHistory makes sure --history-reads really reads the
// history tables: a version removed from history behind the proxy's back
// disappears from reads through it, while the present table still has it.
func TestHistoryReadsReadHistory(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--history-reads")
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE hr (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO hr VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	direct := connectTo(t, ctx, directURL("postgres", db))
	var history string
	if err := direct.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE name = 'hr'").Scan(&history); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(ctx, "DELETE FROM "+history+" WHERE x = 2"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM hr", simple(conn)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("read through --history-reads saw %d rows, want 1 (the history's)", n)
	}
}

// TestOwnSLTMz runs mzproxy's SLT files for Materialize's features (AS OF,
// EXPLAIN TIMESTAMP, isolation), which PostgreSQL itself does not have:
// through the proxy only, over the simple protocol.
func TestOwnSLTMz(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "slt-mz", "*.slt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no SLT files in testdata/slt-mz (%v)", err)
	}
	p := startProxy(t)
	var failures strings.Builder
	rep, err := slt.Run(testContext(t), slt.Options{
		URL: p.URL("postgres", "postgres"), Protocol: slt.Simple, FreshDB: true, Verbose: &failures, Timeout: time.Minute,
	}, files...)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Passed == 0 {
		t.Errorf("%s\n%s", rep.Counts, failures.String())
	}
}
