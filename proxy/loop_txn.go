package proxy

import (
	"context"
	"encoding/binary"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/timeouts"
)

// A read-only transaction in the event loop (issue 15). Served by the
// session's goroutine, each of its statements cost about twice what the
// loop's point read costs the proxy: two goroutine parks and the
// netpoller's wake-ups (docs/read-cost.md). A turn in the loop costs about
// thirty system calls to join and leave, so the loop gains only if it
// serves the whole transaction: a BEGIN, its first read
// with the pin in front of it, the reads after it, and its COMMIT or
// ROLLBACK, each as handleQuery would, with nothing that takes a round
// trip or a wait of the proxy's own:
//
//   - BEGIN (or START TRANSACTION) alone, when the session's last pins
//     agree on the count of writes (settledWrites: no peek is sent), is
//     forwarded as it is; the transaction is followed as noteBegin follows
//     it.
//   - The first read, when it can carry the pin (pinWithRead), goes out as
//     firstReadAfterGuard sends it: the raise, the guard, the Query. The
//     loop drops the answers to the proxy's own messages and reads the
//     guard's value; at the read's first answer the pin is noted and the
//     read planned and held (in memory: the lease grants a hold at the
//     pinned timestamp, see pin_read.go) before anything is relayed.
//     Anything else before that (the guard's refusal or error, a notice,
//     a hold the lease does not grant in memory) gives the Query back to
//     the session's goroutine (evloop.Back) with nothing relayed, and
//     guardAnswers reads the answers again as firstReadAfterGuard would.
//   - A later plain read whose relations are in the timedomain and
//     already held (txnReads would refuse nothing and hold nothing) is
//     forwarded as it is.
//   - COMMIT or ROLLBACK alone (no AND CHAIN) of a pinned transaction
//     that has not written is forwarded as it is; its ReadyForQuery ends
//     the transaction (readyForQuery, endTxn).
//
// Each statement may come as a Query, or as the Bind to Sync of a
// statement the client prepared (a Describe of its portal or none:
// pgbench -M prepared, pgx's cached statements, lib/pq's Stmt), admitted
// alike (admitTxnBind, admitTxnStatement): the first read's Bind goes out
// behind the guard as txnBind sends it, and one given back is taken over
// at its Bind (resumeLoopTxnBind), settleGuard reading the guard's
// answers at the Sync. A read may also come as an unnamed Parse in front
// of its Bind (a driver's query with parameters), or as that Parse with a
// Describe of it and a Sync (the Bind in a batch of its own): a first
// read so sent goes out behind the guard, Parse and all, and one given
// back is taken over at its Parse (resumeLoopTxnParse). A transaction
// whose first read its goroutine served lends the session back to the
// loop, its idle reader withdrawn (LoopBackend): the loop reads the
// backend while the client idles.
//
// Anything else is not admitted, and the session's goroutine serves it
// as before; so is any statement when the transaction's holds were lost
// (failLostHold) or the session has a statement timeout (LoopBackend).

// loopTxn is the statement of a read-only transaction the loop has at
// the backend, from Admit to its ReadyForQuery or to the session's
// goroutine taking it over.
type loopTxn struct {
	// active: the loop forwarded a Query of the transaction's; u is its
	// unit (the settings BEGIN and COMMIT apply at their CommandComplete).
	active bool
	u      unit
	// g is the first read's pin guard while its answers come (ends of
	// them still to come, value its row's), sql the read.
	g     *pinGuard
	ends  int
	value string
	sql   string
	// noted: the pin was noted at the read's first answer.
	noted bool
	// resume: Answer gave the read back (evloop.Back); handleQuery reads
	// its answers (resumeLoopTxn).
	resume bool
	// noWait: the loop's goroutine plans and holds; a hold takes only
	// what the lease grants in memory (hold).
	noWait bool
	send   byteSink // the batch the loop sends for a first read, reused
	// behind: an extended batch's, the number of the client's messages
	// behind its Bind, or behind its Parse when no Bind follows;
	// bindBehind: the batch begins with the unnamed statement's Parse,
	// and a Bind follows it (resumeLoopTxnParse).
	behind     int
	bindBehind bool
	parseFrame []byte // the Parse, given back, of a batch a Bind follows
	// began: admitBegin took the batch Admit admits now. replied:
	// replyBegin answered it, with reply. beginDeferred: its frames
	// (deferred, without its Sync when deferredSync) are not sent yet.
	began, replied              bool
	reply                       []byte
	beginDeferred, deferredSync bool
	deferredQuery               bool // deferred is a Query (sendPinBegin)
	deferred                    []byte
}

