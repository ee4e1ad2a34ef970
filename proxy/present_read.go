package proxy

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

// A client's prepared read of the present binds a statement of the
// proxy's (issue 15, docs/read-cost.md "Session 26"). The client's
// statement is prepared on the backend under its name with the timestamp
// as one more parameter (tsParamSQL), so that one statement serves a read
// of the present (bound NULL: the guard's setting) and AS OF (bound with
// the time); its holes are coalesce($n, nullif(current_setting(...),
// '')::int8), whose functions and casts the backend starts at every
// execution, three times in a history read: about 13k of the 150k backend
// instructions a prepared timestamped read costs, single-user (session
// 24). A simple read's holes are readTSExpr, one function and a cast: it
// binds a statement only ever run behind the guard that sets the setting
// in the same implicit transaction, so no plan of it, generic ones
// included, is ever made where the setting is unset.
//
// So in the event loop (admitBoundRead) a read of the present binds, from
// its second use on the backend connection, a statement of the proxy's
// with the client's rewrite rendered with readTSExpr holes and the
// client's declared parameter types (the rest inferred from the same text
// as the client's statement's), prepared once per connection in the
// readStatements LRU the simple and parsed reads' statements share (keyed
// by text, types, catalog revision and search_path; emptied by a client's
// DISCARD ALL and DEALLOCATE): the loop closes and parses it in front of
// the client's Bind, as the proxy's own messages, at the use that makes
// it. The client's Bind goes to it with the client's parameters and
// formats (no timestamp parameter), into the client's portal; the
// client's Describe, Execute and Sync are as they were, and the portal's
// result is the same rewrite's.
//
// A statement of the proxy's may be gone unseen: a function of the
// client's may run DEALLOCATE ALL or DISCARD ALL, or close it by the name
// pg_prepared_statements shows. Its Bind then fails with 26000 behind the
// guard, before anything of the read ran and before anything was relayed:
// the loop gives the batch back (gone), and resumePresentBind drops its
// answers up to the ReadyForQuery and serves the batch again, once, the
// way the session's goroutine serves it (the client's statement behind
// the guard). Any other error of the read is the read's own, relayed.
// The session's goroutine never binds the proxy's statement.

// presentText is the text and parameter types of the proxy's statement
// for the client's record rec (presentStmt), the last one made: a record
// is never changed, so the same record renders the same text.
type presentText struct {
	rec   *preparedStmt
	text  string
	types string // rec's declared types, encoded (oidsKey)
}

// presentTextOf is the text of the proxy's statement of rec's read of the
// present st (its Template with readTSExpr holes) and rec's declared
// parameter types, encoded.
func (s *Session) presentTextOf(rec *preparedStmt, st *planner.Statement) *presentText {
	pt := &s.loop.present
	if pt.rec != rec {
		*pt = presentText{rec: rec, text: st.Template.Render(readTSExpr), types: oidsKey(rec.parsed.declared)}
	}
	return pt
}

// presentStmt is the statement rec's read st binds in the loop: the
// proxy's (ps.named, stmt its name; parse its Parse when the batch makes
// it, behind the closes) for a read of the present (guard pins) from the
// text's second use, else the client's (client, its name).
func (s *Session) presentStmt(rec *preparedStmt, st *planner.Statement, guard guardKey, client string) (ps parsedStmt, closes []string, stmt string, parse *pgproto3.Parse) {
	if !guard.pin || !rec.tsParam || st.AsOf != nil || st.Template == nil || st.Template.Holes() == 0 {
		return parsedStmt{}, nil, client, nil
	}
	pt := s.presentTextOf(rec, st)
	r := &s.be.reads
	ps.key = readStatementKey{text: pt.text, types: pt.types, rev: guard.rev, path: rec.parsed.path}
	name, made, named := r.statementFor(ps.key)
	if !named {
		// The text's first use on this connection.
		return parsedStmt{}, nil, client, nil
	}
	ps.named, ps.made = true, made
	ps.closing, r.closing = r.closing, nil
	closes = append(s.loop.closes[:0], ps.closing...)
	if made {
		// Closed first, as boundReadOf closes it.
		closes = append(closes, name)
		s.loop.parse = pgproto3.Parse{Name: name, Query: pt.text, ParameterOIDs: rec.parsed.declared}
		parse = &s.loop.parse
	}
	s.loop.closes = closes
	return ps, closes, name, parse
}

