package proxy

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/lease"
	"github.com/mzproxy/mzproxy/proxy/storage"
	"github.com/mzproxy/mzproxy/timeouts"
)

// Read-only transactions, as Materialize runs them: a transaction block
// whose first statement reads is read at one timestamp, chosen at that
// first statement, and holds it until it ends.
//
// The backend gives the snapshot: before the first read the proxy makes
// the backend transaction REPEATABLE READ (unless the client already chose
// REPEATABLE READ or SERIALIZABLE), then reads the oracle in it, in the
// statement that takes the transaction's snapshot, so the snapshot holds
// exactly the writes at or below its timestamp, and every later statement
// of the transaction reads the same data: without any lock when no write
// slot was taken since pin_peek, which rides in front of the BEGIN
// (pinQuick, whose statements ride in front of the first read when that is
// a plain read: pin_read.go); else with the
// writers' gate held (pinGated; see
// proxy/storage: the pin). Reads the proxy rewrites (AS OF-less
// history reads, EXPLAIN TIMESTAMP) use that timestamp.
//
// The transaction's timedomain is Materialize's: the managed objects in the
// schemas of the relations named by the first read that names any, plus
// what they read through views. A later read naming a managed object
// outside it is refused (25000). Unmanaged relations (pg_catalog, tables
// made outside mzproxy) have no timestamps and are always allowed; a read
// with AS OF names its own time and is exempt, as in Materialize, but it
// cannot read past the transaction's snapshot.
//
// A write in such a transaction is not refused, but its T is later than
// the reads: its COMMIT fails with 40001 when a table it read was written
// since the pin (storage.OpenWriteAfterReadFor: the backend checks the
// tables the transaction holds locks on), and under REPEATABLE READ
// PostgreSQL fails a write of a row changed since the snapshot.

// txnPhase is where a client transaction block stands.
type txnPhase uint8

const (
	// txnNone: no transaction block the proxy follows (autocommit, or a
	// block begun in a query string with other statements).
	txnNone txnPhase = iota
	// txnFresh: BEGIN ran; no statement that takes a snapshot yet.
	txnFresh
	// txnPinned: the first statement was a read; ts is the transaction's.
	txnPinned
	// txnOther: the first statement was not a read; nothing is pinned.
	txnOther
)

// readTxn is the state of the session's transaction block.
type readTxn struct {
	phase  txnPhase
	ts     uint64
	oracle uint64 // the oracle's read timestamp in the snapshot
	upper  uint64 // the upper in the snapshot
	// writes is the number of write slots taken in the database when the
	// transaction was pinned: a write of it checks that no table it read
	// was written since (storage.OpenWriteAfterReadFor).
	writes int64
	// domain is the timedomain's schemas (nil until a read names a
	// managed object): its objects are the catalog's in them. held is
	// the set of managed tables held at ts, by holds.
	domain map[string]bool
	held   map[uint64]bool
	holds  []heldRead
	// fence holds every collection at fenceTS, the lease's floor, from
	// before the pin until the timedomain is held at ts (fenceFloor);
	// nil when there is none.
	fence   *lease.Lease
	fenceTS uint64
	// catalog is mzproxy's catalog when the transaction was pinned;
	// searchPath the session's, as read in the transaction (nil after a
	// SET of it).
	catalog    *catalogSnapshot
	searchPath []string
	// begin is what the BEGIN of the transaction named (isolation level,
	// read-only mode), while the proxy can tell the transaction's
	// characteristics from it and the session's defaults: nil once
	// another statement ran before the first read (SET TRANSACTION,
	// SAVEPOINT, ...), or when the block did not begin with one BEGIN.
	begin *planner.TxnOptions
	// beginSQL is the client's BEGIN, run again when the gate-less pin
	// fails and the transaction must be begun anew; peek is what
	// pin_peek answered before it ("" for NULL or not asked).
	beginSQL string
	peek     *string
	// guard is the pin queued in front of the first read, whose answers
	// firstReadAfterGuard reads (pin_read.go).
	guard *pinGuard
}

// pinned reports whether the session's reads use the transaction's
// timestamp: a read-only transaction that has not written.
func (s *Session) pinned() bool { return s.txn.phase == txnPinned && !s.writeSlot }

// txnQuery follows a client Query through its transaction block: it notes
// BEGIN, pins the timestamp at the first read, and refuses a read outside
// the timedomain.
func (s *Session) txnQuery(ctx context.Context, sql string) error {
	s.noteStatementText(sql)
	switch {
	case s.tx == txFailed:
	case s.txn.phase == txnFresh || s.pinned():
		if g := s.pinWithRead(ctx, sql, ""); g != nil {
			// Answered in firstReadAfterGuard, which sends the read.
			return s.orLost(s.sendPinGuard(ctx, g))
		}
		// Nothing is outstanding: a Query waits for its answers.
		ready := func() (bool, error) { return true, nil }
		return s.orLost(s.txnStatements(ctx, sql, ready))
	case s.tx == txIdle && startsWithWord(sql, "begin", "start"):
		// The Sync's ReadyForQuery ends the implicit transaction, and with
		// it what the session follows of one: it comes first.
		// Planned once (it was twice per BEGIN).
		opts := beginOptions(s.proxy.planner, sql)
		if opts != nil {
			if err := s.orLost(s.syncBeforeBegin(ctx)); err != nil {
				return err
			}
		}
		s.noteBegin(sql, opts)
		return s.orLost(s.peekBeforeBegin())
	}
	return nil
}

// peekBeforeBegin queues pin_peek (storage.PinPeekSQL, prepared once per
// session) in front of the client's BEGIN, in the same round trip and in
// an implicit transaction of its own, ended by a Sync of the proxy's own,
// for the gate-less pin of the transaction's first read (pinQuick). It
// runs only when nothing of the client's is outstanding: that Sync would
// end a batch of the client's.
//
// When the session's last two pins found the same count of writes, the
// last one's count stands in for the peek, and nothing is sent (see
// settledWrites).
func (s *Session) peekBeforeBegin() error {
	if s.txn.phase != txnFresh || s.units.len() > 0 || s.be.unsynced || s.skipping {
		return nil
	}
	peek := new(string)
	s.txn.peek = peek
	if s.known.settled.steady {
		*peek = s.known.settled.writes
		return nil
	}
	m := &s.pinMsgs
	send := func(msg pgproto3.FrontendMessage, kind unitKind) error {
		if err := s.be.w.Send(msg); err != nil {
			return err
		}
		s.units.push(unit{kind: kind, disp: swallow, beforeBegin: peek})
		return nil
	}
	if !s.pinPeekPrepared {
		// Closed first: a client may have prepared the name.
		if err := send(m.closeOf('S', pinPeekStatement), uClose); err != nil {
			return err
		}
		if err := send(m.parseOf(pinPeekStatement, s.pinPeekSQL(), nil), uParse); err != nil {
			return err
		}
		s.pinPeekPrepared = true
	}
	// No Close of the portal: the Sync ends the peek's implicit
	// transaction, and the portal with it (two messages less per
	// read-only transaction).
	if err := send(m.bindOf(pinPeekStatement, pinPeekStatement, nil), uBind); err != nil {
		return err
	}
	if err := send(m.executeOf(pinPeekStatement), uExecute); err != nil {
		return err
	}
	return send(&m.sync, uSync)
}

