package proxy

import (
	"context"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/storage"
	"github.com/mzproxy/mzproxy/timeouts"
)

// The pin of a read-only transaction in the round trip of its first read
// (issue 15). When the first statement of a transaction block is a plain
// read, sent as a simple Query or bound by the Bind that begins an
// extended-protocol batch, and the gate-less pin applies (pinQuick: the
// peek answered, the characteristics are known), the pin's statements go
// in the same write as the read, in front of it: the raise to REPEATABLE
// READ, then a guard (pinGuardSQL) that pins and checks, in the snapshot
// it takes, everything the proxy assumed when it let the read follow:
//
//   - no write slot was taken since the peek (pin_check answered P),
//   - the catalog is at the revision the proxy saw last, which the read's
//     timedomain and holds are then planned with (read only when the
//     peek is not the count of the session's last pin, whose revision
//     that count implies: see pinGuardSQL),
//   - the search_path is the one the proxy knows (the read's names),
//   - the session's default isolation level and the transaction's
//     read-only mode are those the raise was chosen for.
//
// If any does not hold, the guard fails (a cast of its marker to bigint,
// as seen_read.go's guard fails) and the backend skips everything until a
// Sync, the client's Query or Bind too: the read never runs with a
// snapshot it must not have, so it never runs twice, whatever functions it
// calls. The proxy then ends the skip, begins the transaction anew
// (ROLLBACK and the client's BEGIN) and pins it with the gate, as pinQuick
// does when its check fails, and sends the read again: a Query the
// ordinary way; a batch as the client's messages forwarded behind the
// guard, kept for it (its Bind, Describe, Execute and Sync; any other
// message of the client's is only handled once the guard is answered,
// after a Flush).
//
// When the guard passes, its answer comes before any of the read's: the
// proxy takes the transaction's timestamp from it, plans the read with the
// pinned catalog and takes its read holds (timedomain) at that timestamp
// before it relays the first of the read's answers. The holds are taken
// after the read started, which is safe: a plain read is forwarded as it
// is (history mode, which rewrites every read, never takes this path), so
// it reads the tables themselves in its MVCC snapshot, never their
// history, and compaction, which deletes only history rows, cannot change
// what it sees. The holds protect the transaction's later reads of history
// at its timestamp (AS OF, mz_now()). A hold at the pinned timestamp t
// needs no round trip: t is the oracle's P, at or after every read
// timestamp handed out before, among them the lease's floor (the read
// timestamp of an earlier heartbeat, see seen_read.go), so t >= Floor()
// and the lease grants it in memory. Should a heartbeat have raised the
// floor past t in between, Acquire checks the real sinces in its own
// round trip, and finds none past t: the pin held the floor before it was
// sent (fenceFloor), and t is at or above that floor.

// pinGuardStatement names the guard's prepared statement and portal, and
// pinGuardRevStatement the guard that checks the catalog revision too.
var (
	pinGuardStatement    = ownName("mzproxy_pin_guard")
	pinGuardRevStatement = ownName("mzproxy_pin_guard_rev")
)

// pinRefusedMarker is the name of the setting the guard reads when it
// refuses (refusal).
const pinRefusedMarker = "mzproxy: pin refused"

