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

	mu      sync.Mutex
	joining []*member
	wanted  []wantBack

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
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	l := &Loop{epfd: epfd, wakeR: p[0], wakeW: p[1], maxBatch: maxBatch}
	go l.run()
	return l, nil
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
	_, _ = syscall.Write(l.wakeW, []byte{0})
}

// yieldEvery is how long the loop's goroutine runs before it lets Go's
// scheduler see it (runtime.Gosched). The scheduler preempts a goroutine
// that kept its P for 10 ms, system calls included, which a busy loop
// always does: a signal that interrupts its epoll_wait, about 50 times a
// second, each also keeping the scheduler's monitor thread (sysmon) waking
// every few tens of microseconds for a while (about 800 wake-ups a
// second under pgbench -S). Yielding first costs a futex call or two
// (an idle thread is woken to look for work); under pgbench -S that is
// about a third fewer of these wake-ups in all (strace -f, 2 s: futex,
// tgkill and nanosleep about 920 instead of 1,300-2,100).
const yieldEvery = 5 * time.Millisecond

// run is the loop's goroutine. It is not locked to its thread
// (runtime.LockOSThread): a locked goroutine that yields or is preempted
// has its thread hand the P to another thread and sleep until that thread
// hands it back, and meanwhile every session the loop drives waits (on a
// loaded machine, for as long as the woken thread waits for a CPU). An
// unlocked one is put back on a run queue, and a thread picks it up again
// at once.
func (l *Loop) run() {
	events := make([]syscall.EpollEvent, 128)
	lastYield := time.Now()
	for {
		n, err := syscall.EpollWait(l.epfd, events, -1)
		if now := time.Now(); now.Sub(lastYield) >= yieldEvery {
			runtime.Gosched()
			lastYield = now
		}
		if err != nil {
			continue // EINTR
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == l.wakeR {
				l.takeRequests()
				continue
			}
			if m := l.member(int(ev.Fd)); m != nil {
				m.note(int(ev.Fd), ev.Events)
				l.progress(m)
			}
		}
	}
}

// member is the session of socket fd, if the loop drives one.
func (l *Loop) member(fd int) *member {
	if fd < 0 || fd >= len(l.members) {
		return nil
	}
	return l.members[fd]
}

// takeRequests admits the sessions joining and acts on sockets wanted back.
func (l *Loop) takeRequests() {
	var buf [64]byte
	for {
		if n, _ := syscall.Read(l.wakeR, buf[:]); n <= 0 {
			break
		}
	}
	l.mu.Lock()
	joining, wanted := l.joining, l.wanted
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
