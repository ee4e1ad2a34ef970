package evloop

import "errors"

// Peer is a session the loop drives. Its methods but Abandon run on the
// loop's goroutine while the session's own goroutine waits in Run, so the
// session needs no lock for what they touch (Run's channel orders the
// two).
type Peer interface {
	// Admit reports whether a client batch (whole frames, its last and
	// only Query or Sync at the end) may be forwarded, and when it may,
	// follows it as the session's own path would have. send is what goes
	// to the backend instead of the batch when it is not nil (a guarded
	// read: the session's own statements in front of the client's): the
	// answer's first frames may then be the session's own, and nothing of
	// the answer is relayed until Answer says Relay (see Verdict).
	Admit(batch []byte) (send []byte, ok bool)
	// Answer follows one frame of the backend's answer (never a DataRow,
	// except while the answer is held, nor a frame a Quieter said it need
	// not see; typ 0 for a malformed one).
	Answer(typ byte, frame []byte) Verdict
	// Unread takes back the backend's answer read so far, none of it
	// relayed, when Answer said Back: the session's goroutine reads it
	// again, and the client's batch (Result.Leftover), as if the loop had
	// never had them. Called on the loop's goroutine before Run returns.
	Unread(answer []byte)
	// Abandon stops the backend's work on a batch whose client is gone.
	// It runs on a goroutine of its own (it may wait for the backend),
	// alongside the session's goroutine, which has its sockets back: it
	// must touch only what that goroutine leaves as it is.
	Abandon()
	// MaxMessageSize is the longest client frame the connection reads:
	// a longer one goes back to it at its header. Asked once, when Run
	// takes the session.
	MaxMessageSize() int
	// Readable reports whether whole client frames of a batch not yet
	// ended decode as the connection's own path reads them. The loop
	// asks before it waits for the rest of the batch: a message that
	// path refuses at once goes back to it, its client may be waiting for
	// the error.
	Readable(frames []byte) bool
}

// Delegator is a Peer whose Admit and Answer are another value's (a
// connection's Peer wrapping its session): the loop calls that value's
// directly, once per batch and once per frame of an answer, rather than
// through the wrapper's promoted methods (a second indirect call each).
type Delegator interface {
	// Follower is the value whose Admit and Answer the Peer's are.
	Follower() Follower
}

// Follower is the part of a Peer the loop calls on every batch and frame.
type Follower interface {
	Admit(batch []byte) (send []byte, ok bool)
	Answer(typ byte, frame []byte) Verdict
}

// Quieter is a Follower that may say, batch by batch, that the answer of
// the batch it just admitted needs no Answer for its frames that carry no
// state (QuietFrame: ParseComplete, BindComplete, CloseComplete,
// RowDescription, NoData, ParameterDescription, PortalSuspended,
// EmptyQueryResponse): the loop relays those as it does DataRows, without
// a copy or a call. Every other frame (CommandComplete, ReadyForQuery, an
// error, a notice, a ParameterStatus, COPY's) still goes to Answer, and
// so does any frame after the answer's ReadyForQuery. Whether the
// Follower is a Quieter is looked at once, when Run takes the session.
type Quieter interface {
	// QuietAnswer is asked right after Admit said ok without a send of
	// its own (a held answer is always followed frame by frame): true
	// when Answer would only relay the answer's frames of QuietFrame.
	QuietAnswer() bool
}

// QuietFrame: a backend frame that changes nothing a session follows, its
// answer to a Parse, Bind, Close or Describe, or an empty query's (the
// frames a Quieter's quiet answer has relayed without an Answer).
func QuietFrame(typ byte) bool {
	switch typ {
	case '1', '2', '3', 'T', 'n', 't', 's', 'I':
		return true
	}
	return false
}

// Replier is a Peer that may answer a batch it admitted itself, with
// nothing sent to the backend: a statement whose answer it knows (a
// read-only transaction's BEGIN, whose backend statement rides with the
// transaction's first read). The loop asks it right after Admit said ok
// (whether the Peer is a Replier is looked at once, when Run takes it).
type Replier interface {
	// Reply is the whole answer to the batch Admit just admitted (its
	// ReadyForQuery last), written to the client as it is; nil: the batch
	// goes to the backend. The loop writes it before it reads the
	// client again, and the peer keeps it unchanged until then.
	Reply() []byte
}

// Verdict is what the loop does with a frame of the backend's answer.
type Verdict uint8

const (
	// Relay: the frame goes to the client.
	Relay Verdict = iota
	// RelayThenBack: the frame goes to the client, and the session wants
	// its sockets back once this answer is relayed.
	RelayThenBack
	// Drop: the frame answers the session's own statement (Admit's send)
	// and is not relayed. Only the frames before the first relayed one of
	// an answer can be dropped; a Drop after it is a Relay.
	Drop
	// Back: while nothing of the answer has been relayed, the session's
	// goroutine takes over at once: the answer read so far goes back to
	// the session (Unread), the client's batch to the connection
	// (Result.Leftover). After a relayed frame it is a RelayThenBack.
	Back
	// Hold: the frame is the client's, but not relayed yet: while the
	// answer is held (Admit's send), it stays held with the frames before
	// it, and is relayed with the next frame the peer relays, or given
	// back with the answer at a Back (nothing of it reached the client).
	// A Drop after a Hold is a Hold (the dropped frames are the answer's
	// first). Outside a held answer it is a Relay.
	Hold
)

// Result is how a session left the loop.
type Result struct {
	// Leftover are client bytes read and not forwarded (or forwarded and
	// given back with their answer, Verdict Back): the session's
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
