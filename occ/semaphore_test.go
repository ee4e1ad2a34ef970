package occ

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestSemaphoreFIFO(t *testing.T) {
	s := NewSemaphore(1)
	if w, err := s.Acquire(context.Background()); w || err != nil {
		t.Fatalf("first Acquire: waited=%v err=%v", w, err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w, err := s.Acquire(context.Background()); !w || err != nil {
				t.Errorf("waiter %d: waited=%v err=%v", i, w, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			s.Release()
		}()
		waitFor(t, func() bool { return s.Stats().Waiting == i+1 }) // queue in order
	}
	s.Release()
	wg.Wait()
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Errorf("order %v, want [0 1 2]", order)
	}
	if st := s.Stats(); st != (SemaphoreStats{Size: 1, Waits: 3}) {
		t.Errorf("stats %+v", st)
	}
}

// TestSemaphoreCancel: a waiter whose ctx ends leaves the queue; the slot
// goes to the next one; nothing leaks (goleak checks the goroutines).
func TestSemaphoreCancel(t *testing.T) {
	s := NewSemaphore(1)
	_, _ = s.Acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := s.Acquire(ctx); errc <- err }()
	waitFor(t, func() bool { return s.Stats().Waiting == 1 })
	got := make(chan struct{})
	go func() { _, _ = s.Acquire(context.Background()); close(got) }()
	waitFor(t, func() bool { return s.Stats().Waiting == 2 })
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("canceled waiter: %v", err)
	}
	if st := s.Stats(); st.Waiting != 1 || st.Held != 1 {
		t.Fatalf("after cancel %+v", st)
	}
	s.Release()
	<-got
	s.Release()
	if st := s.Stats(); st.Held != 0 || st.Waiting != 0 {
		t.Fatalf("end %+v", st)
	}
	// An already ended ctx with a free slot still gets it: the slot is
	// free, there is nothing to wait for. With no free slot it fails at once.
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx); err != context.Canceled {
		t.Fatalf("full semaphore, ended ctx: %v", err)
	}
	s.Release()
}

// TestSemaphoreRace hammers Acquire with random cancels: the count of
// holders never exceeds the size and every slot comes back.
func TestSemaphoreRace(t *testing.T) {
	s := NewSemaphore(2)
	var (
		mu      sync.Mutex
		holders int
		wg      sync.WaitGroup
	)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*time.Microsecond)
			defer cancel()
			if _, err := s.Acquire(ctx); err != nil {
				return
			}
			mu.Lock()
			holders++
			if holders > 2 {
				t.Errorf("%d holders", holders)
			}
			mu.Unlock()
			time.Sleep(time.Microsecond)
			mu.Lock()
			holders--
			mu.Unlock()
			s.Release()
		}()
	}
	wg.Wait()
	if st := s.Stats(); st.Held != 0 || st.Waiting != 0 {
		t.Fatalf("end %+v", st)
	}
}

func TestSemaphoreReleaseWithoutAcquire(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	NewSemaphore(1).Release()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
