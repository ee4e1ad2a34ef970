package proxy

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

// An error of mzproxy's own (a statement it refuses, a wait of its own
// that timed out or was canceled, a read hold it lost) is not one the
// backend saw: without more, a transaction block would go on as if the
// statement had never been sent, and an extended-protocol batch would
// commit the statements before it at its Sync. PostgreSQL aborts the
// block after any error (25P02 for what follows, until ROLLBACK or
// ROLLBACK TO SAVEPOINT) and rolls back a batch's implicit transaction.
// So after such an error the session makes the backend fail too, with a
// statement that cannot be parsed (refusedSQL): the backend's
// transaction then is exactly as PostgreSQL's own error would have left
// it, and everything after follows from the backend's own state (its
// ReadyForQuery 'E', its 25P02, its savepoints).

// refusedStatement names the statement whose Parse fails. Its Parse never
// succeeds, so the name is never taken.
var refusedStatement = ownName("mzproxy_refused")

// refusedSQL fails at its Parse (the literal's cast is done while the
// statement is analyzed), naming mzproxy in the server's log.
const refusedSQL = "SELECT 'mzproxy refused the statement'::pg_catalog.int4"

// abortAfterRefusal makes the backend's transaction fail after err, an
// error the session returns for the client's msg, where PostgreSQL's own
// error would have aborted something: the transaction block of a simple
// Query, or the batch (and block) of an extended-protocol message. It
// returns err, or an error of the backend connection met meanwhile.
func (s *Session) abortAfterRefusal(ctx context.Context, msg pgproto3.FrontendMessage, err error) error {
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.IsFatal() || s.copy != copyNone {
		return err
	}
	extended := false
	switch msg.(type) {
	case *pgproto3.Query:
		if s.tx != txBlock {
			return err
		}
	case *pgproto3.Parse, *pgproto3.Bind, *pgproto3.Describe, *pgproto3.Execute, *pgproto3.Close, *pgproto3.Flush:
		extended = true
	default:
		return err
	}
	if s.occBatch != nil {
		// A held write's Bind (write.go): sent nowhere yet, and dropped
		// with the batch.
		s.occBatch = nil
	}
	// The answers owed to what came before are read first.
	if s.txn.guard != nil || s.be.pendingRead != nil || s.units.len() > 0 {
		if ferr := s.be.w.Send(&pgproto3.Flush{}); ferr != nil {
			return s.lost(ferr)
		}
		if ferr := s.exchange(ctx); ferr != nil {
			return ferr
		}
	}
	if s.skipping || s.be.failed || !extended && s.tx != txBlock {
		// The backend failed already: it skips to the client's Sync, or
		// its block is aborted. (A block the session holds is failed
		// here even when the backend's last ReadyForQuery said 'E': a
		// query of the proxy's own that a cancel or the deadline
		// stopped in the block aborted the backend's block and left the
		// session's going; the refused Parse then gets 25P02, and its
		// ReadyForQuery is followed.)
		return err
	}
	if ferr := s.be.w.Send(&pgproto3.Parse{Name: refusedStatement, Query: refusedSQL}); ferr != nil {
		return s.lost(ferr)
	}
	var end pgproto3.FrontendMessage = &pgproto3.Sync{}
	if extended {
		// The client's Sync ends the batch; the backend skips to it.
		end = &pgproto3.Flush{}
	}
	if ferr := s.be.w.Send(end); ferr != nil {
		return s.lost(ferr)
	}
	if ferr := s.be.w.Flush(); ferr != nil {
		return s.lostWrite(ferr)
	}
	failed := false
	for {
		typ, frame, rerr := s.be.next()
		if rerr != nil {
			return s.lost(rerr)
		}
		switch {
		case typ == 'E':
			if fatal, ferr := s.backendErrorIsFatal(frame); fatal {
				return ferr
			}
			failed = true
			if extended {
				s.skipping = true
				return err
			}
		case typ == 'Z' && failed:
			s.readyForQuery(&unit{kind: uSync}, frame)
			return err
		}
	}
}

// readOnlyCommand is the command PostgreSQL names when it refuses st in a
// read-only transaction (its CreateCommandName), or "" when the planner's
// record does not say.
func readOnlyCommand(st *planner.Statement) string {
	switch st.Kind {
	case planner.KindWrite:
		if st.Tag == "COPY" {
			return "COPY FROM"
		}
		return st.Tag
	case planner.KindDDL:
		if st.Tag == "SELECT" {
			// CREATE TABLE AS or SELECT INTO: the record does not say
			// which.
			return ""
		}
		return st.Tag
	case planner.KindExplain:
		if st.Inner != nil && st.Inner.Kind == planner.KindWrite {
			return readOnlyCommand(st.Inner)
		}
	}
	return ""
}

// slotRefusal is frame, an ErrorResponse to the write slot the proxy took
// before the client's statement s.slotSQL, as the client's own statement
// would have failed in its place: in a read-only transaction
// (default_transaction_read_only, SET SESSION CHARACTERISTICS) the slot's
// own work is refused first (25006: "cannot execute nextval() in a
// read-only transaction" until storage 41, "cannot execute SELECT FOR
// SHARE in a read-only transaction" since 44's flat slot), where
// PostgreSQL names the client's command.
// Any other error is frame as it is.
func (s *Session) slotRefusal(frame []byte) []byte {
	if s.slotSQL == "" || errorCode(wire.Body(frame)) != string(pgerr.ReadOnlySQLTransaction) {
		return frame
	}
	stmts, err := s.proxy.planner.Shape(s.slotSQL, emptyCatalog{}, planner.Options{})
	if err != nil {
		return frame
	}
	for _, st := range stmts {
		if !needsCommitSlot(st) {
			continue
		}
		cmd := readOnlyCommand(st)
		if cmd == "" {
			return frame
		}
		out, err := (&pgproto3.ErrorResponse{
			Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: string(pgerr.ReadOnlySQLTransaction),
			Message: "cannot execute " + cmd + " in a read-only transaction",
		}).Encode(nil)
		if err != nil {
			return frame
		}
		return out
	}
	return frame
}
