package proxy

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

// The explicit-timestamp path over the extended protocol. Parse sends the
// planner's rewrite with the timestamp as one more parameter, $N; each Bind
// chooses a fresh timestamp and appends it as that parameter's value, so a
// prepared statement reads at a new timestamp every time it is bound (and
// PostgreSQL can reuse its plan); Describe of the statement hides the extra
// parameter from the client.

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
	if st.ExplainTimestamp != nil {
		return s.failExtended(ctx, pgerr.New(pgerr.FeatureNotSupported,
			"EXPLAIN TIMESTAMP is answered over the simple query protocol only"))
	}
	sql, oids := st.SQL, m.ParameterOIDs
	if st.Template != nil && st.Template.Holes() > 0 {
		sql = st.Template.RenderParam()
		n := st.Template.Param()
		oids = make([]uint32, n)
		copy(oids, m.ParameterOIDs)
		oids[n-1] = int8OID
		setMember(&s.tsStmts, m.Name, true)
	} else {
		setMember(&s.tsStmts, m.Name, false)
	}
	if s.explicitStmts == nil {
		s.explicitStmts = map[string]*planner.Statement{}
	}
	s.explicitStmts[m.Name] = st
	if err := s.be.w.Send(&pgproto3.Parse{Name: m.Name, Query: sql, ParameterOIDs: oids}); err != nil {
		return s.lost(err)
	}
	s.units.push(unit{kind: uParse})
	return nil
}

// bindExplicit chooses the timestamp for a Bind of an explicit-timestamp
// statement, holds it until the transaction ends, and forwards the Bind
// with the timestamp appended.
func (s *Session) bindExplicit(ctx context.Context, m *pgproto3.Bind, st *planner.Statement) error {
	ok, err := s.quiesce(ctx)
	if err != nil {
		return err
	}
	if !ok {
		// The backend skips this Bind anyway.
		return s.request(ctx, mustEncode(m), unit{kind: uBind}, false)
	}
	_, fr, err := s.db.snapshot(ctx, s.proxy)
	if err != nil {
		return s.failExtended(ctx, err)
	}
	c, err := s.chooseTimestamp(ctx, st, fr)
	if err == nil {
		err = s.awaitUpper(ctx, c)
	}
	if err != nil {
		return s.failExtended(ctx, err)
	}
	s.portalHolds = append(s.portalHolds, s.proxy.holds.acquire(s.id, s.db.name, c.ts, c.inputs))
	bind := *m
	if s.tsStmts[m.PreparedStatement] {
		n := st.Template.Param()
		params := make([][]byte, n)
		copy(params, m.Parameters)
		params[n-1] = []byte(strconv.FormatUint(c.ts, 10))
		bind.Parameters = params
		bind.ParameterFormatCodes = paramFormats(m.ParameterFormatCodes, n)
	}
	if err := s.be.w.Send(&bind); err != nil {
		return s.lost(err)
	}
	s.units.push(unit{kind: uBind})
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
		s.proxy.holds.release(h)
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
