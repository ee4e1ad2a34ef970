package proxy

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/internalconn"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// Lazy history (storage/lazy_history.sql): a table made without rows has
// no history relation until its first write through mzproxy, and refuses
// writes until then (40001, its oid in the DETAIL). Before a write the
// proxy builds the history of the statement's targets that may have none,
// in the write's own transaction and the same flush (no round trip of its
// own): storage.EnsureHistorySQL, with each target as to_regclass of its
// name as written, so that the backend resolves it with the session's
// search_path and sees a table the client's open block made. A target is
// left out when the proxy's catalog knows it built: a table whose catalog
// row says so, one this proxy saw built since the catalog was read
// (historyState), or one the session built in its open block. So the
// common write, to a table written before, carries nothing more. A
// target remembered by name is remembered with what its name resolves
// by (builtKey): an unqualified name names another table under another
// search_path.
//
// A write the proxy cannot see coming (a function or trigger that writes
// a never-written table, a write through a view) meets the refusing
// trigger: an autocommit statement is tried again with that table's oid
// added (write.go), a block gets the 40001 as after any conflict, and the
// session's next write builds that table (Session.hiddenBuilds), so that
// the client's retry of the block succeeds.
//
// A read at a timestamp reads the history relation: its inputs without
// one are built first, in a transaction of the proxy's own.

// pendingDetail matches the DETAIL of history_pending's 40001.
var pendingDetail = regexp.MustCompile(`^mzproxy: the history of relation ([0-9]+) is not built`)

// historyState is what a catalog snapshot learns after it was read: the
// tables this proxy saw built since.
type historyState struct {
	built sync.Map // catalog ID -> struct{}
	// builtNames: targets (builtKey, those any session may share) this
	// proxy wrote through a committed build, which the snapshot does not
	// know.
	builtNames sync.Map
	// byName: every live table by its bare name, for unqualified targets.
	byName map[string][]*storage.Object
	// unbuilt: the snapshot has tables without history.
	unbuilt bool
}

func newHistoryState(c *storage.Catalog) *historyState {
	h := &historyState{byName: map[string][]*storage.Object{}}
	for _, o := range c.Objects {
		if o.Kind != storage.KindTable {
			continue
		}
		h.byName[o.Name] = append(h.byName[o.Name], o)
		h.unbuilt = h.unbuilt || !o.HistoryBuilt
	}
	return h
}

// isBuilt reports whether o's history is known to exist.
func (h *historyState) isBuilt(o *storage.Object) bool {
	if o.HistoryBuilt {
		return true
	}
	_, ok := h.built.Load(o.ID)
	return ok
}

// historyBuilds is what a write must build first: the arguments of
// storage.EnsureHistorySQL, and the catalog IDs of those the catalog
// knows (marked built once the write commits).
type historyBuilds struct {
	rels []string
	ids  []int64
	keys []string // the targets' builtKeys, remembered once built
	// own: keys[i] holds for this session alone (builtKey).
	own []bool
	// eager: the query string creates a table and then writes: the
	// tables it creates are built at once (storage.EagerHistorySQL).
	eager bool
}

func (b *historyBuilds) empty() bool { return b == nil || len(b.rels) == 0 && !b.eager }

// sql is the statement that builds b.
func (b *historyBuilds) sql() string {
	if !b.eager {
		return storage.EnsureHistorySQL(b.rels)
	}
	if len(b.rels) == 0 {
		return storage.EagerHistorySQL
	}
	return storage.EagerHistorySQL + "; " + storage.EnsureHistorySQL(b.rels)
}

// addOID adds a table known by its oid (a refusing trigger's DETAIL).
func (b *historyBuilds) addOID(oid string) {
	for _, r := range b.rels {
		if r == oid {
			return
		}
	}
	b.rels = append(b.rels, oid)
}

