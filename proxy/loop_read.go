package proxy

import (
	"context"
	"encoding/binary"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend"
	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/storage"
	"github.com/mzproxy/mzproxy/timeouts"
)

// A guarded read in the event loop (issue 15). A simple Query that is a
// timestamped read (mz_now(), AS OF) goes out guarded in one round trip
// (seen_read.go); served by the session's goroutine, it cost two goroutine
// parks per read, most of its proxy CPU (docs/read-cost.md). When
// everything it needs is known in memory, Admit does on the loop's
// goroutine what guardedQuery does before it sends: the plan with the
// catalog seen last, the timestamp (AS OF a number; the guard pins a read
// of the present), the hold (one the lease grants without a round trip),
// the guard and the read (its text, or the Bind of the connection's
// prepared statement for it: read_statements.go), encoded into the batch
// the loop sends instead of the client's Query. Answer then drops the
// answers to the proxy's own messages, reads the guard's value from them,
// and relays the rest; the hold is released at the ReadyForQuery.
//
// Anything else the backend answers before the read's first relayed frame
// (the guard's refusal or error, a notice, an error of the read's own
// Parse or Bind) makes Answer give the session back to its goroutine
// (evloop.Back) before anything is relayed: the answer read so far goes
// back to the backend's reader (Unread), the client's Query to the
// connection, and handleQuery reads the answers with guardedAnswers, as
// guardedQuery would have, and plans again when the guard refused.
//
// Whatever would take a round trip or a wait (no catalog seen yet, the
// search_path not known, a hold below the floor that no published hold
// covers, AS OF an expression or a time at or past the upper) is not
// admitted: the session's goroutine serves it, as before.
//
// A client-prepared timestamped read (the Bind to Sync of a named
// statement whose Parse the proxy rewrote) is served alike: see
// admitBoundRead and resumeLoopBind; so is one sent as the unnamed
// statement's Parse in front of its Bind (loop_parse.go).

// loopRead is the guarded read the loop has at the backend, from Admit
// to its ReadyForQuery or to the session's goroutine taking it over.
type loopRead struct {
	active bool
	// resume: Answer gave the read back (evloop.Back); handleQuery reads
	// its answers (handleBind, for a prepared read: resumeLoopBind).
	resume bool
	g      guardedSend
	sql    string // the client's text, to plan again after a refusal
	// behind: a prepared read's, the number of the client's messages
	// behind its Bind (sent with it); sent: how many of them, once the
	// session's goroutine took the read over, forward is still to see
	// without sending them again (a read-only transaction's first read
	// too: resumeLoopTxnBind).
	behind, sent int
	// parsed: the read came as the unnamed statement's Parse, rec its
	// record (loop_parse.go); given back, the session's goroutine takes
	// it over at that Parse, and, when its guard answered, at its Bind
	// (parsedBind).
	parsed, parsedBind bool
	rec                *preparedStmt
	// stmt is the statement of the proxy's a parsed read bound
	// (loop_parse.go).
	stmt parsedStmt
	// heldParse: the client's ParseComplete of a parsed read that binds
	// the proxy's statement without preparing it is held (evloop.Hold)
	// until the Bind's answer; gone: that answer was the statement's
	// 26000 (a function of the client's dropped it, unseen), and the
	// session's goroutine serves the read again (resumeLoopParse).
	heldParse, gone bool
	// present: a prepared read of the present binds stmt, the proxy's
	// statement of the client's (presentStmt), not the client's own;
	// gone: as for a parsed read, its Bind answered 26000, and the
	// session's goroutine serves the batch again (resumePresentBind).
	// presentParse: a parsed read's stmt is the proxy's statement of a
	// read of the present (admitParsedRead).
	present, presentParse bool
	ts                    []byte // an AS OF read's timestamp parameter, reused
	// own are the types of the answers to the proxy's own messages, in
	// the order they come (ownAnswers), got how many of them came.
	own    []byte
	got    int
	value  string // the guard's
	gotRow bool
	send   byteSink // the batch the loop sends, reused
}

// byteSink collects what a wire.Writer flushes into it.
type byteSink struct{ b []byte }

