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

// sendDeferredBegin queues, unflushed, pin_peek (prepared, in an implicit
// transaction of its own that a Sync ends) and then the deferred BEGIN, in
// front of the gate-less pin; readDeferredBegin reads their answers.
// pin_peek keeps its answer in the session for the check
// (storage.PinPeeked), which is sent before it answers.
func (s *Session) sendDeferredBegin() error {
	s.txn.deferredBegin = false
	var msgs []pgproto3.FrontendMessage
	if !s.pinPeekPrepared {
		// Closed first: a client may have prepared the name.
		msgs = append(msgs, &pgproto3.Close{ObjectType: 'S', Name: pinPeekStatement},
			&pgproto3.Parse{Name: pinPeekStatement, Query: storage.PinPeekSQL})
		s.pinPeekPrepared = true
	}
	msgs = append(msgs, &pgproto3.Bind{DestinationPortal: pinPeekStatement, PreparedStatement: pinPeekStatement},
		&pgproto3.Execute{Portal: pinPeekStatement},
		&pgproto3.Close{ObjectType: 'P', Name: pinPeekStatement},
		&pgproto3.Sync{},
		&pgproto3.Query{String: s.txn.beginSQL})
	for _, m := range msgs {
		if err := s.be.w.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// readDeferredBegin reads the answers to sendDeferredBegin's messages, up
// to the BEGIN's ReadyForQuery. A failed pin_peek leaves the session's
// last answer, which is as good (see pin_trim.sql), and is prepared again
// next time; the plain BEGIN fails only with the connection, and the
// session then ends.
func (s *Session) readDeferredBegin() error {
	for readies := 0; readies < 2; {
		typ, frame, err := s.be.next()
		if err != nil {
			return connectionLost(err)
		}
		switch typ {
		case 'Z':
			readies++
		case 'E':
			if fatal, err := s.backendErrorIsFatal(frame); fatal {
				return err
			}
			if readies == 1 {
				return pgerr.Fatal(pgerr.InternalError, "mzproxy could not send the transaction's BEGIN")
			}
			s.pinPeekPrepared = false
		}
	}
	return nil
}
