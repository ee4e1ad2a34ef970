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
// (route.replayable). Each attempt is one backend round trip with one
// ReadyForQuery: the write slot (storage.OpenWriteFor, T pending) and the
// client's statement in one implicit transaction, which the backend
// commits at the end of the Query (or at the client's Sync) and rolls back
// whole at an error. The slot is the Bind/Execute of mzproxy_begin_write
// (parsed once per backend connection and incarnation), with no Sync
// after it, then the client's messages as they came:
//
//	simple:   Bind/Execute slot, Query "<the client's text>"
//	extended: Bind/Execute slot, the client's Bind ... Sync
//
// A Parse (and Describe) of the client's ahead of the Bind in its batch,
// as pgx's exec modes and node-postgres send a statement, is forwarded
// as it came and runs nothing: the first attempt relays its answers
// before the slot's, and an error in it (the backend then skips to the
// client's Sync) is the client's answer. Later attempts send the Bind
// ... Sync alone.
//
// PostgreSQL runs a Query that follows an unsynced Execute in the
// transaction the Execute began (TestSlotExecuteThenQuery), so the slot
// costs no parse or plan per write, and error positions are the client's
// own. An error in the slot makes the backend skip everything up to a
// Sync, the client's Query included: the proxy then sends one. A statement
// PostgreSQL refuses in a transaction block is refused behind the slot too
// (25001), but none is replayable. No BEGIN, no COMMIT, no Close: the
// slot's portal ends with the transaction; the proxy's messages name only
// its own statement and portal.
//
// A write's T is chosen inside the backend (storage/frontier.sql) and is
// not asked for: it would cost a statement per write, for the trace span
// only. The statement's span and slow-statement line carry no timestamp.
//
// The statement runs under PostgreSQL's row locks, and T is chosen once it
// holds them, so nothing is validated at the end. What is retried is what
// PostgreSQL itself reports as a transient conflict: a serialization
// failure (40001: also a statement that would close a version newer than
// its T, possible when it writes history more than once) or a deadlock
// (40P01). The implicit transaction rolled back at the error, its answers
// are dropped, and occ.Machine decides: another attempt, or 40001 once its
// budget is spent. Any other error of the statement is the client's
// answer; an error of the slot (a fenced incarnation) skips the client's
// statement and is the client's answer. The client sees the answers of the
// attempt that committed only.
//
// The test-only failpoint (Config.OCCPauseFile, a statement carrying
// OCCPauseMarker) needs a transaction that stays open between the
// statement and its commit: that first attempt takes two round trips,
// BEGIN and the slot with the client's request, then COMMIT after the
// pause (explicitAttempt).
//
// Cancellation: the statement's context ends at the client's cancel or the
// deadline (deadline.go), and the backend is sent a CancelRequest, so a
// running statement fails and the attempt writes nothing; a context that
// ends between attempts stops the loop (at the failpoint, before COMMIT:
// the attempt is rolled back). Once the attempt is sent the outcome the
// backend reports is what the client gets, whatever happened to ctx: a
// commit that succeeded is reported as success.

// occRequest is the client's request an optimistic write runs.
type occRequest struct {
	query  string   // a simple Query's text; "" for a batch
	frames [][]byte // the client's frames as it sent them (Query, or Bind ... Sync)
	// builds: the histories built first, after the slot
	// (lazy_history.go); a refusing trigger's table is added for the
	// next attempt.
	builds *historyBuilds
}

// attempt is what one attempt's round trip left.
type attempt struct {
	answers [][]byte // the client statement's answers, copied
	rows    int64
	// failed is the ErrorResponse that ends the attempt: the slot's,
	// or the client statement's (then also in answers).
	failed []byte
	// conflict: failed is a transient conflict (40001, 40P01) of the
	// statement, retried.
	conflict bool
	// interrupted: the context ended at the failpoint, before COMMIT; the
	// attempt was rolled back.
	interrupted bool
	// readOnly: the slot failed with 25006, the transaction is read-only
	// (default_transaction_read_only): nothing managed can be written in
	// it, so the statement runs without the slot (runReadOnly).
	readOnly bool
	ready    []byte // the ReadyForQuery that ended the attempt
}

// take records an answer of the client's statement.
func (at *attempt) take(ctx context.Context, typ byte, f []byte) {
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
}

