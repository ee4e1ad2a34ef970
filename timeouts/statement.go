package timeouts

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/mzproxy/mzproxy/pgerr"
)

// Deadline returns start+timeout, or the zero time (no deadline) when
// timeout is zero or negative, which PostgreSQL reads as disabled. Use it
// for statement_timeout from the statement's arrival and for the idle
// timeouts from the moment the session went idle.
func Deadline(start time.Time, timeout time.Duration) time.Time {
	if timeout <= 0 {
		return time.Time{}
	}
	return start.Add(timeout)
}

// Phase is a step of a statement's way through the proxy (proxy/doc.go,
// "A message's path"). All phases share the statement's one deadline.
type Phase uint32

// The phases, in the order a statement meets them. A statement skips the
// ones it does not need.
const (
	// PhaseNone: no phase entered yet (the statement has just arrived).
	PhaseNone Phase = iota
	// PhasePlan: parsing, classifying, name resolution.
	PhasePlan
	// PhaseSemaphoreWait: waiting for a slot to run in.
	PhaseSemaphoreWait
	// PhaseTimestamp: choosing the timestamp (oracle, since, upper).
	PhaseTimestamp
	// PhaseUpperWait: waiting for the upper to pass the chosen timestamp.
	PhaseUpperWait
	// PhaseHold: acquiring read holds.
	PhaseHold
	// PhaseOCCAttempt: an optimistic write attempt. An append may be in
	// flight: a caller interrupted here must learn whether it became
	// durable before reporting failure.
	PhaseOCCAttempt
	// PhaseExecute: the backend runs the statement.
	PhaseExecute
	// PhaseStream: rows are on their way to the client.
	PhaseStream
	numPhases
)

var phaseNames = [numPhases]string{
	PhaseNone:          "none",
	PhasePlan:          "plan",
	PhaseSemaphoreWait: "semaphore wait",
	PhaseTimestamp:     "timestamp",
	PhaseUpperWait:     "upper wait",
	PhaseHold:          "hold",
	PhaseOCCAttempt:    "OCC attempt",
	PhaseExecute:       "execute",
	PhaseStream:        "stream",
}

func (p Phase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", uint32(p))
}

// Cause says why a statement or session was interrupted. It is an error so
// that it can be a context's cause.
type Cause uint8

// The causes. The zero Cause means none of these.
const (
	// Timeout: statement_timeout expired.
	Timeout Cause = iota + 1
	// UserCancel: the client sent a CancelRequest.
	UserCancel
	// IdleInTransaction: idle_in_transaction_session_timeout expired.
	IdleInTransaction
	// IdleSession: idle_session_timeout expired.
	IdleSession
)

// idleSessionTimeout is SQLSTATE 57P05, which pgerr does not name.
const idleSessionTimeout pgerr.Code = "57P05"

var causes = [...]struct {
	code    pgerr.Code
	fatal   bool
	message string
}{
	Timeout:           {pgerr.QueryCanceled, false, "canceling statement due to statement timeout"},
	UserCancel:        {pgerr.QueryCanceled, false, "canceling statement due to user request"},
	IdleInTransaction: {pgerr.IdleInTransactionTimeout, true, "terminating connection due to idle-in-transaction timeout"},
	IdleSession:       {idleSessionTimeout, true, "terminating connection due to idle-session timeout"},
}

func (c Cause) valid() bool { return c != 0 && int(c) < len(causes) }

// Error returns PostgreSQL's message for c.
func (c Cause) Error() string {
	if c.valid() {
		return causes[c].message
	}
	return fmt.Sprintf("timeouts.Cause(%d)", uint8(c))
}

// Interruption is what an interrupted statement's *pgerr.Error wraps: the
// client sees PostgreSQL's message only, logs and tests can ask for the
// phase with errors.As.
type Interruption struct {
	Cause Cause
	Phase Phase
}

