package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/proxy/lease"
	"github.com/mzproxy/mzproxy/proxy/observe"
	"github.com/mzproxy/mzproxy/timeouts"
)

// maxPipeline bounds the extended-protocol messages forwarded before their
// responses are read. Without a bound a client pipelining without Sync
// could fill both socket buffers and deadlock the proxy against its backend.
const maxPipeline = 128

// cancelGrace is how long a canceled session waits for the backend to
// answer its CancelRequest before the backend connection is cut.
const cancelGrace = 5 * time.Second

type copyState uint8

const (
	copyNone     copyState = iota
	copyQuery              // COPY FROM STDIN started by a simple Query
	copyExtended           // COPY FROM STDIN started by Execute
)

// Session is one client's session: it owns one backend connection and
// relays the client's messages to it and the backend's answers back. Its
// state is in owned parts (see doc.go): the relay, the transaction, the
// running statement, the proxy's own prepared statements, and the client's
// prepared statements and portals. Methods other than Cancel run on the
// client connection's goroutine.
type Session struct {
	proxy *Proxy
	id    uint64
	user  string
	db    *database
	log   *logrus.Entry
	obs   *observe.Session

	relayState
	txnState
	statementState
	ownStatements

	isolation string // transaction_isolation: strict serializable or serializable
	// dump: the client is pg_dump (application_name at startup): its
	// catalog queries do not see mzproxy's own objects (dump.go).
	dump bool
	// lastPlain: plainRead's last answer.
	lastPlain plainMemo
	// quietText: noteStatementText's last text without a forgetWord (the
	// empty text has none either): an extended client's Parse and Bind of
	// one statement, and its next Parse of it, then cost one comparison.
	quietText string
	// tempSeen: a text of the session may have made a temporary
	// relation, which timestamped reads then ask for (temps.go).
	tempSeen bool
	// seenPlan: explicitPlan planned the Query with the catalog seen last
	// (seen_read.go).
	seenPlan seenPlan
	// known: what the proxy knows of the backend session's settings
	// without asking (known.go).
	known knownSession

	// stmts and portals are the client's prepared statements and portals
	// (statements.go); occBatch holds the client's messages of an
	// autocommit Bind of a replayable write until its batch shows whether
	// it can take the optimistic loop (write.go).
	stmts    map[string]*preparedStmt
	portals  map[string]*portal
	occBatch *occBatch

	// lease is the session's incarnation in its database (replaced when it
	// was lost).
	lease *lease.Lease

	stopWait func() bool // unregisters the connection-context watcher
	closeMu  sync.Mutex
	closed   bool
}

// relayState is the relay: the two connections, the requests forwarded
// whose answers have not all arrived, and how those answers are relayed.
type relayState struct {
	be     *backend
	client *wire.Writer
	units  queue // requests forwarded whose answers have not all arrived
	muted  bool  // an injected request failed: drop answers until the client's ReadyForQuery
	// clientFailed: a request of the client's failed since its last
	// ReadyForQuery.
	clientFailed bool
	// requestFailed: an ErrorResponse came since the last ReadyForQuery.
	requestFailed bool
	// attemptRefused: a statement the proxy tried in the client's place
	// failed, unseen by the client, whose own statement runs next: a copy
	// of the template database (template.go), a DROP DATABASE that met
	// mzproxy's own connections (dropdb.go).
	attemptRefused bool
	// dropFailed: the last DROP DATABASE the proxy ran for the client
	// failed (dropdb.go).
	dropFailed bool
	// templateCopied: a copy of the template database the proxy ran for
	// the client completed (template.go).
	templateCopied bool
	// skipping: an extended-protocol message failed; the backend ignores
	// everything until Sync.
	skipping bool
	copy     copyState

	// busy is set while a request is with the backend, so that a client
	// gone mid-request cancels the backend's work.
	busy atomic.Bool
	// midRequest is set while an exchange has not reached its end, so a
	// session closed in the middle (client gone) cancels the backend work.
	midRequest bool

	// listening is set once the session ran LISTEN: from then on the
	// backend is also read between statements, so that notifications reach
	// a client that waits for them without sending anything.
	listening bool
	idle      idleReader
	idleRead  *idleReader // &idle while it is started; nil if not
	clientMu  sync.Mutex  // serializes client writes with the idle reader
}

