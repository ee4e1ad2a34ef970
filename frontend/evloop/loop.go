//go:build linux

package evloop

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// Loop is one event loop: a goroutine waiting on the sockets of the
// sessions it drives, through its own epoll set, which itself waits in Go's
// netpoller (Loop.run).
type Loop struct {
	epfd         int
	ep           *os.File // epfd, registered with Go's netpoller
	wakeR, wakeW int
	maxBatch     int
	stopped      chan struct{}

	mu      sync.Mutex
	joining []*member
	wanted  []wantBack
	closed  bool
	// pipeClosed: the wake-up pipe is closed (the loop's goroutine ended).
	pipeClosed bool

	// readied: the loop's goroutine made another runnable (Run returns).
	readied bool
	// members are the sessions by socket (a descriptor is a small
	// number: a slice indexed by it costs no hashing per event); the
	// loop's goroutine only.
	members []*member
}

type wantBack struct {
	m       *member
	closing bool
}

// New starts a loop; maxBatch bounds a client batch it forwards (larger
// ones go back to the session's goroutine).
func New(maxBatch int) (*Loop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	closeAll := func() { syscall.Close(epfd); syscall.Close(p[0]); syscall.Close(p[1]) }
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		closeAll()
		return nil, err
	}
	// An epoll set is readable while it has events: non-blocking, os.NewFile
	// registers it with Go's netpoller, where the loop's goroutine waits.
	if err := syscall.SetNonblock(epfd, true); err != nil {
		closeAll()
		return nil, err
	}
	l := &Loop{epfd: epfd, ep: os.NewFile(uintptr(epfd), "evloop"), wakeR: p[0], wakeW: p[1], maxBatch: maxBatch, stopped: make(chan struct{})}
	go l.run()
	return l, nil
}

// ErrClosed: the loop is closed. Run takes no session then, and one it
// had with a batch at the backend ends with it (Result.Over).
var ErrClosed = errors.New("evloop: the event loop is closed")

// Close stops the loop and waits for its goroutine to end. The sessions it
// drives go back to their goroutines (Run returns): an idle one as if it
// had asked, one with a batch at the backend with Over ErrClosed (its
// backend's work abandoned, as for a client gone).
func (l *Loop) Close() error {
	l.mu.Lock()
	already := l.closed
	l.closed = true
	l.mu.Unlock()
	if !already {
		l.wake()
	}
	<-l.stopped
	return nil
}

// Run hands a session's client and backend sockets to the loop and waits
// until the loop gives them back: when the client sends what the loop
// does not forward, the backend sends something unasked, either socket is
// closed, or a deadline is set on either (a drain).
func (l *Loop) Run(client, backend *Conn, peer Peer) (Result, error) {
	m := &member{peer: peer, done: make(chan struct{}), client: -1, backend: -1}
	want := func(closing bool) { l.want(m, closing) }
	var err error
	if m.client, err = client.detach(want); err != nil {
		return Result{}, err
	}
	if m.backend, err = backend.detach(want); err != nil {
		return Result{}, errors.Join(err, client.attach())
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return Result{}, errors.Join(ErrClosed, client.attach(), backend.attach())
	}
	l.joining = append(l.joining, m)
	l.mu.Unlock()
	l.wake()
	<-m.done
	err = errors.Join(client.attach(), backend.attach())
	return Result{Leftover: m.in, Over: m.over, Forwarded: m.forwarded}, err
}

func (l *Loop) want(m *member, closing bool) {
	l.mu.Lock()
	l.wanted = append(l.wanted, wantBack{m, closing})
	l.mu.Unlock()
	l.wake()
}

func (l *Loop) wake() {
	l.mu.Lock()
	if !l.pipeClosed {
		_, _ = syscall.Write(l.wakeW, []byte{0})
	}
	l.mu.Unlock()
}

// busyWait is how long the loop waits for its sessions' next event while
// it keeps its P (an epoll_wait the scheduler is not told of: Loop.run),
// before it parks in Go's netpoller. Under load the next event comes
// well within it; a loop idle this long pays the netpoller's wake-up at
// its next event (two more epoll calls).
const busyWait = 1 // ms

// run is the loop's goroutine. While its sessions are busy it waits for
// their events in epoll_wait itself, made with RawSyscall: the scheduler
// does not see a system call, so the goroutine keeps its P and its thread
// (no futex to get them back when the event comes, no sysmon waking every
// 20 µs to take the P away meanwhile), as PgBouncer waits. The P it keeps
// is one the other goroutines cannot have, so the wait is short
// (busyWait), and the goroutine yields when a signal interrupts it (the
// scheduler's preemption, at the latest 10 ms on: a stop-the-world for the
// garbage collector waits for it) and when it readied another goroutine
// (a session given back: Go runs a goroutine readied by this one on its
// P next). Idle longer than busyWait, it parks in Go's netpoller, where
// its epoll set is a file (New): a wait that holds no thread and no P.
//
// Until session 15 the loop waited in syscall.EpollWait, in the
// scheduler's system-call state (a futex wake or two per wake-up and
// sysmon's nanosleeps), with a runtime.Gosched every 5 ms against the
// preemption; in the netpoller alone it made about three epoll calls per
// transaction where it had made one (docs/read-cost.md).
//
// The goroutine is not locked to its thread (runtime.LockOSThread): a
// locked goroutine that yields or is preempted has its thread hand the P
// to another thread and sleep until that thread hands it back, and
// meanwhile every session the loop drives waits.
func (l *Loop) run() {
	defer close(l.stopped)
	events := make([]syscall.EpollEvent, 128)
	rc, err := l.ep.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool {
			for {
				n, errno := epollWait(int(fd), events, busyWait)
				switch {
				case errno == syscall.EINTR:
					// A signal, most likely the scheduler's preemption:
					// yield, as it wants.
					runtime.Gosched()
					continue
				case errno != 0:
					l.fail(errno)
					return true
				case n == 0:
					// Idle: park until the set is readable (an edge
					// reported already wakes it at once, and the next
					// epoll_wait finds nothing or the new events).
					return false
				}
				l.readied = false
				if l.handle(events[:n]) {
					return true
				}
				if l.readied {
					// Let the goroutines it readied run on this P.
					runtime.Gosched()
				}
			}
		})
	}
	if err != nil {
		l.fail(err)
	}
	_ = l.ep.Close()
	l.mu.Lock()
	// Closed under the lock: a Conn given back may still ask to be let go
	// (wake), and its write must not reach a descriptor reused meanwhile.
	l.pipeClosed = true
	syscall.Close(l.wakeR)
	syscall.Close(l.wakeW)
	l.mu.Unlock()
}

