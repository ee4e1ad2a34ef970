package proxy

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/occ"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/proxy/observe"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// deadlockDetected is PostgreSQL's 40P01.
const deadlockDetected pgerr.Code = "40P01"

// OCCPauseMarker is the comment that makes an optimistic write stop at
// the test-only failpoint (Config.OCCPauseFile).
const OCCPauseMarker = "/*mzproxy:occ-pause*/"

// An optimistic write is one client Query (or Bind ... Sync batch),
// outside a transaction block, of a single statement that can be run again
// (route.replayable). Each attempt is one backend transaction, sent in one
// round trip (two when the test-only failpoint stops between payload and
// append):
//
//	payload: BEGIN; SELECT begin_write_occ(inc, 0)   -- the slot, T pending
//	         <the client's Query or batch>           -- answers buffered
//	append:  SELECT commit_write(inc)                -- T
//	         COMMIT
//
// The proxy's own statements go as extended-protocol messages, each line
// above ended by a Sync (sendOwn), never as a simple Query, which would
// destroy the client's unnamed statement that its batch binds.
//
// The statement runs under PostgreSQL's row locks, and T is chosen once it
// holds them (storage/frontier.sql), so nothing is validated at the end.
// What is retried is what PostgreSQL itself reports as a transient
// conflict: a serialization failure (40001: also a statement that would
// close a version newer than its T, possible when it writes history more
// than once) or a deadlock (40P01). The attempt rolls back, its answers
// are dropped, and occ.Machine decides: another attempt, or 40001 once its
// budget is spent. Any other error of the statement is the client's
// answer. The client sees the answers of the attempt that committed only,
// after its COMMIT.
//
// Cancellation: the statement's context ends at the client's cancel or the
// deadline (deadline.go), and the backend is sent a CancelRequest, so a
// running statement fails and the attempt writes nothing; a context that
// ends between attempts stops the loop (at the failpoint, before the
// append: the attempt is rolled back). Once the append is sent the outcome
// the backend reports is what the client gets, whatever happened to ctx: a
// COMMIT that succeeded is reported as success.

// attempt is what one attempt's payload round trip left.
type attempt struct {
	answers [][]byte // the client statement's answers, copied
	rows    int64
	// failed is the ErrorResponse that ends the attempt: begin_write_occ's,
	// or the client statement's (then also in answers).
	failed []byte
	// conflict: failed is a transient conflict (40001, 40P01) of the
	// statement, retried.
	conflict bool
}

// optimisticWrite runs a replayable write outside a transaction block
// through the optimistic loop; send forwards the client's messages of it
// (a Query, or a Bind ... Sync batch), again for each attempt. It writes
// for incarnation inc. occ.Machine decides everything the loop decides
// (the floor and the wait of each attempt, retry or 40001, the counts);
// this side does the I/O.
func (s *Session) optimisticWrite(ctx context.Context, sql string, inc int64, send func() error) error {
	px := s.proxy
	release, err := px.occStats.Admit(ctx, px.occSem, s.budget, s.enter)
	if err != nil {
		return err
	}
	defer release()

	s.busy.Store(true)
	defer s.busy.Store(false)
	s.midRequest = true

	w := &occWrite{
		s: s, ctx: ctx, send: send, inc: inc,
		pause: px.cfg.OCCPauseFile != "" && strings.Contains(sql, OCCPauseMarker),
		m:     occ.NewMachine(occ.Config{MaxAttempts: px.OCCMaxAttempts()}, occ.Write[struct{}]{}),
	}
	defer w.finish()
	return w.run()
}

// occWrite is one optimistic write in progress: the machine that decides,
// and what the attempt that committed left for the client.
type occWrite struct {
	s     *Session
	ctx   context.Context
	send  func() error
	inc   int64
	pause bool // stop at the test-only failpoint in the first attempt
	m     *occ.Machine[struct{}]

	answers [][]byte // the committed attempt's answers
	ready   []byte   // the ReadyForQuery that ends the client's request
}