// txStatus is the backend's transaction status, as its last ReadyForQuery
// reported it.
type txStatus byte

const (
	txIdle   txStatus = 'I' // no transaction block
	txBlock  txStatus = 'T' // in a transaction block
	txFailed txStatus = 'E' // in a failed transaction block
)

// txnState is the client's transaction.
type txnState struct {
	tx txStatus
	// writeSlot: the current backend transaction holds the write slot
	// (the write slot ran in it).
	writeSlot bool
	// slotSQL is the client's statement text before which the proxy is
	// taking the write slot, until the next ReadyForQuery: an error of
	// the slot is told as the statement's (slotRefusal).
	slotSQL string
	// batchExecuted: an Execute of the client's was sent since its last
	// Sync (or Query): a DROP DATABASE now would run inside the batch's
	// implicit transaction, which PostgreSQL refuses (25001), and a write
	// now is not the batch's first (no optimistic loop).
	batchExecuted bool
	// blockBuilt: the write targets (builtKey) whose history the open
	// block built (lazy_history.go); forgotten at its end.
	blockBuilt map[string]bool
	// blockBuilds: those builds, kept when the block commits.
	blockBuilds []*historyBuilds
	// ddlCatalog: the catalog snapshot current at the session's last DDL,
	// which historyBuildsFor does not trust; ddlBuilt: the targets the
	// session's writes built since, and those of its own (builtKey) since
	// the proxy last lost track of its search_path.
	ddlCatalog *catalogSnapshot
	ddlBuilt   map[string]bool
	// hiddenBuilds: the oids of tables whose refusing trigger failed a
	// statement of the client's (a write the proxy did not see coming),
	// built by the session's next write (lazy_history.go).
	hiddenBuilds []string
	// txn is the client's transaction block (read-only transactions).
	txn readTxn
	// portalHolds are the read holds of the transaction (its portals' and
	// cursors'), released when it ends.
	portalHolds []heldRead
	// domainCache: the tables of the last timedomain (txn.go).
	domainCache domainCache
}

// statementState is the running statement: its deadline and cancel, and
// the settings that give them.
type statementState struct {
	// settings are the session's time-valued settings (statement_timeout
	// and the idle timeouts), followed as SET and RESET pass through.
	settings timeouts.Settings
	// budget is the running statement's deadline and phase; nil between
	// statements.
	budget *timeouts.Budget
	// configTimeout is the configured statement_timeout last applied to
	// settings.
	configTimeout time.Duration
	// stmt is the context messages are handled under (nil until the
	// first, and after one was canceled); inStatement is set while a
	// statement is open, for its cancel function.
	stmt        *statementContext
	inStatement atomic.Bool
	// stmtCancel cancels the message being handled now (nil between
	// messages); Cancel calls it from another goroutine, under stmtMu.
	stmtMu     sync.Mutex
	stmtCancel context.CancelCauseFunc
	// backendCanceled: the statement has sent the backend its
	// CancelRequest (once is enough).
	backendCanceled atomic.Bool
	// copyWaiting: a COPY FROM STDIN waits for the client's data (set
	// before stmtCancel is withdrawn, for Cancel).
	copyWaiting atomic.Bool
	// executeQueued: the open batch has an Execute the backend has not
	// answered, queued until the batch's Sync or Flush (set when a message
	// has been handled, for Cancel). batchCanceled: a client's cancel came
	// while it had: every later message of the batch is handled canceled
	// until an exchange has sent the backend its cancel behind the
	// Execute.
	executeQueued atomic.Bool
	batchCanceled atomic.Bool
	// loopFlight: the event loop has a batch of the session's at the
	// backend (evloop.go): a Cancel sends the backend's CancelRequest.
	loopFlight atomic.Bool
	// loop is the scratch space of Admit, kept to be reused (the loop's
	// goroutine only, while the session's own waits).
	loop loopScratch
	// admitting: Admit runs (the loop's goroutine, which must not wait):
	// a read that would build a history first is left to the session's
	// own goroutine (buildForRead).
	admitting bool
	// loopRead is the guarded read the loop sent (loop_read.go).
	loopRead loopRead
	// loopTxn is the read-only transaction's statement the loop sent
	// (loop_txn.go).
	loopTxn loopTxn
	// canceledReply: the backend answered the statement with 57014 after
	// the statement's context ended.
	canceledReply bool
}