// errHoldWaits is hold's error on the loop's goroutine when the lease
// cannot grant the hold in memory.
var errHoldWaits = pgerr.New(pgerr.InternalError, "mzproxy: the hold needs a round trip")

// loopFollowsTxn reports whether the loop can follow the session's
// transaction block: one whose first read can carry its pin, or that is
// pinned, has not written, and holds what it holds under a live lease.
func (s *Session) loopFollowsTxn() bool {
	if s.tx != txBlock || s.txn.guard != nil || s.writeSlot || s.lease == nil || s.lease.Err() != nil ||
		s.lostHold() != nil || s.proxy.cfg.HistoryReads {
		return false
	}
	switch s.txn.phase {
	case txnFresh:
		return s.txn.peek != nil && *s.txn.peek != ""
	case txnPinned:
		return true
	}
	return false
}

// admitQuery admits a simple Query that is not a plain read outside a
// transaction: a statement of a read-only transaction, or a guarded
// timestamped read (loop_read.go).
func (s *Session) admitQuery(sql string, batch []byte) ([]byte, bool) {
	if s.tx != txBlock && !s.admitBegin(sql) {
		return s.admitGuarded(sql)
	}
	send, ok := s.admitTxnStatement(sql, "", batch)
	if ok {
		s.loopQuery(sql)
	}
	return send, ok
}

// admitTxnStatement admits sql, the statement of a batch (a Query, or a
// Bind of portal to its Sync), as a statement of a read-only transaction
// the loop follows: a BEGIN admitBegin took, the first read with its pin
// in front of it, a read of held tables, or the COMMIT or ROLLBACK. send
// is what goes to the backend instead of the batch (nil: the batch).
// The caller records the batch (loopQuery; admitTxnBind) once it is
// admitted.
func (s *Session) admitTxnStatement(sql, portal string, batch []byte) (send []byte, ok bool) {
	switch {
	case s.tx != txBlock:
		// admitBegin followed it.
		return nil, true
	case !s.loopFollowsTxn():
		return nil, false
	case s.txn.phase == txnFresh:
		return s.admitFirstRead(sql, portal, batch)
	}
	return nil, s.txnEnd(sql) || s.heldReads(sql)
}

// admitBegin follows a BEGIN that needs no peek, as txnQuery (or, for a
// Bind of a prepared BEGIN, txnBind) does; the session is idle.
func (s *Session) admitBegin(sql string) bool {
	if !s.known.settled.steady || !startsWithWord(sql, "begin", "start") {
		return false
	}
	opts := beginOptions(s.proxy.planner, sql)
	if opts == nil {
		return false
	}
	s.noteBegin(sql, opts)
	s.loopTxn.began = true
	// The last pins' count stands in for the peek: nothing is sent (the
	// session is idle and synced, as LoopBackend requires).
	if err := s.peekBeforeBegin(); err != nil || s.txn.peek == nil || *s.txn.peek == "" {
		// Not reached (the count is known); the goroutine would pin with
		// the gate, which the loop does not follow.
		s.txn.peek = nil
	}
	return true
}

// loopQuery records an admitted Query of the transaction as handleQuery
// does before it forwards it.
func (s *Session) loopQuery(sql string) {
	s.admitted(&plainMsg{typ: 'Q', sql: sql})
	var settings []*planner.Statement
	if !s.plainRead(sql) {
		settings = s.trackSettings(sql)
	}
	s.loopTxn.active = true
	s.loopTxn.u = unit{kind: uQuery, relayZ: true, settings: settings}
}