// historyBuildsFor returns what the writes of sql must build first (nil
// when nothing: the common case).
func (s *Session) historyBuildsFor(sql string) *historyBuilds {
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if err != nil {
		return nil
	}
	var cat *catalogSnapshot
	seen := s.db.seen.Load()
	if seen == nil {
		// Before the first snapshot: a fixed one (tests) or none.
		seen = s.db.fixed
	}
	if seen != nil && seen.catalog != s.ddlCatalog {
		// (Not the catalog read before this session's last DDL: a table
		// it dropped and made again under the same name is not in it.)
		cat = seen.catalog
	}
	var b *historyBuilds
	creates, writes := false, false
	for _, st := range stmts {
		if st.Kind == planner.KindDDL && (st.Tag == "CREATE TABLE" || st.Tag == "SELECT") {
			creates = true
		}
		if st.Kind != planner.KindWrite {
			continue
		}
		writes = true
		if creates {
			if b == nil {
				b = &historyBuilds{}
			}
			b.eager = true
		}
		for _, ref := range st.Writes {
			if cat != nil && cat.knownBuilt(ref) {
				continue
			}
			key, own := s.builtKey(ref)
			if s.blockBuilt[key] || s.ddlBuilt[key] {
				continue
			}
			if cat != nil && !own {
				if _, ok := cat.history.builtNames.Load(key); ok {
					continue
				}
			}
			if b == nil {
				b = &historyBuilds{}
			}
			name := planner.QualifiedName{Schema: ref.Schema, Name: ref.Name}.String()
			rel := "to_regclass(" + quoteLiteral(name) + ")"
			dup := false
			for _, k := range b.keys {
				dup = dup || k == key
			}
			if dup {
				continue
			}
			b.keys = append(b.keys, key)
			b.own = append(b.own, own)
			b.rels = append(b.rels, rel)
			if cat != nil && ref.Schema != "" {
				// (An unqualified name's candidates are every table of
				// that name: the one built is the search_path's.)
				for _, o := range cat.candidates(ref) {
					b.ids = append(b.ids, o.ID)
				}
			}
		}
	}
	if writes && len(s.hiddenBuilds) > 0 {
		// Sent with this write; a table it does not get built fails
		// a write again, and is noted again.
		if b == nil {
			b = &historyBuilds{}
		}
		for _, oid := range s.hiddenBuilds {
			b.addOID(oid)
		}
		s.hiddenBuilds = s.hiddenBuilds[:0]
	}
	return b
}

// builtKey is what a write target is remembered by once its history is
// built: schema and name when qualified; unqualified, its name with the
// search_path it resolves by (as the planner expands "$user", for the
// session's user), while the proxy knows that path and the session may
// have no temporary relation of its own. own: otherwise, the key holds
// for this session alone, until the proxy loses track of its search_path
// (forgetOwnBuilt). A search_path changed where no text of the session
// shows it (a function's SET clause) is not seen: a wrong skip then
// meets the refusing trigger (a retry, or 40001 in a block).
func (s *Session) builtKey(ref planner.Ref) (key string, own bool) {
	if ref.Schema != "" {
		return ref.Schema + "\x00" + ref.Name, false
	}
	if s.known.searchPath == nil || s.tempSeen {
		return "\x00" + ref.Name, true
	}
	return strings.Join(planner.EffectiveSearchPath(s.known.searchPath, s.user), "\x00") + "\x00\x00" + ref.Name, false
}

// forgetOwnBuilt forgets the unqualified targets remembered under a
// search_path the proxy no longer knows (builtKey's own keys).
func (s *Session) forgetOwnBuilt() {
	for _, m := range []map[string]bool{s.blockBuilt, s.ddlBuilt} {
		for k := range m {
			if strings.HasPrefix(k, "\x00") {
				delete(m, k)
			}
		}
	}
}

// knownBuilt reports whether every table ref may name has its history
// built, and it names one at least.
func (c *catalogSnapshot) knownBuilt(ref planner.Ref) bool {
	objs := c.candidates(ref)
	for _, o := range objs {
		if !c.history.isBuilt(o) {
			return false
		}
	}
	return len(objs) > 0
}

// candidates are the managed tables ref may name: the one of its schema,
// or, unqualified, every one of its name (the search_path decides, which
// the proxy need not ask for this).
func (c *catalogSnapshot) candidates(ref planner.Ref) []*storage.Object {
	if ref.Schema != "" {
		if o := c.cat.ByName(ref.Schema, ref.Name); o != nil && o.Kind == storage.KindTable {
			return []*storage.Object{o}
		}
		return nil
	}
	return c.history.byName[ref.Name]
}

