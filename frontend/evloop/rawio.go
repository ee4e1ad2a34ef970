//go:build linux

package evloop

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// rawOp is the reads (or the writes) of an attached socket, made as the
// loop makes them: read(2) and write(2) with syscall.RawSyscall, without
// telling Go's scheduler, inside the socket's RawConn, which waits in the
// netpoller when the socket is not ready and keeps the deadlines and the
// Close of the net.Conn.
//
// net.Conn's own Read and Write enter the scheduler around each system
// call (entersyscall): a write to a loopback socket, which does the
// receiver's part of the work too, often lasts long enough for the
// scheduler's monitor (sysmon) to take the P away, hand it to another
// thread (a futex wake) and keep itself waking every 20 µs. A session
// served by its own goroutine (a transaction, anything the loop does not
// forward) makes four of these calls per statement at least; they never
// block (Go's sockets are non-blocking), so there is nothing to hand off.
type rawOp struct {
	mu    sync.Mutex // one call at a time (net.Conn allows concurrent ones)
	rc    syscall.RawConn
	write bool
	// local, remote: for errors spelled as net.Conn spells them.
	local, remote net.Addr
	call          func(fd uintptr) bool // op.attempt, bound once: no allocation per call
	// pollWait: a read that finds nothing first waits for the socket in
	// poll(2) on its own thread, up to this long, before it waits in Go's
	// netpoller (0: never; Conn.SetPollWait). Atomic: it is set without
	// mu, which a read holds while it waits in the netpoller.
	pollWait atomic.Int64
	polls    int // reads that waited in poll(2), for tests
	// The call under way.
	p      []byte
	n      int
	err    error
	polled bool // the call waited in poll(2) already
}

func (op *rawOp) init(rc syscall.RawConn, write bool, local, remote net.Addr) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.rc, op.write, op.local, op.remote = rc, write, local, remote
	if op.call == nil {
		op.call = op.attempt
	}
}

// maxRW bounds one system call, as internal/poll does.
const maxRW = 1 << 30

// do reads into p, or writes all of p, as net.Conn's Read and Write do.
func (op *rawOp) do(p []byte) (int, error) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if !op.write && len(p) == 0 {
		return 0, nil
	}
	op.p, op.n, op.err, op.polled = p, 0, nil, false
	var err error
	if op.write {
		err = op.rc.Write(op.call)
	} else {
		err = op.rc.Read(op.call)
	}
	n := op.n
	if err == nil {
		err = op.err
	}
	op.p, op.err = nil, nil
	if err != nil && err != io.EOF {
		err = op.opError(err)
	}
	return n, err
}

// opError spells err as net.Conn's Read and Write do (the RawConn's own
// errors, a deadline or a close, come as a "raw-read" or "raw-write"
// net.OpError), so that logs and errors read as before.
func (op *rawOp) opError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	name := "read"
	if op.write {
		name = "write"
	}
	return &net.OpError{Op: name, Net: op.local.Network(), Source: op.local, Addr: op.remote, Err: err}
}

// attempt makes the system call; false: the socket is not ready, the
// RawConn waits for it (or for a deadline) and calls again.
func (op *rawOp) attempt(fd uintptr) bool {
	for {
		if op.write {
			rest := op.p[op.n:]
			n, err := rawWrite(int(fd), rest[:min(len(rest), maxRW)])
			if n > 0 {
				op.n += n
			}
			switch {
			case op.n == len(op.p):
				return true
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return false
			case err != nil:
				op.err = os.NewSyscallError("write", err)
				return true
			case n == 0:
				op.err = io.ErrUnexpectedEOF
				return true
			}
			continue
		}
		n, err := rawRead(int(fd), op.p[:min(len(op.p), maxRW)])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN && !op.polled && op.pollWait.Load() > 0:
			op.polled = true
			op.polls++
			pollReadable(int(fd), time.Duration(op.pollWait.Load()))
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			op.err = os.NewSyscallError("read", err)
		case n == 0:
			op.err = io.EOF
		}
		op.n = max(n, 0)
		return true
	}
}

// pollFd is struct pollfd of poll(2).
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const (
	pollIn    = 0x1
	pollRDHup = 0x2000
)

// pollReadable waits up to d for fd to be readable (or hung up, or in
// error: the read that follows tells which) in ppoll(2). The thread
// sleeps in the kernel and the goroutine runs on as soon as the peer
// writes. A wait in Go's netpoller instead parks the goroutine, has its
// thread look for other work and poll the netpoller (epoll_pwait, once
// without waiting and once waiting: each also returns the writability
// edges Go asks every socket for), and readies the goroutine again
// (session 17: four epoll_pwait per write).
//
// The call is made with RawSyscall, so the goroutine keeps its P, as the
// loop's reads and writes do: made as an ordinary system call (Syscall6),
// the P is in the system-call state, which Go's monitor thread (sysmon)
// takes back when no other P is idle, and each time it does it goes back
// to waking every 20 µs for a millisecond (session 18: 11.8 nanosleep per
// durable write, and twice the CPU). Kept, the P is not taken back; the
// monitor preempts a goroutine that held it for 10 ms with a signal, as
// the garbage collector's stop does, and a signal ends the poll (EINTR;
// ppoll is never restarted): the read then finds nothing and the
// netpoller waits. A caller holds its P for up to d: SetPollWait's
// callers are few at a time (the proxy: one write in flight).
//
// It is made inside the RawConn's read call, which holds the descriptor:
// a Close meanwhile waits for it, so the descriptor cannot be reused
// under the poll, and d bounds that wait (and a deadline's).
func pollReadable(fd int, d time.Duration) {
	pfd := pollFd{fd: int32(fd), events: pollIn | pollRDHup}
	ts := syscall.NsecToTimespec(int64(d))
	_, _, _ = syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
}