// pinGuardSQL pins for pin_peek's answer ($1) and answers the
// transaction's timestamp t when default_transaction_isolation,
// transaction_read_only and the search_path (as SHOW spells it: last, as
// it may hold any character) are $2, joined by '|'; with checkRevision,
// only when the catalog is at revision $3 too; else it fails. It reads
// the sequences itself, in one statement without subqueries in its FROM
// (storage.PinGuardCheck, version 32): the view pin_state and the two
// scalar subqueries it was read through cost the backend more than the
// rest of the check (docs/read-cost.md).
//
// The revision needs no check when the peek is the count of writes the
// session's last pin read (settledWrites): every catalog revision is
// bumped by a DDL that holds a write slot, counted in writes before it
// commits, so a snapshot whose count is still that one has that pin's
// revision, which the session kept. The operators are named with their
// schema, as PinGuardCheck's: the session's search_path is the client's.
func pinGuardSQL(checkRevision bool) string {
	const cat = " OPERATOR(pg_catalog.||) '|' OPERATOR(pg_catalog.||) "
	q := "SELECT (CASE WHEN " + storage.PinGuardCheck("$1") +
		" AND pg_catalog.current_setting('default_transaction_isolation')" + cat +
		"pg_catalog.current_setting('transaction_read_only')" + cat +
		"pg_catalog.current_setting('search_path') OPERATOR(pg_catalog.=) $2"
	if checkRevision {
		q += " AND " + catalogRevisionSubquery + " OPERATOR(pg_catalog.=) $3"
	}
	return q + " THEN " + storage.PinGuardTS + " ELSE " + refusal(pinRefusedMarker) + "::pg_catalog.int8 END)" + storage.PinGuardFrom
}

// pinGuard is a pin sent in front of the transaction's first read, whose
// answers have not been read.
type pinGuard struct {
	expected txnCharacteristics
	// revision is the catalog's at the pin: checked by the guard when
	// checkRevision, else the revision of the session's last pin, whose
	// count of writes the peek is (see pinGuardSQL).
	revision      int64
	checkRevision bool
	// raised: the BEGIN sent in front of it began the transaction
	// REPEATABLE READ (sendPinBegin), so no raise is sent.
	raised bool
	ends   int // the CloseCompletes and CommandCompletes its answers end with
	// portal is the portal the raise and the guard run in: the unnamed
	// one when the read that follows replaces it (a simple Query, or a
	// Bind of the unnamed portal), so no Close is sent; else the guard's
	// own, closed after it.
	portal string
	// extended: the read is a Bind (sql its statement's text); frames
	// are the client's messages forwarded behind the guard, sent again
	// when it refuses.
	extended bool
	sql      string
	frames   [][]byte
}

// pinWithRead returns the guard to send in front of sql, the first
// statement of a fresh transaction block, when it can ride with it; nil
// when the transaction is pinned the ordinary way first. readPortal is
// the portal the read runs in ("" for a simple Query).
func (s *Session) pinWithRead(ctx context.Context, sql, readPortal string) *pinGuard {
	// Over the extended protocol, the read's Bind begins the batch.
	if s.txn.phase != txnFresh || s.tx != txBlock || s.be.unsynced ||
		s.units.len() > 0 || s.skipping || s.proxy.cfg.HistoryReads || ctx.Err() != nil ||
		s.txn.peek == nil || *s.txn.peek == "" || s.known.searchPath == nil || !s.plainRead(sql) ||
		s.tempSeen { // notePinned asks for its temporary relations (temps.go)
		return nil
	}
	expected, guessed := s.expectedCharacteristics()
	seen := s.db.seen.Load()
	if !guessed || seen == nil {
		return nil
	}
	g := &pinGuard{expected: expected, revision: seen.catalog.cat.Revision, checkRevision: true}
	if c := &s.known.settled; c.writes == *s.txn.peek && c.revision == g.revision {
		// The catalog the proxy has is the last pin's, and no write
		// since can have changed it: the guard need not read it.
		g.checkRevision = false
	}
	if readPortal != "" {
		g.portal = pinGuardStatement
	}
	return g
}

