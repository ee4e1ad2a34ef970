package proxy

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/storage"
	"github.com/mzproxy/mzproxy/timeouts"
)

// A unit is one request forwarded to the backend whose answers have not all
// arrived. Answers come back in request order, so the head of the queue
// owns every answer until the message that ends it.
type unit struct {
	kind unitKind
	disp disposition
	// relayZ: the client gets this unit's ReadyForQuery. False for a
	// client Query that the proxy wrapped in a transaction of its own: the
	// ReadyForQuery the client sees is the wrapper's last.
	relayZ bool
	then   followUp
	// stripParam: the statement described takes the proxy's timestamp as
	// its last parameter, which the client must not see.
	stripParam bool
	// settings: the unit's statements in order, those that change the
	// session's tracked settings non-nil, applied at their
	// CommandComplete.
	settings []*planner.Statement
	// beforeBegin is set on the proxy's own statement pipelined before a
	// client's BEGIN (txn.go, peekBeforeBegin): its first value is kept
	// there, and its ReadyForQuery, the end of its own implicit
	// transaction, ends nothing the session follows.
	beforeBegin *string
	// failed is called when the unit fails, or is skipped after an
	// earlier one failed (read_statements.go: a prepared read's statement
	// then is not what the proxy thinks; injectExtended: the slot's).
	failed func()
	// readStatement: the Bind of a statement the proxy prepared for a
	// simple read (read_statements.go), which the client may have dropped
	// unseen (a protocol Close, or a function's DEALLOCATE, of the name it
	// read from pg_prepared_statements): then nothing ran, and the read
	// is run again (guardedQuery) instead of failing with 26000.
	readStatement bool
	// templateCopy: a client's CREATE DATABASE made to copy the template
	// database (template.go): an error the client's statement may not get
	// is not relayed, and the client's statement runs instead.
	templateCopy bool
	// drop: a client's DROP DATABASE (dropdb.go); dropRetry: not its last
	// attempt, whose 55006 or 42501 (mzproxy's own connections in the
	// database) the client does not see, as the proxy tries again.
	drop, dropRetry bool
	// dropOf: the Execute of a client's DROP DATABASE of this database,
	// which the proxy forgets when it completes (dropDatabaseExtended).
	dropOf string
	// queuedAt: one more than the position of a client's Execute in the
	// backend writer's stream (0: not known), while it may be queued there
	// (failHeldExecute). canceled: the backend fails it in place of
	// running it; the client reads this cause's 57014.
	queuedAt int64
	canceled timeouts.Cause
	// quiet: the proxy's own request, in a batch of its own, whose error
	// is nobody's: not relayed, and the client's request behind it runs
	// and answers as it would have (buildHiddenFirst). A FATAL one ends
	// the session as any.
	quiet bool
}

// readStatementGone reports whether body, an ErrorResponse to the Bind of
// a read's statement (unit.readStatement), says the statement does not
// exist. PostgreSQL's own 26000 at a Bind has no context: the same
// SQLSTATE and text raised by a function of the client's that the Bind
// runs (an IMMUTABLE one is run when the statement is planned, at its
// Bind) carries the function's, and is the client's error, relayed: the
// read ran, and must not run again.
func readStatementGone(body []byte) bool {
	_, inFunction := errorField(body, 'W')
	return errorCode(body) == string(pgerr.InvalidSQLStatementName) && !inFunction
}

type unitKind uint8

const (
	uParse unitKind = iota
	uBind
	uDescribeStatement // ParameterDescription, then RowDescription or NoData
	uDescribePortal    // RowDescription or NoData
	uExecute
	uClose
	uSync  // ReadyForQuery
	uQuery // simple Query or FunctionCall: everything until ReadyForQuery
)

// extended reports whether an error during the unit makes the backend skip
// the requests after it until Sync.
func (k unitKind) extended() bool { return k != uSync && k != uQuery }

type disposition uint8

const (
	// relay: the client asked for this and sees every answer.
	relay disposition = iota
	// swallow: the proxy asked for this; its answers are dropped, except an
	// error, which the client must see (the client's own request then
	// failed for that reason).
	swallow
)

// followUp is a request the proxy sends once a unit is done, because it
// could not be pipelined (the unit was a COPY that needed the client's data
// first).
type followUp uint8

const (
	thenNothing followUp = iota
	thenCommit
)

// queue is a FIFO of units that reuses its storage.
type queue struct {
	items []unit
	head  int
}

func (q *queue) push(u unit) { q.items = append(q.items, u) }
func (q *queue) len() int    { return len(q.items) - q.head }

func (q *queue) front() *unit {
	if q.head == len(q.items) {
		return nil
	}
	return &q.items[q.head]
}

// onlyClientParses reports whether every queued unit is a client's Parse
// or Describe of a statement (or none is queued): requests that run
// nothing, whose answers can come ahead of an optimistic write's.
func (q *queue) onlyClientParses() bool {
	for _, u := range q.items[q.head:] {
		if u.disp != relay || u.kind != uParse && u.kind != uDescribeStatement || u.stripParam {
			return false
		}
	}
	return true
}

// dropAfterFront removes the queued units of kind k behind the front one.
func (q *queue) dropAfterFront(k unitKind) {
	if q.len() < 2 {
		return
	}
	kept := q.items[:q.head+1]
	for _, u := range q.items[q.head+1:] {
		if u.kind != k {
			kept = append(kept, u)
		}
	}
	q.items = kept
}