func (w *byteSink) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// admitGuarded admits the Query sql as a guarded read when all it needs
// is known now (see above), and returns the bytes the loop sends for it.
func (s *Session) admitGuarded(sql string) ([]byte, bool) {
	// As handleQuery begins (both again there if this is not admitted: a
	// second time changes nothing).
	s.observeQuery(sql)
	s.noteStatementText(sql)
	if s.isolation != strictSerializable || s.known.searchPath == nil || s.db.seen.Load() == nil ||
		s.tempSeen { // planning asks for its temporary relations (temps.go)
		return nil, false
	}
	// As handle does for a Query: explicitSnapshot reads it.
	s.be.clientBatch = false
	ctx := context.Background() // nothing below waits
	st, fr, err := s.planExplicit(ctx, sql, true)
	seen := s.seenPlan
	s.seenPlan = seenPlan{}
	if err != nil || st == nil || !seen.ok || st.Kind != planner.KindRead || st.ExplainTimestamp != nil ||
		st.Var != nil || hasEffect(st) {
		return nil, false
	}
	c, hold, ok := s.loopChoice(st, fr)
	if !ok {
		return nil, false
	}
	s.forgetStatement("")
	s.forgetPortal("")
	g, msgs := s.guardedRead(ctx, st, c, hold, seen.revision)
	lr := &s.loopRead
	if !s.encodeLoopRead(&g, func() error { return s.sendGuarded(g.guard, msgs) }) {
		return nil, false
	}
	*lr = loopRead{active: true, g: g, sql: sql, own: ownAnswers(lr.own[:0], lr.send.b), send: lr.send, ts: lr.ts}
	return lr.send.b, true
}

// encodeLoopRead has send write the guarded read g into the batch the
// loop sends (loopRead.send), and reports whether it could; if not (only
// encoding can fail), nothing was sent, and g is undone as a skipped
// guard and read are.
func (s *Session) encodeLoopRead(g *guardedSend, send func() error) bool {
	lr := &s.loopRead
	lr.send.b = lr.send.b[:0]
	s.be.w.Reset(&lr.send)
	err := send()
	if err == nil {
		err = s.be.w.Flush()
	}
	s.be.w.Reset(s.be.nc)
	if err != nil {
		s.be.guards[s.be.guardUsed].ok = false
		if g.br != nil {
			s.be.reads.skipped(g.br)
		}
		s.release(g.hold)
		return false
	}
	return true
}

// encodeGuardedBind encodes for the loop what guardedBind sends for rec's
// read st: the guard of g, a Close of each of the statements closes, then
// parse when the batch defines the statement (nil for a prepared one),
// the client's Bind m of the statement stmt with params and the timestamp
// parameter, and the client's messages rest behind it. It returns the
// length of the proxy's own part (the guard's and the Closes', and parse
// when ownParse: the proxy's statement, presentStmt), whose answers the
// loop drops, and false when nothing could be encoded (encodeLoopRead).
// When present is set, stmt is the proxy's statement of a read of the
// present (presentStmt), whose holes read the guard's setting: bound
// without the timestamp parameter.
func (s *Session) encodeGuardedBind(ctx context.Context, g *guardedSend, rec *preparedStmt, st *planner.Statement,
	closes []string, parse *pgproto3.Parse, ownParse, present bool, stmt string, m *pgproto3.Bind, params [][]byte, rest []byte) (int, bool) {
	s.timestampPhase(ctx, g.guard.pin)
	lr := &s.loopRead
	var ts []byte
	if !g.guard.pin {
		ts = strconv.AppendUint(lr.ts[:0], g.c.ts, 10)
		lr.ts = ts
	}
	p := &s.loop.boundPortal
	*p = portal{stmt: rec}
	ownLen := 0
	ok := s.encodeLoopRead(g, func() error {
		if err := s.be.sendGuard(g.guard, &s.pinMsgs); err != nil {
			return err
		}
		for _, name := range closes {
			if err := s.be.w.Send(&pgproto3.Close{ObjectType: 'S', Name: name}); err != nil {
				return err
			}
		}
		if parse != nil && ownParse {
			if err := s.be.w.Send(parse); err != nil {
				return err
			}
		}
		if err := s.be.w.Flush(); err != nil {
			return err
		}
		ownLen = len(lr.send.b)
		if parse != nil && !ownParse {
			if err := s.be.w.Send(parse); err != nil {
				return err
			}
		}
		if present {
			bind := &s.explicitBind
			*bind = *m
			bind.PreparedStatement = stmt
			if err := s.be.w.Send(bind); err != nil {
				return err
			}
			return s.be.w.WriteFrame(rest)
		}
		client := m.PreparedStatement
		m.PreparedStatement = stmt
		err := s.forwardExplicitBind(m, p, st, params, ts, false)
		m.PreparedStatement = client
		if err != nil {
			return err
		}
		return s.be.w.WriteFrame(rest)
	})
	return ownLen, ok
}

