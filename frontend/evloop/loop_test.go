//go:build linux

package evloop

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"runtime"
	"strings"
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

func (p *fakePeer) Admit(batch []byte) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse {
		return nil, false
	}
	p.admitted = append(p.admitted, bytes.Clone(batch))
	return nil, true
}

func (p *fakePeer) Answer(typ byte, frame []byte) Verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answers = append(p.answers, typ)
	return Relay
}

func (p *fakePeer) Unread([]byte) {}

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

// sharedLoop is one loop for all tests, as the proxy has one for all its
// sessions (never closed: it lives as long as the test binary).
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
	loopClient      *Conn    // the session's end of the client's socket
	loopBackend     *Conn    // and of the backend's
	peer            *fakePeer
	done            chan runResult
}

type runResult struct {
	res Result
	err error
}

// runShared runs peer's session in the shared loop; its result arrives on
// the channel returned.
func runShared(t *testing.T, client, backend *Conn, peer Peer) chan runResult {
	done := make(chan runResult, 1)
	go func() {
		res, err := sharedLoop(t).Run(client, backend, peer)
		done <- runResult{res, err}
	}()
	return done
}

func startSession(t *testing.T) *session {
	t.Helper()
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	s := &session{client: client, backend: backend, loopClient: lc, loopBackend: lb, peer: &fakePeer{}, done: make(chan runResult, 1)}
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

// TestRandomSplitsThroughTheLoop: batches the client writes in pieces cut
// anywhere before the end of an Execute (a batch cut after its Execute goes
// back: TestCutAfterExecuteGoesBack), and answers the backend writes so
// (some larger than the loop's buffer), each reach the other end whole and
// in order, every batch forwarded by the loop; a Terminate then gives the
// session back.
func TestRandomSplitsThroughTheLoop(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	s := startSession(t)
	const rounds = 150
	for round := range rounds {
		batch := encode(t, &pgproto3.Query{String: "SELECT 1"})
		// The batch's tail that is written in one piece.
		tail := 0
		if round%2 == 1 {
			batch = encode(t, &pgproto3.Parse{Query: "SELECT $1"}, &pgproto3.Bind{Parameters: [][]byte{[]byte("7")}},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
			// The Execute's last byte and the Sync.
			tail = len(encode(t, &pgproto3.Sync{})) + 1
		}
		answer := encode(t, &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x")}}})
		for range rng.Intn(4) {
			answer = append(answer, encode(t, &pgproto3.DataRow{Values: [][]byte{make([]byte, rng.Intn(50<<10))}})...)
		}
		answer = append(answer, encode(t, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})...)
		backendErr := make(chan error, 1)
		go func() { backendErr <- playBackend(s.backend, batch, answer, rand.New(rand.NewSource(int64(round)))) }()
		writePieces(t, s.client, batch[:len(batch)-tail], rng)
		if _, err := s.client.Write(batch[len(batch)-tail:]); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(answer))
		if _, err := io.ReadFull(s.client, got); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := <-backendErr; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(got, answer) {
			t.Fatalf("round %d: the answer changed on its way", round)
		}
	}
	terminate := encode(t, &pgproto3.Terminate{})
	writePieces(t, s.client, terminate, rng)
	r := s.waitReturn(t, "a Terminate")
	if r.err != nil || r.res.Over != nil || r.res.Forwarded != rounds || !bytes.HasPrefix(terminate, r.res.Leftover) {
		t.Fatalf("Run: %+v, %v; want %d forwarded and the Terminate back", r.res, r.err, rounds)
	}
	// What the loop did not read is still in the socket it gave back.
	rest := make([]byte, len(terminate)-len(r.res.Leftover))
	_ = s.loopClient.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(s.loopClient, rest); err != nil || !bytes.Equal(append(r.res.Leftover, rest...), terminate) {
		t.Fatalf("the Terminate's rest: %q, %v", rest, err)
	}
}

// TestCutAfterExecuteGoesBack: a batch whose bytes so far end after a
// whole Execute goes back to the session's goroutine without waiting for
// its Sync: PostgreSQL would be running the Execute, and a cancel the
// client sends before the Sync must reach it.
func TestCutAfterExecuteGoesBack(t *testing.T) {
	in := encode(t, &pgproto3.Parse{Query: "SELECT pg_sleep(5)"}, &pgproto3.Bind{}, &pgproto3.Execute{})
	s := startSession(t)
	if _, err := s.client.Write(in); err != nil {
		t.Fatal(err)
	}
	r := s.waitReturn(t, "a batch cut after its Execute")
	if r.err != nil || r.res.Forwarded != 0 || !bytes.Equal(r.res.Leftover, in) {
		t.Fatalf("Run %+v, %v; want it all back", r.res, r.err)
	}
}

// writePieces writes b in random pieces, sometimes pausing between them
// so that they reach the loop in separate reads.
func writePieces(t *testing.T, c net.Conn, b []byte, rng *rand.Rand) {
	t.Helper()
	for _, piece := range randomSplit(rng, b) {
		if _, err := c.Write(piece); err != nil {
			t.Fatal(err)
		}
		if rng.Intn(3) == 0 {
			time.Sleep(time.Duration(rng.Intn(300)) * time.Microsecond)
		}
	}
}

// relayRound writes batch as the client, plays the backend's answer
// (playBackend, in pieces seeded by round) and checks that the client
// reads exactly answer.
func relayRound(t *testing.T, client, backend net.Conn, batch, answer []byte, round int) {
	t.Helper()
	backendErr := make(chan error, 1)
	go func() { backendErr <- playBackend(backend, batch, answer, rand.New(rand.NewSource(int64(round)))) }()
	if _, err := client.Write(batch); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(answer))
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("round %d: answer %q, %v", round, got, err)
	}
	if err := <-backendErr; err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
}