// admitTxnBind admits a client's batch that runs a prepared statement of
// a read-only transaction (Bind, a Describe of its portal or none,
// Execute, Sync: what libpq's PQexecPrepared, pgx and lib/pq send), as
// admitQuery admits its Query: a prepared BEGIN, the first read with its
// pin in front of it (the guard's portal is the read's when that is the
// unnamed one, as txnBind sends it), a read of held tables, the COMMIT.
// A Parse of the unnamed statement may come in front of the Bind (a
// driver's query with parameters: pgx's exec modes, psycopg, node-
// postgres), or alone with a Describe of it (pgx's describe_exec mode
// parses and describes, then binds in a batch of its own); a first read
// so sent goes behind the guard whole, Parse and all (parsing a SELECT
// takes the snapshot, which the guard must take first). BEGIN and COMMIT
// may come so too (pgbench -M extended, psycopg's pipeline).
func (s *Session) admitTxnBind(batch []byte) ([]byte, bool) {
	n := 1 + int(binary.BigEndian.Uint32(batch[1:]))
	first, ok := readPlain(batch[:n])
	if !ok {
		return nil, false
	}
	bind, rec := first, (*preparedStmt)(nil)
	lt := &s.loopTxn
	lt.bindBehind = false
	if first.typ == 'P' {
		parsed, plain := s.plainText(first.stmt)
		if len(first.name) > 0 || n == len(batch) {
			return nil, false
		}
		at := n
		n += 1 + int(binary.BigEndian.Uint32(batch[at+1:]))
		if bind, ok = readPlain(batch[at:n]); !ok {
			return nil, false
		}
		lt.bindBehind = bind.typ == 'B'
		if plain && s.tx == txBlock && bind.typ == 'D' && bind.objType == 'S' && len(bind.name) == 0 &&
			len(batch)-n == 5 && batch[n] == 'S' {
			// Parse, Describe, Sync: no portal is run; the guard runs in
			// a portal of its own, closed.
			return s.admitTxnBatch(batch, s.plainStmtRecord("", parsed), pinGuardStatement, 2)
		}
		if !lt.bindBehind || len(bind.stmt) > 0 {
			return nil, false
		}
		// A read's record as admitted defines it; BEGIN's or COMMIT's
		// (pgbench -M extended) as handleParse does.
		if plain {
			rec = s.plainStmtRecord("", parsed)
		} else {
			rec = &preparedStmt{sql: parsed, route: s.routeOf(parsed), effect: s.effectOf(parsed)}
		}
	}
	if bind.typ != 'B' {
		return nil, false
	}
	behind, ok := portalSteps(batch[n:], string(bind.name))
	if !ok {
		return nil, false
	}
	if first.typ != 'P' {
		if rec = s.stmts[string(bind.stmt)]; rec == nil || rec.explicit != nil || rec.tsParam {
			return nil, false
		}
	}
	if s.tx != txBlock && !s.admitBegin(rec.sql) {
		return nil, false
	}
	return s.admitTxnBatch(batch, rec, string(bind.name), behind)
}

// admitTxnBatch admits the extended batch of rec, the statement it runs
// in portal (or describes: behind its Parse, Describe and Sync), as
// admitTxnStatement judges it, and records its messages (a Parse in it
// is rec's). behind is the number of the client's messages behind its
// Bind (behind its Parse when none follows).
func (s *Session) admitTxnBatch(batch []byte, rec *preparedStmt, portal string, behind int) ([]byte, bool) {
	send, ok := s.admitTxnStatement(rec.sql, portal, batch)
	if !ok {
		return nil, false
	}
	s.loopTxn.behind = behind
	// As handle records the batch's messages (handleParse, handleBind,
	// handleExecute).
	for off := 0; off < len(batch); {
		n := 1 + int(binary.BigEndian.Uint32(batch[off+1:]))
		m, _ := readPlain(batch[off : off+n])
		if m.typ == 'P' {
			m.sql = rec.sql
		}
		s.admitted(&m)
		if m.typ == 'P' && (rec.route != route{} || rec.effect != nil) {
			s.defineStatement("", rec)
		}
		off += n
	}
	var settings []*planner.Statement
	if rec.effect != nil {
		settings = []*planner.Statement{rec.effect}
	}
	s.loopTxn.active = true
	s.loopTxn.u = unit{kind: uExecute, relayZ: true, settings: settings}
	return send, true
}