// ownStatements are the proxy's own prepared statements on the backend
// connection: each exists for the incarnation given (0: not prepared) and
// writes for it; lostHoldPrepared: raise_fenced is prepared (see
// failLostHold); pinPeekPrepared, pinCheckPrepared: pin_peek and the
// gate-less pin's check are (txn.go); pinGuardPrepared, pinGuardRevPrepared:
// the pin that rides with a first read is, without and with its check of
// the catalog revision (pin_read.go); pinBeginPrepared: the BEGIN the
// event loop sends with a first read is (loop_txn.go, sendPinBegin).
type ownStatements struct {
	writeSlotPrepared, deferredSlotPrepared int64
	lostHoldPrepared                        bool
	pinPeekPrepared, pinCheckPrepared       bool
	pinGuardPrepared, pinGuardRevPrepared   bool
	pinBeginPrepared                        bool
	pinMsgs                                 pinMessages // reused by the pin and the read guard (pin_read.go, seen_read.go)
	// explicitBind and explicitParams are the client's Bind as
	// forwardExplicitBind sends it, reused from one read to the next.
	explicitBind   pgproto3.Bind
	explicitParams [][]byte
}

func newSession(ctx context.Context, p *Proxy, be *backend, client *wire.Writer, log *logrus.Entry) *Session {
	s := &Session{proxy: p, log: log, isolation: strictSerializable}
	s.be, s.client, s.tx = be, client, txIdle
	// The connection's context ends when the client has gone or the server
	// forces connections closed: stop the backend's work then.
	s.stopWait = context.AfterFunc(ctx, s.abandon)
	be.async = s.relayAsync
	return s
}

// relayAsync sends the client an asynchronous message of the backend's. It
// is flushed at once when nothing more has been read, as the reader may
// now wait (a notification must reach a client that sends nothing).
func (s *Session) relayAsync(frame []byte) error {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	if err := s.client.WriteFrame(frame); err != nil {
		return err
	}
	if s.be.r.Buffered() > 0 {
		return nil
	}
	return s.client.Flush()
}

// ParameterStatus implements frontend.Session.
func (s *Session) ParameterStatus() map[string]string { return s.be.params }

// TxStatus implements frontend.Session.
func (s *Session) TxStatus() byte { return byte(s.tx) }

// CopyInProgress implements frontend.Session.
func (s *Session) CopyInProgress() bool { return s.copy != copyNone }

// Handle implements frontend.Session: it forwards the message and, where the
// protocol says the client now waits for answers, relays them.
func (s *Session) Handle(ctx context.Context, msg pgproto3.FrontendMessage, frame []byte) error {
	if s.idleRead != nil {
		if err := s.stopIdleReader(); err != nil {
			return err
		}
	}
	if s.loopTxn.beginDeferred {
		if err := s.sendDeferredBegin(ctx); err != nil {
			return err
		}
	}
	s.observeMessage(msg)
	copyQuery := s.copy == copyQuery
	err := s.handleStatement(ctx, msg, frame)
	if err != nil {
		err = s.abortAfterRefusal(ctx, msg, err)
	}
	s.observeHandled(msg, copyQuery, err)
	if err == nil {
		s.watchBackend()
	}
	return err
}

// LoopLeft implements frontend.LoopSession: the event loop gave the
// session back between statements, its client idle (the backend spoke
// unasked, or the loop cannot follow what comes next); a read-only
// transaction it followed may hold its timestamp.
func (s *Session) LoopLeft() { s.watchBackend() }

