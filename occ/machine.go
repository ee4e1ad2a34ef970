package occ

import (
	"fmt"

	"github.com/mzproxy/mzproxy/pgerr"
)

// DefaultMaxAttempts is the number of appends a write tries before it gives
// up with 40001 when no Config says otherwise.
const DefaultMaxAttempts = 10

// Config bounds one write's loop.
type Config struct {
	// MaxAttempts is the number of appends (the first one included) a
	// write may try before it fails with ErrRetriesExhausted's 40001.
	// Zero means DefaultMaxAttempts.
	MaxAttempts int
}

func (c Config) maxAttempts() int {
	if c.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return c.MaxAttempts
}

// Write is one statement's write as the loop sees it.
type Write[R any] struct {
	// Blind writes (INSERT ... VALUES, COPY FROM) read nothing: Payload is
	// final and is appended as is at each target. Otherwise the payload
	// comes from the statement's Selection and Payload is ignored.
	Blind   bool
	Payload Payload[R]
}

// ActionKind is what the machine asks its driver to do next.
type ActionKind uint8

const (
	// ActAllocate: ask the oracle for a write timestamp and report it with
	// EvTimestamp. Nothing has been written. Action.Floor is the least
	// target the loop will take (a driver whose oracle can start there
	// passes it on); Action.Wait asks the driver to wait first for the
	// writer that holds the append's lock.
	ActAllocate ActionKind = iota + 1
	// ActRead: compute the statement's payload reading at Action.At
	// (= T-1, a final time) and report it with EvRead.
	ActRead
	// ActRefold: fold the changes committed in [From, To) into
	// Action.Payload and report EvRefolded (OK false: cannot, re-read).
	ActRefold
	// ActAppend: compare-and-append Action.Payload at Action.T and report
	// the definite outcome with EvAppended, or EvError if nothing was
	// written. From here until that event the append may have reached the
	// backend: the driver must not abandon it, whatever happens to ctx.
	ActAppend
	// ActApply: the append succeeded; tell the oracle (ApplyWrite(T)) and
	// report EvApplied. The write is durable: use a context that is not
	// canceled with the statement.
	ActApply
	// ActDone: the write committed; Action.Result is what the client is told.
	ActDone
	// ActFail: the write failed; Action.Err says why. Whether anything was
	// written is in Action.Result.Committed (true only for an *ApplyError).
	ActFail
)