// txnEnd reports whether sql is COMMIT or ROLLBACK alone, without AND
// CHAIN: txnReads and handleQuery forward it as it is in a pinned
// transaction that has not written.
func (s *Session) txnEnd(sql string) bool {
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if err != nil || len(stmts) != 1 {
		return false
	}
	st := stmts[0]
	return st.Kind == planner.KindTransaction && st.Txn != nil && !st.Txn.Chain && st.Txn.Ends()
}

// heldReads reports whether sql is a plain read of the pinned transaction
// whose every relation is in its timedomain and held already: txnReads
// would refuse nothing and take no hold.
func (s *Session) heldReads(sql string) bool {
	s.noteStatementText(sql)
	if s.txn.searchPath == nil || s.txn.domain == nil || !s.plainRead(sql) {
		return false
	}
	stmts, err := s.proxy.planner.Plan(sql, s.txn.catalog, planner.Options{SearchPath: s.txn.searchPath})
	if err != nil || len(stmts) == 0 {
		return false
	}
	for _, st := range stmts {
		if !st.ReadOnly() || st.AsOf != nil {
			return false
		}
		for _, r := range st.Reads {
			if r.Managed() && !s.inDomain(r.Object) {
				return false
			}
		}
		for _, in := range st.Inputs {
			if !s.txn.held[in.ID] {
				return false
			}
		}
	}
	return true
}

// admitFirstRead admits the first read of a fresh transaction with its
// pin in front of it, as firstReadAfterGuard (a Query) or txnBind (a
// Bind of portal) sends them.
func (s *Session) admitFirstRead(sql, portal string, batch []byte) ([]byte, bool) {
	ctx := context.Background() // nothing below waits: the lease is held (loopFollowsTxn)
	s.noteStatementText(sql)
	g := s.pinWithRead(ctx, sql, portal)
	if g == nil || s.db.catalogAt(g.revision) == nil {
		return nil, false
	}
	lt := &s.loopTxn
	lt.send.b = lt.send.b[:0]
	s.be.w.Reset(&lt.send)
	var err error
	ends := 0
	if lt.beginDeferred {
		// The BEGIN the loop answered begins the block here.
		// (A Parse's statement name is its body's first string.)
		ends, err = s.sendPinBegin(g, batch[0] == 'Q', batch[0] == 'P' && len(batch) > 5 && batch[5] == 0)
	}
	if err == nil {
		err = s.sendPinGuard(ctx, g)
	}
	if err == nil {
		err = s.be.w.WriteFrame(batch)
	}
	if err == nil {
		err = s.be.w.Flush()
	}
	s.be.w.Reset(s.be.nc)
	s.txn.guard = nil
	if err != nil {
		// Only encoding can fail; nothing was sent, so the guard's
		// statements are prepared again next time.
		s.pinGuardPrepared, s.pinGuardRevPrepared, s.pinBeginPrepared = false, false, false
		return nil, false
	}
	if lt.beginDeferred {
		// Its answers come first among the guard's.
		lt.beginDeferred = false
		g.ends += ends
	}
	lt.g, lt.ends, lt.value, lt.sql, lt.noted = g, g.ends, "", sql, false
	return lt.send.b, true
}

// loopTxnAnswer follows an answer of the first read before its first
// relayed frame: the guard's are dropped, and at the read's first answer
// the transaction is pinned and the read held; anything unexpected gives
// the read back to the session's goroutine.
func (s *Session) loopTxnAnswer(typ byte, frame []byte) evloop.Verdict {
	lt := &s.loopTxn
	if lt.ends > 0 {
		switch typ {
		case '1', '2', 'n', 'Z':
			// ('n' and 'Z' answer a BEGIN the loop answered: replyBegin.)
			return evloop.Drop
		case 'D':
			keepFirstValue(frame, &lt.value)
			return evloop.Drop
		case '3', 'C':
			lt.ends--
			return evloop.Drop
		}
		lt.resume = true
		return evloop.Back
	}
	if !s.loopPinned() {
		lt.resume = true
		return evloop.Back
	}
	lt.g = nil
	s.enter(timeouts.PhaseExecute)
	return s.plainAnswer(typ, frame)
}

