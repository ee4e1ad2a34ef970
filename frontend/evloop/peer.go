package evloop

import "errors"

// Peer is a session the loop drives. Its methods but Abandon run on the
// loop's goroutine while the session's own goroutine waits in Run, so the
// session needs no lock for what they touch (Run's channel orders the
// two).
type Peer interface {
	// Admit reports whether a client batch (whole frames, its last and
	// only Query or Sync at the end) may be forwarded as it is, and when
	// it may, follows it as the session's own path would have.
	Admit(batch []byte) bool
	// Answer follows one frame of the backend's answer (never a DataRow;
	// typ 0 for a malformed one). false: the session must have its
	// sockets back once this answer is relayed.
	Answer(typ byte, frame []byte) bool
	// Abandon stops the backend's work on a batch whose client is gone.
	// It runs on a goroutine of its own (it may wait for the backend),
	// alongside the session's goroutine, which has its sockets back: it
	// must touch only what that goroutine leaves as it is.
	Abandon()
	// MaxMessageSize is the longest client frame the connection reads:
	// a longer one goes back to it at its header.
	MaxMessageSize() int
	// Readable reports whether whole client frames of a batch not yet
	// ended decode as the connection's own path reads them. The loop
	// asks before it waits for the rest of the batch: a message that
	// path refuses at once goes back to it, its client may be waiting for
	// the error.
	Readable(frames []byte) bool
}

// Result is how a session left the loop.
type Result struct {
	// Leftover are client bytes read and not forwarded: the session's
	// goroutine reads them first.
	Leftover []byte
	// Over: the session ended in the loop (its client went away with a
	// batch at the backend, the backend closed, or the session asked to
	// stop after a FATAL error it relayed).
	Over error
	// Forwarded counts the batches the loop forwarded.
	Forwarded int
}

// Errors of Result.Over.
var (
	ErrClientGone  = errors.New("evloop: client disconnected during a statement")
	ErrBackendGone = errors.New("evloop: backend closed the connection")
	ErrPeerStopped = errors.New("evloop: the session stopped after its answer")
)
