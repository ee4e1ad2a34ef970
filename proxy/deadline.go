package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/timeouts"
)

// Statement deadlines and cancellation.
//
// Every client message is handled under a statement context (package
// timeouts): it ends at the statement's deadline, statement_timeout after
// the statement arrived, or when the client's CancelRequest names this
// session while the message is being handled, with a cause that says which.
// Every wait of the proxy's own takes that context. Work the backend is
// doing is stopped by a CancelRequest to the backend, sent when the context
// ends; the backend answers 57014 "canceling statement due to user
// request", which the client sees as "due to statement timeout" when the
// deadline was the cause.
//
// No stray cancel: a client cancel reaches only the message being handled
// when it arrives, the COPY FROM STDIN waiting for the client's data, or
// the batch whose Execute waits in the proxy for its Sync (PostgreSQL
// would be running it); one between statements, or between messages of a
// batch before its first Execute, is dropped, as PostgreSQL drops a cancel
// of a backend waiting for a command. A statement's cancel reaches the
// backend once while its work is there (exchange); and the session sends
// its backend nothing more until the backend has taken the proxy's
// CancelRequest (the postmaster closes the cancel connection once it has
// signaled the backend). A signal that finds the backend idle is dropped by PostgreSQL,
// so it cannot cancel the next statement.
//
// A statement's deadline covers all its messages: a simple Query (and the
// COPY data that follows it), or an extended-protocol batch from its first
// message to its Sync. (PostgreSQL restarts the timer after each completed
// Execute of a pipeline; mzproxy gives the whole batch one deadline.)

// handleStatement handles one client message under its statement context.
func (s *Session) handleStatement(ctx context.Context, msg pgproto3.FrontendMessage, frame []byte) error {
	if s.budget == nil {
		s.followConfigTimeout()
		s.budget = timeouts.NewBudget(time.Now(), s.settings.Effective(timeouts.StatementTimeout))
		s.backendCanceled.Store(false)
		s.canceledReply = false
		s.inStatement.Store(true)
	}
	b := s.budget
	b.Enter(timeouts.PhasePlan)
	sc := s.statementContext(ctx, b.Deadline())
	s.setStatementCancel(sc.cancel)
	if s.batchCanceled.Load() {
		timeouts.Cancel(sc.cancel, timeouts.UserCancel)
	}
	err := s.handle(sc.ctx, msg, frame)
	// Before the message's cancel is withdrawn: a Cancel that finds none
	// sees whether a COPY now waits for data, or an Execute for its Sync.
	s.copyWaiting.Store(s.copy != copyNone)
	s.executeQueued.Store(s.units.holds(uExecute))
	s.setStatementCancel(nil)
	if sc.ctx.Err() != nil {
		// The context ended during the message: the backend's cancel, if
		// one was sent, must be taken before anything else is sent. A
		// client's cancel ends only this message's context (the next
		// message gets a new one), unless it left an Execute queued: then
		// it is the batch's.
		<-sc.acted
		if timeouts.CauseOf(sc.ctx) == timeouts.UserCancel && s.executeQueued.Load() {
			s.batchCanceled.Store(true)
		}
		err = s.interrupted(sc.ctx, b, err)
		s.dropStatementContext()
	}
	if endsStatement(msg) && s.copy == copyNone {
		s.budget = nil
		s.inStatement.Store(false)
		// A batch the event loop sent and gave back to this goroutine
		// is answered (its ReadyForQuery read): a Cancel from now on
		// has nothing at the backend to stop.
		s.loopFlight.Store(false)
		s.executeQueued.Store(false)
		s.batchCanceled.Store(false)
		if s.stmt != nil && !s.stmt.deadline.IsZero() {
			s.dropStatementContext()
		}
	}
	return err
}