// admitBoundRead admits a client's batch that binds a prepared timestamped
// read and runs it (Bind, a Describe of its portal or none, Execute, Sync:
// what drivers send for a prepared statement they have described) as
// bindExplicit would send it behind the read guard (guardedBind), when
// nothing of that needs a round trip or a wait: the statement planned
// under the search_path the session has now (followSearchPath would do
// nothing), its inputs defined as they were, the timestamp left to the
// guard or AS OF a number, the hold one the lease grants at once. The
// loop sends the guard, the client's Bind with the timestamp parameter
// appended (forwardExplicitBind), then the client's other messages as
// they are; Answer drops the guard's answers, and anything unexpected
// among them gives the batch back to the session's goroutine, which takes
// it over at its Bind (resumeLoopBind).
func (s *Session) admitBoundRead(batch []byte) ([]byte, bool) {
	m := &s.loop.bind
	n := 1 + int(binary.BigEndian.Uint32(batch[1:]))
	if batch[0] != 'B' || !readBind(batch[:n], m) {
		return nil, false
	}
	rest := batch[n:]
	behind, ok := portalSteps(rest, m.DestinationPortal)
	rec := s.stmts[m.PreparedStatement]
	if !ok || rec == nil || rec.explicit == nil || rec.unnamed != nil {
		// (The backend's unnamed statement is parsed again first:
		// reparseUnnamed.)
		return nil, false
	}
	// As handleBind begins (txnBind; both again there if this is not
	// admitted: a second time changes nothing).
	s.noteStatementText(rec.sql)
	s.observeBind(m.PreparedStatement)
	st, seen := rec.explicit, s.db.seen.Load()
	switch {
	case seen == nil, s.isolation != strictSerializable, rec.parsed == nil, answeredByProxy(st):
		return nil, false
	case s.known.searchPath == nil, rec.parsed.path != s.known.searchPathShown:
		// followSearchPath's to ask, or to plan again.
		return nil, false
	case st.Kind != planner.KindRead, st.AsOf != nil && st.AsOf.Param > 0, !stillDefined(st, seen.catalog):
		return nil, false
	case rec.tsParam && bindCountsError(m, rec.params) != nil:
		return nil, false
	}
	c, hold, ok := s.loopChoice(st, seen.frontiers)
	if !ok {
		return nil, false
	}
	g := guardedSend{c: c, hold: hold, guard: guardKey{rev: seen.catalog.cat.Revision, pin: st.AsOf == nil}}
	ps, closes, stmt, parse := s.presentStmt(rec, st, g.guard, m.PreparedStatement)
	ownLen, ok := s.encodeGuardedBind(context.Background(), &g, rec, st, closes, parse, ps.named, ps.named, stmt, m, m.Parameters, rest)
	if !ok {
		s.be.reads.undo(&ps)
		return nil, false
	}
	lr := &s.loopRead
	*lr = loopRead{active: true, g: g, behind: behind, own: ownAnswers(lr.own[:0], lr.send.b[:ownLen]),
		send: lr.send, ts: lr.ts, present: ps.named, stmt: ps}
	return lr.send.b, true
}