// run drives the machine until it ends, or until an attempt's outcome is
// the client's answer (the statement failed: nothing to retry).
func (w *occWrite) run() error {
	a := w.m.Action()
	for !a.Terminal() {
		if w.ctx.Err() != nil {
			// Between attempts: nothing is in flight.
			a = w.m.Step(occ.Event[struct{}]{Kind: occ.EvCancel, Err: occ.Interrupted(w.ctx, w.s.budget)})
			continue
		}
		var answered bool
		var err error
		if a, answered, err = w.attempt(a); answered || err != nil {
			return err
		}
	}
	if a.Kind == occ.ActFail {
		w.s.midRequest = false
		return a.Err
	}
	return w.s.occFinish(w.answers, w.ready)
}

// finish counts the write's outcome and logs a write that had to retry.
func (w *occWrite) finish() {
	a, r := w.m.Action(), w.m.Result()
	var err error
	if a.Kind == occ.ActFail {
		err = a.Err
	}
	w.s.proxy.occStats.Finish(r, err, w.ctx.Err() != nil)
	if r.Conflicts > 0 {
		w.s.log.WithFields(map[string]any{"attempts": r.Attempts, "conflicts": r.Conflicts, "committed": r.Committed}).
			Debug("optimistic write retried after conflicts")
	}
}

// attempt runs one attempt for the machine's ActAllocate a: the payload
// and the append, in one round trip but at the failpoint. answered: the
// client has its answer (the error of a statement or of the slot), and the
// loop is over.
func (w *occWrite) attempt(a occ.Action[struct{}]) (next occ.Action[struct{}], answered bool, err error) {
	s := w.s
	s.obs.Phase(observe.PhaseOCCAttempt)
	pipelined := !(w.pause && w.m.Result().Attempts == 0)
	at, err := s.occPayload(w.ctx, w.send, w.inc, pipelined)
	if err != nil {
		return a, true, err
	}
	if at.conflict {
		// Rolled back: commit_write failed with 25P02, COMMIT with it.
		if _, err := s.occAppend(w.ctx, w.inc, pipelined); err != nil {
			return a, true, err
		}
		return w.step(a.Floor, at.rows, occ.AppendResult{}), false, nil
	}
	if at.failed != nil {
		return a, true, w.payloadFailed(at, pipelined)
	}
	if !pipelined {
		waitForFailpoint(w.ctx, s.proxy.cfg.OCCPauseFile)
		if w.ctx.Err() != nil {
			// The append was not sent: roll back, nothing is written.
			if err := s.occRollback(w.ctx, nil); err != nil {
				return a, true, err
			}
			return w.m.Step(occ.Event[struct{}]{Kind: occ.EvError, Err: occ.Interrupted(w.ctx, s.budget)}), false, nil
		}
	}
	return w.appendAttempt(at, pipelined)
}

// step reports an attempt at T whose statement read rows to the machine,
// with the append's outcome, and returns the machine's next action. A
// conflict's ActualUpper is raised above the attempt's target (the
// machine's model: a conflict is an upper past T).
func (w *occWrite) step(t uint64, rows int64, r occ.AppendResult) occ.Action[struct{}] {
	a := w.m.Step(occ.Event[struct{}]{Kind: occ.EvTimestamp, TS: max(t, 1)})
	if a.Kind == occ.ActRefold {
		// The statement is re-executed: its reads are not known to the
		// proxy, so there is nothing to fold.
		a = w.m.Step(occ.Event[struct{}]{Kind: occ.EvRefolded})
	}
	if a.Kind == occ.ActRead {
		a = w.m.Step(occ.Event[struct{}]{Kind: occ.EvRead, Payload: occ.Payload[struct{}]{Rows: rows}})
	}
	if !r.OK {
		r.ActualUpper = max(r.ActualUpper, a.T+1)
	}
	return w.m.Step(occ.Event[struct{}]{Kind: occ.EvAppended, Append: r})
}

// payloadFailed ends the write whose payload failed: an ErrorResponse of
// the slot or of the statement ended it, and nothing was written.
func (w *occWrite) payloadFailed(at attempt, pipelined bool) error {
	s := w.s
	if at.answers == nil {
		at.answers = [][]byte{at.failed}
	}
	if !pipelined {
		// The client sees the error as PostgreSQL sent it.
		return s.occRollback(w.ctx, at.answers)
	}
	// The append that followed failed with 25P02 and COMMIT rolled back.
	out, err := s.occAppend(w.ctx, w.inc, true)
	if err != nil {
		return err
	}
	return s.occFinish(at.answers, out.ready)
}