// fail ends the loop: its epoll set cannot be waited on (never expected),
// and every session it drives goes back to its goroutine.
func (l *Loop) fail(err error) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.takeRequests()
}

// handle acts on the events of one epoll_wait; true: the loop is closed.
func (l *Loop) handle(events []syscall.EpollEvent) bool {
	for _, ev := range events {
		if int(ev.Fd) == l.wakeR {
			if l.takeRequests() {
				return true
			}
			continue
		}
		if m := l.member(int(ev.Fd)); m != nil {
			m.note(int(ev.Fd), ev.Events)
			l.progress(m)
		}
	}
	return false
}

// epollWait is epoll_wait(2) without telling Go's scheduler, which sees the
// goroutine running while it waits (up to msec).
func epollWait(epfd int, events []syscall.EpollEvent, msec int) (int, syscall.Errno) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), uintptr(msec), 0, 0)
	return int(n), errno
}

// member is the session of socket fd, if the loop drives one.
func (l *Loop) member(fd int) *member {
	if fd < 0 || fd >= len(l.members) {
		return nil
	}
	return l.members[fd]
}

// takeRequests admits the sessions joining and acts on sockets wanted
// back; true: the loop is closed, and every session went back.
func (l *Loop) takeRequests() bool {
	var buf [64]byte
	for {
		if n, _ := syscall.Read(l.wakeR, buf[:]); n <= 0 {
			break
		}
	}
	l.mu.Lock()
	joining, wanted, closed := l.joining, l.wanted, l.closed
	l.joining, l.wanted = nil, nil
	l.mu.Unlock()
	for _, m := range joining {
		l.join(m)
	}
	for _, w := range wanted {
		if w.m.gone {
			continue
		}
		if w.closing {
			w.m.closing = true
		}
		w.m.wanted = true
		l.progress(w.m)
	}
	if !closed {
		return false
	}
	for _, m := range l.members {
		if m == nil || m.gone {
			continue
		}
		if m.inFlight {
			go m.peer.Abandon()
			l.leave(m, ErrClosed)
		} else {
			l.leave(m, nil)
		}
	}
	return true
}

// join adds a session's sockets to the epoll set, edge-triggered: the loop
// keeps each socket's readiness itself and reads only what is known to
// be there (a read that finds nothing is a wasted system call).
//
// A socket is watched for writability only once a write to it came up
// short (waitWritable): a Unix socket signals writability each time its
// peer reads, so the backend's socket would wake the loop for nothing at
// every statement (as PgBouncer, the loop asks only when it must wait).
func (l *Loop) join(m *member) {
	m.cr, m.cw, m.bw = false, true, true
	m.cwWatched, m.bwWatched = false, false
	m.buf = bufPool.Get().([]byte)
	for _, fd := range []int{m.client, m.backend} {
		ev := syscall.EpollEvent{Events: readEvents, Fd: int32(fd)}
		if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			l.leave(m, nil)
			return
		}
		if fd >= len(l.members) {
			l.members = append(l.members, make([]*member, fd+1-len(l.members))...)
		}
		l.members[fd] = m
	}
	l.progress(m)
}

// readEvents are the events a member's socket is always watched for.
const readEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | -syscall.EPOLLET

// waitWritable records that a socket of m's cannot take more now and has
// the loop told when it can: from then on the socket is watched for
// writability too (a write that came up short once may well again).
// Re-arming an edge-triggered socket reports it at once if it is
// writable already, so no edge is missed in between.
func (l *Loop) waitWritable(m *member, fd int) {
	watched := &m.bwWatched
	if fd == m.client {
		watched, m.cw = &m.cwWatched, false
	} else {
		m.bw = false
	}
	if *watched {
		return
	}
	ev := syscall.EpollEvent{Events: readEvents | syscall.EPOLLOUT, Fd: int32(fd)}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_MOD, fd, &ev); err != nil {
		// Not watched: the session's goroutine takes the socket over.
		l.leave(m, nil)
		return
	}
	*watched = true
}

// leave takes the session's sockets out of the epoll set and lets Run
// return.
func (l *Loop) leave(m *member, over error) {
	if m.gone {
		return
	}
	m.gone, m.over = true, over
	for _, fd := range []int{m.client, m.backend} {
		if l.member(fd) == m {
			l.members[fd] = nil
			_ = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
		}
	}
	bufPool.Put(m.buf[:cap(m.buf)])
	m.buf, m.out = nil, nil
	close(m.done)
	l.readied = true
}

var bufPool = sync.Pool{New: func() any { return make([]byte, 32<<10) }}
