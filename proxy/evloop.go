package proxy

import (
	"bytes"
	"encoding/binary"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/timeouts"
)

// The session's side of the event loop (package evloop): between
// statements, a session idle in a plain state lends its sockets to the
// loop, which forwards the client's plain reads and relays their answers
// itself. The loop calls Admit and Answer on its own goroutine while the
// connection's goroutine waits for it, so they follow the session's state
// as handle and exchange would, without a lock.

// detachable makes the backend's socket one the loop can take (a TCP or
// Unix socket without TLS; others stay as they are).
func (b *backend) detachable() {
	if b.r.Buffered() > 0 || b.w.Buffered() > 0 {
		return
	}
	if lc := evloop.Wrap(b.nc); lc != nil {
		b.nc = lc
		b.r.Reset(lc)
		b.w.Reset(lc)
	}
}

// LoopBackend implements frontend.LoopSession: the backend's socket when
// everything the loop does not follow is absent.
func (s *Session) LoopBackend() *evloop.Conn {
	lc, ok := s.be.nc.(*evloop.Conn)
	switch {
	case !ok, s.dump:
		return nil
	case (s.tx != txIdle || s.txn.phase != txnNone) && !s.loopFollowsTxn():
		// A read-only transaction the loop follows (loop_txn.go) may be
		// in it, with its holds.
		return nil
	case s.units.len() > 0, s.midRequest,
		s.copy != copyNone, s.listening, s.occBatch != nil,
		s.skipping, s.muted, s.be.unsynced, s.budget != nil:
		return nil
	case len(s.hiddenBuilds) > 0:
		// Built first by the session's goroutine (buildHiddenFirst).
		return nil
	}
	if s.idleRead != nil {
		// A transaction with holds its goroutine served last (a first
		// read given back, or pinned at its Parse): the loop reads the
		// backend while the client is idle, as the idle reader does (a
		// FATAL error ends the session, and its holds with it).
		if s.stopIdleReader() != nil {
			return nil
		}
		if lc = s.loopBackendBuffers(lc); lc == nil {
			s.watchBackend()
		}
		return lc
	}
	return s.loopBackendBuffers(lc)
}

// loopBackendBuffers is LoopBackend's lc when nothing the loop does not
// follow is buffered or pending: answers, a portal's holds, a deadline.
func (s *Session) loopBackendBuffers(lc *evloop.Conn) *evloop.Conn {
	switch {
	case s.be.r.Buffered() > 0, s.be.w.Buffered() > 0, s.client.Buffered() > 0:
		return nil
	case len(s.portalHolds) > 0, s.loopRead.resume, s.loopTxn.resume:
		return nil
	case len(s.be.unread.rest) > 0:
		// The loop gave back an answer not yet all read again.
		return nil
	case s.stmt != nil && !s.stmt.deadline.IsZero(), s.hasStatementTimeout():
		return nil
	}
	return lc
}

// Admit implements evloop.Peer: a batch is forwarded as it is when every
// message in it is one the session would forward unchanged (a Query or
// Parse of a plain read, Bind, Describe and Execute of one, the Sync);
// then the session records it as handle would have.
//
// A Cancel under way (it holds stmtMu while its CancelRequest reaches the
// backend) may be for the batch just answered: a batch forwarded now
// could meet that cancel at the backend. Such a batch goes to the
// session's goroutine, which waits for the Cancel as it does for any
// message (setStatementCancel); the loop's goroutine must not wait.
func (s *Session) Admit(batch []byte) ([]byte, bool) {
	if !s.stmtMu.TryLock() {
		return nil, false
	}
	defer s.stmtMu.Unlock()
	s.admitting = true
	defer func() { s.admitting = false }()
	s.loopTxn.began = false
	if (s.tx == txBlock || s.tx == txFailed || s.txn.phase != txnNone) && !s.loopFollowsTxn() {
		// As LoopBackend: the session's goroutine serves the block.
		return nil, false
	}
	if s.be != nil && s.be.escapingStrings {
		// Its texts are checked on the session's own path (strings_scs.go).
		return nil, false
	}
	if len(s.hiddenBuilds) > 0 {
		// Built first by the session's goroutine (buildHiddenFirst).
		return nil, false
	}
	began := !s.obs.Active()
	var send []byte
	var ok bool
	if s.proxy != nil && s.proxy.cfg.HistoryReads { // (the tests' bare sessions have none)
		// In history mode no read is forwarded as it is: the loop serves
		// only a plain read, planned with the catalog seen last behind
		// the read guard, sent as a Query (loop_read.go) or as the
		// unnamed statement's Parse (loop_parse.go, which spares the
		// Parse a round trip of its own on the database's catalog
		// connection). Everything else is the goroutine's, as before (a
		// Query that is no plain read may be a setting the proxy
		// answers: sessionSetting).
		if s.tx == txIdle {
			if sql, plain, query := s.queryText(batch); !query {
				send, ok = s.admitParsedRead(batch)
			} else if plain {
				send, ok = s.admitGuarded(sql)
			}
		}
	} else {
		send, ok = s.admitBatch(batch)
	}
	if !ok {
		return nil, false
	}
	// At the backend, as relay's exchange would say (SHOW mzproxy_sessions).
	// A statement the batch began is there from its start: its admission
	// is not worth a second clock read. (The loop drives no session with a
	// deadline budget, which enter would tell too.)
	if began {
		s.obs.PhaseFromStart(observedPhase[timeouts.PhaseExecute])
	} else {
		s.enter(timeouts.PhaseExecute)
	}
	s.loopFlight.Store(true)
	if s.loopTxn.began && send == nil && s.replyBegin(batch) {
		// Answered here; sent with the transaction's first read.
		return nil, true
	}
	return send, true
}

