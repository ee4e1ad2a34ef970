// Package embeddedtest runs a test package against a throwaway embedded
// PostgreSQL, for packages whose tests need a real server.
package embeddedtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mzproxy/mzproxy/proxy/embedded"
)

// Main starts a PostgreSQL (fsync off: nothing here must survive) in a
// temporary directory, stores it in *server, runs the tests, stops it and,
// when they passed, checks that no goroutine was left behind. It returns
// the exit code for os.Exit. name says whose tests need the server.
func Main(m *testing.M, name string, server **embedded.Server) int {
	dir, err := os.MkdirTemp("", "mz"+name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// initdb and the start take seconds alone, and a minute or more when
	// go test ./... starts every package's server at once on a loaded
	// machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	*server, err = embedded.Start(ctx, embedded.Config{
		DataDir:      dir,
		ChmodParents: true,
		Settings:     map[string]string{"fsync": "off", "synchronous_commit": "off"},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests need a PostgreSQL: %v\n", name, err)
		return 1
	}
	code := m.Run()
	if err := (*server).Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if code == 0 {
		// An event loop's goroutine lives as long as the process, as the
		// proxy's does (proxy's tests drive sessions through one).
		if err := FindLeaks(goleak.IgnoreAnyFunction("github.com/mzproxy/mzproxy/frontend/evloop.(*Loop).run")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// FindLeaks is goleak.Find given up to ten seconds: goleak waits less than
// half a second for a goroutine that is ending, and on a loaded machine
// one that has done its work (a test's helper that has sent its answer, a
// connection's reader) can wait longer than that for a CPU to exit on. A
// goroutine left running, blocked or looping, is still found.
func FindLeaks(opts ...goleak.Option) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
