package proxy

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/proxy/embedded"
	"github.com/mzproxy/mzproxy/proxy/embedded/embeddedtest"
)

// server is the PostgreSQL the package's tests share.
var server *embedded.Server

func TestMain(m *testing.M) { os.Exit(embeddedtest.Main(m, "proxy", &server)) }

// clientBuffer collects what a session writes to its client.
type clientBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *clientBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

// take returns what was written since the last take.
func (c *clientBuffer) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.buf.String()
	c.buf.Reset()
	return s
}

// openSession opens a session of a new proxy against the test server,
// without a frontend: the test calls Handle as the client's connection
// would.
func openSession(t testing.TB, ctx context.Context, cfg Config) (*Session, *clientBuffer) {
	t.Helper()
	backend, err := pgconn.ParseConfig(server.ConnString("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend = backend
	log := logrus.New()
	log.SetOutput(&bytes.Buffer{})
	cfg.Logger = logrus.NewEntry(log)
	client := &clientBuffer{}
	px := New(cfg)
	// Retires the proxy's incarnation and stops its lease loop.
	t.Cleanup(func() { _ = px.Close(context.Background()) })
	s, err := px.Connect(ctx, wire.Startup{User: "postgres", Database: "postgres", Params: map[string]string{}}, nil, wire.NewWriter(client, 4096))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, client
}

// query handles a simple Query as the frontend does, and returns what the
// client was sent, with an error the frontend would send rendered as
// "ERROR <code> <message>".
func query(t testing.TB, ctx context.Context, s *Session, client *clientBuffer, sql string) string {
	t.Helper()
	msg := &pgproto3.Query{String: sql}
	frame, err := msg.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Handle(ctx, msg, frame); err != nil {
		return client.take() + "ERROR " + string(pgerr.Of(err)) + " " + err.Error()
	}
	return client.take()
}

// TestStatementGoroutines: a statement interrupted by its deadline, by a
// cancel, or by its client going away leaves no goroutine behind once it
// has returned (goleak), its answer says why, and a cancel between
// statements changes nothing.
func TestStatementGoroutines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, client := openSession(t, ctx, Config{StatementTimeout: 300 * time.Millisecond})
	before := goleak.IgnoreCurrent()
	settled := func(what string) {
		t.Helper()
		// Nothing of the statement may still run: not a timer, not the
		// backend cancel, not a watcher. (A goroutine that has done its
		// work is given a moment to exit: on a loaded machine, seconds.)
		if err := embeddedtest.FindLeaks(before); err != nil {
			t.Fatalf("%s: goroutines outlive the statement: %v", what, err)
		}
	}

	// The sleep outlasts every bound below by far: a statement that was
	// not interrupted cannot pass for one that was.
	const sleepy = "SELECT pg_sleep(60) /*goroutines-sleepy*/"
	start := time.Now()
	out := query(t, ctx, s, client, sleepy)
	if !strings.Contains(out, "canceling statement due to statement timeout") || !strings.Contains(out, "C57014") {
		t.Fatalf("past the deadline, the client got %q", out)
	}
	// Generous: a loaded machine is slow to send the cancel and to read
	// its answer.
	if d := time.Since(start); d < 300*time.Millisecond || d > 20*time.Second {
		t.Fatalf("timeout after %v, want about 300ms", d)
	}
	settled("timeout")

	if out := query(t, ctx, s, client, "SET statement_timeout = 0"); !strings.Contains(out, "SET") {
		t.Fatalf("SET: %q", out)
	}
	wait := whenRunning(t, ctx, "goroutines-sleepy", s.Cancel)
	out = query(t, ctx, s, client, sleepy)
	wait()
	if !strings.Contains(out, "canceling statement due to user request") {
		t.Fatalf("after a cancel, the client got %q", out)
	}
	settled("cancel")

	// Between statements a cancel has nothing to stop, now or later.
	s.Cancel()
	if out := query(t, ctx, s, client, "SELECT pg_sleep(0.5)"); strings.Contains(out, "57014") {
		t.Fatalf("a cancel between statements canceled the next one: %q", out)
	}
	settled("idle cancel")

	// The client goes away mid-statement: its connection's context ends.
	cctx, gone := context.WithCancel(ctx)
	var goneAt time.Time
	wait = whenRunning(t, ctx, "goroutines-sleepy", func() { goneAt = time.Now(); gone() })
	query(t, cctx, s, client, sleepy)
	wait()
	if d := time.Since(goneAt); d > 20*time.Second {
		t.Fatalf("a statement whose client went away ran %v after", d)
	}
	settled("client gone")
}
