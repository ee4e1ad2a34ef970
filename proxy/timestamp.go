package proxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/storage"
	"github.com/mzproxy/mzproxy/timeouts"
)

// The explicit-timestamp path: reads that name their time (AS OF), that
// use it (mz_now()), EXPLAIN TIMESTAMP, and every read in history mode.
// Such a read is rewritten by the planner into reads of the history
// tables at a timestamp the proxy chooses here, under a read hold.
//
// Reads of the present need none of this: every write commits in the same
// backend transaction that advances the oracle's read timestamp, so a
// backend snapshot is a timestamp (see proxy/storage).

// explicitPlan plans sql when it needs the explicit-timestamp path; nil
// otherwise.
func (s *Session) explicitPlan(ctx context.Context, sql string) (*planner.Statement, *storage.FrontierState, error) {
	return s.planExplicit(ctx, sql, true)
}

// planExplicit is explicitPlan; seen allows the catalog the proxy saw last
// (see explicitSnapshot).
func (s *Session) planExplicit(ctx context.Context, sql string, seen bool) (*planner.Statement, *storage.FrontierState, error) {
	s.seenPlan = seenPlan{}
	if s.proxy.cfg.HistoryReads && s.plainRead(sql) {
		// In history mode a plain read (certainly one read, no AS OF,
		// mz_now() or EXPLAIN) takes this path: planned once, with the
		// catalog, without the shape below first (a parse and analysis
		// more, for a text that misses the plan cache: a third of the
		// proxy's CPU per read of the SLT corpus, docs/corpus-cost.md).
		// Anything else (a locking read, an error the backend may be the
		// one to report) is decided as below.
		if stmts, fr, err := s.planWith(ctx, sql, seen); err == nil && historyRead(stmts) {
			return stmts[0], fr, s.buildForRead(ctx, stmts[0])
		}
		s.seenPlan = seenPlan{}
	}
	cheap, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if errors.Is(err, planner.ErrAsOf) {
		return nil, nil, err
	}
	if err != nil {
		// The backend reports it.
		return nil, nil, nil
	}
	explicit, history := false, false
	for _, st := range cheap {
		if st.AsOf != nil || st.UsesMzNow || st.ExplainTimestamp != nil {
			explicit = true
		}
		if s.proxy.cfg.HistoryReads && (st.Kind == planner.KindRead || st.Kind == planner.KindCopyTo) && !st.Locking {
			history = true
		}
	}
	if !explicit && (!history || len(cheap) != 1) {
		// History mode rewrites single reads; a query string of several
		// statements reads the present.
		return nil, nil, nil
	}
	if len(cheap) != 1 {
		return nil, nil, pgerr.New(pgerr.FeatureNotSupported,
			"AS OF, mz_now() and EXPLAIN TIMESTAMP must be the only statement of a query string")
	}
	stmts, fr, err := s.planWith(ctx, sql, seen)
	if err != nil {
		return nil, nil, err
	}
	return stmts[0], fr, s.buildForRead(ctx, stmts[0])
}

// planWith plans sql with the catalog (seen: as explicitSnapshot chooses
// it) and the session's search_path.
func (s *Session) planWith(ctx context.Context, sql string, seen bool) ([]*planner.Statement, *storage.FrontierState, error) {
	var cat *catalogSnapshot
	var fr *storage.FrontierState
	var err error
	if seen {
		cat, fr, err = s.explicitSnapshot(ctx, sql)
	} else {
		cat, fr, err = s.db.snapshot(ctx, s.proxy)
	}
	if err != nil {
		return nil, nil, err
	}
	path, err := s.searchPath(ctx)
	if err != nil {
		return nil, nil, err
	}
	if cat, err = s.withSessionTemps(ctx, cat); err != nil {
		return nil, nil, err
	}
	stmts, err := s.proxy.planner.Plan(sql, cat, planner.Options{
		SearchPath:        planner.EffectiveSearchPath(path, s.user),
		ExplicitTimestamp: s.proxy.cfg.HistoryReads,
	})
	return stmts, fr, err
}

// historyRead reports whether stmts is one read that history mode
// rewrites and nothing else would: what planExplicit's shape finds
// (the kind and these flags follow from the text alone).
func historyRead(stmts []*planner.Statement) bool {
	if len(stmts) != 1 {
		return false
	}
	st := stmts[0]
	return st.Kind == planner.KindRead && !st.Locking && st.AsOf == nil && !st.UsesMzNow && st.ExplainTimestamp == nil
}