// loopPinned notes the pin the guard answered and plans and holds the
// first read, as pinnedByGuard does, in memory; false when that is the
// session goroutine's (lt.noted says how far it got).
func (s *Session) loopPinned() bool {
	lt := &s.loopTxn
	if _, err := strconv.ParseUint(lt.value, 10, 64); err != nil || s.db.catalogAt(lt.g.revision) == nil {
		// noteGuardPin's error, or its round trip, is the goroutine's.
		return false
	}
	ctx := context.Background()
	if err := s.noteGuardPin(ctx, lt.g, lt.value); err != nil {
		return false
	}
	lt.noted = true
	s.txn.searchPath = planner.EffectiveSearchPath(s.known.searchPath, s.user)
	refused := false
	lt.noWait = true
	err := s.txnReads(ctx, lt.sql, func() (bool, error) {
		// A refusal (a hold the lease does not grant in memory) is the
		// goroutine's: txnReads returns without it.
		refused = true
		return false, nil
	})
	lt.noWait = false
	if err != nil || refused {
		// The goroutine chooses the timedomain again (hold forgot what
		// it did not hold).
		s.txn.domain = nil
		return false
	}
	return true
}

// resumeLoopTxn serves the first read the loop gave back: its answers,
// the guard's first, are read as firstReadAfterGuard reads them.
func (s *Session) resumeLoopTxn(ctx context.Context, frame []byte) error {
	lt := &s.loopTxn
	g, sql, noted := lt.g, lt.sql, lt.noted
	lt.g, lt.resume, lt.active, lt.noted = nil, false, false, false
	// The backend runs the batch the loop sent until its ReadyForQuery:
	// loopFlight stays set (handleStatement clears it at the end of the
	// statement), so that a Cancel between the messages this goroutine
	// takes over, when no message's context is there to end, still
	// reaches the backend (session 21's third lost-cancel window).
	return s.guardAnswers(ctx, sql, frame, g, noted)
}

// resumeLoopTxnBind takes over, at its Bind m (frame), the first read of
// a prepared statement the loop gave back with its pin guard in front of
// it (takeLoopTxn): the Bind and the client's messages behind it, which
// the loop sent, go through their handlers without being sent again
// (forward); so did the Parse in front of it, if the batch began with one
// (resumeLoopTxnParse).
func (s *Session) resumeLoopTxnBind(ctx context.Context, m *pgproto3.Bind, frame []byte) error {
	lt := &s.loopTxn
	parse := lt.parseFrame
	lt.parseFrame = nil
	s.takeLoopTxn(1 + lt.behind)
	if parse != nil {
		s.txn.guard.frames = append(s.txn.guard.frames, parse)
	}
	s.definePortal(m.DestinationPortal, m.PreparedStatement)
	return s.request(ctx, frame, unit{kind: uBind}, false)
}

// resumeLoopTxnParse takes over, at its Parse m (frame), the first read
// the loop gave back whose batch began with the unnamed statement's
// Parse: the Parse is recorded as handleParse records a plain read's, not
// sent again; with a Bind behind it, the guard is taken over there
// (resumeLoopTxnBind: the guard pending, handle would settle it at a
// Bind), else here.
func (s *Session) resumeLoopTxnParse(ctx context.Context, m *pgproto3.Parse, frame []byte) error {
	lt := &s.loopTxn
	s.defineStatement(m.Name, &preparedStmt{sql: m.Query, route: s.routeOf(m.Query), effect: s.effectOf(m.Query)})
	if lt.bindBehind {
		lt.parseFrame = cloneFrame(frame)
		s.units.push(unit{kind: uParse})
		return nil
	}
	s.takeLoopTxn(1 + lt.behind)
	return s.request(ctx, frame, unit{kind: uParse}, false)
}