// appendAttempt reads (sends, unless pipelined) the append of attempt at
// and reports its outcome to the machine.
func (w *occWrite) appendAttempt(at attempt, pipelined bool) (next occ.Action[struct{}], answered bool, err error) {
	s := w.s
	s.obs.Phase(observe.PhaseCommit)
	out, err := s.occAppend(w.ctx, w.inc, pipelined)
	if err != nil {
		s.midRequest = false
		return w.m.Action(), true, err
	}
	// From here the outcome decides, whatever happened to ctx (a conflict
	// is not retried once ctx has ended: run checks it first).
	switch {
	case out.failed != nil:
		return w.m.Action(), true, s.occFinish([][]byte{out.failed}, out.ready)
	case out.conflict:
		return w.step(w.m.Action().Floor, at.rows, occ.AppendResult{}), false, nil
	}
	s.obs.Timestamp(out.t)
	w.step(out.t, at.rows, occ.AppendResult{OK: true})
	w.answers, w.ready = at.answers, out.ready
	return w.m.Step(occ.Event[struct{}]{Kind: occ.EvApplied}), false, nil
}

// occPayload sends an attempt's first round trip and reads its answers.
// withAppend sends the append too (occAppend then only reads its answers).
func (s *Session) occPayload(ctx context.Context, send func() error, inc int64, withAppend bool) (attempt, error) {
	var at attempt
	if err := s.sendOwn("BEGIN", storage.OpenWriteFor(inc)); err != nil {
		return at, err
	}
	if err := send(); err != nil {
		return at, err
	}
	if withAppend {
		if err := s.sendAppend(inc); err != nil {
			return at, err
		}
	}
	if err := s.be.w.Flush(); err != nil {
		return at, s.lostWrite(err)
	}
	err := s.occRead(ctx, func(typ byte, f []byte) {
		if typ == 'E' {
			at.failed = cloneFrame(f)
		}
	})
	if err != nil {
		return at, err
	}
	beginFailed := at.failed != nil
	err = s.occRead(ctx, func(typ byte, f []byte) {
		if beginFailed || typ == 'Z' {
			// After a failed begin_write_occ only 25P02 comes; the
			// client gets the ReadyForQuery of the transaction's end.
			return
		}
		at.answers = append(at.answers, cloneFrame(f))
		switch typ {
		case 'E':
			if at.failed == nil {
				at.failed = at.answers[len(at.answers)-1]
				at.conflict = transientConflict(pgerr.Code(errorCode(wire.Body(f)))) && ctx.Err() == nil
			}
		case 'C':
			at.rows += tagRows(f)
		}
	})
	if beginFailed {
		at.answers = nil
	}
	return at, err
}

// transientConflict reports whether code is a conflict PostgreSQL says may
// succeed if retried: a serialization failure or a deadlock.
func transientConflict(code pgerr.Code) bool {
	return code == pgerr.SerializationFailure || code == deadlockDetected
}

// appendOutcome is what an attempt's append round trip left.
type appendOutcome struct {
	t        uint64 // the write's T (0 when it wrote no history)
	conflict bool   // COMMIT failed with a transient conflict: retried
	failed   []byte // an ErrorResponse that ends the write (nothing written)
	ready    []byte // the ReadyForQuery after COMMIT
}

// sendAppend queues commit_write and COMMIT for incarnation inc, each
// ended by its own Sync (so each has its ReadyForQuery).
func (s *Session) sendAppend(inc int64) error {
	if err := s.sendOwn(storage.CommitWriteFor(inc)); err != nil {
		return err
	}
	return s.sendOwn("COMMIT")
}

// ownStatement names the statement and portal under which the optimistic
// write runs its own SQL.
const ownStatement = "mzproxy_own"