// settledWrites is the count of write slots that the session's last pin
// read (its writes: the peek it checked, or pinned_writes with the gate
// held). Every slot counted up to it had ended before that pin's
// snapshot: pin_peek answered the count only when a pin had settled every
// slot counted (writes_seen, set with the gate held, which waits for the
// writers), and the gate-less check found the count unchanged since; a
// gated pin holds the gate itself. So the count serves as the peek of any
// later transaction of the session: its check answers P only when the
// count is still the same, no slot taken since, and every slot counted
// ended before its snapshot too (pin_trim.sql). The count only grows
// while the session's backend connection lives (the unlogged sequence
// restarts only with a crash, which ends the connection), so a stale
// count only fails the check, and the transaction pins with the gate.
//
// steady: the pin before the last found the same count, no write came
// between them. Only then is the count used: where writes come often the
// peek, which a pin of anyone settles, fails less than an old count, and
// a failed check costs a gated pin. A read-only workload skips the
// peek's Sync and its implicit transaction in the backend (docs/read-cost.md).
//
// revision is the catalog revision in that pin's snapshot: the revision
// of any later snapshot whose count is still the same (every revision is
// bumped by a DDL holding a write slot, counted before it commits), so a
// guard for that count need not read it (pinGuardSQL).
type settledWrites struct {
	count    int64
	revision int64
	writes   string // count as text; "" before the session's first pin
	steady   bool
}

// note follows a pin that read count and revision.
func (c *settledWrites) note(count, revision int64) {
	c.steady = c.writes != "" && c.count == count && c.revision == revision
	if !c.steady {
		c.count, c.revision, c.writes = count, revision, strconv.FormatInt(count, 10)
	}
}

// pinPeekSQL is the peek's text: it reads a view (viewPeekSQL) unless the
// session restricts views.
func (s *Session) pinPeekSQL() string {
	if s.be.viewsRestricted {
		return storage.PinPeekFunctionSQL
	}
	return viewPeekSQL
}

// viewsRestrictedPeek is what viewPeekSQL answers in a session that
// restricts views now.
const viewsRestrictedPeek = "views restricted"

// viewPeekSQL is storage.PinPeekSQL, which reads the view settled_writes,
// answering viewsRestrictedPeek instead when the session restricts views.
// Its plan, made before the session did (SET restrict_nonsystem_relation_kind
// or set_config), still reads the view until the backend plans it again;
// the check and the guard may be prepared only now, in the transaction,
// and would then fail, the check inside a batch of the client's too. So
// the peek tells, and they are prepared calling the functions.
//
// A count is followed by idleTimeoutPeek when the session's
// idle_in_transaction_session_timeout is set: whatever set it (its role's
// or database's default, the server's configuration), the event loop then
// sends a read-only transaction's BEGIN as it is (replyBegin).
const viewPeekSQL = "SELECT CASE WHEN pg_catalog.current_setting('restrict_nonsystem_relation_kind', true) LIKE '%view%'" +
	" THEN '" + viewsRestrictedPeek + "' ELSE p.w::text" + idleTimeoutSuffixSQL + " END FROM (" + storage.PinPeekSQL + ") p"

// idleTimeoutPeek follows the count viewPeekSQL answers, and the value of
// a pin's statements (noteGatedPin), when the session's
// idle_in_transaction_session_timeout is not 0.
const idleTimeoutPeek = " idle"

// keepPeek keeps the peek's answer, a DataRow, in peek; an answer that
// the session restricts views is kept as none (the transaction pins with
// the gate), and the session's pin statements call the functions from now
// on.
func (s *Session) keepPeek(frame []byte, peek *string) {
	keepFirstValue(frame, peek)
	switch {
	case *peek == viewsRestrictedPeek:
		*peek = ""
		s.restrictViews()
		s.known.noIdleTimeout = false
	case strings.HasSuffix(*peek, idleTimeoutPeek):
		*peek = strings.TrimSuffix(*peek, idleTimeoutPeek)
		s.known.noIdleTimeout = false
	case *peek != "" && !s.be.viewsRestricted:
		s.known.noIdleTimeout = true
	}
}

// peekRefusedView reports whether frame, an ErrorResponse to u, is the
// peek's (a unit before a BEGIN) refused for reading a view: the session
// restricts views (see restrictedView). Then nothing ran, the client does
// not see it (its BEGIN, behind the peek's Sync, runs as usual), the
// transaction pins with the gate (no peek), and the session's pin
// statements call the functions from now on.
func (s *Session) peekRefusedView(u *unit, frame []byte) bool {
	if u.beforeBegin == nil || errorCode(wire.Body(frame)) != string(pgerr.ObjectNotInPrerequisiteState) {
		return false
	}
	var er pgproto3.ErrorResponse
	if er.Decode(wire.Body(frame)) != nil || !restrictedView(backendError(&er)) {
		return false
	}
	s.restrictViews()
	s.dropPeek(u)
	return true
}

// peekCanceled reports whether frame, an ErrorResponse to u, is the
// peek's (a unit before a BEGIN) 57014: the statement's context ended
// before the BEGIN was sent, and the proxy's CancelRequest, sent behind
// it, stopped the peek. The peek is the proxy's own: the client does not
// see its error, and its BEGIN, behind the peek's Sync, runs as usual (as
// in PostgreSQL when a cancel comes after the statement; before, the
// client read 57014 and ReadyForQuery 'T': a block begun, which a client
// takes for none). The transaction pins with the gate (no peek).
func (s *Session) peekCanceled(u *unit, frame []byte) bool {
	if u.beforeBegin == nil || errorCode(wire.Body(frame)) != string(pgerr.QueryCanceled) {
		return false
	}
	// Not the client's statement interrupted (interrupted counts those).
	s.canceledReply = false
	s.dropPeek(u)
	return true
}

