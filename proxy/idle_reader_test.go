package proxy

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
)

// lockedBuffer is the client's side of an idle-reader test: what the
// reader relayed.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// idleReaderSession is a session whose backend is a socket the test
// writes to, and whose client is a buffer.
func idleReaderSession(t *testing.T) (*Session, net.Conn, *lockedBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { nc.Close(); peer.Close() })
	client := &lockedBuffer{}
	s := &Session{}
	s.be = &backend{nc: nc, r: wire.NewReader(nc, 4096, 1<<20), w: wire.NewWriter(nc, 4096)}
	s.client = wire.NewWriter(client, 4096)
	return s, peer, client
}

// TestIdleReaderDelayed: a session idle in a transaction with read holds
// reads the backend only after idleWatchDelay. A message that comes sooner
// finds no reader (no goroutine read the backend: what the backend sent
// is there for the next request), also when statements keep coming for
// longer than the delay. Left idle, the reader begins and relays what
// comes.
func TestIdleReaderDelayed(t *testing.T) {
	s, peer, client := idleReaderSession(t)
	notice, err := (&pgproto3.NoticeResponse{Severity: "NOTICE", Code: "00000", Message: "idle"}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Write(notice); err != nil {
		t.Fatal(err)
	}

	s.startIdleReader(time.Hour)
	time.Sleep(50 * time.Millisecond)
	if err := s.stopIdleReader(); err != nil {
		t.Fatal(err)
	}
	if n := client.Len(); n != 0 {
		t.Fatalf("the client got %d bytes from a reader that should not have begun", n)
	}
	if s.be.r.Buffered() != 0 {
		t.Fatal("the backend was read before the delay")
	}

	// Statements that follow each other within the delay, over several
	// delays: the timer, not withdrawn between them, finds the session
	// busy or idle for less than the delay, and no reader begins.
	const delay = 500 * time.Millisecond
	var longestIdle time.Duration
	for end := time.Now().Add(3 * delay); time.Now().Before(end); {
		s.startIdleReader(delay)
		idle := time.Now()
		time.Sleep(5 * time.Millisecond)
		longestIdle = max(longestIdle, time.Since(idle))
		if err := s.stopIdleReader(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	switch {
	case longestIdle >= delay:
		// The machine held the test up for a whole delay: the reader
		// may rightly have begun.
		t.Logf("an idle interval took %v, the delay is %v: not checked", longestIdle, delay)
	case client.Len() != 0 || s.be.r.Buffered() != 0:
		t.Fatal("the backend was read while statements followed each other within the delay")
	}

	s.startIdleReader(delay)
	deadline := time.Now().Add(10 * time.Second)
	for client.Len() < len(notice) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.stopIdleReader(); err != nil {
		t.Fatal(err)
	}
	if n := client.Len(); n != len(notice) {
		t.Fatalf("the client got %d bytes after the delay, want the notice's %d", n, len(notice))
	}
	// The connection is usable again: the read deadline is gone.
	if _, err := peer.Write(notice); err != nil {
		t.Fatal(err)
	}
	if typ, _, err := s.be.next(); err != nil || typ != 'N' {
		t.Fatalf("after the reader stopped: %c, %v", typ, err)
	}
}
