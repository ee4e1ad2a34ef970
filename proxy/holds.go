package proxy

import (
	"sort"
	"sync"
	"time"

	"github.com/mzproxy/mzproxy/planner"
)

// Hold is read protection granted to one read: its inputs' history at TS
// must stay readable until it is released.
type Hold struct {
	ID       uint64
	Session  uint64
	Database string
	TS       uint64
	Inputs   []uint64 // catalog ids of the managed tables read
	Since    time.Time
}

// holds is the registry of the read holds this proxy has granted.
// Compaction must not advance a since past the oldest of them.
type holds struct {
	mu     sync.Mutex
	next   uint64
	active map[uint64]*Hold
}

func (h *holds) acquire(session uint64, database string, ts uint64, inputs []*planner.Object) uint64 {
	ids := make([]uint64, len(inputs))
	for i, in := range inputs {
		ids[i] = in.ID
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	if h.active == nil {
		h.active = map[uint64]*Hold{}
	}
	h.active[h.next] = &Hold{ID: h.next, Session: session, Database: database, TS: ts, Inputs: ids, Since: time.Now()}
	return h.next
}

func (h *holds) release(id uint64) {
	h.mu.Lock()
	delete(h.active, id)
	h.mu.Unlock()
}

// HoldsGranted counts the read holds granted since start (released or not).
func (p *Proxy) HoldsGranted() uint64 {
	p.holds.mu.Lock()
	defer p.holds.mu.Unlock()
	return p.holds.next
}

// Holds returns the read holds granted now, oldest first.
func (p *Proxy) Holds() []Hold {
	p.holds.mu.Lock()
	out := make([]Hold, 0, len(p.holds.active))
	for _, h := range p.holds.active {
		out = append(out, *h)
	}
	p.holds.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
