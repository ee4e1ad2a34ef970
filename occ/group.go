package occ

import (
	"fmt"
)

// Ticket identifies one caller's payload in a Group.
type Ticket uint64

// GroupConfig bounds a group commit.
type GroupConfig struct {
	// MaxAttempts is the number of batches a payload may ride in that lose
	// their compare-and-append before its caller gets 40001. Zero means
	// DefaultMaxAttempts.
	MaxAttempts int
	// MaxBatch caps the payloads in one batch; zero means no cap.
	MaxBatch int
}

// Group is the pure core of group commit: blind writes from concurrent
// sessions that arrive together ride one append. It does no I/O and has no
// timers: arrivals (Submit), withdrawals (Withdraw), batch boundaries
// (Flush) and outcomes (Complete, Abort) are explicit events, so a test can
// replay any interleaving. At most one batch is in flight. Not safe for
// concurrent use; Committer wraps it with a lock.
type Group[P any] struct {
	cfg      GroupConfig
	next     Ticket
	pending  []*member[P] // FIFO; retried members go back to the front
	inflight *Batch[P]
}

type member[P any] struct {
	t        Ticket
	p        P
	attempts int // batches lost to a conflict
}

// Batch is the set of payloads appended together at T.
type Batch[P any] struct {
	T        uint64
	Tickets  []Ticket
	Payloads []P
	members  []*member[P]
}

// BatchResult is the definite outcome of appending a batch at T. OK means
// every payload was written at T. When OK is false nothing was written:
// Errs[i] non-nil means payload i is invalid on its own (a constraint
// violation, say) and fails only its caller; ActualUpper > T means the
// append lost to a concurrent commit. Errs is nil or has one entry per
// payload.
type BatchResult struct {
	OK          bool
	ActualUpper uint64
	Errs        []error
}

// Outcome is the end of one caller's write.
type Outcome struct {
	Ticket Ticket
	T      uint64 // commit timestamp when Err is nil
	Err    error
}

func (o Outcome) String() string {
	if o.Err != nil {
		return fmt.Sprintf("%d: fail %s", o.Ticket, errString(o.Err))
	}
	return fmt.Sprintf("%d: committed T=%d", o.Ticket, o.T)
}

// NewGroup returns an empty group.
func NewGroup[P any](cfg GroupConfig) *Group[P] {
	return &Group[P]{cfg: cfg}
}

// Submit queues p for the next batch and returns its ticket.
func (g *Group[P]) Submit(p P) Ticket {
	g.next++
	g.pending = append(g.pending, &member[P]{t: g.next, p: p})
	return g.next
}

// Withdraw removes a payload that is still queued (its caller's context
// ended). It returns false if the payload is in the batch in flight, or
// already finished: then the caller must wait for its outcome.
func (g *Group[P]) Withdraw(t Ticket) bool {
	for i, m := range g.pending {
		if m.t == t {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			return true
		}
	}
	return false
}

// Pending returns the queued tickets, oldest first.
func (g *Group[P]) Pending() []Ticket {
	out := make([]Ticket, len(g.pending))
	for i, m := range g.pending {
		out[i] = m.t
	}
	return out
}

// InFlight reports whether a batch awaits its outcome.
func (g *Group[P]) InFlight() bool { return g.inflight != nil }

// Flush forms the batch to append at t from the queued payloads (at most
// MaxBatch, oldest first). ok is false if a batch is already in flight or
// nothing is queued.
func (g *Group[P]) Flush(t uint64) (b Batch[P], ok bool) {
	if g.inflight != nil || len(g.pending) == 0 {
		return Batch[P]{}, false
	}
	n := len(g.pending)
	if g.cfg.MaxBatch > 0 {
		n = min(n, g.cfg.MaxBatch)
	}
	b.T = t
	b.members = append([]*member[P](nil), g.pending[:n]...)
	g.pending = append(g.pending[:0:0], g.pending[n:]...)
	for _, m := range b.members {
		b.Tickets = append(b.Tickets, m.t)
		b.Payloads = append(b.Payloads, m.p)
	}
	g.inflight = &b
	return b, true
}

// Complete ends the batch in flight with its append's result. applyErr is
// the error of ApplyWrite after a successful append (nil otherwise). It
// returns the outcomes of the callers that are done; the others (a lost
// race, or a batch rejected for someone else's payload) go back to the
// front of the queue, in order, for the next batch.
func (g *Group[P]) Complete(r BatchResult, applyErr error) []Outcome {
	b := g.inflight
	if b == nil {
		return nil
	}
	g.inflight = nil
	var out []Outcome
	if r.OK {
		for _, m := range b.members {
			o := Outcome{Ticket: m.t, T: b.T}
			if applyErr != nil {
				o.Err = &ApplyError{T: b.T, Err: applyErr}
			}
			out = append(out, o)
		}
		return out
	}
	conflict := r.ActualUpper > b.T
	var retry []*member[P]
	for i, m := range b.members {
		if i < len(r.Errs) && r.Errs[i] != nil {
			out = append(out, Outcome{Ticket: m.t, Err: r.Errs[i]})
			continue
		}
		if conflict {
			m.attempts++
			if m.attempts >= g.maxAttempts() {
				out = append(out, Outcome{Ticket: m.t, Err: retriesExhausted(m.attempts)})
				continue
			}
		}
		retry = append(retry, m)
	}
	if !conflict && len(out) == 0 {
		// Refused with no reason given: a broken Appender. Fail the batch
		// rather than spin on it.
		for _, m := range retry {
			out = append(out, Outcome{Ticket: m.t, Err: errNoReason(b.T, r.ActualUpper)})
		}
		retry = nil
	}
	g.pending = append(retry, g.pending...)
	return out
}

// Abort ends the batch in flight whose append returned err (nothing was
// written): every member fails with err.
func (g *Group[P]) Abort(err error) []Outcome {
	b := g.inflight
	if b == nil {
		return nil
	}
	g.inflight = nil
	out := make([]Outcome, len(b.members))
	for i, m := range b.members {
		out[i] = Outcome{Ticket: m.t, Err: err}
	}
	return out
}

func (g *Group[P]) maxAttempts() int {
	return Config{MaxAttempts: g.cfg.MaxAttempts}.maxAttempts()
}