// takeLoopTxn leaves the session as txnBind and the handlers after it
// leave it once they sent the guard and the client's messages: the guard
// pending, its answers given back, for settleGuard to read at the Sync
// and follow as it would have (the pin noted again, if the loop noted it,
// changes nothing). The client's next sent messages, which the loop sent,
// are kept to be sent again if the guard refused, and not sent now.
func (s *Session) takeLoopTxn(sent int) {
	lt := &s.loopTxn
	g := lt.g
	lt.g, lt.resume, lt.active, lt.noted = nil, false, false, false
	// The backend runs the batch the loop sent until its ReadyForQuery:
	// loopFlight stays set (handleStatement clears it at the end of the
	// statement), so that a Cancel between the messages this goroutine
	// takes over, when no message's context is there to end, still
	// reaches the backend (session 21's third lost-cancel window).
	g.extended, g.sql, g.frames = true, lt.sql, nil
	s.txn.guard = g
	s.loopRead.sent = sent
}

// loopTxnUnit is the unit of the Query the loop forwarded, nil when it
// forwarded none of a transaction's.
func (s *Session) loopTxnUnit() *unit {
	if lt := &s.loopTxn; lt.active {
		return &lt.u
	}
	return nil
}

// A read-only transaction's BEGIN, answered by the loop (issue 15).
// Directly, a transaction of two reads is four round trips to the
// backend; through the proxy the BEGIN was one of them as well, though
// nothing of it is the client's to see but its CommandComplete and
// ReadyForQuery, which a plain BEGIN in an idle session always answers.
// So the loop answers a plain BEGIN (no options) itself (replyBegin) and
// keeps its frames, which go to the backend in front of the
// transaction's first read, in the same write as the pin's raise and
// guard (admitFirstRead): the backend begins the block where the
// read-only transaction's snapshot is taken, and the transaction costs
// the backend, and the proxy, one round trip less. The backend answers
// the frames as the guard's messages: their CommandComplete is counted
// among the guard's ends, and their other answers are dropped (Answer
// in the loop, readPinValue on the goroutine). Whatever else the session
// sends first goes to its goroutine, which sends the BEGIN alone and
// reads its answers before anything of its own (sendDeferredBegin).
//
// Until its first statement the block has no backend transaction: its
// transaction_timestamp() is that statement's, and the backend's
// idle_in_transaction_session_timeout would not run while the client
// idles between BEGIN and that statement. So a session whose timeout is
// set has its BEGIN sent as it is: one that set it (SET, its startup
// options: the tracked settings), one whose last peek or gated pin found
// it set (its role's or database's default, the server's configuration:
// viewPeekSQL, noteGatedPin), and one that ran a statement naming a
// setting since.

// replyBegin answers batch, the plain BEGIN admitBegin just took, in the
// loop's place and keeps its frames to send in front of the first read;
// false when the batch goes to the backend as it is.
func (s *Session) replyBegin(batch []byte) bool {
	lt := &s.loopTxn
	b := s.txn.begin
	if !lt.active || b == nil || b.Isolation != "" || b.ReadOnly != nil || b.Deferrable != nil ||
		s.txn.peek == nil || *s.txn.peek == "" ||
		!s.known.noIdleTimeout || s.settings.Effective(timeouts.IdleInTransactionSessionTimeout) != 0 {
		return false
	}
	tag := "START TRANSACTION"
	if startsWithWord(s.txn.beginSQL, "begin") {
		tag = "BEGIN"
	}
	reply, sync, ok := beginReply(lt.reply[:0], batch, tag)
	if !ok {
		return false
	}
	lt.reply = reply
	if sync {
		// The Sync goes with the first read's batch (or alone, on the
		// goroutine): the block begins in the read's extended sequence.
		batch = batch[:len(batch)-syncLen]
	}
	lt.deferred, lt.deferredSync, lt.beginDeferred = append(lt.deferred[:0], batch...), sync, true
	lt.deferredQuery = batch[0] == 'Q'
	// As plainAnswer follows the backend's CommandComplete and
	// ReadyForQuery of the BEGIN.
	s.loopFlight.Store(false)
	u := &lt.u
	s.commandComplete(u, reply[len(reply)-zLen-commandCompleteLen(tag):len(reply)-zLen])
	s.readyForQuery(u, reply[len(reply)-zLen:])
	lt.active = false
	s.endLoopRead()
	if s.obs.Active() {
		s.obs.End(byte(s.tx))
	}
	lt.replied = true
	return true
}

