//go:build linux

package evloop

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// crashingPeer is a fakePeer whose backend crashes while the loop follows
// its first answer frame: from inside Answer (the loop's goroutine, after
// its read of that frame) the test's end of the backend writes a last
// frame and closes, as a PostgreSQL backend's quickdie does (a WARNING,
// then _exit) at a crash or an immediate shutdown. The last frame and the
// end of the stream are then in the socket before the loop waits again,
// and its next epoll_wait reports them as one edge.
type crashingPeer struct {
	fakePeer
	backend net.Conn
	last    []byte
	once    sync.Once
	err     error
}

func (p *crashingPeer) Answer(typ byte, frame []byte) Verdict {
	p.once.Do(func() {
		if _, p.err = p.backend.Write(p.last); p.err == nil {
			p.err = p.backend.Close()
		}
	})
	return p.fakePeer.Answer(typ, frame)
}

// TestBackendEndAfterItsLastFrame: a backend that ends its connection
// right after a frame (the notice of a crash, with no ReadyForQuery) has
// its session given back with ErrBackendGone, after the frame reached
// the client. The loop once cleared a backend socket's readiness after a
// short read although the hang-up had come with the bytes it read: no
// edge follows a hang-up, so the loop waited for the backend forever and
// so did its client (session 24: a read through the proxy hung for 304 s
// after PostgreSQL's immediate restart, TestFault19RestartInterrupted).
func TestBackendEndAfterItsLastFrame(t *testing.T) {
	lc, client := socketPair(t)
	lb, backend := socketPair(t)
	first := encode(t, &pgproto3.NoticeResponse{Severity: "NOTICE", Code: "00000", Message: "still running"})
	last := encode(t, &pgproto3.NoticeResponse{Severity: "WARNING", Code: "57P01",
		Message: "terminating connection due to immediate shutdown command"})
	peer := &crashingPeer{backend: backend, last: last}
	done := runShared(t, lc, lb, peer)
	batch := encode(t, &pgproto3.Query{String: "SELECT sum(v) FROM acct"})
	if _, err := client.Write(batch); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(backend, make([]byte, len(batch))); err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Write(first); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(first)+len(last))
	if _, err := io.ReadFull(client, got); err != nil || !bytes.Equal(got, append(bytes.Clone(first), last...)) {
		t.Fatalf("the client got %q, %v; want both frames", got, err)
	}
	s := &session{done: done}
	r := s.waitReturn(t, "its backend ended after its last frame")
	if peer.err != nil {
		t.Fatalf("the backend's last frame and close: %v", peer.err)
	}
	if r.err != nil || r.res.Over != ErrBackendGone {
		t.Fatalf("Run: %+v, %v; want ErrBackendGone", r.res, r.err)
	}
}
