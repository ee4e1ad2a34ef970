package proxy

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/wire"
)

// TestConnectBackendSlowStartupWrite: a session starts, and answers, when
// the write of its backend's startup message lasts long enough for pgconn
// to start its background reader (15 ms: a loaded machine, or a burst of
// connections) and that reader has read the backend's whole answer before
// the write returns. The reader then reads again, and it took the answer
// to the proxy's first query of the session's start, which waited its
// full minute (08006 "could not start the session", seen in
// TestFault9ConnectionBurst under load).
func TestConnectBackendSlowStartupWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	backend, err := pgconn.ParseConfig(server.ConnString("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	dial := backend.DialFunc
	backend.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &slowStartupConn{Conn: nc}, nil
	}
	log := logrus.New()
	log.SetOutput(&bytes.Buffer{})
	px := New(Config{Backend: backend, Logger: logrus.NewEntry(log)})
	t.Cleanup(func() { _ = px.Close(context.Background()) })

	// Shorter than the start's own minute: before the fix, the start
	// waited until this deadline.
	startCtx, cancelStart := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStart()
	client := &clientBuffer{}
	began := time.Now()
	s, err := px.Connect(startCtx, wire.Startup{User: "postgres", Database: "postgres", Params: map[string]string{}}, nil, wire.NewWriter(client, 4096))
	if err != nil {
		t.Fatalf("session start after %v: %v", time.Since(began), err)
	}
	t.Cleanup(func() { s.Close() })
	t.Logf("session started in %v", time.Since(began))
	if out := query(t, ctx, s, client, "SELECT 41 + 1"); !strings.Contains(out, "42") {
		t.Fatalf("the session answered %q", out)
	}
}

// slowStartupConn is a backend socket whose first write (the startup
// message) returns only once the backend's answer to it, up to its
// ReadyForQuery, has been read through the socket, by pgconn's background
// reader, which its 15 ms timer starts meanwhile.
type slowStartupConn struct {
	net.Conn
	mu      sync.Mutex
	tail    []byte // the last bytes read
	written bool
}

// readyForQuery is an idle ReadyForQuery, the end of a startup's answer.
var readyForQuery = []byte{'Z', 0, 0, 0, 5, 'I'}

func (c *slowStartupConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.tail = append(c.tail, p[:n]...)
	c.tail = c.tail[max(0, len(c.tail)-len(readyForQuery)):]
	c.mu.Unlock()
	return n, err
}

func (c *slowStartupConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	first := !c.written
	c.written = true
	c.mu.Unlock()
	if first && err == nil {
		c.awaitAnswer()
	}
	return n, err
}

// awaitAnswer waits (up to 10 s) until the startup's answer has been read,
// then a moment more, for the reader to be in its next read.
func (c *slowStartupConn) awaitAnswer() {
	for limit := time.Now().Add(10 * time.Second); time.Now().Before(limit); {
		c.mu.Lock()
		answered := bytes.Equal(c.tail, readyForQuery)
		c.mu.Unlock()
		if answered {
			time.Sleep(50 * time.Millisecond)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