// Reply implements evloop.Replier: the answer replyBegin made for the
// batch Admit just admitted, nil when it goes to the backend.
func (s *Session) Reply() []byte {
	lt := &s.loopTxn
	if !lt.replied {
		return nil
	}
	lt.replied = false
	return lt.reply
}

// sendPinBegin queues, unflushed, the BEGIN the loop answered, in front
// of the first read's pin g, and returns the number of its answers that
// end with a CloseComplete or CommandComplete (the guard's ends). A
// BEGIN of the extended protocol is the client's messages but its Sync.
// A Query in front of a read sent as a Query is not sent as it is:
// PostgreSQL flushes its output at each ReadyForQuery, so the loop would
// wake for the BEGIN's answers alone. It is the Bind and Execute of a
// BEGIN the session prepares once, in the unnamed portal; what the Query
// did to the backend besides (drop the unnamed statement and portal) the
// read's Query does. In front of a read of the extended protocol the
// prepared BEGIN follows a Close of the unnamed statement, which the
// Query would have dropped; until it is prepared, the Query goes as it
// is.
//
// When the transaction must be raised to REPEATABLE READ (g's expected
// isolation is not a snapshot's), the prepared BEGIN is `BEGIN ISOLATION
// LEVEL REPEATABLE READ` (pinBeginRaisedStatement), and g is marked
// raised: sendPinGuard sends no raise, a statement the backend runs per
// transaction the less (docs/read-cost.md, session 19). An extended BEGIN
// is so replaced too, when it runs in the unnamed portal: its Parse, if
// any, goes as it is (the unnamed statement stays the client's BEGIN)
// unless the read's batch begins with a Parse of the unnamed statement
// (pgbench -M extended, pgx's exec modes), which replaces it before
// anything can bind it (a guard that refuses skips that Parse, and the
// batch is sent again once the transaction is begun anew:
// guardRefusedExtended);
// its Bind, Describe and Execute are the prepared BEGIN's Bind and
// Execute, whose answers the client had from replyBegin as the client's
// would have been. The guard checks default_transaction_isolation as
// before, so a default the proxy did not know still refuses the pin.
func (s *Session) sendPinBegin(g *pinGuard, readQuery, readParsesUnnamed bool) (ends int, err error) {
	lt := &s.loopTxn
	m := &s.pinMsgs
	if s.pinBeginPrepared {
		statement := pinBeginStatement
		raise := !snapshotIsolation(g.expected.isolation)
		if raise {
			statement = pinBeginRaisedStatement
		}
		switch {
		case lt.deferredQuery && readQuery:
			g.raised = raise
			return 1, s.be.sendPair(m.bindOf("", statement, nil), m.executeOf(""))
		case lt.deferredQuery:
			g.raised = raise
			if err := s.be.w.Send(m.closeOf('S', "")); err != nil {
				return 0, err
			}
			return 2, s.be.sendPair(m.bindOf("", statement, nil), m.executeOf(""))
		case raise && unnamedPortalBegin(lt.deferred):
			g.raised = true
			for off := 0; off < len(lt.deferred); {
				n := 1 + int(binary.BigEndian.Uint32(lt.deferred[off+1:]))
				if lt.deferred[off] == 'P' && !readParsesUnnamed {
					if err := s.be.w.WriteFrame(lt.deferred[off : off+n]); err != nil {
						return 0, err
					}
				}
				off += n
			}
			return 1, s.be.sendPair(m.bindOf("", statement, nil), m.executeOf(""))
		}
	}
	if err := s.be.w.WriteFrame(lt.deferred); err != nil {
		return 0, err
	}
	if s.pinBeginPrepared {
		return 1, nil
	}
	// Prepared for the next time, once per session (closed first: a
	// client may have prepared the names).
	s.pinBeginPrepared = true
	if err := s.be.sendPair(m.closeOf('S', pinBeginStatement), m.parseOf(pinBeginStatement, "BEGIN", nil)); err != nil {
		return 0, err
	}
	return 3, s.be.sendPair(m.closeOf('S', pinBeginRaisedStatement),
		m.parseOf(pinBeginRaisedStatement, "BEGIN ISOLATION LEVEL REPEATABLE READ", nil))
}