// searchPath is the session's search_path: as the proxy knows it (see
// known.go), or read from the backend connection.
func (s *Session) searchPath(ctx context.Context) ([]string, error) {
	if path := s.known.searchPath; path != nil {
		return path, nil
	}
	show := s.be.internalValue
	if s.tx == txIdle && !s.be.bound && s.units.len() == 0 {
		show = s.be.valueOwnBatch
	}
	v, err := show(ctx, "SHOW search_path")
	if err != nil {
		return nil, err
	}
	s.learnSearchPath(v)
	return s.known.searchPath, nil
}

// parseSearchPath splits SHOW search_path's answer into schema names.
func parseSearchPath(v string) []string {
	var path []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
			p = strings.ReplaceAll(p[1:len(p)-1], `""`, `"`)
		}
		if p != "" {
			path = append(path, p)
		}
	}
	return path
}

// choice is a chosen timestamp with what it was chosen from.
type choice struct {
	ts       uint64
	oracle   *uint64
	upper    uint64
	since    uint64 // the largest since of the inputs
	inputs   []*planner.Object
	sinces   map[uint64]uint64
	frontier *storage.FrontierState
}

// chooseTimestamp applies Materialize's rules: AS OF t reads exactly t and
// fails below an input's since; AS OF AT LEAST t reads max(t, since);
// otherwise (strict serializable) max(oracle read timestamp, since).
func (s *Session) chooseTimestamp(ctx context.Context, st *planner.Statement, fr *storage.FrontierState) (*choice, error) {
	s.enter(timeouts.PhaseTimestamp)
	c := &choice{upper: fr.Upper, inputs: st.Inputs, sinces: map[uint64]uint64{}, frontier: fr}
	for _, in := range st.Inputs {
		since := fr.Since[int64(in.ID)]
		c.sinces[in.ID] = since
		c.since = max(c.since, since)
	}
	if s.pinned() {
		return s.chooseInTransaction(ctx, st, c)
	}
	if st.AsOf == nil && s.isolation == serializable {
		// Serializable may read the newest complete time instead of asking
		// the oracle.
		c.ts = max(fr.Upper-1, c.since)
		return c, nil
	}
	if st.AsOf == nil {
		// The oracle and the upper as the session sees them: in a
		// transaction that wrote, its own (uncommitted) commit is the
		// newest, and it reads its own writes.
		read, upper, err := s.oracleReadTS(ctx)
		if err != nil {
			return nil, err
		}
		c.oracle, c.upper = &read, upper
		c.ts = max(read, c.since)
		return c, nil
	}
	t, err := s.evalAsOf(ctx, st.AsOf, func() (uint64, error) {
		read, _, err := s.oracleReadTS(ctx)
		return read, err
	})
	if err != nil {
		return nil, err
	}
	if st.AsOf.AtLeast {
		c.ts = max(t, c.since)
		return c, nil
	}
	c.ts = t
	if err := validForInputs(st, c); err != nil {
		return nil, err
	}
	return c, nil
}

// validForInputs fails when c.ts is below an input's since.
func validForInputs(st *planner.Statement, c *choice) error {
	var invalid []string
	var limiting *planner.Object // the input with the latest since: it limits how far back a read goes
	for _, in := range st.Inputs {
		if since := c.sinces[in.ID]; c.ts < since {
			invalid = append(invalid, fmt.Sprintf("Antichain { elements: [%d] }", since))
			if limiting == nil || since > c.sinces[limiting.ID] {
				limiting = in
			}
		}
	}
	if len(invalid) == 0 {
		return nil
	}
	return pgerr.New(pgerr.InternalError, "Timestamp (%d) is not valid for all inputs: [%s]", c.ts, strings.Join(invalid, ", ")).
		WithHint("The earliest readable time is %d. Use AS OF AT LEAST, or keep more history with ALTER TABLE %s SET (RETAIN HISTORY FOR '...').",
			c.since, planner.QualifiedName{Schema: limiting.Schema, Name: limiting.Name})
}

