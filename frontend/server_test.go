package frontend

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
)

func TestMain(m *testing.M) {
	// The tests close their event loops (Loop.Close): none is left running.
	goleak.VerifyTestMain(m)
}

// scriptedHandler opens scriptedSessions: a stand-in for the proxy that
// answers every Query with CommandComplete, so the frontend's own protocol
// handling can be tested alone. It is never a stand-in for PostgreSQL.
type scriptedHandler struct {
	mu       sync.Mutex
	sessions []*scriptedSession
	block    chan struct{} // when set, a Query "block" waits on it
}

func (h *scriptedHandler) Connect(ctx context.Context, start wire.Startup, relay wire.AuthRelay, w *wire.Writer) (Session, error) {
	if start.Database == "refuse" {
		return nil, pgerr.New(pgerr.InvalidCatalogName, "database %q does not exist", start.Database)
	}
	s := &scriptedSession{w: w, h: h, start: start}
	h.mu.Lock()
	h.sessions = append(h.sessions, s)
	h.mu.Unlock()
	return s, nil
}

type scriptedSession struct {
	h        *scriptedHandler
	w        *wire.Writer
	start    wire.Startup
	canceled atomic.Int32
	closed   atomic.Bool
}

func (s *scriptedSession) ParameterStatus() map[string]string {
	return map[string]string{"server_version": "15.0", "client_encoding": "UTF8"}
}

func (s *scriptedSession) Handle(ctx context.Context, msg pgproto3.FrontendMessage, frame []byte) error {
	switch m := msg.(type) {
	case *pgproto3.Query:
		switch m.String {
		case "fail":
			return pgerr.New(pgerr.FeatureNotSupported, "scripted failure")
		case "fatal":
			return pgerr.Fatal(pgerr.ConnectionFailure, "scripted fatal")
		case "panic":
			panic("scripted panic")
		case "block":
			select {
			case <-s.h.block:
			case <-ctx.Done():
				return pgerr.New(pgerr.QueryCanceled, "canceled")
			}
		}
		_ = s.w.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")})
		_ = s.w.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		return s.w.Flush()
	case *pgproto3.Sync:
		_ = s.w.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		return s.w.Flush()
	case *pgproto3.Parse:
		if m.Query == "fail" {
			return pgerr.New(pgerr.SyntaxError, "scripted parse failure")
		}
		return s.w.Send(&pgproto3.ParseComplete{})
	}
	return nil
}

func (s *scriptedSession) TxStatus() byte       { return 'I' }
func (s *scriptedSession) CopyInProgress() bool { return false }
func (s *scriptedSession) Cancel()              { s.canceled.Add(1) }
func (s *scriptedSession) Close() error         { s.closed.Store(true); return nil }

type testServer struct {
	srv  *Server
	h    *scriptedHandler
	addr string
	done chan error
}

func newTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	h := &scriptedHandler{block: make(chan struct{})}
	if cfg.Handler == nil {
		cfg.Handler = h
	}
	if cfg.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		cfg.Logger = logrus.NewEntry(l)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{srv: NewServer(cfg), h: h, addr: l.Addr().String(), done: make(chan error, 1)}
	go func() { ts.done <- ts.srv.Serve(l) }()
	t.Cleanup(func() {
		ts.srv.Close()
		if err := <-ts.done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return ts
}

// rawClient speaks the protocol by hand.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	fe *pgproto3.Frontend
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, fe: pgproto3.NewFrontend(nc, nc)}
}

func (c *rawClient) send(msgs ...pgproto3.FrontendMessage) {
	c.t.Helper()
	for _, m := range msgs {
		c.fe.Send(m)
	}
	if err := c.fe.Flush(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) receive() pgproto3.BackendMessage {
	c.t.Helper()
	msg, err := c.fe.Receive()
	if err != nil {
		c.t.Fatalf("receive: %v", err)
	}
	return msg
}

// startup runs a trust startup and reads through ReadyForQuery.
func (c *rawClient) startup(params map[string]string) {
	c.t.Helper()
	if params == nil {
		params = map[string]string{"user": "u", "database": "d"}
	}
	c.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: params})
	for {
		switch m := c.receive().(type) {
		case *pgproto3.ReadyForQuery:
			return
		case *pgproto3.ErrorResponse:
			c.t.Fatalf("startup failed: %s %s", m.Code, m.Message)
		}
	}
}