// playBackend reads the batch, checks it, and answers in random pieces.
func playBackend(c net.Conn, batch, answer []byte, rng *rand.Rand) error {
	got := make([]byte, len(batch))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, batch) {
		return fmt.Errorf("the backend got %q, want %q", got, batch)
	}
	for _, piece := range randomSplit(rng, answer) {
		if _, err := c.Write(piece); err != nil {
			return err
		}
		if rng.Intn(3) == 0 {
			time.Sleep(time.Duration(rng.Intn(300)) * time.Microsecond)
		}
	}
	return nil
}

// blockingPeer's Abandon waits until release is closed.
type blockingPeer struct {
	fakePeer
	abandoned, release chan struct{}
}

func (p *blockingPeer) Abandon() {
	close(p.abandoned)
	<-p.release
}

// TestAbandonDoesNotStopTheLoop: a client gone with its batch at the
// backend gets the backend's work stopped (a CancelRequest, which can
// take seconds); the loop's other sessions go on meanwhile.
func TestAbandonDoesNotStopTheLoop(t *testing.T) {
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	peer := &blockingPeer{abandoned: make(chan struct{}), release: make(chan struct{})}
	defer close(peer.release)
	done := runShared(t, lc, lb, peer)
	batch := encode(t, &pgproto3.Query{String: "SELECT pg_sleep(60)"})
	if _, err := client.Write(batch); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(batch))
	if _, err := io.ReadFull(backend, got); err != nil {
		t.Fatal(err)
	}
	_ = client.Close()
	select {
	case <-peer.abandoned:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's work was not abandoned")
	}
	select {
	case r := <-done:
		if r.res.Over != ErrClientGone {
			t.Fatalf("Run: %+v, %v; want ErrClientGone", r.res, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session whose client left was not given back")
	}
	// Another session's batch goes through while Abandon still waits.
	s := startSession(t)
	other := encode(t, &pgproto3.Query{String: "SELECT 1"})
	answer := encode(t, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	backendErr := make(chan error, 1)
	go func() { backendErr <- playBackend(s.backend, other, answer, rand.New(rand.NewSource(1))) }()
	if _, err := s.client.Write(other); err != nil {
		t.Fatal(err)
	}
	_ = s.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(s.client, make([]byte, len(answer))); err != nil {
		t.Fatalf("another session, while a client's batch is abandoned: %v", err)
	}
	if err := <-backendErr; err != nil {
		t.Fatal(err)
	}
}

// shrinkSendBuffer makes c's socket take little at a time, so that the
// loop's writes to it come up short and it must wait for writability.
func shrinkSendBuffer(t *testing.T, c *Conn) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}

// TestShortWritesWaitForWritability: the loop watches a socket for
// writability only after a write to it came up short. A batch larger
// than the backend's socket takes at once and an answer larger than the
// client's, read slowly, both arrive whole: each short write has the loop
// woken when the socket can take more.
func TestShortWritesWaitForWritability(t *testing.T) {
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	shrinkSendBuffer(t, lc)
	shrinkSendBuffer(t, lb)
	peer := &fakePeer{}
	done := runShared(t, lc, lb, peer)
	s := &session{client: client, backend: backend, loopClient: lc, peer: peer, done: done}
	for round := range 3 {
		// Frames no longer than the peer's MaxMessageSize.
		var batch []byte
		for len(batch) < testMaxBatch-2048 {
			batch = append(batch, encode(t, &pgproto3.Parse{Query: string(bytes.Repeat([]byte("x"), 1000))})...)
		}
		batch = append(batch, encode(t, &pgproto3.Sync{})...)
		answer := encode(t, &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x")}}})
		for range 16 {
			answer = append(answer, encode(t, &pgproto3.DataRow{Values: [][]byte{make([]byte, 64<<10)}})...)
		}
		answer = append(answer, encode(t, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 16")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})...)
		backendErr := make(chan error, 1)
		go func() {
			// The backend reads the batch slowly too.
			got := make([]byte, 0, len(batch))
			buf := make([]byte, 4096)
			for len(got) < len(batch) {
				n, err := s.backend.Read(buf)
				if err != nil {
					backendErr <- err
					return
				}
				got = append(got, buf[:n]...)
				time.Sleep(time.Millisecond)
			}
			if !bytes.Equal(got, batch) {
				backendErr <- fmt.Errorf("the backend got %d bytes, not the batch", len(got))
				return
			}
			_, err := s.backend.Write(answer)
			backendErr <- err
		}()
		if _, err := s.client.Write(batch); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 0, len(answer))
		buf := make([]byte, 32<<10)
		_ = s.client.SetReadDeadline(time.Now().Add(30 * time.Second))
		for len(got) < len(answer) {
			n, err := s.client.Read(buf)
			if err != nil {
				t.Fatalf("round %d: after %d of %d bytes: %v", round, len(got), len(answer), err)
			}
			got = append(got, buf[:n]...)
			time.Sleep(time.Millisecond)
		}
		if err := <-backendErr; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(got, answer) {
			t.Fatalf("round %d: the answer changed on its way", round)
		}
	}
	_ = lc.Close()
	if r := s.waitReturn(t, "Close"); r.res.Forwarded != 3 {
		t.Fatalf("Run: %+v, %v; want 3 batches forwarded", r.res, r.err)
	}
}

// TestLoopGoroutineIsNotLocked: the loop's goroutine must not be locked
// to its thread. Go's scheduler preempts a goroutine that kept its P for
// 10 ms (a busy loop always has: its system calls do not count as
// yielding); a locked goroutine then sleeps until another thread hands its
// P back, and every session of the loop waits meanwhile (Loop.run). The
// goroutine dump says "locked to thread" of a locked goroutine.
func TestLoopGoroutineIsNotLocked(t *testing.T) {
	sharedLoop(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		dump := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(dump, "\n\n") {
			if !strings.Contains(g, "evloop.(*Loop).run(") {
				continue
			}
			header, _, _ := strings.Cut(g, "\n")
			if strings.Contains(header, "locked to thread") {
				t.Fatalf("the loop's goroutine is locked to its thread: %s", header)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine runs evloop.(*Loop).run:\n%s", dump)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// delegatingPeer is a Peer wrapping a fakePeer as a Delegator: its own
// Admit and Answer refuse, so a batch is forwarded and its answer relayed
// only when the loop calls the follower's.
type delegatingPeer struct {
	*fakePeer
	replies int // Reply calls
}

func (p *delegatingPeer) Follower() Follower { return p.fakePeer }

func (p *delegatingPeer) Admit([]byte) ([]byte, bool) { return nil, false }

func (p *delegatingPeer) Answer(byte, []byte) Verdict { return RelayThenBack }

func (p *delegatingPeer) Reply() []byte { p.replies++; return nil }

// TestDelegatorFollowerServes: a Delegator's Follower admits the batches
// and follows the answers (the connection's Peer hands its session's
// Admit and Answer to the loop, one indirect call each), while the Peer's
// Replier is still asked after each batch admitted.
func TestDelegatorFollowerServes(t *testing.T) {
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	peer := &delegatingPeer{fakePeer: &fakePeer{}}
	done := runShared(t, lc, lb, peer)
	batch := encode(t, &pgproto3.Query{String: "SELECT 1"})
	answer := encode(t, &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x")}}},
		&pgproto3.DataRow{Values: [][]byte{[]byte("1")}},
		&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	const rounds = 3
	for round := range rounds {
		relayRound(t, client, backend, batch, answer, round)
	}
	if _, err := client.Write(encode(t, &pgproto3.Terminate{})); err != nil {
		t.Fatal(err)
	}
	var r runResult
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop kept the session after a Terminate")
	}
	peer.mu.Lock()
	defer peer.mu.Unlock()
	if r.err != nil || r.res.Over != nil || r.res.Forwarded != rounds || len(peer.admitted) != rounds ||
		string(peer.answers) != strings.Repeat("TCZ", rounds) || peer.replies != rounds {
		t.Fatalf("Run %+v, %v; follower admitted %d, answers %q, replies %d; want %d of each",
			r.res, r.err, len(peer.admitted), peer.answers, peer.replies, rounds)
	}
}