// oracleReadTS pins a read of the present: its timestamp, at or above
// every commit, with the upper just past it. In a transaction that wrote,
// it is the transaction's own T: it reads its own writes.
func (s *Session) oracleReadTS(ctx context.Context) (read, upper uint64, err error) {
	s.proxy.obs.OracleRoundTrip(ctx, "read_ts")
	v, err := s.be.internalValue(ctx, storage.ReadTSSQL)
	if err != nil {
		return 0, 0, err
	}
	if read, err = strconv.ParseUint(v, 10, 64); err != nil {
		return 0, 0, pgerr.New(pgerr.InternalError, "pinned read timestamp %q: %v", v, err)
	}
	return read, read + 1, nil
}

// evalAsOf evaluates an AS OF expression; present is the timestamp a
// read of the present would have, which mz_now() stands for in it.
func (s *Session) evalAsOf(ctx context.Context, a *planner.AsOf, present func() (uint64, error)) (uint64, error) {
	expr := a.Expr
	if a.Now != nil {
		ts, err := present()
		if err != nil {
			return 0, err
		}
		expr = a.Now.RenderLiteral(ts)
	}
	return s.evalTimestamp(ctx, expr)
}

// evalTimestamp evaluates an AS OF expression: a number of milliseconds
// since the epoch, or anything PostgreSQL can cast to timestamptz
// (including an untyped literal, '2026-12-01 14:17:15'). A number written
// out needs no round trip, anything else one.
func (s *Session) evalTimestamp(ctx context.Context, expr string) (uint64, error) {
	if ms, ok, err := millisOfNumber(expr); ok {
		return ms, err
	}
	return s.millisOf(ctx, expr)
}

// timestampOfText reads the text of a number of milliseconds since the
// epoch, or of anything PostgreSQL reads as a timestamptz.
func (s *Session) timestampOfText(ctx context.Context, text string) (uint64, error) {
	if ms, ok, err := millisOfNumber(text); ok {
		return ms, err
	}
	return s.millisOf(ctx, quoteLiteral(text))
}

// millisOf has the backend evaluate expr once, as text, and read that text
// as a number when it is one (an integer column, '1796137811143') and as
// a timestamptz otherwise, in the session's TimeZone and DateStyle (the
// text of a timestamp or a date came out in them).
func (s *Session) millisOf(ctx context.Context, expr string) (uint64, error) {
	v, err := s.be.internalValue(ctx, "SELECT coalesce(CASE WHEN v ~ "+
		"'^[[:space:]]*-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?[[:space:]]*$' THEN v "+
		"ELSE floor(extract(epoch FROM v::timestamptz) * 1000)::int8::text END, '') "+
		"FROM (SELECT ("+expr+")::text AS v) AS as_of")
	if err != nil {
		return 0, err
	}
	if v == "" {
		return 0, pgerr.New("22004", "AS OF must not be null").
			WithHint("Give milliseconds since the Unix epoch or a timestamp.")
	}
	ms, ok, err := millisOfNumber(v)
	if !ok {
		return 0, invalidTimestamp(v)
	}
	return ms, err
}

// millisOfNumber reads text that is a number (with or without a fraction
// or an exponent, never "inf" or "NaN"): ok reports whether it is one, and
// the error whether it is a valid timestamp.
func millisOfNumber(text string) (ms uint64, ok bool, err error) {
	v := strings.TrimSpace(text)
	if ms, err := strconv.ParseUint(v, 10, 64); err == nil {
		return ms, true, nil
	}
	f, perr := strconv.ParseFloat(v, 64)
	if perr != nil || strings.ContainsAny(v, "nNxX") {
		return 0, false, nil
	}
	if f < 0 || f >= math.MaxUint64 {
		return 0, true, invalidTimestamp(text)
	}
	return uint64(f), true, nil
}

func invalidTimestamp(v string) error {
	return pgerr.New(pgerr.InvalidParameterValue, "AS OF: %q is not a valid timestamp", v)
}

