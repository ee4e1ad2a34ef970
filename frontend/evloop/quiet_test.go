//go:build linux

package evloop

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// quietPeer is a fakePeer that is a Quieter: its answers are quiet while
// quiet is set.
type quietPeer struct {
	*fakePeer
	quiet bool
}

func (p *quietPeer) QuietAnswer() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quiet
}

func (p *quietPeer) takeAnswers() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := string(p.answers)
	p.answers = nil
	return a
}

// TestQuieterSeesOnlyFramesWithState: after a quiet Admit the loop relays
// an answer's ParseComplete, BindComplete, RowDescription, NoData,
// CloseComplete and EmptyQueryResponse without calling Answer, as it does
// DataRows, and calls it for every frame a session follows (notices,
// ParameterStatus, notifications, errors, CommandComplete, COPY's start,
// ReadyForQuery); after a batch it did not say quiet for, for all of them.
// The client gets every byte either way, the backend's writes cut
// anywhere.
func TestQuieterSeesOnlyFramesWithState(t *testing.T) {
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	peer := &quietPeer{fakePeer: &fakePeer{}}
	done := runShared(t, lc, lb, peer)
	batch := encode(t, &pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	row := &pgproto3.DataRow{Values: [][]byte{[]byte("1")}}
	answers := []struct {
		msgs        []pgproto3.Message
		quiet, seen string // what Answer sees, quiet and not
	}{
		{
			msgs: []pgproto3.Message{&pgproto3.ParseComplete{}, &pgproto3.BindComplete{},
				&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x")}}}, row, row,
				&pgproto3.CommandComplete{CommandTag: []byte("SELECT 2")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}},
			quiet: "CZ", seen: "12TCZ",
		},
		{
			msgs: []pgproto3.Message{&pgproto3.ParseComplete{}, &pgproto3.NoticeResponse{Message: "n"},
				&pgproto3.BindComplete{}, &pgproto3.ParameterStatus{Name: "a", Value: "b"}, &pgproto3.NoData{},
				&pgproto3.NotificationResponse{Channel: "c"}, &pgproto3.EmptyQueryResponse{},
				&pgproto3.CloseComplete{}, &pgproto3.ErrorResponse{Code: "42P01"}, &pgproto3.ReadyForQuery{TxStatus: 'E'}},
			quiet: "NSAEZ", seen: "1N2SnAI3EZ",
		},
		{
			msgs: []pgproto3.Message{&pgproto3.ParseComplete{}, &pgproto3.BindComplete{},
				&pgproto3.CopyInResponse{}, &pgproto3.ReadyForQuery{TxStatus: 'I'}},
			quiet: "GZ", seen: "12GZ",
		},
	}
	round := 0
	for _, quiet := range []bool{true, false, true} {
		for _, a := range answers {
			answer := encode(t, a.msgs...)
			peer.mu.Lock()
			peer.quiet = quiet
			peer.mu.Unlock()
			relayRound(t, client, backend, batch, answer, round)
			round++
			want := a.seen
			if quiet {
				want = a.quiet
			}
			if got := peer.takeAnswers(); got != want {
				t.Fatalf("round %d (quiet %v): Answer saw %q, want %q", round, quiet, got, want)
			}
		}
	}
	if _, err := client.Write(encode(t, &pgproto3.Terminate{})); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.res.Over != nil || r.res.Forwarded != round {
			t.Fatalf("Run %+v, %v; want %d batches forwarded", r.res, r.err, round)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop kept the session after a Terminate")
	}
}

// TestQuietEndsAtReadyForQuery: a frame after a quiet answer's
// ReadyForQuery, of a type the loop need not show the peer within the
// answer, is no answer of the batch: the peer sees it, and the session
// goes back once it is relayed (as for any frame after the answer).
func TestQuietEndsAtReadyForQuery(t *testing.T) {
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	peer := &quietPeer{fakePeer: &fakePeer{}, quiet: true}
	done := runShared(t, lc, lb, peer)
	batch := encode(t, &pgproto3.Query{String: "SELECT 1"})
	// One write: the stray ParseComplete comes in the answer's read.
	answer := encode(t, &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x")}}},
		&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")}, &pgproto3.ReadyForQuery{TxStatus: 'I'},
		&pgproto3.ParseComplete{})
	if _, err := client.Write(batch); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(batch))
	_ = backend.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(backend, got); err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Write(answer); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, len(answer))
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("answer %q, %v", got, err)
	}
	select {
	case r := <-done:
		if r.res.Over != ErrPeerStopped {
			t.Fatalf("Run %+v, %v; want ErrPeerStopped (a frame after the answer)", r.res, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop kept the session after a frame that followed the answer")
	}
	if got := peer.takeAnswers(); got != "CZ1" {
		t.Fatalf("Answer saw %q, want %q", got, "CZ1")
	}
}