// holds reports whether a unit of kind k is queued.
func (q *queue) holds(k unitKind) bool {
	for _, u := range q.items[q.head:] {
		if u.kind == k {
			return true
		}
	}
	return false
}

func (q *queue) pop() {
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
}

// handle forwards one client message and, when the client now waits for
// answers, relays them: a dispatch on the message's type, after the two
// states that take every message first (a held optimistic batch, and a
// transaction whose read holds were lost).
func (s *Session) handle(ctx context.Context, msg pgproto3.FrontendMessage, frame []byte) error {
	if len(s.hiddenBuilds) > 0 && !s.be.clientBatch {
		if err := s.buildHiddenFirst(ctx, msg); err != nil {
			return err
		}
	}
	switch msg.(type) {
	case *pgproto3.Parse, *pgproto3.Bind, *pgproto3.Describe, *pgproto3.Execute, *pgproto3.Close, *pgproto3.Flush:
		s.be.clientBatch = true
	case *pgproto3.Query, *pgproto3.FunctionCall, *pgproto3.Sync:
		s.be.clientBatch = false
		s.batchExecuted = false
	}
	if s.txn.guard != nil || s.be.pendingRead != nil {
		switch msg.(type) {
		case *pgproto3.Describe, *pgproto3.Execute, *pgproto3.Sync:
			// The read's own batch: the guard is answered at its Sync.
		default:
			if err := s.settleGuards(ctx, true); err != nil {
				return err
			}
		}
	}
	if s.occBatch != nil {
		if held, err := s.holdBatch(ctx, msg, frame); held || err != nil {
			return err
		}
	}
	if s.tx == txBlock && len(s.portalHolds)+len(s.txn.holds) > 0 && s.copy == copyNone {
		switch msg.(type) {
		case *pgproto3.Query, *pgproto3.Parse, *pgproto3.Bind, *pgproto3.Execute:
			if l := s.lostHold(); l != nil {
				_, simple := msg.(*pgproto3.Query)
				return s.failLostHold(ctx, l, simple)
			}
		}
	}
	switch m := msg.(type) {
	case *pgproto3.Query:
		return s.handleQuery(ctx, m, frame)
	case *pgproto3.FunctionCall:
		return s.request(ctx, frame, unit{kind: uQuery, relayZ: true}, true)
	case *pgproto3.Parse:
		return s.handleParse(ctx, m, frame)
	case *pgproto3.Bind:
		return s.handleBind(ctx, m, frame)
	case *pgproto3.Describe:
		return s.handleDescribe(ctx, m, frame)
	case *pgproto3.Execute:
		return s.handleExecute(ctx, m, frame)
	case *pgproto3.Close:
		if m.ObjectType == 'S' {
			s.forgetStatement(m.Name)
			if isOwnName(m.Name) {
				// A client that read one of the proxy's names from
				// pg_prepared_statements closes it: prepared again at its
				// next use. A parsed read (loop_parse.go) binds its
				// statement behind a ParseComplete the client has seen, too
				// late to run the read again as a simple one is.
				s.forgetReadStatements()
			}
		} else {
			s.forgetPortal(m.Name)
		}
		return s.request(ctx, frame, unit{kind: uClose}, false)
	case *pgproto3.Sync:
		if s.copy != copyNone {
			// The backend ignores Sync during copy-in.
			return s.forward(frame)
		}
		return s.request(ctx, frame, unit{kind: uSync, relayZ: true}, true)
	case *pgproto3.Flush:
		if err := s.forward(frame); err != nil {
			return err
		}
		if s.copy != copyNone {
			return nil
		}
		return s.exchange(ctx)
	case *pgproto3.CopyData:
		if s.copy == copyNone {
			// Outside COPY, PostgreSQL drops these (the tail of a COPY that
			// failed); so do we.
			return nil
		}
		return s.forward(frame)
	case *pgproto3.CopyDone, *pgproto3.CopyFail:
		return s.handleCopyEnd(ctx, frame)
	default:
		return pgerr.Fatal(pgerr.ProtocolViolation, "unexpected message type %T", msg)
	}
}

