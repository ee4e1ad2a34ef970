package proxy

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
)

// A prepared read in the round trip of its own batch (issue 15). The Bind
// of a prepared read (AS OF, mz_now(), history mode) that begins an
// extended-protocol batch outside a transaction block is planned with the
// catalog and frontiers the proxy saw last, and the read guard
// (readGuardSQL) is sent in front of it, in the same write: the guard's
// Bind and Execute, then the client's Bind and whatever of its batch
// follows (Describe, Execute, Sync). The backend answers all of it in one
// round trip.
//
//   - A read of the present is bound with its timestamp parameter NULL:
//     the rewrite reads coalesce($n, mzproxy.read_ts) (tsParamSQL), the
//     timestamp the guard pins in the same implicit transaction. The
//     guard's Execute runs before the client's Bind, so the Bind's
//     snapshot (READ COMMITTED takes it at Bind) is after the pin, and the
//     read sees exactly the writes at or below t. An AS OF read is bound
//     with its timestamp, chosen before.
//   - The guard's answers come first: the proxy reads them (at the
//     client's Sync, or, when the client sends anything else first, after
//     a Flush of its own) before it relays any of the read's, so t is known
//     before the first of them.
//   - When the guard refuses (the catalog changed since it was seen, or
//     the client dropped the guard's statement), the backend has skipped
//     the client's messages behind it until a Sync: nothing of the read
//     ran. The proxy ends the skip (the client's Sync, whose
//     ReadyForQuery it drops, or a Sync of its own), binds again the
//     ordinary way (the current catalog, a pin of its own) and sends the
//     client's messages again, kept for it (forward). The client sees the
//     answers of the second attempt only.
//   - Any other error of the guard (a cancel, statement_timeout) is the
//     batch's, as an error of the client's Bind would be.
//
// Between statements, the event loop sends the same batch for a named
// statement when none of this needs a round trip or a wait
// (admitBoundRead, loop_read.go); a batch it gives back is taken over
// here, at the Sync, as if this code had sent it (resumeLoopBind).

// pendingReadGuard is a read guard sent in front of the client's Bind,
// whose answers have not been read. A connection has one at a time, and
// reuses its storage from one read to the next (backend.readGuardScratch):
// what it keeps for a refusal, which rarely comes, costs a read no
// allocation of its own once the buffers have grown.
type pendingReadGuard struct {
	present bool
	c       *choice // the read's timestamp (a read of the present: set by the guard's answer)
	// To bind again when the guard refuses: the client's Bind and portal,
	// its statement (AS OF resolved) and the parameters to forward; frames
	// are the client's messages forwarded behind the Bind. The Bind's and
	// frames' bytes are copies in kept: the client's are in the frame they
	// were read from, which the next message overwrites.
	bind   pgproto3.Bind
	portal *portal
	st     *planner.Statement
	params [][]byte
	frames [][]byte
	kept   []byte
}

// keep copies b into g.kept (nil stays nil: a NULL parameter). Earlier
// copies stay valid when kept grows: they keep the array they are in.
func (g *pendingReadGuard) keep(b []byte) []byte {
	if b == nil {
		return nil
	}
	start := len(g.kept)
	g.kept = append(g.kept, b...)
	return g.kept[start:len(g.kept):len(g.kept)]
}

// keepParams copies params into dst's storage (reused) and g.kept.
func (g *pendingReadGuard) keepParams(dst, params [][]byte) [][]byte {
	dst = dst[:0]
	for _, p := range params {
		dst = append(dst, g.keep(p))
	}
	return dst
}

// pend makes the connection's pending read guard, in its reused storage.
func (b *backend) pend(present bool, c *choice, m *pgproto3.Bind, p *portal, st *planner.Statement, params [][]byte) {
	g := &b.readGuardScratch
	bindParams, formats, results := g.bind.Parameters, g.bind.ParameterFormatCodes, g.bind.ResultFormatCodes
	*g = pendingReadGuard{present: present, c: c, portal: p, st: st,
		bind: *m, params: g.params, frames: g.frames[:0], kept: g.kept[:0]}
	if g.kept == nil {
		g.kept = make([]byte, 0, 512)
	}
	g.bind.ParameterFormatCodes = append(formats[:0], m.ParameterFormatCodes...)
	g.bind.ResultFormatCodes = append(results[:0], m.ResultFormatCodes...)
	g.bind.Parameters = g.keepParams(bindParams, m.Parameters)
	g.params = g.keepParams(g.params, params)
	b.pendingRead = g
}

// tsParamSQL is the text a rewrite is prepared with over the extended
// protocol: its timestamp holes read the timestamp parameter, $n, or,
// bound NULL, the timestamp the read guard pinned (boundReadTSExpr).
func tsParamSQL(t *planner.Template, n int) string {
	return t.Render("coalesce($" + strconv.Itoa(n) + ", " + boundReadTSExpr + ")")
}

// boundReadTSExpr is readTSExpr for tsParamSQL. COALESCE evaluates it
// only when the parameter is NULL, but the planner of a generic plan
// evaluates it all the same to estimate costs, in sessions where the
// setting is unset (an error without missing_ok) or was set in an earlier
// transaction (then it is ”, which is no bigint): NULL there.
const boundReadTSExpr = "nullif(pg_catalog.current_setting('mzproxy.read_ts', true), '')::int8"