// admitBatch is Admit's choice outside history mode: a batch of plain
// reads forwarded as it is, or one of the guarded paths.
func (s *Session) admitBatch(batch []byte) ([]byte, bool) {
	var msgs []plainMsg
	ok := false
	if s.tx != txBlock {
		// (In a transaction a plain read is checked against its
		// timedomain: admitQuery.)
		msgs, ok = s.plainBatch(batch)
	}
	if ok {
		for i := range msgs {
			s.admitted(&msgs[i])
		}
		return nil, true
	}
	if sql, _, query := s.queryText(batch); query {
		// A read-only transaction's statement (loop_txn.go) or a
		// timestamped read, guarded (loop_read.go).
		return s.admitQuery(sql, batch)
	}
	// A prepared timestamped read, or one sent as the unnamed statement's
	// Parse, guarded (loop_read.go, loop_parse.go), or a prepared
	// statement of a read-only transaction (loop_txn.go).
	if s.tx == txIdle {
		if send, ok := s.admitBoundRead(batch); ok {
			return send, true
		}
		if send, ok := s.admitParsedRead(batch); ok {
			return send, true
		}
	}
	return s.admitTxnBind(batch)
}

// queryText is the text of a batch that is one Query, and whether it is a
// plain read (plainText's answers).
func (s *Session) queryText(batch []byte) (sql string, plain, query bool) {
	if batch[0] != 'Q' || 1+int(binary.BigEndian.Uint32(batch[1:])) != len(batch) {
		return "", false, false
	}
	m, ok := readPlain(batch)
	if !ok {
		return "", false, false
	}
	sql, plain = s.plainText(m.name)
	return sql, plain, true
}

// loopScratch is what Admit reuses from one batch to the next, so that a
// point read's batch costs no allocation of its own.
type loopScratch struct {
	msgs   []plainMsg
	parsed []named // statements parsed earlier in the batch: plain?
	bound  []named // portals bound earlier in the batch: plain?
	// lastPortal is the record of the last portal admitted (reused for the
	// next Bind of the same statement: definePlainPortal).
	lastPortal *portal
	// bind is the last prepared timestamped read's Bind (readBind), its
	// slices reused; boundPortal the record forwardExplicitBind reads.
	bind        pgproto3.Bind
	boundPortal portal
	// A timestamped read's unnamed Parse (admitParsedRead): its declared
	// parameter types, the Parse of its rewrite, and the last record.
	declared   []uint32
	parse      pgproto3.Parse
	parsedRead parsedRead
	closes     []string // the statements its batch closes
	// present is the text of the proxy's statement a prepared read of the
	// present binds (presentStmt), the last made.
	present presentText
}

// named is whether the statement or portal name defined earlier in a
// batch is plain.
type named struct {
	name  []byte
	plain bool
}

// maxBatchNames bounds the statements or portals a batch the loop
// forwards may define (looked up one by one; a client that defines more
// in one batch pipelines, and its own goroutine serves it).
const maxBatchNames = 8

