package proxy

import (
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/timeouts"
)

// The session's side of the event loop (package evloop): between
// statements, a session idle in a plain state lends its sockets to the
// loop, which forwards the client's plain reads and relays their answers
// itself. The loop calls Admit and Answer on its own goroutine while the
// connection's goroutine waits for it, so they follow the session's state
// as handle and exchange would, without a lock.

// detachable makes the backend's socket one the loop can take (a TCP or
// Unix socket without TLS; others stay as they are).
func (b *backend) detachable() {
	if b.r.Buffered() > 0 || b.w.Buffered() > 0 {
		return
	}
	if lc := evloop.Wrap(b.nc); lc != nil {
		b.nc = lc
		b.r.Reset(lc)
		b.w.Reset(lc)
	}
}

// LoopBackend implements frontend.LoopSession: the backend's socket when
// everything the loop does not follow is absent.
func (s *Session) LoopBackend() *evloop.Conn {
	lc, ok := s.be.nc.(*evloop.Conn)
	switch {
	case !ok, s.proxy.cfg.HistoryReads, s.dump:
		return nil
	case s.tx != txIdle, s.txn.phase != txnNone, s.units.len() > 0, s.midRequest,
		s.copy != copyNone, s.listening, s.idleRead != nil, s.occBatch != nil,
		s.skipping, s.muted, s.be.unsynced, s.budget != nil:
		return nil
	case s.be.r.Buffered() > 0, s.be.w.Buffered() > 0, s.client.Buffered() > 0:
		return nil
	case len(s.portalHolds) > 0, len(s.txn.holds) > 0:
		return nil
	case s.stmt != nil && !s.stmt.deadline.IsZero(), s.hasStatementTimeout():
		return nil
	}
	return lc
}

// Admit implements evloop.Peer: a batch is forwarded as it is when every
// message in it is one the session would forward unchanged (a Query or
// Parse of a plain read, Bind, Describe and Execute of one, the Sync);
// then the session records it as handle would have.
//
// A Cancel under way (it holds stmtMu while its CancelRequest reaches the
// backend) may be for the batch just answered: a batch forwarded now
// could meet that cancel at the backend. Such a batch goes to the
// session's goroutine, which waits for the Cancel as it does for any
// message (setStatementCancel); the loop's goroutine must not wait.
func (s *Session) Admit(batch []byte) bool {
	if !s.stmtMu.TryLock() {
		return false
	}
	defer s.stmtMu.Unlock()
	msgs, ok := s.plainBatch(batch)
	if !ok {
		return false
	}
	for _, msg := range msgs {
		s.observeMessage(msg)
		s.admitted(msg)
	}
	// At the backend, as relay's exchange would say (SHOW mzproxy_sessions).
	s.enter(timeouts.PhaseExecute)
	s.loopFlight.Store(true)
	return true
}

// plainBatch decodes a batch and judges it without changing anything:
// names parsed and portals bound earlier in the batch count as recorded.
func (s *Session) plainBatch(batch []byte) ([]pgproto3.FrontendMessage, bool) {
	var msgs []pgproto3.FrontendMessage
	parsed := map[string]bool{}
	bound := map[string]bool{}
	plainStmt := func(name string) bool {
		if p, ok := parsed[name]; ok {
			return p
		}
		st, ok := s.stmts[name]
		return ok && st.explicit == nil && !st.tsParam && st.effect == nil && s.plainRead(st.sql)
	}
	plainPortal := func(name string) bool {
		if b, ok := bound[name]; ok {
			return b
		}
		p, ok := s.portals[name]
		return ok && p.explain == nil && p.stmt.explicit == nil && s.plainRead(p.stmt.sql)
	}
	for off := 0; off < len(batch); {
		n := int(batch[off+1])<<24 | int(batch[off+2])<<16 | int(batch[off+3])<<8 | int(batch[off+4])
		frame := batch[off : off+1+n]
		off += 1 + n
		msg, ok := decodePlain(frame)
		if !ok {
			return nil, false
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			ok = s.plainRead(m.String)
		case *pgproto3.Parse:
			ok = s.plainRead(m.Query)
			parsed[m.Name] = ok
		case *pgproto3.Bind:
			ok = plainStmt(m.PreparedStatement)
			bound[m.DestinationPortal] = ok
		case *pgproto3.Describe:
			ok = m.ObjectType == 'S' && plainStmt(m.Name) || m.ObjectType == 'P' && plainPortal(m.Name)
		case *pgproto3.Execute:
			ok = plainPortal(m.Portal)
		}
		if !ok {
			return nil, false
		}
		msgs = append(msgs, msg)
	}
	return msgs, true
}

