package proxy

import (
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/timeouts"
)

// The session follows its time-valued settings (statement_timeout and the
// idle timeouts) as SET, RESET and transaction control pass through to the
// backend, so that it knows each statement's timeout without asking. A
// statement's effect is applied when the backend reports it done (its
// CommandComplete), so a SET the backend refused changes nothing; a
// transaction block that ends in a rollback undoes what it set, as in
// PostgreSQL (package timeouts keeps the rules).

// trackSettings returns, for a query string, the statements that change
// the tracked settings or the prepared statements (see hasEffect), one
// entry per statement (nil for the others), or nil when none does. A string of several statements runs in an implicit
// transaction block of its own, which begins here.
func (s *Session) trackSettings(sql string) []*planner.Statement {
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if err != nil {
		return nil
	}
	var ops []*planner.Statement
	settings := false
	for i, st := range stmts {
		if !hasEffect(st) {
			continue
		}
		if ops == nil {
			ops = make([]*planner.Statement, len(stmts))
		}
		ops[i] = st
		settings = settings || changesSettings(st)
	}
	if settings && len(stmts) > 1 && s.tx == txIdle {
		s.settings.Begin()
	}
	return ops
}

// effectOf returns the statement of an extended-protocol Parse when it
// changes the tracked settings or the prepared statements, else nil.
func (s *Session) effectOf(sql string) *planner.Statement {
	if s.plainRead(sql) {
		return nil
	}
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if err != nil || len(stmts) != 1 || !hasEffect(stmts[0]) {
		return nil
	}
	return stmts[0]
}

// hasEffect reports whether st changes what the session follows: its
// tracked settings, or its prepared statements (DEALLOCATE).
func hasEffect(st *planner.Statement) bool {
	return changesSettings(st) || st.Kind == planner.KindDeallocate
}

// changesSettings reports whether st may change the tracked settings.
func changesSettings(st *planner.Statement) bool {
	if st.Txn != nil {
		return true
	}
	if st.Var == nil || st.Kind != planner.KindSet && st.Kind != planner.KindReset {
		return false
	}
	_, tracked := timeouts.LookupParam(st.Var.Name)
	return tracked || st.Kind == planner.KindReset && st.Var.Name == "all"
}

// applySetting applies a statement the backend reported done with tag.
func (s *Session) applySetting(st *planner.Statement, tag string) {
	var err error
	switch {
	case st.Kind == planner.KindDeallocate:
		s.deallocate(st.Deallocate)
	case st.Txn != nil:
		switch st.Txn.Kind {
		case planner.TxnBegin:
			s.settings.Begin()
		case planner.TxnCommit, planner.TxnPrepare:
			// COMMIT of a failed block is reported as ROLLBACK.
			if tag == "ROLLBACK" {
				s.settings.Rollback()
			} else {
				s.settings.Commit()
			}
		case planner.TxnRollback:
			s.settings.Rollback()
		case planner.TxnSavepoint:
			err = s.settings.Savepoint(st.Txn.Savepoint)
		case planner.TxnRelease:
			err = s.settings.ReleaseSavepoint(st.Txn.Savepoint)
		case planner.TxnRollbackTo:
			err = s.settings.RollbackToSavepoint(st.Txn.Savepoint)
		}
		if st.Txn.Chain && st.Txn.Ends() {
			s.settings.Begin()
		}
	case st.Kind == planner.KindReset && st.Var.Name == "all":
		s.settings.ResetAll()
	case st.Kind == planner.KindReset:
		err = s.settings.Reset(st.Var.Name, false)
	case st.Var.Default || len(st.Var.Values) == 0:
		err = s.settings.Reset(st.Var.Name, st.Var.Local)
	default:
		err = s.settings.Set(st.Var.Name, strings.Join(st.Var.Values, ","), st.Var.Local)
	}
	if err != nil {
		// The backend accepted what the proxy cannot follow: the
		// proxy's deadline may now differ from the backend's own.
		s.log.WithError(err).Warn("could not follow a setting change the backend accepted")
	}
}

// settleSettings follows the end of a transaction block that no tracked
// statement ended (an implicit block, or a block whose COMMIT or ROLLBACK
// was not planned): at ReadyForQuery with status 'I', a block still open
// in the settings ended, in a rollback if it had failed.
func (s *Session) settleSettings(prev txStatus) {
	if s.tx == txIdle && s.settings.InTransaction() {
		if prev == txFailed || s.requestFailed {
			s.settings.Rollback()
		} else {
			s.settings.Commit()
		}
	}
	s.requestFailed = false
}

// showStatementTimeout answers SHOW statement_timeout with the value in
// force, which may be mzproxy's configured default the backend does not
// know.
func (s *Session) showStatementTimeout() error {
	v, err := s.settings.Show(timeouts.StatementTimeout.String())
	if err != nil {
		return err
	}
	return s.answer(
		&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{
			Name: []byte("statement_timeout"), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1,
		}}},
		&pgproto3.DataRow{Values: [][]byte{[]byte(v)}},
		&pgproto3.CommandComplete{CommandTag: []byte("SHOW")},
	)
}