func (i *Interruption) Error() string {
	return fmt.Sprintf("%v (in phase %v)", i.Cause, i.Phase)
}

// ErrorFor returns the error the client sees for cause in phase: code,
// severity and message as PostgreSQL sends them (57014 ERROR for Timeout
// and UserCancel, 25P03 and 57P05 FATAL for the idle timeouts). The phase
// does not change what the client sees; it travels in the wrapped
// *Interruption. ErrorFor panics on the zero Cause.
func ErrorFor(cause Cause, phase Phase) *pgerr.Error {
	if !cause.valid() {
		panic(fmt.Sprintf("timeouts.ErrorFor: invalid cause %d", uint8(cause)))
	}
	c := causes[cause]
	e := pgerr.Wrap(c.code, &Interruption{Cause: cause, Phase: phase})
	e.Message = c.message
	if c.fatal {
		e.Severity = pgerr.SeverityFatal
	}
	return e
}

// WithStatementDeadline returns a context for one statement: it ends with
// cause Timeout at deadline (never, for the zero deadline), or when cancel
// is called, with the cause given to it (see Cancel). Call cancel when the
// statement ends, as with any context.
func WithStatementDeadline(parent context.Context, deadline time.Time) (context.Context, context.CancelCauseFunc) {
	ctx, cancelCause := context.WithCancelCause(parent)
	if deadline.IsZero() {
		return ctx, cancelCause
	}
	// The deadline context is the child, so a cancel of the outer one
	// reaches it with its cause, and CauseOf sees one cause either way.
	dctx, cancelDeadline := context.WithDeadlineCause(ctx, deadline, Timeout)
	return dctx, func(cause error) {
		cancelCause(cause)
		cancelDeadline()
	}
}

// Cancel cancels a statement's context with cause, e.g. Cancel(cancel,
// UserCancel) when a CancelRequest arrives.
func Cancel(cancel context.CancelCauseFunc, cause Cause) {
	cancel(cause)
}

// CauseOf returns why ctx ended: the Cause it was canceled with, Timeout
// if it ended by any deadline (including a parent's), or zero if it has
// not ended or ended for another reason.
func CauseOf(ctx context.Context) Cause {
	if ctx.Err() == nil {
		return 0
	}
	var c Cause
	if cause := context.Cause(ctx); errors.As(cause, &c) {
		return c
	} else if errors.Is(cause, context.DeadlineExceeded) {
		return Timeout
	}
	return 0
}

// Budget is one statement's deadline and the phase it is in. The
// statement's goroutine calls Enter; any goroutine may read Phase or call
// Err, so a cancel or the deadline can be reported with the phase it hit.
type Budget struct {
	deadline time.Time
	phase    atomic.Uint32
}

// NewBudget returns the budget of a statement that arrived at start under
// statement_timeout timeout (zero: no deadline).
func NewBudget(start time.Time, timeout time.Duration) *Budget {
	return &Budget{deadline: Deadline(start, timeout)}
}

// Deadline returns the statement's deadline; zero means none.
func (b *Budget) Deadline() time.Time { return b.deadline }

// Enter records that the statement has entered phase p.
func (b *Budget) Enter(p Phase) { b.phase.Store(uint32(p)) }

// Phase returns the phase the statement is in.
func (b *Budget) Phase() Phase { return Phase(b.phase.Load()) }

// Err returns nil while ctx is live, and otherwise the error to send the
// client: ErrorFor(CauseOf(ctx), b.Phase()). If ctx ended with a cause that
// is a *pgerr.Error (a shutdown, say), that error is returned as is; any
// other cause is wrapped as 57014 with the cause's text.
func (b *Budget) Err(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if c := CauseOf(ctx); c != 0 {
		return ErrorFor(c, b.Phase())
	}
	cause := context.Cause(ctx)
	var pe *pgerr.Error
	if errors.As(cause, &pe) {
		return pe
	}
	return pgerr.Wrap(pgerr.QueryCanceled, cause)
}