// handleQuery runs a simple Query: answered by the proxy, on the
// explicit-timestamp path, as a write, or forwarded as it is.
func (s *Session) handleQuery(ctx context.Context, m *pgproto3.Query, frame []byte) error {
	if s.dump {
		m, frame = dumpQuery(m, frame)
	}
	// A simple Query replaces the unnamed statement and portal.
	s.forgetStatement("")
	s.forgetPortal("")
	if s.loopRead.resume {
		// This Query's guarded read, given back by the event loop.
		return s.failQuery(s.resumeLoopRead(ctx))
	}
	if s.loopTxn.resume {
		// This Query, a transaction's first read, given back by the event
		// loop with its pin in front of it.
		return s.resumeLoopTxn(ctx, frame)
	}
	if err := s.checkStringSyntax(m.String); err != nil {
		return s.failQuery(err)
	}
	if err := s.txnQuery(ctx, m.String); err != nil {
		return err
	}
	if s.txn.guard != nil {
		// The transaction's pin rides in front of this first read.
		return s.firstReadAfterGuard(ctx, m.String, frame)
	}
	plain := s.plainRead(m.String)
	var settings []*planner.Statement
	if !plain {
		settings = s.trackSettings(m.String)
	}
	if s.tx != txFailed && (s.proxy.cfg.HistoryReads || !plain) {
		if s.isShowSessions(m.String) {
			return s.showSessions()
		}
		if !plain {
			// (A plain read is no SET, SHOW or RESET: not parsed here.)
			if handled, err := s.sessionSetting(ctx, m.String); handled {
				return err
			}
		}
		st, fr, err := s.explicitPlan(ctx, m.String)
		if err != nil {
			return s.failQuery(err)
		}
		if st != nil {
			return s.failQuery(s.explicitQuery(ctx, st, fr))
		}
		if handled, err := s.retentionQuery(ctx, m.String); handled {
			return err
		}
		r := s.routeOf(m.String)
		if r.refused != nil {
			return r.refused
		}
		if r.write && !(r.slotOnlyInBlock && s.tx == txIdle) {
			return s.writeQuery(ctx, frame, m.String, r, settings, "")
		}
		if r.createDatabase {
			return s.createDatabase(ctx, m.String, frame)
		}
		if r.dropDatabase {
			return s.dropDatabase(ctx, m.String, frame)
		}
	}
	return s.request(ctx, frame, unit{kind: uQuery, relayZ: true, settings: settings}, true)
}

// handleParse records and forwards a Parse (rewritten on the
// explicit-timestamp path). What the session knew of the statement it
// replaces does not outlive it (the unnamed one is replaced by every
// Parse).
func (s *Session) handleParse(ctx context.Context, m *pgproto3.Parse, frame []byte) error {
	s.forgetStatement(m.Name)
	if lr := &s.loopRead; lr.resume && lr.parsed {
		// This Parse's timestamped read, given back by the event loop
		// with its guard in front of it.
		return s.resumeLoopParse(ctx, m, frame)
	}
	if s.loopTxn.resume {
		// This Parse, of a transaction's first read, given back by the
		// event loop with its pin in front of it.
		return s.resumeLoopTxnParse(ctx, m, frame)
	}
	if err := s.checkStringSyntax(m.Query); err != nil {
		return s.failExtended(ctx, err)
	}
	if err := s.txnParse(ctx, m); err != nil {
		return err
	}
	if s.tx != txFailed && (s.proxy.cfg.HistoryReads || !s.plainRead(m.Query)) {
		ok, err := s.quiesce(ctx)
		if err != nil {
			return err
		}
		if ok {
			if st := s.isolationShow(m.Query); st != nil {
				return s.parseExplicit(ctx, m, st)
			}
			st, _, err := s.explicitPlan(ctx, m.Query)
			if err == nil && st != nil {
				err = s.checkExplicitParse(ctx, st, m.ParameterOIDs)
			}
			if err != nil {
				return s.failExtended(ctx, err)
			}
			if st != nil {
				return s.parseExplicit(ctx, m, st)
			}
		}
		if st, _ := s.retentionStatement(m.Query); st != nil {
			return s.failExtended(ctx, pgerr.New(pgerr.FeatureNotSupported,
				"RETAIN HISTORY is supported over the simple query protocol only"))
		}
	}
	r := s.routeOf(m.Query)
	if r.refused != nil {
		return s.failExtended(ctx, r.refused)
	}
	s.defineStatement(m.Name, &preparedStmt{sql: m.Query, route: r, effect: s.effectOf(m.Query)})
	if r.write && s.tx == txBlock && !s.skipping {
		// In a block the histories the write needs are built before its
		// Parse, not at its Execute: the Parse's analysis takes the
		// table's ROW EXCLUSIVE lock until the block ends, and a build
		// after it asks for SHARE ROW EXCLUSIVE, an upgrade that two
		// blocks parsing first writes of one table cannot both make
		// (40P01, TestOutside21FirstWritesDeadlockRetry). Built first,
		// the second block's build waits for the first block to end and
		// then finds the history there. The Execute builds nothing more
		// (noteBlockBuilt).
		if err := s.buildExtended(m.Query); err != nil {
			return s.failExtended(ctx, err)
		}
	}
	return s.request(ctx, frame, unit{kind: uParse}, false)
}

// handleBind records and forwards a Bind; an autocommit Bind of a
// replayable write is held until its batch shows whether it can take the
// optimistic loop (write.go).
func (s *Session) handleBind(ctx context.Context, m *pgproto3.Bind, frame []byte) error {
	if lr := &s.loopRead; lr.resume && lr.present {
		// This Bind's read of the present, given back by the event loop
		// with the proxy's statement bound.
		return s.resumePresentBind(ctx, m, frame)
	}
	if s.loopRead.resume {
		// This Bind's guarded read, given back by the event loop.
		return s.resumeLoopBind(m)
	}
	if s.loopRead.parsedBind {
		// Its Parse's read, given back by the event loop (resumeLoopParse).
		return s.takeParsedBind(m)
	}
	if s.loopTxn.resume {
		// This Bind, a transaction's first read, given back by the event
		// loop with its pin in front of it.
		return s.resumeLoopTxnBind(ctx, m, frame)
	}
	if err := s.txnBind(ctx, m); err != nil {
		return err
	}
	if err := s.reparseUnnamed(m.PreparedStatement); err != nil {
		return err
	}
	p := s.definePortal(m.DestinationPortal, m.PreparedStatement)
	if p.stmt.route.dropDatabase {
		p.bind, p.stmtName = cloneFrame(frame), m.PreparedStatement
	}
	if p.stmt.explicit != nil {
		return s.bindExplicit(ctx, m, p)
	}
	if p.stmt.route.replayable && s.tx == txIdle && s.units.onlyClientParses() && s.txn.guard == nil && s.be.pendingRead == nil &&
		!s.skipping && !s.batchExecuted {
		// The batch's first write: the optimistic loop replays it alone
		// in its own implicit transaction. After an Execute of the same
		// batch (a driver's batch of writes before one Sync, JDBC's
		// executeBatch) the implicit transaction holds that too: the
		// write is forwarded under the slot the batch took. Its Parse
		// in the same batch (pgx's exec modes, node-postgres) ran
		// nothing: it is answered ahead of the first attempt (oneTrip).
		s.occBatch = &occBatch{bind: cloneFrame(frame), portal: m.DestinationPortal, sql: p.stmt.sql}
		return nil
	}
	return s.request(ctx, frame, unit{kind: uBind}, false)
}

