package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/occ"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/proxy/internalconn"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// Group commit (Config.GroupCommit): an autocommit write (simple
// protocol) that means the same on any connection
// (planner.Statement.GroupRelations: INSERT, UPDATE or DELETE without
// function calls, on relations that are not temporary) does not run on the
// session's own backend connection. The session hands its statement, with
// the settings that decide what the statement means (role, search_path,
// DateStyle, TimeZone, IntervalStyle), to its database's committer, which
// owns a backend connection of its own and runs every statement that
// arrived together, one after the other, in one backend transaction:
//
//	BEGIN; SELECT begin_write_occ(NULL, floor)                  -- T
//
//	SAVEPOINT g; [<settings>;] [SET LOCAL statement_timeout = <left>;]
//	    <statement>; RELEASE SAVEPOINT g; ...                         -- every member,
//	RESET ROLE; SET LOCAL statement_timeout = 0;
//	    SELECT commit_write(inc); COMMIT                             -- compare-and-append: one string
//
// A member that fails stops the string; ROLLBACK TO SAVEPOINT g undoes it
// alone (it gets its own error) and the rest of the string is sent again.
// Each member reads what the members before it wrote: the batch is one
// serial order of its members, all committed at T, which is linearizable
// since they were all in flight when T was appended. A lost
// compare-and-append (another proxy, or a pessimistic writer, committed
// since the batch's snapshot) rolls the whole batch back and occ.Committer
// runs it again past the actual upper: every member is executed again, so
// its outcome (row count) is that of the attempt that committed.

// groupMember is one session's statement in a group commit. tag and failed
// are the outcome of the attempt that committed.
type groupMember struct {
	sql      string
	settings string    // statements that set the session's settings locally
	deadline time.Time // the statement's (zero: none)
	inc      int64
	tag      string
	failed   *pgconn.PgError
}

// groupCommitter is a database's committer: occ.Oracle and
// occ.BatchAppender over one backend connection. occ.Committer calls it
// from one leader at a time, so conn needs no lock of its own.
type groupCommitter struct {
	px *Proxy
	db string
	c  *occ.Committer[*groupMember]

	ic       *internalconn.Conn // checked and redialed before each batch's first statement
	conn     *pgconn.PgConn     // ic's connection, which the open batch transaction is on
	inTx     bool               // a batch transaction is open (by WriteTS, or by the last batch's string)
	floor    uint64             // the actual upper of the last conflict
	next     uint64             // T of the batch transaction the last batch's string opened
	slotBusy bool               // the last append found the commit slot held
}

// groupCommitter returns the committer of db, creating it on first use.
// The retry bound is the one in force then (a reload does not change it).
func (p *Proxy) groupCommitter(db *database) *groupCommitter {
	db.groupOnce.Do(func() {
		g := &groupCommitter{px: p, db: db.name}
		g.ic = internalconn.New(nil, g.dial)
		g.c = occ.NewCommitter[*groupMember](occ.GroupConfig{MaxAttempts: p.OCCMaxAttempts()}, g, g, &p.occStats)
		db.group = g
	})
	return db.group
}

// dial connects the committer with the settings its statements are
// written for. A new connection has no batch transaction open.
func (g *groupCommitter) dial(ctx context.Context) (*pgx.Conn, error) {
	g.conn, g.inTx = nil, false
	c, err := g.px.adminConn(ctx, g.db)
	if err != nil {
		return nil, err
	}
	if _, err := c.PgConn().Exec(ctx, "SET standard_conforming_strings = on; SET client_encoding = 'UTF8'").ReadAll(); err != nil {
		_ = c.Close(context.Background())
		return nil, pgerr.Wrap(pgerr.ConnectionFailure, err)
	}
	return c, nil
}

// drop closes a connection whose state is unknown.
func (g *groupCommitter) drop() {
	g.ic.Close()
	g.conn, g.inTx = nil, false
}

