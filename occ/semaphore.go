package occ

import (
	"container/list"
	"context"
	"math"
	"sync"
)

// Semaphore bounds the number of write loops a proxy runs at once (in FIFO
// order), when the operator wants the backend's write load bounded. Waiting counts
// against the statement's deadline: Acquire ends with ctx, and a waiter
// whose ctx ends leaves the queue. Safe for concurrent use.
type Semaphore struct {
	mu      sync.Mutex
	size    int
	held    int
	waiters list.List // of chan struct{}, closed when the slot is handed over
	waits   int64
}

// NewSemaphore returns a semaphore with n slots (n < 1: no bound).
func NewSemaphore(n int) *Semaphore {
	if n < 1 {
		n = math.MaxInt
	}
	return &Semaphore{size: n}
}

// Acquire takes a slot, waiting in FIFO order. waited reports whether it
// had to queue. On error (ctx ended) no slot is held.
func (s *Semaphore) Acquire(ctx context.Context) (waited bool, err error) {
	s.mu.Lock()
	if s.held < s.size && s.waiters.Len() == 0 {
		s.held++
		s.mu.Unlock()
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return false, err
	}
	ready := make(chan struct{})
	elem := s.waiters.PushBack(ready)
	s.waits++
	s.mu.Unlock()

	select {
	case <-ready:
		return true, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-ready:
		// Handed a slot just as ctx ended: pass it on.
		s.releaseLocked()
	default:
		s.waiters.Remove(elem)
	}
	return true, ctx.Err()
}

// Release returns a slot, handing it to the oldest waiter if any.
func (s *Semaphore) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *Semaphore) releaseLocked() {
	if front := s.waiters.Front(); front != nil {
		s.waiters.Remove(front)
		close(front.Value.(chan struct{}))
		return // the slot changes hands; held is unchanged
	}
	if s.held == 0 {
		panic("occ: Semaphore.Release without Acquire")
	}
	s.held--
}

// SemaphoreStats is a snapshot of a semaphore's state.
type SemaphoreStats struct {
	Size    int
	Held    int
	Waiting int
	Waits   int64 // acquisitions that queued, since creation
}

// Stats returns a snapshot of s.
func (s *Semaphore) Stats() SemaphoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SemaphoreStats{Size: s.size, Held: s.held, Waiting: s.waiters.Len(), Waits: s.waits}
}