// dropPeek drops the peek u that failed: the backend skips to the
// peek's own Sync, and the transaction pins with the gate. The peek's
// statement is prepared again next time (the Parse may be what failed).
func (s *Session) dropPeek(u *unit) {
	*u.beforeBegin = ""
	s.pinPeekPrepared = false
	s.skipping = true
	for u := s.units.front(); u != nil && u.kind != uSync; u = s.units.front() {
		s.units.pop()
	}
}

// restrictViews notes that the session restricts views: the pin's
// statements, prepared again at their next use, call pin_peek and
// pin_check rather than read the views (storage.PinPeekFunctionSQL), and
// the read guard calls pin() (readGuardSQL).
func (s *Session) restrictViews() {
	s.be.viewsRestricted = true
	s.pinPeekPrepared, s.pinCheckPrepared = false, false
	s.pinGuardPrepared, s.pinGuardRevPrepared, s.pinBeginPrepared = false, false, false
}

// The proxy's prepared statements of the gate-less pin: pin_peek, the
// isolation level's raise and the check (the last two prepared together,
// under pinCheckPrepared).
var (
	pinPeekStatement  = ownName("mzproxy_pin_peek")
	pinRaiseStatement = ownName("mzproxy_pin_raise")
	pinBeginStatement = ownName("mzproxy_pin_begin")
	// pinBeginRaisedStatement begins the block REPEATABLE READ: the BEGIN
	// and the raise in one statement (loop_txn.go, sendPinBegin).
	pinBeginRaisedStatement = ownName("mzproxy_pin_begin_rr")
	pinCheckStatement       = ownName("mzproxy_pin_check")
)

// keepFirstValue keeps the first column of a DataRow in v ("" for NULL).
// It reads the column in place (DataRow.Decode made a slice of every
// value, twice per read-only transaction).
func keepFirstValue(frame []byte, v *string) {
	if value, ok := firstColumn(wire.Body(frame)); ok {
		*v = string(value)
	}
}

// firstColumn is the first value of a DataRow's body: a column count
// (int16), then each column's length (int32, -1 for NULL) and bytes.
func firstColumn(body []byte) ([]byte, bool) {
	if len(body) < 6 || binary.BigEndian.Uint16(body) == 0 {
		return nil, false
	}
	n := int32(binary.BigEndian.Uint32(body[2:]))
	switch {
	case n < 0:
		return nil, true
	case int(n) > len(body)-6:
		return nil, false
	}
	return body[6 : 6+n], true
}

// syncBeforeBegin ends, with a Sync of the proxy's own queued before the
// client's BEGIN, an extended-protocol batch the client left unsynced
// (asyncpg's prepare is Parse, Describe, Flush). PostgreSQL runs a simple
// Query in that batch's implicit transaction and BEGIN turns it into the
// block, with the snapshot the batch's Parse of a SELECT already took: the
// read-only transaction could then no longer be made REPEATABLE READ
// (25001 at its first read). Ending the batch first changes nothing the
// client can see when the batch left no portal (prepared statements
// outlive Sync, and the Query replaces the unnamed portal anyway) and no
// write; otherwise, or when the backend skips to Sync after an error (it
// then ignores the Query), the batch is left as PostgreSQL would have it.
func (s *Session) syncBeforeBegin(ctx context.Context) error {
	if !s.be.unsynced && s.units.len() == 0 || len(s.portals) > 0 || s.writeSlot {
		return nil
	}
	if ok, err := s.quiesce(ctx); err != nil || !ok {
		return err
	}
	if err := s.internalMsg(&pgproto3.Sync{}, uSync); err != nil {
		return err
	}
	return s.exchange(ctx)
}

// orLost passes err on; a failed write to the backend becomes the FATAL
// error the backend sent before it closed, if it sent one (an idle
// transaction's timeout).
func (s *Session) orLost(err error) error {
	if err == nil {
		// Before pe: its address escapes, so declaring it allocates.
		return nil
	}
	var pe *pgerr.Error
	if errors.As(err, &pe) {
		return err
	}
	return s.lostWrite(err)
}

// txnParse runs before a client Parse is forwarded: parsing a SELECT takes
// the backend transaction's snapshot, so a read-only transaction is pinned
// here when this is its first read.
func (s *Session) txnParse(ctx context.Context, m *pgproto3.Parse) error {
	s.noteStatementText(m.Query)
	if s.tx == txFailed || s.txn.phase != txnFresh {
		return nil
	}
	return s.txnExtended(ctx, m.Query)
}

// txnBind runs before a client Bind is forwarded: a Bind of BEGIN begins a
// block (in a pipeline, before any ReadyForQuery says so); a Bind of a
// statement prepared earlier can be the first read of one; and every read
// bound in a pinned transaction is checked against the timedomain.
func (s *Session) txnBind(ctx context.Context, m *pgproto3.Bind) error {
	st, ok := s.stmts[m.PreparedStatement]
	var sql string
	if ok {
		sql = st.sql
		s.noteStatementText(sql)
	}
	switch {
	case !ok || s.tx == txFailed:
	case s.txn.phase == txnFresh || s.pinned():
		if g := s.pinWithRead(ctx, sql, m.DestinationPortal); g != nil {
			// Answered in settleGuard, before the read's answers.
			g.sql, g.extended = sql, true
			return s.orLost(s.sendPinGuard(ctx, g))
		}
		return s.txnExtended(ctx, sql)
	case s.tx == txIdle && startsWithWord(sql, "begin", "start"):
		s.noteBegin(sql, beginOptions(s.proxy.planner, sql))
		return s.orLost(s.peekBeforeBegin())
	}
	return nil
}

// txnExtended runs txnStatements for an extended-protocol message; the
// proxy's own queries wait until the backend has answered everything
// before it.
func (s *Session) txnExtended(ctx context.Context, sql string) error {
	ready := func() (bool, error) { return s.quiesce(ctx) }
	if err := s.orLost(s.txnStatements(ctx, sql, ready)); err != nil {
		return s.failExtended(ctx, err)
	}
	return nil
}

