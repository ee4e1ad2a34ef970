package proxy

import (
	"context"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/timeouts"
)

// The explicit-timestamp path over the extended protocol. Parse sends the
// planner's rewrite with the timestamp as one more parameter, $N; each Bind
// chooses a fresh timestamp and appends it as that parameter's value, so a
// prepared statement reads at a new timestamp every time it is bound (and
// PostgreSQL can reuse its plan); Describe of the statement hides the extra
// parameter from the client. A Bind that starts its batch outside a block
// chooses it with the catalog and frontiers seen last, and is sent behind
// the read guard in the same round trip (bound_read.go; a read of the
// present binds $N NULL and reads the timestamp the guard pins, see
// tsParamSQL); any other reads them first (database.snapshot).

// int8OID is PostgreSQL's bigint: the timestamp parameter's type.
const int8OID = 20

// quiesce makes the backend answer everything forwarded so far, so the
// proxy can run queries of its own on the session's connection. It reports
// false when an earlier message failed: the backend then ignores everything
// until Sync, and so should the proxy.
func (s *Session) quiesce(ctx context.Context) (bool, error) {
	if s.units.len() > 0 {
		if err := s.be.w.Send(&pgproto3.Flush{}); err != nil {
			return false, s.lost(err)
		}
		if err := s.exchange(ctx); err != nil {
			return false, err
		}
	}
	return !s.skipping, nil
}

// parseExplicit forwards the Parse of a statement on the explicit-timestamp
// path, rewritten.
func (s *Session) parseExplicit(ctx context.Context, m *pgproto3.Parse, st *planner.Statement) error {
	rec, sql, oids := s.explicitRecord(m.Query, m.ParameterOIDs, st)
	s.defineStatement(m.Name, rec)
	if answeredByProxy(rec.explicit) {
		// Answered by the proxy: the backend never sees it.
		return s.client.Send(&pgproto3.ParseComplete{})
	}
	if err := s.be.w.Send(&pgproto3.Parse{Name: m.Name, Query: sql, ParameterOIDs: oids}); err != nil {
		return s.lost(err)
	}
	s.units.push(unit{kind: uParse})
	return nil
}

// explicitRecord is the record of a client's statement query, with the
// parameter types declared, planned as st on the explicit-timestamp path,
// and the text and parameter types its rewrite is prepared with.
func (s *Session) explicitRecord(query string, declared []uint32, st *planner.Statement) (rec *preparedStmt, sql string, oids []uint32) {
	oids, st = prepareAsOfParam(st, declared, declared)
	rec = &preparedStmt{sql: query, explicit: st, parsed: &explicitParse{path: s.known.searchPathShown, declared: declared}}
	sql = st.SQL
	if st.Template != nil && st.Template.Holes() > 0 {
		// The timestamp comes after the client's parameters, those its
		// Parse declared types for included (beyond the text's highest
		// $n, which Template.Param follows, PostgreSQL counts them too).
		rec.tsParam, rec.params = true, max(len(oids), st.Template.Param()-1)
		sql = tsParamSQL(st.Template, rec.params+1)
		oids = withParamOID(oids, rec.params+1, int8OID)
	}
	return rec, sql, oids
}

