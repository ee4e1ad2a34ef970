package internalconn

import (
	"net"

	"github.com/jackc/pgx/v5"
)

// peekState is what an idle connection's socket holds.
type peekState int

const (
	peekUnknown peekState = iota // cannot tell without reading
	peekIdle                     // nothing to read: alive
	peekPending                  // bytes arrived unasked
	peekGone                     // end of stream or an error: dead
)

// alive reports whether an idle connection is still usable, without a
// round trip. A backend that shuts down or is terminated sends a FATAL
// ErrorResponse and closes: the socket then holds that message (or EOF).
// Reading it (CheckConn) makes pgconn close the connection; a message that
// is not FATAL (a notice) leaves it open.
func alive(c *pgx.Conn) bool {
	if c.IsClosed() {
		return false
	}
	switch peek(c.PgConn().Conn()) {
	case peekIdle:
		return true
	case peekGone:
		return false
	}
	// CheckConn waits up to a millisecond for a message: only when the
	// socket cannot be peeked at, or something is there.
	return c.PgConn().CheckConn() == nil && !c.IsClosed()
}

// netConnOf unwraps a TLS connection to the socket under it.
func netConnOf(nc net.Conn) net.Conn {
	if t, ok := nc.(interface{ NetConn() net.Conn }); ok {
		return t.NetConn()
	}
	return nc
}
