package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/lease"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// Leases: the proxy registers an incarnation in each database it serves
// (package lease). Writes take the commit slot for the session's
// incarnation, so a fenced or expired one writes nothing; reads at a
// chosen timestamp hold it under the incarnation's lease; a transaction
// whose holds were granted under a lease that was lost fails its next
// statement.

// Lease returns this proxy's live lease of database, registering first
// when it has none (or lost it).
func (p *Proxy) Lease(ctx context.Context, database string) (*lease.Lease, error) {
	l, err := p.leases.Get(ctx, database)
	if err != nil {
		return nil, leaseError(err)
	}
	return l, nil
}

// LeaseErr is nil when this proxy holds a live lease of database, else why
// not.
func (p *Proxy) LeaseErr(database string) error {
	l := p.leases.Leases()[database]
	if l == nil {
		return fmt.Errorf("not registered in database %q", database)
	}
	return l.Err()
}

// Close retires this proxy's incarnations (their holds stop counting at
// once, so another proxy compacts past them without waiting for the grace).
// Call it after the sessions have ended.
func (p *Proxy) Close(ctx context.Context) error {
	p.closeTemplates()
	p.stopIdle()
	return p.leases.Close(ctx)
}

// leaseError is the error a client sees when the proxy cannot get a lease:
// the backend's fenced error as it is (XX000), anything else as a failure
// to reach the backend.
func leaseError(err error) error {
	var pe *pgerr.Error
	if errors.As(err, &pe) {
		return pe
	}
	if errors.Is(err, storage.ErrUntrustedSchema) {
		return pgerr.New(pgerr.InsufficientPrivilege, "mzproxy could not register its lease: %v", err)
	}
	return pgerr.New(pgerr.ConnectionFailure, "mzproxy could not register its lease: %v", err)
}

// currentLease is the session's lease, registered again when the one it
// had was lost.
func (s *Session) currentLease(ctx context.Context) (*lease.Lease, error) {
	if s.lease != nil && s.lease.Err() == nil {
		return s.lease, nil
	}
	l, err := s.proxy.Lease(ctx, s.db.name)
	if err != nil {
		return nil, err
	}
	s.lease = l
	return l, nil
}

// noteFenced passes a backend ErrorResponse frame whose SQLSTATE is code
// to the session's lease, which is lost at once if it says the
// incarnation was fenced or expired (only XX000 frames are decoded: they
// are rare).
func (s *Session) noteFenced(frame []byte, code string) {
	if s.lease == nil || code != string(storage.CodeFenced) {
		return
	}
	var er pgproto3.ErrorResponse
	if er.Decode(wire.Body(frame)) == nil {
		s.lease.Refused(&pgconn.PgError{Code: er.Code, Message: er.Message, Detail: er.Detail})
	}
}

// incarnation is the session's incarnation id: what its writes pass to
// the write functions, which refuse a fenced or expired one.
func (s *Session) incarnation(ctx context.Context) (int64, error) {
	l, err := s.currentLease(ctx)
	if err != nil {
		return 0, err
	}
	return l.ID(), nil
}

// heldRead is a read hold of the session: in the proxy's registry (for
// metrics) and under its incarnation's lease.
type heldRead struct {
	id   uint64
	hold *lease.Hold
}

// holdRead protects the history of c's inputs at c.ts for a read about to
// run. A timestamp the proxy chose (no AS OF, or AS OF AT LEAST) moves up
// to the inputs' sinces when compaction passed it meanwhile; an exact AS
// OF below a since fails as Materialize's does.
func (s *Session) holdRead(ctx context.Context, c *choice, exact bool) (heldRead, error) {
	l, err := s.currentLease(ctx)
	if err != nil {
		return heldRead{}, err
	}
	ids := inputIDs(c)
	for {
		h, err := l.Acquire(ctx, c.ts, ids)
		var below *lease.BelowSinceError
		if errors.As(err, &below) {
			if exact {
				return heldRead{}, sinceError(c.ts, below.Since)
			}
			for _, since := range below.Since {
				c.ts = max(c.ts, since)
			}
			continue
		}
		if err != nil {
			return heldRead{}, pgerr.As(err)
		}
		return s.heldAt(c, h), nil
	}
}

// holdReadNow is holdRead in memory, with the session's lease as it is:
// false when the hold would take a round trip (or the lease is lost).
func (s *Session) holdReadNow(c *choice) (heldRead, bool) {
	l := s.lease
	if l == nil || l.Err() != nil {
		return heldRead{}, false
	}
	h, err := l.TryAcquire(c.ts, inputIDs(c))
	if h == nil || err != nil {
		return heldRead{}, false
	}
	return s.heldAt(c, h), true
}

// inputIDs are c's inputs' catalog ids.
func inputIDs(c *choice) []int64 {
	ids := make([]int64, len(c.inputs))
	for i, in := range c.inputs {
		ids[i] = int64(in.ID)
	}
	return ids
}

// heldAt records the lease's hold h of c in the proxy's registry.
func (s *Session) heldAt(c *choice, h *lease.Hold) heldRead {
	return heldRead{id: s.proxy.holds.acquire(s.id, s.db.name, c.ts, c.inputs), hold: h}
}

// exactTimestamp reports whether a read must be held at exactly the
// timestamp chosen: AS OF names it, or the transaction pinned it.
func exactTimestamp(st *planner.Statement, pinned bool) bool {
	return pinned || st.AsOf != nil && !st.AsOf.AtLeast
}

