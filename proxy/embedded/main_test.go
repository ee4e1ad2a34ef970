package embedded

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"
)

// helperEnv makes the test binary a stand-in for mzproxy: it starts a
// server in the named data dir, prints "pid <postmaster pid>" and waits
// until killed. TestKillParent kill -9s it. The helper also exits when its
// stdin closes, so it cannot outlive a test binary that dies.
const helperEnv = "MZPROXY_EMBEDDED_TEST_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		runHelper(dir)
		return
	}
	code := m.Run()
	if template.dir != "" {
		_ = os.RemoveAll(template.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runHelper(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{DataDir: dir, ChmodParents: true, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("pid", s.PID())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(2)
}

// testConfig is a Config for a throwaway data dir, empty so far.
func testConfig(t *testing.T) Config {
	t.Helper()
	return testConfigAt(filepath.Join(t.TempDir(), "data"))
}

func testConfigAt(dataDir string) Config {
	return Config{
		DataDir:      dataDir,
		ChmodParents: true,
		Settings:     map[string]string{"fsync": "off"},
		Logger:       testLogger(),
	}
}

// clusterConfig is testConfig with a cluster already in place, copied from
// one made once per test binary: initdb is the slowest part of a start, and
// only a few tests are about it.
func clusterConfig(t *testing.T) Config {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "data")
	copyTemplate(t, dataDir)
	return testConfigAt(dataDir)
}

var template struct {
	once sync.Once
	dir  string
	err  error
}

// copyTemplate puts a copy of the template cluster at dataDir/pgdata.
func copyTemplate(t *testing.T, dataDir string) {
	t.Helper()
	template.once.Do(func() {
		template.dir, template.err = os.MkdirTemp("", "mzproxy-embedded-template-")
		if template.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var s *Server
		s, template.err = Start(ctx, testConfigAt(template.dir))
		if template.err == nil {
			template.err = s.Stop(ctx)
		}
	})
	if template.err != nil {
		t.Fatalf("making the template cluster: %v", template.err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// cp -a keeps the owner (the postgres user when root) and modes.
	if out, err := exec.Command("cp", "-a", filepath.Join(template.dir, "pgdata"), filepath.Join(dataDir, "pgdata")).CombinedOutput(); err != nil {
		t.Fatalf("copying the template cluster: %v: %s", err, out)
	}
}

func testLogger() *logrus.Entry {
	l := logrus.New()
	l.Out = io.Discard
	if testing.Verbose() {
		l.Out = os.Stderr
	}
	return logrus.NewEntry(l)
}

// startServer starts a server and stops it when the test ends.
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { stopServer(t, s) })
	return s
}

func stopServer(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Errorf("Done not closed after Stop")
	}
}

// waitNoPostgresIn waits until no postgres process works in pgdata, so that
// the temp dir can be removed and nothing outlives the test.
func waitNoPostgresIn(t *testing.T, pgdata string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		pids := postgresIn(pgdata)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres processes %v still run in %s after %v", pids, pgdata, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
