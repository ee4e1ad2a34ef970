package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

// A one-shot timestamped read sent as the unnamed statement's Parse in
// the event loop (issue 15). A driver's query with parameters (pgx's
// exec and cache_describe modes, psycopg, node-postgres, JDBC's first
// runs, pgbench -M extended) sends Parse, Bind, a Describe of the portal
// or none, Execute and Sync in one batch. Served by the session's
// goroutine, a timestamped read so sent cost two round trips (the
// rewritten Parse answered before the Bind chose its timestamp, then the
// guard and the Bind) and the goroutine's parks. admitParsedRead does on
// the loop's goroutine what handleParse and bindExplicit do, when all of
// it is known in memory: the read planned with the catalog seen last
// (the plan cache's, no parse when the text was planned before), its
// rewrite (explicitRecord: the timestamp as one more parameter), the
// timestamp and hold (loopChoice), AS OF $n read from the Bind when its
// value is a number. The loop sends the read guard first (it pins a read
// of the present, and checks the catalog's revision and the search_path
// the read was planned with), then the rewritten Parse, the client's Bind
// with the timestamp parameter appended, and the client's other messages
// as they are. Answer drops the guard's answers; the client's first one
// is its ParseComplete. A Describe of the portal describes the rewrite's
// result, as the goroutine's does: the client's parameters are not
// described.
//
// The rewrite is parsed once per backend connection (issue 15). Sent as
// the unnamed statement's Parse at each read, PostgreSQL parsed, analysed
// and planned it each time, where a simple or prepared read binds a
// statement prepared once. From a text's second use on a connection
// (readStatements: the LRU the simple reads' statements share, keyed by
// the rewrite, its parameter types, the catalog revision and the
// search_path the read was planned with, as the guard checks them;
// emptied by DISCARD ALL and DEALLOCATE, gone with the connection), the
// loop closes then parses a statement of the proxy's (mzproxy_read_N)
// with the rewrite, in place of the unnamed statement, and binds it; from
// the third use on it only binds it, behind a Parse of the unnamed
// statement as the empty query, whose ParseComplete is the client's
// (PostgreSQL parses nothing for it). The client's Bind, Describe,
// Execute and Sync are as they were: its portal is the unnamed portal,
// described as before (the same rewrite). What differs is the backend's
// unnamed statement, which is not the client's: the record of it says so
// (preparedStmt.unnamed), and a later Bind or Describe of the unnamed
// statement that the client does not parse first goes to the session's
// goroutine, which parses it again with the rewrite first
// (reparseUnnamed). An error answered to the read forgets its statement
// (not prepared, or closed by a client that read its name from
// pg_prepared_statements), prepared again at the text's next uses.
//
// Plans: the unnamed statement got a custom plan at each Bind (its
// parameters' values known); a named statement gets custom plans for its
// first five runs and then PostgreSQL's generic plan when that costs no
// more than their average, as the simple and prepared paths' statements
// do (plan_cache_mode is the client's setting, left as it is).
//
// The guard is in front of the Parse, so a refusal (or any error of the
// guard: a cancel) leaves the backend skipping all of the client's batch
// to its Sync, nothing of it run. Anything unexpected before the client's
// first answer gives the batch back (evloop.Back), and the session's
// goroutine takes it over at its Parse (resumeLoopParse): it reads the
// guard's answers; after a refusal it drops the skipped batch's answers
// and serves the batch as if the loop had never had it (planned again,
// with the current catalog); after another error the batch fails with it;
// when the guard answered, the goroutine follows the batch as sent.
//
// Not admitted, and served by the goroutine as before: a Parse and
// Describe of the statement (its ParameterDescription would show the
// proxy's parameter, which only the goroutine strips), a named
// statement, a batch of any other shape, a read whose check or AS OF
// value needs the backend (a type declared for AS OF $n that must be
// looked up, its value as text that is no number), and everything
// admitGuarded leaves out (a timestamp or hold that takes a round trip,
// temporary relations, a statement timeout: LoopBackend).

