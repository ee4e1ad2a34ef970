package slt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mzproxy/mzproxy/proxy/embedded"
	"github.com/mzproxy/mzproxy/proxy/embedded/embeddedtest"
)

// One PostgreSQL serves every test of the package that needs a server; it
// is started by the first such test and stopped after all of them.
var (
	pgOnce sync.Once
	pgSrv  *embedded.Server
	pgDir  string
	pgErr  error
	pgSkip string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pgSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := pgSrv.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "stopping PostgreSQL:", err)
			code = 1
		}
		cancel()
	}
	if pgDir != "" {
		os.RemoveAll(pgDir)
	}
	if code == 0 {
		if err := embeddedtest.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// serverURL returns a connection string for the package's PostgreSQL,
// starting it on first use. The test is skipped when the machine has no
// PostgreSQL server binaries.
func serverURL(t *testing.T) string {
	t.Helper()
	pgOnce.Do(func() {
		if _, err := embedded.FindBinDir(""); err != nil {
			pgSkip = err.Error()
			return
		}
		pgDir, pgErr = os.MkdirTemp("", "mzslt-test-")
		if pgErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pgSrv, pgErr = embedded.Start(ctx, embedded.Config{
			DataDir:      filepath.Join(pgDir, "data"),
			ChmodParents: true,
			Settings:     map[string]string{"fsync": "off"},
		})
	})
	if pgSkip != "" {
		t.Skipf("no PostgreSQL server binaries, so no server to run against: %s", pgSkip)
	}
	if pgErr != nil {
		t.Fatalf("starting PostgreSQL: %v", pgErr)
	}
	return pgSrv.ConnString("", "")
}
