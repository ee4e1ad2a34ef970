package proxy

import (
	"io"
	"testing"

	"github.com/mzproxy/mzproxy/frontend/wire"
)

// TestReadOnlyTxnPinAllocations: the messages a read-only transaction's
// pin sends (the peek in front of BEGIN, the raise and the guard in front
// of the first read), once the session has prepared their statements, are
// made with a bounded number of allocations (issue 15: the proxy's CPU
// per read-only transaction).
func TestReadOnlyTxnPinAllocations(t *testing.T) {
	s := &Session{}
	s.be = &backend{w: wire.NewWriter(io.Discard, 8192)}
	s.pinPeekPrepared, s.pinGuardPrepared = true, true
	s.known.searchPathShown = `"$user", public`
	s.known.defaults = txnCharacteristics{isolation: "read committed"}
	pin := func() {
		s.txn.phase = txnFresh
		if err := s.peekBeforeBegin(); err != nil {
			t.Fatal(err)
		}
		for s.units.len() > 0 {
			s.units.pop()
		}
		*s.txn.peek = "17"
		g := &pinGuard{expected: s.known.defaults, revision: 9}
		if err := s.sendPinGuard(g); err != nil {
			t.Fatal(err)
		}
	}
	pin()
	allocs := testing.AllocsPerRun(200, pin)
	t.Logf("%.0f allocations per read-only transaction's pin messages", allocs)
	if allocs > 4 {
		t.Errorf("%.0f allocations per read-only transaction's pin messages, want at most 4", allocs)
	}
}