// handleDescribe forwards a Describe, or answers it for a statement or
// portal the proxy answers itself.
func (s *Session) handleDescribe(ctx context.Context, m *pgproto3.Describe, frame []byte) error {
	if handled, err := s.describeExplain(ctx, m); handled {
		return err
	}
	u := unit{kind: uDescribePortal}
	if m.ObjectType == 'S' {
		if err := s.reparseUnnamed(m.Name); err != nil {
			return err
		}
		u.kind = uDescribeStatement
		u.stripParam = s.statement(m.Name).tsParam
	}
	return s.request(ctx, frame, u, false)
}

// handleExecute forwards an Execute, after the write slot when its
// portal's statement writes and the transaction does not hold one yet.
func (s *Session) handleExecute(ctx context.Context, m *pgproto3.Execute, frame []byte) error {
	p := s.portalOf(m.Portal)
	if p.explain != nil {
		return s.executeExplain(ctx, p.explain)
	}
	r := p.stmt.route
	if r.dropDatabase && p.bind != nil && s.tx == txIdle && !s.batchExecuted && !s.skipping {
		return s.dropDatabaseExtended(ctx, frame, p)
	}
	s.batchExecuted = true
	if r.write && !s.writeSlot && s.tx != txFailed && !s.skipping {
		s.slotSQL = p.stmt.sql
		if err := s.takeWriteSlotExtended(ctx); err != nil {
			return s.failExtended(ctx, err)
		}
	}
	s.noteDDL(r)
	if r.write && s.tx != txFailed && !s.skipping {
		if err := s.buildExtended(p.stmt.sql); err != nil {
			return s.failExtended(ctx, err)
		}
	}
	u := unit{kind: uExecute}
	if st := p.stmt.effect; st != nil {
		u.settings = []*planner.Statement{st}
	}
	return s.request(ctx, frame, u, false)
}

// handleCopyEnd forwards the client's CopyDone or CopyFail.
func (s *Session) handleCopyEnd(ctx context.Context, frame []byte) error {
	if s.copy == copyNone {
		return nil
	}
	if err := s.forward(frame); err != nil {
		return err
	}
	extended := s.copy == copyExtended
	s.copy = copyNone
	if extended {
		// The backend answers an Execute's COPY only at the client's
		// next Sync or Flush (any sent before the data were ignored).
		return nil
	}
	return s.exchange(ctx)
}

// request forwards a client request; wait says the client now waits for
// the answers. Without a wait the request stays queued, unless so many are
// queued that the backend must be made to answer (a client pipelining
// without Sync could otherwise fill both socket buffers and deadlock).
func (s *Session) request(ctx context.Context, frame []byte, u unit, wait bool) error {
	at := s.be.w.Pos()
	if err := s.forward(frame); err != nil {
		return err
	}
	if s.skipping && u.kind.extended() {
		// The backend skips everything until Sync after an error: no
		// answer will come for this.
		return nil
	}
	if u.kind == uExecute && s.be.w.Pos() == at+int64(len(frame)) {
		u.queuedAt = at + 1
	}
	s.units.push(u)
	if wait {
		return s.exchange(ctx)
	}
	if s.units.len() < maxPipeline {
		return nil
	}
	if err := s.be.w.Send(&pgproto3.Flush{}); err != nil {
		return s.lost(err)
	}
	return s.exchange(ctx)
}

// settleGuards reads the answers of a guard sent in front of the
// client's messages that have not been read: the pin's (pin_read.go) or a
// prepared read's (bound_read.go). sendFlush as for settleGuard.
func (s *Session) settleGuards(ctx context.Context, sendFlush bool) error {
	if s.txn.guard != nil {
		if err := s.settleGuard(ctx, sendFlush); err != nil {
			return err
		}
	}
	if s.be.pendingRead != nil {
		return s.settleReadGuard(ctx, sendFlush)
	}
	return nil
}

func (s *Session) forward(frame []byte) error {
	if g := s.txn.guard; g != nil && g.extended {
		// Sent again if the guard refuses (pin_read.go).
		g.frames = append(g.frames, cloneFrame(frame))
	}
	if g := s.be.pendingRead; g != nil {
		// Sent again if the guard refuses (bound_read.go).
		g.frames = append(g.frames, g.keep(frame))
	}
	if lr := &s.loopRead; lr.sent > 0 {
		// The event loop sent it, behind the Bind it gave back
		// (resumeLoopBind).
		lr.sent--
		return nil
	}
	if err := s.be.w.WriteFrame(frame); err != nil {
		return s.lostWrite(err)
	}
	return nil
}

