//go:build !linux

package evloop

import (
	"errors"
	"net"
	"time"
)

// Conn is a detachable socket; only Linux has the event loop.
type Conn struct{ net.Conn }

// SetPollWait does nothing: reads wait in Go's netpoller here.
func (c *Conn) SetPollWait(time.Duration) {}

// Wrap returns nil: no socket leaves Go's netpoller here.
func Wrap(net.Conn) *Conn { return nil }

// Loop is the event loop; not available here.
type Loop struct{}

// New fails: the event loop needs Linux's epoll.
func New(int) (*Loop, error) { return nil, errors.New("evloop: the event loop needs Linux") }

// Run is never called: Wrap made no Conn.
func (l *Loop) Run(client, backend *Conn, peer Peer) (Result, error) {
	return Result{}, errors.New("evloop: the event loop needs Linux")
}

// ErrClosed: the loop is closed.
var ErrClosed = errors.New("evloop: the event loop is closed")

// Close does nothing: no loop runs here.
func (l *Loop) Close() error { return nil }
