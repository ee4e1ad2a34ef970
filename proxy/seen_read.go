package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/storage"
	"github.com/mzproxy/mzproxy/timeouts"
)

// A read on the explicit-timestamp path in one round trip. A simple Query
// outside a transaction block (SELECT ..., mz_now() FROM ...; AS OF) is
// planned with the catalog and frontiers the proxy saw last, not read
// again for it (a round trip on the database's shared connection), and
// sent in one batch behind a guard statement of the proxy's own
// (readGuardSQL), in the implicit transaction the Query then ends:
//
//   - The guard checks that the catalog is still at the revision the read
//     was planned at, and the search_path still the one its names were
//     resolved with (a function may have SET it unseen, see known.go). If not, it fails, the backend skips the client's
//     Query (until Sync), and the proxy plans again with the current
//     catalog and runs the read the ordinary way: the read never runs
//     with a plan the catalog no longer matches, and never runs twice.
//   - A read of the present (no AS OF) needs the oracle: the guard pins
//     it and keeps t in the transaction-local setting mzproxy.read_ts,
//     which the read's timestamp holes name (readTSExpr). The read is a
//     later statement of the same READ COMMITTED transaction, so its
//     snapshot is taken after the pin returned, when every write at or
//     below t has committed: it reads exactly the writes at or below t.
//     Under a snapshot isolation level the snapshot would be the pin's
//     own, older one: the guard fails then too.
//   - The read's inputs are protected before anything is sent. For a read
//     of the present, at the lease's floor (Lease.Floor), not at t, which
//     is not known yet: the floor is a read timestamp the oracle handed out
//     at an earlier heartbeat, so floor <= t, and holding it keeps every
//     input's since at or below the floor, hence readable at t, until the
//     read is done. (A table created since has its creation time as its
//     since, and t is at or after every committed write, that DDL too.)
//     For AS OF the timestamp is chosen from the sinces last seen, which
//     may be behind: a hold below the floor checks the real sinces in its
//     own round trip (Lease.Acquire), and a hold at or above it needs no
//     check (every since is at or below the floor).
//   - t is known, from the guard's answer, before the first of the read's
//     answers is relayed.

// seenPlan is an explicit read that explicitPlan planned with the catalog
// the proxy saw last; explicitQuery runs it guarded.
type seenPlan struct {
	sql      string // the client's query string, to plan again
	revision int64
	ok       bool // set: the zero value is no plan
}

// readTSExpr is what a guarded read of the present has in its timestamp
// holes: the oracle's read timestamp the guard pinned.
const readTSExpr = "(pg_catalog.current_setting('mzproxy.read_ts')::int8)"

// staleMarker names the setting the read guard reads when it refuses
// (refusal): its message carries it.
const staleMarker = "mzproxy: plan of a changed catalog"

// refusal is how a guard (a plain SQL statement: no function of the
// proxy's may be added for it) fails on a condition: an expression of type
// text that fails, when it is evaluated, with 42704 and marker in its
// message (refusedBy). It reads a setting named marker, which cannot
// exist: a name without a dot is a built-in's or an extension's, and a
// role can make only placeholders, whose names have one. current_setting
// is stable, so the planner does not evaluate it when it plans, not even
// a custom plan that folds the statement's parameters into constants: only
// the branch that runs reads it. Until session 25 a guard cast its marker
// to bigint (22P02), kept from being a constant by a concatenation with a
// value it read: three or four functions and casts where this is one, and
// each function of a statement is started at every execution, whether or
// not its branch runs (about 3k backend instructions per steady read
// guard, docs/read-cost.md "Session 25").
func refusal(marker string) string {
	return "pg_catalog.current_setting(" + quoteLiteral(marker) + ")"
}