// WriteTS opens the batch's transaction and returns its T: the one the
// last batch's string already opened, if callers were queued then.
func (g *groupCommitter) WriteTS(ctx context.Context) (uint64, error) {
	if t := g.next; t != 0 {
		g.next = 0
		return t, nil
	}
	// The string opens a transaction that commits nothing: on a
	// connection that died under it, it may run again on a new one.
	var rs []*pgconn.Result
	err := g.ic.Run(ctx, internalconn.Idempotent, func(c *pgx.Conn) error {
		g.conn = c.PgConn()
		var q strings.Builder
		if g.inTx {
			q.WriteString("ROLLBACK; ")
		}
		if g.slotBusy {
			// Wait, holding nothing, for the pessimistic writer holding the slot.
			q.WriteString(storage.AwaitSlotSQL + "; ")
		}
		q.WriteString("BEGIN; " + storage.BeginWriteOCCFor(-1, g.floor))
		var err error
		rs, err = g.conn.Exec(ctx, q.String()).ReadAll()
		return err
	})
	if err != nil {
		g.drop()
		return 0, pgerr.Wrap(pgerr.ConnectionFailure, err)
	}
	g.inTx, g.slotBusy = true, false
	t, err := writeTS(rs[len(rs)-1])
	if err != nil {
		g.drop()
	}
	return t, err
}

// writeTS is the T of begin_write_occ's result.
func writeTS(r *pgconn.Result) (uint64, error) {
	if len(r.Rows) != 1 || len(r.Rows[0]) != 1 {
		return 0, pgerr.New(pgerr.InternalError, "group commit: begin_write_occ returned no timestamp")
	}
	t, err := strconv.ParseUint(string(r.Rows[0][0]), 10, 64)
	if err != nil || t == 0 {
		return 0, pgerr.New(pgerr.InternalError, "group commit: begin_write_occ returned %q", r.Rows[0][0])
	}
	return t, nil
}

// ApplyWrite has nothing to do: commit_write raised read_ts in the
// batch's own transaction.
func (g *groupCommitter) ApplyWrite(context.Context, uint64) error { return nil }

