package occ

import (
	"context"
	"sync"

	"github.com/mzproxy/mzproxy/pgerr"
)

// BatchAppender is the compare-and-append of a group commit: all payloads
// at T, or none. It follows Appender's contract (an error means nothing
// was written; once submitted, it waits for and reports the definite
// outcome) and reports payloads that fail on their own in
// BatchResult.Errs.
type BatchAppender[P any] interface {
	AppendBatch(ctx context.Context, t uint64, ps []P) (BatchResult, error)
}

// Committer runs a Group for concurrent callers: each Commit submits one
// blind payload and blocks until its own outcome. There is no timer and no
// background goroutine: whoever finds no leader becomes the leader and runs
// batches (oracle timestamp, Flush, append, ApplyWrite, Complete) until its
// own payload is done, then hands leadership to the oldest queued caller.
// Payloads that arrive while a batch is in flight form the next batch.
// Safe for concurrent use.
type Committer[P any] struct {
	oracle  Oracle
	app     BatchAppender[P]
	metrics *Metrics

	mu      sync.Mutex
	g       *Group[P]
	waiters map[Ticket]chan note
	leader  Ticket // 0: none
}

// note is what a caller is woken with: its outcome, or leadership.
type note struct {
	lead bool
	out  Outcome
}

// NewCommitter returns a committer; m may be nil.
func NewCommitter[P any](cfg GroupConfig, o Oracle, a BatchAppender[P], m *Metrics) *Committer[P] {
	return &Committer[P]{oracle: o, app: a, metrics: m, g: NewGroup[P](cfg), waiters: map[Ticket]chan note{}}
}

// Commit appends p in the next batch and returns its commit timestamp. If
// ctx ends while p is still queued, p is withdrawn and Commit returns the
// cancellation (nothing written); once p is in a batch in flight, Commit
// waits for the batch's definite outcome and reports it.
func (c *Committer[P]) Commit(ctx context.Context, p P) (uint64, error) {
	c.mu.Lock()
	if ctx.Err() != nil {
		c.mu.Unlock()
		return 0, Interrupted(ctx, nil)
	}
	t := c.g.Submit(p)
	ch := make(chan note, 1)
	c.waiters[t] = ch
	if c.leader == 0 {
		c.leader = t
		c.mu.Unlock()
		return c.lead(ctx, t, ch)
	}
	c.mu.Unlock()
	return c.wait(ctx, t, ch)
}

func (c *Committer[P]) wait(ctx context.Context, t Ticket, ch chan note) (uint64, error) {
	done := ctx.Done()
	for {
		select {
		case n := <-ch:
			if n.lead {
				return c.lead(ctx, t, ch)
			}
			return n.out.T, n.out.Err
		case <-done:
			c.mu.Lock()
			if c.g.Withdraw(t) {
				delete(c.waiters, t)
				if c.leader == t {
					<-ch // the lead note, sent under the lock
					c.handoffLocked()
				}
				c.mu.Unlock()
				return 0, Interrupted(ctx, nil)
			}
			c.mu.Unlock()
			done = nil // in the batch in flight: wait for the truth
		}
	}
}

// lead runs batches until the leader's own payload is done.
func (c *Committer[P]) lead(ctx context.Context, own Ticket, ch chan note) (uint64, error) {
	for {
		select {
		case n := <-ch: // only outcomes reach a leader
			c.mu.Lock()
			c.handoffLocked()
			c.mu.Unlock()
			return n.out.T, n.out.Err
		default:
		}
		// own is queued, and no batch is in flight.
		ts, err := c.oracle.WriteTS(ctx)
		if err != nil || ctx.Err() != nil {
			if ctx.Err() != nil {
				err = Interrupted(ctx, nil)
			}
			c.mu.Lock()
			c.g.Withdraw(own)
			delete(c.waiters, own)
			c.handoffLocked()
			c.mu.Unlock()
			return 0, err
		}
		c.mu.Lock()
		b, ok := c.g.Flush(ts)
		c.mu.Unlock()
		if !ok {
			panic("occ: Committer leader found nothing to flush")
		}
		// From here the batch may reach the backend: it is not abandoned
		// with the leader's context.
		bctx := context.WithoutCancel(ctx)
		r, err := c.app.AppendBatch(bctx, b.T, b.Payloads)
		var outs []Outcome
		c.mu.Lock()
		if err != nil {
			outs = c.g.Abort(err)
		} else {
			var applyErr error
			if r.OK {
				c.mu.Unlock()
				applyErr = c.oracle.ApplyWrite(bctx, b.T)
				c.mu.Lock()
			}
			outs = c.g.Complete(r, applyErr)
		}
		for _, o := range outs {
			w := c.waiters[o.Ticket]
			delete(c.waiters, o.Ticket)
			w <- note{out: o}
		}
		c.mu.Unlock()
		if m := c.metrics; m != nil {
			m.Batches.Add(1)
			m.Batched.Add(int64(len(b.Payloads)))
			if err == nil && !r.OK && r.ActualUpper > b.T {
				m.Conflicts.Add(1)
				m.Retries.Add(int64(len(b.Payloads) - len(outs))) // back in the queue
			}
			for _, o := range outs {
				switch {
				case o.Err == nil:
					m.Commits.Add(1)
				case pgerr.Of(o.Err) == pgerr.SerializationFailure:
					m.Exhausted.Add(1)
				}
			}
		}
	}
}

// Queued is the number of payloads waiting for the next batch: an
// appender may prepare that batch's transaction along with the current
// one's.
func (c *Committer[P]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.g.pending)
}

// handoffLocked passes leadership to the oldest queued caller, if any.
func (c *Committer[P]) handoffLocked() {
	c.leader = 0
	if p := c.g.Pending(); len(p) > 0 {
		c.leader = p[0]
		c.waiters[p[0]] <- note{lead: true}
	}
}