// readGuardSQL is the guard of a read planned at catalog revision key.rev
// with search_path key.path (as SHOW spells it; "" when not known), which
// pins the oracle when key.pin is set, in the shape key.shape (see
// guardShape). It refuses by refusal.
func readGuardSQL(key guardKey) string {
	switch key.shape {
	case shapeLearn:
		return learnGuardSQL(key)
	case shapePeek:
		return peekGuardSQL(key)
	}
	ok := joinedRevision(key)
	if key.path != "" {
		ok += " AND pg_catalog.current_setting('search_path') = " + quoteLiteral(key.path)
	}
	value := "'0'"
	switch {
	case key.pin && key.viewless:
		// The session restricts views: pin() reads settled_pin with the
		// restriction lifted (view_safe.sql).
		value = storage.Schema + ".pin()::text"
	case key.pin:
		// The lock-free pin first, as a view the guard's plan includes
		// (no function call: see pin_cheap.sql); pin() only when it does
		// not apply. COALESCE evaluates pin() only then.
		value = "coalesce((SELECT t FROM " + storage.Schema + ".settled_pin), " + storage.Schema + ".pin())::text"
	}
	if key.pin {
		ok += " AND pg_catalog.current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')"
	}
	guarded := "CASE WHEN " + ok + " THEN " + value + " ELSE " + refusal(staleMarker) + " END"
	if !key.pin {
		return "SELECT " + guarded + revisionOnlyFrom
	}
	return "SELECT pg_catalog.set_config('mzproxy.read_ts', " + guarded + ", true)" + revisionOnlyFrom
}

// guardShape is how a read guard of the present pins; sendGuard chooses
// it from what the session's guards learned (readPeek).
//
// Each relation a statement names costs the backend its lock, permission
// check and scan start at every run, whether or not the branch that reads
// it runs (bench/tsguardcost.sh, docs/read-cost.md "Session 20"): the view
// settled_pin's four sequence reads were most of the guard. So the shapes
// differ in what they name, not in which branch runs.
type guardShape uint8

const (
	// shapeView: pinned through the view settled_pin, or by pin() in a
	// session that restricts views; also a guard that does not pin.
	shapeView guardShape = iota
	// shapeLearn asks settled_pin's question itself, in its order (the
	// writes counted w, writes_seen = w, P fresh, the writes again = w;
	// pin_cheap.sql gives the argument), and answers "t/w" when it holds:
	// every write slot counted up to w had ended before the guard
	// returned (a pin set writes_seen to w once they had). Otherwise it
	// answers pin()'s t as "t/". PUBLIC reads writes_seen since storage
	// version 45.
	shapeLearn
	// shapePeek reads P (the row its scan reads first) and then the
	// writes, which must still be the count w a guard of the session
	// learned ($1), as the read-only transaction's guard does with its
	// peek (storage.PinGuardCheck): no slot was counted since w, and every
	// slot up to w had ended before this statement began, so a write that
	// was acknowledged before it is at or below P, and one at or below P
	// has committed before the read's snapshot. Else it pins with pin()
	// and answers "t/" (the session learns again). It checks the catalog
	// revision too: an unchanged count does not mean an unchanged catalog,
	// since a view's DDL moves the revision without a write slot counted
	// (storage version 46).
	shapePeek
)

// guardSQLOps names the operators and types the guard's new shapes use
// with their schema: the session's search_path is the client's.
const (
	opEq    = " OPERATOR(pg_catalog.=) "
	opNe    = " OPERATOR(pg_catalog.<>) "
	opCat   = " OPERATOR(pg_catalog.||) "
	setTSOf = "pg_catalog.set_config('mzproxy.read_ts', "
)

// guardConditions is what every shape of a pinning guard checks of the
// session: the search_path its names were resolved with (when known) and
// a level whose next statement takes a snapshot of its own: read
// committed or read uncommitted, the two of the four levels whose names
// begin with "read " (a LIKE: one function to start at every execution
// where = ANY of an array was about 0.5k backend instructions more,
// docs/read-cost.md "Session 25").
func guardConditions(key guardKey) string {
	ok := "pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.~~) 'read %'"
	if key.path != "" {
		ok = "pg_catalog.current_setting('search_path')" + opEq + quoteLiteral(key.path) + " AND " + ok
	}
	return ok
}

// guardRevision is a guard's check of the catalog revision key.rev, as a
// scalar subquery (the learning guard's).
func guardRevision(key guardKey) string {
	return "(SELECT revision FROM " + storage.Schema + ".catalog_revision)" + opEq + strconv.FormatInt(key.rev, 10)
}