// lostWrite reports a failed write to the backend. A backend that ended the
// session while it was idle (idle_in_transaction_session_timeout,
// pg_terminate_backend) sent its FATAL error before closing: the client
// gets that, as libpq would show it, rather than the broken pipe.
func (s *Session) lostWrite(err error) error {
	_ = s.be.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		typ, frame, rerr := s.be.next()
		if rerr != nil {
			return s.lost(err)
		}
		if typ == 'E' {
			if fatal, _ := s.backendErrorIsFatal(frame); fatal {
				_ = s.client.WriteFrame(frame)
				_ = s.client.Flush()
				return wire.ErrSessionOver
			}
		}
	}
}

// exchange flushes what was forwarded and relays the backend's answers
// until every queued unit is done, or until the backend asks the client for
// COPY data.
func (s *Session) exchange(ctx context.Context) error {
	// Who cancels this batch depends on whether the statement's context
	// ended before the batch reaches the backend. If it did, the
	// context's own cancel (once the backend has taken it) found the
	// backend idle, or running a request of the proxy's own: the batch's
	// held Execute is made to fail (failHeldExecute), or, if none is
	// held, the batch is canceled once flushed. If it did not, that
	// cancel comes after the flush and reaches the batch itself: a second
	// one, sent here, could cancel the client's next statement.
	endedBefore := ctx.Err() != nil && timeouts.CauseOf(ctx) != 0
	failed := false
	if endedBefore {
		s.awaitContextCancel(ctx)
		failed = s.failHeldExecute(ctx)
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lostWrite(err)
	}
	// A guard's answers come first.
	if err := s.settleGuards(ctx, false); err != nil {
		return err
	}
	if s.units.len() == 0 {
		return s.flushClient()
	}
	s.busy.Store(true)
	defer s.busy.Store(false)
	s.midRequest = true
	s.enter(timeouts.PhaseExecute)
	if endedBefore {
		s.backendCanceled.Store(true)
		if !failed {
			s.cancelBackend()
		}
		s.batchCanceled.Store(false)
	}
	streaming := false
	for {
		if s.be.r.Buffered() == 0 && s.client.Buffered() > 0 {
			// About to wait for the backend: let the client see what is
			// here (rows of a slow query arrive as they are produced).
			if err := s.client.Flush(); err != nil {
				return err
			}
		}
		typ, frame, err := s.be.next()
		if err != nil {
			return s.lost(err)
		}
		u := s.units.front()
		if u == nil {
			return s.unasked(typ, frame)
		}
		if typ == 'N' {
			// Notices go to the client, except those about the proxy's
			// own requests.
			if u.disp == relay && !s.muted {
				if err := s.client.WriteFrame(frame); err != nil {
					return err
				}
			}
			continue
		}
		if typ == 'D' && !streaming {
			streaming = true
			s.enter(timeouts.PhaseStream)
		}
		if stop, err := s.answerUnit(ctx, u, typ, frame); stop || err != nil {
			return err
		}
		if s.units.len() == 0 {
			return s.flushClient()
		}
	}
}

// unasked relays a message that came with no request queued, and ends the
// exchange (the session, if it is a FATAL error).
func (s *Session) unasked(typ byte, frame []byte) error {
	if err := s.client.WriteFrame(frame); err != nil {
		return err
	}
	if typ == 'E' {
		if fatal, err := s.backendErrorIsFatal(frame); fatal {
			_ = s.client.Flush()
			return err
		}
	}
	return s.flushClient()
}

// answerUnit handles one answer of the unit u at the head of the queue: it
// relays it if the client sees it, follows what it changes, and pops the
// unit when this answer ends it. stop says the exchange is over (an error,
// or the backend now waits for COPY data).
func (s *Session) answerUnit(ctx context.Context, u *unit, typ byte, frame []byte) (stop bool, err error) {
	if typ == 'E' && u.canceled != 0 {
		frame = s.canceledInPlace(u.canceled)
	} else if typ == 'E' && ctx.Err() != nil {
		frame = s.canceledByProxy(ctx, frame)
	}
	if typ == 'E' && u.readStatement && readStatementGone(wire.Body(frame)) {
		// Neither this error nor the ReadyForQuery of the read's Sync is
		// the client's: the read runs again.
		s.be.reads.lost = true
		s.muted = true
	}
	if typ == 'C' && u.templateCopy {
		s.templateCopied = true
	}
	if typ == 'E' && u.templateCopy && copyRefusedBy(wire.Body(frame)) {
		s.attemptRefused = true
		s.muted = true
	}
	if typ == 'E' && u.drop {
		s.dropFailed = true
		if u.dropRetry && dropBlocked(wire.Body(frame)) {
			s.attemptRefused = true
			s.muted = true
		}
	}
	if typ == 'E' && (s.peekRefusedView(u, frame) || s.peekCanceled(u, frame)) {
		return false, nil
	}
	if typ == 'E' && u.disp == swallow {
		frame = s.slotRefusal(frame)
	}
	if typ == 't' && u.stripParam {
		if frame, err = stripTimestampParam(frame); err != nil {
			return true, s.lost(err)
		}
	}
	if s.relays(u, typ) {
		if err := s.client.WriteFrame(frame); err != nil {
			return true, err
		}
	}
	done := false
	switch typ {
	case 'Z':
		s.readyForQuery(u, frame)
		done = true
	case 'D':
		if u.beforeBegin != nil {
			s.keepPeek(frame, u.beforeBegin)
		}
	case '1', '2', '3':
		done = true
	case 'T', 'n':
		done = u.kind == uDescribeStatement || u.kind == uDescribePortal
	case 'C', 'I', 's':
		if typ == 'C' {
			s.commandComplete(u, frame)
			if u.dropOf != "" {
				s.proxy.forgetDropped(u.dropOf)
			}
		}
		done = u.kind == uExecute
	case 'E':
		if err := s.unitFailed(u, frame); err != nil {
			return true, err
		}
	case 'G':
		s.copyIn(u)
		return true, s.flushClient()
	}
	if done {
		return false, s.unitDone()
	}
	return false, nil
}