// noteBegin starts following a transaction block when sql is BEGIN or
// START TRANSACTION alone: opts, its beginOptions, are not nil.
func (s *Session) noteBegin(sql string, opts *planner.TxnOptions) {
	if opts != nil {
		s.endTxn()
		s.txn.phase = txnFresh
		s.txn.begin = opts
		s.txn.beginSQL = sql
	}
}

// txnStatements pins a fresh transaction whose first statement in sql
// reads, and checks the reads in sql against the timedomain. ready is
// called before the proxy's first query of its own; false means the
// backend is skipping messages after an error, and so does the proxy.
//
// Reads are planned against the catalog as it was when the transaction
// was pinned, so a read costs no round trip: a managed object created
// since is not known to be managed, and is not refused.
func (s *Session) txnStatements(ctx context.Context, sql string, ready func() (bool, error)) error {
	if s.txn.phase == txnFresh {
		if !s.beginsReadOnly(sql) {
			// What ran may have changed the transaction's characteristics.
			s.txn.begin = nil
			return nil
		}
		if ok, err := ready(); err != nil || !ok {
			return err
		}
		if err := s.pin(ctx); err != nil {
			return err
		}
	}
	return s.txnReads(ctx, sql, ready)
}

// txnReads checks the reads in sql, in a pinned transaction, against the
// timedomain and holds what they read; ready as for txnStatements.
func (s *Session) txnReads(ctx context.Context, sql string, ready func() (bool, error)) error {
	plan := func() ([]*planner.Statement, error) {
		return s.proxy.planner.Plan(sql, s.txn.catalog, planner.Options{SearchPath: s.txn.searchPath})
	}
	stmts, err := plan()
	if err != nil || !slices.ContainsFunc(stmts, (*planner.Statement).ReadOnly) {
		// (A statement that does not parse gets the backend's error.)
		s.afterStatements(stmts)
		return nil
	}
	if s.txn.searchPath == nil {
		if ok, err := ready(); err != nil || !ok {
			return err
		}
		path, err := s.searchPath(ctx)
		if err != nil {
			return err
		}
		s.txn.searchPath = planner.EffectiveSearchPath(path, s.user)
		if stmts, err = plan(); err != nil {
			return nil
		}
	}
	for _, st := range stmts {
		if !st.ReadOnly() || st.AsOf != nil {
			continue
		}
		if refused := s.inTimedomain(ctx, st); refused != nil {
			if ok, err := ready(); err != nil || !ok {
				return err
			}
			return s.refuse(ctx, refused)
		}
	}
	s.afterStatements(stmts)
	return nil
}

// beginsReadOnly reports whether the first statement in sql that takes a
// snapshot reads, so that sql begins a read-only transaction; when it does
// not, the transaction is not read-only.
func (s *Session) beginsReadOnly(sql string) bool {
	if planner.PlainRead(sql) {
		return true
	}
	stmts, err := s.proxy.planner.Plan(sql, emptyCatalog{}, planner.Options{})
	if err != nil {
		return false
	}
	i := slices.IndexFunc(stmts, func(st *planner.Statement) bool { return !takesNoSnapshot(st) })
	switch {
	case i < 0:
		return false
	case stmts[i].ReadOnly():
		return true
	}
	s.txn.phase = txnOther
	return false
}

// afterStatements follows what statements about to run change: a SET of
// search_path (read again before the next read), COMMIT or ROLLBACK AND
// CHAIN (a new transaction begins).
func (s *Session) afterStatements(stmts []*planner.Statement) {
	for _, st := range stmts {
		switch {
		case st.Var != nil && (st.Var.Name == "search_path" || st.Var.Name == "all"):
			s.txn.searchPath = nil
		case st.Kind == planner.KindTransaction && st.Txn.Chain && st.Txn.Ends():
			s.endTxn()
			s.txn.phase = txnFresh
			return
		}
	}
}

// takesNoSnapshot reports whether a statement leaves a fresh transaction
// fresh: PostgreSQL lets SET TRANSACTION follow it.
func takesNoSnapshot(st *planner.Statement) bool {
	switch st.Kind {
	case planner.KindSet, planner.KindShow, planner.KindReset:
		return true
	case planner.KindTransaction:
		return st.Txn.Kind == planner.TxnSavepoint || st.Txn.Kind == planner.TxnRelease
	}
	return false
}

// pin makes the backend transaction REPEATABLE READ and pins it, so that
// its snapshot holds exactly the commits at or below the pinned timestamp;
// and reads the catalog and the search_path the transaction's reads are
// planned with. pinQuick needs no lock (storage.PinCheckSQL); pinGated
// takes the snapshot with the writers' gate held (storage.PinSnapshotSQL),
// and makes a READ ONLY transaction READ WRITE for the pin, which moves
// the oracle's sequences, and READ ONLY again after it.
//
// Which of those statements to send depends on the transaction's
// isolation level and read-only mode. When the proxy can tell them (see
// expectedCharacteristics) the pin is one round trip: the SHOWs that
// check the guess ride in front of it (no SHOW takes a snapshot), and a
// wrong guess fails the transaction with 40001 (knownTxnMismatch).
// Otherwise the SHOWs are a round trip of their own first.
func (s *Session) pin(ctx context.Context) error {
	expected, guessed := s.expectedCharacteristics()
	var err error
	if guessed && s.txn.peek != nil && *s.txn.peek != "" {
		err = s.pinQuick(ctx, expected)
	} else {
		err = s.pinGated(ctx, expected, guessed)
	}
	if err == nil && ctx.Err() != nil {
		// The statement's cancel or deadline came while the pin ran (a
		// gated pin waits for the writers' gate): the CancelRequest sent
		// to the backend can find it between the pin's answer and the
		// client's statement, waiting for input, where PostgreSQL drops
		// it, and the client's statement would then run to its end. It
		// is canceled here instead, as a cancel before the pin was sent
		// is (canceledUnsent): 57014, and the block failed
		// (abortAfterRefusal), as a cancel of the statement waiting on
		// a lock does directly (docs/outside.md, session 21).
		return canceledUnsent(ctx)
	}
	return err
}

// pinAsks are the SHOWs in front of a pin. The search_path is asked every
// time: it rides in the same batch, and a function may have SET it without
// any statement text showing it.
var pinAsks = []string{"SHOW transaction_isolation", "SHOW search_path", "SHOW transaction_read_only"}