// joinedRevision is the steady guard's check of the catalog revision
// key.rev, of the row revisionFrom joins into its FROM. Read as a relation
// of the FROM, not as a scalar subquery, it costs the backend about 4k
// instructions less per guard (no subplan to start and run;
// docs/read-cost.md "Session 24"); in the learning guard, whose FROM is a
// subquery of its own, the join cost 2k more than the subquery, so that
// one keeps guardRevision. The revision is read in the statement's
// snapshot either way, and catalog_revision has its one row (the
// install's, which only mzproxy's functions update), so the join keeps
// the guard's one row.
func joinedRevision(key guardKey) string {
	return "r.revision" + opEq + strconv.FormatInt(key.rev, 10)
}

// revisionFrom joins catalog_revision as r into a guard's FROM, for
// joinedRevision; revisionOnlyFrom is the FROM of a guard that reads no
// other relation (the view shape's: an AS OF read's guard, and a session's
// that restricts views), where the join saves the backend the subplan as
// in the steady guard (about 3k per guard, docs/read-cost.md "Session
// 25").
const (
	revisionFrom     = ", " + storage.Schema + ".catalog_revision r"
	revisionOnlyFrom = " FROM " + storage.Schema + ".catalog_revision r"
)

// learnGuardSQL is shapeLearn's text: settled_pin's CASE (pin_cheap.sql)
// with each branch that answers setting mzproxy.read_ts itself, so that
// the answer can carry w.
func learnGuardSQL(key guardKey) string {
	return learnGuardAt(key, "pg_catalog.clock_timestamp()")
}

// learnGuardAt is learnGuardSQL with the clock read by the expression
// clock (a test sets its own). Its reads are settled_pin's, in its order:
// the writes counted (the row the statement scans), writes_seen, P (a
// subquery's scan, in the CASE's last branch), the writes again (in P's
// CASE, after P). As in peekGuardAt, writes_seen and the second read of
// the writes are pg_sequence_last_value's (no relation to lock and scan:
// writes_seen starts at 0 and is only ever set with is_called, so its
// last value is the coalesce's), and P's age is storage.PinFresh's.
func learnGuardAt(key guardKey, clock string) string {
	sch := storage.Schema
	settled := "CASE WHEN coalesce(pg_catalog.current_setting('mzproxy.write_ts', true), '')" + opNe + "'' THEN NULL" +
		" WHEN coalesce(pg_catalog.pg_sequence_last_value('" + sch + ".writes_seen'::pg_catalog.regclass), 0)" + opNe + "counted.w THEN NULL" +
		" ELSE (SELECT CASE WHEN NOT (" + storage.PinFresh(clock) + ") THEN NULL" +
		" WHEN " + storage.WritesCounted + opEq + "counted.w" +
		" THEN " + setTSOf + "p.last_value::pg_catalog.text, true)" + opCat + "'/'" + opCat + "counted.w::pg_catalog.text END" +
		" FROM " + sch + ".pinned p) END"
	return "SELECT CASE WHEN " + guardRevision(key) + " AND " + guardConditions(key) +
		" THEN coalesce(" + settled + ", " + setTSOf + sch + ".pin()::pg_catalog.text, true)" + opCat + "'/')" +
		" ELSE " + refusal(staleMarker) + " END" +
		" FROM (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END AS w FROM " + sch + ".writes s) counted"
}

// peekGuardSQL is the text of shapePeek: $1 is the count of writes the
// session learned. When the writes moved, or P is more than a second old
// but the writes are still $1, it pins with pin(), as the view's shape
// does, and answers "t/" (the session learns again).
func peekGuardSQL(key guardKey) string {
	return peekGuardAt(key, "pg_catalog.clock_timestamp()")
}