// sendOwn queues sqls, the proxy's own statements, followed by a Sync:
// the backend answers them as it answers a simple Query of them all (an
// error skips the rest, one ReadyForQuery ends them). They are not sent as
// a simple Query because that would destroy the client's unnamed
// statement and portal, which a held Bind (and the client's next Bind)
// still uses. Each statement is parsed, run and closed under
// ownStatement; the Closes before it drop what a failed statement left
// (its Closes were skipped), and Close of a name that does not exist is
// no error.
func (s *Session) sendOwn(sqls ...string) error {
	var msgs []pgproto3.FrontendMessage
	for _, sql := range sqls {
		msgs = append(msgs,
			&pgproto3.Close{ObjectType: 'P', Name: ownStatement},
			&pgproto3.Close{ObjectType: 'S', Name: ownStatement},
			&pgproto3.Parse{Name: ownStatement, Query: sql},
			&pgproto3.Bind{DestinationPortal: ownStatement, PreparedStatement: ownStatement},
			&pgproto3.Execute{Portal: ownStatement},
			&pgproto3.Close{ObjectType: 'P', Name: ownStatement},
			&pgproto3.Close{ObjectType: 'S', Name: ownStatement})
	}
	for _, m := range append(msgs, &pgproto3.Sync{}) {
		if err := s.be.w.Send(m); err != nil {
			return s.lost(err)
		}
	}
	return nil
}

// occAppend sends commit_write and COMMIT (unless sent, with the payload)
// and waits for their outcome, whatever happens to the statement's context
// meanwhile.
func (s *Session) occAppend(ctx context.Context, inc int64, sent bool) (appendOutcome, error) {
	var out appendOutcome
	if !sent {
		if err := s.sendAppend(inc); err != nil {
			return out, err
		}
		if err := s.be.w.Flush(); err != nil {
			return out, s.lostWrite(err)
		}
	}
	var appendErr []byte
	var tText string
	var seen bool
	if err := s.occRead(ctx, func(typ byte, f []byte) {
		switch typ {
		case 'D':
			firstValue(f, &tText, &seen)
		case 'E':
			appendErr = cloneFrame(f)
		}
	}); err != nil {
		return out, err
	}
	var committed bool
	err := s.occRead(ctx, func(typ byte, f []byte) {
		switch typ {
		case 'C':
			committed = string(f[5:len(f)-1]) == "COMMIT"
		case 'E':
			if out.failed == nil {
				out.failed = cloneFrame(f)
			}
		case 'Z':
			out.ready = cloneFrame(f)
		}
	})
	if err != nil {
		return out, err
	}
	if appendErr != nil && out.failed == nil {
		out.failed = appendErr
	}
	if out.failed != nil {
		if transientConflict(pgerr.Code(errorCode(wire.Body(out.failed)))) {
			out.conflict, out.failed = true, nil
		}
		return out, nil
	}
	if !committed {
		return out, pgerr.New(pgerr.InternalError, "optimistic write: COMMIT did not commit, and no error said why")
	}
	out.t, _ = strconv.ParseUint(tText, 10, 64)
	return out, nil
}

// occRead reads the backend's answers to one Query or Sync-ended batch up
// to its ReadyForQuery, handing each to f. Asynchronous messages go straight to
// the client; a FATAL error ends the session.
func (s *Session) occRead(ctx context.Context, f func(typ byte, frame []byte)) error {
	for {
		typ, frame, err := s.be.next()
		if err != nil {
			return s.lost(err)
		}
		switch typ {
		case 'E':
			if fatal, err := s.backendErrorIsFatal(frame); fatal {
				_ = s.client.WriteFrame(frame)
				_ = s.client.Flush()
				return err
			}
			if ctx.Err() != nil {
				frame = s.canceledByProxy(ctx, frame)
			}
		case 'Z':
			s.tx = txStatus(frame[5])
		}
		f(typ, frame)
		if typ == 'Z' {
			return nil
		}
	}
}

