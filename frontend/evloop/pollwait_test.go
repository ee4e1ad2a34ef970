//go:build linux

package evloop

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// A Conn with a poll wait (SetPollWait) reads as any net.Conn: only where
// its thread waits differs.

// TestPollWaitReadsAnswerAfterWait: a read made before the peer writes
// returns the peer's bytes, whether they come within the poll wait (the
// poll sees them) or after it (the netpoller does); and a poll wait of 0
// puts the read back in the netpoller at once.
func TestPollWaitReadsAnswerAfterWait(t *testing.T) {
	lc, peer := socketPair(t)
	buf := make([]byte, 16)
	for _, c := range []struct {
		wait, after time.Duration
		polls       int // polls the read makes
	}{
		{50 * time.Millisecond, 5 * time.Millisecond, 1}, // within the poll
		{2 * time.Millisecond, 40 * time.Millisecond, 1}, // after it: the netpoller
		{0, 5 * time.Millisecond, 0},                     // no poll
	} {
		polls := lc.reads.polls
		lc.SetPollWait(c.wait)
		msg := []byte("answer")
		go func() {
			time.Sleep(c.after)
			_, _ = peer.Write(msg)
		}()
		n, err := lc.Read(buf)
		if err != nil || string(buf[:n]) != "answer" {
			t.Fatalf("poll wait %v, answer after %v: read %q, %v", c.wait, c.after, buf[:n], err)
		}
		if got := lc.reads.polls - polls; got != c.polls {
			t.Errorf("poll wait %v, answer after %v: %d polls, want %d", c.wait, c.after, got, c.polls)
		}
	}
	// Bytes already there are read without a poll.
	lc.SetPollWait(50 * time.Millisecond)
	if _, err := peer.Write([]byte("there")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	polls := lc.reads.polls
	if n, err := lc.Read(buf); err != nil || string(buf[:n]) != "there" || lc.reads.polls != polls {
		t.Fatalf("bytes already there: %q, %v, %d polls", buf[:n], err, lc.reads.polls-polls)
	}
}

// TestPollWaitDeadlineAndClose: a deadline and a Close from another
// goroutine end a read with a poll wait as they end any read, at most
// the poll wait late; the peer's close is io.EOF.
func TestPollWaitDeadlineAndClose(t *testing.T) {
	lc, peer := socketPair(t)
	const wait = 30 * time.Millisecond
	lc.SetPollWait(wait)
	buf := make([]byte, 10)
	start := time.Now()
	if err := lc.SetReadDeadline(time.Now().Add(5 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the deadline ended the read after %v", d)
	}
	if err := lc.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := lc.Read(buf)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	closed := make(chan struct{})
	go func() { _ = lc.Close(); close(closed) }()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read when closed: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the read waiting in poll")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}

	lc2, peer2 := socketPair(t)
	lc2.SetPollWait(wait)
	go func() {
		time.Sleep(5 * time.Millisecond)
		_ = peer2.Close()
	}()
	if n, err := lc2.Read(buf); n != 0 || err == nil {
		t.Fatalf("Read of a closed peer: %d, %v; want the end of the stream", n, err)
	}
	_ = peer
}
