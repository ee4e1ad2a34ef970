package embedded

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	goleak.VerifyTestMain(m)
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

// testConfig is a Config for a throwaway cluster in a fresh temp dir.
func testConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		DataDir:      filepath.Join(t.TempDir(), "data"),
		ChmodParents: true,
		Settings:     map[string]string{"fsync": "off"},
		Logger:       testLogger(),
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