// followSearchPath plans the client's statement name again, and prepares
// its rewrite again under the same name, when the session's search_path
// is not the one its names were resolved in: PostgreSQL analyses a
// prepared statement again at its next use after search_path changed (its
// plan cache compares the paths), while the rewrite names the tables its
// Parse found. Like PostgreSQL it fails with 0A000 when that would change
// the result's shape (told here by the columns of the relations read),
// and leaves the statement as it was. p, the portal being bound, is given
// the new record. Called at a Bind, with the backend quiesced, which it
// leaves quiesced (the timestamp's choice may run queries of the proxy's
// own on the connection); ok is false when the backend refused the new
// rewrite (the client has its error, and the batch is skipped).
func (s *Session) followSearchPath(ctx context.Context, name string, p *portal) (ok bool, err error) {
	rec := p.stmt
	if showsIsolation(rec.explicit) {
		return true, nil // names nothing
	}
	if _, err := s.searchPath(ctx); err != nil {
		return false, err
	}
	if rec.parsed.path == s.known.searchPathShown {
		return true, nil
	}
	st, _, err := s.planExplicit(ctx, rec.sql, false)
	if err != nil {
		return false, err
	}
	if st == nil {
		// Whether a read names its time depends on its text alone.
		return false, pgerr.New(pgerr.InternalError, "a statement planned again left the explicit-timestamp path")
	}
	if !sameResultShape(rec.explicit, st) {
		return false, errResultTypeChanged()
	}
	next, sql, oids := s.explicitRecord(rec.sql, rec.parsed.declared, st)
	s.defineStatement(name, next)
	p.stmt = next
	if answeredByProxy(st) {
		return true, nil
	}
	if err := s.internalMsg(&pgproto3.Close{ObjectType: 'S', Name: name}, uClose); err != nil {
		return false, err
	}
	if err := s.be.w.Send(&pgproto3.Parse{Name: name, Query: sql, ParameterOIDs: oids}); err != nil {
		return false, s.lost(err)
	}
	s.units.push(unit{kind: uParse, disp: swallow, failed: func() {
		// PostgreSQL's statement stays and fails at each use (42P01 for
		// a name the new path lacks) until the path serves again; the
		// backend's is closed now: prepared again at the next Bind,
		// whatever the path then (no path is spelled so).
		s.defineStatement(name, &preparedStmt{sql: next.sql, explicit: next.explicit,
			parsed: &explicitParse{path: unpreparedPath, declared: next.parsed.declared}})
	}})
	return s.quiesce(ctx)
}

// unpreparedPath is the search_path of a statement whose rewrite the
// backend refused to prepare again: never SHOW's answer.
const unpreparedPath = "\x00"

// sameResultShape reports whether a statement planned again, now, reads
// managed relations of the same kinds and columns, in the same places, as
// it did when it was planned, then: its result has the same columns. A
// name that resolves to no managed relation then or now is the backend's
// to judge when it prepares the rewrite (42P01 for a name the path
// lacks).
func sameResultShape(then, now *planner.Statement) bool {
	return slices.EqualFunc(then.Reads, now.Reads, func(a, b planner.Ref) bool {
		return !a.Managed() || !b.Managed() ||
			a.Object.Kind == b.Object.Kind && slices.Equal(a.Object.Columns, b.Object.Columns)
	})
}

// errResultTypeChanged is PostgreSQL's refusal to run a prepared statement
// whose result would no longer have the columns it was described with.
func errResultTypeChanged() error {
	return pgerr.New(pgerr.FeatureNotSupported, "cached plan must not change result type")
}

// bindExplicit chooses the timestamp for a Bind of an explicit-timestamp
// statement, holds it until the transaction ends, and forwards the Bind
// with the timestamp appended. p is the portal's new record.
func (s *Session) bindExplicit(ctx context.Context, m *pgproto3.Bind, p *portal) error {
	st := p.stmt.explicit
	ok, err := s.quiesce(ctx)
	if err != nil {
		return err
	}
	if !ok {
		// The backend skips this Bind anyway.
		return s.request(ctx, mustEncode(m), unit{kind: uBind}, false)
	}
	if s.tx != txFailed {
		if ok, err := s.followSearchPath(ctx, m.PreparedStatement, p); err != nil {
			return s.failExtended(ctx, err)
		} else if !ok {
			// Preparing it again failed, the client told why: the
			// backend skips this Bind.
			return s.request(ctx, mustEncode(m), unit{kind: uBind}, false)
		}
		st = p.stmt.explicit
	}
	if answeredByProxy(st) && s.tx == txFailed {
		// The backend would refuse this Bind, as it refuses every
		// statement in a failed transaction.
		return s.failExtended(ctx, pgerr.New(pgerr.InFailedSQLTransaction,
			"current transaction is aborted, commands ignored until end of transaction block"))
	}
	if p.stmt.tsParam {
		if err := bindCountsError(m, p.stmt.params); err != nil {
			return s.failExtended(ctx, err)
		}
	}
	st, params, err := s.bindAsOfParam(ctx, st, m)
	if err != nil {
		return s.failExtended(ctx, err)
	}
	if answeredByProxy(st) {
		// EXPLAIN TIMESTAMP's timestamp is chosen at Execute, as for a
		// simple Query.
		p.explain = &explainPortal{st: st}
		if len(m.ResultFormatCodes) > 0 {
			p.explain.format = m.ResultFormatCodes[0]
		}
		return s.client.Send(&pgproto3.BindComplete{})
	}
	if ok, err := s.guardedBind(ctx, m, p, st, params); err != nil {
		return s.failExtended(ctx, err)
	} else if ok {
		return nil
	}
	ts, err := s.chooseForBind(ctx, st)
	if err != nil {
		return s.failExtended(ctx, err)
	}
	return s.forwardExplicitBind(m, p, st, params, strconv.AppendUint(nil, ts, 10), true)
}