// watchBackend starts the idle reader when the backend must be read while
// the client is idle (watchIdle).
func (s *Session) watchBackend() {
	if s.idleRead != nil || !s.watchIdle() {
		return
	}
	delay := time.Duration(0)
	if !s.listening {
		delay = idleWatchDelay
	}
	s.startIdleReader(delay)
}

// idleWatchDelay is how long a session idle in a transaction with read
// holds waits before it reads the backend. Read at once, every statement
// of a read-only transaction paid for a goroutine, two read deadlines and
// a wake-up (a tenth of the proxy's CPU in one); a client that sends its
// next statement sooner pays for a timer only, and one that idles longer
// learns that the backend ended its transaction, and has its holds
// released, that much later.
const idleWatchDelay = 50 * time.Millisecond

// watchIdle reports whether the backend must be read while the client is
// idle: a session that LISTENs gets its notifications between
// transactions, and one idle in a transaction with read holds learns at
// once when the backend ends it (idle_in_transaction_session_timeout,
// pg_terminate_backend), so that the holds are released then.
func (s *Session) watchIdle() bool {
	if s.midRequest || s.copy != copyNone {
		return false
	}
	holds := len(s.portalHolds) > 0 || len(s.txn.holds) > 0
	return s.listening && s.tx == txIdle || holds && s.tx != txIdle
}

// backendErrorIsFatal reports whether an ErrorResponse ends the backend
// connection; the client has been sent the backend's own message, so the
// session only has to end.
func (s *Session) backendErrorIsFatal(frame []byte) (bool, error) {
	var er pgproto3.ErrorResponse
	if err := er.Decode(wire.Body(frame)); err != nil {
		return true, s.lost(err)
	}
	switch er.Severity {
	case "FATAL", "PANIC":
		s.log.WithField("sqlstate", er.Code).Info("backend ended the session: " + er.Message)
		return true, wire.ErrSessionOver
	}
	return false, nil
}

// lost reports a failed backend connection.
func (s *Session) lost(err error) error {
	var ce clientError
	if errors.As(err, &ce) {
		// The client is gone: nothing to tell it.
		return ce.err
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return pgerr.Fatal(pgerr.QueryCanceled, "canceling statement: the client connection closed")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return pgerr.Fatal(pgerr.ConnectionFailure, "server closed the connection unexpectedly")
	}
	var fe *wire.FrameError
	if errors.As(err, &fe) {
		return pgerr.Fatal(pgerr.ProtocolViolation, "malformed message from the backend: %s", fe.Msg)
	}
	return pgerr.Fatal(pgerr.ConnectionFailure, "lost the connection to the backend: %v", err)
}

// isListen reports whether a CommandComplete frame is LISTEN's.
func isListen(frame []byte) bool {
	return len(frame) >= 12 && string(frame[5:12]) == "LISTEN\x00"
}

// idleReader is the goroutine that reads the backend while the client is
// idle, begun at once or once the session has been idle for a delay. One
// per session, reused. The delay is kept by one timer that is not
// withdrawn between statements: when it fires it begins the reader if
// the session has been idle long enough, waits again for the rest if it
// is idle for less, and lapses if it is busy (its next idle sets it
// again). So a statement that follows the last within the delay costs a
// clock read, not a timer's reset and stop; the goroutine and its channel
// are made only when the reader begins.
type idleReader struct {
	mu        sync.Mutex
	armed     bool      // idle since idleSince: the reader may begin
	idleSince time.Time // when the session last became idle
	delay     time.Duration
	running   bool // it reads the backend (until a read deadline)
	timerSet  bool // the timer will fire, at fireAt
	fireAt    time.Time
	timer     *time.Timer
	done      chan struct{} // closed when the running reader has stopped
}

// startIdleReader relays what the backend sends while the session is idle
// (NotificationResponse, NoticeResponse, ParameterStatus, or the FATAL error
// of a terminated backend) from delay on, until stopIdleReader.
func (s *Session) startIdleReader(delay time.Duration) {
	r := &s.idle
	s.idleRead = r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed, r.delay = true, delay
	if delay <= 0 {
		s.beginIdleRead(r)
		return
	}
	now := time.Now()
	r.idleSince = now
	if r.timerSet && !r.fireAt.After(now.Add(delay)) {
		// It fires soon enough, and then looks at idleSince.
		return
	}
	s.setIdleTimer(r, delay)
}

