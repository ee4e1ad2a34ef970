package frontend

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/pgerr"
)

// maxLoopBackoff bounds how many messages a connection reads itself after
// a turn in the event loop that forwarded nothing (its client sends what
// the loop does not forward): joining and leaving costs system calls of
// its own, about 30 (the sockets' duplication, epoll registrations both
// ways, net.FileConn's look-ups) and two goroutine hand-offs, as much as a
// statement or two on the session's own path. At 64, a client of
// read-only transactions (BEGIN, reads, COMMIT: a turn at each prepared
// BEGIN, which the loop did not forward until session 14) paid a failed
// turn every 16 transactions,
// about 2.4 system calls per transaction of 32 (strace); at 512 that is
// every 128. A session whose statements turn plain again waits for at
// most 512 of its own messages before the loop drives it.
const maxLoopBackoff = 512

// runLoop lets the event loop drive the session until it gives the
// sockets back, and reports whether the connection goes on. The client
// bytes the loop read and did not forward are read first from then on.
func (c *conn) runLoop() bool {
	loop := c.srv.cfg.EventLoop
	if loop == nil || c.tls || c.loopSkip > 0 || c.prefix.Len() > 0 {
		c.loopSkip = max(c.loopSkip-1, 0)
		return true
	}
	client, ok := c.nc.(*evloop.Conn)
	ls, ok2 := c.sess.(LoopSession)
	if !ok || !ok2 {
		return true
	}
	// The session first: while it relays what the backend sends unasked
	// (LISTEN) its own goroutine writes to c.w, which may be looked at
	// only once LoopBackend has said no such goroutine runs.
	be := ls.LoopBackend()
	if be == nil || c.w.Buffered() > 0 {
		return true
	}
	res, err := loop.Run(client, be, newLoopPeer(ls, c.srv.cfg.MaxMessageSize))
	if errors.Is(err, evloop.ErrDeadlineSet) || errors.Is(err, evloop.ErrClosed) && res.Over == nil {
		// Not taken (a drain, or the loop was closed): the connection
		// goes on by itself.
		return true
	}
	if res.Forwarded == 0 {
		c.loopBackoff = min(max(2*c.loopBackoff, 1), maxLoopBackoff)
		c.loopSkip = c.loopBackoff
	} else {
		c.loopBackoff = 0
	}
	if len(res.Leftover) > 0 {
		c.prefix.Reset(res.Leftover)
		c.r.Reset(&c.prefix)
	} else if err == nil && res.Over == nil {
		ls.LoopLeft()
	}
	switch {
	case err != nil:
		c.closeWhy = "event loop: " + err.Error()
		return false
	case errors.Is(res.Over, evloop.ErrClientGone):
		c.closeWhy = "client disconnected"
		return false
	case errors.Is(res.Over, evloop.ErrClosed):
		// The loop was closed with the session's batch at the backend,
		// whose answer is lost: the proxy is shutting down.
		c.closeWhy = "event loop closed"
		return false
	case errors.Is(res.Over, evloop.ErrBackendGone):
		c.closeWhy = "backend connection ended"
		c.fatal(pgerr.Fatal(pgerr.ConnectionFailure, "server closed the connection unexpectedly"))
		return false
	case res.Over != nil:
		// The session relayed the backend's FATAL error: it is over.
		c.closeWhy = "backend connection ended"
		return false
	}
	return true
}

// prefixReader reads the bytes the event loop left, then the socket.
type prefixReader struct {
	rest []byte
	src  io.Reader
}

func (p *prefixReader) Reset(b []byte) { p.rest = append(p.rest[:0], b...) }

func (p *prefixReader) Len() int { return len(p.rest) }

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.rest) == 0 {
		return p.src.Read(b)
	}
	n := copy(b, p.rest)
	p.rest = p.rest[n:]
	return n, nil
}

// loopPeer is the evloop.Peer of a connection: its session follows the
// batches, the connection judges their frames as its own reader and
// decoder would.
type loopPeer struct {
	LoopSession
	maxMessageSize int
}

// replyingLoopPeer is the loopPeer of a session that answers some batches
// itself (LoopReplier): the loop sees it as an evloop.Replier.
type replyingLoopPeer struct {
	*loopPeer
	LoopReplier
}

// newLoopPeer is the session's evloop.Peer: a Replier when the session
// is a LoopReplier. Decided here, once per turn in the loop, not by a
// type assertion at each batch.
func newLoopPeer(ls LoopSession, maxMessageSize int) evloop.Peer {
	p := &loopPeer{ls, maxMessageSize}
	if r, ok := ls.(LoopReplier); ok {
		return replyingLoopPeer{p, r}
	}
	return p
}

func (p *loopPeer) MaxMessageSize() int { return p.maxMessageSize }

// Follower implements evloop.Delegator: the loop calls the session's
// Admit and Answer itself.
func (p *loopPeer) Follower() evloop.Follower { return p.LoopSession }

// Readable decodes whole frames as serve does: a message it would answer
// with an error at once is not left waiting for the rest of its batch.
func (p *loopPeer) Readable(frames []byte) bool {
	for len(frames) > 0 {
		n := 1 + int(binary.BigEndian.Uint32(frames[1:5]))
		if _, err := decodeFrontend(frames[0], frames[:n]); err != nil {
			return false
		}
		frames = frames[n:]
	}
	return true
}
