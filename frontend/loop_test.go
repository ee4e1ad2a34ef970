//go:build linux

package frontend

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
)

// listeningHandler opens listeningSessions.
type listeningHandler struct{ scriptedHandler }

func (h *listeningHandler) Connect(ctx context.Context, start wire.Startup, relay wire.AuthRelay, w *wire.Writer) (Session, error) {
	return &listeningSession{scriptedSession: scriptedSession{w: w, h: &h.scriptedHandler, start: start}}, nil
}

// listeningSession is a LoopSession that, after its first Query, keeps
// writing notices to its client from a goroutine of its own, as a session
// relaying a LISTEN's notifications does; the loop never gets it.
type listeningSession struct {
	scriptedSession
	mu      sync.Mutex // the client's writer, as the proxy's clientMu
	started bool
	stop    chan struct{}
	done    chan struct{}
}

func (s *listeningSession) Handle(ctx context.Context, msg pgproto3.FrontendMessage, frame []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.notify()
	}
	_ = s.w.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")})
	_ = s.w.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	return s.w.Flush()
}

func (s *listeningSession) notify() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(100 * time.Microsecond):
		}
		s.mu.Lock()
		_ = s.w.Send(&pgproto3.NoticeResponse{Severity: "NOTICE", Code: "00000", Message: "n"})
		_ = s.w.Flush()
		s.mu.Unlock()
	}
}

func (s *listeningSession) Close() error {
	if s.started {
		close(s.stop)
		<-s.done
	}
	return nil
}

func (s *listeningSession) Admit([]byte) ([]byte, bool)        { return nil, false }
func (s *listeningSession) Answer(byte, []byte) evloop.Verdict { return evloop.RelayThenBack }
func (s *listeningSession) Unread([]byte)                      {}
func (s *listeningSession) Abandon()                           {}
func (s *listeningSession) LoopBackend() *evloop.Conn          { return nil }
func (s *listeningSession) LoopLeft()                          {}

// newTestLoop is an event loop of the test's own, closed when it ends.
func newTestLoop(t *testing.T) *evloop.Loop {
	t.Helper()
	loop, err := evloop.New(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loop.Close() })
	return loop
}

// TestLoopLeavesAListeningSessionsWriterAlone: between messages the
// connection used to look at its writer's buffer before asking the
// session whether the loop may have it, while the session's relay of
// notifications wrote to that buffer: a data race (go test -race).
func TestLoopLeavesAListeningSessionsWriterAlone(t *testing.T) {
	loop := newTestLoop(t)
	ts := newTestServer(t, Config{EventLoop: loop, Handler: &listeningHandler{}})
	c := dialRaw(t, ts.addr)
	c.startup(nil)
	for range 100 {
		c.send(&pgproto3.Query{String: "SELECT 1"})
		for {
			if _, ok := c.receive().(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
	}
	c.send(&pgproto3.Terminate{})
}

// refusingHandler opens refusingSessions.
type refusingHandler struct {
	scriptedHandler
	t        *testing.T
	sessions []*refusingSession
}

func (h *refusingHandler) Connect(ctx context.Context, start wire.Startup, relay wire.AuthRelay, w *wire.Writer) (Session, error) {
	a, b, err := unixPair()
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	s := &refusingSession{scriptedSession: scriptedSession{w: w, h: &h.scriptedHandler, start: start}, backend: evloop.Wrap(a)}
	h.mu.Lock()
	h.sessions = append(h.sessions, s)
	h.mu.Unlock()
	return s, nil
}

// refusingSession lends the loop a backend socket (whose far end never
// speaks) and admits nothing: each of its turns in the loop reads the
// client's Query and gives it back, as a client of read-only transactions
// has it at each BEGIN.
type refusingSession struct {
	scriptedSession
	backend *evloop.Conn
	turns   atomic.Int32
}

func (s *refusingSession) Admit([]byte) ([]byte, bool)        { s.turns.Add(1); return nil, false }
func (s *refusingSession) Answer(byte, []byte) evloop.Verdict { return evloop.RelayThenBack }
func (s *refusingSession) Unread([]byte)                      {}
func (s *refusingSession) Abandon()                           {}
func (s *refusingSession) LoopBackend() *evloop.Conn          { return s.backend }
func (s *refusingSession) LoopLeft()                          {}

func unixPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		conns[i], err = net.FileConn(f)
		_ = f.Close()
		if err != nil {
			return nil, nil, err
		}
	}
	return conns[0], conns[1], nil
}