// lookupNamed finds the last definition of name in defs.
func lookupNamed(defs []named, name []byte) (plain, found bool) {
	for i := len(defs) - 1; i >= 0; i-- {
		if bytes.Equal(defs[i].name, name) {
			return defs[i].plain, true
		}
	}
	return false, false
}

// plainMsg is one message of a batch the loop may forward, read only as
// far as the session follows it (a Bind's parameters are skipped). Its
// slices point into the batch.
type plainMsg struct {
	typ     byte
	name    []byte // Parse, Describe: the statement or portal; Bind, Execute: the portal
	stmt    []byte // Bind: the prepared statement
	sql     string // Query, Parse (plainText's string)
	objType byte   // Describe: 'S' or 'P'
}

// plainBatch reads a batch and judges it without changing anything:
// names parsed and portals bound earlier in the batch count as recorded.
func (s *Session) plainBatch(batch []byte) ([]plainMsg, bool) {
	sc := &s.loop
	msgs := sc.msgs[:0]
	sc.parsed, sc.bound = sc.parsed[:0], sc.bound[:0]
	for off := 0; off < len(batch); {
		n := int(binary.BigEndian.Uint32(batch[off+1:]))
		frame := batch[off : off+1+n]
		off += 1 + n
		m, ok := readPlain(frame)
		if !ok {
			return nil, false
		}
		switch m.typ {
		case 'Q', 'P':
			var sql []byte
			if m.typ == 'Q' {
				sql = m.name
				m.name = nil
			} else {
				sql = m.stmt
				m.stmt = nil
			}
			m.sql, ok = s.plainText(sql)
			if m.typ == 'P' {
				sc.parsed = append(sc.parsed, named{m.name, ok})
				ok = ok && len(sc.parsed) <= maxBatchNames
			}
		case 'B':
			ok = s.plainStmt(m.stmt)
			sc.bound = append(sc.bound, named{m.name, ok})
			ok = ok && len(sc.bound) <= maxBatchNames
		case 'D':
			ok = m.objType == 'S' && s.plainStmt(m.name) || m.objType == 'P' && s.plainPortal(m.name)
		case 'E':
			ok = s.plainPortal(m.name)
		}
		if !ok {
			return nil, false
		}
		msgs = append(msgs, m)
	}
	sc.msgs = msgs
	return msgs, true
}

// plainStmt: the prepared statement name (parsed earlier in the batch, or
// recorded) is a plain read forwarded as written.
func (s *Session) plainStmt(name []byte) bool {
	if p, ok := lookupNamed(s.loop.parsed, name); ok {
		return p
	}
	st, ok := s.stmts[string(name)]
	return ok && st.explicit == nil && !st.tsParam && st.effect == nil && s.plainRead(st.sql)
}

// plainPortal: the portal name (bound earlier in the batch, or recorded)
// is of a plain read forwarded as written.
func (s *Session) plainPortal(name []byte) bool {
	if b, ok := lookupNamed(s.loop.bound, name); ok {
		return b
	}
	p, ok := s.portals[string(name)]
	return ok && p.explain == nil && p.stmt.explicit == nil && s.plainRead(p.stmt.sql)
}

// readPlain reads a frame of the types a plain batch is made of as
// PostgreSQL reads them (pq_getmsgstring ... pq_getmsgend): anything it
// would refuse, or that the frontend's own decoder refuses, is not plain
// and goes to the session's goroutine, which answers it. A Query's text
// comes back in name, a Parse's in stmt.
func readPlain(frame []byte) (plainMsg, bool) {
	m := plainMsg{typ: frame[0]}
	r := msgReader{b: wire.Body(frame)}
	switch m.typ {
	case 'Q':
		m.name = r.cstring()
	case 'P':
		m.name, m.stmt = r.cstring(), r.cstring()
		r.skip(4 * r.uint16()) // parameter types
	case 'B':
		m.name, m.stmt = r.cstring(), r.cstring()
		r.skip(2 * r.uint16()) // parameter formats
		for range r.uint16() {
			if n := r.int32(); n > 0 {
				r.skip(int(n))
			} else if n < -1 {
				r.bad = true
			}
		}
		r.skip(2 * r.uint16()) // result formats
	case 'D':
		m.objType = r.byte()
		m.name = r.cstring()
	case 'E':
		m.name = r.cstring()
		r.skip(4) // row limit
	case 'S':
	default:
		return m, false
	}
	return m, !r.bad && len(r.b) == 0
}

