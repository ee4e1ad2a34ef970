package occ

import (
	"context"
	"sync/atomic"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/timeouts"
)

// Metrics are counters the proxy can export; all methods are safe for
// concurrent use, and the zero value is ready.
type Metrics struct {
	Writes    atomic.Int64 // loops started
	Commits   atomic.Int64 // loops that committed
	Waits     atomic.Int64 // semaphore acquisitions that had to queue
	Conflicts atomic.Int64 // appends that lost to a concurrent commit
	Retries   atomic.Int64 // appends after the first
	Refolds   atomic.Int64 // successful refolds
	Rereads   atomic.Int64 // re-reads where a refold was not possible
	Exhausted atomic.Int64 // loops that failed with 40001
	Canceled  atomic.Int64 // loops ended by their context before committing
}

// Record counts the outcome of one write loop.
func (m *Metrics) Record(r Result, err error) {
	if m == nil {
		return
	}
	m.Conflicts.Add(int64(r.Conflicts))
	if r.Attempts > 1 {
		m.Retries.Add(int64(r.Attempts - 1))
	}
	m.Refolds.Add(int64(r.Refolds))
	m.Rereads.Add(int64(r.Rereads))
	if r.Committed {
		m.Commits.Add(1)
	}
	if err != nil && pgerr.Of(err) == pgerr.SerializationFailure {
		m.Exhausted.Add(1)
	}
}

// Admit counts a write loop starting and takes a slot of sem for it (nil:
// no bound), then enters the attempt phase. The phases go to enter (nil:
// the budget's); the budget turns a ctx that ends while waiting into the
// client's 57014, and the loop fails before its first attempt, counted as
// canceled. The loop calls release when it ends.
func (m *Metrics) Admit(ctx context.Context, sem *Semaphore, b *timeouts.Budget, enter func(timeouts.Phase)) (release func(), err error) {
	if enter == nil {
		enter = func(p timeouts.Phase) { enterPhase(b, p) }
	}
	m.Writes.Add(1)
	release = func() {}
	if sem != nil {
		enter(timeouts.PhaseSemaphoreWait)
		waited, err := sem.Acquire(ctx)
		if waited {
			m.Waits.Add(1)
		}
		if err != nil {
			m.Canceled.Add(1)
			return nil, Interrupted(ctx, b)
		}
		release = sem.Release
	}
	enter(timeouts.PhaseOCCAttempt)
	return release, nil
}

// Finish counts the outcome r (and err, when the machine failed) of a
// loop; canceled: the statement's context had ended. A loop
// that ended before its machine did (the statement failed) is counted by
// what it tried.
func (m *Metrics) Finish(r Result, err error, canceled bool) {
	m.Record(r, err)
	if err != nil && canceled && !r.Committed {
		m.Canceled.Add(1)
	}
}

func enterPhase(b *timeouts.Budget, p timeouts.Phase) {
	if b != nil {
		b.Enter(p)
	}
}

// Interrupted is the client's error for a write whose ctx ended: the
// budget's 57014 when there is one, else the one of ctx's cause.
func Interrupted(ctx context.Context, b *timeouts.Budget) error {
	if b != nil {
		if err := b.Err(ctx); err != nil {
			return err
		}
	}
	if c := timeouts.CauseOf(ctx); c != 0 {
		return timeouts.ErrorFor(c, timeouts.PhaseOCCAttempt)
	}
	return pgerr.Wrap(pgerr.QueryCanceled, context.Cause(ctx))
}