// awaitUpper waits until the upper is past ts. Pins move it (reads of the
// present, and the tick of package lease, which keeps it within about a
// tick interval of the clock); a ts ahead of it (AS OF [AT LEAST] a later
// time, such as now()) gets a pin of its own once the clock has reached
// ts, as Materialize advances table uppers with the clock.
func (s *Session) awaitUpper(ctx context.Context, c *choice) error {
	if c.upper <= c.ts && s.writeSlot {
		// A pin would be this transaction's own T.
		return pgerr.New(pgerr.FeatureNotSupported,
			"cannot read at timestamp %d, ahead of the upper %d, in a transaction that has written", c.ts, c.upper)
	}
	s.enter(timeouts.PhaseUpperWait)
	for c.upper <= c.ts {
		if wait := time.Until(time.UnixMilli(int64(c.ts) + 1)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return s.budget.Err(ctx)
			case <-t.C:
			}
		}
		_, upper, err := s.oracleReadTS(ctx)
		if err != nil {
			return err
		}
		c.upper = max(c.upper, upper)
	}
	return nil
}

// failQuery passes on the error of a simple Query on the explicit-timestamp
// path, after ending the implicit transaction the proxy's own queries for
// it left open (see endImplicitTxn). A statement timed out in the upper
// wait ends here.
func (s *Session) failQuery(err error) error {
	if err == nil {
		// Before pe, which errors.As makes a heap variable: a read that
		// succeeds allocates nothing here.
		return nil
	}
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.IsFatal() {
		return err
	}
	if serr := s.endImplicitTxn(); serr != nil {
		return serr
	}
	return err
}

// endImplicitTxn ends the implicit transaction that the proxy's own
// queries (run with the extended protocol, without Sync) leave open on the
// backend outside a transaction block, with a snapshot: a Sync ends it, or
// the client's next statement would join it (and BEGIN ISOLATION LEVEL,
// or the read-only transaction the next BEGIN starts, would fail with
// 25001). Needed wherever the proxy answers the client without sending
// the backend a statement of the client's, whose own end would end it.
func (s *Session) endImplicitTxn() error {
	if s.tx != txIdle {
		return nil
	}
	if err := s.be.w.Send(&pgproto3.Sync{}); err != nil {
		return s.lost(err)
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lostWrite(err)
	}
	for {
		typ, frame, err := s.be.next()
		if err != nil {
			return s.lost(err)
		}
		switch typ {
		case 'E':
			if fatal, ferr := s.backendErrorIsFatal(frame); fatal {
				return ferr
			}
		case 'Z':
			s.tx = txStatus(frame[5])
			return nil
		}
	}
}

// explicitQuery runs a simple Query on the explicit-timestamp path.
func (s *Session) explicitQuery(ctx context.Context, st *planner.Statement, fr *storage.FrontierState) error {
	if seen := s.seenPlan; seen.ok {
		s.seenPlan = seenPlan{}
		if st.ExplainTimestamp == nil && st.Kind == planner.KindRead {
			stale, err := s.guardedQuery(ctx, st, fr, seen.revision)
			if !stale {
				return err
			}
		}
		// The catalog or the search_path changed since they were seen, or
		// the statement needs the current frontiers (EXPLAIN TIMESTAMP
		// shows them).
		var err error
		if st, fr, err = s.planAgain(ctx, seen.sql); err != nil {
			return err
		}
	}
	target := st
	if st.ExplainTimestamp != nil {
		target = st.ExplainTimestamp.Inner
		if err := s.readRights(ctx, st); err != nil {
			return err
		}
	}
	c, err := s.chooseTimestamp(ctx, target, fr)
	if err != nil {
		return err
	}
	s.obs.Timestamp(c.ts)
	if st.ExplainTimestamp != nil {
		// Answered here: no statement of the client's ends the implicit
		// transaction choosing the timestamp began.
		if err := s.endImplicitTxn(); err != nil {
			return err
		}
		return s.explainTimestamp(st.ExplainTimestamp.Format, c)
	}
	// A read at a pinned transaction's timestamp is under the
	// transaction's hold.
	var hold *heldRead
	if !s.pinned() || st.AsOf != nil {
		s.enter(timeouts.PhaseHold)
		h, err := s.holdRead(ctx, c, exactTimestamp(st, s.pinned()))
		if err != nil {
			return err
		}
		hold = &h
	}
	if err := s.awaitUpper(ctx, c); err != nil {
		if hold != nil {
			s.release(*hold)
		}
		return err
	}
	sql := st.SQL
	if st.Template != nil {
		sql = st.Template.RenderLiteral(c.ts)
	}
	if err := s.be.w.Send(&pgproto3.Query{String: sql}); err != nil {
		return s.lost(err)
	}
	s.units.push(unit{kind: uQuery, relayZ: true})
	err = s.exchange(ctx)
	switch {
	case hold == nil:
	case st.Kind == planner.KindCursor && s.tx == txBlock:
		// The cursor reads on: held until the transaction ends.
		s.portalHolds = append(s.portalHolds, *hold)
	default:
		s.release(*hold)
	}
	return err
}