// optimisticWrite runs a replayable write outside a transaction block
// through the optimistic loop; req is sent again for each attempt. It
// writes for incarnation inc. occ.Machine decides everything the loop
// decides (retry or 40001, the counts); this side does the I/O.
func (s *Session) optimisticWrite(ctx context.Context, sql string, inc int64, req occRequest) error {
	px := s.proxy
	release, err := px.occStats.Admit(ctx, px.occSem, s.budget, s.enter)
	if err != nil {
		return err
	}
	defer release()
	defer s.unpollBackend(s.pollBackend())

	s.busy.Store(true)
	defer s.busy.Store(false)
	s.midRequest = true
	s.slotSQL = sql
	defer func() { s.slotSQL = "" }()

	w := &occWrite{
		s: s, ctx: ctx, req: req, inc: inc,
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
	req   occRequest
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

// attempt runs one attempt for the machine's ActAllocate a and reports its
// outcome. answered: the client has its answer (the error of a statement
// or of the slot), and the loop is over.
func (w *occWrite) attempt(a occ.Action[struct{}]) (next occ.Action[struct{}], answered bool, err error) {
	s := w.s
	s.obs.Phase(observe.PhaseOCCAttempt)
	var at attempt
	if w.pause && w.m.Result().Attempts == 0 {
		at, err = s.explicitAttempt(w.ctx, w.req, w.inc)
	} else {
		at, err = s.oneTripAttempt(w.ctx, w.req, w.inc)
	}
	if err != nil {
		return a, true, err
	}
	// The write's T is not known (see the header): the machine is given
	// its floor, which it only uses to order its own attempts.
	switch {
	case at.interrupted:
		return w.m.Step(occ.Event[struct{}]{Kind: occ.EvError, Err: occ.Interrupted(w.ctx, s.budget)}), false, nil
	case at.conflict:
		if oid := pendingOID(at.failed); oid != "" {
			// A table the statement reaches unseen has no history yet.
			if w.req.builds == nil {
				w.req.builds = &historyBuilds{}
			}
			w.req.builds.addOID(oid)
		}
		return w.step(a.Floor, at.rows, occ.AppendResult{}), false, nil
	case at.readOnly && at.ready != nil:
		return a, true, s.runReadOnly(w.ctx, w.req)
	case at.failed != nil:
		if at.answers == nil {
			at.answers = [][]byte{at.failed}
		}
		return a, true, s.occFinish(at.answers, at.ready)
	}
	w.step(a.Floor, at.rows, occ.AppendResult{OK: true})
	w.answers, w.ready = at.answers, at.ready
	s.markBuilt(w.req.builds)
	return w.m.Step(occ.Event[struct{}]{Kind: occ.EvApplied}), false, nil
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

// oneTripAttempt sends an attempt as one implicit transaction (see the
// header) and reads its answers. When the slot's prepared statement is
// gone (a client's DEALLOCATE of it by name: 26000 at its Bind, before
// anything ran), it is prepared again and the attempt sent once more.
func (s *Session) oneTripAttempt(ctx context.Context, req occRequest, inc int64) (attempt, error) {
	at, slotMissing, err := s.oneTrip(ctx, req, inc)
	if err == nil && slotMissing {
		at, _, err = s.oneTrip(ctx, req, inc)
	}
	return at, err
}

// oneTrip is one round trip of an attempt: the slot's answers are dropped
// up to its CommandComplete (an error before it is the slot's, and the
// backend skipped the client's statement), the client's are kept.
// slotMissing: the slot's Bind found no prepared statement.
func (s *Session) oneTrip(ctx context.Context, req occRequest, inc int64) (at attempt, slotMissing bool, err error) {
	if err := s.sendSlotBind(inc); err != nil {
		return at, false, err
	}
	// The slot's CommandComplete, and the build's when there is one.
	owed := 1
	if !req.builds.empty() {
		if err := s.sendBuild(req.builds); err != nil {
			return at, false, err
		}
		owed++
	}
	if err := s.forwardAll(req.frames); err != nil {
		return at, false, err
	}
	if err := s.be.w.Flush(); err != nil {
		return at, false, s.lostWrite(err)
	}
	slotDone := false
	var parseFailed bool
	var relayErr error
	err = s.occReadUntil(ctx, func(typ byte, f []byte) (done bool) {
		switch {
		case s.units.len() > 0:
			// The client's Parse and Describe ahead of the write in its
			// batch (handleBind), in the first attempt only: relayed as
			// an exchange relays them. After an error the backend skips
			// to the client's Sync.
			if typ == 'N' {
				relayErr = s.client.WriteFrame(f)
			} else {
				_, relayErr = s.answerUnit(ctx, s.units.front(), typ, f)
			}
			parseFailed = parseFailed || typ == 'E'
			return relayErr != nil
		case typ == 'Z':
			at.ready = cloneFrame(f)
			return true
		case slotDone:
			at.take(ctx, typ, f)
		case typ == '1':
			s.writeSlotPrepared = inc
		case typ == 'C':
			owed--
			slotDone = owed == 0
		case typ == 'E':
			at.failed = s.slotRefusal(cloneFrame(f))
			// A deadlock of the build (TestFault18FirstWriteBurst): the
			// client's Parse, in front of the slot in the first attempt
			// (handleBind), locked the table its write names, and
			// ensure_history's stronger lock waits for another such
			// session's. Nothing of the client's ran: the attempt is
			// retried as a conflict of the statement is, and the next
			// sends no Parse first.
			at.conflict = transientConflict(pgerr.Code(errorCode(wire.Body(f)))) && ctx.Err() == nil
			at.readOnly = pgerr.Code(errorCode(wire.Body(f))) == pgerr.ReadOnlySQLTransaction
			slotMissing = pgerr.Code(errorCode(wire.Body(f))) == pgerr.InvalidSQLStatementName
			// Whatever failed, the slot's statement is prepared again
			// next time.
			s.writeSlotPrepared = 0
			// A Query after the failed Execute is skipped with
			// everything else up to a Sync, which the client's batch
			// has and its Query has not.
			return req.query != ""
		}
		return false
	})
	if err == nil {
		err = relayErr
	}
	if err == nil && parseFailed {
		// The client has its error; the write did not run.
		s.readyForQuery(&unit{kind: uSync, relayZ: true}, at.ready)
		at.failed, at.answers = at.ready, [][]byte{}
	}
	if err != nil || at.ready != nil {
		return at, slotMissing, err
	}
	if err := s.be.w.Send(&pgproto3.Sync{}); err != nil {
		return at, false, s.lost(err)
	}
	if err := s.be.w.Flush(); err != nil {
		return at, false, s.lostWrite(err)
	}
	return at, slotMissing, s.occRead(ctx, func(typ byte, f []byte) {
		if typ == 'Z' {
			at.ready = cloneFrame(f)
		}
	})
}

// sendSlotBind queues the Bind and Execute of the write slot's named
// statement (writeSlotStatement, shared with takeWriteSlotExtended),
// parsed first unless it is for inc already. No Sync: the client's Query,
// or its batch's Sync, ends the implicit transaction the Execute began
// (PostgreSQL commits it at the end of a Query as at a Sync), so the
// client's text is sent as it came and the slot costs no parse or plan.
// writeSlotPrepared is set only once the ParseComplete arrives, and reset
// when the slot's part fails (oneTripAttempt).
func (s *Session) sendSlotBind(inc int64) error {
	var msgs []pgproto3.FrontendMessage
	if s.writeSlotPrepared != inc {
		// Closed first: it may exist for an incarnation that was lost, or
		// after a failed attempt (closing one that does not is no error).
		msgs = append(msgs,
			&pgproto3.Close{ObjectType: 'S', Name: writeSlotStatement},
			&pgproto3.Parse{Name: writeSlotStatement, Query: storage.OpenWriteFor(inc)})
	}
	msgs = append(msgs,
		&pgproto3.Bind{DestinationPortal: writeSlotStatement, PreparedStatement: writeSlotStatement},
		&pgproto3.Execute{Portal: writeSlotStatement})
	for _, m := range msgs {
		if err := s.be.w.Send(m); err != nil {
			return s.lost(err)
		}
	}
	return nil
}

// sendBuild queues the Parse, Bind and Execute of b's build as the
// proxy's own named statement (closed first: it is parsed again each
// time, which is only at a table's first write), with no Sync.
func (s *Session) sendBuild(b *historyBuilds) error {
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Close{ObjectType: 'S', Name: buildStatement},
		&pgproto3.Parse{Name: buildStatement, Query: b.sql()},
		&pgproto3.Bind{DestinationPortal: buildStatement, PreparedStatement: buildStatement},
		&pgproto3.Execute{Portal: buildStatement},
	} {
		if err := s.be.w.Send(m); err != nil {
			return s.lost(err)
		}
	}
	return nil
}

// forwardAll forwards the client's frames as they came.
func (s *Session) forwardAll(frames [][]byte) error {
	for _, f := range frames {
		if err := s.forward(f); err != nil {
			return err
		}
	}
	return nil
}

// explicitAttempt is the first attempt of a write stopped at the test-only
// failpoint: BEGIN and the slot, then the client's request as it came, in
// one round trip; the pause; then COMMIT in a second one (or ROLLBACK, if
// the statement failed or the context ended at the pause).
func (s *Session) explicitAttempt(ctx context.Context, req occRequest, inc int64) (attempt, error) {
	var at attempt
	if s.units.len() > 0 {
		// The client's Parse ahead of the write in its batch: answered
		// first, alone.
		if err := s.be.w.Send(&pgproto3.Flush{}); err != nil {
			return at, s.lost(err)
		}
		if err := s.exchange(ctx); err != nil {
			return at, err
		}
		s.busy.Store(true)
		s.midRequest = true
		if s.skipping {
			// It failed, and the backend skips to the client's Sync.
			if err := s.forwardAll(req.frames); err != nil {
				return at, err
			}
			err := s.occRead(ctx, func(typ byte, f []byte) {
				if typ == 'Z' {
					at.ready = cloneFrame(f)
				}
			})
			if err == nil {
				s.readyForQuery(&unit{kind: uSync, relayZ: true}, at.ready)
				at.failed, at.answers = at.ready, [][]byte{}
			}
			return at, err
		}
	}
	own := []string{"BEGIN", storage.OpenWriteFor(inc)}
	if !req.builds.empty() {
		own = append(own, req.builds.sql())
	}
	if err := s.sendOwn(own...); err != nil {
		return at, err
	}
	if err := s.forwardAll(req.frames); err != nil {
		return at, err
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
	slotFailed := at.failed != nil
	err = s.occRead(ctx, func(typ byte, f []byte) {
		// After a failed slot only 25P02 comes.
		if !slotFailed && typ != 'Z' {
			at.take(ctx, typ, f)
		}
	})
	if err != nil {
		return at, err
	}
	if slotFailed {
		at.answers = nil
	}
	if at.failed != nil {
		at.ready, err = s.occRollback(ctx)
		return at, err
	}
	waitForFailpoint(ctx, s.proxy.cfg.OCCPauseFile)
	if ctx.Err() != nil {
		// COMMIT was not sent: roll back, nothing is written.
		at.interrupted = true
		_, err = s.occRollback(ctx)
		return at, err
	}
	return s.occCommit(ctx, at)
}

// occCommit commits the explicit attempt at, whatever happens to the
// statement's context meanwhile.
func (s *Session) occCommit(ctx context.Context, at attempt) (attempt, error) {
	s.obs.Phase(observe.PhaseCommit)
	if err := s.sendOwn("COMMIT"); err != nil {
		return at, err
	}
	if err := s.be.w.Flush(); err != nil {
		return at, s.lostWrite(err)
	}
	var committed bool
	var failed []byte
	err := s.occRead(ctx, func(typ byte, f []byte) {
		switch typ {
		case 'C':
			committed = string(f[5:len(f)-1]) == "COMMIT"
		case 'E':
			if failed == nil {
				failed = cloneFrame(f)
			}
		case 'Z':
			at.ready = cloneFrame(f)
		}
	})
	if err != nil {
		return at, err
	}
	if failed != nil {
		at.failed, at.answers = failed, nil
		at.conflict = transientConflict(pgerr.Code(errorCode(wire.Body(failed))))
		return at, nil
	}
	if !committed {
		return at, pgerr.New(pgerr.InternalError, "optimistic write: COMMIT did not commit, and no error said why")
	}
	return at, nil
}

// transientConflict reports whether code is a conflict PostgreSQL says may
// succeed if retried: a serialization failure or a deadlock.
func transientConflict(code pgerr.Code) bool {
	return code == pgerr.SerializationFailure || code == deadlockDetected
}

// ownStatement names the statement and portal under which the optimistic
// write runs its own SQL.
var ownStatement = ownName("mzproxy_own")

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

// occRead reads the backend's answers to one Query or Sync-ended batch up
// to its ReadyForQuery, handing each to f. Asynchronous messages go straight to
// the client; a FATAL error ends the session.
func (s *Session) occRead(ctx context.Context, f func(typ byte, frame []byte)) error {
	return s.occReadUntil(ctx, func(typ byte, frame []byte) bool {
		f(typ, frame)
		return typ == 'Z'
	})
}

// occReadUntil is occRead up to the answer f says is the last.
func (s *Session) occReadUntil(ctx context.Context, f func(typ byte, frame []byte) (done bool)) error {
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
		if f(typ, frame) {
			return nil
		}
	}
}

// occRollback ends a failed explicit attempt's transaction and returns
// the ReadyForQuery that ended it.
func (s *Session) occRollback(ctx context.Context) (ready []byte, err error) {
	// A CancelRequest the statement's end sent the backend may still
	// land on the ROLLBACK itself; then the transaction is still open.
	for attempt := 0; attempt < 3 && (ready == nil || s.tx != txIdle); attempt++ {
		if err := s.sendOwn("ROLLBACK"); err != nil {
			return nil, err
		}
		if err := s.be.w.Flush(); err != nil {
			return nil, s.lostWrite(err)
		}
		if err := s.occRead(ctx, func(typ byte, f []byte) {
			if typ == 'Z' {
				ready = cloneFrame(f)
			}
		}); err != nil {
			return nil, err
		}
	}
	if s.tx != txIdle {
		return nil, pgerr.Fatal(pgerr.InternalError, "optimistic write: could not roll back its attempt")
	}
	return ready, nil
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
			frames := [][]byte{b.bind}
			if b.describe != nil {
				frames = append(frames, b.describe)
			}
			frames = append(frames, b.execute, sync)
			return true, s.optimisticWrite(ctx, b.sql, inc, occRequest{frames: frames, builds: s.historyBuildsFor(b.sql)})
		}
	}
	return false, s.releaseBatch(ctx)
}