// noteDDL records that the session ran DDL: the catalog read before it
// may name a table it dropped, with history, where a new one of the same
// name has none.
func (s *Session) noteDDL(r route) {
	if r.ddl {
		if seen := s.db.seen.Load(); seen != nil {
			s.ddlCatalog = seen.catalog
		}
		clear(s.ddlBuilt)
	}
}

// markBuilt records that b's tables were built by a write that committed.
func (s *Session) markBuilt(b *historyBuilds) {
	if b.empty() {
		return
	}
	s.remember(b.ids, b.keys, b.own, nil)
}

// remember records tables built by a committed write: their catalog IDs,
// and their builtKeys (those in only, when only is not nil).
func (s *Session) remember(ids []int64, keys []string, own []bool, only map[string]bool) {
	seen := s.db.seen.Load()
	shared := seen != nil && seen.catalog != s.ddlCatalog
	if shared {
		for _, id := range ids {
			seen.catalog.history.built.Store(id, struct{}{})
		}
	}
	for i, k := range keys {
		if only != nil && !only[k] {
			continue
		}
		if shared && !own[i] {
			seen.catalog.history.builtNames.Store(k, struct{}{})
			continue
		}
		if s.ddlBuilt == nil {
			s.ddlBuilt = map[string]bool{}
		}
		s.ddlBuilt[k] = true
	}
}

// noteBlockBuilt records that the session's open block builds b.
func (s *Session) noteBlockBuilt(b *historyBuilds) {
	if b.empty() {
		return
	}
	if s.blockBuilt == nil {
		s.blockBuilt = map[string]bool{}
	}
	for _, k := range b.keys {
		s.blockBuilt[k] = true
	}
	s.blockBuilds = append(s.blockBuilds, b)
}

// commitBlockBuilt keeps what the block that just committed built, as
// markBuilt does for an autocommit write: the next block's writes to
// those tables carry no build (a no-op ensure_history each, before).
func (s *Session) commitBlockBuilt() {
	for _, b := range s.blockBuilds {
		// (Not a key forgetOwnBuilt forgot since.)
		s.remember(b.ids, b.keys, b.own, s.blockBuilt)
	}
	s.forgetBlockBuilt()
}

// forgetBlockBuilt ends what the block built (its end, or a rollback to
// a savepoint, which may undo it).
func (s *Session) forgetBlockBuilt() {
	clear(s.blockBuilt)
	clear(s.blockBuilds)
	s.blockBuilds = s.blockBuilds[:0]
}

// pendingOID returns the oid in a refusing trigger's 40001 (the history
// of that table is not built), or "".
func pendingOID(errFrame []byte) string {
	body := wire.Body(errFrame)
	if pgerr.Code(errorCode(body)) != pgerr.SerializationFailure {
		return ""
	}
	detail, _ := errorField(body, 'D')
	m := pendingDetail.FindStringSubmatch(detail)
	if m == nil {
		return ""
	}
	return m[1]
}

// buildForRead builds the history of the tables st reads at a timestamp
// that have none (its inputs, those of the query EXPLAIN TIMESTAMP
// explains, SUBSCRIBE's), in a transaction of the proxy's own on its
// internal connection: the read's own transaction may be read-only, and
// its snapshot taken. Nothing to do, and nothing allocated, in the common
// case.
//
// The build runs with the backend role's rights, so the reader's own are
// checked first (readRights): a role that may not read what st names gets
// PostgreSQL's 42501 for it, and nothing is built or locked on its
// behalf. Under Admit (the event loop's goroutine, which must not wait)
// a read with something to build is not admitted: the session's own
// goroutine plans it again and builds.
func (s *Session) buildForRead(ctx context.Context, st *planner.Statement) error {
	seen := s.db.seen.Load()
	if seen == nil || !seen.catalog.history.unbuilt {
		return nil
	}
	var oids []string
	var ids []int64
	add := func(inputs []*planner.Object) {
		for _, in := range inputs {
			o := seen.catalog.cat.ByID(int64(in.ID))
			if o == nil || o.Kind != storage.KindTable || seen.catalog.history.isBuilt(o) {
				continue
			}
			oids = append(oids, strconv.FormatUint(uint64(o.OID), 10))
			ids = append(ids, o.ID)
		}
	}
	add(st.Inputs)
	if st.ExplainTimestamp != nil && st.ExplainTimestamp.Inner != nil {
		add(st.ExplainTimestamp.Inner.Inputs)
	}
	for in := st.Inner; in != nil; in = in.Inner {
		add(in.Inputs)
	}
	if len(oids) == 0 {
		return nil
	}
	if s.admitting {
		return errBuildOffLoop
	}
	if err := s.readRights(ctx, st); err != nil {
		return err
	}
	err := s.db.with(ctx, s.proxy, internalconn.Idempotent, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, storage.EnsureHistorySQL(oids))
		return err
	})
	if err != nil {
		return pgerr.As(err)
	}
	for _, id := range ids {
		seen.catalog.history.built.Store(id, struct{}{})
	}
	return nil
}

