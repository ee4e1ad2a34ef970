package proxy

import (
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/planner"
)

// The client's prepared statements and portals. What the session knows of
// each is one record, made once at its Parse or Bind and never changed
// (a Parse of the same name makes a new record), kept in one namespace
// with PostgreSQL's lifetimes:
//
//   - a statement lives until Close, DEALLOCATE [ALL] or DISCARD ALL; the
//     unnamed one is replaced by the next Parse and by every simple Query;
//   - a portal lives until Close, DISCARD ALL or the end of its
//     transaction (an extended-protocol batch outside a block is an
//     implicit transaction that ends at Sync); the unnamed one is replaced
//     by the next Bind and by every simple Query.
//
// A portal keeps the record of the statement it was bound from, so it
// outlives that statement's Close, as in PostgreSQL. The proxy's own
// statements and portals (mzproxy_*) are not recorded here: they never
// take a client's name.

// preparedStmt is what the session knows of one of the client's prepared
// statements.
type preparedStmt struct {
	sql   string
	route route // how its Execute runs: write slot, commit, DDL, replay
	// effect is the statement when it changes the session's tracked
	// settings or its prepared statements (DEALLOCATE), applied at its
	// CommandComplete; nil otherwise.
	effect *planner.Statement
	// explicit is the statement's plan on the explicit-timestamp path
	// (nil when it is forwarded as written); tsParam: the rewrite takes
	// the proxy's timestamp as one more, last, parameter.
	explicit *planner.Statement
	tsParam  bool
	// params is the number of parameters the client's statement has, as
	// PostgreSQL counts them (the highest $n, or the types the Parse
	// declared), when tsParam is set: the Bind must supply as many.
	params int
	// parsed is how an explicit statement was planned, to plan it again
	// (nil for the others; a pointer keeps the record comparable).
	parsed *explicitParse
	// unnamed is set on the record of the client's unnamed statement when
	// the event loop bound a statement of the proxy's in its place
	// (loop_parse.go): the backend's unnamed statement is not the
	// client's, and is parsed again (reparseUnnamed) before the client
	// binds or describes it without parsing it first.
	unnamed *unnamedRead
}

// unnamedRead is what the backend's unnamed statement is to be parsed
// as, and the client's record without the mark.
type unnamedRead struct {
	rec  *preparedStmt
	sql  string
	oids []uint32
}

// explicitParse is what an explicit-timestamp statement was planned with:
// the search_path (as SHOW spells it) its names were resolved in, and the
// parameter types the client's Parse declared. A Bind under another path
// plans and prepares the statement again (followSearchPath).
type explicitParse struct {
	path     string
	declared []uint32
}

// portal is what the session knows of one of the client's portals.
type portal struct {
	stmt *preparedStmt
	// explain is set for a portal the proxy answers itself (EXPLAIN
	// TIMESTAMP, SHOW transaction_isolation).
	explain *explainPortal
	// bind is the client's Bind of a DROP DATABASE, and stmtName its
	// statement's name, to bind it again (dropDatabaseExtended).
	bind     []byte
	stmtName string
}

// unknownStmt stands for a statement the session has no record of (never
// parsed, or prepared with SQL PREPARE): it is forwarded as it is.
var unknownStmt = &preparedStmt{}

// statement returns the record of the prepared statement name.
func (s *Session) statement(name string) *preparedStmt {
	if st := s.stmts[name]; st != nil {
		return st
	}
	return unknownStmt
}

// portalOf returns the record of the portal name.
func (s *Session) portalOf(name string) *portal {
	if p := s.portals[name]; p != nil {
		return p
	}
	return &portal{stmt: unknownStmt}
}

// defineStatement records a statement the client parsed.
func (s *Session) defineStatement(name string, st *preparedStmt) {
	if s.stmts == nil {
		s.stmts = map[string]*preparedStmt{}
	}
	s.stmts[name] = st
}

// definePortal records a portal the client bound from statement stmt.
func (s *Session) definePortal(name, stmt string) *portal {
	if s.portals == nil {
		s.portals = map[string]*portal{}
	}
	p := &portal{stmt: s.statement(stmt)}
	s.portals[name] = p
	return p
}

// reparseUnnamed parses the client's unnamed statement on the backend
// again when the event loop bound a statement of the proxy's in its
// place and the client now binds or describes name, the unnamed
// statement, without parsing it first (preparedStmt.unnamed). It is
// parsed with the catalog of now, as a Bind's timestamp is chosen with.
func (s *Session) reparseUnnamed(name string) error {
	st := s.stmts[name]
	if name != "" || st == nil || st.unnamed == nil {
		return nil
	}
	u := st.unnamed
	s.defineStatement(name, u.rec)
	return s.internalMsg(&pgproto3.Parse{Query: u.sql, ParameterOIDs: u.oids}, uParse)
}

// forgetStatement drops the record of the prepared statement name, which
// was closed or replaced.
func (s *Session) forgetStatement(name string) { delete(s.stmts, name) }

// forgetPortal drops the record of the portal name, which was closed or
// replaced.
func (s *Session) forgetPortal(name string) { delete(s.portals, name) }

// endPortals drops every portal: their transaction is over.
func (s *Session) endPortals() { clear(s.portals) }

// deallocate follows DEALLOCATE name, or DEALLOCATE ALL when name is "".
func (s *Session) deallocate(name string) {
	if name == "" {
		clear(s.stmts)
		return
	}
	delete(s.stmts, name)
}