// peekGuardAt is peekGuardSQL with the clock read by the expression clock
// (a test sets its own). It is written for the backend's cost of running
// it (bench/tsguardcost.sh, docs/read-cost.md "Session 21"): each relation
// a statement names costs a lock, a rights check and a scan's start at
// every run, and each function or operator an initialisation, whether or
// not its branch runs. So the writes are read by pg_sequence_last_value
// (storage.WritesCounted), not by a subquery's scan; pin() is named once;
// and P's age is compared as a time (storage.PinFresh), not through
// now_ms()'s numeric arithmetic. The reads keep
// their order: P is the row the scan reads, the writes the first branch
// of the OR after the CASE's first condition, evaluated left to right.
func peekGuardAt(key guardKey, clock string) string {
	ok := joinedRevision(key) + " AND " + guardConditions(key)
	pin := setTSOf + storage.Schema + ".pin()::pg_catalog.text, true)" + opCat + "'/'"
	return "SELECT CASE WHEN NOT (" + ok + ") THEN " + refusal(staleMarker) +
		" WHEN " + storage.WritesCounted + opNe + "$1 OR NOT (" + storage.PinFresh(clock) + ") THEN " + pin +
		" ELSE " + setTSOf + storage.PinGuardTS + "::pg_catalog.text, true) END" + storage.PinGuardFrom + revisionFrom
}

// readPeek is what the read guards of a backend connection learned of the
// database's writes (guardShape): a count w of write slots every one of
// which had ended before the guard that answered it returned. The count
// only grows while the connection lives (the unlogged sequence restarts
// only with a crash, which ends the connection), so an old count only
// makes a guard refuse.
type readPeek struct {
	count int64
	param [1][]byte // count as text, the peek guard's parameter; nil before the first
	// steady: the last two guards that learned found the same count, no
	// write came between them. Only then is the count used: where writes
	// are frequent a guard that reads it would mostly refuse, and a
	// refused read is pinned again the ordinary way (a round trip).
	steady bool
}

// shape is the shape of the next pinning guard of the present.
func (p *readPeek) shape() guardShape {
	if p.steady {
		return shapePeek
	}
	return shapeLearn
}

// note follows a learning guard's answer w (text).
func (p *readPeek) note(count int64, text string) {
	p.steady = p.param[0] != nil && p.count == count
	if !p.steady {
		p.count, p.param[0] = count, append(p.param[0][:0], text...)
	}
}

// pinValue is the timestamp in value, the answer of the read guard of the
// present sent last, and follows what that guard tells of the writes: "t"
// (the view's shape, or a peek that held), "t/w" (a learning guard's
// settled count w) or "t/" (pin() answered).
func (b *backend) pinValue(value string) string {
	key := b.guards[b.guardUsed].key
	t, w, slash := strings.Cut(value, "/")
	switch {
	case key.shape == shapeView:
		return value
	case w != "":
		if count, err := strconv.ParseInt(w, 10, 64); err == nil && key.shape == shapeLearn {
			b.peek.note(count, w)
			return t
		}
		b.peek.steady = false
	case slash:
		// pin() answered: a write since, or P old.
		b.peek.steady = false
	}
	return t
}

// explicitSnapshot returns the catalog and frontiers to plan an explicit
// read with: for a simple Query outside a transaction block, those the
// proxy saw last (the read is then guarded, see seenPlan); otherwise the
// backend's current ones.
func (s *Session) explicitSnapshot(ctx context.Context, sql string) (*catalogSnapshot, *storage.FrontierState, error) {
	s.seenPlan = seenPlan{}
	if !s.be.clientBatch && s.tx == txIdle && s.isolation == strictSerializable {
		if seen := s.db.seen.Load(); seen != nil {
			s.seenPlan = seenPlan{sql: sql, revision: seen.catalog.cat.Revision, ok: true}
			return seen.catalog, seen.frontiers, nil
		}
	}
	return s.db.snapshot(ctx, s.proxy)
}

// guardedQuery runs st, planned with the catalog seen at revision rev, in
// one round trip (see seenPlan). stale reports that the catalog changed
// since: nothing ran, and the read must be planned again.
func (s *Session) guardedQuery(ctx context.Context, st *planner.Statement, fr *storage.FrontierState, rev int64) (stale bool, err error) {
	c, hold, err := s.guardedChoice(ctx, st, fr)
	if err != nil {
		return false, err
	}
	g, msgs := s.guardedRead(ctx, st, c, hold, rev)
	return s.guardedAnswers(ctx, &g, s.sendGuarded(g.guard, msgs))
}