// expectError reads until an ErrorResponse and checks its code.
func (c *rawClient) expectError(code pgerr.Code) *pgproto3.ErrorResponse {
	c.t.Helper()
	for {
		msg, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("expected error %s, got read error %v", code, err)
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			if e.Code != string(code) {
				c.t.Fatalf("expected SQLSTATE %s, got %s: %s", code, e.Code, e.Message)
			}
			return e
		}
	}
}

// expectClosed checks that the server closes the connection.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	buf := make([]byte, 1024)
	for {
		_, err := c.nc.Read(buf)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.t.Fatal("connection still open")
		}
		return
	}
}

func TestStartupNegotiation(t *testing.T) {
	ts := newTestServer(t, Config{})
	c := dialRaw(t, ts.addr)
	// SSLRequest without TLS configured: 'N'; GSSENCRequest: 'N'.
	for _, code := range []uint32{sslRequestCode, gssEncRequestCode} {
		var pkt [8]byte
		binary.BigEndian.PutUint32(pkt[:4], 8)
		binary.BigEndian.PutUint32(pkt[4:], code)
		if _, err := c.nc.Write(pkt[:]); err != nil {
			t.Fatal(err)
		}
		var answer [1]byte
		if _, err := io.ReadFull(c.nc, answer[:]); err != nil || answer[0] != 'N' {
			t.Fatalf("code %d: answer %q, %v", code, answer[0], err)
		}
	}
	c.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u"}})
	var sawKey, sawParam bool
	for {
		msg := c.receive()
		switch m := msg.(type) {
		case *pgproto3.BackendKeyData:
			sawKey = m.ProcessID != 0 && len(m.SecretKey) == 4
		case *pgproto3.ParameterStatus:
			sawParam = sawParam || m.Name == "server_version"
		}
		if rfq, ok := msg.(*pgproto3.ReadyForQuery); ok {
			if rfq.TxStatus != 'I' {
				t.Fatalf("ReadyForQuery %q", rfq.TxStatus)
			}
			break
		}
	}
	if !sawKey || !sawParam {
		t.Fatalf("BackendKeyData %v ParameterStatus %v", sawKey, sawParam)
	}
	// The database defaults to the user name.
	if got := ts.h.sessions[0].start.Database; got != "u" {
		t.Fatalf("database %q", got)
	}
}

func TestStartupRefusals(t *testing.T) {
	ts := newTestServer(t, Config{})
	for _, tc := range []struct {
		name   string
		params map[string]string
		code   pgerr.Code
	}{
		{"no user", map[string]string{"database": "d"}, pgerr.InvalidAuthorizationSpec},
		{"handler refuses", map[string]string{"user": "u", "database": "refuse"}, pgerr.InvalidCatalogName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, ts.addr)
			c.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: tc.params})
			e := c.expectError(tc.code)
			if e.Severity != "FATAL" {
				t.Fatalf("severity %s", e.Severity)
			}
			c.expectClosed()
		})
	}
}