// unnamedPortalBegin reports whether frames, an extended BEGIN that
// beginReply answered (without its Sync), runs it in the unnamed portal:
// its one Bind binds that one.
func unnamedPortalBegin(frames []byte) bool {
	binds := 0
	for off := 0; off < len(frames); {
		n := 1 + int(binary.BigEndian.Uint32(frames[off+1:]))
		if frames[off] == 'B' {
			binds++
			// The destination portal's name is the body's first string.
			if n < 6 || frames[off+5] != 0 {
				return false
			}
		}
		off += n
	}
	return binds == 1
}

// Lengths of the frames a BEGIN is answered with.
const (
	syncLen = 5
	zLen    = 6
)

func commandCompleteLen(tag string) int { return 1 + 4 + len(tag) + 1 }

// beginReply appends to dst what the backend answers batch, a plain BEGIN
// in an idle session that admitTxnBind or admitQuery took: a Query, or
// its unnamed Parse, Bind, a Describe of its portal and Execute, or some
// of them, and a Sync. sync: the batch is extended and ends with its
// Sync. ok is false for a batch the backend might refuse (parameters for
// a statement that takes none, more result formats than its one).
func beginReply(dst, batch []byte, tag string) (_ []byte, sync, ok bool) {
	for off := 0; off < len(batch); {
		n := 1 + int(binary.BigEndian.Uint32(batch[off+1:]))
		frame := batch[off : off+n]
		off += n
		r := msgReader{b: frame[5:]}
		switch frame[0] {
		case 'Q':
			dst = appendCommandComplete(dst, tag)
			sync = false
		case 'P':
			r.cstring()
			r.cstring()
			if r.uint16() != 0 || r.bad {
				return dst, false, false
			}
			dst = append(dst, '1', 0, 0, 0, 4)
		case 'B':
			r.cstring()
			r.cstring()
			formats := r.uint16()
			r.skip(2 * formats)
			if params := r.uint16(); formats > 1 || params != 0 || r.uint16() > 1 || r.bad {
				return dst, false, false
			}
			dst = append(dst, '2', 0, 0, 0, 4)
		case 'D':
			dst = append(dst, 'n', 0, 0, 0, 4)
		case 'E':
			dst = appendCommandComplete(dst, tag)
		case 'S':
			sync = true
		default:
			return dst, false, false
		}
	}
	return append(dst, 'Z', 0, 0, 0, 5, 'T'), sync, true
}

// appendCommandComplete appends a CommandComplete of tag.
func appendCommandComplete(dst []byte, tag string) []byte {
	dst = append(dst, 'C')
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(tag)+1))
	return append(append(dst, tag...), 0)
}

// sendDeferredBegin sends the BEGIN the loop answered (replyBegin) and
// has not sent, alone, before the session's goroutine sends anything of
// its own or the client's, and drops its answers: the client has had
// them.
func (s *Session) sendDeferredBegin(ctx context.Context) error {
	lt := &s.loopTxn
	lt.beginDeferred = false
	if err := s.be.w.WriteFrame(lt.deferred); err != nil {
		return s.lost(err)
	}
	if lt.deferredSync {
		if err := s.be.w.Send(&pgproto3.Sync{}); err != nil {
			return s.lost(err)
		}
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lostWrite(err)
	}
	failed := false
	if err := s.occRead(ctx, func(typ byte, _ []byte) { failed = failed || typ == 'E' }); err != nil {
		return err
	}
	if failed || s.tx != txBlock {
		// Not reached: a plain BEGIN in an idle session succeeds. The
		// client was told it did, so the session cannot go on.
		return pgerr.Fatal(pgerr.ConnectionFailure, "mzproxy: the backend refused a BEGIN the proxy had answered")
	}
	return nil
}
