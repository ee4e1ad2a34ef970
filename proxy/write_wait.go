package proxy

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/mzproxy/mzproxy/frontend/evloop"
)

// How an optimistic write waits for the backend's answer (issue 14,
// docs/write-cost.md "Session 18").
//
// A read of the backend that finds nothing parks the session's goroutine
// in Go's netpoller: its thread looks for other work, polls the
// netpoller once without waiting and once waiting (each poll also
// returns the writability edges that Go asks every socket for, raised by
// the writes just made), and the goroutine is readied again when the
// answer comes. A write that is the only one in flight (and no two were
// for writeAloneQuiet) instead has its thread wait for the answer in
// poll(2), keeping its P (evloop.Conn.SetPollWait): the thread sleeps in
// the kernel and runs on when the backend writes, with no scheduler work
// and no netpoller call.
// So the poll is for a write alone: it holds one of the process's Ps
// (GOMAXPROCS) while it waits, and with other writes in flight (32
// clients), or a single P, the netpoller's sharing of one thread among
// many waits is the cheaper one; they wait there as before. Nothing else
// changes: the same messages, the same attempts and retries, the same
// cancel (a CancelRequest, whose error ends the wait) and deadlines.

// writePollWait bounds a write's wait in poll(2), below the 10 ms after
// which the scheduler preempts a goroutine that kept its P; a longer wait
// (a slow durable commit, a row lock) goes on in the netpoller. A Close
// or deadline of the backend's socket waits for the poll to end, so it
// also bounds how late those take effect.
const writePollWait = 9 * time.Millisecond

// writeAloneQuiet is how long no other write may have been in flight
// beside one before a write counts as alone: a busy proxy's writes can
// find themselves alone for a moment (32 clients, one of them between
// its statements), and a P held in a poll then would leave every other
// session one P for up to writePollWait.
const writeAloneQuiet = 100 * time.Millisecond

// writeWaits counts the optimistic writes in flight, process-wide, for
// the choice above, and those that waited in poll(2).
type writeWaits struct {
	inFlight atomic.Int32
	// together: when a write last began beside another (UnixNano).
	together atomic.Int64
	polled   atomic.Int64
}

// PolledWrites is how many optimistic writes waited for the backend in
// poll(2) since start (write_wait.go).
func (p *Proxy) PolledWrites() int64 { return p.writeWaits.polled.Load() }

// pollBackend lets the write's reads of the backend wait in poll(2) when
// it is alone in flight, and no write was beside another for
// writeAloneQuiet (and the process has a P to spare); unpollBackend
// undoes it with what pollBackend returned, when the write ends.
func (s *Session) pollBackend() (polled *evloop.Conn) {
	w := &s.proxy.writeWaits
	now := time.Now().UnixNano()
	if w.inFlight.Add(1) > 1 {
		w.together.Store(now)
		return nil
	}
	lc, ok := s.be.nc.(*evloop.Conn)
	if !ok || now-w.together.Load() < int64(writeAloneQuiet) || runtime.GOMAXPROCS(0) < 2 {
		return nil
	}
	lc.SetPollWait(writePollWait)
	w.polled.Add(1)
	return lc
}

func (s *Session) unpollBackend(polled *evloop.Conn) {
	if polled != nil {
		polled.SetPollWait(0)
	}
	s.proxy.writeWaits.inFlight.Add(-1)
}
