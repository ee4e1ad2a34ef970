// Package integration runs mzproxy end to end: a real PostgreSQL started by
// the tests (the embedded launcher), real mzproxy processes built from this
// tree, and real client drivers and tools.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/mzproxy/mzproxy/proxy/embedded"
	"github.com/mzproxy/mzproxy/proxy/embedded/embeddedtest"
)

// env is shared by every test of the package: one PostgreSQL, one mzproxy
// binary.
var env struct {
	dir    string
	pg     *embedded.Server
	binary string // the mzproxy binary under test
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mzproxy-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	env.dir = dir

	env.binary = filepath.Join(dir, "mzproxy")
	args := []string{"build", "-o", env.binary}
	if os.Getenv("MZPROXY_RACE") != "" {
		// The proxy under test with the race detector: its log (printed
		// when a test fails) shows any report, and the process exits 66.
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/mzproxy")...)
	build.Dir = moduleRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building mzproxy: %v\n%s", err, out)
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env.pg, err = embedded.Start(ctx, embedded.Config{
		DataDir:      filepath.Join(dir, "pg"),
		ChmodParents: true,
		// Throwaway cluster: durability buys nothing here.
		Settings: map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting PostgreSQL:", err)
		return 1
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = env.pg.Stop(sctx)
	}()
	// The embedded PostgreSQL's own goroutines run until the deferred Stop.
	before := goleak.IgnoreCurrent()
	code := m.Run()
	if code == 0 {
		// Every goroutine a test started (log readers, waiters, drivers'
		// helpers) must have ended with it.
		if err := embeddedtest.FindLeaks(before); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind by the tests:", err)
			return 1
		}
	}
	return code
}

func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// directURL is a URL for connecting to the test PostgreSQL without the proxy.
func directURL(user, database string) string {
	u := url.URL{Scheme: "postgres", User: url.User(user), Path: "/" + database}
	q := url.Values{}
	q.Set("host", env.pg.SocketDir())
	q.Set("port", fmt.Sprint(env.pg.Port()))
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// proxyProc is one running mzproxy process.
type proxyProc struct {
	cmd  *exec.Cmd
	addr string // host:port clients connect to
	log  *syncBuffer
	done chan struct{}
	err  error // Wait's result, after done
}

// listeningLine is the first log line that says where mzproxy listens:
// "mzproxy listening", logged as soon as it accepts clients (its backend
// may not be reachable yet); "mzproxy ready", which follows when it is,
// says it again.
var listeningLine = regexp.MustCompile(`mzproxy (?:listening|ready).*listen="?([0-9.]+:[0-9]+)`)

// startProxy starts mzproxy on a free loopback port against the test
// PostgreSQL. It is stopped when the test ends.
func startProxy(t testing.TB, args ...string) *proxyProc {
	t.Helper()
	all := append([]string{"--listen", "127.0.0.1:0", "--backend", directURL("postgres", "postgres"), "--log-level", "debug"}, args...)
	// No fixed-port side servers (metrics): tests run proxies side by
	// side. An environment variable, so a binary without the setting
	// ignores it; a test's own flag wins.
	return launchProxy(t, append(os.Environ(), "MZPROXY_METRICS_LISTEN="), all)
}

// launchProxy runs mzproxy with exactly args in environment environ (nil:
// this process's) and waits until it is ready. It is stopped when the test
// ends.
func launchProxy(t testing.TB, environ []string, args []string) *proxyProc {
	t.Helper()
	p := &proxyProc{log: &syncBuffer{}, done: make(chan struct{})}
	// MZPROXY_TEST_FLAGS (space-separated) is added to every proxy's
	// flags: the whole suite can run with, e.g., --event-loop on.
	args = append(args[:len(args):len(args)], strings.Fields(os.Getenv("MZPROXY_TEST_FLAGS"))...)
	p.cmd = exec.Command(env.binary, args...)
	p.cmd.Env = environ
	tieToTest(p.cmd)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.log.Write([]byte(line + "\n"))
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if strings.Contains(p.log.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector reported a data race in mzproxy (MZPROXY_RACE)")
		}
		if t.Failed() {
			t.Logf("mzproxy log:\n%s", p.log.String())
		}
	})
	select {
	case p.addr = <-addr:
	case <-p.done:
		t.Fatalf("mzproxy exited before it was ready: %v\n%s", p.err, p.log.String())
	case <-time.After(60 * time.Second): // a loaded machine's process start, with -race too
		t.Fatalf("mzproxy not ready after 60s:\n%s", p.log.String())
	}
	return p
}

// URL is a connection URL for a client of this proxy.
func (p *proxyProc) URL(user, database string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", url.PathEscape(user), p.addr, url.PathEscape(database))
}

// host and port of the proxy, for tools that take them separately.
func (p *proxyProc) hostPort() (string, string) {
	h, port, _ := net.SplitHostPort(p.addr)
	return h, port
}

// signal sends sig to the proxy process.
func (p *proxyProc) signal(sig os.Signal) { _ = p.cmd.Process.Signal(sig) }

// wait waits for the process to exit, up to d.
func (p *proxyProc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

func (p *proxyProc) stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	// Past the proxy's own drain (--shutdown-timeout, 30 s by default),
	// which a session still ending on a loaded machine can use.
	if !p.wait(40 * time.Second) {
		t.Errorf("mzproxy did not stop within 40s of SIGTERM; killing it")
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// connect opens a pgx connection through the proxy.
func (p *proxyProc) connect(t testing.TB, ctx context.Context) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
	if err != nil {
		t.Fatalf("connecting through mzproxy: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// connectDirect opens a pgx connection to PostgreSQL itself.
func connectDirect(t testing.TB, ctx context.Context) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, directURL("postgres", "postgres"))
	if err != nil {
		t.Fatalf("connecting to PostgreSQL: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// testContext is a context bounded well inside go test's own timeout (30
// minutes for the package in CI). 5 minutes, not 2: on a loaded machine
// (load 15-20, the suite's parallel tests beside it) a test's private
// cluster, its restarts and its clients take much of 2 minutes, and
// TestFault18RestartExtendedPaths's direct connection after the crash
// failed once on the context (docs/testing.md).
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