// portalSteps reads the client's messages behind a prepared read's Bind
// of portal: a Describe of it or none, its Execute, and the Sync (the
// batch's end: judgeBatch made sure), and reports how many there are.
func portalSteps(rest []byte, portal string) (int, bool) {
	var seq [3]byte
	steps := 0
	for off := 0; off < len(rest); steps++ {
		if steps == len(seq) {
			return 0, false
		}
		n := 1 + int(binary.BigEndian.Uint32(rest[off+1:]))
		m, ok := readPlain(rest[off : off+n])
		off += n
		if !ok || m.typ == 'D' && m.objType != 'P' || (m.typ == 'D' || m.typ == 'E') && string(m.name) != portal {
			return 0, false
		}
		seq[steps] = m.typ
	}
	switch string(seq[:steps]) {
	case "DES", "ES":
		return steps, true
	}
	return 0, false
}

// resumeLoopBind takes over, at its Bind m, the prepared read the loop
// gave back (Verdict Back): the session is left as guardedBind leaves it
// once it sent the guard and the Bind (the hold, the Bind's unit, the
// pending read guard), and the client's messages behind the Bind, which
// the loop sent too, go through their handlers as if they were sent now
// (forward does not send them again): at the Sync, settleReadGuard reads
// the guard's answers, given back (Unread), and follows a refusal or an
// error as it would have.
func (s *Session) resumeLoopBind(m *pgproto3.Bind) error {
	lr := &s.loopRead
	g := lr.g
	lr.active, lr.resume, lr.sent = false, false, lr.behind
	// The backend runs the batch the loop sent until its ReadyForQuery:
	// loopFlight stays set (handleStatement clears it at the end of the
	// statement), so that a Cancel between the messages this goroutine
	// takes over, when no message's context is there to end, still
	// reaches the backend (session 21's third lost-cancel window).
	p := s.definePortal(m.DestinationPortal, m.PreparedStatement)
	s.portalHolds = append(s.portalHolds, g.hold)
	s.units.push(unit{kind: uBind})
	s.be.pend(g.guard.pin, g.c, m, p, p.stmt.explicit, m.Parameters)
	return nil
}

// loopChoice is guardedChoice in memory: false when choosing or holding
// would take a round trip or a wait.
func (s *Session) loopChoice(st *planner.Statement, fr *storage.FrontierState) (*choice, heldRead, bool) {
	if st.AsOf == nil {
		// Held at the lease's floor, as guardedChoice holds it.
		l := s.lease
		if l == nil || l.Err() != nil {
			return nil, heldRead{}, false
		}
		h, ok := s.holdReadNow(&choice{ts: l.Floor(), inputs: st.Inputs})
		return &choice{inputs: st.Inputs}, h, ok
	}
	if st.AsOf.Now != nil {
		return nil, heldRead{}, false
	}
	if _, ok, err := millisOfNumber(st.AsOf.Expr); !ok || err != nil {
		return nil, heldRead{}, false
	}
	// A number: chosen without a round trip.
	c, err := s.chooseTimestamp(context.Background(), st, fr)
	l := s.lease
	if err != nil || l == nil || l.Err() != nil {
		// Its error is the goroutine's.
		return nil, heldRead{}, false
	}
	// The lease's floor is a read timestamp the oracle handed out, so the
	// upper is past it: a time at or below the floor needs no wait, even
	// when the upper last seen was older.
	c.upper = max(c.upper, l.Floor()+1)
	if c.upper <= c.ts {
		// The wait for the upper is the goroutine's.
		return nil, heldRead{}, false
	}
	h, ok := s.holdReadNow(c)
	return c, h, ok
}

// ownAnswers appends to own the types of the backend's answers to the
// proxy's messages at the start of send, up to the read's Describe, the
// first whose answer the client sees: CloseComplete, ParseComplete,
// BindComplete, and the guard's row and CommandComplete.
func ownAnswers(own, send []byte) []byte {
	for off := 0; off+5 <= len(send); off += 1 + int(binary.BigEndian.Uint32(send[off+1:])) {
		switch send[off] {
		case 'C':
			own = append(own, '3')
		case 'P':
			own = append(own, '1')
		case 'B':
			own = append(own, '2')
		case 'E':
			own = append(own, 'D', 'C')
		default:
			return own
		}
	}
	return own
}