// AppendBatch runs the members, each in its own savepoint, then the
// compare-and-append and COMMIT, all in one query string; if callers are
// queued for the next batch, the string goes on to open its transaction
// (WriteTS then costs no round trip). A member that fails stops the
// string: it is rolled back to its savepoint and the rest of the string
// is sent again, so a batch takes one round trip plus one per failed
// member.
//
// A member's settings and statement_timeout are sent only when they
// differ from those in force (inForce), so a batch of sessions alike sets
// them once.
func (g *groupCommitter) AppendBatch(ctx context.Context, t uint64, ps []*groupMember) (occ.BatchResult, error) {
	if g.conn == nil || !g.inTx {
		return occ.BatchResult{}, pgerr.New(pgerr.InternalError, "group commit: no open batch transaction")
	}
	for _, p := range ps {
		p.tag, p.failed = "", nil
	}
	const undo = "ROLLBACK TO SAVEPOINT g; RELEASE SAVEPOINT g; "
	prev, current := "", inForce{} // the statements before the members; what is in force
	for pending := ps; ; {
		var q strings.Builder
		q.WriteString(prev)
		// Per member: the index among the string's results of its first
		// statement and of the client's statement, whether it sets
		// settings, and the settings in force after it; where its client
		// statement begins, in characters.
		first := make([]int, len(pending))
		stmtAt := make([]int, len(pending))
		after := make([]inForce, len(pending))
		starts := make([]int, len(pending))
		n, chars := 0, utf8.RuneCountInString(prev)
		write := func(sql string) {
			q.WriteString(sql)
			chars += utf8.RuneCountInString(sql)
		}
		in := current
		for i, p := range pending {
			first[i] = n
			write("SAVEPOINT g; ")
			n++
			if p.settings != in.settings {
				write(p.settings)
				n += settingsStatements
				in.settings = p.settings
			}
			// The member's statement_timeout: what is left of its
			// session's deadline, else the committer's default.
			timeout := "DEFAULT"
			if !p.deadline.IsZero() {
				timeout = strconv.FormatInt(max(time.Until(p.deadline).Milliseconds(), 1), 10)
			}
			if timeout != in.timeout && (in.timeout != "" || timeout != "DEFAULT") {
				write("SET LOCAL statement_timeout = " + timeout + "; ")
				n++
				in.timeout = timeout
			}
			after[i] = in
			stmtAt[i], starts[i] = n, chars
			// A newline ends a trailing -- comment of the client's.
			write(p.sql + "\n; RELEASE SAVEPOINT g; ")
			n += 2
		}
		// The append runs as the committer, without the last member's timeout.
		tail := "RESET ROLE; SET LOCAL statement_timeout = 0; " + storage.CommitWriteFor(ps[0].inc) + "; COMMIT"
		next := g.c.Queued() > 0
		if next {
			tail += "; BEGIN; " + storage.BeginWriteOCCFor(-1, 0)
		}
		q.WriteString(tail)
		rs, err := g.conn.Exec(ctx, q.String()).ReadAll()
		var pge *pgconn.PgError
		if err != nil && !errors.As(err, &pge) {
			// The outcome of a COMMIT whose answer was lost is not known.
			g.drop()
			return occ.BatchResult{}, pgerr.Fatal(pgerr.ConnectionFailure, "group commit: batch failed, outcome unknown: %v", err)
		}
		var done []string // command tags of the statements that completed
		for _, r := range rs {
			if r.Err == nil {
				done = append(done, r.CommandTag.String())
			}
		}
		done = done[min(len(done), strings.Count(prev, ";")):]
		failed := len(pending) // the member whose statement failed, if any
		for i, p := range pending {
			if stmtAt[i]+1 >= len(done) { // its RELEASE did not complete
				failed = i
				break
			}
			p.tag = done[stmtAt[i]]
		}
		if failed == len(pending) {
			if pge == nil {
				return g.committed(rs, done[n:], next)
			}
			switch {
			case len(done) < n:
				g.drop()
				return occ.BatchResult{}, pgerr.New(pgerr.InternalError, "group commit: %s", pge.Message)
			case len(done) >= n+tailCommitted:
				// Committed; opening the next batch's transaction failed
				// (the next WriteTS rolls it back and tries again).
				r, err := g.committed(rs, done[n:], false)
				g.inTx = true
				return r, err
			}
			return g.tailFailed(ctx, t, pge, len(done)-n)
		}
		// The string stopped in member failed: in its settings, timeout
		// or statement, else (SAVEPOINT, RELEASE) the batch cannot go on.
		at := len(done)
		if pge == nil || at <= first[failed] || at > stmtAt[failed] {
			g.drop()
			msg := "the batch's string ended early"
			if pge != nil {
				msg = pge.Message
			}
			return occ.BatchResult{}, pgerr.New(pgerr.InternalError, "group commit: %s", msg)
		}
		if at == stmtAt[failed] && pge.Position > 0 {
			pge.Position -= int32(starts[failed])
		} else {
			pge.Position = 0
		}
		pending[failed].failed = pge
		if failed > 0 {
			current = after[failed-1]
		}
		pending, prev = pending[failed+1:], undo
	}
}

// tailCommitted is the number of statements of a batch's string after
// its members up to its COMMIT (RESET ROLE, SET LOCAL statement_timeout,
// commit_write, COMMIT).
const tailCommitted = 4

// inForce is what a batch's transaction has set so far: a member's
// settings (groupMember.settings) and statement_timeout ("": the
// committer's default). SET LOCAL in a released savepoint lasts until the
// transaction ends; in one rolled back it is undone.
type inForce struct{ settings, timeout string }

// settingsStatements is the number of statements in groupMember.settings.
const settingsStatements = 2

