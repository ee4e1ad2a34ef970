package proxy

import (
	"strings"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

// route is how the proxy runs a statement (or a query string of several).
type route struct {
	// write: the statement may write or change the catalog, so it runs in
	// a backend transaction that holds the commit slot (begin_write):
	// managed tables take their writes only there, at that transaction's
	// timestamp.
	write bool
	// copyIn: the statement reads COPY data from the client, so nothing
	// may be pipelined after it.
	copyIn bool
	// replayable: the query string is one data-changing statement
	// (INSERT, UPDATE, DELETE, MERGE, with RETURNING or not) that can be run
	// again from the client's message alone, so outside a transaction block
	// it takes the optimistic path (write.go). DDL, COPY FROM STDIN,
	// EXECUTE and several statements in one string stay pessimistic.
	replayable bool
	// commits: the string ends the transaction block with a commit (COMMIT,
	// END, PREPARE TRANSACTION): an optimistic write slot taken earlier in
	// the block must append first.
	commits bool
	// ddl: the string changes the catalog. In a transaction block it takes
	// the pessimistic slot (begin_write) before it runs: DDL locks catalog
	// rows that pessimistic writers lock after the slot, and taking the
	// slot first keeps that order.
	ddl bool
	// slotOnlyInBlock: every statement that made write true is
	// catalog-neutral DDL (planner.Statement.CatalogNeutral) and the
	// string has no transaction control. Outside a transaction block a
	// simple Query of it then runs as it is, without the slot: the event
	// triggers take it for an index change from outside mzproxy, which
	// they allow, and the slot would only buy an oracle timestamp and a
	// catalog revision that nothing reads for an index. In a block the
	// slot is still taken first (the lock order of ddl). The extended
	// protocol routes at Parse, before it knows where the statement will
	// run, and keeps the slot.
	slotOnlyInBlock bool
	// refused: the planner refuses the string outright (mz_now() in a
	// write: 0A000); the client gets this instead of running it.
	refused error
	// createDatabase: the string is one CREATE DATABASE, which may copy
	// the template database (template.go).
	createDatabase bool
	// dropDatabase: the string is one DROP DATABASE, before which the
	// proxies let go of the database (dropdb.go).
	dropDatabase bool
	// oneDDL: the string is one DDL statement that takes the slot (no
	// transaction control, no COPY). Outside a transaction block it runs
	// in one implicit transaction behind the slot's Bind/Execute, as an
	// optimistic write's attempt is sent (ddlWrite), not between BEGIN
	// and COMMIT.
	oneDDL bool
}

// emptyCatalog answers "not managed" for every name: routing needs only
// what a statement does, not which objects it names.
type emptyCatalog struct{}

func (emptyCatalog) Lookup(string, string, []string) (*planner.Object, bool) { return nil, false }
func (emptyCatalog) Revision() uint64                                        { return 0 }

// plainRead is planner.PlainRead(sql), remembered for the last query text
// asked about: a message's path asks about the same text several times
// (its statement kind, its route, its effect on settings), the same
// string each time, whose comparison then costs nothing.
func (s *Session) plainRead(sql string) bool {
	if m := &s.lastPlain; m.known && m.sql == sql {
		return m.plain
	}
	plain := planner.PlainRead(sql)
	s.lastPlain = plainMemo{sql: sql, plain: plain, known: true}
	return plain
}

// plainText is plainRead of a text still in the client's bytes, and the
// text as a string: the remembered one when it is the same text (an
// extended-protocol client parses the same text again and again), so
// that asking again costs no copy.
func (s *Session) plainText(sql []byte) (string, bool) {
	if m := &s.lastPlain; m.known && m.sql == string(sql) {
		return m.sql, m.plain
	}
	text := string(sql)
	return text, s.plainRead(text)
}

// plainMemo is the last answer of plainRead.
type plainMemo struct {
	sql   string
	plain bool
	known bool
}

// routeOf decides how sql runs. A plain read goes to the backend unchanged
// without being parsed; so does anything the parser rejects (the backend
// then reports its own error), except what mzproxy refuses (0A000) and
// what is nested too deeply for the planner to parse (54001).
//
// Every write takes the commit slot, whether or not its table is managed:
// telling them apart would need the session's search_path and temporary
// tables, and an unmanaged write in a proxy transaction is still correct,
// only serialized with the others.
func (s *Session) routeOf(sql string) route {
	if s.plainRead(sql) {
		return route{}
	}
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if err != nil {
		switch pgerr.Of(err) {
		case pgerr.FeatureNotSupported, pgerr.StatementTooComplex:
			// Too deep for the planner is refused too: forwarded, a
			// write PostgreSQL still accepts would run unplanned, outside
			// the commit slot (on a managed table the backend's guard
			// then fails it with MZ002, a confusing answer).
			return route{refused: err}
		}
		return route{}
	}
	var r route
	r.replayable = len(stmts) == 1 && stmts[0].Kind == planner.KindWrite && !stmts[0].CopyFromStdin
	r.createDatabase = len(stmts) == 1 && stmts[0].Tag == "CREATE DATABASE"
	r.dropDatabase = len(stmts) == 1 && stmts[0].Tag == "DROP DATABASE"
	neutral, control := true, false
	for _, st := range stmts {
		control = control || st.Kind == planner.KindTransaction
		if st.Kind == planner.KindTransaction && st.Txn != nil &&
			(st.Txn.Kind == planner.TxnCommit || st.Txn.Kind == planner.TxnPrepare) {
			r.commits = true
		}
		if needsCommitSlot(st) {
			r.write = true
			r.ddl = r.ddl || st.Kind == planner.KindDDL
			neutral = neutral && st.Kind == planner.KindDDL && st.CatalogNeutral
		}
		if st.CopyFromStdin {
			r.copyIn = true
		}
	}
	r.slotOnlyInBlock = r.write && neutral && !control
	r.oneDDL = r.write && r.ddl && len(stmts) == 1 && !control && !r.copyIn
	return r
}

// needsCommitSlot reports whether a statement must run in a proxy write
// transaction.
func needsCommitSlot(st *planner.Statement) bool {
	switch st.Kind {
	case planner.KindWrite:
		return true
	case planner.KindDDL:
		return transactional(st)
	case planner.KindExecute:
		// EXECUTE of a statement PREPAREd earlier: it may write.
		return true
	case planner.KindExplain:
		// EXPLAIN ANALYZE runs its statement.
		return st.Inner != nil && st.Inner.Kind == planner.KindWrite
	}
	return false
}

// transactional reports whether DDL can run inside a transaction block
// (CREATE DATABASE, tablespaces and CONCURRENTLY cannot; they never change
// managed tables' contents, so they run as they are).
func transactional(st *planner.Statement) bool {
	switch st.Tag {
	case "CREATE DATABASE", "DROP DATABASE", "CREATE TABLESPACE", "DROP TABLESPACE",
		"CREATE SUBSCRIPTION", "DROP SUBSCRIPTION", "ALTER SUBSCRIPTION":
		return false
	}
	return !containsWordFold(st.SQL, "concurrently")
}

// containsWordFold reports whether s contains word (lower case) as a whole
// word, ignoring ASCII case.
func containsWordFold(s, word string) bool {
	lower := strings.ToLower(s)
	for i := 0; ; {
		j := strings.Index(lower[i:], word)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(word)
		if (j == 0 || !isIdentByte(lower[j-1])) && (end == len(lower) || !isIdentByte(lower[end])) {
			return true
		}
		i = j + 1
	}
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}