// loopAnswer follows an answer of the guarded read before its first
// relayed frame: the proxy's own are dropped, and anything unexpected
// gives the read back to the session's goroutine.
func (s *Session) loopAnswer(typ byte, frame []byte) evloop.Verdict {
	lr := &s.loopRead
	if lr.got < len(lr.own) {
		if typ != lr.own[lr.got] {
			lr.resume = true
			return evloop.Back
		}
		lr.got++
		if typ == 'D' {
			firstValue(frame, &lr.value, &lr.gotRow)
		}
		return evloop.Drop
	}
	if ps := &lr.stmt; lr.parsed && ps.named && !ps.made {
		// Bound, not prepared here: the client's ParseComplete (of the
		// empty statement) waits for the Bind's answer, which shows
		// whether the statement was still there.
		if !lr.heldParse && typ == '1' {
			lr.heldParse = true
			return evloop.Hold
		}
		if lr.heldParse && typ == 'E' && readStatementGone(wire.Body(frame)) {
			lr.resume, lr.gone = true, true
			return evloop.Back
		}
	}
	if ps := &lr.stmt; lr.parsed && lr.presentParse && ps.made && typ == 'E' && errorCode(wire.Body(frame)) != string(pgerr.QueryCanceled) {
		// The Parse of the proxy's statement of a read of the present, in
		// the client's Parse's place, failed (a relation that does not
		// exist): its error would point into a text other than the
		// client's rewrite. Nothing ran: the session's goroutine serves
		// the batch again, as resumeLoopParse does a statement gone.
		lr.resume, lr.gone = true, true
		return evloop.Back
	}
	if lr.present && typ == 'E' && readStatementGone(wire.Body(frame)) {
		// The proxy's statement was gone (a function of the client's
		// dropped it, unseen): nothing of the read ran.
		lr.resume, lr.gone = true, true
		return evloop.Back
	}
	g := &lr.g
	if g.guard.pin {
		if err := g.c.pinnedBy(s.be.pinValue(lr.value)); err != nil {
			lr.resume = true
			return evloop.Back
		}
	}
	lr.own = lr.own[:0]
	lr.got = 0
	s.obs.Timestamp(g.c.ts)
	s.enter(timeouts.PhaseExecute)
	return s.plainAnswer(typ, frame)
}

// endLoopRead releases the guarded read's hold once it is answered.
func (s *Session) endLoopRead() {
	if lr := &s.loopRead; lr.active && !lr.resume {
		lr.active = false
		s.release(lr.g.hold)
	}
}

// Unread implements evloop.Peer: the guarded read's answers so far, given
// back, are read first from the backend's connection.
func (s *Session) Unread(answer []byte) {
	s.be.unread.rest = append(s.be.unread.rest[:0], answer...)
	s.be.unread.src = s.be.nc
	s.be.r.Reset(&s.be.unread)
}

// resumeLoopRead serves the guarded read the loop gave back: its answers
// are read as guardedQuery reads them, and a refused read is planned
// again.
func (s *Session) resumeLoopRead(ctx context.Context) error {
	lr := &s.loopRead
	g, sql := lr.g, lr.sql
	lr.active, lr.resume = false, false
	// The backend runs the batch the loop sent until its ReadyForQuery:
	// loopFlight stays set (handleStatement clears it at the end of the
	// statement), so that a Cancel between the messages this goroutine
	// takes over, when no message's context is there to end, still
	// reaches the backend (session 21's third lost-cancel window).
	stale, err := s.guardedAnswers(ctx, &g, nil)
	if !stale {
		return err
	}
	st, fr, err := s.planAgain(ctx, sql)
	if err != nil {
		return err
	}
	return s.explicitQuery(ctx, st, fr)
}

// unreadReader reads the backend's answer the loop gave back, then the
// socket.
type unreadReader struct {
	rest []byte
	src  io.Reader
}

func (u *unreadReader) Read(b []byte) (int, error) {
	if len(u.rest) == 0 {
		return u.src.Read(b)
	}
	n := copy(b, u.rest)
	u.rest = u.rest[n:]
	return n, nil
}

// The session is a session the event loop can drive.
var _ frontend.LoopSession = (*Session)(nil)
