//go:build linux

package evloop

import (
	"syscall"
	"unsafe"
)

// member is a session in the loop: its two sockets (duplicates, out of
// Go's netpoller), their readiness as the edge-triggered events told it,
// and the bytes on their way.
type member struct {
	peer Peer
	// follow is the peer's Admit and Answer (its Follower when it is a
	// Delegator).
	follow Follower
	// maxFrame and replier are the peer's MaxMessageSize and Replier,
	// asked once when it joins rather than at each batch.
	maxFrame int
	replier  Replier
	// quieter is the follower's Quieter, if it is one.
	quieter         Quieter
	client, backend int
	done            chan struct{}

	cr, cw, br, bw bool // client/backend readable, writable
	// cwWatched, bwWatched: the epoll set watches the client's/backend's
	// socket for writability (Loop.waitWritable).
	cwWatched, bwWatched bool
	chup                 bool // the client hung up (or its socket failed)
	// bhup: the backend hung up (or its socket failed): its socket stays
	// readable until a read finds the end (readBackend).
	bhup bool

	in        []byte // client bytes not yet forwarded (a batch being read)
	readable  int    // bytes at the start of in that Peer.Readable passed
	toBackend []byte // the batch, not yet all written to the backend
	buf       []byte // backend read buffer
	out       []byte // backend bytes not yet written to the client (in buf)
	scan      answerScanner
	// holding: the batch went as the peer's own bytes (Admit's send) and
	// nothing of its answer has been relayed: the answer's bytes are kept
	// in held, the first dropped of them of frames the peer dropped,
	// until the peer has a frame relayed (or takes the session back).
	holding bool
	held    []byte
	dropped int
	// kept: a frame of the held answer is the client's (Verdict Hold):
	// no frame after it is dropped.
	kept bool

	inFlight  bool // a batch is with the backend, its ReadyForQuery not relayed
	answered  bool // its ReadyForQuery has been read
	stopAfter bool // the peer wants its sockets back after this answer
	wanted    bool // the session's goroutine wants its sockets back
	closing   bool // ... because a socket was closed: at once
	forwarded int
	gone      bool
	over      error
}