func TestProtocolViolations(t *testing.T) {
	ts := newTestServer(t, Config{MaxMessageSize: 1024})
	frame := func(typ byte, body []byte) []byte {
		out := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(out[1:], uint32(len(body)+4))
		return append(out, body...)
	}
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"unknown type", frame('y', nil)},
		{"length below four", []byte{'Q', 0, 0, 0, 3}},
		{"length above the limit", []byte{'Q', 0x7f, 0xff, 0xff, 0xff}},
		{"oversized query", frame('Q', append([]byte(strings.Repeat("x", 2000)), 0))},
		{"bind with lying count", frame('B', []byte{0, 0, 0, 5, 0, 0, 0})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, ts.addr)
			c.startup(nil)
			if _, err := c.nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			c.expectError(pgerr.ProtocolViolation)
			c.expectClosed()
		})
	}
	// The server still serves.
	c := dialRaw(t, ts.addr)
	c.startup(nil)
	c.send(&pgproto3.Query{String: "ok"})
	if _, ok := c.receive().(*pgproto3.CommandComplete); !ok {
		t.Fatal("server did not answer after protocol violations")
	}
}

// TestMalformedQueryAndParse: a Query or Parse that PostgreSQL cannot read
// either gets its ERROR and the session goes on, unless an extended batch
// is open (its implicit transaction would have been aborted): then FATAL.
func TestMalformedQueryAndParse(t *testing.T) {
	ts := newTestServer(t, Config{})
	c := dialRaw(t, ts.addr)
	c.startup(nil)
	expect := func(message string) {
		t.Helper()
		e := c.expectError(pgerr.ProtocolViolation)
		if e.Severity != "ERROR" || e.Message != message {
			t.Fatalf("got %s %q, want ERROR %q", e.Severity, e.Message, message)
		}
		if _, ok := c.receive().(*pgproto3.ReadyForQuery); !ok {
			t.Fatal("no ReadyForQuery after the error")
		}
	}
	write := func(b []byte) {
		t.Helper()
		if _, err := c.nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	frame := func(typ byte, body string) []byte {
		out := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(out[1:], uint32(len(body)+4))
		return append(out, body...)
	}
	write(frame('Q', "SELECT 1"))
	expect("invalid string in message")
	write(frame('Q', "SELECT 1\x00; SELECT 2\x00"))
	expect("invalid message format")
	// The Bind after the failed Parse is skipped unread; Sync answers.
	write(append(append(frame('P', "\x00SELECT 1\x00x\x00\x00\x00"), frame('B', "garbage")...), frame('S', "")...))
	expect("insufficient data left in message")
	c.send(&pgproto3.Query{String: "ok"})
	if _, ok := c.receive().(*pgproto3.CommandComplete); !ok {
		t.Fatal("the session does not go on after the errors")
	}
	c.receive() // ReadyForQuery

	c.send(&pgproto3.Parse{Query: "ok"})
	write(frame('P', "\x00SELECT 1\x00x\x00\x00\x00"))
	e := c.expectError(pgerr.ProtocolViolation)
	if e.Severity != "FATAL" {
		t.Fatalf("a malformed Parse in an open batch: %s, want FATAL", e.Severity)
	}
	c.expectClosed()
}

func TestBadStartupPackets(t *testing.T) {
	ts := newTestServer(t, Config{})
	for _, tc := range []struct {
		name  string
		bytes []byte
		fatal bool
		code  pgerr.Code
	}{
		{"short length", []byte{0, 0, 0, 4}, true, pgerr.ProtocolViolation},
		{"huge length", []byte{0x7f, 0, 0, 0, 0, 3, 0, 0}, true, pgerr.ProtocolViolation},
		{"protocol 2", []byte{0, 0, 0, 8, 0, 2, 0, 0}, true, pgerr.FeatureNotSupported},
		{"truncated then EOF", []byte{0, 0, 0, 100, 0, 3}, false, ""},
		{"startup without terminator", append([]byte{0, 0, 0, 12, 0, 3, 0, 0}, "user"...), true, pgerr.ProtocolViolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, ts.addr)
			if _, err := c.nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			if tc.fatal {
				c.expectError(tc.code)
			} else {
				c.nc.(*net.TCPConn).CloseWrite()
			}
			c.expectClosed()
		})
	}
}