// runReadOnly runs req, a write whose slot the backend refused because its
// transaction is read-only, as the client sent it, without the slot: in a
// read-only transaction PostgreSQL refuses every write that the slot is
// for (a permanent table's), with its own message, and runs the others (a
// temporary table's) as it would directly.
func (s *Session) runReadOnly(ctx context.Context, req occRequest) error {
	if req.query != "" {
		return s.request(ctx, req.frames[0], unit{kind: uQuery, relayZ: true}, true)
	}
	for _, f := range req.frames {
		u := unit{kind: uBind}
		switch f[0] {
		case 'D':
			u.kind = uDescribePortal
		case 'E':
			u.kind = uExecute
		case 'S':
			u = unit{kind: uSync, relayZ: true}
		}
		if err := s.request(ctx, f, u, u.kind == uSync); err != nil {
			return err
		}
	}
	return nil
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
	s.batchExecuted = true
	if !s.writeSlot && !s.skipping {
		if err := s.takeWriteSlotExtended(ctx); err != nil {
			return s.failExtended(ctx, err)
		}
	}
	if !s.skipping {
		if err := s.buildExtended(b.sql); err != nil {
			return s.failExtended(ctx, err)
		}
	}
	return s.request(ctx, b.execute, unit{kind: uExecute}, false)
}

