//go:build !unix

package internalconn

import "net"

// peek cannot look at the socket here: alive reads (CheckConn) instead.
func peek(net.Conn) peekState { return peekUnknown }