// guardedSend is a guarded read sent (or being sent) to the backend,
// whose answers guardedAnswers reads: what it needs of the read.
type guardedSend struct {
	c     *choice
	hold  heldRead
	guard guardKey
	units []unit
	br    *boundRead
}

// guardedRead is st's guarded read at choice c under hold, and the
// messages that send it after its guard.
func (s *Session) guardedRead(ctx context.Context, st *planner.Statement, c *choice, hold heldRead, rev int64) (guardedSend, []pgproto3.FrontendMessage) {
	g := guardedSend{c: c, hold: hold, guard: guardKey{rev: rev, path: s.known.searchPathShown, pin: st.AsOf == nil}}
	msgs, units, br := s.guardedReadMessages(st, c, g.guard)
	g.units, g.br = units, br
	s.timestampPhase(ctx, g.guard.pin)
	return g, msgs
}

// timestampPhase enters the timestamp's phase of a guarded read whose
// guard pins the oracle (pin): its timestamp comes with the guard's answer.
func (s *Session) timestampPhase(ctx context.Context, pin bool) {
	if pin {
		s.enter(timeouts.PhaseTimestamp)
		s.proxy.obs.OracleRoundTrip(ctx, "read_ts")
	}
}

// guardedAnswers reads the answers of the guarded read g, whose sending
// failed with sent, and releases its hold.
func (s *Session) guardedAnswers(ctx context.Context, g *guardedSend, sent error) (stale bool, err error) {
	defer s.release(g.hold)
	value, err := "", sent
	if err == nil {
		value, err = s.be.readGuard()
	}
	if err != nil {
		// The backend skipped the client's Query: it did not run.
		if g.br != nil {
			err = s.skippedBoundRead(g.br, err)
		}
		return isStale(err), ignoreStale(err)
	}
	if g.guard.pin {
		if err := g.c.pinnedBy(s.be.pinValue(value)); err != nil {
			return false, err
		}
	}
	s.obs.Timestamp(g.c.ts)
	for _, u := range g.units {
		s.units.push(u)
	}
	err = s.exchange(ctx)
	if lost := s.be.reads.lost; lost {
		// The client dropped the read's statement unseen: nothing ran,
		// its error and ReadyForQuery were not relayed; planned again
		// and sent as text (the statement is forgotten).
		s.be.reads.lost = false
		return err == nil, err
	}
	return false, err
}

// guardedReadMessages are the messages that send a guarded read st (of
// the present, or AS OF c.ts) after its guard, and the units that follow
// their answers: a simple Query of its text, or, when its plan has a
// Bound, the run of a statement prepared on the connection (br).
func (s *Session) guardedReadMessages(st *planner.Statement, c *choice, guard guardKey) ([]pgproto3.FrontendMessage, []unit, *boundRead) {
	tsText := ""
	if guard.pin {
		tsText = readTSExpr
	}
	if st.Bound != nil && st.Template != nil {
		if br := s.be.reads.boundReadOf(st.Bound, guard, tsText, c.ts); br != nil {
			return br.msgs, br.units, br
		}
	}
	sql := st.SQL
	switch {
	case st.Template == nil:
	case guard.pin:
		sql = st.Template.Render(readTSExpr)
	default:
		sql = st.Template.RenderLiteral(c.ts)
	}
	return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}, []unit{{kind: uQuery, relayZ: true}}, nil
}

// skippedBoundRead follows a guard's failure in front of the bound read
// br: the backend skipped br's messages up to its Sync, whose
// ReadyForQuery comes after those of the Syncs readGuard sent, and is
// read here; br's statement was not prepared.
func (s *Session) skippedBoundRead(br *boundRead, err error) error {
	s.be.reads.skipped(br)
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.IsFatal() {
		return err // the connection is gone
	}
	for {
		typ, _, rerr := s.be.next()
		if rerr != nil {
			return s.lost(rerr)
		}
		if typ == 'Z' {
			return err
		}
	}
}