// sendPinGuard queues, unflushed, the raise to REPEATABLE READ when the
// transaction needs it and the guard (both prepared once per session);
// the client's Query follows them in the same write.
func (s *Session) sendPinGuard(ctx context.Context, g *pinGuard) error {
	s.fenceFloor(ctx)
	m := &s.pinMsgs
	statement, prepared, oids := pinGuardStatement, &s.pinGuardPrepared, pinGuardOIDs[:2]
	if g.checkRevision {
		statement, prepared, oids = pinGuardRevStatement, &s.pinGuardRevPrepared, pinGuardOIDs[:]
	}
	prepare := !*prepared
	if prepare {
		// Closed first: a client may have prepared the names.
		if err := s.be.sendPair(m.closeOf('S', pinRaiseStatement),
			m.parseOf(pinRaiseStatement, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", nil)); err != nil {
			return err
		}
		g.ends++
		*prepared = true
	}
	if !g.raised && !snapshotIsolation(g.expected.isolation) {
		if err := s.sendPinRaise(g); err != nil {
			return err
		}
	}
	if prepare {
		// After the SET: parsing a SELECT takes the snapshot.
		if err := s.be.sendPair(m.closeOf('S', statement), m.parseOf(statement, pinGuardSQL(g.checkRevision), oids)); err != nil {
			return err
		}
		g.ends++
	}
	readOnly := "off"
	if g.expected.readOnly {
		readOnly = "on"
	}
	params := m.guardParams(*s.txn.peek, s.known.defaults.isolation, readOnly, s.known.searchPathShown, g.revision)
	if !g.checkRevision {
		params = params[:2]
	}
	if err := s.be.sendPair(m.bindOf(g.portal, statement, params), m.executeOf(g.portal)); err != nil {
		return err
	}
	g.ends++
	if g.portal != "" {
		// Left open, it would stay until the transaction ends (and show
		// in pg_cursors), and the read's portal is named.
		if err := s.be.w.Send(m.closeOf('P', g.portal)); err != nil {
			return err
		}
		g.ends++
	}
	s.txn.guard = g
	return nil
}

// sendPinRaise queues the raise to REPEATABLE READ in the unnamed portal,
// which the guard's Bind replaces; in a named one of its own, closed,
// when the guard's portal is named (a named portal is not replaced).
func (s *Session) sendPinRaise(g *pinGuard) error {
	m := &s.pinMsgs
	portal := ""
	if g.portal != "" {
		portal = pinRaiseStatement
	}
	if err := s.be.sendPair(m.bindOf(portal, pinRaiseStatement, nil), m.executeOf(portal)); err != nil {
		return err
	}
	g.ends++
	if portal == "" {
		return nil
	}
	g.ends++
	return s.be.w.Send(m.closeOf('P', portal))
}

// sendPair queues two messages to the backend, unflushed: a statement's
// Close and Parse, or a portal's Bind and Execute.
func (b *backend) sendPair(first, second pgproto3.FrontendMessage) error {
	if err := b.w.Send(first); err != nil {
		return err
	}
	return b.w.Send(second)
}

// pinMessages are the messages of a read-only transaction's pin and of a
// read guard (sendGuard), kept by the session and reused: each is encoded
// as it is queued, so neither allocates them per statement.
type pinMessages struct {
	bind   pgproto3.Bind
	exec   pgproto3.Execute
	close  pgproto3.Close
	parse  pgproto3.Parse
	sync   pgproto3.Sync
	params [3][]byte
	buf    []byte // the bytes of params
}

func (m *pinMessages) bindOf(portal, statement string, params [][]byte) *pgproto3.Bind {
	m.bind = pgproto3.Bind{DestinationPortal: portal, PreparedStatement: statement, Parameters: params}
	return &m.bind
}

func (m *pinMessages) executeOf(portal string) *pgproto3.Execute {
	m.exec = pgproto3.Execute{Portal: portal}
	return &m.exec
}

func (m *pinMessages) closeOf(kind byte, name string) *pgproto3.Close {
	m.close = pgproto3.Close{ObjectType: kind, Name: name}
	return &m.close
}

func (m *pinMessages) parseOf(name, query string, oids []uint32) *pgproto3.Parse {
	m.parse = pgproto3.Parse{Name: name, Query: query, ParameterOIDs: oids}
	return &m.parse
}

// pinGuardOIDs are the types of the guard's parameters (see pinGuardSQL).
var pinGuardOIDs = [...]uint32{int8OID, textOID, int8OID}

// guardParams are the guard's parameters (see pinGuardSQL), in m's buffer:
// the peek, the settings joined as the guard joins them, the revision.
func (m *pinMessages) guardParams(peek, isolation, readOnly, searchPath string, revision int64) [][]byte {
	var ends [len(m.params)]int
	m.buf = append(m.buf[:0], peek...)
	ends[0] = len(m.buf)
	m.buf = append(append(append(append(append(m.buf, isolation...), '|'), readOnly...), '|'), searchPath...)
	ends[1] = len(m.buf)
	m.buf = strconv.AppendInt(m.buf, revision, 10)
	ends[2] = len(m.buf)
	from := 0
	for i, end := range ends {
		// Not nil even when empty: nil is SQL NULL.
		m.params[i] = m.buf[from:end:end]
		from = end
	}
	return m.params[:]
}

// firstReadAfterGuard sends the client's Query (frame, sql) behind the
// pin guard queued for it, and relays its answers once the guard's have
// said the transaction is pinned and its holds are taken; see the top of
// this file.
func (s *Session) firstReadAfterGuard(ctx context.Context, sql string, frame []byte) error {
	g := s.txn.guard
	s.txn.guard = nil
	if err := s.forward(frame); err != nil {
		return err
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lostWrite(err)
	}
	return s.guardAnswers(ctx, sql, frame, g, false)
}

// guardAnswers reads the answers of the pin guard g and of the Query
// (frame, sql) sent behind it. noted: the event loop sent them, followed
// the guard's answer and noted the pin (loop_txn.go); its answers, given
// back, are read again here and the read is held.
func (s *Session) guardAnswers(ctx context.Context, sql string, frame []byte, g *pinGuard, noted bool) error {
	s.busy.Store(true)
	s.midRequest = true
	s.enter(timeouts.PhaseTimestamp)
	v, failed, err := s.readPinValue(g.ends)
	switch {
	case err != nil:
	case failed != nil:
		err = s.guardFailed(ctx, g, failed)
		if err == nil {
			// Pinned anew: the read goes the ordinary way.
			if err = s.orLost(s.txnReads(ctx, sql, func() (bool, error) { return true, nil })); err == nil {
				return s.request(ctx, frame, unit{kind: uQuery, relayZ: true}, true)
			}
		}
	case noted:
		err = s.readAfterPin(ctx, sql)
	default:
		err = s.pinnedByGuard(ctx, sql, g, v)
	}
	if err != nil {
		s.busy.Store(false)
		s.midRequest = false
		return err
	}
	s.units.push(unit{kind: uQuery, relayZ: true})
	return s.exchange(ctx)
}

// noteGuardPin follows the answer v of guard g that passed: the
// transaction's timestamp, at the writes of its peek and the catalog
// revision g names.
func (s *Session) noteGuardPin(ctx context.Context, g *pinGuard, v string) error {
	read, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return pgerr.New(pgerr.InternalError, "pinned timestamp %q: %v", v, err)
	}
	return s.notePinned(ctx, read, peekValue(*s.txn.peek), g.revision)
}