// setIdleTimer sets the timer to fire after d; r.mu is held.
func (s *Session) setIdleTimer(r *idleReader, d time.Duration) {
	r.timerSet, r.fireAt = true, time.Now().Add(d)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, func() { s.idleTimerFired(r) })
		return
	}
	r.timer.Reset(d)
}

// idleTimerFired begins the reader of a session idle for its delay, or
// sets the timer again for the rest of it.
func (s *Session) idleTimerFired(r *idleReader) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timerSet = false
	if !r.armed || r.running {
		return
	}
	if rest := r.delay - time.Since(r.idleSince); rest > 0 {
		s.setIdleTimer(r, rest)
		return
	}
	s.beginIdleRead(r)
}

// beginIdleRead starts the reader's goroutine; r.mu is held.
func (s *Session) beginIdleRead(r *idleReader) {
	r.running = true
	r.done = make(chan struct{})
	go s.readIdle(r.done)
}

// readIdle is the idle reader's loop; it closes done when it returns.
func (s *Session) readIdle(done chan struct{}) {
	defer close(done)
	for {
		typ, frame, err := s.be.next()
		if err != nil {
			// A deadline from stopIdleReader, or a dead backend
			// (noticed again on the next request).
			return
		}
		s.clientMu.Lock()
		err = s.client.WriteFrame(frame)
		if err == nil {
			err = s.client.Flush()
		}
		s.clientMu.Unlock()
		if typ == 'E' {
			// Only a FATAL error comes unasked: the backend is gone,
			// and with it the transaction the holds protected.
			s.releasePortalHolds()
			s.releaseTxnHolds()
		}
		if err != nil || typ == 'E' {
			return
		}
	}
}

// stopIdleReader withdraws an idle reader that has not begun, or
// interrupts its blocked read and waits for it. A frame cut by the
// deadline stays buffered: the reader only peeks until a frame is
// complete.
func (s *Session) stopIdleReader() error {
	r := s.idleRead
	s.idleRead = nil
	r.mu.Lock()
	r.armed = false
	running, done := r.running, r.done
	r.mu.Unlock()
	if !running {
		// The timer, if set, finds the session busy and lapses.
		return nil
	}
	_ = s.be.nc.SetReadDeadline(time.Now())
	<-done
	r.mu.Lock()
	r.running = false
	r.mu.Unlock()
	if err := s.be.nc.SetReadDeadline(time.Time{}); err != nil {
		return s.lost(err)
	}
	return nil
}

// abandon stops backend work whose client is gone: cancel the running
// query, and if the backend does not answer within the grace period, cut
// the backend connection so the session's goroutine is released.
func (s *Session) abandon() {
	if s.busy.Load() {
		if err := s.be.cancel(context.Background()); err != nil {
			s.log.WithError(err).Warn("could not send cancel request to backend")
		}
	}
	_ = s.be.nc.SetReadDeadline(time.Now().Add(cancelGrace))
}

// Close implements frontend.Session.
func (s *Session) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	defer s.proxy.leaveDatabase(s.db)
	s.obs.Close()
	s.stopWait()
	if sc := s.stmt; sc != nil {
		sc.stop()
		sc.cancel(nil)
	}
	if s.idleRead != nil {
		_ = s.stopIdleReader()
	}
	// The transaction and its portals end with the connection (after the
	// idle reader, which may release them too).
	s.endTxn()
	s.releasePortalHolds()
	if lr := &s.loopRead; lr.active {
		// The connection ended with the loop's read at the backend.
		lr.active = false
		s.release(lr.g.hold)
	}
	if s.midRequest || s.copy != copyNone {
		// Closing mid-request: make sure the backend's work stops
		// rather than running on for a client that is gone.
		_ = s.be.cancel(context.Background())
	}
	s.be.close()
	return nil
}
