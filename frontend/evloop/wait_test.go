//go:build linux

package evloop

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/goleak"
)

// The loop's wait (Loop.run) and its end (Loop.Close).

// newLoop is a loop of the test's own, closed at its end.
func newLoop(t *testing.T) *Loop {
	t.Helper()
	l, err := New(testMaxBatch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// runOn runs a session with peer p on loop l over fresh socket pairs.
func runOn(t *testing.T, l *Loop, p Peer) *session {
	t.Helper()
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	s := &session{client: client, backend: backend, loopClient: lc, loopBackend: lb, done: make(chan runResult, 1)}
	go func() {
		res, err := l.Run(lc, lb, p)
		s.done <- runResult{res, err}
	}()
	return s
}

// roundTrip sends a Query through the loop and has the backend answer it.
func roundTrip(t *testing.T, s *session) {
	t.Helper()
	batch := encode(t, &pgproto3.Query{String: "SELECT 1"})
	answer := encode(t, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	if _, err := s.client.Write(batch); err != nil {
		t.Fatal(err)
	}
	_ = s.backend.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(batch))
	if _, err := io.ReadFull(s.backend, got); err != nil || !bytes.Equal(got, batch) {
		t.Fatalf("the backend got %q, %v; want %q", got, err, batch)
	}
	if _, err := s.backend.Write(answer); err != nil {
		t.Fatal(err)
	}
	_ = s.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	got = make([]byte, len(answer))
	if _, err := io.ReadFull(s.client, got); err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("the client got %q, %v; want %q", got, err, answer)
	}
}

// loopState is the state the goroutine dump gives the first goroutine
// running a loop's run ("syscall" while it waits, "runnable", ...), or ""
// when none runs.
func loopState() string {
	buf := make([]byte, 1<<20)
	dump := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(dump, "\n\n") {
		if !strings.Contains(g, "evloop.(*Loop).run(") {
			continue
		}
		header, _, _ := strings.Cut(g, "\n")
		_, state, _ := strings.Cut(header, "[")
		state, _, _ = strings.Cut(state, "]")
		state, _, _ = strings.Cut(state, ",")
		return state
	}
	return ""
}

// TestSessionsWakeTheLoopOnly: sessions served one after the other each
// wake the loop by their own sockets and get their answers, while the
// others stay idle in it, untouched (roundTrip reads exactly the bytes
// it expects on each end).
func TestSessionsWakeTheLoopOnly(t *testing.T) {
	l := newLoop(t)
	var sessions []*session
	for range 8 {
		sessions = append(sessions, runOn(t, l, &fakePeer{}))
	}
	for round := range 20 {
		for i, s := range sessions {
			if (round+i)%3 == 0 {
				roundTrip(t, s)
			}
		}
	}
	for _, s := range sessions {
		_ = s.client.Close()
		r := s.waitReturn(t, "client closed")
		if r.err != nil || r.res.Forwarded == 0 {
			t.Fatalf("Run: %+v, %v", r.res, r.err)
		}
	}
}

// TestGoroutinesRunWhileTheLoopWaits: on one P, goroutines outside the
// loop (the sessions its goroutine serves, the proxy's own) go on while
// the loop waits: its wait must leave the P free (a blocking wait that
// kept it would hold them up until the scheduler's preemption, 10 ms a
// turn).
func TestGoroutinesRunWhileTheLoopWaits(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l := newLoop(t)
	s := runOn(t, l, &fakePeer{})
	roundTrip(t, s)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		buf := make([]byte, 1)
		for {
			if _, err := b.Read(buf); err != nil {
				return
			}
			if _, err := b.Write(buf); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	buf := make([]byte, 1)
	const trips = 2000
	for range trips {
		if _, err := a.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("%d goroutine round trips took %v beside the waiting loop", trips, took)
	}
	roundTrip(t, s)
}

// fdLinks are what /proc says the descriptors are (a pipe's inode, an
// epoll set's anon inode): one that still says so after a close was not
// closed, one reused meanwhile says something else.
func fdLinks(fds ...int) []string {
	var links []string
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			link = "closed"
		}
		links = append(links, link)
	}
	return links
}

// TestCloseWhileWaiting: Close, with the loop parked in its wait and a
// session idle in it and another with its batch at the backend, returns
// promptly; the idle session goes back as it came (Over nil), the other
// with ErrClosed and its backend's work abandoned; the loop's goroutine
// and descriptors are gone; a Run after Close takes nothing and leaves
// the sockets usable.
func TestCloseWhileWaiting(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	l, err := New(testMaxBatch)
	if err != nil {
		t.Fatal(err)
	}
	fds := []int{l.epfd, l.wakeR, l.wakeW}
	before := fdLinks(fds...)
	idle := runOn(t, l, &fakePeer{})
	roundTrip(t, idle)
	peer := &blockingPeer{abandoned: make(chan struct{}), release: make(chan struct{})}
	close(peer.release)
	busy := runOn(t, l, peer)
	batch := encode(t, &pgproto3.Query{String: "SELECT pg_sleep(60)"})
	if _, err := busy.client.Write(batch); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(busy.backend, make([]byte, len(batch))); err != nil {
		t.Fatal(err)
	}
	// The loop waits in epoll_wait: Close must wake it.
	for deadline := time.Now().Add(10 * time.Second); loopState() != "syscall"; {
		if time.Now().After(deadline) {
			t.Fatalf("the loop does not wait: %q", loopState())
		}
		time.Sleep(time.Millisecond)
	}

	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Close took %v", took)
	}
	for i, link := range fdLinks(fds...) {
		if link == before[i] {
			t.Fatalf("descriptor %d (%s) still open after Close", fds[i], link)
		}
	}
	if r := idle.waitReturn(t, "the loop closed"); r.err != nil || r.res.Over != nil {
		t.Fatalf("the idle session: Run %+v, %v; want it back as it came", r.res, r.err)
	}
	if r := busy.waitReturn(t, "the loop closed"); r.err != nil || r.res.Over != ErrClosed {
		t.Fatalf("the busy session: Run %+v, %v; want Over ErrClosed", r.res, r.err)
	}
	select {
	case <-peer.abandoned:
	case <-time.After(10 * time.Second):
		t.Fatal("the busy session's backend work was not abandoned")
	}
	// The idle session's sockets are its goroutine's again.
	if _, err := idle.loopClient.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(idle.client, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	late := runOn(t, l, &fakePeer{})
	r := late.waitReturn(t, "Run after Close")
	if !errors.Is(r.err, ErrClosed) {
		t.Fatalf("Run after Close: %+v, %v; want ErrClosed", r.res, r.err)
	}
	if _, err := late.loopBackend.Write([]byte("y")); err != nil {
		t.Fatalf("a socket Run did not take: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}

	for _, s := range []*session{idle, busy, late} {
		for _, c := range []net.Conn{s.client, s.backend, s.loopClient, s.loopBackend} {
			_ = c.Close()
		}
	}
	if err := goleak.Find(ignore); err != nil {
		t.Fatal(err)
	}
}