// chooseForBind chooses the timestamp of a Bind of st with the database's
// current catalog and frontiers, and holds it until the transaction ends
// (the portal may be executed later).
func (s *Session) chooseForBind(ctx context.Context, st *planner.Statement) (uint64, error) {
	cat, fr, err := s.db.snapshot(ctx, s.proxy)
	if err != nil {
		return 0, err
	}
	if !stillDefined(st, cat) {
		// The rewrite names the columns the inputs had at Parse; PostgreSQL
		// would see no change in it and answer in the old shape.
		return 0, errResultTypeChanged()
	}
	c, err := s.chooseTimestamp(ctx, st, fr)
	if err != nil {
		return 0, err
	}
	if !s.pinned() || st.AsOf != nil {
		// (A read at the pinned timestamp is under the transaction's hold.)
		s.enter(timeouts.PhaseHold)
		hold, err := s.holdRead(ctx, c, exactTimestamp(st, s.pinned()))
		if err != nil {
			return 0, err
		}
		s.portalHolds = append(s.portalHolds, hold)
	}
	s.obs.Timestamp(c.ts)
	if err := s.awaitUpper(ctx, c); err != nil {
		return 0, err
	}
	return c.ts, nil
}

// forwardExplicitBind forwards the Bind m of an explicit-timestamp
// statement with the parameters params and, for a rewrite with the
// timestamp as a parameter, ts (as text) as its value: nil (NULL) reads at
// the timestamp the read guard in front of it pins (tsParamSQL). push
// queues the Bind's unit (false: it is queued already, for a Bind sent
// again).
func (s *Session) forwardExplicitBind(m *pgproto3.Bind, p *portal, st *planner.Statement, params [][]byte, ts []byte, push bool) error {
	// The session's Bind and parameter slice, reused: Send encodes them.
	bind := &s.explicitBind
	*bind = *m
	bind.Parameters = params
	if p.stmt.tsParam {
		n := p.stmt.params + 1
		withTS := append(s.explicitParams[:0], make([][]byte, n)...)
		copy(withTS, params)
		withTS[n-1] = ts
		s.explicitParams = withTS
		bind.Parameters = withTS
		bind.ParameterFormatCodes = paramFormats(m.ParameterFormatCodes, n)
	}
	if err := s.be.w.Send(bind); err != nil {
		return s.lost(err)
	}
	if push {
		s.units.push(unit{kind: uBind})
	}
	return nil
}

// bindCountsError is PostgreSQL's error for a Bind whose parameter values
// or format codes do not match the client's statement, which has params
// parameters, or nil. PostgreSQL cannot tell for a statement with the
// timestamp parameter appended: forwardExplicitBind fits the values to the
// rewrite's parameters (TestHostile9BadBind: 2 values for 1 answered with
// the first, none with NULL).
func bindCountsError(m *pgproto3.Bind, params int) error {
	if formats := len(m.ParameterFormatCodes); formats > 1 && formats != len(m.Parameters) {
		return pgerr.New(pgerr.ProtocolViolation, "bind message has %d parameter formats but %d parameters", formats, len(m.Parameters))
	}
	if len(m.Parameters) != params {
		return pgerr.New(pgerr.ProtocolViolation, "bind message supplies %d parameters, but prepared statement \"%s\" requires %d",
			len(m.Parameters), m.PreparedStatement, params)
	}
	return nil
}

// paramFormats extends a Bind's parameter format codes to n parameters
// whose last (the timestamp) is text.
func paramFormats(codes []int16, n int) []int16 {
	switch {
	case len(codes) == 0 || len(codes) == 1 && codes[0] == 0:
		return codes // all text
	case len(codes) == 1:
		out := make([]int16, n)
		for i := range out[:n-1] {
			out[i] = codes[0]
		}
		return out
	default:
		out := make([]int16, n)
		copy(out, codes)
		return out
	}
}

// releasePortalHolds releases the holds of explicit-timestamp portals when
// their transaction is over.
func (s *Session) releasePortalHolds() {
	for _, h := range s.portalHolds {
		s.release(h)
	}
	s.portalHolds = s.portalHolds[:0]
}