// errBuildOffLoop declines a read's admission by the event loop: it has a
// history to build first (buildForRead).
var errBuildOffLoop = pgerr.New(pgerr.InternalError, "a read that builds a history is served off the event loop")

// buildHiddenFirst builds, ahead of a client's new request outside a
// transaction, the tables whose refusing trigger failed one of the
// session's statements (hiddenBuilds), in a batch of the proxy's own
// ended by its own Sync. A write would build them itself
// (historyBuildsFor), but a statement that does not write (SELECT f() of
// a function that writes such a table) builds nothing: without this it
// met the same 40001 at every try, where once the table is built it gets
// what a write outside mzproxy's write path gets (MZ002), and a block
// whose writes come through the function lands at its retry.
//
// The build runs on the session's own connection with its role's rights
// (ensure_history checks them), as a write's does: the oids come from an
// error the role could have raised itself. Its error is nobody's (the
// role may not write the table, the session may be read-only): the
// client's request then runs as it would have, and meets the 40001
// again. One round trip more, after such an error only.
func (s *Session) buildHiddenFirst(ctx context.Context, msg pgproto3.FrontendMessage) error {
	switch msg.(type) {
	case *pgproto3.Query, *pgproto3.Parse, *pgproto3.Bind, *pgproto3.Describe, *pgproto3.Execute:
	default:
		return nil
	}
	if s.tx != txIdle || s.txn.phase != txnNone || s.units.len() > 0 || s.copy != copyNone ||
		s.skipping || s.muted || s.be.unsynced || s.occBatch != nil || s.txn.guard != nil ||
		s.be.pendingRead != nil || s.loopRead.resume || s.loopTxn.resume {
		return nil
	}
	var oids []string
	for _, oid := range s.hiddenBuilds {
		if _, err := strconv.ParseUint(oid, 10, 32); err != nil || slices.Contains(oids, oid) {
			continue
		}
		oids = append(oids, oid)
	}
	s.hiddenBuilds = s.hiddenBuilds[:0]
	if len(oids) == 0 {
		return nil
	}
	for _, m := range []struct {
		msg  pgproto3.FrontendMessage
		kind unitKind
	}{
		{&pgproto3.Close{ObjectType: 'S', Name: buildStatement}, uClose},
		{&pgproto3.Parse{Name: buildStatement, Query: storage.EnsureHistorySQL(oids)}, uParse},
		{&pgproto3.Bind{DestinationPortal: buildStatement, PreparedStatement: buildStatement}, uBind},
		{&pgproto3.Execute{Portal: buildStatement}, uExecute},
		{&pgproto3.Close{ObjectType: 'P', Name: buildStatement}, uClose},
		{&pgproto3.Sync{}, uSync},
	} {
		if err := s.be.w.Send(m.msg); err != nil {
			return s.lost(err)
		}
		s.units.push(unit{kind: m.kind, disp: swallow, quiet: true})
	}
	return s.exchange(ctx)
}

// quietFailed follows an error of a quiet unit (buildHiddenFirst): the
// backend skips the batch's other messages until its Sync.
func (s *Session) quietFailed(frame []byte) error {
	if fatal, err := s.backendErrorIsFatal(frame); fatal {
		_ = s.client.WriteFrame(frame)
		_ = s.client.Flush()
		return err
	}
	s.skipping = true
	for u := s.units.front(); u != nil && u.kind != uSync; u = s.units.front() {
		s.units.pop()
	}
	return nil
}