// parsedRead is the last read admitParsedRead made a record for: the
// same text, parameter types, plan and search_path make the same record,
// rewrite and parameter types, reused (records are never changed).
type parsedRead struct {
	plan *planner.Statement // as the planner returned it
	rec  *preparedStmt
	sql  string
	oids []uint32
	// types are oids encoded for a readStatementKey; marked is rec marked
	// as bound in a statement of the proxy's (preparedStmt.unnamed).
	types  string
	marked *preparedStmt
}

// parsedStmt is the statement of the proxy's that a parsed read bound in
// place of the client's unnamed statement, when named is set: prepared
// in the same batch when made; closing are the statements evicted before
// it, closed in that batch too.
type parsedStmt struct {
	key     readStatementKey
	named   bool
	made    bool
	closing []string
}

// admitParsedRead admits a batch that parses the unnamed statement as a
// timestamped read and runs it (see above), and returns what the loop
// sends for it.
func (s *Session) admitParsedRead(batch []byte) ([]byte, bool) {
	n := 1 + int(binary.BigEndian.Uint32(batch[1:]))
	if batch[0] != 'P' || n+5 > len(batch) || batch[n] != 'B' {
		return nil, false
	}
	parse, ok := readPlain(batch[:n])
	if !ok || len(parse.name) > 0 {
		return nil, false
	}
	bn := n + 1 + int(binary.BigEndian.Uint32(batch[n+1:]))
	m := &s.loop.bind
	if bn > len(batch) || !readBind(batch[n:bn], m) || m.PreparedStatement != "" {
		return nil, false
	}
	rest := batch[bn:]
	behind, ok := portalSteps(rest, m.DestinationPortal)
	if !ok {
		return nil, false
	}
	sql, plain := s.plainText(parse.stmt)
	// (In history mode a plain read is rewritten too: planExplicit.)
	if plain && !s.proxy.cfg.HistoryReads || s.isolation != strictSerializable || s.known.searchPath == nil || s.db.seen.Load() == nil ||
		s.tempSeen { // planning asks for its temporary relations (temps.go)
		return nil, false
	}
	s.loop.declared = parseParamTypes(batch[:n], s.loop.declared[:0])
	declared := s.loop.declared
	// As handleParse begins (again there if this is not admitted).
	s.noteStatementText(sql)
	// Planned with the catalog seen last, as a Query is (explicitSnapshot).
	ctx := context.Background() // nothing below waits
	clientBatch := s.be.clientBatch
	s.be.clientBatch = false
	st, fr, err := s.planExplicit(ctx, sql, true)
	s.be.clientBatch = clientBatch
	seen := s.seenPlan
	s.seenPlan = seenPlan{}
	if err != nil || st == nil || !seen.ok || st.Kind != planner.KindRead || answeredByProxy(st) ||
		st.Var != nil || hasEffect(st) || tooManyParams(st, declared) {
		return nil, false
	}
	if _, known := asOfTypeKnown(st, declared); !known {
		return nil, false
	}
	pr := &s.loop.parsedRead
	if pr.plan != st || pr.rec.sql != sql || pr.rec.parsed.path != s.known.searchPathShown ||
		!slices.Equal(pr.rec.parsed.declared, declared) {
		rec, rewrite, oids := s.explicitRecord(sql, slices.Clone(declared), st)
		marked := *rec
		marked.unnamed = &unnamedRead{rec: rec, sql: rewrite, oids: oids}
		*pr = parsedRead{plan: st, rec: rec, sql: rewrite, oids: oids, types: oidsKey(oids), marked: &marked}
	}
	rec := pr.rec
	if rec.tsParam && bindCountsError(m, rec.params) != nil {
		// The goroutine's error.
		return nil, false
	}
	st, params, ok := asOfValueNow(rec.explicit, m)
	if !ok {
		return nil, false
	}
	c, hold, ok := s.loopChoice(st, fr)
	if !ok {
		return nil, false
	}
	g := guardedSend{c: c, hold: hold, guard: guardKey{rev: seen.revision, path: s.known.searchPathShown, pin: st.AsOf == nil}}
	r := &s.be.reads
	// The proxy's statement of a read of the present has the holes of one
	// (present_read.go); the client's unnamed statement, parsed at the
	// text's first use, is the rewrite.
	text, types, oids := pr.sql, pr.types, pr.oids
	present := g.guard.pin && rec.tsParam
	if present {
		pt := s.presentTextOf(rec, st)
		text, types, oids = pt.text, pt.types, rec.parsed.declared
	}
	ps := parsedStmt{key: readStatementKey{text: text, types: types, rev: g.guard.rev, path: g.guard.path}}
	name, made, named := r.statementFor(ps.key)
	ps.named, ps.made = named, made
	closes := s.loop.closes[:0]
	recorded := rec
	switch {
	case !named:
		// The text's first use on this connection.
		s.loop.parse = pgproto3.Parse{Query: pr.sql, ParameterOIDs: pr.oids}
	case made:
		// Closed first, as boundReadOf closes it.
		ps.closing, r.closing = r.closing, nil
		closes = append(append(closes, ps.closing...), name)
		s.loop.parse = pgproto3.Parse{Name: name, Query: text, ParameterOIDs: oids}
		recorded = pr.marked
	default:
		ps.closing, r.closing = r.closing, nil
		closes = append(closes, ps.closing...)
		// The client's ParseComplete, for an empty statement.
		s.loop.parse = pgproto3.Parse{}
		recorded = pr.marked
	}
	s.loop.closes = closes
	bound := ""
	if named {
		bound = name
	}
	guardLen, ok := s.encodeGuardedBind(ctx, &g, rec, st, closes, &s.loop.parse, false, present && named, bound, m, params, rest)
	if !ok {
		r.undo(&ps)
		return nil, false
	}
	lr := &s.loopRead
	// As handle records the batch's messages (handleParse, handleBind,
	// handleDescribe, handleExecute).
	s.forgetStatement("")
	s.observeParse("", sql)
	s.defineStatement("", recorded)
	for off := n; off < len(batch); {
		fn := 1 + int(binary.BigEndian.Uint32(batch[off+1:]))
		m, _ := readPlain(batch[off : off+fn])
		s.admitted(&m)
		off += fn
	}
	*lr = loopRead{active: true, g: g, parsed: true, presentParse: present, rec: recorded, stmt: ps, behind: behind,
		own: ownAnswers(lr.own[:0], lr.send.b[:guardLen]), send: lr.send, ts: lr.ts}
	return lr.send.b, true
}

