package occ

// Run, the blocking driver of one write against an Env of interfaces, is
// how this package's tests, replays and simulation drive the machine
// against a simulated oracle and store. The proxy drives the machine
// itself (proxy/write.go): its read and append are one backend
// transaction.

import (
	"context"
	"errors"

	"github.com/mzproxy/mzproxy/timeouts"
)

// Oracle is the timestamp oracle as the loop uses it.
type Oracle interface {
	// WriteTS allocates a write timestamp. It may be called again after a
	// conflict; the loop raises a result below the actual upper itself.
	WriteTS(ctx context.Context) (uint64, error)
	// ApplyWrite tells the oracle that a write committed at T, so reads
	// that start afterwards see it. It must be idempotent. The loop calls
	// it with a context detached from the statement's (the write is
	// durable by then), so the Oracle must bound the call itself.
	ApplyWrite(ctx context.Context, t uint64) error
}

// Selection is the read side of a read-then-write statement, implemented
// by the proxy (the planner's rewrite of the statement's WHERE into a read
// of the history tables).
type Selection[R any] interface {
	// Read returns the payload the statement makes against the state at
	// time at: consolidated updates and the row count. at must be final
	// when it is read: every commit at a time <= at visible and no later
	// commit possible at such a time (read once the upper is past at, or
	// under the lock the append will take).
	Read(ctx context.Context, at uint64) (Payload[R], error)
	// Refold returns p, computed against the state at from-1, brought to
	// the state at to-1 (final, as for Read) by folding in the changes
	// committed in [from, to). ok false means it cannot (the statement is
	// not a single-table selection, say), and the loop re-reads at to-1.
	Refold(ctx context.Context, p Payload[R], from, to uint64) (q Payload[R], ok bool, err error)
}

// Appender is the compare-and-append on the shared upper.
//
// Append writes p at T and moves the upper to T+1 if and only if the upper
// is <= T; otherwise it writes nothing and returns OK false with the actual
// upper (> T). The contract that makes cancellation safe:
//
//   - An error means nothing was written, ever. ctx may be observed only
//     until the append is submitted (a connection is being acquired, say);
//     then Append returns ctx's error and nothing was written.
//   - Once the append may have reached the backend (COMMIT sent), Append
//     waits for the definite outcome whatever happens to ctx, and reports
//     it. If the connection breaks with the outcome unknown, Append must
//     find it out (for example by checking, on another connection, whether
//     the upper passed T with this write's marker) before it returns; it
//     must never return an error for a write that is or may become durable.
type Appender[R any] interface {
	Append(ctx context.Context, t uint64, p Payload[R]) (AppendResult, error)
}

// Env is what a write's loop runs against. Selection may be nil for blind
// writes; Sem, Metrics and Budget are optional.
type Env[R any] struct {
	Oracle    Oracle
	Selection Selection[R]
	Appender  Appender[R]
	// Sem bounds concurrent read-then-write loops; blind writes do not take it.
	Sem     *Semaphore
	Metrics *Metrics
	// Budget, when set, records the phase (semaphore wait, OCC attempt) and
	// turns an ended ctx into the client's 57014; without it the error is
	// 57014 wrapping context.Cause(ctx).
	Budget *timeouts.Budget
}

// Run drives write w through its loop against env and returns the result
// the client is told. It is the thin, blocking wrapper of Machine: every
// call it makes is one action, every answer one event.
//
// Cancellation: if ctx ends before an append is submitted, Run returns the
// cancellation error and nothing was written. If it ends while an append is
// in flight, Run waits for the append's definite outcome: on success it
// applies the write (with a context detached from ctx) and returns the
// success even though ctx is done; on a conflict it returns the
// cancellation error without retrying.
func Run[R any](ctx context.Context, cfg Config, w Write[R], env Env[R]) (Result, error) {
	metrics := env.Metrics
	if metrics == nil {
		metrics = &Metrics{}
	}
	sem := env.Sem
	if w.Blind {
		sem = nil
	}
	release, err := metrics.Admit(ctx, sem, env.Budget, nil)
	if err != nil {
		return Result{}, err
	}
	defer release()

	m := NewMachine(cfg, w)
	a := m.Action()
	for !a.Terminal() {
		if ctx.Err() != nil {
			switch a.Kind {
			case ActAppend:
				// Not called yet, so not submitted: nothing is written.
				a = m.Step(Event[R]{Kind: EvError, Err: Interrupted(ctx, env.Budget)})
				continue
			case ActApply:
				// Committed: finish regardless.
			default:
				a = m.Step(Event[R]{Kind: EvCancel, Err: Interrupted(ctx, env.Budget)})
				continue
			}
		}
		var e Event[R]
		switch a.Kind {
		case ActAllocate:
			ts, err := env.Oracle.WriteTS(ctx)
			e = answer(ctx, env.Budget, Event[R]{Kind: EvTimestamp, TS: ts}, err)
		case ActRead:
			p, err := env.Selection.Read(ctx, a.At)
			e = answer(ctx, env.Budget, Event[R]{Kind: EvRead, Payload: p}, err)
		case ActRefold:
			p, ok, err := env.Selection.Refold(ctx, a.Payload, a.From, a.To)
			e = answer(ctx, env.Budget, Event[R]{Kind: EvRefolded, Payload: p, OK: ok}, err)
		case ActAppend:
			r, err := env.Appender.Append(ctx, a.T, a.Payload)
			if ctx.Err() != nil {
				// Recorded, not acted on: the outcome decides.
				m.Step(Event[R]{Kind: EvCancel, Err: Interrupted(ctx, env.Budget)})
			}
			if err != nil {
				// Nothing was written (the Appender's contract); a ctx
				// error from before submission reads as the cancellation.
				if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
					err = Interrupted(ctx, env.Budget)
				}
				e = Event[R]{Kind: EvError, Err: err}
			} else {
				e = Event[R]{Kind: EvAppended, Append: r}
			}
		case ActApply:
			err := env.Oracle.ApplyWrite(context.WithoutCancel(ctx), a.T)
			e = Event[R]{Kind: EvApplied}
			if err != nil {
				e = Event[R]{Kind: EvError, Err: err}
			}
		}
		a = m.Step(e)
	}
	metrics.Finish(a.Result, a.Err, ctx.Err() != nil)
	if a.Kind == ActFail {
		return a.Result, a.Err
	}
	return a.Result, nil
}

// answer turns a call's result into its event: the success event, an
// EvCancel if the call failed because ctx ended, or EvError.
func answer[R any](ctx context.Context, b *timeouts.Budget, ok Event[R], err error) Event[R] {
	switch {
	case err == nil:
		return ok
	case ctx.Err() != nil:
		return Event[R]{Kind: EvCancel, Err: Interrupted(ctx, b)}
	}
	return Event[R]{Kind: EvError, Err: err}
}
