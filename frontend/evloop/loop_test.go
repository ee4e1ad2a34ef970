//go:build linux

package evloop

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// The loop against real sockets: each session's client and backend are
// socket pairs, the test plays both far ends, and fakePeer admits what
// it is told to.

const testMaxBatch = 64 << 10

// socketPair returns the loop's end (as Wrap makes it) and the test's.
func socketPair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		conns[i], err = net.FileConn(f)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	lc := Wrap(conns[0])
	if lc == nil {
		t.Fatal("a Unix socket could not be wrapped")
	}
	t.Cleanup(func() { _ = lc.Close(); _ = conns[1].Close() })
	return lc, conns[1]
}

// fakePeer admits every batch unless refuse is set, and records answers.
type fakePeer struct {
	mu       sync.Mutex
	refuse   bool
	admitted [][]byte
	answers  []byte // the types of the frames Answer saw
}

func (p *fakePeer) Admit(batch []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse {
		return false
	}
	p.admitted = append(p.admitted, bytes.Clone(batch))
	return true
}

func (p *fakePeer) Answer(typ byte, frame []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answers = append(p.answers, typ)
	return true
}

func (p *fakePeer) Abandon() {}

func (p *fakePeer) MaxMessageSize() int { return 1024 }

// Readable refuses frames whose body is the single byte 'x' (a stand-in
// for a message the connection cannot decode).
func (p *fakePeer) Readable(frames []byte) bool {
	for len(frames) > 0 {
		n := 1 + int(binary.BigEndian.Uint32(frames[1:5]))
		if n == 6 && frames[5] == 'x' {
			return false
		}
		frames = frames[n:]
	}
	return true
}

var (
	testLoopOnce sync.Once
	testLoop     *Loop
)

// sharedLoop is one loop for all tests, as the proxy has (its goroutine
// lives as long as the process).
func sharedLoop(t *testing.T) *Loop {
	testLoopOnce.Do(func() {
		var err error
		if testLoop, err = New(testMaxBatch); err != nil {
			t.Fatal(err)
		}
	})
	return testLoop
}

// session is one Run of the loop over fresh socket pairs.
type session struct {
	client, backend net.Conn // the test's ends
	peer            *fakePeer
	done            chan runResult
}

type runResult struct {
	res Result
	err error
}

func startSession(t *testing.T) *session {
	t.Helper()
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	s := &session{client: client, backend: backend, peer: &fakePeer{}, done: make(chan runResult, 1)}
	loop := sharedLoop(t)
	go func() {
		res, err := loop.Run(lc, lb, s.peer)
		s.done <- runResult{res, err}
	}()
	return s
}

// waitReturn waits for Run to give the sockets back.
func (s *session) waitReturn(t *testing.T, why string) runResult {
	t.Helper()
	select {
	case r := <-s.done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("the loop kept the session (%s)", why)
	}
	return runResult{}
}

func encode(t *testing.T, msgs ...pgproto3.Message) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestFlushGoesBack: asyncpg's prepare (Parse, Describe, Flush, no Sync)
// waits for its answers; the loop used to wait for a Sync that never
// came, and the session hung.
func TestFlushGoesBack(t *testing.T) {
	s := startSession(t)
	batch := encode(t, &pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Describe{ObjectType: 'S'}, &pgproto3.Flush{})
	if _, err := s.client.Write(batch); err != nil {
		t.Fatal(err)
	}
	r := s.waitReturn(t, "a batch ending with Flush")
	if r.err != nil || r.res.Over != nil || !bytes.Equal(r.res.Leftover, batch) || r.res.Forwarded != 0 {
		t.Fatalf("Run: %+v, %v; want the batch back as leftover", r.res, r.err)
	}
}

// TestNonBatchTypesGoBack: every message that cannot be part of a batch
// the loop forwards goes back from its type byte on, whole or not.
func TestNonBatchTypesGoBack(t *testing.T) {
	for _, in := range [][]byte{
		{'H', 0, 0, 0, 4},
		{'F', 0, 0},
		{'X', 0, 0, 0, 4},
		{'d'},
		{'?', 0, 0, 0, 9, 1},
		append(encode(t, &pgproto3.Parse{Query: "SELECT 1"}), 'H'),
	} {
		s := startSession(t)
		if _, err := s.client.Write(in); err != nil {
			t.Fatal(err)
		}
		r := s.waitReturn(t, string(in[:1]))
		if r.err != nil || !bytes.Equal(r.res.Leftover, in) {
			t.Fatalf("%q: Run %+v, %v; want it all back", in, r.res, r.err)
		}
	}
}

// TestMalformedGoesBack: a message the connection refuses at once goes
// back to it without waiting for the rest of its batch, whose Sync its
// client may never send: a body it cannot decode, a frame longer than
// the connection reads (at its header).
func TestMalformedGoesBack(t *testing.T) {
	parse := encode(t, &pgproto3.Parse{Query: "SELECT 1"})
	for name, in := range map[string][]byte{
		"malformed Bind":         {'B', 0, 0, 0, 5, 'x'},
		"after a Parse":          append(bytes.Clone(parse), 'B', 0, 0, 0, 5, 'x'),
		"oversized, header only": {'Q', 0, 0, 4, 0},
		"oversized Parse, begun": append([]byte{'P', 0, 0, 8, 0}, make([]byte, 100)...),
	} {
		s := startSession(t)
		if _, err := s.client.Write(in); err != nil {
			t.Fatal(err)
		}
		r := s.waitReturn(t, name)
		if r.err != nil || !bytes.Equal(r.res.Leftover, in) {
			t.Fatalf("%s: Run %+v, %v; want it all back", name, r.res, r.err)
		}
	}
	// A good Parse in pieces, then a bad Bind: only the Bind is judged
	// when it comes, and all of it goes back.
	s := startSession(t)
	bad := []byte{'B', 0, 0, 0, 5, 'x'}
	for _, piece := range [][]byte{parse[:3], parse[3:], bad[:2], bad[2:]} {
		if _, err := s.client.Write(piece); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := s.waitReturn(t, "a Parse, then a malformed Bind")
	if want := append(bytes.Clone(parse), bad...); r.err != nil || !bytes.Equal(r.res.Leftover, want) {
		t.Fatalf("Run %+v, %v; want it all back", r.res, r.err)
	}
}