// pinQuick pins without the gate (storage.PinCheckSQL), when pin_peek
// answered before the transaction's BEGIN and the proxy can tell the
// transaction's characteristics (expected): one round trip of at most two
// statements, the isolation level raised if needed, then the check, which
// takes the snapshot and reads in it what checks the guess (see
// quickPinSQL). When the check fails (a write began since the peek) the
// backend transaction is rolled back and begun again with the client's
// BEGIN, and pinned with the gate in the same round trip: nothing of the
// client's ran in it yet.
func (s *Session) pinQuick(ctx context.Context, expected txnCharacteristics) error {
	s.fenceFloor(ctx)
	v, err := s.quickPinValue(ctx, !snapshotIsolation(expected.isolation), peekValue(*s.txn.peek))
	if err != nil && restrictedView(pgerr.As(err)) {
		// The check read a view the session restricts now (prepared, or
		// planned again, since the peek): nothing of the client's ran.
		// Outside a batch of the client's it is pinned anew with the gate,
		// as when the check fails.
		s.restrictViews()
		if !s.be.clientBatch {
			return s.pinGatedAfter(ctx, []string{"ROLLBACK", s.txn.beginSQL}, expected, true)
		}
	}
	if err != nil {
		return s.pinFailed(err, true, expected)
	}
	f := strings.SplitN(v, "|", 6)
	if len(f) != 6 {
		return pgerr.New(pgerr.InternalError, "mzproxy's pin answered %q", v)
	}
	// The transaction's level before the SET: its BEGIN's, or the
	// default's (nothing ran since BEGIN).
	isolation := cmp.Or(s.txn.begin.Isolation, f[0])
	asked := []string{isolation, f[5], f[1]} // as pinAsks answer
	if err := s.checkAsked(ctx, asked, expected); err != nil {
		return err
	}
	s.txn.searchPath = planner.EffectiveSearchPath(s.known.searchPath, s.user)
	if f[2] != "" {
		return s.notePin(ctx, strings.Join(f[2:5], " "))
	}
	queries, pinAt := pinQueries([]string{"ROLLBACK", s.txn.beginSQL}, expected)
	values, err := s.be.internalValues(ctx, queries...)
	if err != nil {
		return s.pinFailed(err, false, expected)
	}
	return s.noteGatedPin(ctx, values[pinAt])
}

// quickPinValue runs pinQuick's statements in one round trip: the SET of
// the isolation level if raise, then the check (quickPinSQL) for
// pin_peek's answer peek; it returns the check's value. Both are the
// proxy's prepared statements, prepared once per session (the backend
// parsed the SET for every read-only transaction). A failure is
// internalFailed's.
func (s *Session) quickPinValue(ctx context.Context, raise bool, peek int64) (string, error) {
	if ctx.Err() != nil {
		return "", canceledUnsent(ctx)
	}
	ends := 0 // the CloseCompletes and CommandCompletes to come
	var msgs []pgproto3.FrontendMessage
	prepare := !s.pinCheckPrepared
	if prepare {
		// Closed first: a client may have prepared the names.
		msgs = append(msgs, &pgproto3.Close{ObjectType: 'S', Name: pinRaiseStatement},
			&pgproto3.Parse{Name: pinRaiseStatement, Query: "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"})
		ends++
		s.pinCheckPrepared = true
	}
	if raise {
		msgs = append(msgs, &pgproto3.Bind{DestinationPortal: pinRaiseStatement, PreparedStatement: pinRaiseStatement},
			&pgproto3.Execute{Portal: pinRaiseStatement},
			&pgproto3.Close{ObjectType: 'P', Name: pinRaiseStatement})
		ends += 2
	}
	if prepare {
		// After the SET: parsing a SELECT takes the transaction's
		// snapshot.
		msgs = append(msgs, &pgproto3.Close{ObjectType: 'S', Name: pinCheckStatement},
			&pgproto3.Parse{Name: pinCheckStatement, Query: quickPinSQL(s.be.viewsRestricted), ParameterOIDs: []uint32{int8OID}})
		ends++
	}
	msgs = append(msgs, &pgproto3.Bind{DestinationPortal: pinCheckStatement, PreparedStatement: pinCheckStatement,
		Parameters: [][]byte{strconv.AppendInt(nil, peek, 10)}},
		&pgproto3.Execute{Portal: pinCheckStatement},
		&pgproto3.Close{ObjectType: 'P', Name: pinCheckStatement},
		&pgproto3.Flush{})
	ends += 2
	for _, m := range msgs {
		if err := s.be.w.Send(m); err != nil {
			return "", err
		}
	}
	if err := s.be.w.Flush(); err != nil {
		return "", err
	}
	v, failed, err := s.readPinValue(ends)
	if failed != nil {
		// Prepared again next time (the Parse may be what failed).
		s.pinCheckPrepared = false
		return "", s.be.internalFailed(failed)
	}
	return v, err
}

// readPinValue reads the answers to the pin's messages, up to the last of
// their ends CloseCompletes and CommandCompletes (each Close and Execute
// of theirs ends with one), and returns the first column of the row they
// answered; failed is the backend's error, not followed yet (the backend
// now skips to a Sync).
func (s *Session) readPinValue(ends int) (v string, failed *pgerr.Error, err error) {
	for ends > 0 {
		typ, frame, err := s.be.next()
		if err != nil {
			return "", nil, connectionLost(err)
		}
		switch typ {
		case 'D':
			keepFirstValue(frame, &v)
		case '3', 'C':
			ends--
		case 'E':
			var er pgproto3.ErrorResponse
			_ = er.Decode(wire.Body(frame))
			return "", backendError(&er), nil
		}
	}
	return v, nil, nil
}

// quickPinSQL is pinQuick's check for pin_peek's answer ($1), one text:
// default_transaction_isolation|transaction_read_only|t|writes|catalog
// revision|search_path (t empty when the check failed; the search_path
// last, as it may hold any character). The check reads a view, or calls
// pin_check in a session that restricts views (viewless).
func quickPinSQL(viewless bool) string {
	return "SELECT pg_catalog.current_setting('default_transaction_isolation') || '|' || pg_catalog.current_setting('transaction_read_only') || '|' || " +
		"coalesce(" + pinCheckExpr(viewless, "$1") + "::text, '') || '|' || $1 || '|' || " +
		catalogRevisionSubquery + " || '|' || pg_catalog.current_setting('search_path')"
}

