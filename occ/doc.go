// Package occ is mzproxy's optimistic write loop: the way a write that
// reads (UPDATE, DELETE, INSERT ... SELECT) commits at a timestamp T
// without holding a lock across its read, following the rules of
// Materialize's adapter for read-then-write. It is the etcd-raft RawNode of
// writes: the core does no I/O, reads no clock and knows no SQL; time, the
// oracle, the read and the compare-and-append come in through small
// interfaces, so conflicts can be replayed step by step in tests and
// checked against a serial model.
//
// # Diffs and payloads
//
// A write's effect is a Payload: consolidated Updates (a row and a
// multiplicity change) plus the row count the client is told. Rows are
// generic (Update[R]); identity is a key function wherever it matters
// (Consolidate, Diff, Multiset). Collections are multisets: duplicate
// rows are distinct units, and a retraction of more copies than present is
// an *OverDeleteError, never clamped. A correct loop never produces one (a
// payload is always computed against the state it is appended to); the
// Appender reports it if it happens, and the loop fails with it.
//
// # The loop
//
// Machine is the loop as a state machine; Action says what to do next and
// Step takes what happened (an Event) and returns the next action:
//
//  1. ActAllocate: the oracle's write timestamp. The target T is the
//     oracle's answer raised to at least the actual upper of the last
//     conflict and the last read time + 1 (a lagging oracle never makes
//     the loop retry a time known to fail).
//  2. ActRead at T-1 (first attempt), or after a conflict ActRefold over
//     [last read + 1, T): fold the changes committed in that window into
//     the payload. The Selection refolds when it can (a single-table
//     selection: each row's contribution depends on that row only, so the
//     window's changed versions are enough: Fold); otherwise it says so and the
//     loop re-reads at T-1 (ActRead). Either way the payload is exactly the
//     statement's consolidated diffs against the state below T. Blind
//     writes (Write.Blind) skip this step.
//  3. ActAppend: compare-and-append the payload at T. Success moves the
//     upper to T+1. Failure returns the actual upper U > T: the loop goes
//     back to 1 with U as the floor, unless the budget (Config.MaxAttempts
//     appends) is spent: then SQLSTATE 40001 "read-then-write exceeded
//     maximum retry attempts under contention", with a hint.
//  4. ActApply: ApplyWrite(T) on the oracle; then ActDone. The client is
//     told "UPDATE n" only after the append succeeded and ApplyWrite
//     returned. If ApplyWrite fails the write is still durable: the loop
//     fails with an *ApplyError (Committed(err) is true) and leaves the
//     choice to the proxy.
//
// An empty payload is appended too: the append at T is what linearizes the
// read at T-1 that produced "UPDATE 0" (and it is cheap).
//
// # Cancellation
//
// The machine models "may have reached the backend" explicitly: from the
// moment it emits ActAppend until the append's outcome (EvAppended) or an
// error that proves nothing was written (EvError), the append is in
// flight (Machine.InFlight). An EvCancel before that ends the loop at once
// with the cancel's error and nothing written. An EvCancel while in flight
// is only recorded: the outcome decides. A success is reported as success
// with its row count even though the statement's context is done (its
// ApplyWrite runs detached from that context); a conflict ends the loop
// with the cancel's error and no retry. A driver that has not yet called the
// append when the context ends reports EvError, not EvCancel: nothing was
// submitted. The result is that the client never gets an error for a write
// that was applied, nor success for one that was not.
//
// The same contract binds the Appender (see its doc): an error means
// nothing was written; it may watch ctx only until it submits; afterwards
// it waits for the definite outcome, resolving a broken connection itself.
//
// # Invariants
//
// Checked by the replays under testdata/replay and by the randomized tests
// in quick_test.go against a serial model:
//
//   - Committed writes, applied in timestamp order to the initial state,
//     each recomputed against the state just below its T, give exactly the
//     payloads that were appended and the final state.
//   - A writer is told success if and only if its payload was appended,
//     once, at the T and with the row count it is told; reported row counts
//     add up to the committed ones.
//   - No over-delete; 40001 only after the whole budget was spent.
//
// # Drivers
//
// The machine is driven by the proxy (proxy/write.go) in production and by
// Run, a thin blocking driver against an Env of interfaces (Oracle,
// Selection, Appender), in this package's tests, replays and simulation
// (driver_test.go; the reference semantics it is checked against,
// Consolidate, Multiset and Fold, are in reference_test.go). Both admit a
// loop the same way: Metrics.Admit counts it and takes a slot of a
// Semaphore (FIFO, context-aware: a waiter whose context ends leaves the
// queue), which bounds the loops a proxy runs at once; the wait counts
// against the statement's deadline, and with a timeouts.Budget the phase
// (semaphore wait, OCC attempt) is recorded for the 57014 error.
// Metrics.Finish counts the outcome from the machine's Result: conflicts,
// retries, refolds, re-reads, exhausted budgets and cancels, for export.
//
// # In the proxy
//
// An attempt in the proxy is one implicit backend transaction, sent in one
// round trip with one ReadyForQuery: the write slot and the client's
// statement (under PostgreSQL's row locks; its T is chosen once it holds
// them, inside the backend), committed by the backend at the end of the
// client's Query or at its Sync. Nothing is validated at the end, so the
// only conflicts are PostgreSQL's own transient errors of the statement
// (40001, 40P01), which the proxy reports as an append that lost; the
// machine decides retry or 40001. The proxy does not ask for T: it
// answers ActAllocate after the round trip with the machine's floor;
// ActRefold always with "cannot" (the proxy re-executes the statement);
// ActRead with the statement's row count; and
// ActApply at once. The timestamp rules themselves are Frontier's
// (frontier.go), a model of package storage's SQL.
package occ
