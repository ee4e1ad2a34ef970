package proxy

import (
	"context"
	"io"
	"testing"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/lease"
)

// TestReadOnlyTxnPinAllocations: a read-only transaction's BEGIN and the
// messages of its pin (the peek in front of BEGIN, the raise and the
// guard in front of the first read), once the session has prepared their
// statements, are made with a bounded number of allocations (issue 15:
// the proxy's CPU per read-only transaction): 24 before the pin's
// messages were reused, BEGIN planned once and orLost's error variable
// declared only for an error.
func TestReadOnlyTxnPinAllocations(t *testing.T) {
	s := &Session{proxy: &Proxy{planner: planner.New(100)}}
	s.be, s.tx = &backend{w: wire.NewWriter(io.Discard, 8192)}, txIdle
	s.pinPeekPrepared, s.pinGuardPrepared, s.pinGuardRevPrepared = true, true, true
	s.lease = lease.Granted(1) // the pin's fence at the floor (fenceFloor)
	s.known.searchPathShown = `"$user", public`
	s.known.defaults = txnCharacteristics{isolation: "read committed"}
	pin := func() {
		s.endTxn() // the last transaction's COMMIT
		if err := s.txnQuery(context.Background(), "BEGIN"); err != nil || s.txn.phase != txnFresh {
			t.Fatalf("BEGIN: %v, phase %v", err, s.txn.phase)
		}
		for s.units.len() > 0 {
			s.units.pop()
		}
		*s.txn.peek = "17"
		g := &pinGuard{expected: s.known.defaults, revision: 9}
		if err := s.sendPinGuard(context.Background(), g); err != nil {
			t.Fatal(err)
		}
	}
	pin()
	allocs := testing.AllocsPerRun(200, pin)
	t.Logf("%.0f allocations per read-only transaction's BEGIN and pin", allocs)
	if allocs > 3 {
		t.Errorf("%.0f allocations per read-only transaction's BEGIN and pin, want at most 3", allocs)
	}
}