// pinCheckExpr is the gate-less pin's check of peek as an expression:
// storage.PinCheckSQL, or PinCheckFunctionSQL when viewless.
func pinCheckExpr(viewless bool, peek string) string {
	check := storage.PinCheckSQL
	if viewless {
		check = storage.PinCheckFunctionSQL
	}
	return strings.TrimPrefix(check(peek), "SELECT ")
}

// peekValue is pin_peek's answer as a number (it is one, or empty).
func peekValue(peek string) int64 {
	v, _ := strconv.ParseInt(peek, 10, 64)
	return v
}

// catalogRevisionSubquery reads the catalog revision in a pin's snapshot,
// as a scalar subquery: a join of the unanalyzed one-row tables would be
// estimated at millions of rows and JIT-compiled (hundreds of
// milliseconds).
const catalogRevisionSubquery = "(SELECT revision FROM " + storage.Schema + ".catalog_revision)"

// pinGated pins with the writers' gate held while the snapshot is taken
// (storage.PinSnapshotSQL); see pin.
func (s *Session) pinGated(ctx context.Context, expected txnCharacteristics, guessed bool) error {
	return s.pinGatedAfter(ctx, nil, expected, guessed)
}

// pinGatedAfter is pinGated with the statements before first, in the same
// round trip (ROLLBACK and the client's BEGIN, to begin anew a transaction
// whose gate-less pin failed).
func (s *Session) pinGatedAfter(ctx context.Context, before []string, expected txnCharacteristics, guessed bool) error {
	s.fenceFloor(ctx)
	asks := pinAsks
	queries := before
	if guessed {
		queries = append(slices.Clip(before), asks...)
	} else {
		shown, err := s.be.internalValues(ctx, append(slices.Clip(before), asks...)...)
		if err != nil {
			return err
		}
		shown = shown[len(before):]
		s.learnAsked(shown)
		expected = characteristicsOf(shown)
		queries = nil
	}
	queries, pinAt := pinQueries(queries, expected)
	values, err := s.be.internalValues(ctx, queries...)
	if err != nil {
		return s.pinFailed(err, guessed, expected)
	}
	if guessed {
		if err := s.checkAsked(ctx, values[len(before):len(before)+len(asks)], expected); err != nil {
			return err
		}
	}
	s.txn.searchPath = planner.EffectiveSearchPath(s.known.searchPath, s.user)
	return s.noteGatedPin(ctx, values[pinAt])
}

// checkAsked learns what the SHOWs of a pin sent for expected answered,
// and refuses the transaction (40001) when they show characteristics to
// other effect: a change the proxy did not see, after which it knows no
// defaults.
func (s *Session) checkAsked(ctx context.Context, asked []string, expected txnCharacteristics) error {
	shown := characteristicsOf(asked)
	if !sameEffect(shown, expected) {
		s.known.defaults = txnCharacteristics{}
		s.learnAsked(asked)
		return s.refuse(ctx, knownTxnMismatch(expected, shown))
	}
	s.learnAsked(asked)
	return nil
}

// learnAsked keeps what the SHOWs of pin answered (transaction_isolation,
// search_path if asked, transaction_read_only): the search_path, and a
// plain BEGIN's characteristics as the defaults.
func (s *Session) learnAsked(shown []string) {
	if len(shown) == 3 {
		s.learnSearchPath(shown[1])
	}
	s.learnDefaults(characteristicsOf(shown))
}

// characteristicsOf reads the answers of pin's SHOWs.
func characteristicsOf(shown []string) txnCharacteristics {
	return txnCharacteristics{known: true, isolation: shown[0], readOnly: shown[len(shown)-1] == "on"}
}

// sameEffect reports whether the pin sent for expected did to a
// transaction with the characteristics shown what it would have sent for
// them: the same read-only mode, and a snapshot level left alone or a
// weaker one raised to REPEATABLE READ.
func sameEffect(shown, expected txnCharacteristics) bool {
	raised := !snapshotIsolation(expected.isolation)
	if shown.readOnly != expected.readOnly {
		return false
	}
	if raised {
		return shown.isolation != serializable
	}
	return snapshotIsolation(shown.isolation)
}