// statementContext is the context messages are handled under, with the
// function that cancels the backend when it ends. Making one costs more
// than relaying a point query's answer, so it is kept while it is live:
// for the whole statement when the statement has a deadline, and across
// statements when none has.
type statementContext struct {
	ctx      context.Context
	parent   context.Context
	cancel   context.CancelCauseFunc
	stop     func() bool   // unregisters the backend's cancel
	acted    chan struct{} // closed once the context's end has been acted on
	deadline time.Time
}

// statementContext returns the live statement context for deadline under
// parent (the connection's context), made if there is none.
func (s *Session) statementContext(parent context.Context, deadline time.Time) *statementContext {
	if sc := s.stmt; sc != nil {
		if sc.parent == parent && sc.deadline.Equal(deadline) && sc.ctx.Err() == nil {
			return sc
		}
		s.dropStatementContext()
	}
	ctx, cancel := timeouts.WithStatementDeadline(parent, deadline)
	sc := &statementContext{ctx: ctx, parent: parent, cancel: cancel, acted: make(chan struct{}), deadline: deadline}
	sc.stop = context.AfterFunc(ctx, func() {
		defer close(sc.acted)
		// Between statements (a kept context whose connection ended)
		// there is nothing to cancel; abandon stops what may be running.
		if s.inStatement.Load() && !s.backendCanceled.Swap(true) {
			s.cancelBackend()
		}
	})
	s.stmt = sc
	return sc
}

// dropStatementContext ends the statement context, after the backend's
// cancel if its end sent one.
func (s *Session) dropStatementContext() {
	sc := s.stmt
	s.stmt = nil
	if !sc.stop() {
		<-sc.acted
	}
	sc.cancel(nil)
}

// awaitContextCancel waits until the end of ctx, the running statement's
// context, has been acted on: the backend has taken the cancel it sent,
// if it sent one.
func (s *Session) awaitContextCancel(ctx context.Context) {
	if sc := s.stmt; sc != nil && sc.ctx == ctx {
		<-sc.acted
	}
}

// enter records the phase the running statement is in.
func (s *Session) enter(p timeouts.Phase) {
	if s.budget != nil {
		s.budget.Enter(p)
	}
	s.obs.Phase(observedPhase[p])
}

// endsStatement reports whether the statement is over once msg has been
// answered: a Query or FunctionCall (unless it started a COPY), a Sync, or
// the end of COPY data.
func endsStatement(msg pgproto3.FrontendMessage) bool {
	switch msg.(type) {
	case *pgproto3.Query, *pgproto3.FunctionCall, *pgproto3.Sync, *pgproto3.CopyDone, *pgproto3.CopyFail:
		return true
	}
	return false
}

// setStatementCancel publishes the running message's cancel function to
// Cancel; nil when no message is being handled.
func (s *Session) setStatementCancel(cancel context.CancelCauseFunc) {
	s.stmtMu.Lock()
	s.stmtCancel = cancel
	s.stmtMu.Unlock()
}

// Cancel implements frontend.Session: a CancelRequest for this session
// cancels the message being handled now, whatever phase it is in; between
// messages it does nothing, except while a COPY FROM STDIN waits for the
// client's data, or while an Execute of the client's waits in the proxy
// for its batch's Sync (PostgreSQL would be running it: the batch's next
// message is handled canceled, and its exchange cancels the Execute at
// the backend). It is called under stmtMu's protection, so a cancel that
// arrives after a message was answered cannot reach it.
func (s *Session) Cancel() {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if s.stmtCancel != nil {
		timeouts.Cancel(s.stmtCancel, timeouts.UserCancel)
		return
	}
	if s.executeQueued.Load() {
		s.batchCanceled.Store(true)
		return
	}
	// The COPY is the statement running: the backend gets the cancel now.
	// PostgreSQL acts on it once the client sends more (COPY data,
	// CopyDone): the COPY fails with 57014. Holding stmtMu, the session's
	// next message waits until the backend has taken the cancel.
	if s.copyWaiting.Load() && !s.backendCanceled.Swap(true) {
		s.cancelBackend()
		return
	}
	// A plain read the event loop forwarded (evloop.go).
	if s.loopFlight.Load() {
		s.cancelBackend()
	}
}

