package occ

import (
	"math/rand/v2"
	"testing"
)

// frontierSim drives a Frontier as the backend does: writers of one hot row
// (queued on its row lock, in slot order) and of rows of their own, holding
// the gate from their slot to their commit, or deferred (holding nothing
// until their COMMIT fixes them); pins only while no writer holds the gate;
// a clock that moves forward by random steps, sometimes not at all.
type frontierSim struct {
	t        *testing.T
	rng      *rand.Rand
	f        *Frontier
	clock    uint64
	holding  int      // writers between their slot and their commit (gate held)
	hotQueue []bool   // writers of the hot row, in lock order; true: deferred
	hotT     uint64   // T of the hot row's newest version
	lastPin  uint64   // the newest pin
	maxT     uint64   // the largest committed T
	commits  []uint64 // the hot row's commit timestamps, in commit order
}

func (s *frontierSim) commit(ts uint64) {
	s.t.Helper()
	if ts <= s.lastPin {
		s.t.Fatalf("a write committed at %d, at or below the pin at %d before it", ts, s.lastPin)
	}
	s.maxT = max(s.maxT, ts)
}

func (s *frontierSim) step() {
	switch s.rng.IntN(6) {
	case 0:
		s.clock += uint64(s.rng.IntN(3))
	case 1: // a writer of the hot row takes its slot and queues for the lock
		deferred := s.rng.IntN(2) == 0
		if !deferred {
			s.f.TakeSlot()
			s.holding++
		}
		s.hotQueue = append(s.hotQueue, deferred)
	case 2: // the lock's holder writes: its T after the version it replaces
		if len(s.hotQueue) == 0 {
			return
		}
		deferred := s.hotQueue[0]
		s.hotQueue = s.hotQueue[1:]
		if deferred {
			s.f.TakeSlot() // fixed at its COMMIT, with the gate
		}
		ts := s.f.ChooseT(s.clock, s.hotT)
		s.commit(ts)
		if !deferred {
			s.holding--
		}
		s.hotT = ts
		s.commits = append(s.commits, ts)
	case 3: // a writer of a row of its own
		s.f.TakeSlot()
		s.commit(s.f.ChooseT(s.clock, 0))
	case 4, 5: // a read of the present
		if s.holding > 0 {
			return // waits for the gate
		}
		p := s.f.Pin(s.clock)
		if p < s.maxT {
			s.t.Fatalf("a pin at %d below a committed write at %d", p, s.maxT)
		}
		if p < s.lastPin {
			s.t.Fatalf("a pin at %d below the one before it at %d", p, s.lastPin)
		}
		if p > max(s.clock, s.maxT) {
			s.t.Fatalf("a pin at %d, ahead of both the clock %d and every write (%d)", p, s.clock, s.maxT)
		}
		s.lastPin = p
	}
}

// TestFrontierSimulation checks the frontier rules' invariants over random
// schedules: pins are at or above every committed write and below every
// later one, and the writes of one row commit in non-decreasing T order
// (the order PostgreSQL's row lock gave them).
func TestFrontierSimulation(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		s := &frontierSim{t: t, rng: rand.New(rand.NewPCG(seed, 7)), f: NewFrontier(100), clock: 100}
		for i := 0; i < 400; i++ {
			s.step()
		}
		for i := 1; i < len(s.commits); i++ {
			if s.commits[i] < s.commits[i-1] {
				t.Fatalf("seed %d: the hot row's writes committed at %v: out of order", seed, s.commits)
			}
		}
	}
}

// TestFrontierPinStaysWithoutWrites: reads with no write between them share
// a timestamp within a millisecond; a write between two pins in one
// millisecond puts the second one past it.
func TestFrontierPinStaysWithoutWrites(t *testing.T) {
	f := NewFrontier(100)
	if a, b := f.Pin(100), f.Pin(100); a != 100 || b != 100 {
		t.Fatalf("pins %d %d at clock 100 with no write, want 100 100", a, b)
	}
	f.TakeSlot()
	w := f.ChooseT(100, 0)
	if w != 101 {
		t.Fatalf("a write after a pin at 100 chose %d, want 101", w)
	}
	if p := f.Pin(100); p != 101 {
		t.Fatalf("the pin after a write at 101 is %d, want 101", p)
	}
	if u := f.Upper(); u != 102 {
		t.Fatalf("upper %d, want 102", u)
	}
}