// pinQueries appends to queries the statements that pin a transaction
// with characteristics c; pinAt is the index of the one whose value is the
// pin (timestamp, writes and catalog revision).
func pinQueries(queries []string, c txnCharacteristics) (_ []string, pinAt int) {
	if !snapshotIsolation(c.isolation) {
		queries = append(queries, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	}
	if c.readOnly {
		queries = append(queries, "SET TRANSACTION READ WRITE")
	}
	for _, q := range storage.PinSnapshotSQL {
		if q == storage.PinSQL {
			pinAt = len(queries)
			q += "::text || ' ' || " + storage.Schema + ".pinned_writes() || ' ' || " + catalogRevisionSubquery + idleTimeoutSuffixSQL
		}
		queries = append(queries, q)
	}
	if c.readOnly {
		queries = append(queries, "SET TRANSACTION READ ONLY")
	}
	return queries, pinAt
}

// pinFailed passes on the error of the pin's statements. A guess of READ
// WRITE for a transaction that is READ ONLY fails at the gate's LOCK
// (25006): the guess was wrong, and the transaction fails as any wrong
// guess does. Either way the backend transaction failed.
func (s *Session) pinFailed(err error, guessed bool, expected txnCharacteristics) error {
	pe := pgerr.As(err)
	if pe.IsFatal() {
		return err
	}
	var never unsent
	if s.tx == txBlock && !s.be.clientBatch && !errors.As(err, &never) {
		// internalFailed read the ReadyForQuery that says so. (A pin
		// that a cancel or the deadline stopped before it was sent left
		// the backend's block going: abortAfterRefusal fails it.)
		s.tx = txFailed
		s.releaseTxnHolds()
	}
	if guessed && pe.Code == pgerr.ReadOnlySQLTransaction {
		s.known.defaults = txnCharacteristics{}
		return knownTxnMismatch(expected, txnCharacteristics{known: true, isolation: expected.isolation, readOnly: true})
	}
	return err
}

// knownTxnMismatch is the error of a pin whose guess of the transaction's
// characteristics was wrong: something the proxy did not see (a function
// that ran SET) changed the session's defaults. The transaction cannot
// go on at the level the client chose; run again, it is pinned right.
func knownTxnMismatch(expected, shown txnCharacteristics) *pgerr.Error {
	return pgerr.New(pgerr.SerializationFailure,
		"could not serialize access: the transaction's characteristics changed unseen by mzproxy").
		WithDetail("mzproxy expected isolation level %q (read only: %v), the backend had %q (read only: %v).",
			expected.isolation, expected.readOnly, shown.isolation, shown.readOnly).
		WithHint("The transaction might succeed if retried.")
}

// notePin follows the pin's value v: the transaction's timestamp, the
// writes seen at it and the catalog revision in its snapshot.
// noteGatedPin follows the answer v of a pin's statements (pinQueries):
// notePin's, then idleTimeoutPeek when the session's
// idle_in_transaction_session_timeout is set, which the session learns
// as it learns from the peek (keepPeek); not after a statement of the
// block that may have set it, which the block's end may undo.
func (s *Session) noteGatedPin(ctx context.Context, v string) error {
	v, idle := strings.CutSuffix(v, idleTimeoutPeek)
	s.known.noIdleTimeout = !idle && !s.known.dirtyInBlock && !s.be.viewsRestricted
	return s.notePin(ctx, v)
}

// idleTimeoutSuffixSQL appends idleTimeoutPeek to a text when the
// session's idle_in_transaction_session_timeout is not 0 (the operators
// named with their schema: the search_path is the client's).
const idleTimeoutSuffixSQL = " OPERATOR(pg_catalog.||) CASE WHEN pg_catalog.current_setting('idle_in_transaction_session_timeout')" +
	" OPERATOR(pg_catalog.=) '0' THEN '' ELSE '" + idleTimeoutPeek + "' END"

func (s *Session) notePin(ctx context.Context, v string) error {
	read, writes, revision, err := parsePin(v)
	if err != nil {
		return pgerr.New(pgerr.InternalError, "pinned timestamp, writes and catalog revision %q: %v", v, err)
	}
	return s.notePinned(ctx, read, writes, revision)
}

// notePinned follows a pin: the transaction's timestamp read, the writes
// seen at it and the catalog revision in its snapshot.
func (s *Session) notePinned(ctx context.Context, read uint64, writes, revision int64) (err error) {
	s.known.settled.note(writes, revision)
	s.txn.writes = writes
	// The pin is the snapshot's time, and the upper is just past it, so
	// serializable reads there too.
	s.txn.phase, s.txn.oracle, s.txn.upper, s.txn.ts = txnPinned, read, read+1, read
	// The catalog as of the snapshot, unless the proxy has not loaded it
	// (then the newest).
	if s.txn.catalog = s.db.catalogAt(revision); s.txn.catalog == nil {
		if s.txn.catalog, _, err = s.db.snapshot(ctx, s.proxy); err != nil {
			// The snapshot is taken, but no read can be checked.
			s.txn.phase = txnOther
			return err
		}
	}
	// Never while a client's read rides behind the pin: pinWithRead
	// leaves a session that may have temporary relations to this round
	// trip of its own.
	cat, err := s.withSessionTemps(ctx, s.txn.catalog)
	if err != nil {
		s.txn.phase = txnOther
		return err
	}
	s.txn.catalog = cat
	return nil
}

// parsePin reads a pin's value, "timestamp writes revision" (strconv, not
// fmt.Sscan: this runs for every read-only transaction, and Sscan's
// reflection was a tenth of the pin's CPU).
func parsePin(v string) (read uint64, writes, revision int64, err error) {
	f := strings.Fields(v)
	if len(f) != 3 {
		return 0, 0, 0, fmt.Errorf("want 3 fields, got %d", len(f))
	}
	if read, err = strconv.ParseUint(f[0], 10, 64); err != nil {
		return 0, 0, 0, err
	}
	if writes, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return 0, 0, 0, err
	}
	revision, err = strconv.ParseInt(f[2], 10, 64)
	return read, writes, revision, err
}

// inTimedomain checks a read of a pinned transaction against its
// timedomain, choosing the timedomain at the first read that names a
// managed object, and holds what the read reads.
func (s *Session) inTimedomain(ctx context.Context, st *planner.Statement) *pgerr.Error {
	if s.txn.domain == nil {
		for _, r := range st.Reads {
			if r.Managed() {
				if s.txn.domain == nil {
					s.txn.domain = map[string]bool{}
				}
				s.txn.domain[r.Object.Schema] = true
			}
		}
		if s.txn.domain == nil {
			return s.hold(ctx, st.Inputs)
		}
		if err := s.hold(ctx, s.domainTables()); err != nil {
			return err
		}
		s.releaseFence()
	}
	var outside []string
	for _, r := range st.Reads {
		if r.Managed() && !s.inDomain(r.Object) && !slices.Contains(outside, s.quotedName(r.Object)) {
			outside = append(outside, s.quotedName(r.Object))
		}
	}
	if len(outside) > 0 {
		return s.outsideTimedomain(outside)
	}
	return s.hold(ctx, st.Inputs)
}

// inDomain reports whether o is one of the timedomain's objects.
func (s *Session) inDomain(o *planner.Object) bool {
	return s.txn.domain[o.Schema] && s.txn.catalog.objects[int64(o.ID)] != nil
}

// domainCache is the managed tables of a timedomain's schemas in one
// catalog snapshot (immutable), kept by the session: its read-only
// transactions mostly read the same schemas of the same catalog, which
// they would otherwise scan whole, each of them.
type domainCache struct {
	catalog *catalogSnapshot
	schemas string // sorted, NUL-separated
	tables  []*planner.Object
}

// domainTables returns the managed tables of the timedomain, to be held.
func (s *Session) domainTables() []*planner.Object {
	names := make([]string, 0, len(s.txn.domain))
	for schema := range s.txn.domain {
		names = append(names, schema)
	}
	slices.Sort(names)
	key := strings.Join(names, "\x00")
	c := &s.domainCache
	if c.catalog == s.txn.catalog && c.schemas == key {
		return c.tables
	}
	var tables []*planner.Object
	for _, o := range s.txn.catalog.objects {
		if s.txn.domain[o.Schema] && o.Kind == planner.Table {
			tables = append(tables, o)
		}
	}
	*c = domainCache{catalog: s.txn.catalog, schemas: key, tables: tables}
	return tables
}

