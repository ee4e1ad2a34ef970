//go:build linux

package evloop

import (
	"errors"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Loop is one event loop: a goroutine waiting in its own epoll set on the
// sockets of the sessions it drives.
type Loop struct {
	epfd         int
	wakeR, wakeW int
	maxBatch     int
	stopped      chan struct{}

	mu      sync.Mutex
	joining []*member
	wanted  []wantBack
	closed  bool
	// pipeClosed: the wake-up pipe is closed (the loop's goroutine ended).
	pipeClosed bool

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
	l := &Loop{epfd: epfd, wakeR: p[0], wakeW: p[1], maxBatch: maxBatch, stopped: make(chan struct{})}
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
	m := &member{peer: peer, maxFrame: peer.MaxMessageSize(), done: make(chan struct{}), client: -1, backend: -1}
	m.replier, _ = peer.(Replier)
	m.follow = peer
	if d, ok := peer.(Delegator); ok {
		m.follow = d.Follower()
	}
	m.quieter, _ = m.follow.(Quieter)
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

// yieldEvery is how long the loop's goroutine runs before it lets Go's
// scheduler see it (runtime.Gosched). The scheduler preempts a goroutine
// that kept its P for 10 ms, system calls included, which a busy loop
// always does: a signal that interrupts its epoll_wait, each also keeping
// the scheduler's monitor thread (sysmon) waking every few tens of
// microseconds for a while. A preemption yields as Gosched does (an idle
// thread is woken to look for work: a futex call or two) and adds the
// signal's tgkill and rt_sigreturn, so the loop yields first; the closer
// to 10 ms, the fewer such wake-ups (session 14: 5 ms, about 93% of the
// proxy's futex calls under pgbench -S).
const yieldEvery = 9 * time.Millisecond

// run is the loop's goroutine. It waits in epoll_wait, in the scheduler's
// system-call state (the P is handed off when it waits long). Two other
// waits measured worse (session 15, docs/read-cost.md): the epoll set as
// a file of Go's netpoller, parked there between events (about three
// epoll calls per transaction instead of one: the netpoller's, the
// loop's own, the scheduler's polls, it seems), and epoll_wait made with
// RawSyscall for up to 1 ms, keeping the P (more epoll calls and more CPU
// per transaction; likely the other threads spinning and polling the
// netpoller meanwhile).
//
// It is not locked to its thread (runtime.LockOSThread): a locked
// goroutine that yields or is preempted has its thread hand the P to
// another thread and sleep until that thread hands it back, and meanwhile
// every session the loop drives waits (on a loaded machine, for as long
// as the woken thread waits for a CPU). An unlocked one is put back on a
// run queue, and a thread picks it up again at once.
func (l *Loop) run() {
	defer l.stop()
	events := make([]syscall.EpollEvent, 128)
	lastYield := time.Now()
	for {
		n, err := syscall.EpollWait(l.epfd, events, -1)
		// time.Since of a time.Now reads the monotonic clock alone (once
		// per wake-up; time.Now reads the wall clock too).
		if time.Since(lastYield) >= yieldEvery {
			runtime.Gosched()
			lastYield = time.Now()
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			l.fail(err)
			return
		}
		if l.handle(events[:n]) {
			return
		}
	}
}

// stop closes what the loop's goroutine had and lets Close return.
func (l *Loop) stop() {
	l.mu.Lock()
	// Closed under the lock: a Conn given back may still ask to be let go
	// (wake), and its write must not reach a descriptor reused meanwhile.
	l.pipeClosed = true
	syscall.Close(l.wakeR)
	syscall.Close(l.wakeW)
	l.mu.Unlock()
	syscall.Close(l.epfd)
	close(l.stopped)
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
}

var bufPool = sync.Pool{New: func() any { return make([]byte, 32<<10) }}