func TestErrorsAndExtendedRecovery(t *testing.T) {
	ts := newTestServer(t, Config{})
	c := dialRaw(t, ts.addr)
	c.startup(nil)

	// A failed Query: ErrorResponse then ReadyForQuery.
	c.send(&pgproto3.Query{String: "fail"})
	c.expectError(pgerr.FeatureNotSupported)
	if _, ok := c.receive().(*pgproto3.ReadyForQuery); !ok {
		t.Fatal("no ReadyForQuery after a failed query")
	}

	// A failed Parse: ErrorResponse, the rest skipped until Sync.
	c.send(&pgproto3.Parse{Query: "fail"}, &pgproto3.Parse{Query: "skipped"}, &pgproto3.Sync{})
	c.expectError(pgerr.SyntaxError)
	if m, ok := c.receive().(*pgproto3.ReadyForQuery); !ok {
		t.Fatalf("got %T after the error, want ReadyForQuery (the second Parse must be skipped)", m)
	}
	c.send(&pgproto3.Parse{Query: "ok"}, &pgproto3.Sync{})
	if _, ok := c.receive().(*pgproto3.ParseComplete); !ok {
		t.Fatal("no ParseComplete after recovery")
	}

	// A panic ends only this connection, with XX000.
	c.send(&pgproto3.Query{String: "panic"})
	c.expectError(pgerr.InternalError)
	c.expectClosed()
	c2 := dialRaw(t, ts.addr)
	c2.startup(nil)
}

func TestMaxConnections(t *testing.T) {
	ts := newTestServer(t, Config{MaxConnections: 1})
	c := dialRaw(t, ts.addr)
	c.startup(nil)
	c2 := dialRaw(t, ts.addr)
	c2.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u"}})
	e := c2.expectError(pgerr.TooManyConnections)
	if e.Message != "sorry, too many clients already" {
		t.Fatalf("message %q", e.Message)
	}
	if got := ts.srv.Stats().Refused; got != 1 {
		t.Fatalf("refused count %d", got)
	}
}

func TestCancelRouting(t *testing.T) {
	ts := newTestServer(t, Config{})
	c := dialRaw(t, ts.addr)
	c.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u"}})
	var key *pgproto3.BackendKeyData
	for key == nil {
		if k, ok := c.receive().(*pgproto3.BackendKeyData); ok {
			key = &pgproto3.BackendKeyData{ProcessID: k.ProcessID, SecretKey: append([]byte(nil), k.SecretKey...)}
		}
	}
	sendCancel := func(pid uint32, secret []byte) {
		cc := dialRaw(t, ts.addr)
		buf, _ := (&pgproto3.CancelRequest{ProcessID: pid, SecretKey: secret}).Encode(nil)
		if _, err := cc.nc.Write(buf); err != nil {
			t.Fatal(err)
		}
		cc.expectClosed() // the server closes a cancel connection without answering
	}
	sess := ts.h.sessions[0]
	sendCancel(key.ProcessID, []byte{1, 2, 3, 4})
	sendCancel(key.ProcessID+1, key.SecretKey)
	if n := sess.canceled.Load(); n != 0 {
		t.Fatalf("cancel with a wrong key reached the session (%d)", n)
	}
	sendCancel(key.ProcessID, key.SecretKey)
	if n := sess.canceled.Load(); n != 1 {
		t.Fatalf("cancel with the right key reached the session %d times", n)
	}
}

