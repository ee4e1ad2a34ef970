package proxy

import (
	"context"
	"encoding/binary"
	"io"

	"github.com/mzproxy/mzproxy/frontend"
	"github.com/mzproxy/mzproxy/frontend/evloop"
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

// loopRead is the guarded read the loop has at the backend, from Admit
// to its ReadyForQuery or to the session's goroutine taking it over.
type loopRead struct {
	active bool
	// resume: Answer gave the read back (evloop.Back); handleQuery reads
	// its answers.
	resume bool
	g      guardedSend
	sql    string // the client's text, to plan again after a refusal
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
	if s.isolation != strictSerializable || s.known.searchPath == nil || s.db.seen.Load() == nil {
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
	lr.send.b = lr.send.b[:0]
	s.be.w.Reset(&lr.send)
	err = s.sendGuarded(g.guard, msgs) // into lr.send: only encoding can fail
	s.be.w.Reset(s.be.nc)
	if err != nil {
		// Nothing was sent: undone as a skipped guard and read are.
		s.be.guards[s.be.guardUsed].ok = false
		if g.br != nil {
			s.be.reads.skipped(g.br)
		}
		s.release(hold)
		return nil, false
	}
	*lr = loopRead{active: true, g: g, sql: sql, own: ownAnswers(lr.own[:0], lr.send.b), send: lr.send}
	return lr.send.b, true
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
	g := &lr.g
	if g.guard.pin {
		if err := g.c.pinnedBy(lr.value); err != nil {
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
	// A cancel from now on is the statement's (handleStatement): the
	// loop's is over.
	s.loopFlight.Store(false)
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