// oidsKey encodes parameter types for a readStatementKey.
func oidsKey(oids []uint32) string {
	b := make([]byte, 0, 4*len(oids))
	for _, o := range oids {
		b = binary.BigEndian.AppendUint32(b, o)
	}
	return string(b)
}

// parseParamTypes appends to dst the parameter types a Parse frame
// declares (readPlain read it whole).
func parseParamTypes(frame []byte, dst []uint32) []uint32 {
	r := msgReader{b: wire.Body(frame)}
	r.cstring()
	r.cstring()
	for range r.uint16() {
		dst = append(dst, uint32(r.int32()))
	}
	return dst
}

// asOfValueNow is bindAsOfParam without a round trip: false when the
// value of AS OF $n is missing, wrong (the goroutine's error), or text
// that is no number (the backend reads it).
func asOfValueNow(st *planner.Statement, m *pgproto3.Bind) (*planner.Statement, [][]byte, bool) {
	a := st.AsOf
	if a == nil || a.Param == 0 {
		return st, m.Parameters, true
	}
	if a.Param > len(m.Parameters) {
		return nil, nil, false
	}
	i := a.Param - 1
	ms, text, err := asOfParamMillis(a.Param, m.Parameters[i], paramFormat(m.ParameterFormatCodes, i), a.ParamType)
	if err != nil {
		return nil, nil, false
	}
	if text != "" {
		var ok bool
		if ms, ok, err = millisOfNumber(text); !ok || err != nil {
			return nil, nil, false
		}
	}
	st, params := withAsOfValue(st, m.Parameters, ms)
	return st, params, true
}