// stripTimestampParam rewrites a ParameterDescription without its last
// parameter, the proxy's timestamp.
func stripTimestampParam(frame []byte) ([]byte, error) {
	var pd pgproto3.ParameterDescription
	if err := pd.Decode(frame[5:]); err != nil {
		return nil, err
	}
	if len(pd.ParameterOIDs) > 0 {
		pd.ParameterOIDs = pd.ParameterOIDs[:len(pd.ParameterOIDs)-1]
	}
	return pd.Encode(nil)
}

func mustEncode(m pgproto3.FrontendMessage) []byte {
	b, err := m.Encode(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// answeredByProxy reports whether the proxy answers st over the extended
// protocol itself, the backend never seeing it: EXPLAIN TIMESTAMP, and
// SHOW transaction_isolation (mzproxy's setting, not the backend's).
func answeredByProxy(st *planner.Statement) bool {
	return st.ExplainTimestamp != nil || showsIsolation(st)
}

// explainPortal is a portal of a statement the proxy answers (see
// answeredByProxy); format is the result format the client asked for (text
// and binary are the same bytes for a text column).
type explainPortal struct {
	st     *planner.Statement
	format int16
}

// describeExplain answers Describe of a statement or portal the proxy
// answers. It reports false for every other Describe.
func (s *Session) describeExplain(ctx context.Context, m *pgproto3.Describe) (bool, error) {
	var st *planner.Statement
	var format int16
	if m.ObjectType == 'S' {
		if st = s.statement(m.Name).explicit; st == nil || !answeredByProxy(st) {
			return false, nil
		}
	} else {
		p := s.portalOf(m.Name).explain
		if p == nil {
			return false, nil
		}
		st, format = p.st, p.format
	}
	ok, err := s.quiesce(ctx)
	if err != nil || !ok {
		return true, err
	}
	if m.ObjectType == 'S' {
		// The statement's own parameters are never evaluated: they are
		// described as text, but for the AS OF's.
		oids := make([]uint32, st.Params)
		for i := range oids {
			oids[i] = textOID
		}
		if a := st.AsOf; a != nil && a.Param > 0 && a.Param <= len(oids) {
			oids[a.Param-1] = a.ParamType
		}
		if err := s.client.Send(&pgproto3.ParameterDescription{ParameterOIDs: oids}); err != nil {
			return true, err
		}
	}
	if showsIsolation(st) {
		return true, s.client.Send(isolationRow(format))
	}
	return true, s.client.Send(explainTimestampRow(format))
}

// executeExplain answers Execute of a portal the proxy answers. For
// EXPLAIN TIMESTAMP the timestamp is chosen now, as for a SELECT executed
// now.
func (s *Session) executeExplain(ctx context.Context, p *explainPortal) error {
	ok, err := s.quiesce(ctx)
	if err != nil || !ok {
		return err
	}
	if showsIsolation(p.st) {
		if err := s.client.Send(isolationValue()); err != nil {
			return err
		}
		return s.client.Send(&pgproto3.CommandComplete{CommandTag: []byte("SHOW")})
	}
	if err := s.readRights(ctx, p.st); err != nil {
		return err
	}
	_, fr, err := s.db.snapshot(ctx, s.proxy)
	if err != nil {
		return err
	}
	c, err := s.chooseTimestamp(ctx, p.st.ExplainTimestamp.Inner, fr)
	if err != nil {
		return err
	}
	text := s.timestampExplanation(p.st.ExplainTimestamp.Format, c)
	if err := s.client.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(text)}}); err != nil {
		return err
	}
	return s.client.Send(&pgproto3.CommandComplete{CommandTag: []byte("EXPLAIN")})
}

// stillDefined reports whether every managed object a statement was
// planned against is still defined as it was (same columns, history
// relation, view text) in cat.
func stillDefined(st *planner.Statement, cat *catalogSnapshot) bool {
	same := func(o *planner.Object) bool {
		now := cat.objects[int64(o.ID)]
		return now != nil && now.Kind == o.Kind && now.History == o.History &&
			now.ViewSQL == o.ViewSQL && now.RowSecurity == o.RowSecurity && slices.Equal(now.Columns, o.Columns)
	}
	for _, r := range st.Reads {
		if r.Managed() && !same(r.Object) {
			return false
		}
	}
	return !slices.ContainsFunc(st.Inputs, func(o *planner.Object) bool { return !same(o) })
}