// cancelBackend sends the backend a CancelRequest and returns once the
// backend has taken it.
func (s *Session) cancelBackend() {
	if err := s.be.cancel(context.Background()); err != nil {
		s.log.WithError(err).Warn("could not send cancel request to backend")
	}
}

// interrupted settles a message whose context ended while it was handled:
// it counts and logs the interruption with the phase it hit, and turns the
// error of a proxy-side wait into PostgreSQL's 57014. A message that got
// its answers (the backend finished first, or sent its own 57014, already
// relayed) keeps them.
func (s *Session) interrupted(ctx context.Context, b *timeouts.Budget, err error) error {
	cause := timeouts.CauseOf(ctx)
	if cause == 0 {
		// The client is gone, or the server is shutting down: the
		// session ends anyway.
		return err
	}
	var pe *pgerr.Error
	proxyError := err != nil && errors.As(err, &pe) && !pe.IsFatal()
	if !proxyError && !s.canceledReply {
		return err
	}
	s.canceledReply = false
	phase := b.Phase()
	s.proxy.interruptions.add(cause, phase)
	s.log.WithFields(logrus.Fields{"cause": cause.Error(), "phase": phase.String()}).Info("statement interrupted")
	if proxyError {
		return b.Err(ctx)
	}
	return err
}

// canceledByProxy rewrites the backend's answer to a CancelRequest the
// proxy sent because of the statement's deadline: PostgreSQL says "due to
// user request", the client must read "due to statement timeout". It
// notes that the statement ended in a cancel, for interrupted.
func (s *Session) canceledByProxy(ctx context.Context, frame []byte) []byte {
	var er pgproto3.ErrorResponse
	if err := er.Decode(wire.Body(frame)); err != nil || er.Code != string(pgerr.QueryCanceled) {
		return frame
	}
	s.canceledReply = true
	if timeouts.CauseOf(ctx) != timeouts.Timeout {
		return frame
	}
	er.Message = timeouts.Timeout.Error()
	out, err := er.Encode(nil)
	if err != nil {
		return frame
	}
	return out
}

// failHeldExecute makes the backend fail the client's first Execute in the
// batch about to be flushed, when the statement's context ended (a cancel,
// the deadline) before any of the batch reached the backend: the Execute
// is replaced by a Parse that cannot succeed, so the Parse and Bind before
// it complete, the Execute fails, the backend skips the rest of the batch
// to its Sync and aborts a transaction block, as a canceled Execute does in
// PostgreSQL. A CancelRequest sent behind the batch instead can reach the
// backend before it has read the batch, when it is dropped (the statement
// then runs to its end), or while it parses (the Parse fails, not the
// Execute). It reports whether it did; if not, the caller cancels the
// backend.
func (s *Session) failHeldExecute(ctx context.Context) bool {
	cause := timeouts.CauseOf(ctx)
	if cause != timeouts.UserCancel && cause != timeouts.Timeout || s.tx == txFailed || s.skipping {
		// (In a failed transaction block the Execute fails anyway, with
		// 25P02, unless it ends the block.)
		return false
	}
	for i := s.units.head; i < len(s.units.items); i++ {
		u := &s.units.items[i]
		if u.kind != uExecute || u.queuedAt == 0 {
			continue
		}
		if !s.be.w.ReplaceFrame(u.queuedAt-1, failingParse) {
			return false
		}
		u.canceled = cause
		return true
	}
	return false
}

// failingParse is a Parse that fails with a syntax error before it could
// store a statement, whatever the session has prepared; PostgreSQL's log
// shows its text.
var failingParse, _ = (&pgproto3.Parse{Name: "mzproxy_canceled", Query: "mzproxy: canceled before it reached the backend"}).Encode(nil)