func TestShutdownDrains(t *testing.T) {
	ts := newTestServer(t, Config{})
	idle := dialRaw(t, ts.addr)
	idle.startup(nil)
	busy := dialRaw(t, ts.addr)
	busy.startup(nil)
	busy.send(&pgproto3.Query{String: "block"})
	// Wait until the busy session is inside Handle.
	deadline := time.Now().Add(5 * time.Second)
	for len(ts.h.sessions) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)

	shutdownDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdownDone <- ts.srv.Shutdown(ctx)
	}()
	idle.expectError(pgerr.AdminShutdown)
	idle.expectClosed()
	// New connections are refused while draining.
	late, err := net.Dial("tcp", ts.addr)
	if err == nil {
		late.Close()
		t.Fatal("listener still accepting after Shutdown")
	}
	// The busy session finishes its statement, then is told.
	close(ts.h.block)
	if _, ok := busy.receive().(*pgproto3.CommandComplete); !ok {
		t.Fatal("busy session's statement did not complete")
	}
	busy.expectError(pgerr.AdminShutdown)
	if err := <-shutdownDone; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestShutdownDeadlineCutsBusySessions(t *testing.T) {
	ts := newTestServer(t, Config{})
	busy := dialRaw(t, ts.addr)
	busy.startup(nil)
	busy.send(&pgproto3.Query{String: "block"})
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown returned %v, want the deadline", err)
	}
	busy.expectClosed()
	if !ts.h.sessions[0].closed.Load() {
		t.Fatal("session not closed")
	}
}

func TestSCRAM(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users.txt")
	// bob's verifier is PostgreSQL's own for the password "hunter2"
	// (pg_authid.rolpassword after CREATE ROLE bob PASSWORD 'hunter2').
	content := `# test users
"alice" "secret"
"bob" "SCRAM-SHA-256$4096:XxEnwJk9mdjJul29KijNHg==$fDCeInSQ29Sy/+kivmWTSEVk/czpD7OAr+QE+/qOkHI=:jHicvxWRcYTP1KhVX2Gb6MIkCPWBdKjbfjsWTNvFkTU="
`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, Config{Auth: AuthSCRAM, Users: users})
	host, port, _ := net.SplitHostPort(ts.addr)
	connect := func(user, password string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgconn.Connect(ctx, "host="+host+" port="+port+" sslmode=disable user="+user+" password="+password)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	}
	for _, tc := range []struct {
		user, password string
		ok             bool
	}{
		{"alice", "secret", true},
		{"alice", "wrong", false},
		{"bob", "hunter2", true},
		{"bob", "secret", false},
		{"carol", "secret", false},
	} {
		err := connect(tc.user, tc.password)
		if tc.ok && err != nil {
			t.Errorf("%s/%s: %v", tc.user, tc.password, err)
		}
		if !tc.ok {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != string(pgerr.InvalidPassword) {
				t.Errorf("%s/%s: want 28P01, got %v", tc.user, tc.password, err)
			}
		}
	}
}

func TestLoadUsersRejectsMalformedLines(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{
		`alice secret`,
		`"alice"`,
		`"alice" "unterminated`,
		`"bob" "SCRAM-SHA-256$x:abc$def:ghi"`,
	} {
		path := filepath.Join(dir, "u.txt")
		if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadUsers(path); err == nil {
			t.Errorf("%q: no error", content)
		}
	}
}

// TestWatchdogAcrossStatements: the client watchdog stays armed across
// messages and lapses when it finds none being handled; a client that
// vanishes during a long statement is noticed either way: right after a
// run of short statements (the watchdog still armed by them) and after an
// idle spell longer than its interval (it lapsed and is armed again).
func TestWatchdogAcrossStatements(t *testing.T) {
	for _, idle := range []time.Duration{0, 2 * clientCheckInterval} {
		t.Run("idle "+idle.String(), func(t *testing.T) {
			ts := newTestServer(t, Config{})
			c := dialRaw(t, ts.addr)
			c.startup(nil)
			for range 50 {
				c.send(&pgproto3.Query{String: "select 1"})
				for {
					if _, ok := c.receive().(*pgproto3.ReadyForQuery); ok {
						break
					}
				}
			}
			time.Sleep(idle)
			c.send(&pgproto3.Query{String: "block"})
			c.nc.Close()
			ts.h.mu.Lock()
			sess := ts.h.sessions[0]
			ts.h.mu.Unlock()
			// The watchdog looks once a second; the machine may be slow.
			deadline := time.Now().Add(10 * clientCheckInterval)
			for !sess.closed.Load() {
				if time.Now().After(deadline) {
					t.Fatal("the statement of a client that went away was not canceled")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