// readBind reads a Bind frame into m as pgproto3's Decode would, but into
// m's own slices, reused (its values point into frame), and its statement's
// name copied only when it is not m's already: a point read's Bind costs
// no allocation.
func readBind(frame []byte, m *pgproto3.Bind) bool {
	r := msgReader{b: wire.Body(frame)}
	portal, stmt := r.cstring(), r.cstring()
	if string(portal) != m.DestinationPortal {
		m.DestinationPortal = string(portal)
	}
	if string(stmt) != m.PreparedStatement {
		m.PreparedStatement = string(stmt)
	}
	m.ParameterFormatCodes = r.int16s(m.ParameterFormatCodes[:0])
	m.Parameters = m.Parameters[:0]
	for range r.uint16() {
		switch n := r.int32(); {
		case n == -1:
			m.Parameters = append(m.Parameters, nil)
		case n < -1:
			r.bad = true
		case int(n) > len(r.b):
			r.bad, r.b = true, nil
		default:
			v := r.b[:n:n]
			r.b = r.b[n:]
			m.Parameters = append(m.Parameters, v)
		}
	}
	m.ResultFormatCodes = r.int16s(m.ResultFormatCodes[:0])
	return !r.bad && len(r.b) == 0
}

// msgReader reads a message body's fields; reading past its end (or a
// string without its NUL) makes it bad, and every later read empty.
type msgReader struct {
	b   []byte
	bad bool
}

func (r *msgReader) cstring() []byte {
	i := bytes.IndexByte(r.b, 0)
	if i < 0 {
		r.bad, r.b = true, nil
		return nil
	}
	s := r.b[:i]
	r.b = r.b[i+1:]
	return s
}

func (r *msgReader) skip(n int) {
	if n > len(r.b) {
		r.bad, r.b = true, nil
		return
	}
	r.b = r.b[n:]
}