// ddlWrite runs an autocommit DDL statement (route.oneDDL), a simple
// Query sql in frame, for incarnation inc, in one implicit transaction
// sent as an optimistic write's attempt is (oneTrip): the slot's
// Bind/Execute, then the client's Query, which the backend runs in the
// transaction the Execute began and commits at its end. One attempt: DDL
// is not retried (it never was), so a conflict is the client's answer.
// Against the BEGIN, slot, statement and COMMIT it replaces (three
// Queries), the backend parses and plans no slot and runs no BEGIN and
// no COMMIT statement, and answers with one ReadyForQuery instead of
// three (docs/ddl-cost.md, "Session 20"). A statement PostgreSQL refuses
// in a transaction block is refused here too (25001: it would run in a
// pipeline), as it was between BEGIN and COMMIT; the route sends none
// (transactional).
func (s *Session) ddlWrite(ctx context.Context, sql string, frame []byte, inc int64) error {
	defer s.unpollBackend(s.pollBackend())
	s.busy.Store(true)
	defer s.busy.Store(false)
	s.midRequest = true
	s.obs.Phase(observe.PhaseOCCAttempt)
	req := occRequest{query: sql, frames: [][]byte{frame}}
	at, err := s.oneTripAttempt(ctx, req, inc)
	if err != nil {
		return err
	}
	if at.readOnly && at.ready != nil {
		// As an optimistic write's (runReadOnly): PostgreSQL's own
		// refusal names the command, a temporary object's DDL runs.
		return s.runReadOnly(ctx, req)
	}
	if at.failed != nil && at.answers == nil {
		// The slot's error: the backend skipped the statement.
		at.answers = [][]byte{at.failed}
	}
	return s.occFinish(at.answers, at.ready)
}
