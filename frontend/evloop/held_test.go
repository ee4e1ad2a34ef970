//go:build linux

package evloop

import (
	"bytes"
	"io"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// A batch the peer sends as its own bytes (a guarded read): the answers to
// the peer's own messages are dropped, a DataRow among them is shown to
// the peer, and the peer may take the session back before anything of
// the answer is relayed.

// heldPeer sends its own bytes for every batch, drops the first own
// frames of each answer, and says Back at a frame of type backAt (0:
// never) among them.
type heldPeer struct {
	fakePeer
	send   []byte
	own    int
	backAt byte
	// hold: the frames after the own ones that the peer holds (Verdict
	// Hold); backAfterHold: the type of the frame after them at which it
	// says Back (0: never).
	hold          int
	backAfterHold byte

	hmu      sync.Mutex
	seen     int    // frames of this answer so far
	held     []byte // the types Answer saw while dropping
	unread   []byte
	unreadOK bool
}

func (p *heldPeer) Admit(batch []byte) ([]byte, bool) {
	if _, ok := p.fakePeer.Admit(batch); !ok {
		return nil, false
	}
	p.hmu.Lock()
	p.seen = 0
	p.hmu.Unlock()
	return p.send, true
}

func (p *heldPeer) Answer(typ byte, frame []byte) Verdict {
	p.hmu.Lock()
	defer p.hmu.Unlock()
	p.seen++
	if p.seen <= p.own {
		p.held = append(p.held, typ)
		if typ == p.backAt {
			return Back
		}
		return Drop
	}
	if p.seen <= p.own+p.hold {
		p.held = append(p.held, typ)
		return Hold
	}
	if p.hold > 0 && p.seen == p.own+p.hold+1 && typ == p.backAfterHold {
		p.held = append(p.held, typ)
		return Back
	}
	return p.fakePeer.Answer(typ, frame)
}

func (p *heldPeer) Unread(answer []byte) {
	p.hmu.Lock()
	defer p.hmu.Unlock()
	p.unread, p.unreadOK = bytes.Clone(answer), true
}

func startHeldSession(t *testing.T, p *heldPeer) *session {
	t.Helper()
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	s := &session{client: client, backend: backend, loopClient: lc, loopBackend: lb, peer: &p.fakePeer, done: make(chan runResult, 1)}
	go func() {
		res, err := sharedLoop(t).Run(lc, lb, p)
		s.done <- runResult{res, err}
	}()
	return s
}

// TestHeldAnswerDropsOwnFrames: the backend gets the peer's bytes, not the
// client's batch; the client gets the answer without the peer's frames,
// cut anywhere by the backend's writes, a DataRow among the dropped ones
// (larger than the loop's read buffer once); the session stays in the loop.
func TestHeldAnswerDropsOwnFrames(t *testing.T) {
	send := encode(t, &pgproto3.Bind{PreparedStatement: "guard"}, &pgproto3.Execute{},
		&pgproto3.Query{String: "SELECT 1"})
	p := &heldPeer{send: send, own: 3}
	s := startHeldSession(t, p)
	for round := range 60 {
		value := make([]byte, 8)
		if round == 7 {
			value = make([]byte, 40<<10)
		}
		own := encode(t, &pgproto3.BindComplete{}, &pgproto3.DataRow{Values: [][]byte{value}},
			&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
		relayed := encode(t, &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x")}}},
			&pgproto3.DataRow{Values: [][]byte{[]byte("1")}},
			&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
		batch := encode(t, &pgproto3.Query{String: "SELECT abalance, mz_now() FROM t"})
		s.expectRelayed(t, round, send, batch, append(own, relayed...), relayed)
	}
	p.hmu.Lock()
	held := string(p.held)
	p.hmu.Unlock()
	if want := string(bytes.Repeat([]byte("2DC"), 60)); held != want {
		t.Fatalf("the peer saw %q while dropping, want %q", held, want)
	}
	_ = s.loopClient.Close()
	if r := s.waitReturn(t, "a close"); r.res.Forwarded != 60 {
		t.Fatalf("Run: %+v; want 60 forwarded", r.res)
	}
}

// TestHeldAnswerBack: the peer takes the session back at a frame of its
// own (the guard's error): nothing reaches the client, the client's batch
// is the leftover, and every byte the loop read of the answer, the
// ReadyForQuery behind the error included, goes back to the peer.
func TestHeldAnswerBack(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	send := encode(t, &pgproto3.Bind{PreparedStatement: "guard"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	for round := range 20 {
		p := &heldPeer{send: send, own: 3, backAt: 'E'}
		s := startHeldSession(t, p)
		batch := encode(t, &pgproto3.Query{String: "SELECT abalance, mz_now() FROM t"})
		refusal := encode(t, &pgproto3.BindComplete{},
			&pgproto3.ErrorResponse{Severity: "ERROR", Code: "22P02", Message: "stale"})
		answer := append(bytes.Clone(refusal), encode(t, &pgproto3.ReadyForQuery{TxStatus: 'I'})...)
		// All of it in one write on even rounds (the loop reads the
		// ReadyForQuery with the error), in pieces on odd ones.
		pieces := [][]byte{answer}
		if round%2 == 1 {
			pieces = randomSplit(rng, answer)
		}
		s.expectBack(t, p, round, send, batch, pieces, len(refusal))
	}
}

// expectRelayed has the backend expect send and answer with answer (cut
// by a generator seeded with round), sends the client's batch, and checks
// that the client got exactly relayed.
func (s *session) expectRelayed(t *testing.T, round int, send, batch, answer, relayed []byte) {
	t.Helper()
	backendErr := make(chan error, 1)
	go func() {
		backendErr <- playBackend(s.backend, send, answer, rand.New(rand.NewSource(int64(round))))
	}()
	if _, err := s.client.Write(batch); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(relayed))
	if _, err := io.ReadFull(s.client, got); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	if err := <-backendErr; err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	if !bytes.Equal(got, relayed) {
		t.Fatalf("round %d: the client got %q, want %q", round, got, relayed)
	}
}

// expectBack sends the client's batch, checks that the backend got send,
// answers with pieces (the whole answer, in writes of those sizes) and
// checks that the loop gave the batch back (Back) with at least minUnread
// bytes of the answer given back to the peer, the rest still in the
// backend's socket, and nothing relayed to the client.
func (s *session) expectBack(t *testing.T, p *heldPeer, round int, send, batch []byte, pieces [][]byte, minUnread int) {
	t.Helper()
	answer := bytes.Join(pieces, nil)
	if _, err := s.client.Write(batch); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(send))
	if _, err := io.ReadFull(s.backend, got); err != nil || !bytes.Equal(got, send) {
		t.Fatalf("the backend got %q, %v", got, err)
	}
	for _, piece := range pieces {
		if _, err := s.backend.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	r := s.waitReturn(t, "a Back")
	if r.err != nil || r.res.Over != nil || !bytes.Equal(r.res.Leftover, batch) || r.res.Forwarded != 1 {
		t.Fatalf("round %d: Run %+v, %v; want the batch back", round, r.res, r.err)
	}
	p.hmu.Lock()
	unread, ok := p.unread, p.unreadOK
	p.hmu.Unlock()
	// What the loop did not read is still in the backend's socket.
	rest := answer[len(unread):]
	if !ok || !bytes.HasPrefix(answer, unread) || len(unread) < minUnread {
		t.Fatalf("round %d: the peer got back %q of %q", round, unread, answer)
	}
	if len(rest) > 0 {
		buf := make([]byte, len(rest))
		if _, err := io.ReadFull(s.loopBackend, buf); err != nil || !bytes.Equal(buf, rest) {
			t.Fatalf("round %d: the backend socket kept %q, %v; want %q", round, buf, err, rest)
		}
	}
	// Nothing reached the client.
	_ = s.client.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _ := s.client.Read(make([]byte, 1)); n != 0 {
		t.Fatalf("round %d: the client got bytes of the answer", round)
	}
}

// TestHeldAnswerHoldsClientFrame: a frame of the client's that the peer
// holds (a parsed read's ParseComplete) reaches the client with the
// frames after it, in order, cut anywhere by the backend's writes; the
// peer's own frames before it are dropped, and a Drop after it is held
// as it is (the client gets it).
func TestHeldAnswerHoldsClientFrame(t *testing.T) {
	send := encode(t, &pgproto3.Bind{PreparedStatement: "guard"}, &pgproto3.Execute{},
		&pgproto3.Parse{}, &pgproto3.Bind{PreparedStatement: "mine"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	p := &heldPeer{send: send, own: 3, hold: 2}
	s := startHeldSession(t, p)
	for round := range 40 {
		own := encode(t, &pgproto3.BindComplete{}, &pgproto3.DataRow{Values: [][]byte{[]byte("42")}},
			&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
		relayed := encode(t, &pgproto3.ParseComplete{}, &pgproto3.BindComplete{},
			&pgproto3.DataRow{Values: [][]byte{[]byte("1")}},
			&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
		batch := encode(t, &pgproto3.Parse{Query: "SELECT $1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
		s.expectRelayed(t, round, send, batch, append(own, relayed...), relayed)
	}
	p.hmu.Lock()
	held := string(p.held)
	p.hmu.Unlock()
	if want := string(bytes.Repeat([]byte("2DC12"), 40)); held != want {
		t.Fatalf("the peer saw %q while holding, want %q", held, want)
	}
	_ = s.loopClient.Close()
	if r := s.waitReturn(t, "a close"); r.res.Forwarded != 40 {
		t.Fatalf("Run: %+v; want 40 forwarded", r.res)
	}
}

// TestHeldAnswerBackAfterHold: the peer takes the session back at the
// frame after one of the client's it held (the Bind's 26000 behind the
// ParseComplete): nothing reaches the client, not the held frame either,
// the client's batch is the leftover, and every byte the loop read of the
// answer goes back to the peer.
func TestHeldAnswerBackAfterHold(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	send := encode(t, &pgproto3.Bind{PreparedStatement: "guard"}, &pgproto3.Execute{},
		&pgproto3.Parse{}, &pgproto3.Bind{PreparedStatement: "mine"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	for round := range 20 {
		p := &heldPeer{send: send, own: 2, hold: 1, backAfterHold: 'E'}
		s := startHeldSession(t, p)
		batch := encode(t, &pgproto3.Parse{Query: "SELECT $1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
		gone := encode(t, &pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")},
			&pgproto3.ParseComplete{},
			&pgproto3.ErrorResponse{Severity: "ERROR", Code: "26000", Message: "prepared statement \"mine\" does not exist"})
		answer := append(bytes.Clone(gone), encode(t, &pgproto3.ReadyForQuery{TxStatus: 'I'})...)
		pieces := [][]byte{answer}
		if round%2 == 1 {
			pieces = randomSplit(rng, answer)
		}
		s.expectBack(t, p, round, send, batch, pieces, len(gone))
	}
}