// release gives the hold up.
func (s *Session) release(h heldRead) {
	s.proxy.holds.release(h.id)
	h.hold.Release()
}

// sinceError is Materialize's refusal of a timestamp below an input's
// since, for the inputs (by catalog id) whose since passed ts.
func sinceError(ts uint64, since map[int64]uint64) error {
	ids := make([]int64, 0, len(since))
	for id := range since {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var invalid []string
	for _, id := range ids {
		if ts < since[id] {
			invalid = append(invalid, fmt.Sprintf("Antichain { elements: [%d] }", since[id]))
		}
	}
	return pgerr.New(pgerr.InternalError, "Timestamp (%d) is not valid for all inputs: [%s]", ts, strings.Join(invalid, ", "))
}

// lostHold returns the lease of a hold of the session's transaction that
// was lost, if any: the transaction may no longer read at its timestamp.
func (s *Session) lostHold() *lease.Lease {
	for _, holds := range [][]heldRead{s.portalHolds, s.txn.holds} {
		for _, h := range holds {
			if l := h.hold.Lease(); l.Err() != nil {
				return l
			}
		}
	}
	return nil
}

// raiseLostSQL makes the backend fail the transaction with the
// incarnation's own fenced or expired error; its parameter is the id.
var raiseLostSQL = "SELECT " + storage.Schema + ".raise_fenced($1::int8)"

// lostHoldStatement names the proxy's prepared raiseLostSQL.
var lostHoldStatement = ownName("mzproxy_lost_lease")

// failLostHold fails the client's request because its transaction's read
// holds were granted under lease l, which was lost: instead of the
// request the backend runs raise_fenced, so the client gets the
// incarnation's error and the transaction is aborted (its later reads can
// not see history compaction removed). The client's message is not
// forwarded.
func (s *Session) failLostHold(ctx context.Context, l *lease.Lease, simple bool) error {
	id := strconv.FormatInt(l.ID(), 10)
	if simple {
		if err := s.internal(strings.Replace(raiseLostSQL, "$1", id, 1), true); err != nil {
			return err
		}
		return s.exchange(ctx)
	}
	if !s.lostHoldPrepared {
		if err := s.internalMsg(&pgproto3.Parse{Name: lostHoldStatement, Query: raiseLostSQL}, uParse); err != nil {
			return err
		}
		s.lostHoldPrepared = true
	}
	bind := &pgproto3.Bind{DestinationPortal: lostHoldStatement, PreparedStatement: lostHoldStatement, Parameters: [][]byte{[]byte(id)}}
	if err := s.internalMsg(bind, uBind); err != nil {
		return err
	}
	if err := s.internalMsg(&pgproto3.Execute{Portal: lostHoldStatement}, uExecute); err != nil {
		return err
	}
	if err := s.be.w.Send(&pgproto3.Flush{}); err != nil {
		return s.lost(err)
	}
	return s.exchange(ctx)
}

// retentionStatement returns sql's statement when it sets or resets RETAIN
// HISTORY (nil otherwise); an error when such a statement is not alone.
func (s *Session) retentionStatement(sql string) (*planner.Statement, error) {
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	if err != nil {
		return nil, nil
	}
	for _, st := range stmts {
		if st.Retention == nil {
			continue
		}
		if len(stmts) != 1 {
			return st, pgerr.New(pgerr.FeatureNotSupported, "RETAIN HISTORY must be the only statement of a query string")
		}
		if len(st.Writes) == 0 {
			return st, pgerr.New(pgerr.SyntaxError, "RETAIN HISTORY without a table")
		}
		return st, nil
	}
	return nil, nil
}

// retentionQuery runs a simple Query with RETAIN HISTORY (CREATE TABLE ...
// WITH (RETAIN HISTORY FOR ...), ALTER TABLE ... SET/RESET (RETAIN
// HISTORY)): the statement PostgreSQL is left with once the planner
// stripped the option, then storage.SetRetentionQuery, in one write
// transaction. An ALTER TABLE whose only change was the retention is
// answered by the proxy. It reports whether sql was such a query.
func (s *Session) retentionQuery(ctx context.Context, sql string) (bool, error) {
	st, err := s.retentionStatement(sql)
	if st == nil || err != nil {
		return st != nil, err
	}
	target := planner.QualifiedName{Schema: st.Writes[0].Schema, Name: st.Writes[0].Name}.String()
	set := storage.SetRetentionQuery(target, st.Retention.Duration, st.Retention.Reset)
	if st.SQL != "" {
		r := s.routeOf(st.SQL)
		r.write = true
		return true, s.writeQuery(ctx, mustEncode(&pgproto3.Query{String: st.SQL}), st.SQL, r, nil, set)
	}
	inc, err := s.incarnation(ctx)
	if err != nil {
		return true, err
	}
	beginWrite := storage.OpenWriteFor(inc)
	// In the client's transaction, or alone in an implicit one (one
	// query string).
	_, status, err := s.be.queryValueStatus(ctx, beginWrite+"; "+set)
	s.tx = txStatus(status)
	if err != nil {
		return true, err
	}
	if s.tx == txBlock {
		s.writeSlot = true
	}
	return true, s.answer(&pgproto3.CommandComplete{CommandTag: []byte("ALTER TABLE")})
}