// hold adds read holds at the transaction's timestamp on the tables not
// held yet.
func (s *Session) hold(ctx context.Context, tables []*planner.Object) *pgerr.Error {
	var add []*planner.Object
	for _, t := range tables {
		if !s.txn.held[t.ID] {
			if s.txn.held == nil {
				s.txn.held = map[uint64]bool{}
			}
			s.txn.held[t.ID] = true
			add = append(add, t)
		}
	}
	if len(add) == 0 {
		return nil
	}
	s.enter(timeouts.PhaseHold)
	c := &choice{ts: s.txn.ts, inputs: add}
	var h heldRead
	var err error
	if s.loopTxn.noWait {
		// On the event loop's goroutine, which must not wait: a hold the
		// lease does not grant in memory is the session's goroutine's.
		var ok bool
		if h, ok = s.holdReadNow(c); !ok {
			err = errHoldWaits
		}
	} else {
		h, err = s.holdRead(ctx, c, true)
	}
	if err != nil {
		// Not held: the next read tries again.
		for _, t := range add {
			delete(s.txn.held, t.ID)
		}
		return pgerr.As(err)
	}
	s.txn.holds = append(s.txn.holds, h)
	return nil
}

// outsideTimedomain is Materialize's error for a read outside the
// transaction's timedomain.
func (s *Session) outsideTimedomain(outside []string) *pgerr.Error {
	var available []string
	for _, o := range s.txn.catalog.objects {
		if s.txn.domain[o.Schema] {
			available = append(available, s.quotedName(o))
		}
	}
	slices.Sort(available)
	avail := "No relations are available."
	if len(available) > 0 {
		avail = "Only the following relations are available:\n" + strings.Join(available, "\n")
	}
	return pgerr.New(pgerr.InvalidTransactionState,
		"Transactions can only reference objects in the same timedomain. See https://materialize.com/docs/sql/begin/#same-timedomain-error").
		WithDetail("The following relations in the query are outside the transaction's time domain:\n%s\n%s",
			strings.Join(outside, "\n"), avail)
}

func (s *Session) quotedName(o *planner.Object) string {
	return quoteIdent(s.db.name) + "." + quoteIdent(o.Schema) + "." + quoteIdent(o.Name)
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// refuse fails the client's statement with err and aborts the backend
// transaction too, as Materialize aborts a transaction whose statement
// failed: the backend raises the same error, which the client does not
// see twice.
func (s *Session) refuse(ctx context.Context, err *pgerr.Error) error {
	raise := fmt.Sprintf("DO $mzproxy$BEGIN RAISE EXCEPTION USING ERRCODE = %s, MESSAGE = %s, DETAIL = %s; END$mzproxy$",
		quoteLiteral(string(err.Code)), quoteLiteral(err.Message), quoteLiteral(err.Detail))
	if _, rerr := s.be.internalValue(ctx, raise); rerr == nil || pgerr.As(rerr).IsFatal() {
		// The DO block cannot succeed; the backend connection can fail.
		return cmp.Or(rerr, error(err))
	}
	s.tx = txFailed
	s.releaseTxnHolds()
	return err
}

func quoteLiteral(s string) string {
	// E'...' reads the same whatever standard_conforming_strings says.
	return "E'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}

// releaseTxnHolds releases the transaction's read holds: it ended, or
// failed and can read nothing more.
func (s *Session) releaseTxnHolds() {
	for _, h := range s.txn.holds {
		s.release(h)
	}
	s.txn.holds = s.txn.holds[:0]
	clear(s.txn.held)
	s.releaseFence()
}

// fenceFloor holds every collection at the lease's floor before the
// transaction's timestamp is pinned (Lease.HoldFloor). Its holds at ts
// are taken only after the pin, at its first read that names a managed
// object (the timedomain), which may come much later; in between,
// heartbeats may raise the floor past ts and another proxy compact past
// it, and the holds would be refused with XX000 (TestLeaseSlowReader
// failed so once in CI, TestTxnTimedomainHeldLate). The pin reads at or
// above the floor, so the fence keeps every since at or below ts until
// the timedomain is held. Without a lease the holds report the error.
func (s *Session) fenceFloor(ctx context.Context) {
	if s.txn.fence != nil {
		return
	}
	l, err := s.currentLease(ctx)
	if err != nil {
		return
	}
	if ts, err := l.HoldFloor(); err == nil {
		s.txn.fence, s.txn.fenceTS = l, ts
	}
}

// releaseFence releases fenceFloor's hold: the transaction holds its
// timedomain at ts, or ended.
func (s *Session) releaseFence() {
	if s.txn.fence != nil {
		s.txn.fence.ReleaseFloor(s.txn.fenceTS)
		s.txn.fence = nil
	}
}

// endTxn forgets the transaction block: it ended.
func (s *Session) endTxn() {
	s.endBlockKnowledge()
	s.releaseTxnHolds()
	s.txn = readTxn{holds: s.txn.holds, held: s.txn.held}
}

// startsWithWord reports whether sql's first word is one of words (lower
// case), ignoring ASCII case. A statement led by a comment is not seen.
func startsWithWord(sql string, words ...string) bool {
	i := 0
	for i < len(sql) && (sql[i] == ' ' || sql[i] == '\t' || sql[i] == '\n' || sql[i] == '\r') {
		i++
	}
	j := i
	for j < len(sql) && (sql[j] >= 'a' && sql[j] <= 'z' || sql[j] >= 'A' && sql[j] <= 'Z') {
		j++
	}
	return slices.ContainsFunc(words, func(w string) bool { return strings.EqualFold(sql[i:j], w) })
}

// chooseInTransaction chooses the timestamp of a read in a pinned
// transaction: the transaction's own. AS OF may name an earlier time, not
// a later one: the transaction's snapshot lacks what committed after it.
func (s *Session) chooseInTransaction(ctx context.Context, st *planner.Statement, c *choice) (*choice, error) {
	c.upper, c.ts = s.txn.upper, s.txn.ts
	if s.isolation == strictSerializable {
		oracle := s.txn.oracle
		c.oracle = &oracle
	}
	if st.AsOf != nil {
		// mz_now() in a transaction is the transaction's timestamp.
		t, err := s.evalAsOf(ctx, st.AsOf, func() (uint64, error) { return s.txn.ts, nil })
		if err != nil {
			return nil, err
		}
		if st.AsOf.AtLeast {
			t = max(t, c.since, c.ts)
		}
		if t > s.txn.ts {
			return nil, pgerr.New(pgerr.FeatureNotSupported,
				"AS OF %d is later than the timestamp of this read-only transaction, %d", t, s.txn.ts).
				WithHint("Read it after COMMIT, or in a transaction that begins with it.")
		}
		c.ts = t
	}
	if err := validForInputs(st, c); err != nil {
		return nil, err
	}
	return c, nil
}
