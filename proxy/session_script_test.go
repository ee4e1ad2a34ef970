package proxy

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend"
	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/proxy/lease"
)

// TestSessionScripts runs the session scripts in testdata/session: a real
// frontend server and the production Session, whose backend connection is
// a socket the script plays PostgreSQL on. A script sends the client's
// messages and the backend's, and states every message the proxy sends
// each way: it tests the session at its message boundary, not its
// internals, so that a rebuilt session core can be held to it.
// Regenerate the expected output (then review the diff) with
//
//	go test ./proxy/ -run TestSessionScripts -rewrite
//
// Directives:
//
//	start [statement_timeout=<ms>]
//	    open the session (the first directive of each script); the
//	    backend answers the proxy's start queries as if the client's
//	    startup options set statement_timeout.
//	client
//	    the client sends the messages of the input (one a line).
//	backend
//	    the backend sends the messages of the input.
//	cancel
//	    the client sends a CancelRequest for its session to the frontend.
//	wait
//	    nothing is sent: what the proxy sends by itself (a timeout's
//	    cancel).
//	held
//	    nothing is sent; waits until the session holds the client's
//	    Execute for its batch's Sync.
//	sleep ms=<ms>
//	    nothing is sent for that long (a deadline passes).
//	disconnect
//	    the client's connection closes.
//	skip
//	    the script states behaviour the proxy does not have yet: the input
//	    says why. -session-skipped runs it anyway.
//
// The output of client, backend, cancel, wait and disconnect is what the
// proxy sent meanwhile, a line each: "backend <- " messages to the
// backend, then "cancel <- " CancelRequests the backend received, then
// "client <- " messages to the client; "(closed)" when the proxy closed
// that connection. Each stream is in order; the streams are not ordered
// with respect to each other. The harness waits for as many lines as the
// expected output has (up to scriptWait), so a message that does not come
// fails the script, and one more than expected shows up in the next
// directive's output or fails the script at its end.
//
// Managed: public.t (see scriptCatalog). The session's incarnation is 7.
func TestSessionScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/session", func(t *testing.T, path string) {
		var env *scriptEnv
		defer func() {
			if env != nil {
				env.finish(t)
			}
		}()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "skip" {
				if !*runSkippedScripts {
					t.Skip(strings.TrimSpace(d.Input))
				}
				return d.Expected
			}
			if d.Cmd == "start" {
				if env != nil {
					d.Fatalf(t, "start: the session is open")
				}
				env = startScript(t, d)
				return "ready\n"
			}
			if env == nil {
				d.Fatalf(t, "%s before start", d.Cmd)
			}
			return env.run(t, d)
		})
	})
}

var runSkippedScripts = flag.Bool("session-skipped", false, "run the session scripts marked skip")

// scriptWait bounds the wait for the messages a directive expects; a
// quiet scriptSettle ends the wait of a rewrite, and the check for
// messages nobody expected at a script's end.
const (
	scriptWait   = 3 * time.Second
	scriptSettle = 100 * time.Millisecond
)

// The scripted backend's key: the CancelRequest the proxy must send it.
const (
	scriptBackendPID  = 4242
	scriptIncarnation = 7
)

var scriptBackendSecret = []byte{0, 0, 0x10, 0x92}

// scriptEnv is one script's proxy, frontend server, client and backend.
type scriptEnv struct {
	px     *Proxy
	srv    *frontend.Server
	ln     net.Listener
	client net.Conn
	fe     *pgproto3.Frontend
	// backendConn is the backend's end of the session's backend
	// connection; backend writes to it.
	backendConn net.Conn
	backend     *pgproto3.Backend
	// startAnswer is what the backend answers the proxy's queries of the
	// session's start with.
	startAnswer string
	readers     sync.WaitGroup

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when lines change
	lines   map[string][]string
	started bool   // the client saw the first ReadyForQuery
	key     []byte // the client's BackendKeyData, encoded as a CancelRequest
	// backendReady receives the proxy's end of the backend connection.
	backendReady chan net.Conn
	sess         *Session
}

