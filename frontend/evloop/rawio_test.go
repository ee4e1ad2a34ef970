//go:build linux

package evloop

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"net"
	"os"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// An attached Conn reads and writes with raw system calls (rawio.go): it
// must keep net.Conn's behaviour, which the session's path relies on.

// TestRawIOWritesWholeThroughShortWrites: a write larger than the socket
// takes at once, read slowly by the peer, arrives whole and in order;
// and reads see the peer's bytes in order.
func TestRawIOWritesWholeThroughShortWrites(t *testing.T) {
	lc, peer := socketPair(t)
	shrinkSendBuffer(t, lc)
	data := make([]byte, 4<<20)
	rand.New(rand.NewSource(1)).Read(data)
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 7000)
		for b.Len() < len(data) {
			n, err := peer.Read(buf)
			if err != nil {
				break
			}
			b.Write(buf[:n])
		}
		got <- b.Bytes()
	}()
	n, err := lc.Write(data)
	if err != nil || n != len(data) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(data))
	}

	go func() { _, _ = peer.Write(data[:100_000]) }()
	back := make([]byte, 100_000)
	if _, err := io.ReadFull(lc, back); err != nil || !bytes.Equal(back, data[:100_000]) {
		t.Fatalf("ReadFull: %v", err)
	}
}

// TestRawIODeadlineAndClose: a read waiting for bytes ends at its
// deadline with os.ErrDeadlineExceeded, and at a Close from another
// goroutine with net.ErrClosed.
func TestRawIODeadlineAndClose(t *testing.T) {
	lc, _ := socketPair(t)
	buf := make([]byte, 10)
	if err := lc.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := lc.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := lc.Read(buf)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	_ = lc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read when closed: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the waiting Read")
	}
}

// TestRawIOEndOfStream: the peer's close is io.EOF, after its last bytes;
// a write to a peer gone fails.
func TestRawIOEndOfStream(t *testing.T) {
	lc, peer := socketPair(t)
	if _, err := peer.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	_ = peer.Close()
	b, err := io.ReadAll(lc)
	if err != nil || string(b) != "last" {
		t.Fatalf("ReadAll: %q, %v", b, err)
	}
	if _, err := lc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Read after the end: %v, want io.EOF", err)
	}
	if _, err := lc.Write([]byte("x")); err == nil {
		t.Fatal("a write to a closed peer succeeded")
	}
}

// TestRawIOErrorsReadAsNetConns: errors are net.OpErrors of "read" or
// "write", as net.Conn's are, and still match what callers look for.
func TestRawIOErrorsReadAsNetConns(t *testing.T) {
	lc, _ := socketPair(t)
	_ = lc.SetReadDeadline(time.Now())
	_, err := lc.Read(make([]byte, 1))
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %#v", err)
	}
	_ = lc.Close()
	_, err = lc.Write([]byte("x"))
	if !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write when closed: %v", err)
	}
}

// TestRawIOStaysInGo: a Conn's reads and writes never enter the
// scheduler's system-call state (runtime/metrics counts such goroutines
// as not in Go), where net.Conn's do at every call: that state is what
// lets sysmon take the P away mid-call and hand it to another thread.
//
// Goroutines of other tests may sit in system calls for good (a loop's
// goroutine waits in epoll_wait): the test counts those above what it
// sees before it starts.
func TestRawIOStaysInGo(t *testing.T) {
	sample := []metrics.Sample{{Name: "/sched/goroutines/not-in-go:goroutines"}}
	notInGo := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	var before uint64
	for range 200 {
		before = max(before, notInGo())
	}
	lc, far := socketPair(t)
	peer := Wrap(far)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the far end drains what lc writes
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				_ = lc.Close()
				_ = peer.Close()
				return
			default:
			}
			if _, err := lc.Write(buf); err != nil {
				return
			}
		}
	}()
	inSyscall := 0
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if notInGo() > before {
			inSyscall++
		}
	}
	close(stop)
	wg.Wait()
	if inSyscall > 0 {
		t.Fatalf("%d samples saw a goroutine in a system call", inSyscall)
	}
}
