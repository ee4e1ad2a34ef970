package proxy

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/wire"
)

// startupLog is a backend that reads each connection's startup message
// and never answers it: it records who dialed, in order.
type startupLog struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	apps  chan string // each startup's application_name ("" for none)
}

func newStartupLog(t *testing.T) *startupLog {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &startupLog{ln: ln, apps: make(chan string, 16)}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, nc)
			b.mu.Unlock()
			go func() {
				m, err := pgproto3.NewBackend(nc, nc).ReceiveStartupMessage()
				if s, ok := m.(*pgproto3.StartupMessage); ok && err == nil {
					b.apps <- s.Parameters["application_name"]
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, nc := range b.conns {
			nc.Close()
		}
	})
	return b
}

// next is the application_name of the next startup, or false if none
// comes within wait.
func (b *startupLog) next(wait time.Duration) (string, bool) {
	select {
	case app := <-b.apps:
		return app, true
	case <-time.After(wait):
		return "", false
	}
}

// TestCopyRegistersWhileSessionStarts: the first session in a database
// this proxy just made from the template dials the lease's connection
// (which registers there) while its own backend has not answered yet;
// before, the lease was dialed only after the session's backend had
// started and answered the schema check (docs/corpus-cost.md, session 17).
// Any other database's session dials nothing else until its backend
// answers, and so does a second session in the copy.
func TestCopyRegistersWhileSessionStarts(t *testing.T) {
	b := newStartupLog(t)
	backend, err := pgconn.ParseConfig("postgres://postgres@" + b.ln.Addr().String() + "/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(&bytes.Buffer{})
	px := New(Config{Backend: backend, Logger: logrus.NewEntry(log)})
	px.copiedTemplate("fresh_copy")

	// connect starts a session in database and returns what dialed the
	// backend within a while, its own dial first; the session's start is
	// then given up.
	connect := func(database string, within time.Duration) []string {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = px.Connect(ctx, wire.Startup{User: "postgres", Database: database, Params: map[string]string{}}, nil, wire.NewWriter(&bytes.Buffer{}, 4096))
		}()
		var apps []string
		for {
			app, ok := b.next(within)
			if !ok {
				break
			}
			apps = append(apps, app)
		}
		cancel()
		<-done
		return apps
	}
	has := func(apps []string, app string) bool {
		for _, a := range apps {
			if a == app {
				return true
			}
		}
		return false
	}

	if apps := connect("fresh_copy", 5*time.Second); len(apps) != 2 || !has(apps, "") || !has(apps, InternalApplicationName) {
		t.Errorf("dials while a new copy's first session starts: %q; want the session's and %q", apps, InternalApplicationName)
	}
	// Nothing else is dialed before the session's backend answers (which
	// this backend never does); a short wait shows no second dial.
	for _, database := range []string{"fresh_copy", "other"} {
		if apps := connect(database, 500*time.Millisecond); len(apps) != 1 || apps[0] != "" {
			t.Errorf("dials while a session in %s starts: %q; want only the session's", database, apps)
		}
	}
}
