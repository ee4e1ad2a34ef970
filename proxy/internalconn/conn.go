// Package internalconn keeps one long-lived connection of mzproxy's own
// (catalog reads, leases, the oracle) usable across backend
// restarts and terminated backends: it is checked before each use, made
// again when dead, and a statement that provably did not run, or that is
// safe to run twice, is run once more on the new connection. Without it
// the first statement after a restart (or a DROP DATABASE ... WITH
// (FORCE)) would fail with the backend's 57P01 on the dead connection.
package internalconn

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Retry says whether a statement may run again on a new connection when
// its connection died under it.
type Retry bool

const (
	// Once is for a statement that must not run twice: a write that may
	// have committed. It is run again only when pgconn proves it never
	// reached the server (pgconn.SafeToRetry).
	Once Retry = false
	// Idempotent is for a read, or a statement whose second run changes
	// nothing more than its first (or whose transaction cannot have
	// committed): it also runs again when the server ended the connection.
	Idempotent Retry = true
)

// Conn is one internal connection. It is not safe for concurrent use:
// its owner serializes calls (as it serialized use of the *pgx.Conn).
type Conn struct {
	// dial makes a new connection; the owner's hook to reset what it
	// kept about the old one (an advisory lock held, an open
	// transaction, a catalog read over it). nil: no redial.
	dial func(context.Context) (*pgx.Conn, error)
	conn *pgx.Conn
}

// New returns a Conn over conn (nil: dial on first use) that is dialed
// again with dial when it dies; with a nil dial a dead connection fails
// every Run.
func New(conn *pgx.Conn, dial func(context.Context) (*pgx.Conn, error)) *Conn {
	return &Conn{conn: conn, dial: dial}
}

// errLost is Run's error for a dead connection that cannot be redialed.
var errLost = errors.New("internal connection lost")

// Run runs f on a live connection, dialing first when the kept one is
// missing or dead. When f fails on a connection that died (closed, or the
// server's 57P01/57P02/57P03), the connection is dropped and, if retry
// allows it, f runs once more on a new connection.
func (c *Conn) Run(ctx context.Context, retry Retry, f func(*pgx.Conn) error) error {
	conn, err := c.live(ctx)
	if err != nil {
		return err
	}
	err = f(conn)
	if err == nil || !conn.IsClosed() && !serverEnded(err) {
		return err
	}
	c.Close()
	if ctx.Err() != nil || !pgconn.SafeToRetry(err) && retry != Idempotent {
		return err
	}
	if conn, err2 := c.live(ctx); err2 == nil {
		return f(conn)
	}
	return err
}

// live returns the kept connection when it is alive, else a new one.
func (c *Conn) live(ctx context.Context) (*pgx.Conn, error) {
	if c.conn != nil && alive(c.conn) {
		return c.conn, nil
	}
	c.Close()
	if c.dial == nil {
		return nil, errLost
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return conn, nil
}

// Close closes the connection (a later Run dials again).
func (c *Conn) Close() {
	if c.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.conn.Close(ctx)
		c.conn = nil
	}
}

// serverEnded reports whether err is the server ending the connection:
// admin_shutdown (a fast shutdown or restart, pg_terminate_backend, DROP
// DATABASE ... WITH (FORCE)), crash_shutdown or cannot_connect_now.
func serverEnded(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "57P01", "57P02", "57P03":
		return true
	}
	return false
}