// resumePresentBind takes over, at its Bind m (frame), a prepared read of
// the present that bound the proxy's statement and that the loop gave back
// (see above): the guard's answers first, then those of the proxy's Closes
// and Parse. When the statement was gone, the guard refused, or the
// proxy's Parse failed, nothing of the read ran: the batch's answers are
// dropped and it is served as if the loop had never had it. A cancel or
// another error of the guard fails the batch, as an error of its Bind
// would. Otherwise (a notice among the proxy's answers) the backend runs
// the rest as sent, and the client's messages behind the Bind go through
// their handlers unsent.
func (s *Session) resumePresentBind(ctx context.Context, m *pgproto3.Bind, frame []byte) error {
	lr := &s.loopRead
	g, ps, behind, gone := lr.g, lr.stmt, lr.behind, lr.gone
	lr.active, lr.resume, lr.present, lr.gone, lr.stmt = false, false, false, false, parsedStmt{}
	// loopFlight stays set until the statement ends (resumeLoopRead).
	clientBatch := s.be.clientBatch
	s.be.clientBatch = true // the backend skips to the client's Sync after an error
	value, err := s.be.readGuard()
	s.be.clientBatch = clientBatch
	r := &s.be.reads
	// rerun: nothing of the read ran, and the batch is served again.
	rerun := false
	switch {
	case err != nil:
		// The backend skipped the batch: no statement was closed or made.
		r.undo(&ps)
		rerun = isStale(err)
	default:
		err = s.be.presentOwnAnswers(&ps)
		var pe *pgerr.Error
		rerun = err != nil && errors.As(err, &pe) && pe.Code != pgerr.QueryCanceled
		if err == nil && gone {
			// Made again at the text's next uses.
			r.cache().Remove(ps.key)
			err, rerun = errPresentGone, true
		}
	}
	if err != nil {
		s.release(g.hold)
		// A fatal error ends the session; an error that is not the
		// backend's fails the batch unless it is served again.
		var pe *pgerr.Error
		if errors.As(err, &pe) && pe.IsFatal() || pe == nil && !rerun {
			return err
		}
		if err := s.dropQueryAnswers(); err != nil {
			return err
		}
		if rerun {
			return s.handleBind(ctx, m, frame)
		}
		return pe
	}
	if err := g.c.pinnedBy(s.be.pinValue(value)); err != nil {
		// The read is bound already, at a timestamp the proxy cannot
		// tell: nothing may relay its answers.
		s.release(g.hold)
		pe := pgerr.As(err)
		return pgerr.Fatal(pe.Code, "%s", pe.Message)
	}
	s.obs.Timestamp(g.c.ts)
	s.definePortal(m.DestinationPortal, m.PreparedStatement)
	s.portalHolds = append(s.portalHolds, g.hold)
	s.units.push(unit{kind: uBind, failed: r.forget(ps.key)})
	lr.sent = behind
	return nil
}

// errPresentGone: the Bind of the proxy's statement of a read of the
// present failed with 26000 (resumePresentBind).
var errPresentGone = errors.New("the proxy's statement of a read of the present was gone")

// presentOwnAnswers reads the answers to the proxy's Closes and Parse in
// front of a read of the present's Bind (ps), notices dropped, and
// returns the first error (the backend then skips the batch to its Sync):
// the statement is forgotten, prepared again at its text's next uses.
func (b *backend) presentOwnAnswers(ps *parsedStmt) error {
	n := len(ps.closing)
	if ps.made {
		n += 2
	}
	for got := 0; got < n; {
		typ, frame, err := b.next()
		if err != nil {
			return connectionLost(err)
		}
		switch typ {
		case '1', '3':
			got++
		case 'E':
			var er pgproto3.ErrorResponse
			_ = er.Decode(wire.Body(frame))
			b.reads.cache().Remove(ps.key)
			return backendError(&er)
		}
	}
	return nil
}