var actionNames = [...]string{"", "allocate", "read", "refold", "append", "apply", "done", "fail"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && k != 0 {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is the machine's request to its driver. Only the fields its Kind
// names are set.
type Action[R any] struct {
	Kind     ActionKind
	T        uint64 // ActAppend, ActApply: the target
	At       uint64 // ActRead: the read time, T-1
	From, To uint64 // ActRefold: the window of commits to fold
	Floor    uint64 // ActAllocate: the actual upper of the last conflict
	Wait     bool   // ActAllocate: the last conflict was with the lock's holder
	Payload  Payload[R]
	Result   Result // ActDone, ActFail
	Err      error  // ActFail
}

// Terminal reports whether a is ActDone or ActFail.
func (a Action[R]) Terminal() bool { return a.Kind == ActDone || a.Kind == ActFail }

func (a Action[R]) String() string {
	switch a.Kind {
	case ActAllocate:
		return "allocate"
	case ActRead:
		return fmt.Sprintf("read at=%d", a.At)
	case ActRefold:
		return fmt.Sprintf("refold [%d,%d) %s", a.From, a.To, FormatUpdates(a.Payload.Updates))
	case ActAppend:
		return fmt.Sprintf("append T=%d %s rows=%d", a.T, FormatUpdates(a.Payload.Updates), a.Payload.Rows)
	case ActApply:
		return fmt.Sprintf("apply T=%d", a.T)
	case ActDone:
		return "done " + a.Result.String()
	case ActFail:
		s := "fail " + errString(a.Err)
		if a.Result.Committed {
			s += " (committed)"
		}
		return s
	}
	return a.Kind.String()
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	if e, ok := err.(*pgerr.Error); ok {
		return fmt.Sprintf("%s %s", e.Code, e.Message)
	}
	return err.Error()
}

// Result is the outcome of a write.
type Result struct {
	Committed bool   // the payload was appended at T
	T         uint64 // the commit timestamp, when Committed
	Rows      int64  // the row count the client is told
	Attempts  int    // appends tried
	Conflicts int    // appends that lost to a concurrent commit
	Refolds   int    // successful refolds
	Rereads   int    // reads after the first (refold not possible)
}

func (r Result) String() string {
	return fmt.Sprintf("T=%d rows=%d attempts=%d conflicts=%d refolds=%d rereads=%d",
		r.T, r.Rows, r.Attempts, r.Conflicts, r.Refolds, r.Rereads)
}

// EventKind is what happened to the machine's last action.
type EventKind uint8

const (
	EvTimestamp EventKind = iota + 1 // answers ActAllocate: TS
	EvRead                           // answers ActRead: Payload
	EvRefolded                       // answers ActRefold: Payload, OK
	EvAppended                       // answers ActAppend: Append
	EvApplied                        // answers ActApply
	EvError                          // the pending action failed: Err
	EvCancel                         // the statement's context ended: Err is what the client is told
)

var eventNames = [...]string{"", "timestamp", "read", "refolded", "appended", "applied", "error", "cancel"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// AppendResult is the definite outcome of a compare-and-append at T: OK,
// or not OK with the actual upper (> T) that made it fail. Busy: the
// append failed because another writer holds its lock, so retrying at
// once would likely fail again.
type AppendResult struct {
	OK          bool
	ActualUpper uint64
	Busy        bool
}

// Event is the answer to an action, or a cancellation.
type Event[R any] struct {
	Kind    EventKind
	TS      uint64       // EvTimestamp
	Payload Payload[R]   // EvRead, EvRefolded
	OK      bool         // EvRefolded
	Append  AppendResult // EvAppended
	Err     error        // EvError, EvCancel
}

func (e Event[R]) String() string {
	switch e.Kind {
	case EvTimestamp:
		return fmt.Sprintf("timestamp %d", e.TS)
	case EvRead:
		return fmt.Sprintf("read %s rows=%d", FormatUpdates(e.Payload.Updates), e.Payload.Rows)
	case EvRefolded:
		if !e.OK {
			return "refolded cannot"
		}
		return fmt.Sprintf("refolded %s rows=%d", FormatUpdates(e.Payload.Updates), e.Payload.Rows)
	case EvAppended:
		if e.Append.OK {
			return "appended ok"
		}
		if e.Append.Busy {
			return fmt.Sprintf("appended conflict upper=%d busy", e.Append.ActualUpper)
		}
		return fmt.Sprintf("appended conflict upper=%d", e.Append.ActualUpper)
	case EvApplied:
		return "applied"
	case EvError, EvCancel:
		return fmt.Sprintf("%s %s", e.Kind, errString(e.Err))
	}
	return e.Kind.String()
}

// Machine is one write's optimistic loop as a pure state machine: it does
// no I/O and reads no clock. Action returns what it wants done; Step feeds
// it what happened and returns the next action. Not safe for concurrent use.
type Machine[R any] struct {
	cfg   Config
	blind bool

	act Action[R] // pending action; its Kind is the state

	payload Payload[R]
	t       uint64 // current target
	readAt  uint64 // the time payload reflects (non-blind, once read)
	haveRd  bool   // payload reflects a read at readAt
	floor   uint64 // the next target is at least this (actual upper of the last conflict)

	canceled error // a cancel that arrived while an append was in flight
	res      Result
}

// NewMachine returns the machine of write w; its first action is
// ActAllocate.
func NewMachine[R any](cfg Config, w Write[R]) *Machine[R] {
	m := &Machine[R]{cfg: cfg, blind: w.Blind}
	if w.Blind {
		m.payload = w.Payload
	}
	m.act = Action[R]{Kind: ActAllocate}
	return m
}

// Action returns the pending action.
func (m *Machine[R]) Action() Action[R] { return m.act }

// Result returns what the loop has done so far (Action().Result once it
// is terminal): a driver that stops before then still counts it.
func (m *Machine[R]) Result() Result { return m.res }

// InFlight reports whether an append may have reached the backend without
// its outcome known: a cancel now must not end the write.
func (m *Machine[R]) InFlight() bool { return m.act.Kind == ActAppend }

// Step applies e to the machine and returns the next action. An event that
// does not answer the pending action is a driver bug: the machine fails
// with XX000 (or, if an append is in flight, keeps waiting for it, since
// failing then could hide a committed write).
func (m *Machine[R]) Step(e Event[R]) Action[R] {
	if m.act.Terminal() {
		return m.act
	}
	if e.Kind == EvCancel {
		return m.cancel(e.Err)
	}
	switch m.act.Kind {
	case ActAllocate:
		switch e.Kind {
		case EvTimestamp:
			return m.target(e.TS)
		case EvError:
			return m.fail(e.Err)
		}
	case ActRead:
		switch e.Kind {
		case EvRead:
			m.payload, m.readAt, m.haveRd = e.Payload, m.act.At, true
			return m.append()
		case EvError:
			return m.fail(e.Err)
		}
	case ActRefold:
		switch e.Kind {
		case EvRefolded:
			if !e.OK {
				m.res.Rereads++
				return m.set(Action[R]{Kind: ActRead, At: m.t - 1})
			}
			m.res.Refolds++
			m.payload, m.readAt = e.Payload, m.t-1
			return m.append()
		case EvError:
			return m.fail(e.Err)
		}
	case ActAppend:
		switch e.Kind {
		case EvAppended:
			return m.appended(e.Append)
		case EvError:
			// The Appender's contract: an error means nothing was written.
			return m.fail(e.Err)
		}
		return m.act // never abandon an append in flight
	case ActApply:
		switch e.Kind {
		case EvApplied:
			return m.set(Action[R]{Kind: ActDone, Result: m.res})
		case EvError:
			return m.set(Action[R]{Kind: ActFail, Result: m.res,
				Err: &ApplyError{T: m.t, Rows: m.res.Rows, Err: e.Err}})
		}
	}
	return m.fail(pgerr.New(pgerr.InternalError, "occ: event %s does not answer action %s", e.Kind, m.act.Kind))
}

// target handles a timestamp from the oracle. The target is never below
// the actual upper of the last conflict, nor below the last read + 1: a
// lagging oracle cannot make the loop try a time already known to fail.
func (m *Machine[R]) target(ts uint64) Action[R] {
	t := max(ts, m.floor, 1)
	if m.haveRd {
		t = max(t, m.readAt+1)
	}
	m.t = t
	switch {
	case m.blind:
		return m.append()
	case !m.haveRd:
		return m.set(Action[R]{Kind: ActRead, At: t - 1})
	case m.readAt == t-1:
		return m.append()
	default:
		return m.set(Action[R]{Kind: ActRefold, From: m.readAt + 1, To: t, Payload: m.payload})
	}
}

func (m *Machine[R]) append() Action[R] {
	m.res.Attempts++
	return m.set(Action[R]{Kind: ActAppend, T: m.t, Payload: m.payload})
}

func (m *Machine[R]) appended(r AppendResult) Action[R] {
	if r.OK {
		m.res.Committed, m.res.T, m.res.Rows = true, m.t, m.payload.Rows
		return m.set(Action[R]{Kind: ActApply, T: m.t})
	}
	if r.ActualUpper <= m.t {
		return m.fail(pgerr.New(pgerr.InternalError,
			"occ: append at %d refused with upper %d, which would have admitted it", m.t, r.ActualUpper))
	}
	m.res.Conflicts++
	m.floor = r.ActualUpper
	if m.canceled != nil {
		return m.fail(m.canceled)
	}
	if m.res.Attempts >= m.cfg.maxAttempts() {
		return m.fail(retriesExhausted(m.res.Attempts))
	}
	return m.set(Action[R]{Kind: ActAllocate, Floor: m.floor, Wait: r.Busy})
}

func (m *Machine[R]) cancel(err error) Action[R] {
	switch m.act.Kind {
	case ActAppend:
		// The append may have reached the backend: remember the cancel,
		// wait for the definite outcome, and do not retry after it.
		if m.canceled == nil {
			m.canceled = err
		}
		return m.act
	case ActApply:
		// Committed: the client is told the truth once the oracle knows.
		return m.act
	}
	return m.fail(err)
}

func (m *Machine[R]) fail(err error) Action[R] {
	return m.set(Action[R]{Kind: ActFail, Result: m.res, Err: err})
}

func (m *Machine[R]) set(a Action[R]) Action[R] {
	m.act = a
	return a
}