// committed ends a batch whose string ran to its end: tail holds the tags
// of its statements after the members (the tailCommitted ones, and with
// next BEGIN, begin_write_occ: the next batch's T).
func (g *groupCommitter) committed(rs []*pgconn.Result, tail []string, next bool) (occ.BatchResult, error) {
	g.inTx = false
	if len(tail) < tailCommitted || tail[tailCommitted-1] != "COMMIT" {
		return occ.BatchResult{}, pgerr.New(pgerr.InternalError, "group commit: COMMIT did not commit")
	}
	g.floor = 0
	if next {
		g.inTx = true
		t, err := writeTS(rs[len(rs)-1])
		if err != nil {
			g.drop()
		}
		g.next = t
	}
	return occ.BatchResult{OK: true}, nil
}

// tailFailed ends a batch whose members ran but whose tail failed: its
// statement i (RESET ROLE, SET LOCAL statement_timeout, commit_write,
// COMMIT) raised pge.
func (g *groupCommitter) tailFailed(ctx context.Context, t uint64, pge *pgconn.PgError, i int) (occ.BatchResult, error) {
	if i == tailCommitted-1 {
		// COMMIT itself failed (a deferred constraint, say): the batch
		// rolled back, and the error cannot be pinned on one member.
		g.inTx = false
		return occ.BatchResult{}, pgErrorAsErr(pge)
	}
	if _, rerr := g.conn.Exec(ctx, "ROLLBACK").ReadAll(); rerr != nil {
		g.drop()
	}
	g.inTx = false
	if i == tailCommitted-2 {
		switch pgerr.Code(pge.Code) {
		case storage.CodeUpperConflict, storage.CodeSlotBusy:
			u, perr := strconv.ParseUint(pge.Detail, 10, 64)
			if perr != nil || u <= t {
				u = t + 1
			}
			g.floor, g.slotBusy = u, pgerr.Code(pge.Code) == storage.CodeSlotBusy
			return occ.BatchResult{ActualUpper: u}, nil
		case pgerr.SerializationFailure, deadlockDetected:
			g.floor = t + 1
			return occ.BatchResult{ActualUpper: t + 1}, nil
		}
	}
	return occ.BatchResult{}, pgErrorAsErr(pge)
}

// pgErrorAsErr is the backend's error e as the client sees it; e stays
// in its chain (storage.IsFenced finds it).
func pgErrorAsErr(e *pgconn.PgError) error {
	out := pgerr.Wrap(pgerr.Code(e.Code), e)
	out.Message, out.Detail, out.Hint = e.Message, e.Detail, e.Hint
	return out
}

// groupSettingsSQL builds, on the session's backend, the statements that
// give the committer's transaction the session's meaning of a statement
// naming rels (planner.Statement.GroupRelations). It is empty, and the
// statement stays on the session's connection, when running it elsewhere
// could show: the target is not a permanent table, or has triggers of its
// own (not mzproxy's), row security, an identity column or a default that
// calls a function (nextval: the session's currval would not see it;
// now(): the batch's start); another relation is missing, temporary or
// has row security; or the client's encoding or
// standard_conforming_strings is not the committer's (UTF8, on: PostgreSQL
// lexes a whole query string before running any of it, so a setting in
// the string cannot change how the client's statement is read).
func groupSettingsSQL(rels []string) string {
	others := make([]string, len(rels)-1)
	for i, r := range rels[1:] {
		others[i] = quoteLiteral(r)
	}
	return `SELECT coalesce((SELECT format('SET LOCAL ROLE %I; SELECT set_config(''search_path'', %L, true), ` +
		`set_config(''DateStyle'', %L, true), set_config(''TimeZone'', %L, true), ` +
		`set_config(''IntervalStyle'', %L, true); ', ` +
		`current_user, current_setting('search_path'), current_setting('DateStyle'), current_setting('TimeZone'), ` +
		`current_setting('IntervalStyle')) ` +
		`FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass(` + quoteLiteral(rels[0]) + `) ` +
		`AND c.relpersistence = 'p' AND c.relkind IN ('r', 'p') AND NOT c.relrowsecurity ` +
		`AND NOT EXISTS (SELECT FROM pg_catalog.pg_trigger tg JOIN pg_catalog.pg_proc f ON f.oid = tg.tgfoid ` +
		`WHERE tg.tgrelid = c.oid AND NOT tg.tgisinternal AND f.pronamespace <> '` + storage.Schema + `'::regnamespace) ` +
		`AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 ` +
		`AND NOT a.attisdropped AND a.attidentity <> '') ` +
		`AND NOT EXISTS (SELECT FROM pg_catalog.pg_attrdef d WHERE d.adrelid = c.oid ` +
		`AND d.adbin::text ~ '[{](FUNCEXPR|SQLVALUEFUNCTION|NEXTVALUEEXPR) ') ` +
		`AND NOT EXISTS (SELECT FROM unnest(ARRAY[` + strings.Join(others, ", ") + `]::text[]) r(name) ` +
		`WHERE coalesce((SELECT relpersistence = 'p' AND NOT relrowsecurity FROM pg_catalog.pg_class ` +
		`WHERE oid = pg_catalog.to_regclass(r.name)), false) IS NOT TRUE) ` +
		`AND current_setting('client_encoding') = 'UTF8' ` +
		`AND current_setting('standard_conforming_strings') = 'on'), '')`
}

