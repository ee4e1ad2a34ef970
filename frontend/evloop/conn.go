//go:build linux

package evloop

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Conn is a socket that can leave Go's netpoller for an event loop and come
// back. Its owner reads and writes it as any net.Conn; while it is detached
// (the owner then waits for the loop), other goroutines may still set its
// deadlines or close it: those calls are kept and applied when it comes
// back, and each asks the loop to give it back.
type Conn struct {
	mu sync.Mutex
	nc net.Conn // nil while detached
	// reads, writes: the attached socket's reads and writes (rawio.go).
	reads, writes rawOp
	fd            int // the socket while detached
	closed        bool
	local         net.Addr
	remote        net.Addr
	// deadline: the deadlines last set, kept to be applied again when the
	// socket comes back from the loop.
	deadline struct{ read, write time.Time }
	// wantBack is told, while detached, that the owner's socket is wanted
	// back: a deadline was set (closing is true when it was closed).
	wantBack func(closing bool)
}

// Wrap returns nc as a Conn when its socket can be detached (TCP or Unix
// socket, not TLS), else nil.
func Wrap(nc net.Conn) *Conn {
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		c := &Conn{fd: -1, local: nc.LocalAddr(), remote: nc.RemoteAddr()}
		if err := c.use(nc); err != nil {
			return nil
		}
		return c
	}
	return nil
}

// use makes nc the attached socket; c.mu is held (or c is new).
func (c *Conn) use(nc net.Conn) error {
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	c.nc = nc
	c.reads.init(rc, false, c.local, c.remote)
	c.writes.init(rc, true, c.local, c.remote)
	return nil
}

var errDetached = errors.New("evloop: socket is with the event loop")

// ErrDeadlineSet: Run did not take the sockets, one has a deadline set.
var ErrDeadlineSet = errors.New("evloop: socket has a deadline")

func (c *Conn) current() (net.Conn, error) {
	c.mu.Lock()
	nc := c.nc
	c.mu.Unlock()
	if nc == nil {
		return nil, errDetached
	}
	return nc, nil
}

// Read and Write make their system calls as the loop does (rawio.go),
// through the attached socket's netpoller registration, which waits for
// readiness and keeps its deadlines.
func (c *Conn) Read(p []byte) (int, error) {
	if _, err := c.current(); err != nil {
		return 0, err
	}
	return c.reads.do(p)
}

func (c *Conn) Write(p []byte) (int, error) {
	if _, err := c.current(); err != nil {
		return 0, err
	}
	return c.writes.do(p)
}

// SetPollWait makes the Conn's reads that find nothing wait up to d in
// poll(2), on the reading goroutine's thread and keeping its P
// (pollReadable), before they wait in Go's netpoller (0, the default:
// they go to the netpoller at once). For an answer known to be due soon,
// by a goroutine that may keep a P that long: d should stay under the
// scheduler's 10 ms preemption. A Close or deadline set meanwhile takes
// effect when the poll ends (at most d). Safe to call while a read is
// under way, which sees the new wait if it has not polled yet.
func (c *Conn) SetPollWait(d time.Duration) {
	c.reads.pollWait.Store(int64(d))
}

func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SyscallConn gives the socket's raw connection (for peeks), when attached.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	nc, err := c.current()
	if err != nil {
		return nil, err
	}
	return nc.(syscall.Conn).SyscallConn()
}

func (c *Conn) SetDeadline(t time.Time) error {
	return c.setDeadline(t, true, true)
}

func (c *Conn) SetReadDeadline(t time.Time) error { return c.setDeadline(t, true, false) }

func (c *Conn) SetWriteDeadline(t time.Time) error { return c.setDeadline(t, false, true) }

func (c *Conn) setDeadline(t time.Time, read, write bool) error {
	c.mu.Lock()
	if read {
		c.deadline.read = t
	}
	if write {
		c.deadline.write = t
	}
	nc, closed, wantBack := c.nc, c.closed, c.wantBack
	c.mu.Unlock()
	switch {
	case nc == nil && closed:
		return net.ErrClosed
	case nc == nil:
		// Detached: the deadline is applied when the socket comes back,
		// which it is asked to do now.
		if wantBack != nil {
			wantBack(false)
		}
		return nil
	case read && write:
		return nc.SetDeadline(t)
	case read:
		return nc.SetReadDeadline(t)
	}
	return nc.SetWriteDeadline(t)
}

// Close closes the socket; a detached one is closed when the loop gives
// it back.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	nc, wantBack := c.nc, c.wantBack
	c.mu.Unlock()
	if nc != nil {
		return nc.Close()
	}
	if wantBack != nil {
		wantBack(true)
	}
	return nil
}

// detach takes the socket out of Go's netpoller: a duplicate of its
// descriptor (same open socket, still non-blocking) is kept and the
// net.Conn closed, which removes the descriptor from Go's epoll set (a
// socket left there would wake Go's netpoller too at each event).
func (c *Conn) detach(wantBack func(closing bool)) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.nc == nil {
		return -1, net.ErrClosed
	}
	if !c.deadline.read.IsZero() || !c.deadline.write.IsZero() {
		// Someone wants this socket to time out (a drain, an abandoned
		// session): it stays with its goroutine.
		return -1, ErrDeadlineSet
	}
	rc, err := c.nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, dupErr := -1, error(nil)
	if err := rc.Control(func(s uintptr) {
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			dupErr = errno
			return
		}
		fd = int(r)
	}); err != nil {
		return -1, err
	}
	if dupErr != nil {
		return -1, os.NewSyscallError("fcntl", dupErr)
	}
	_ = c.nc.Close()
	c.nc, c.fd, c.wantBack = nil, fd, wantBack
	return fd, nil
}

// attach gives the socket back to Go's netpoller, with the deadlines set
// meanwhile; a Conn closed meanwhile closes it.
func (c *Conn) attach() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	fd := c.fd
	c.fd, c.wantBack = -1, nil
	if c.closed {
		return syscall.Close(fd)
	}
	f := os.NewFile(uintptr(fd), "evloop")
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err == nil {
		if err = c.use(nc); err != nil {
			_ = nc.Close()
		}
	}
	if err != nil {
		c.closed = true
		return err
	}
	if d := c.deadline; !d.read.IsZero() || !d.write.IsZero() {
		_ = nc.SetReadDeadline(d.read)
		_ = nc.SetWriteDeadline(d.write)
	}
	return nil
}