// isStale reports whether err is the guard's refusal (readGuardSQL), says
// that its prepared statement is gone (the client's DEALLOCATE ALL or
// DISCARD ALL), or that the session restricts the view the guard read
// (readGuard noted it: the next guard calls pin() instead): either way
// nothing ran, and the read is planned again, the ordinary way.
func isStale(err error) bool {
	pe := pgerr.As(err)
	return refusedBy(pe, staleMarker) || restrictedView(pe) ||
		pe.Code == pgerr.InvalidSQLStatementName && strings.Contains(pe.Message, guardStatement)
}

// restrictedView reports whether pe is PostgreSQL's refusal of a view in a
// session with restrict_nonsystem_relation_kind = 'view' (pg_dump sets it;
// so may a role's settings or startup options, or set_config in a
// function): mzproxy's views are non-system views. The backend refuses
// when it rewrites the statement, so nothing of it ran.
func restrictedView(pe *pgerr.Error) bool {
	return pe.Code == pgerr.ObjectNotInPrerequisiteState &&
		strings.HasPrefix(pe.Message, "access to non-system view ") && strings.HasSuffix(pe.Message, " is restricted")
}

// refusedBy reports whether pe is a guard's deliberate refusal: its read
// of the setting marker names (refusal; readGuardSQL, pinGuardSQL), whose
// message quotes the name in any lc_messages. A client's own error that
// says the same is told apart by which statement failed: the guard's
// answers come before the read's (TestHostile10ForgedRefusals).
func refusedBy(pe *pgerr.Error, marker string) bool {
	return pe.Code == pgerr.UndefinedObject && strings.Contains(pe.Message, `"`+marker+`"`)
}

// ignoreStale is err, nil when it is the guard's refusal.
func ignoreStale(err error) error {
	if isStale(err) {
		return nil
	}
	return err
}

// pinnedBy sets a read of the present's timestamp to the one its guard
// pinned (value, as text).
func (c *choice) pinnedBy(value string) error {
	t, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return pgerr.New(pgerr.InternalError, "pinned read timestamp %q: %v", value, err)
	}
	c.ts, c.upper, c.oracle = t, t+1, &t
	return nil
}

// sendGuarded sends the guard, then the client's read msgs; its answers
// are read by guardedAnswers.
func (s *Session) sendGuarded(guard guardKey, msgs []pgproto3.FrontendMessage) error {
	if err := s.be.sendGuard(guard, &s.pinMsgs); err != nil {
		return s.lost(err)
	}
	for _, m := range msgs {
		if err := s.be.w.Send(m); err != nil {
			return s.lost(err)
		}
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lostWrite(err)
	}
	return nil
}

// guardStatement names the read guard's prepared statement and portal on
// the session's backend connection (the guard of a simple Query's read of
// the present; the other shapes add a suffix, see guardSlot).
var guardStatement = ownName("mzproxy_read_guard")

// guardKey is what the text of a read guard depends on (readGuardSQL's
// argument). viewless and shape are set by sendGuard, not by its callers:
// the session restricts views (backend.viewsRestricted), and a guard that
// pins calls pin() rather than read the view settled_pin; shape is what
// the session's guards learned allows (readPeek). viewless shares its slot
// with shapeLearn: a session does not go back.
type guardKey struct {
	rev      int64
	path     string
	pin      bool
	viewless bool
	shape    guardShape
}

// guardSlots is the number of shapes of a read guard: with or without the
// pin, with or without the search_path check, and for a pin, read through
// a learned count or not.
const guardSlots = 8

// guardSlot is the slot of key's shape, and the name its statement is
// prepared under. Each shape has its own, so that a session alternating a
// simple Query and a prepared read, or a read of the present and one AS
// OF, does not prepare the guard again at each (issue 15): only a new
// catalog revision or search_path does.
func guardSlot(key guardKey) (int, string) {
	slot := 0
	if !key.pin {
		slot++
	}
	if key.path == "" {
		slot += 2
	}
	if key.shape == shapePeek {
		slot += 4
	}
	return slot, guardNames[slot]
}

