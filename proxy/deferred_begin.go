package proxy

import (
	"context"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// A plain BEGIN sent as a simple Query is answered by the proxy (BEGIN,
// then ReadyForQuery 'T') and reaches the backend with the request that
// follows it: a read-only transaction's first read then costs one round
// trip for pin_peek, the BEGIN and the gate-less pin together (pinQuick),
// instead of one for the BEGIN and one for the pin. Before any other
// request the BEGIN is sent first, in a round trip of its own, as it was
// before (flushDeferredBegin), so every other path sees the backend in
// the block the client began.
//
// A plain BEGIN (no isolation level, access mode or deferrable option)
// cannot fail but for the connection's loss, so answering it early tells
// the client nothing untrue. While it is deferred the backend is idle, so
// its idle_in_transaction_session_timeout does not run.

// deferBegin answers sql, the client's plain BEGIN, when nothing is
// outstanding on the backend, and keeps it to send later. It reports
// whether it did.
func (s *Session) deferBegin(sql string) (bool, error) {
	opts := beginOptions(s.proxy.planner, sql)
	if opts == nil || *opts != (planner.TxnOptions{}) || s.units.len() > 0 || s.be.unsynced ||
		s.skipping || len(s.portals) > 0 || s.writeSlot {
		return false, nil
	}
	s.noteBegin(sql)
	s.txn.deferredBegin = true
	s.tx = txBlock
	return true, s.answer(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")})
}

// flushDeferredBegin sends the BEGIN the proxy answered, and waits for its
// answers (the proxy's own), before a request that is not a read-only
// transaction's first read.
func (s *Session) flushDeferredBegin(ctx context.Context) error {
	if !s.txn.deferredBegin {
		return nil
	}
	s.txn.deferredBegin = false
	if err := s.internal(s.txn.beginSQL, false); err != nil {
		return err
	}
	return s.exchange(ctx)
}

// sendDeferredBegin queues, unflushed, pin_peek and then the deferred
// BEGIN as simple Queries (a simple Query of the client's follows them
// anyway: the unnamed statement is not the client's to keep), in front of
// the gate-less pin; readDeferredBegin reads their answers. pin_peek keeps
// its answer in the session for the check (storage.PinPeeked).
func (s *Session) sendDeferredBegin() error {
	s.txn.deferredBegin = false
	for _, sql := range []string{storage.PinPeekSQL, s.txn.beginSQL} {
		if err := s.be.w.Send(&pgproto3.Query{String: sql}); err != nil {
			return err
		}
	}
	return nil
}

// readDeferredBegin reads the answers to sendDeferredBegin's two Queries.
// A failed pin_peek leaves the session's last answer, which is as good
// (see pin_trim.sql); the plain BEGIN fails only with the connection, and
// the session then ends.
func (s *Session) readDeferredBegin() error {
	for readies, query := 0, 0; readies < 2; {
		typ, frame, err := s.be.next()
		if err != nil {
			return connectionLost(err)
		}
		switch typ {
		case 'Z':
			readies++
			query++
		case 'E':
			if fatal, err := s.backendErrorIsFatal(frame); fatal {
				return err
			}
			if query == 1 {
				return pgerr.Fatal(pgerr.InternalError, "mzproxy could not send the transaction's BEGIN")
			}
		}
	}
	return nil
}