// occRollback ends a failed attempt's transaction and, when answers is not
// nil, relays them and the ReadyForQuery to the client.
func (s *Session) occRollback(ctx context.Context, answers [][]byte) error {
	var ready []byte
	// A CancelRequest the statement's end sent the backend may still
	// land on the ROLLBACK itself; then the transaction is still open.
	for attempt := 0; attempt < 3 && (ready == nil || s.tx != txIdle); attempt++ {
		if err := s.sendOwn("ROLLBACK"); err != nil {
			return err
		}
		if err := s.be.w.Flush(); err != nil {
			return s.lostWrite(err)
		}
		if err := s.occRead(ctx, func(typ byte, f []byte) {
			if typ == 'Z' {
				ready = cloneFrame(f)
			}
		}); err != nil {
			return err
		}
	}
	if s.tx != txIdle {
		return pgerr.Fatal(pgerr.InternalError, "optimistic write: could not roll back its attempt")
	}
	if answers == nil {
		return nil
	}
	return s.occFinish(answers, ready)
}

// occFinish relays an optimistic write's answers and ReadyForQuery.
func (s *Session) occFinish(answers [][]byte, ready []byte) error {
	for _, f := range answers {
		if f[0] == 'E' {
			s.noteFenced(f, errorCode(wire.Body(f)))
		}
		if err := s.client.WriteFrame(f); err != nil {
			return err
		}
	}
	if err := s.client.WriteFrame(ready); err != nil {
		return err
	}
	return s.flushClient()
}

// tagRows is the row count of a CommandComplete ("UPDATE 3", "INSERT 0 3").
func tagRows(frame []byte) int64 {
	tag := string(frame[5 : len(frame)-1])
	n, err := strconv.ParseInt(tag[strings.LastIndexByte(tag, ' ')+1:], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func cloneFrame(f []byte) []byte { return append([]byte(nil), f...) }

// waitForFailpoint is the test-only pause of Config.OCCPauseFile: it
// announces itself by creating file+".paused" and waits while file exists
// (or until ctx ends).
func waitForFailpoint(ctx context.Context, file string) {
	if _, err := os.Stat(file); err != nil {
		return
	}
	_ = os.WriteFile(file+".paused", nil, 0o644)
	for ctx.Err() == nil {
		if _, err := os.Stat(file); err != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// occBatch is an autocommit Bind of a replayable write held back, with the
// Describe and Execute of its portal that followed, until Sync.
type occBatch struct {
	bind, describe, execute []byte
	portal                  string
	sql                     string
}

// holdBatch handles msg while an autocommit Bind is held: a Describe or
// Execute of its portal joins the batch, and a Sync after the Execute runs
// it through the optimistic loop, the batch re-sent for each attempt.
// Anything else releases the batch (forwarded as usual, the write then
// taking the pessimistic slot) and is not handled here (held false).
func (s *Session) holdBatch(ctx context.Context, msg pgproto3.FrontendMessage, frame []byte) (held bool, err error) {
	b := s.occBatch
	switch m := msg.(type) {
	case *pgproto3.Describe:
		if m.ObjectType == 'P' && m.Name == b.portal && b.describe == nil && b.execute == nil {
			b.describe = cloneFrame(frame)
			return true, nil
		}
	case *pgproto3.Execute:
		if m.Portal == b.portal && b.execute == nil {
			b.execute = cloneFrame(frame)
			return true, nil
		}
	case *pgproto3.Sync:
		if b.execute != nil {
			s.occBatch = nil
			sync := cloneFrame(frame)
			inc, err := s.incarnation(ctx)
			if err != nil {
				return true, err
			}
			return true, s.optimisticWrite(ctx, b.sql, inc, func() error {
				for _, f := range [][]byte{b.bind, b.describe, b.execute, sync} {
					if f == nil {
						continue
					}
					if err := s.forward(f); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	return false, s.releaseBatch(ctx)
}

// releaseBatch forwards a held batch as if it had not been held.
func (s *Session) releaseBatch(ctx context.Context) error {
	b := s.occBatch
	s.occBatch = nil
	if err := s.request(ctx, b.bind, unit{kind: uBind}, false); err != nil {
		return err
	}
	if b.describe != nil {
		if err := s.request(ctx, b.describe, unit{kind: uDescribePortal}, false); err != nil {
			return err
		}
	}
	if b.execute == nil {
		return nil
	}
	if !s.writeSlot && !s.skipping {
		if err := s.takeWriteSlotExtended(ctx); err != nil {
			return s.failExtended(ctx, err)
		}
	}
	return s.request(ctx, b.execute, unit{kind: uExecute}, false)
}