// planAgain plans a read whose guard refused it with the current catalog
// and frontiers; the search_path is asked again.
func (s *Session) planAgain(ctx context.Context, sql string) (*planner.Statement, *storage.FrontierState, error) {
	s.known.searchPath, s.known.searchPathShown = nil, ""
	st, fr, err := s.planExplicit(ctx, sql, false)
	if err == nil && st == nil {
		// Whether a read names its time depends on its text alone.
		err = pgerr.New(pgerr.InternalError, "a read planned again left the explicit-timestamp path")
	}
	return st, fr, err
}

// readRights fails st as PostgreSQL fails a read of the relations it
// names when the role may not read them (42P01, 42501 for a schema
// without USAGE or a relation without SELECT on it or any of its columns;
// see planner.RightsCheck). One statement of the proxy's on the session's
// backend, run as the client's current role (its SET ROLE, SET SESSION
// AUTHORIZATION or login role), where PostgreSQL's executor checks a
// view's own relations as the view's owner (the invoker's for a
// security_invoker view), as for the read itself; its failure aborts a
// transaction block, as the read's would.
//
// EXPLAIN TIMESTAMP, which the proxy answers itself (its answer shows the
// frontiers of the relations it explains), runs it at each execution; a
// read that would build a history first runs it before the build
// (buildForRead).
func (s *Session) readRights(ctx context.Context, st *planner.Statement) error {
	check := planner.RightsCheck(st)
	if check == "" {
		return nil
	}
	_, err := s.be.internalValue(ctx, check)
	if err != nil && !pgerr.As(err).IsFatal() && s.tx == txBlock && !s.be.clientBatch {
		// internalFailed read the ReadyForQuery that says so.
		s.tx = txFailed
		s.releaseTxnHolds()
	}
	return err
}

// textOID is PostgreSQL's text type.
const textOID = 25

// explainTimestamp answers EXPLAIN TIMESTAMP from the proxy, in
// Materialize's layout: one text column named "Timestamp".
func (s *Session) explainTimestamp(format planner.ExplainFormat, c *choice) error {
	msgs := []pgproto3.BackendMessage{
		explainTimestampRow(0),
		&pgproto3.DataRow{Values: [][]byte{[]byte(s.timestampExplanation(format, c))}},
		&pgproto3.CommandComplete{CommandTag: []byte("EXPLAIN")},
		&pgproto3.ReadyForQuery{TxStatus: byte(s.tx)},
	}
	for _, m := range msgs {
		if err := s.client.Send(m); err != nil {
			return err
		}
	}
	return s.client.Flush()
}

// explainTimestampRow describes EXPLAIN TIMESTAMP's one column.
func explainTimestampRow(format int16) *pgproto3.RowDescription {
	return &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{
		Name: []byte("Timestamp"), DataTypeOID: textOID, DataTypeSize: -1, TypeModifier: -1, Format: format,
	}}}
}

// timestampExplanation is EXPLAIN TIMESTAMP's text for the choice c.
func (s *Session) timestampExplanation(format planner.ExplainFormat, c *choice) string {
	e := planner.TimestampExplanation{
		QueryTimestamp:             c.ts,
		OracleReadTimestamp:        c.oracle,
		LargestNotInAdvanceOfUpper: c.upper - 1,
		Upper:                      []uint64{c.upper},
		Since:                      []uint64{c.since},
		RespondImmediately:         c.ts < c.upper,
		Timeline:                   planner.EpochMilliseconds,
		SessionWallTime:            time.Now(),
	}
	for _, in := range c.inputs {
		e.Sources = append(e.Sources, planner.TimestampSource{
			Name:          planner.SourceName(s.db.name, in.Schema, in.Name, in.ID),
			ReadFrontier:  []uint64{c.sinces[in.ID]},
			WriteFrontier: []uint64{c.upper},
		})
	}
	return e.Format(format)
}