// guardFailed follows the guard's error: the backend skipped the client's
// Query, and is made to end the skip. A refusal begins the transaction
// anew and pins it with the gate (nil: pinned); any other error fails the
// transaction, as a failed pin does.
func (s *Session) guardFailed(ctx context.Context, g *pinGuard, failed *pgerr.Error) error {
	refused := refusedBy(failed, pinRefusedMarker) || s.guardRefusedView(failed)
	if !refused {
		// Prepared again next time (the Parse may be what failed).
		s.pinGuardPrepared, s.pinGuardRevPrepared, s.pinBeginPrepared = false, false, false
	}
	if err := s.be.internalFailed(failed); !refused || err != failed {
		return s.pinFailed(err, true, g.expected)
	}
	return s.pinGatedAfter(ctx, []string{"ROLLBACK", s.txn.beginSQL}, g.expected, true)
}

// guardRefusedView reports whether the guard failed for reading a view
// the session now restricts (its plan was made again under the setting):
// nothing ran, so it is followed as a refusal, and the session's pin
// statements call the functions from now on.
func (s *Session) guardRefusedView(failed *pgerr.Error) bool {
	if !restrictedView(failed) {
		return false
	}
	s.restrictViews()
	return true
}

// pinnedByGuard follows the guard's answer v while the read runs: the
// transaction is pinned, and the read is planned and held. If that fails,
// the read's answers are dropped and the client gets the error, as when
// the pin came first.
func (s *Session) pinnedByGuard(ctx context.Context, sql string, g *pinGuard, v string) error {
	if err := s.noteGuardPin(ctx, g, v); err != nil {
		if derr := s.dropQueryAnswers(); derr != nil {
			return derr
		}
		return err
	}
	return s.readAfterPin(ctx, sql)
}