// resumeLoopParse takes over, at its Parse m, the read the loop gave back
// (see above). The guard's answers come first: the client's messages,
// all at the backend with their Sync, are answered without more sent.
func (s *Session) resumeLoopParse(ctx context.Context, m *pgproto3.Parse, frame []byte) error {
	lr := &s.loopRead
	g, rec, behind, ps, gone := lr.g, lr.rec, lr.behind, lr.stmt, lr.gone
	lr.active, lr.resume, lr.parsed, lr.rec, lr.stmt = false, false, false, nil, parsedStmt{}
	lr.heldParse, lr.gone, lr.presentParse = false, false, false
	// The backend runs the batch the loop sent until its ReadyForQuery:
	// loopFlight stays set (handleStatement clears it at the end of the
	// statement), so that a Cancel between the messages this goroutine
	// takes over, when no message's context is there to end, still
	// reaches the backend (session 21's third lost-cancel window).
	clientBatch := s.be.clientBatch
	s.be.clientBatch = true // the backend skips to the client's Sync after an error
	value, err := s.be.readGuard()
	s.be.clientBatch = clientBatch
	if err == nil && gone {
		// The Bind of the proxy's statement failed with 26000 behind the
		// client's ParseComplete, which the loop held, or the Parse of
		// the proxy's statement of a read of the present failed in the
		// client's Parse's place (loopAnswer): nothing of the
		// answer reached the client, nothing of the read ran. The
		// statement is forgotten (prepared again at the text's next
		// uses), the answers up to the batch's ReadyForQuery dropped, and
		// the batch served as if the loop had never had it, once: the
		// goroutine binds no statement of the proxy's.
		s.release(g.hold)
		s.be.reads.cache().Remove(ps.key)
		if err := s.dropQueryAnswers(); err != nil {
			return err
		}
		return s.handleParse(ctx, m, frame)
	}
	if err == nil {
		if g.guard.pin {
			if err := g.c.pinnedBy(s.be.pinValue(value)); err != nil {
				// The read is bound already, at a timestamp the proxy
				// cannot tell: nothing may relay its answers.
				s.release(g.hold)
				pe := pgerr.As(err)
				return pgerr.Fatal(pe.Code, "%s", pe.Message)
			}
		}
		s.obs.Timestamp(g.c.ts)
		// The backend runs the rest as sent: this Parse's answer comes
		// next, then the Bind's (handleBind: takeParsedBind) and those of
		// the client's messages behind it, which are not sent again.
		s.defineStatement(m.Name, rec)
		for range ps.closing {
			s.units.push(unit{kind: uClose, disp: swallow})
		}
		u := unit{kind: uParse}
		if ps.made {
			s.units.push(unit{kind: uClose, disp: swallow})
			u.failed = s.be.reads.forget(ps.key)
		}
		s.units.push(u)
		s.portalHolds = append(s.portalHolds, g.hold)
		lr.parsedBind, lr.sent = true, behind
		return nil
	}
	s.release(g.hold)
	// The backend skipped the batch: no statement was closed or prepared.
	s.be.reads.undo(&ps)
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.IsFatal() {
		return err
	}
	// The backend skipped the client's batch, its Sync answered.
	if err := s.dropQueryAnswers(); err != nil {
		return err
	}
	if !isStale(err) {
		// The batch fails with the guard's error, as with an error of its
		// Parse: the frontend skips to the client's Sync, whose answer is
		// the backend's to an idle session.
		return pe
	}
	// Refused: the catalog changed since it was seen. Served as if the
	// loop had never had it.
	return s.handleParse(ctx, m, frame)
}

// takeParsedBind takes over the Bind m of a read the loop gave back whose
// guard answered (resumeLoopParse): recorded, not sent again.
func (s *Session) takeParsedBind(m *pgproto3.Bind) error {
	s.loopRead.parsedBind = false
	s.definePortal(m.DestinationPortal, m.PreparedStatement)
	s.units.push(unit{kind: uBind})
	return nil
}
