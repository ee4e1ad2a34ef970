package proxy

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/timeouts"
)

// Materialize's isolation levels. transaction_isolation is the proxy's
// session setting, not the backend's: the backend runs every session at
// its default level, and the proxy's sequencing gives the guarantee.
const (
	strictSerializable = "strict serializable"
	serializable       = "serializable"
)

// shownIsolation is what SHOW transaction_isolation answers at either of
// mzproxy's levels: PostgreSQL's name for its strongest level, which both
// guarantee (strict serializable is serializable in real-time order).
// Drivers read the level back and set it again later in PostgreSQL's
// syntax (SET SESSION CHARACTERISTICS, BEGIN ISOLATION LEVEL) or check it
// against PostgreSQL's four names (SQLAlchemy, when it resets a pooled
// connection), so "strict serializable" broke them. That SET or BEGIN
// reaches the backend and leaves mzproxy's level as it was.
const shownIsolation = serializable

// isolationLevel maps a requested level to the one mzproxy runs, as
// Materialize does: PostgreSQL's weaker names are accepted and mean
// serializable.
func isolationLevel(v string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case strictSerializable:
		return strictSerializable, true
	case serializable, "repeatable read", "read committed", "read uncommitted":
		return serializable, true
	}
	return "", false
}

// sessionSetting answers SET, SHOW and RESET of transaction_isolation from
// the proxy. It reports whether it handled the query string.
func (s *Session) sessionSetting(ctx context.Context, sql string) (bool, error) {
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if err != nil || len(stmts) != 1 || stmts[0].Var == nil {
		return false, nil
	}
	if stmts[0].Kind == planner.KindShow && stmts[0].Var.Name == timeouts.StatementTimeout.String() {
		return true, s.showStatementTimeout()
	}
	if stmts[0].Var.Name != "transaction_isolation" {
		return false, nil
	}
	st := stmts[0]
	switch st.Kind {
	case planner.KindShow:
		return true, s.answer(isolationRow(0), isolationValue(), &pgproto3.CommandComplete{CommandTag: []byte("SHOW")})
	case planner.KindReset:
		s.isolation = strictSerializable
	case planner.KindSet:
		if st.Var.Default || len(st.Var.Values) == 0 {
			s.isolation = strictSerializable
			break
		}
		level, ok := isolationLevel(strings.Join(st.Var.Values, " "))
		if !ok {
			return true, pgerr.New(pgerr.InvalidParameterValue,
				"invalid value for parameter \"transaction_isolation\": %q", strings.Join(st.Var.Values, " ")).
				WithHint("Available values: strict serializable, serializable, repeatable read, read committed, read uncommitted.")
		}
		s.isolation = level
	default:
		return false, nil
	}
	return true, s.answer(&pgproto3.CommandComplete{CommandTag: []byte(st.Tag)})
}

// showsIsolation reports whether st is SHOW transaction_isolation (also
// spelled SHOW TRANSACTION ISOLATION LEVEL), which mzproxy answers.
func showsIsolation(st *planner.Statement) bool {
	return st.Kind == planner.KindShow && st.Var != nil && st.Var.Name == "transaction_isolation"
}

// isolationShow returns the plan of sql when it is SHOW
// transaction_isolation, else nil.
func (s *Session) isolationShow(sql string) *planner.Statement {
	if !strings.Contains(strings.ToLower(sql), "isolation") {
		return nil // most statements: not worth parsing again
	}
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if err != nil || len(stmts) != 1 || !showsIsolation(stmts[0]) {
		return nil
	}
	return stmts[0]
}

// isolationRow describes SHOW transaction_isolation's one text column as
// PostgreSQL does; format is the result format the client asked for (text
// and binary are the same bytes for text).
func isolationRow(format int16) *pgproto3.RowDescription {
	return &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{
		Name: []byte("transaction_isolation"), DataTypeOID: textOID, DataTypeSize: -1, TypeModifier: -1, Format: format,
	}}}
}

func isolationValue() *pgproto3.DataRow {
	return &pgproto3.DataRow{Values: [][]byte{[]byte(shownIsolation)}}
}

// answer sends a complete answer of the proxy's own to a simple Query,
// when nothing from the backend is outstanding.
func (s *Session) answer(msgs ...pgproto3.BackendMessage) error {
	for _, m := range append(msgs, &pgproto3.ReadyForQuery{TxStatus: byte(s.tx)}) {
		if err := s.client.Send(m); err != nil {
			return err
		}
	}
	return s.client.Flush()
}