// guardNames are the guard's statement names by slot (guardSlot).
var guardNames = func() (names [guardSlots]string) {
	base := [4]string{guardStatement, guardStatement + "_asof", guardStatement + "_bind", guardStatement + "_asof_bind"}
	for i := range names {
		names[i] = base[i%4] + [2]string{"", "_peek"}[i/4]
	}
	return names
}()

// preparedGuard is a read guard prepared on a connection, for key, when
// ok.
type preparedGuard struct {
	key guardKey
	ok  bool
}

// sendGuard queues the read guard of key, unflushed, as the Bind and
// Execute of its shape's statement, prepared first unless the connection
// has it for key already: the backend parses and plans the guard once per
// catalog revision, not once per read.
//
// Its portal is not closed (issue 15: a message each way per read): the
// guard runs only outside a transaction block, at the start of what the
// backend runs as one implicit transaction (a simple Query's, or a
// client's batch up to its Sync), whose end drops the portal, before the
// next guard binds it again. Its name is the proxy's own, which no client
// statement may name (own_names.go).
func (b *backend) sendGuard(key guardKey, m *pinMessages) error {
	key.viewless = key.pin && b.viewsRestricted
	var params [][]byte
	if key.pin && !key.viewless {
		key.shape = b.peek.shape()
		if key.shape != shapeLearn {
			params = b.peek.param[:]
		}
	}
	slot, name := guardSlot(key)
	b.guardUsed = slot
	if g := &b.guards[slot]; !g.ok || g.key != key {
		// Closed first: it may exist for another key (closing one that
		// does not is no error, and answers CloseComplete all the same).
		if err := b.sendPair(m.closeOf('S', name), m.parseOf(name, readGuardSQL(key), nil)); err != nil {
			return err
		}
		*g = preparedGuard{key: key, ok: true}
	}
	return b.sendPair(m.bindOf(name, name, params), m.executeOf(name))
}

// readGuard reads the answers to sendGuard's messages, up to its
// Execute's CommandComplete, and returns the guard's value. After a
// failure the guard is prepared again next time: the statement may be
// gone (a client's DEALLOCATE ALL) or half made. A refused view marks the
// session: its guards call pin() from now on (its Parse, or its Bind after
// the backend planned it again, failed).
func (b *backend) readGuard() (string, error) {
	var value string
	var gotRow bool
	for {
		typ, frame, err := b.next()
		if err != nil {
			b.guards[b.guardUsed].ok = false
			return "", connectionLost(err)
		}
		switch typ {
		case 'D':
			firstValue(frame, &value, &gotRow)
		case 'C':
			return value, nil
		case 'E':
			var er pgproto3.ErrorResponse
			_ = er.Decode(wire.Body(frame))
			pe := backendError(&er)
			if refusedBy(pe, staleMarker) {
				// The guard ran and refused: its statement stays.
				if b.guards[b.guardUsed].key.shape == shapePeek {
					// A write since the count, or P old: learn again.
					b.peek.steady = false
				}
			} else {
				b.guards[b.guardUsed].ok = false
			}
			if restrictedView(pe) {
				b.viewsRestricted = true
			}
			return "", b.internalFailed(pe)
		}
	}
}

// guardedChoice chooses a guarded read's timestamp (a read of the present:
// left for the guard) and holds its inputs.
func (s *Session) guardedChoice(ctx context.Context, st *planner.Statement, fr *storage.FrontierState) (*choice, heldRead, error) {
	if st.AsOf == nil {
		l, err := s.currentLease(ctx)
		if err != nil {
			return nil, heldRead{}, err
		}
		// In memory: at the floor.
		h, err := s.holdRead(ctx, &choice{ts: l.Floor(), inputs: st.Inputs}, true)
		return &choice{inputs: st.Inputs}, h, err
	}
	c, err := s.chooseTimestamp(ctx, st, fr)
	if err != nil {
		return nil, heldRead{}, err
	}
	s.enter(timeouts.PhaseHold)
	h, err := s.holdRead(ctx, c, exactTimestamp(st, false))
	if err != nil {
		return nil, heldRead{}, err
	}
	if err := s.awaitUpper(ctx, c); err != nil {
		s.release(h)
		return nil, heldRead{}, err
	}
	return c, h, nil
}
