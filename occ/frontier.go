package occ

// Frontier is the timestamp rules of a database's writes and reads of the
// present, as proxy/storage/frontier.sql implements them in the backend,
// without I/O: a model that the simulation in frontier_test.go checks
// against its invariants (every committed write is at or below every later
// pin; every write after a pin is above it; a write that waited for
// another commits at a T no lower), and the reference for that SQL.
//
// The backend's gate is the Frontier's caller: a pin happens only while no
// write holds a chosen T uncommitted (writers hold the gate in shared mode
// from the moment their T may be chosen to their commit; a pin takes it
// exclusively).
type Frontier struct {
	pinned     uint64 // P: the largest timestamp handed out to a read
	writes     uint64 // write slots taken (or fixed) so far
	writesSeen uint64 // writes at the last pin
}

// NewFrontier starts a database's frontier at p (the upper is p+1).
func NewFrontier(p uint64) *Frontier { return &Frontier{pinned: p} }

// Upper is the upper: every write below it has committed, none will.
func (f *Frontier) Upper() uint64 { return f.pinned + 1 }

// TakeSlot counts a write slot (taken with its T pending, or a deferred
// slot being fixed): the next pin must look past the clock.
func (f *Frontier) TakeSlot() { f.writes++ }

// ChooseT is a write's T, chosen at clock once the write holds its row
// locks (an autocommit write) or at its COMMIT (a deferred slot); replaced
// is the largest T of the versions it replaced (0 for none).
func (f *Frontier) ChooseT(clock, replaced uint64) uint64 {
	return max(clock, f.pinned+1, replaced)
}

// Pin hands out the timestamp of a read of the present at clock and moves
// the upper past it. A write slot taken since the last pin may have chosen
// f.pinned+1 (ahead of the clock), so the pin may not stay at f.pinned.
func (f *Frontier) Pin(clock uint64) uint64 {
	t := max(clock, f.pinned)
	if f.writes != f.writesSeen {
		t = max(t, f.pinned+1)
	}
	f.pinned, f.writesSeen = t, f.writes
	return t
}