// readyForQuery follows the transaction status a ReadyForQuery reports:
// at the end of a transaction its commit slot, portals and holds are gone.
func (s *Session) readyForQuery(u *unit, frame []byte) {
	prev := s.tx
	s.tx = txStatus(frame[5])
	s.settleSettings(prev)
	s.skipping = false
	s.slotSQL = ""
	switch {
	case u.beforeBegin != nil:
		// The end of the proxy's own statement before a BEGIN.
	case s.tx == txIdle:
		s.writeSlot = false
		s.forgetBlockBuilt()
		s.endPortals()
		s.releasePortalHolds()
		s.endTxn()
	case s.tx == txFailed:
		s.releaseTxnHolds()
	}
	if u.relayZ {
		s.muted = false
		s.clientFailed = false
	}
}

// commandComplete follows a statement of unit u that completed: its effect
// on the session, if it has one, applies now.
func (s *Session) commandComplete(u *unit, frame []byte) {
	s.noteCommand(frame)
	if len(u.settings) > 0 {
		if st := u.settings[0]; st != nil {
			s.applySetting(st, string(frame[5:len(frame)-1]))
		}
		u.settings = u.settings[1:]
	}
}

// unitFailed follows an ErrorResponse to unit u.
func (s *Session) unitFailed(u *unit, frame []byte) error {
	if u.quiet {
		return s.quietFailed(frame)
	}
	s.noteBackendError(frame)
	if u.failed != nil {
		u.failed()
	}
	// The statements after the failed one do not run.
	u.settings = nil
	s.requestFailed = true
	if fatal, err := s.backendErrorIsFatal(frame); fatal {
		_ = s.client.Flush()
		return err
	}
	switch u.disp {
	case relay:
		s.clientFailed = true
	case swallow:
		// The proxy's own request failed and the client has been told
		// why: what the client asked for next fails only as a
		// consequence, so it is not shown.
		s.muted = true
	}
	if u.kind.extended() {
		// The backend now skips everything until Sync.
		s.skipping = true
		for u := s.units.front(); u != nil && u.kind != uSync; u = s.units.front() {
			if u.failed != nil {
				// It does not run either.
				u.failed()
			}
			s.units.pop()
		}
	}
	return nil
}

// copyIn follows a CopyInResponse to unit u: the client must now send the
// data; the unit stays queued until the COPY ends.
func (s *Session) copyIn(u *unit) {
	if u.kind == uQuery {
		s.copy = copyQuery
		return
	}
	s.copy = copyExtended
	// The backend ignores Sync during copy-in, also one the client sent
	// along with the Execute: it gets no answer.
	s.units.dropAfterFront(uSync)
}

// unitDone pops the unit at the head of the queue, which is done, and
// sends the request that was to follow it.
func (s *Session) unitDone() error {
	then := s.units.front().then
	s.units.pop()
	if then != thenCommit {
		return nil
	}
	if err := s.internal("COMMIT", true); err != nil {
		return err
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lost(err)
	}
	return nil
}

// relays reports whether the client sees an answer of unit u.
func (s *Session) relays(u *unit, typ byte) bool {
	if typ == 'Z' {
		return u.relayZ && !s.be.reads.lost && !s.attemptRefused
	}
	if s.muted || u.quiet {
		return false
	}
	// The proxy's own request after a client's that failed fails only
	// because of it (transaction aborted): the client has its error.
	return u.disp == relay || typ == 'E' && !s.clientFailed
}

// failExtended fails an extended-protocol message the proxy refused, after
// relaying the answers owed to the messages before it.
func (s *Session) failExtended(ctx context.Context, err error) error {
	if s.units.len() > 0 {
		if ferr := s.be.w.Send(&pgproto3.Flush{}); ferr != nil {
			return s.lost(ferr)
		}
		if ferr := s.exchange(ctx); ferr != nil {
			return ferr
		}
	}
	return err
}

// flushClient ends an exchange that completed as the protocol expects.
func (s *Session) flushClient() error {
	s.midRequest = false
	return s.client.Flush()
}

// The proxy's prepared statements that take the write slot in the
// extended protocol (outside a block, and in one), where a simple Query
// would destroy the client's unnamed statement and portal.
var (
	writeSlotStatement    = ownName("mzproxy_begin_write")
	deferredSlotStatement = ownName("mzproxy_begin_write_deferred")
	// buildStatement builds histories before a first write
	// (lazy_history.go).
	buildStatement = ownName("mzproxy_ensure_history")
)