// note records what an event says of a socket.
func (m *member) note(fd int, events uint32) {
	readable := events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
	writable := events&(syscall.EPOLLOUT|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
	if fd == m.client {
		m.cr = m.cr || readable
		m.cw = m.cw || writable
		m.chup = m.chup || events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
		return
	}
	m.br = m.br || readable
	m.bw = m.bw || writable
	m.bhup = m.bhup || events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
}

// progress moves a session on as far as its sockets' readiness allows.
func (l *Loop) progress(m *member) {
	for !m.gone {
		switch {
		case m.closing:
			if m.inFlight {
				go m.peer.Abandon()
			}
			l.leave(m, ErrClientGone)
		case m.chup && m.inFlight:
			// Gone mid-statement: the backend's work must stop, as the
			// connection's watchdog would have it. On its own goroutine:
			// a CancelRequest takes a connection to the backend, which
			// the other sessions of the loop must not wait for.
			go m.peer.Abandon()
			l.leave(m, ErrClientGone)
		case len(m.toBackend) > 0:
			if !m.bw {
				return
			}
			l.writeBackend(m)
		case len(m.out) > 0:
			if !m.cw {
				return
			}
			l.writeClient(m)
		case m.inFlight && m.answered:
			m.inFlight, m.answered = false, false
			if m.stopAfter {
				l.leave(m, ErrPeerStopped)
			}
		case m.inFlight:
			if !m.br {
				return
			}
			l.readBackend(m)
		case m.br || m.wanted:
			// Idle: the backend speaks unasked (a notice, its FATAL
			// error, its end), or a drain wants the session: its own
			// goroutine takes over.
			l.leave(m, nil)
		case m.cr:
			l.readClient(m)
		default:
			return
		}
	}
}

// readClient reads the client's next bytes and forwards them when they
// make a batch the peer admits; anything else goes back to the session.
func (l *Loop) readClient(m *member) {
	if cap(m.in)-len(m.in) < 4<<10 {
		m.in = append(make([]byte, 0, 2*cap(m.in)+16<<10), m.in...)
	}
	n, err := rawRead(m.client, m.in[len(m.in):cap(m.in)])
	switch {
	case err == syscall.EAGAIN:
		m.cr = false
		return
	case err != nil || n == 0:
		// End of file or a failed socket: the session's goroutine reads
		// it again and ends the connection its usual way.
		l.leave(m, nil)
		return
	}
	m.in = m.in[:len(m.in)+n]
	if len(m.in) < cap(m.in) && !m.chup {
		// A short read emptied the socket: the next edge says when more
		// is there. Not after a hang-up, whose edge may have come with
		// these bytes: no edge follows it, and the end of the stream is
		// still to be read (the next read returns 0).
		m.cr = false
	}
	state, whole := judgeBatch(m.in, l.maxBatch, m.maxFrame)
	switch state {
	case batchPartial:
		if whole > m.readable {
			if !m.peer.Readable(m.in[m.readable:whole]) {
				l.leave(m, nil)
				return
			}
			m.readable = whole
		}
		return
	case batchOther:
		l.leave(m, nil)
		return
	}
	send, ok := m.follow.Admit(m.in)
	if !ok {
		l.leave(m, nil)
		return
	}
	if m.replier != nil {
		if answer := m.replier.Reply(); answer != nil {
			// Answered without the backend: the batch is done with.
			m.out = answer
			m.in, m.readable = m.in[:0], 0
			m.forwarded++
			return
		}
	}
	// m.in stays the batch's buffer until the backend has it all (held:
	// until its answer is relayed, as it may go back with it).
	m.toBackend = m.in
	// (A held answer is followed frame by frame, also after its release.)
	m.scan.quiet = send == nil && m.quieter != nil && m.quieter.QuietAnswer()
	if send != nil {
		m.toBackend = send
		m.holding, m.held, m.dropped, m.kept = true, m.held[:0], 0, false
		m.scan.keepRows = true
	}
	m.inFlight = true
	m.forwarded++
}

func (l *Loop) writeBackend(m *member) {
	n, err := rawWrite(m.backend, m.toBackend)
	if err == syscall.EAGAIN {
		l.waitWritable(m, m.backend)
		return
	}
	if err != nil {
		l.leave(m, ErrBackendGone)
		return
	}
	m.toBackend = m.toBackend[n:]
	if len(m.toBackend) > 0 {
		l.waitWritable(m, m.backend)
		return
	}
	m.toBackend = nil
	if !m.holding {
		// The batch's buffer is free again.
		m.in, m.readable = m.in[:0], 0
	}
}

// readBackend reads the backend's answers and hands them to the client;
// the next read waits until they are all written (the backend is made to
// wait by a client that reads slowly, as it would be without the loop).
func (l *Loop) readBackend(m *member) {
	n, err := rawRead(m.backend, m.buf)
	switch {
	case err == syscall.EAGAIN:
		m.br = false
		return
	case err != nil || n == 0:
		l.leave(m, ErrBackendGone)
		return
	}
	if n < len(m.buf) && !m.bhup {
		// A short read emptied the socket: the next edge says when more
		// is there. Not after a hang-up, whose edge may have come with
		// these bytes (a crashed backend's last notice and its exit):
		// no edge follows it, and the end is still to be read, which
		// gives the session back (ErrBackendGone) instead of leaving it,
		// and its client, waiting for an answer that never comes.
		m.br = false
	}
	m.out = m.buf[:n]
	if m.holding {
		m.held = append(m.held, m.out...)
		m.out = nil
	}
	back := false
	ok := m.scan.feed(m.buf[:n], func(typ byte, frame []byte) bool {
		v := m.follow.Answer(typ, frame)
		if m.holding {
			switch {
			case v == Drop && !m.kept:
				m.dropped += len(frame)
				return true
			case v == Drop || v == Hold:
				m.kept = true
				return true
			case v == Back:
				back = true
				return false
			}
			l.release(m)
		}
		if v != Relay && v != Drop && v != Hold {
			m.stopAfter = true
		}
		if typ == 'Z' {
			m.answered = true
			// Whatever comes after it is not this batch's answer: the
			// next frame is looked at, whatever its type.
			m.scan.quiet = false
		} else if m.answered {
			// Something after the ReadyForQuery: not an answer of this
			// batch; the session's goroutine follows what comes next.
			m.stopAfter = true
		}
		return typ != 0
	})
	switch {
	case back:
		m.peer.Unread(m.held)
		l.leave(m, nil)
	case !ok:
		m.stopAfter, m.answered = true, true
	}
}

// release ends a held answer at the frame the peer relays first: from it
// on, everything read is relayed, and the client's batch is done with.
func (l *Loop) release(m *member) {
	m.holding, m.scan.keepRows = false, false
	m.out = m.held[m.dropped:]
	m.in, m.readable = m.in[:0], 0
}

func (l *Loop) writeClient(m *member) {
	n, err := rawWrite(m.client, m.out)
	if err == syscall.EAGAIN {
		l.waitWritable(m, m.client)
		return
	}
	if err != nil {
		m.chup = true
		if !m.inFlight {
			l.leave(m, ErrClientGone)
		}
		m.out = nil
		return
	}
	m.out = m.out[n:]
	if len(m.out) > 0 {
		l.waitWritable(m, m.client)
	}
}

// rawRead and rawWrite are read(2) and write(2) on a non-blocking socket
// without telling Go's scheduler (syscall.RawSyscall): they never block,
// and handing the loop's P off and taking it back around each call costs
// more than the call itself on a point read's path.
func rawRead(fd int, p []byte) (int, error) {
	return rawIO(syscall.SYS_READ, fd, p)
}

func rawWrite(fd int, p []byte) (int, error) {
	return rawIO(syscall.SYS_WRITE, fd, p)
}

func rawIO(call uintptr, fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, errno := syscall.RawSyscall(call, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if errno != 0 {
		return -1, errno
	}
	return int(n), nil
}
