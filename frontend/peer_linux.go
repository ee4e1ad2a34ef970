package frontend

import (
	"syscall"
	"unsafe"
)

// Poll flags from <poll.h>; the syscall package does not define them.
const (
	pollErr   = 0x8
	pollHup   = 0x10
	pollRDHup = 0x2000
)

// peerShutdown reports whether the peer of the socket fd has shut down its
// sending side (POLLRDHUP), even when bytes it sent before are still unread
// (a Terminate, a TLS close_notify), which a one-byte MSG_PEEK cannot see
// past. ok is false when the kernel could not say.
func peerShutdown(fd uintptr) (closed, ok bool) {
	pfd := struct {
		fd             int32
		events, revent int16
	}{fd: int32(fd), events: pollRDHup}
	var zero syscall.Timespec // do not block
	n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	if errno != 0 {
		return false, false
	}
	return n == 1 && pfd.revent&(pollRDHup|pollHup|pollErr) != 0, true
}