// groupSettings is the outcome of groupSettingsSQL for rels, read while
// handling the client's request number at. It stays true while the
// session sends nothing but group-committed writes: they run on the
// committer's connection and change none of the settings it reads, and
// any other request may (SET, SET ROLE, a function calling set_config,
// CREATE TEMP TABLE shadowing a relation).
type groupSettings struct {
	rels, sql string
	at        uint64
}

// groupWrite runs sql, an autocommit write naming rels (not nil), through
// the database's committer if its relations are not temporary; handled is
// false (nothing sent to the client) otherwise.
func (s *Session) groupWrite(ctx context.Context, sql string, rels []string, inc int64) (handled bool, err error) {
	key := strings.Join(rels, ",")
	settings := s.groupSettings.sql
	if s.groupSettings.rels != key || s.groupSettings.at != s.requests-1 {
		// A simple Query: it ends its own transaction (internalValue's
		// extended-protocol batch, without a Sync, would leave one open with
		// its snapshot). Not interrupted: it is short, and a cut answer
		// would leave the connection unusable.
		var err error
		if settings, err = s.be.queryValue(context.WithoutCancel(ctx), groupSettingsSQL(rels)); err != nil {
			return true, err
		}
		if settings == "" {
			return false, nil
		}
	}
	s.groupSettings = groupSettings{rels: key, sql: settings, at: s.requests}
	s.busy.Store(true)
	defer s.busy.Store(false)
	px := s.proxy
	px.occStats.Writes.Add(1)
	w := &groupMember{sql: sql, settings: settings, inc: inc}
	w.deadline, _ = ctx.Deadline()
	if _, err := px.groupCommitter(s.db).c.Commit(ctx, w); err != nil {
		if s.lease != nil {
			// If the append refused the incarnation, no new session starts on it.
			s.lease.Refused(err)
		}
		if ctx.Err() != nil {
			px.occStats.Canceled.Add(1)
			return true, occ.Interrupted(ctx, s.budget)
		}
		return true, err
	}
	var answer pgproto3.BackendMessage = &pgproto3.CommandComplete{CommandTag: []byte(w.tag)}
	if f := w.failed; f != nil {
		answer = &pgproto3.ErrorResponse{
			Severity: f.Severity, SeverityUnlocalized: f.SeverityUnlocalized, Code: f.Code, Message: f.Message,
			Detail: f.Detail, Hint: f.Hint, Position: f.Position, Where: f.Where, SchemaName: f.SchemaName,
			TableName: f.TableName, ColumnName: f.ColumnName, DataTypeName: f.DataTypeName,
			ConstraintName: f.ConstraintName, File: f.File, Line: f.Line, Routine: f.Routine,
		}
	}
	frame, err := answer.Encode(nil)
	if err != nil {
		return true, err
	}
	ready, err := (&pgproto3.ReadyForQuery{TxStatus: 'I'}).Encode(nil)
	if err != nil {
		return true, err
	}
	return true, s.occFinish([][]byte{frame}, ready)
}