// guardedBind binds a prepared read behind the read guard (see above),
// when it begins its batch outside a transaction block; ok is false, with
// nothing sent and nothing held, when this path does not apply: the caller
// binds the ordinary way.
func (s *Session) guardedBind(ctx context.Context, m *pgproto3.Bind, p *portal, st *planner.Statement, params [][]byte) (ok bool, err error) {
	seen := s.db.seen.Load()
	if seen == nil || s.tx != txIdle || s.be.bound || s.units.len() > 0 || s.skipping ||
		s.isolation != strictSerializable || st.Kind != planner.KindRead || !stillDefined(st, seen.catalog) {
		// After a Bind of the batch, a refused guard could only be ended
		// by a Sync of the proxy's, which would end the client's portal
		// and implicit transaction too.
		return false, nil
	}
	present := st.AsOf == nil
	c, hold, err := s.guardedChoice(ctx, st, seen.frontiers)
	if err != nil {
		return false, err
	}
	s.timestampPhase(ctx, present)
	if s.be.unsynced {
		// Only a Parse, Describe or Close of the client's batch came
		// before (answered: the caller quiesced), as in a batch of
		// Parse, Bind, Describe, Execute, Sync (pgx's exec mode, the
		// corpus runner): a prepared statement outlives the Sync, so a
		// Sync of the proxy's ends that implicit transaction unseen, and
		// the guard starts the read's own, as when the Bind begins the
		// batch (its snapshot after the pin). readGuard passes over its
		// ReadyForQuery.
		if err := s.be.w.Send(&s.pinMsgs.sync); err != nil {
			s.release(hold)
			return false, s.lost(err)
		}
	}
	if err := s.be.sendGuard(guardKey{rev: seen.catalog.cat.Revision, pin: present}, &s.pinMsgs); err != nil {
		s.release(hold)
		return false, s.lost(err)
	}
	// Held until the transaction ends: the portal may be executed later.
	s.portalHolds = append(s.portalHolds, hold)
	var ts []byte
	if !present {
		ts = strconv.AppendUint(nil, c.ts, 10)
		s.obs.Timestamp(c.ts)
	}
	if err := s.forwardExplicitBind(m, p, st, params, ts, true); err != nil {
		return false, err
	}
	s.be.pend(present, c, m, p, st, params)
	return true, nil
}

// settleReadGuard reads the answers of the read guard sent in front of
// the client's Bind, which come before those of the client's messages:
// called at the Sync that ends the batch, or, when the client sends
// anything else first, with a Flush sent now (sendFlush).
func (s *Session) settleReadGuard(ctx context.Context, sendFlush bool) error {
	g := s.be.pendingRead
	s.be.pendingRead = nil
	if sendFlush {
		if err := s.be.w.Send(&pgproto3.Flush{}); err != nil {
			return s.lost(err)
		}
	}
	if err := s.be.w.Flush(); err != nil {
		return s.lostWrite(err)
	}
	// A failed guard leaves the backend skipping the client's messages:
	// followed here, not by a Sync of readValues' own.
	clientBatch := s.be.clientBatch
	s.be.clientBatch = true
	value, err := s.be.readGuard()
	s.be.clientBatch = clientBatch
	if err == nil && g.present {
		if err = g.c.pinnedBy(s.be.pinValue(value)); err != nil {
			// The read is bound already, at a timestamp the proxy cannot
			// tell: nothing may relay its answers.
			pe := pgerr.As(err)
			return pgerr.Fatal(pe.Code, "%s", pe.Message)
		}
		s.obs.Timestamp(g.c.ts)
	}
	switch {
	case err == nil:
		return nil
	case isStale(err):
		return s.readGuardRefused(ctx, g)
	}
	var pe *pgerr.Error
	if !errors.As(err, &pe) || pe.IsFatal() {
		return err
	}
	// The client's batch fails with the guard's error, as it would with
	// an error of its Bind: the backend skips to the client's Sync.
	return s.failBatchBehindGuard(pe)
}

// readGuardRefused follows the guard's refusal: the backend skipped the
// client's messages behind it, up to the client's Sync if it was sent (its
// ReadyForQuery is dropped: the Sync is sent again with the rest), else up
// to a Sync of the proxy's own. The read is bound again the ordinary way
// and the client's messages are sent again; if binding fails, the batch
// fails with its error.
func (s *Session) readGuardRefused(ctx context.Context, g *pendingReadGuard) error {
	clientSynced := slices.ContainsFunc(s.units.items[s.units.head:], func(u unit) bool { return u.kind == uSync })
	if !clientSynced {
		if err := s.be.w.Send(&pgproto3.Sync{}); err != nil {
			return s.lost(err)
		}
		if err := s.be.w.Flush(); err != nil {
			return s.lostWrite(err)
		}
	}
	if err := s.dropQueryAnswers(); err != nil {
		return err
	}
	// Nothing of the client's is at the backend now: a failure of the
	// proxy's own statements ends with a Sync of its own.
	clientBatch := s.be.clientBatch
	s.be.clientBatch = false
	ts, err := s.chooseForBind(ctx, g.st)
	s.be.clientBatch = clientBatch
	if err != nil {
		for s.units.len() > 0 {
			s.units.pop()
		}
		s.midRequest = false
		if clientSynced {
			// The client's Sync was answered (dropped): the error answers
			// it, and the implicit transaction the proxy's own queries
			// may have left open must not outlive it.
			if serr := s.endImplicitTxn(); serr != nil {
				return serr
			}
			if s.tx == txIdle {
				// That transaction was the client's too: its portals,
				// and the guard's hold (guardedBind), end with it, as at
				// a ReadyForQuery the client sees (readyForQuery).
				s.endPortals()
				s.releasePortalHolds()
			}
		}
		return err
	}
	if err := s.forwardExplicitBind(&g.bind, g.portal, g.st, g.params, strconv.AppendUint(nil, ts, 10), false); err != nil {
		return err
	}
	return s.sendKeptFrames(g.frames)
}
