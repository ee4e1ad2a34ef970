package frontend

import (
	"context"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/frontend/wire"
)

// Handler opens sessions. The proxy implements it; the frontend never looks
// inside.
type Handler interface {
	// Connect opens the session of a client that has passed the frontend's
	// authentication. With passthrough authentication the handler itself
	// authenticates the client through relay (the frontend has not), and must
	// return only after the backend accepted it. Responses of the session are
	// written to w. An error is sent to the client as FATAL.
	Connect(ctx context.Context, start wire.Startup, relay wire.AuthRelay, w *wire.Writer) (Session, error)
}

// Session serves one client. All its methods except Cancel are called from
// the connection's own goroutine, one at a time, so it needs no lock for its
// own state.
type Session interface {
	// ParameterStatus returns the parameters to report to the client after
	// authentication (server_version, client_encoding, ...).
	ParameterStatus() map[string]string

	// Handle processes one client message (decoded as msg, raw as frame,
	// which is only valid during the call) and writes every response it owes
	// through the session's writer. It flushes the writer whenever the client
	// must see what was written (at ReadyForQuery, CopyInResponse, ...).
	//
	// An error of severity ERROR means the message failed and nothing more
	// will be written for it: the frontend sends the ErrorResponse, then
	// ReadyForQuery for a Query, or skips messages until Sync for the
	// extended protocol. Before returning such an error the session must have
	// written the responses owed to earlier messages. Any other error ends the
	// connection (sent as FATAL when it is a *pgerr.Error).
	Handle(ctx context.Context, msg pgproto3.FrontendMessage, frame []byte) error

	// TxStatus is the transaction status for ReadyForQuery: 'I', 'T' or 'E'.
	TxStatus() byte

	// CopyInProgress reports whether a COPY FROM STDIN has started and not
	// ended: the backend then reads the client's messages as COPY data.
	CopyInProgress() bool

	// Cancel asks the session to stop the statement it is running now, if
	// any. It is called from another goroutine (a CancelRequest's).
	Cancel()

	// Close releases the session's resources. The client connection is
	// closed by the frontend.
	Close() error
}

// LoopSession is a Session the event loop can drive (Config.EventLoop)
// between its messages. The frontend offers it the loop only when nothing
// of the client's is buffered or unanswered (no extended-protocol batch
// open) and the client is not on TLS; the loop calls the Peer methods on
// its own goroutine while the connection's goroutine waits.
type LoopSession interface {
	Session
	// Admit, Answer, Unread and Abandon are the session's part of
	// evloop.Peer (the connection adds the rest: loopPeer).
	Admit(batch []byte) (send []byte, ok bool)
	Answer(typ byte, frame []byte) evloop.Verdict
	Unread(answer []byte)
	Abandon()
	// LoopBackend returns the backend's socket when the session is idle
	// in a state the loop can follow (no transaction, nothing queued, no
	// COPY, LISTEN, holds or statement timeout), nil otherwise. It is
	// asked before the connection looks at its writer: while it would
	// say nil, a goroutine of the session's may be writing to the client.
	LoopBackend() *evloop.Conn
	// LoopLeft tells the session that the loop gave its sockets back
	// with nothing of the client's left to handle: the client idles, and
	// the session may have to watch its backend meanwhile.
	LoopLeft()
}

// LoopReplier is a LoopSession that may answer a batch it admitted
// itself (evloop.Replier): Reply, asked right after Admit, returns the
// whole answer, or nil when the batch goes to the backend.
type LoopReplier interface {
	Reply() []byte
}