// writeQuery runs a client Query that writes.
//
// Outside a block, the first write of a backend transaction takes the
// write slot (storage.OpenWriteFor): the writers' gate in shared mode, with the
// transaction's T chosen when its statement first writes history, after
// that statement's row locks are held (storage/frontier.sql). Nothing is
// validated or appended at COMMIT. One replayable statement takes the
// retry loop (write.go: PostgreSQL's serialization failures and deadlocks
// are retried); anything else runs in a backend transaction of the
// proxy's own that holds the slot and is committed after it. The client
// sees only its own statement's answers and one ReadyForQuery.
//
// In a block the slot is deferred (open_write_deferred): the block holds
// no lock while it runs; its T is chosen when first needed (a DDL, a read
// of its own writes) or at its COMMIT, by the backend itself. A read-only
// transaction that writes takes its slot checked against its reads
// (writeSlotSQL).
//
// Every slot is taken for the session's incarnation, so a fenced or
// expired one writes nothing. after, if not empty, is a statement of the
// proxy's own run after the client's in the same transaction.
func (s *Session) writeQuery(ctx context.Context, frame []byte, sql string, r route, settings []*planner.Statement, after string) error {
	inc, err := s.incarnation(ctx)
	if err != nil {
		return err
	}
	s.slotSQL = sql
	s.noteDDL(r)
	builds := s.historyBuildsFor(sql)
	if s.tx == txBlock {
		if !s.writeSlot {
			if err := s.internal(s.writeSlotSQL(inc), false); err != nil {
				return err
			}
			s.writeSlot = true
		}
		if !builds.empty() {
			if err := s.internal(builds.sql(), false); err != nil {
				return err
			}
			s.noteBlockBuilt(builds)
		}
		if after == "" {
			return s.request(ctx, frame, unit{kind: uQuery, relayZ: true, settings: settings}, true)
		}
		if err := s.forward(frame); err != nil {
			return err
		}
		s.units.push(unit{kind: uQuery, settings: settings})
		if err := s.internal(after, true); err != nil {
			return err
		}
		return s.exchange(ctx)
	}
	if r.replayable && s.tx == txIdle && s.units.len() == 0 && after == "" {
		return s.optimisticWrite(ctx, sql, inc, occRequest{query: sql, frames: [][]byte{frame}, builds: builds})
	}
	if r.oneDDL && s.tx == txIdle && s.units.len() == 0 && after == "" && len(settings) == 0 && builds.empty() {
		return s.ddlWrite(ctx, sql, frame, inc)
	}
	// Anything else is three Queries sent in one flush (one network round
	// trip, three ReadyForQuery). Not folded into one Query as the
	// optimistic write is: a COPY's COMMIT must wait for its data, and
	// the relay would have to drop the slot's answers from inside the
	// client's unit, whose statements are several and of any kind.
	slot := storage.OpenWriteFor(inc)
	if resetsAll(settings) {
		// RESET ALL would take away the slot's setting and with it the
		// slot (a later write failed with MZ002); a deferred slot is its
		// transaction's row, which RESET ALL leaves alone
		// (storage/slot_state.sql). Its T is chosen at the COMMIT below.
		slot = storage.OpenWriteDeferredFor(inc)
	}
	if !builds.empty() {
		slot = builds.sql() + "; " + slot
	}
	if err := s.internal("BEGIN; "+slot, false); err != nil {
		return err
	}
	if err := s.forward(frame); err != nil {
		return err
	}
	u := unit{kind: uQuery, relayZ: false, settings: settings}
	if r.copyIn {
		// COMMIT can only follow once the client's data is in.
		u.then = thenCommit
		s.units.push(u)
	} else {
		s.units.push(u)
		if after != "" {
			if err := s.internal(after, false); err != nil {
				return err
			}
		}
		if err := s.internal("COMMIT", true); err != nil {
			return err
		}
	}
	return s.exchange(ctx)
}

// resetsAll reports whether a query string's statements, as trackSettings
// returns them, include RESET ALL.
func resetsAll(settings []*planner.Statement) bool {
	for _, st := range settings {
		if st != nil && st.Kind == planner.KindReset && st.Var != nil && st.Var.Name == "all" {
			return true
		}
	}
	return false
}

// takeWriteSlotExtended queues, before a client's Execute of a write, the
// proxy's own Bind/Execute/Close of the write slot: it runs in the same
// (implicit or explicit) transaction as the write.
func (s *Session) takeWriteSlotExtended(ctx context.Context) error {
	inc, err := s.incarnation(ctx)
	if err != nil {
		return err
	}
	s.writeSlot = true
	switch {
	case s.tx == txBlock && s.txn.phase == txnPinned:
		// Checked against the pin's count, which changes: prepared again
		// each time (-1: closed first, whatever was prepared before).
		stale := int64(-1)
		return s.injectExtended(deferredSlotStatement+"_after_read", s.writeSlotSQL(inc), &stale, inc)
	case s.tx == txBlock:
		return s.injectExtended(deferredSlotStatement, s.writeSlotSQL(inc), &s.deferredSlotPrepared, inc)
	}
	return s.injectExtended(writeSlotStatement, s.writeSlotSQL(inc), &s.writeSlotPrepared, inc)
}

