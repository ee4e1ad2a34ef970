//go:build unix

package internalconn

import (
	"errors"
	"net"
	"syscall"
)

// peek looks at the socket under nc without reading from it or waiting.
func peek(nc net.Conn) peekState {
	sc, ok := netConnOf(nc).(syscall.Conn)
	if !ok {
		return peekUnknown
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return peekUnknown
	}
	var (
		n    int
		rerr error
		buf  [1]byte
	)
	// Control, not Read: Read takes the socket's read lock, which pgconn's
	// background reader may hold in a read that never returns (the tick's
	// peek then hung, and with it shutdown). A peek that does not wait
	// needs no lock.
	err = raw.Control(func(fd uintptr) {
		n, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	switch {
	case err != nil:
		return peekGone
	case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK):
		return peekIdle
	case errors.Is(rerr, syscall.EINTR):
		return peekUnknown
	case rerr != nil || n == 0:
		return peekGone
	}
	return peekPending
}