func (r *msgReader) byte() byte {
	if len(r.b) < 1 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *msgReader) uint16() int {
	if len(r.b) < 2 {
		r.bad, r.b = true, nil
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return int(v)
}

// int16s appends to dst a count and that many int16s (a Bind's format
// codes).
func (r *msgReader) int16s(dst []int16) []int16 {
	for range r.uint16() {
		if len(r.b) < 2 {
			r.bad, r.b = true, nil
			return dst
		}
		dst = append(dst, int16(binary.BigEndian.Uint16(r.b)))
		r.b = r.b[2:]
	}
	return dst
}

func (r *msgReader) int32() int32 {
	if len(r.b) < 4 {
		r.bad, r.b = true, nil
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

// admitted records an admitted message as handle does on the way to the
// backend, and has the observer follow it.
func (s *Session) admitted(m *plainMsg) {
	switch m.typ {
	case 'Q':
		s.noteStatementText(m.sql)
		s.observeQuery(m.sql)
		s.forgetStatement("")
		s.forgetPortal("")
	case 'P':
		name := string(m.name)
		s.noteStatementText(m.sql)
		s.observeParse(name, m.sql)
		if st, same := s.plainStmtRecordOf(name, m.sql); !same {
			s.defineStatement(name, st)
		}
	case 'B':
		// The statement's name is looked up, not copied: a driver's names
		// are often longer than a copy that costs no allocation (pgx's
		// stmtcache_ and 40 hex digits).
		st := s.stmts[string(m.stmt)]
		if st != nil {
			// Each run of a set_config changes the settings again.
			s.noteStatementText(st.sql)
		}
		s.obs.BeginBoundBytes(m.stmt, kindUnknown)
		s.definePlainPortal(string(m.name), st)
	case 'D', 'E':
		s.observeStep()
	}
}

// plainStmtRecord is the record of a Parse of the plain read sql under
// name: the one name has now when it is that same record (an extended
// client parses its unnamed statement again for each read), else a new
// one. Records are never changed once made (statements.go), so an equal
// one serves as well as a copy, and a point read's Parse costs no
// allocation.
func (s *Session) plainStmtRecord(name, sql string) *preparedStmt {
	st, _ := s.plainStmtRecordOf(name, sql)
	return st
}

// plainStmtRecordOf is plainStmtRecord, and whether it is name's record
// already (nothing to store: a map look-up costs less than a store, at
// every extended point read).
func (s *Session) plainStmtRecordOf(name, sql string) (st *preparedStmt, same bool) {
	if st := s.stmts[name]; st != nil && *st == (preparedStmt{sql: sql}) {
		return st, true
	}
	return &preparedStmt{sql: sql}, false
}

// definePlainPortal records a Bind of the plain statement st to the
// portal name. Every portal bound from a plain statement has the same
// record, never changed (only a portal of an explicit-timestamp statement
// gets its explain later), so the one of the statement's last Bind is
// reused: the session forgets its portals at each ReadyForQuery outside
// a transaction, and a new record each time would cost a prepared point
// read an allocation.
func (s *Session) definePlainPortal(name string, st *preparedStmt) {
	p := s.loop.lastPortal
	if p == nil || p.stmt != st {
		p = &portal{stmt: st}
		s.loop.lastPortal = p
	}
	if s.portals == nil {
		s.portals = map[string]*portal{}
	}
	s.portals[name] = p
}

// Answer implements evloop.Peer: it follows the backend's answer as
// exchange does for a forwarded request (a guarded read's first answers:
// loopAnswer).
func (s *Session) Answer(typ byte, frame []byte) evloop.Verdict {
	if lr := &s.loopRead; lr.active && len(lr.own) > 0 {
		return s.loopAnswer(typ, frame)
	}
	if s.loopTxn.g != nil {
		return s.loopTxnAnswer(typ, frame)
	}
	return s.plainAnswer(typ, frame)
}

// QuietAnswer implements evloop.Quieter: the answer of the batch Admit
// just admitted goes to plainAnswer (neither a guarded read's own
// statements nor a read-only transaction's pin come first), which relays
// a ParseComplete, BindComplete, RowDescription and the like without
// looking at them: the loop need not call Answer for those (two or three
// calls per extended point read). Nothing plainAnswer does changes which
// of the three follows the rest of the answer.
func (s *Session) QuietAnswer() bool {
	return !(s.loopRead.active && len(s.loopRead.own) > 0) && s.loopTxn.g == nil
}

// plainAnswer follows an answer the client sees.
func (s *Session) plainAnswer(typ byte, frame []byte) evloop.Verdict {
	switch typ {
	case 'Z':
		s.loopFlight.Store(false)
		u := s.loopTxnUnit()
		if u == nil {
			u = &unit{kind: uQuery, relayZ: true}
		}
		s.readyForQuery(u, frame)
		s.loopTxn.active = false
		s.endLoopRead()
		if s.obs.Active() {
			s.obs.End(byte(s.tx))
		}
		// Relay, whatever the block's state: RelayThenBack would end the
		// session (the loop's stop after a FATAL). A transaction the loop
		// cannot follow (failed, written, holds lost) stays in it idle:
		// Admit refuses its next batch, which goes to the goroutine.
		return evloop.Relay
	case 'E':
		s.noteBackendError(frame)
		if ps := &s.loopRead.stmt; s.loopRead.active && ps.named {
			// Not prepared, or gone (a client may close the proxy's
			// statement by the name pg_prepared_statements shows): the
			// next read prepares it again.
			s.be.reads.cache().Remove(ps.key)
			ps.named = false
		}
		fatal, _ := s.backendErrorIsFatal(frame)
		return relayThenBackUnless(!fatal)
	case 'C':
		if u := s.loopTxnUnit(); u != nil {
			// BEGIN's and COMMIT's effect on the tracked settings.
			s.commandComplete(u, frame)
		} else {
			s.noteCommand(frame)
		}
		return evloop.Relay
	case 'S':
		s.be.noteParameter(frame)
		return evloop.Relay
	case 'T', 'I', 'N', '1', '2', '3', 'n', 't', 's':
		return evloop.Relay
	}
	// Anything else (COPY, a notification, a malformed frame) is not an
	// answer of a plain read: the session's goroutine takes over.
	return evloop.RelayThenBack
}

// relayThenBackUnless is Relay when ok, else RelayThenBack.
func relayThenBackUnless(ok bool) evloop.Verdict {
	if ok {
		return evloop.Relay
	}
	return evloop.RelayThenBack
}

// Abandon implements evloop.Peer: the client is gone with a batch at the
// backend. It runs alongside the session's goroutine, which ends the
// session: loopFlight is atomic, the backend's cancel key never changes.
func (s *Session) Abandon() {
	if s.loopFlight.Load() {
		s.cancelBackend()
	}
}

// hasStatementTimeout: statements get a deadline, which the loop does not
// keep (the proxy's own path enforces it).
func (s *Session) hasStatementTimeout() bool {
	s.followConfigTimeout()
	return s.settings.Effective(timeouts.StatementTimeout) != 0
}