// startScript opens the script's session.
func startScript(t *testing.T, d *datadriven.TestData) *scriptEnv {
	db, err := scriptDatabase()
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	e := &scriptEnv{changed: make(chan struct{}), lines: map[string][]string{}, backendReady: make(chan net.Conn, 1)}
	cfg := &pgconn.Config{Host: "scripted-backend", Port: 5432, DialFunc: e.dialCancel}
	e.px = New(Config{Backend: cfg, Logger: logrus.NewEntry(log)})
	e.px.database("db").fixed = db
	e.startAnswer = ""
	var timeoutMS int
	if d.MaybeScanArgs(t, "statement_timeout", &timeoutMS) {
		e.startAnswer = "statement_timeout=" + strconv.Itoa(timeoutMS) + "=client"
	}
	proxyEnd, backendEnd := socketPair(t)
	e.backendConn, e.backend = backendEnd, pgproto3.NewBackend(backendEnd, backendEnd)
	e.srv = frontend.NewServer(frontend.Config{
		Handler: scriptHandler{e: e, be: newBackend(proxyEnd, scriptBackendPID, scriptBackendSecret, map[string]string{
			"server_version": "15.0", "client_encoding": "UTF8", "DateStyle": "ISO, MDY",
		}, cfg)},
		Logger: logrus.NewEntry(log),
	})
	if e.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.srv.Serve(e.ln) }()
	if e.client, err = net.Dial("tcp", e.ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	e.fe = pgproto3.NewFrontend(e.client, e.client)
	e.fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{
		"user": "alice", "database": "db",
	}})
	if err := e.fe.Flush(); err != nil {
		t.Fatal(err)
	}
	e.readers.Add(2)
	go e.readClient()
	go e.readBackend()
	e.awaitStart(t)
	return e
}

// awaitStart waits for the session's first ReadyForQuery, and forgets
// the start's messages.
func (e *scriptEnv) awaitStart(t *testing.T) {
	deadline := time.After(scriptWait)
	for {
		e.mu.Lock()
		started, changed := e.started, e.changed
		if started {
			for _, l := range e.lines["backend"] {
				if !strings.HasPrefix(l, "backend <- Query ") {
					t.Errorf("the session's start sent the backend %s", l)
				}
			}
			clear(e.lines)
		}
		e.mu.Unlock()
		if started {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			e.mu.Lock()
			defer e.mu.Unlock()
			t.Fatalf("the session did not start: %v", e.lines)
		}
	}
}

// scriptHandler opens the script's one session on the scripted backend,
// as Proxy.Connect does once it has connected and registered.
type scriptHandler struct {
	e  *scriptEnv
	be *backend
}

func (h scriptHandler) Connect(ctx context.Context, start wire.Startup, _ wire.AuthRelay, w *wire.Writer) (frontend.Session, error) {
	startCtx, cancel := context.WithTimeout(ctx, scriptWait)
	defer cancel()
	s, err := h.e.px.openSession(ctx, startCtx, h.be, start, w, lease.Granted(scriptIncarnation), nil)
	if err != nil {
		return nil, err
	}
	h.e.mu.Lock()
	h.e.sess = s
	h.e.mu.Unlock()
	return s, nil
}

// socketPair returns the two ends of a loopback TCP connection.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// note records a line of a stream. The names of the proxy's own
// statements are recorded without their per-process suffix (ownName).
func (e *scriptEnv) note(stream, line string) {
	line = strings.ReplaceAll(line, "_"+ownNameSuffix, "")
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lines[stream] = append(e.lines[stream], stream+" <- "+line)
	close(e.changed)
	e.changed = make(chan struct{})
}

// readClient records what the client receives.
func (e *scriptEnv) readClient() {
	defer e.readers.Done()
	for {
		msg, err := e.fe.Receive()
		if err != nil {
			e.note("client", "(closed)")
			return
		}
		switch m := msg.(type) {
		case *pgproto3.BackendKeyData:
			key, _ := (&pgproto3.CancelRequest{ProcessID: m.ProcessID, SecretKey: m.SecretKey}).Encode(nil)
			e.mu.Lock()
			e.key = key
			e.mu.Unlock()
			continue
		case *pgproto3.AuthenticationOk, *pgproto3.ParameterStatus:
			e.mu.Lock()
			started := e.started
			e.mu.Unlock()
			if !started {
				continue
			}
		case *pgproto3.ReadyForQuery:
			e.mu.Lock()
			if !e.started {
				e.started = true
				close(e.changed)
				e.changed = make(chan struct{})
				e.mu.Unlock()
				continue
			}
			e.mu.Unlock()
		}
		e.note("client", formatMessage(msg))
	}
}

// readBackend records what the backend receives, and answers the
// queries of the session's start.
func (e *scriptEnv) readBackend() {
	defer e.readers.Done()
	for {
		msg, err := e.backend.Receive()
		if err != nil {
			e.note("backend", "(closed)")
			return
		}
		e.note("backend", formatMessage(msg))
		e.mu.Lock()
		started := e.started
		e.mu.Unlock()
		if _, query := msg.(*pgproto3.Query); query && !started {
			e.answerStartQuery()
		}
	}
}

// answerStartQuery answers a query of the session's start (the settings
// it reads) with startAnswer.
func (e *scriptEnv) answerStartQuery() {
	value := []byte(e.startAnswer)
	if e.startAnswer == "" {
		value = nil
	}
	e.backend.Send(&pgproto3.DataRow{Values: [][]byte{value}})
	e.backend.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
	e.backend.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	_ = e.backend.Flush()
}