// readAfterPin plans and holds sql, the first read of a transaction the
// guard in front of it pinned, while its answers are on their way; if
// that fails, they are dropped and the client gets the error.
func (s *Session) readAfterPin(ctx context.Context, sql string) error {
	dropped := false
	dropRead := func() (bool, error) {
		if dropped {
			return true, nil
		}
		dropped = true
		return true, s.dropQueryAnswers()
	}
	s.txn.searchPath = planner.EffectiveSearchPath(s.known.searchPath, s.user)
	// The search_path is known (not nil), so txnReads asks ready only
	// before it refuses the read: the read's answers go first.
	err := s.txnReads(ctx, sql, dropRead)
	if err != nil && !dropped {
		if derr := s.dropQueryAnswers(); derr != nil {
			return derr
		}
	}
	return err
}

// dropQueryAnswers reads and drops the answers to a Query of the client's
// that the client will not see, up to its ReadyForQuery. A FATAL error
// still reaches the client and ends the session.
func (s *Session) dropQueryAnswers() error {
	if err := s.occRead(context.Background(), func(byte, []byte) {}); err != nil {
		return err
	}
	if s.tx == txFailed {
		s.releaseTxnHolds()
	}
	return nil
}

// settleGuard reads the answers of the guard queued in front of a read's
// Bind (the extended protocol), which come before those of the client's
// messages behind it: at the Sync that ends the read's batch, or, when the
// client sends anything else first, after a Flush sent now (sendFlush).
func (s *Session) settleGuard(ctx context.Context, sendFlush bool) error {
	g := s.txn.guard
	s.txn.guard = nil
	if sendFlush {
		if err := s.be.w.Send(&pgproto3.Flush{}); err != nil {
			return s.lost(err)
		}
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lostWrite(err)
	}
	s.enter(timeouts.PhaseTimestamp)
	v, failed, err := s.readPinValue(g.ends)
	switch {
	case err != nil:
		return err
	case failed == nil:
		return s.guardPassedExtended(ctx, g, v)
	case refusedBy(failed, pinRefusedMarker) || s.guardRefusedView(failed):
		return s.guardRefusedExtended(ctx, g)
	}
	// Prepared again next time (the Parse may be what failed).
	s.pinGuardPrepared, s.pinGuardRevPrepared, s.pinBeginPrepared = false, false, false
	if failed.IsFatal() {
		return failed
	}
	// The client's batch fails with the guard's error, as it would with
	// an error of its Bind: the backend skips to the client's Sync.
	return s.failBatchBehindGuard(failed)
}