// decodePlain decodes the messages a plain batch is made of; the frontend
// reads a Query and a Parse as PostgreSQL does, the loop leaves anything
// it cannot read to it.
func decodePlain(frame []byte) (pgproto3.FrontendMessage, bool) {
	var msg pgproto3.FrontendMessage
	switch frame[0] {
	case 'Q':
		msg = &pgproto3.Query{}
	case 'P':
		msg = &pgproto3.Parse{}
	case 'B':
		msg = &pgproto3.Bind{}
	case 'D':
		msg = &pgproto3.Describe{}
	case 'E':
		msg = &pgproto3.Execute{}
	case 'S':
		msg = &pgproto3.Sync{}
	default:
		return nil, false
	}
	body := wire.Body(frame)
	if (frame[0] == 'Q' || frame[0] == 'P') && !validText(body) {
		return nil, false
	}
	return msg, msg.Decode(body) == nil
}

// validText: the body's strings are what PostgreSQL reads without an
// error of its own (no NUL inside a Query; valid UTF-8 is the backend's
// to judge, as on the normal path for a plain read).
func validText(body []byte) bool {
	return len(body) > 0 && body[len(body)-1] == 0
}

// admitted records an admitted message as handle does on the way to the
// backend.
func (s *Session) admitted(msg pgproto3.FrontendMessage) {
	switch m := msg.(type) {
	case *pgproto3.Query:
		s.forgetStatement("")
		s.forgetPortal("")
	case *pgproto3.Parse:
		s.forgetStatement(m.Name)
		s.defineStatement(m.Name, &preparedStmt{sql: m.Query})
	case *pgproto3.Bind:
		s.definePortal(m.DestinationPortal, m.PreparedStatement)
	}
}

// Answer implements evloop.Peer: it follows the backend's answer as
// exchange does for a forwarded request.
func (s *Session) Answer(typ byte, frame []byte) bool {
	switch typ {
	case 'Z':
		s.loopFlight.Store(false)
		s.readyForQuery(&unit{kind: uQuery, relayZ: true}, frame)
		if s.obs.Active() {
			s.obs.End(byte(s.tx))
		}
		return s.tx == txIdle
	case 'E':
		s.noteBackendError(frame)
		fatal, _ := s.backendErrorIsFatal(frame)
		return !fatal
	case 'C':
		s.noteCommand(frame)
		return true
	case 'T', 'I', 'N', '1', '2', '3', 'n', 't', 's', 'S':
		return true
	}
	// Anything else (COPY, a notification, a malformed frame) is not an
	// answer of a plain read: the session's goroutine takes over.
	return false
}

// Abandon implements evloop.Peer: the client is gone with a batch at the
// backend. It runs alongside the session's goroutine, which ends the
// session: loopFlight is atomic, the backend's cancel key never changes.
func (s *Session) Abandon() {
	if s.loopFlight.Load() {
		s.cancelBackend()
	}
}

// hasStatementTimeout: statements get a deadline, which the loop does not
// keep (the proxy's own path enforces it).
func (s *Session) hasStatementTimeout() bool {
	s.followConfigTimeout()
	return s.settings.Effective(timeouts.StatementTimeout) != 0
}