// TestLoopBacksOffASessionItCannotServe: a session whose every statement
// goes back from the loop joins it rarely: a turn costs some thirty
// system calls (loop.go, maxLoopBackoff). Over 1,000 statements the
// backoff, doubling up to 512 messages, allows 10 turns; at its former
// bound (64) there were 22.
func TestLoopBacksOffASessionItCannotServe(t *testing.T) {
	loop := newTestLoop(t)
	h := &refusingHandler{t: t}
	ts := newTestServer(t, Config{EventLoop: loop, Handler: h})
	c := dialRaw(t, ts.addr)
	c.startup(nil)
	for range 1000 {
		c.send(&pgproto3.Query{String: "SELECT 1"})
		for {
			if _, ok := c.receive().(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
	}
	c.send(&pgproto3.Terminate{})
	h.mu.Lock()
	turns := h.sessions[0].turns.Load()
	h.mu.Unlock()
	if turns < 1 || turns > 12 {
		t.Fatalf("the loop took the session %d times in 1,000 statements, want 1 to 12", turns)
	}
	t.Logf("%d turns in the loop", turns)
}

// crashingHandler opens crashingSessions.
type crashingHandler struct {
	scriptedHandler
	t       *testing.T
	backend chan net.Conn // the far end of each session's backend socket
}

func (h *crashingHandler) Connect(ctx context.Context, start wire.Startup, relay wire.AuthRelay, w *wire.Writer) (Session, error) {
	a, b, err := unixPair()
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	h.backend <- b
	return &crashingSession{scriptedSession: scriptedSession{w: w, h: &h.scriptedHandler, start: start}, backend: evloop.Wrap(a), far: b}, nil
}

// crashingSession's backend crashes while the loop follows its first
// answer frame: from inside Answer, after the loop read that frame, the
// far end writes a crashed PostgreSQL backend's last notice and closes,
// so that the loop's next wait sees the notice and the end as one edge.
type crashingSession struct {
	scriptedSession
	backend *evloop.Conn
	far     net.Conn
	once    sync.Once
}

func (s *crashingSession) Admit([]byte) ([]byte, bool) { return nil, true }
func (s *crashingSession) Answer(byte, []byte) evloop.Verdict {
	s.once.Do(func() {
		_ = s.far.SetWriteDeadline(time.Now().Add(5 * time.Second))
		var b []byte
		b, _ = (&pgproto3.NoticeResponse{Severity: "WARNING", Code: "57P01",
			Message: "terminating connection due to immediate shutdown command"}).Encode(b)
		_, _ = s.far.Write(b)
		_ = s.far.Close()
	})
	return evloop.Relay
}
func (s *crashingSession) Unread([]byte)             {}
func (s *crashingSession) Abandon()                  {}
func (s *crashingSession) LoopBackend() *evloop.Conn { return s.backend }
func (s *crashingSession) LoopLeft()                 {}

// TestLoopEndsAStatementWhoseBackendCrashed: a client's read forwarded by
// the loop whose backend crashes mid-answer (a notice, then the end of
// the connection, as PostgreSQL's immediate shutdown or crash restart
// has it) gets the notice and then 08006 at once, and its connection
// ends. The loop once waited for that backend forever (session 24:
// evloop's TestBackendEndAfterItsLastFrame), and the client with it.
func TestLoopEndsAStatementWhoseBackendCrashed(t *testing.T) {
	loop := newTestLoop(t)
	h := &crashingHandler{t: t, backend: make(chan net.Conn, 1)}
	ts := newTestServer(t, Config{EventLoop: loop, Handler: h})
	c := dialRaw(t, ts.addr)
	c.startup(nil)
	far := <-h.backend
	query := &pgproto3.Query{String: "SELECT sum(v) FROM acct"}
	c.send(query)
	batch, _ := query.Encode(nil)
	_ = far.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(far, make([]byte, len(batch))); err != nil {
		t.Fatalf("the backend did not get the read: %v", err)
	}
	first, _ := (&pgproto3.NoticeResponse{Severity: "NOTICE", Code: "00000", Message: "running"}).Encode(nil)
	if _, err := far.Write(first); err != nil {
		t.Fatal(err)
	}
	notices := 0
	for notices < 2 {
		switch m := c.receive().(type) {
		case *pgproto3.NoticeResponse:
			notices++
		default:
			t.Fatalf("before the backend's end: %#v, want its two notices", m)
		}
	}
	c.expectError(pgerr.ConnectionFailure)
	c.expectClosed()
}

// The test sessions are loop sessions: a session that is not would never
// be offered the loop, and the tests would pass for nothing.
var (
	_ LoopSession = (*listeningSession)(nil)
	_ LoopSession = (*refusingSession)(nil)
	_ LoopSession = (*crashingSession)(nil)
)