// writeSlotSQL takes the write slot for incarnation inc before a write:
// in a block, deferred (after the reads of a pinned transaction, checked
// against its pin).
func (s *Session) writeSlotSQL(inc int64) string {
	switch {
	case s.tx != txBlock:
		return storage.OpenWriteFor(inc)
	case s.txn.phase == txnPinned:
		return storage.OpenWriteAfterReadFor(inc, s.txn.writes)
	}
	return storage.OpenWriteDeferredFor(inc)
}

// injectExtended queues the proxy's own Bind/Execute/Close of the prepared
// statement name (sql, which writes for incarnation inc; prepared first
// unless *prepared says it is, for inc).
func (s *Session) injectExtended(name, sql string, prepared *int64, inc int64) error {
	if *prepared != inc {
		// Closed first: it may exist for an incarnation that was lost, or
		// after the optimistic write's failed attempt reset writeSlotPrepared
		// (closing one that does not exist is no error).
		if err := s.internalMsg(&pgproto3.Close{ObjectType: 'S', Name: name}, uClose); err != nil {
			return err
		}
		if err := s.be.w.Send(&pgproto3.Parse{Name: name, Query: sql}); err != nil {
			return s.lost(err)
		}
		// An earlier message of the batch may fail: then this Parse is
		// skipped, and the statement prepared again next time.
		s.units.push(unit{kind: uParse, disp: swallow, failed: func() { *prepared = 0 }})
		*prepared = inc
	}
	for _, m := range []struct {
		msg  pgproto3.FrontendMessage
		kind unitKind
	}{
		{&pgproto3.Bind{DestinationPortal: name, PreparedStatement: name}, uBind},
		{&pgproto3.Execute{Portal: name}, uExecute},
		{&pgproto3.Close{ObjectType: 'P', Name: name}, uClose},
	} {
		if err := s.internalMsg(m.msg, m.kind); err != nil {
			return err
		}
	}
	return nil
}

// buildExtended queues, before a block's Parse of a write and after the
// write slot before the client's Execute of a write, the build of the
// histories sql's writes need (nothing in the common case).
func (s *Session) buildExtended(sql string) error {
	b := s.historyBuildsFor(sql)
	if b.empty() {
		return nil
	}
	for _, m := range []struct {
		msg  pgproto3.FrontendMessage
		kind unitKind
	}{
		{&pgproto3.Close{ObjectType: 'S', Name: buildStatement}, uClose},
		{&pgproto3.Parse{Name: buildStatement, Query: b.sql()}, uParse},
		{&pgproto3.Bind{DestinationPortal: buildStatement, PreparedStatement: buildStatement}, uBind},
		{&pgproto3.Execute{Portal: buildStatement}, uExecute},
		{&pgproto3.Close{ObjectType: 'P', Name: buildStatement}, uClose},
	} {
		if err := s.internalMsg(m.msg, m.kind); err != nil {
			return err
		}
	}
	s.noteBlockBuilt(b)
	return nil
}

// internal queues a simple Query of the proxy's own whose answers the client
// does not see; relayZ says its ReadyForQuery ends the client's request.
func (s *Session) internal(sql string, relayZ bool) error {
	if err := s.be.w.Send(&pgproto3.Query{String: sql}); err != nil {
		return s.lost(err)
	}
	s.units.push(unit{kind: uQuery, disp: swallow, relayZ: relayZ})
	return nil
}

// internalMsg queues an extended-protocol message of the proxy's own.
func (s *Session) internalMsg(msg pgproto3.FrontendMessage, kind unitKind) error {
	if err := s.be.w.Send(msg); err != nil {
		return s.lost(err)
	}
	s.units.push(unit{kind: kind, disp: swallow})
	return nil
}

// noteCommand follows commands that change what the session relies on.
func (s *Session) noteCommand(frame []byte) {
	tag := frame[5 : len(frame)-1]
	switch string(tag) {
	case "LISTEN":
		s.listening = true
	case "ROLLBACK":
		// ROLLBACK TO SAVEPOINT may have undone the begin_write (a full
		// ROLLBACK ends the transaction anyway), and a build with it.
		s.writeSlot = false
		s.forgetBlockBuilt()
	case "COMMIT":
		// (A failed block's COMMIT answers ROLLBACK.)
		s.commitBlockBuilt()
	case "DISCARD ALL":
		// Every prepared statement and portal is gone, the proxy's too.
		s.deallocate("")
		s.endPortals()
		s.settings.ResetAll()
		s.writeSlotPrepared, s.deferredSlotPrepared = 0, 0
		s.lostHoldPrepared = false
		s.forgetReadStatements()
	case "DEALLOCATE ALL":
		// The proxy's prepared statements went with the client's.
		s.writeSlotPrepared, s.deferredSlotPrepared = 0, 0
		s.lostHoldPrepared = false
		s.forgetReadStatements()
		s.deallocate("")
	case "DEALLOCATE":
		// It may have named one of the pin's, or a read's: prepared again.
		s.forgetReadStatements()
	}
}

// forgetReadStatements marks the pin's and the simple reads' prepared
// statements as gone, so they are prepared again when next used.
func (s *Session) forgetReadStatements() {
	s.pinPeekPrepared, s.pinCheckPrepared = false, false
	s.pinGuardPrepared, s.pinGuardRevPrepared, s.pinBeginPrepared = false, false, false
	s.be.reads.forgetAll()
}