// dialCancel is the backend's address for cancel requests: each
// connection's request is recorded, then the connection closed, as the
// postmaster does once it has signaled the backend.
func (e *scriptEnv) dialCancel(context.Context, string, string) (net.Conn, error) {
	proxyEnd, backendEnd := net.Pipe()
	go func() {
		defer backendEnd.Close()
		var buf [16]byte
		if _, err := io.ReadFull(backendEnd, buf[:]); err != nil {
			e.note("cancel", "(unreadable: "+err.Error()+")")
			return
		}
		pid, code := binary.BigEndian.Uint32(buf[8:12]), binary.BigEndian.Uint32(buf[4:8])
		if code != 80877102 || pid != scriptBackendPID || string(buf[12:16]) != string(scriptBackendSecret) {
			e.note("cancel", fmt.Sprintf("(wrong key: %x)", buf))
			return
		}
		e.note("cancel", "CancelRequest")
	}()
	return proxyEnd, nil
}

// run runs a directive after start.
func (e *scriptEnv) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "client":
		for _, line := range inputLines(d) {
			msg, err := parseMessage(line, frontendMessages)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			e.fe.Send(msg)
		}
		if err := e.fe.Flush(); err != nil {
			d.Fatalf(t, "client: %v", err)
		}
	case "backend":
		for _, line := range inputLines(d) {
			msg, err := parseMessage(line, backendMessages)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			e.backend.Send(msg)
		}
		if err := e.backend.Flush(); err != nil {
			d.Fatalf(t, "backend: %v", err)
		}
	case "cancel":
		e.cancel(t, d)
	case "disconnect":
		_ = e.client.Close()
	case "wait":
	case "held":
		e.awaitHeldExecute(t, d)
	case "sleep":
		var ms int
		d.ScanArgs(t, "ms", &ms)
		time.Sleep(time.Duration(ms) * time.Millisecond)
	default:
		d.Fatalf(t, "unknown directive %q", d.Cmd)
	}
	return e.collect(d)
}

// awaitHeldExecute waits until the session holds the client's Execute for
// its batch's Sync, as it does once it has handled the Execute.
func (e *scriptEnv) awaitHeldExecute(t *testing.T, d *datadriven.TestData) {
	e.mu.Lock()
	s := e.sess
	e.mu.Unlock()
	for deadline := time.Now().Add(scriptWait); !s.executeQueued.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			d.Fatalf(t, "held: the session holds no Execute")
		}
	}
}

func inputLines(d *datadriven.TestData) []string {
	var lines []string
	for _, l := range strings.Split(d.Input, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// cancel sends the frontend a CancelRequest for the session, as a client
// does, over a connection of its own.
func (e *scriptEnv) cancel(t *testing.T, d *datadriven.TestData) {
	e.mu.Lock()
	key := e.key
	e.mu.Unlock()
	nc, err := net.Dial("tcp", e.ln.Addr().String())
	if err != nil {
		d.Fatalf(t, "cancel: %v", err)
	}
	defer nc.Close()
	if _, err := nc.Write(key); err != nil {
		d.Fatalf(t, "cancel: %v", err)
	}
	// The frontend closes the connection once it has routed the request.
	_ = nc.SetReadDeadline(time.Now().Add(scriptWait))
	var buf [1]byte
	_, _ = nc.Read(buf[:])
}

// scriptStreams are the streams in the order they are written.
var scriptStreams = []string{"backend", "cancel", "client"}

// collect waits for the lines the directive expects (or, rewriting, for
// the proxy to go quiet) and returns and forgets every line recorded.
func (e *scriptEnv) collect(d *datadriven.TestData) string {
	want := map[string]int{}
	for _, l := range strings.Split(d.Expected, "\n") {
		if stream, _, ok := strings.Cut(l, " <- "); ok {
			want[stream]++
		}
	}
	deadline := time.After(scriptWait)
	for {
		e.mu.Lock()
		complete := true
		for _, s := range scriptStreams {
			complete = complete && len(e.lines[s]) >= want[s]
		}
		changed := e.changed
		e.mu.Unlock()
		if complete && !d.Rewrite {
			break
		}
		var quiet <-chan time.Time
		if d.Rewrite {
			quiet = time.After(scriptSettle)
		}
		select {
		case <-changed:
			continue
		case <-quiet:
		case <-deadline:
		}
		break
	}
	return e.take()
}

// take returns and forgets every line recorded.
func (e *scriptEnv) take() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, s := range scriptStreams {
		for _, l := range e.lines[s] {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	clear(e.lines)
	if b.Len() == 0 {
		return "(nothing)\n"
	}
	return b.String()
}

// finish fails the script if the proxy sent anything after its last
// directive, and ends the session.
func (e *scriptEnv) finish(t *testing.T) {
	if !t.Failed() && !t.Skipped() {
		time.Sleep(scriptSettle / 2)
		if rest := e.take(); rest != "(nothing)\n" {
			t.Errorf("the proxy sent what the script does not expect, after its last directive:\n%s", rest)
		}
	}
	_ = e.client.Close()
	_ = e.backendConn.Close()
	e.srv.Close()
	e.readers.Wait()
}