// guardPassedExtended follows the guard's answer v: the transaction is
// pinned, and its first read (the portal bound behind the guard, of
// statement sql) is held before any of its answers is relayed. The read
// cannot be refused (it chooses the timedomain) and its holds are taken in
// memory; if taking them fails all the same (a lost lease), the read is
// already bound, and the session ends rather than relay what nothing
// protects.
func (s *Session) guardPassedExtended(ctx context.Context, g *pinGuard, v string) error {
	err := s.noteGuardPin(ctx, g, v)
	if err == nil {
		s.txn.searchPath = planner.EffectiveSearchPath(s.known.searchPath, s.user)
		if refused := s.holdFirstRead(ctx, g.sql); refused != nil {
			err = refused
		}
	}
	if err != nil {
		pe := pgerr.As(err)
		return pgerr.Fatal(pe.Code, "%s", pe.Message)
	}
	return nil
}

// holdFirstRead checks the reads in sql, the pinned transaction's first,
// against the timedomain (which they choose) and holds them: txnReads,
// for a read whose answers are on their way (no round trip of the
// proxy's may come first).
func (s *Session) holdFirstRead(ctx context.Context, sql string) *pgerr.Error {
	stmts, err := s.proxy.planner.Plan(sql, s.txn.catalog, planner.Options{SearchPath: s.txn.searchPath})
	if err == nil {
		for _, st := range stmts {
			if !st.ReadOnly() || st.AsOf != nil {
				continue
			}
			if refused := s.inTimedomain(ctx, st); refused != nil {
				return refused
			}
		}
	}
	s.afterStatements(stmts)
	return nil
}

// guardRefusedExtended follows the guard's refusal: the backend skipped
// the client's messages behind it, up to the client's Sync if it was sent
// (its ReadyForQuery is dropped: the Sync is sent again with the rest),
// else up to a Sync of the proxy's own. The transaction is begun anew and
// pinned with the gate, and the client's messages are sent again.
func (s *Session) guardRefusedExtended(ctx context.Context, g *pinGuard) error {
	if !slices.ContainsFunc(s.units.items[s.units.head:], func(u unit) bool { return u.kind == uSync }) {
		if err := s.be.w.Send(&pgproto3.Sync{}); err != nil {
			return s.lost(err)
		}
		if err := s.be.w.Flush(); err != nil {
			return s.lostWrite(err)
		}
	}
	if err := s.dropQueryAnswers(); err != nil {
		return err
	}
	// Nothing of the client's is at the backend now: a failure of the
	// proxy's own statements ends with a Sync of its own.
	s.tx = txBlock
	clientBatch := s.be.clientBatch
	s.be.clientBatch = false
	err := s.pinGatedAfter(ctx, []string{"ROLLBACK", s.txn.beginSQL}, g.expected, true)
	if err == nil {
		if refused := s.holdFirstRead(ctx, g.sql); refused != nil {
			err = s.refuse(ctx, refused)
		}
	}
	s.be.clientBatch = clientBatch
	if err != nil {
		for s.units.len() > 0 {
			s.units.pop()
		}
		s.midRequest = false
		return err
	}
	return s.sendKeptFrames(g.frames)
}

// failBatchBehindGuard fails the client's batch with the guard's error
// (not a refusal), as unitFailed fails it after an error of the client's:
// the backend skips to the client's Sync. If that was sent, its
// ReadyForQuery is read here and the caller's error answers the Sync.
func (s *Session) failBatchBehindGuard(failed *pgerr.Error) error {
	s.skipping = true
	for u := s.units.front(); u != nil && u.kind != uSync; u = s.units.front() {
		s.units.pop()
	}
	if s.units.len() > 0 {
		if err := s.dropQueryAnswers(); err != nil {
			return err
		}
		s.units.pop()
		s.skipping = false
	}
	s.releaseTxnHolds()
	s.midRequest = false
	return failed
}

// sendKeptFrames sends again the client's messages that followed a guard
// which refused (the backend skipped them), once the proxy has begun or
// bound again.
func (s *Session) sendKeptFrames(frames [][]byte) error {
	for _, f := range frames {
		if err := s.be.w.WriteFrame(f); err != nil {
			return s.lostWrite(err)
		}
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lostWrite(err)
	}
	return nil
}