// canceledInPlace is the client's answer to an Execute that failHeldExecute
// failed: PostgreSQL's 57014 for the cause.
func (s *Session) canceledInPlace(cause timeouts.Cause) []byte {
	s.canceledReply = true
	e := timeouts.ErrorFor(cause, timeouts.PhaseExecute)
	out, _ := (&pgproto3.ErrorResponse{
		Severity: pgerr.SeverityError, SeverityUnlocalized: pgerr.SeverityError,
		Code: string(e.Code), Message: e.Message,
	}).Encode(nil)
	return out
}

// interruptions counts statements interrupted, by cause and phase, for
// metrics.
type interruptions struct {
	counts [timeouts.IdleSession + 1][timeouts.PhaseStream + 1]atomic.Int64
}

func (i *interruptions) add(c timeouts.Cause, p timeouts.Phase) {
	if int(c) < len(i.counts) && int(p) < len(i.counts[c]) {
		i.counts[c][p].Add(1)
	}
}

// Interruption is one count of Proxy.Interruptions.
type Interruption struct {
	Cause string // "timeout" or "cancel"
	Phase string // timeouts.Phase's name
	Count int64
}

// Interruptions returns how many statements a statement timeout or a
// client's cancel interrupted since start, by the phase they were in.
func (p *Proxy) Interruptions() []Interruption {
	var out []Interruption
	for _, c := range []struct {
		cause timeouts.Cause
		name  string
	}{{timeouts.Timeout, "timeout"}, {timeouts.UserCancel, "cancel"}} {
		for phase := timeouts.PhaseNone; phase <= timeouts.PhaseStream; phase++ {
			out = append(out, Interruption{Cause: c.name, Phase: phase.String(), Count: p.interruptions.counts[c.cause][phase].Load()})
		}
	}
	return out
}

// loadTimeoutDefaults reads the time-valued settings the backend applied at
// connection start (the client's startup options, or the role's and
// database's defaults) into the session's layers, over mzproxy's
// configured default.
func (s *Session) loadTimeoutDefaults(ctx context.Context) error {
	s.followConfigTimeout()
	v, err := s.be.queryValue(ctx, timeoutSettingsSQL)
	if err != nil {
		return err
	}
	for _, row := range strings.Split(v, ",") {
		f := strings.Split(row, "=")
		if len(f) != 3 {
			continue
		}
		src := timeouts.SourceBackend
		if f[2] == "client" {
			src = timeouts.SourceStartup
		}
		if err := s.settings.SetDefault(src, f[0], f[1]); err != nil {
			return pgerr.Fatal(pgerr.InternalError, "backend setting %s = %q: %v", f[0], f[1], err)
		}
	}
	return nil
}

// timeoutSettingsSQL lists the tracked settings that the backend has from
// somewhere other than its built-in default, in milliseconds, with where
// each came from ("client" is the startup packet).
const timeoutSettingsSQL = `SELECT string_agg(name || '=' || setting || '=' || source, ',')
  FROM pg_settings
 WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout', 'idle_session_timeout')
   AND source <> 'default'`

// followConfigTimeout makes mzproxy's configured statement_timeout (which
// SIGHUP can change) the session's lowest default, when it changed since
// the session last looked. Sessions see a change at their next statement,
// as PostgreSQL's sessions see a reloaded postgresql.conf.
func (s *Session) followConfigTimeout() {
	d := s.proxy.StatementTimeout()
	if d == s.configTimeout {
		return
	}
	s.configTimeout = d
	ms := "0"
	if d > 0 {
		ms = strconv.FormatInt(max(int64(d/time.Millisecond), 1), 10)
	}
	// A valid number of milliseconds: SetDefault cannot fail.
	_ = s.settings.SetDefault(timeouts.SourceConfig, timeouts.StatementTimeout.String(), ms)
}
