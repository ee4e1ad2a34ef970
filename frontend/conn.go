package frontend

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
)

var syscallEMFILE = syscall.EMFILE

// Request codes of the untyped startup-phase packets.
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	cancelRequestCode = 80877102
	protocolMajor3    = 3
)

const (
	readBufferSize  = 16 << 10
	writeBufferSize = 16 << 10
)

// conn is one client connection. Its goroutine owns the reader, the writer
// and the session; other goroutines only call cancel, wakeIfIdle and
// forceClose.
type conn struct {
	srv    *Server
	nc     net.Conn
	r      *wire.Reader
	w      *wire.Writer
	log    *logrus.Entry
	pid    uint32
	secret []byte
	start  time.Time

	ctx      context.Context
	stop     context.CancelFunc
	idle     atomic.Bool // blocked reading the client's next message
	handling atomic.Bool // inside Session.Handle
	watchdog *time.Timer // checks the client is still there during long messages
	// watchArmed: the watchdog will run; it stays armed across messages.
	watchArmed atomic.Bool
	raw        net.Conn   // the socket under TLS, for the watchdog
	sessMu     sync.Mutex // guards sess for cancel
	sess       Session
	tls        bool
	closeWhy   string
	hasSlot    bool // holds one of the server's MaxConnections places
	// prefix: the client's bytes an event loop turn read and did not
	// forward, read before the socket (the reader reads through it once
	// it was used). loopSkip, loopBackoff: messages to read without the
	// loop after a turn that forwarded nothing (loop.go).
	prefix      prefixReader
	loopSkip    int
	loopBackoff int
}

func (s *Server) serveConn(nc net.Conn) {
	s.accepted.Add(1)
	if s.cfg.EventLoop != nil {
		if lc := evloop.Wrap(nc); lc != nil {
			nc = lc
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &conn{
		srv:   s,
		nc:    nc,
		r:     wire.NewReader(nc, readBufferSize, s.cfg.MaxMessageSize),
		w:     wire.NewWriter(nc, writeBufferSize),
		log:   s.log.WithField("remote", nc.RemoteAddr().String()),
		start: time.Now(),
		ctx:   ctx,
		stop:  stop,
	}
	c.r.SetLimit(wire.FrontendLimit)
	c.raw = nc
	c.prefix.src = nc
	c.watchdog = time.AfterFunc(time.Hour, c.checkClient)
	c.watchdog.Stop()
	defer c.watchdog.Stop()
	defer stop()
	defer nc.Close()
	if !s.register(c) {
		// Draining: PostgreSQL answers a new connection during shutdown so.
		c.fatal(pgerr.Fatal(pgerr.CannotConnectNow, "the database system is shutting down"))
		return
	}
	defer s.unregister(c)
	defer c.releaseSlot()
	defer func() {
		// A panic in one session must not take down the process.
		if p := recover(); p != nil {
			c.log.WithField("panic", p).Error("session panicked; closing its connection")
			c.fatal(pgerr.Fatal(pgerr.InternalError, "internal error in mzproxy"))
		}
	}()

	start, ok := c.startup()
	if !ok {
		return
	}
	c.log = c.log.WithFields(logrus.Fields{
		"session": c.pid, "user": start.User, "database": start.Database,
		"application_name": start.Params["application_name"],
	})
	if !c.openSession(start) {
		return
	}
	c.log.Info("connection started")
	defer func() {
		s.active.Add(-1)
		c.sessMu.Lock()
		sess := c.sess
		c.sess = nil
		c.sessMu.Unlock()
		if err := sess.Close(); err != nil {
			c.log.WithError(err).Debug("closing session")
		}
		c.log.WithFields(logrus.Fields{
			"duration": time.Since(c.start).Round(time.Millisecond).String(),
			"reason":   c.closeWhy,
		}).Info("connection ended")
	}()
	c.serve()
}

// startup runs the startup phase: SSL and GSS negotiation, CancelRequest,
// StartupMessage and authentication. It reports whether a session should
// be opened.
func (c *conn) startup() (wire.Startup, bool) {
	_ = c.nc.SetDeadline(time.Now().Add(c.srv.cfg.AuthTimeout))
	defer c.nc.SetDeadline(time.Time{})
	sslDone, gssDone := false, false
	for {
		// A client that has not logged in is as idle as one between
		// statements: a drain must not wait for it (wakeIfIdle ends the
		// read), or a silent connection holds shutdown to its deadline.
		c.idle.Store(true)
		if c.srv.isDraining() {
			c.fatal(pgerr.Fatal(pgerr.CannotConnectNow, "the database system is shutting down"))
			return wire.Startup{}, false
		}
		body, err := c.r.NextUntyped()
		c.idle.Store(false)
		if err != nil {
			c.startupReadFailed(err)
			return wire.Startup{}, false
		}
		code := binary.BigEndian.Uint32(body)
		switch {
		case code == sslRequestCode && len(body) == 4 && !sslDone:
			sslDone = true
			if !c.negotiateTLS() {
				return wire.Startup{}, false
			}
		case code == gssEncRequestCode && len(body) == 4 && !gssDone:
			gssDone = true
			if err := c.writeByte('N'); err != nil {
				return wire.Startup{}, false
			}
		case code == cancelRequestCode:
			var req pgproto3.CancelRequest
			// The body excludes the length word; CancelRequest.Decode wants
			// the code onwards, which is what body is.
			if err := req.Decode(body); err != nil {
				c.log.WithError(err).Debug("malformed cancel request")
				return wire.Startup{}, false
			}
			c.srv.cancel(req.ProcessID, req.SecretKey)
			return wire.Startup{}, false
		case code>>16 == protocolMajor3:
			return c.startupMessage(body)
		default:
			// PostgreSQL's code for this one is 0A000, not 08P01.
			c.fatal(pgerr.Fatal(pgerr.FeatureNotSupported,
				"unsupported frontend protocol %d.%d: server supports 3.0 to 3.0", code>>16, code&0xffff))
			return wire.Startup{}, false
		}
	}
}

func (c *conn) startupReadFailed(err error) {
	var fe *wire.FrameError
	if errors.As(err, &fe) {
		c.fatal(pgerr.Fatal(pgerr.ProtocolViolation, "%s", fe.Msg))
		return
	}
	// EOF or timeout before a complete startup packet: PostgreSQL logs
	// "incomplete startup packet" and just closes.
	c.log.WithError(err).Debug("incomplete startup packet")
}

func (c *conn) writeByte(b byte) error {
	_, err := c.nc.Write([]byte{b})
	return err
}

func (c *conn) negotiateTLS() bool {
	if c.srv.cfg.TLS == nil {
		return c.writeByte('N') == nil
	}
	if c.r.Buffered() > 0 {
		// Bytes sent after SSLRequest before our answer could be injected by
		// a man in the middle (CVE-2021-23214): refuse them.
		c.fatal(pgerr.Fatal(pgerr.ProtocolViolation, "received unencrypted data after SSL request"))
		return false
	}
	if c.writeByte('S') != nil {
		return false
	}
	tc := tls.Server(c.nc, c.srv.cfg.TLS)
	if err := tc.Handshake(); err != nil {
		c.log.WithError(err).Info("TLS handshake failed")
		return false
	}
	c.nc = tc
	c.tls = true
	c.r.Reset(tc)
	c.w.Reset(tc)
	return true
}

func (c *conn) startupMessage(body []byte) (wire.Startup, bool) {
	var sm pgproto3.StartupMessage
	// Decode accepts only 3.0 and 3.2; a client asking for another 3.x
	// minor version is told 3.0 (NegotiateProtocolVersion) and goes on.
	version := binary.BigEndian.Uint32(body)
	minor := version & 0xffff
	if minor != 0 && minor != 2 {
		binary.BigEndian.PutUint32(body, pgproto3.ProtocolVersion30)
	}
	if err := sm.Decode(body); err != nil {
		c.fatal(pgerr.Fatal(pgerr.ProtocolViolation, "invalid startup packet layout: %v", err))
		return wire.Startup{}, false
	}
	var unsupported []string
	for k := range sm.Parameters {
		if strings.HasPrefix(k, "_pq_.") {
			unsupported = append(unsupported, k)
			delete(sm.Parameters, k)
		}
	}
	if minor != 0 || len(unsupported) > 0 {
		_ = c.w.Send(&pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: unsupported})
	}
	start := wire.Startup{
		User:       sm.Parameters["user"],
		Database:   sm.Parameters["database"],
		Params:     sm.Parameters,
		RemoteAddr: c.nc.RemoteAddr().String(),
		TLS:        c.tls,
		Session:    c.pid,
	}
	if start.User == "" {
		c.fatal(pgerr.Fatal(pgerr.InvalidAuthorizationSpec, "no PostgreSQL user name specified in startup packet"))
		return start, false
	}
	if start.Database == "" {
		start.Database = start.User
		sm.Parameters["database"] = start.User
	}
	if c.srv.isDraining() {
		c.fatal(pgerr.Fatal(pgerr.CannotConnectNow, "the database system is shutting down"))
		return start, false
	}
	if !c.srv.reserveSlot() {
		c.srv.refused.Add(1)
		c.fatal(pgerr.Fatal(pgerr.TooManyConnections, "sorry, too many clients already"))
		return start, false
	}
	c.hasSlot = true
	if c.srv.cfg.Auth == AuthSCRAM {
		if err := c.authSCRAM(start.User); err != nil {
			c.fatal(pgerr.As(err))
			return start, false
		}
	}
	return start, true
}

// openSession asks the handler for a session and completes the startup
// phase: AuthenticationOk, ParameterStatus, BackendKeyData, ReadyForQuery.
func (c *conn) openSession(start wire.Startup) bool {
	var relay wire.AuthRelay
	if c.srv.cfg.Auth == AuthPassthrough {
		relay = authRelay{c}
	}
	_ = c.nc.SetDeadline(time.Now().Add(c.srv.cfg.AuthTimeout))
	sess, err := c.srv.cfg.Handler.Connect(c.ctx, start, relay, c.w)
	_ = c.nc.SetDeadline(time.Time{})
	if err != nil {
		e := pgerr.As(err)
		e.Severity = pgerr.SeverityFatal
		c.log.WithError(err).Info("session refused")
		c.fatal(e)
		return false
	}
	c.sessMu.Lock()
	c.sess = sess
	c.sessMu.Unlock()
	c.srv.active.Add(1)
	_ = c.w.Send(&pgproto3.AuthenticationOk{})
	for k, v := range sess.ParameterStatus() {
		_ = c.w.Send(&pgproto3.ParameterStatus{Name: k, Value: v})
	}
	_ = c.w.Send(&pgproto3.BackendKeyData{ProcessID: c.pid, SecretKey: c.secret})
	_ = c.w.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := c.w.Flush(); err != nil {
		c.closeWhy = "client write failed"
		c.srv.active.Add(-1)
		sess.Close()
		c.sessMu.Lock()
		c.sess = nil
		c.sessMu.Unlock()
		return false
	}
	return true
}

// releaseSlot gives back the connection's MaxConnections place, once.
func (c *conn) releaseSlot() {
	if c.hasSlot {
		c.hasSlot = false
		c.srv.slots.Add(-1)
	}
}

// serve is the message loop of an established session.
func (c *conn) serve() {
	skipUntilSync := false
	// batchOpen is set while extended-protocol messages have been handled
	// since the last Sync: their implicit transaction is still open.
	batchOpen := false
	for {
		// Mark idle before checking for a drain: Shutdown checks idle after
		// it starts draining, so one of the two sees the other.
		c.idle.Store(true)
		if c.r.Buffered() == 0 && c.srv.isDraining() {
			c.closeWhy = "server shutting down"
			c.fatal(pgerr.Fatal(pgerr.AdminShutdown, "terminating connection due to administrator command"))
			return
		}
		if c.r.Buffered() == 0 && !batchOpen && !skipUntilSync && !c.runLoop() {
			return
		}
		typ, frame, err := c.r.Next()
		c.idle.Store(false)
		if err != nil {
			c.readFailed(err)
			return
		}
		msg, err := decodeFrontend(typ, frame)
		if err != nil {
			var pe *pgerr.Error
			if skipUntilSync && !(errors.As(err, &pe) && pe.IsFatal()) {
				// PostgreSQL does not read the body of a message it skips
				// (an unknown type is FATAL all the same).
				continue
			}
			if !c.failMalformed(typ, err, batchOpen) {
				return
			}
			skipUntilSync = typ != 'Q'
			continue
		}
		if typ == 'X' {
			c.closeWhy = "client terminated"
			return
		}
		if skipUntilSync {
			if typ != 'S' {
				continue
			}
			skipUntilSync = false
		}
		switch typ {
		case 'S', 'Q':
			batchOpen = false
		case 'P', 'B', 'D', 'E', 'C', 'H':
			batchOpen = true
		}
		// Only messages that wait for the backend can take long enough for
		// the client to vanish meanwhile.
		watch := waitsForBackend(typ)
		if watch {
			c.handling.Store(true)
			c.armWatchdog()
		}
		err = c.sess.Handle(c.ctx, msg, frame)
		if watch {
			// The watchdog is left armed: it lapses by itself when it
			// finds no message being handled, so a stream of short
			// statements does not pay a timer reset and stop each.
			c.handling.Store(false)
		}
		if err == nil {
			continue
		}
		if errors.Is(err, wire.ErrSessionOver) {
			c.closeWhy = "backend connection ended"
			return
		}
		var pe *pgerr.Error
		if !errors.As(err, &pe) || pe.IsFatal() {
			pe = pgerr.As(err)
			pe.Severity = pgerr.SeverityFatal
			c.closeWhy = pe.Message
			c.fatal(pe)
			return
		}
		_ = c.w.Send(errorResponse(pe))
		switch typ {
		case 'Q', 'S':
			_ = c.w.Send(&pgproto3.ReadyForQuery{TxStatus: c.sess.TxStatus()})
		case 'd', 'c', 'f':
			// Failed COPY sub-protocol: the session answers the rest.
		default:
			skipUntilSync = true
		}
		if err := c.w.Flush(); err != nil {
			c.closeWhy = "client write failed"
			return
		}
	}
}

// failMalformed answers a client message whose body could not be read, and
// reports whether the connection goes on. A Query or Parse that PostgreSQL
// cannot read either gets PostgreSQL's ERROR (08P01, its message) and the
// session goes on, as in PostgreSQL: ReadyForQuery follows a Query, a Parse
// makes the rest of its batch skipped until Sync. The session never sees the
// message, so this is exact only where PostgreSQL's error would have aborted
// nothing: outside a transaction block (or in one already failed), with no
// extended-protocol batch open and no COPY in progress. Otherwise, and for
// every other malformed message, it is FATAL: the backend connection ends
// with the connection, which rolls back what PostgreSQL would have aborted.
func (c *conn) failMalformed(typ byte, err error, batchOpen bool) bool {
	var pe *pgerr.Error
	answerable := errors.As(err, &pe) && !pe.IsFatal()
	if !answerable || batchOpen || c.sess.CopyInProgress() || c.sess.TxStatus() == 'T' {
		c.closeWhy = "protocol violation"
		c.fatal(pgerr.Fatal(pgerr.ProtocolViolation, "%s", err.Error()))
		return false
	}
	_ = c.w.Send(errorResponse(pe))
	if typ == 'Q' {
		_ = c.w.Send(&pgproto3.ReadyForQuery{TxStatus: c.sess.TxStatus()})
	}
	if err := c.w.Flush(); err != nil {
		c.closeWhy = "client write failed"
		return false
	}
	return true
}

func (c *conn) readFailed(err error) {
	var fe *wire.FrameError
	switch {
	case errors.As(err, &fe):
		c.closeWhy = "protocol violation"
		c.fatal(pgerr.Fatal(pgerr.ProtocolViolation, "%s", fe.Msg))
	case errors.Is(err, os.ErrDeadlineExceeded) && c.srv.isDraining():
		c.closeWhy = "server shutting down"
		c.fatal(pgerr.Fatal(pgerr.AdminShutdown, "terminating connection due to administrator command"))
	case errors.Is(err, io.EOF):
		c.closeWhy = "client disconnected"
	case errors.Is(err, io.ErrUnexpectedEOF):
		// PostgreSQL: "unexpected EOF on client connection with an open transaction"
		c.closeWhy = "client disconnected mid-message"
	default:
		c.closeWhy = "client read failed: " + err.Error()
	}
}

// fatal sends e as an ErrorResponse and flushes; the caller closes.
func (c *conn) fatal(e *pgerr.Error) {
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = c.w.Send(errorResponse(e))
	_ = c.w.Flush()
}

// cancel forwards a matched CancelRequest to the session.
func (c *conn) cancel() {
	c.sessMu.Lock()
	sess := c.sess
	c.sessMu.Unlock()
	if sess != nil {
		sess.Cancel()
	}
}

// wakeIfIdle interrupts a read of the client's next message so the loop can
// notice that the server is draining.
func (c *conn) wakeIfIdle() {
	if c.idle.Load() {
		_ = c.nc.SetReadDeadline(time.Now())
	}
}

// waitsForBackend reports whether a client message makes the session wait
// for the backend's answers: Query, Sync, Flush, FunctionCall, and the end
// of COPY data. Parse, Bind and the like are only queued.
func waitsForBackend(typ byte) bool {
	switch typ {
	case 'Q', 'S', 'H', 'F', 'c', 'f':
		return true
	}
	return false
}

// clientCheckInterval is how often a long-running message checks that its
// client is still connected.
const clientCheckInterval = time.Second

// checkClient runs on the watchdog timer while a message is being handled.
// A client that has gone away cannot be told anything: the connection's
// context is canceled so the session stops its backend work (PostgreSQL
// itself would only notice at its next write, or with
// client_connection_check_interval).
func (c *conn) checkClient() {
	// Disarmed before handling is looked at: a message that starts after
	// the look finds the watchdog disarmed and arms it again.
	c.watchArmed.Store(false)
	if !c.handling.Load() {
		return
	}
	if clientGone(c.raw) {
		c.log.Info("client disconnected during a statement; canceling it")
		c.stop()
		return
	}
	c.armWatchdog()
}

// armWatchdog makes checkClient run within clientCheckInterval, unless it
// is armed already (by this message or an earlier one: the first check of
// a message may then come sooner, which costs only a look at the socket).
func (c *conn) armWatchdog() {
	if !c.watchArmed.Swap(true) {
		c.watchdog.Reset(clientCheckInterval)
	}
}

// clientGone peeks at the socket without consuming anything: a zero-byte
// read means the peer closed its side.
func clientGone(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = rc.Read(func(fd uintptr) bool {
		if closed, ok := peerShutdown(fd); ok && closed {
			gone = true
			return true
		}
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = n == 0 && err == nil || err == syscall.ECONNRESET
		return true
	})
	return gone
}

// forceClose ends the connection whatever it is doing: the session's context
// is canceled (so backend work stops) and the socket closed.
func (c *conn) forceClose() {
	c.stop()
	_ = c.nc.Close()
}

// decodeFrontend decodes a client message of the established phase. Unknown
// types and malformed bodies are protocol violations; Query and Parse are
// read as PostgreSQL reads them (pqformat.go), failing with its ERROR.
func decodeFrontend(typ byte, frame []byte) (pgproto3.FrontendMessage, error) {
	var msg pgproto3.FrontendMessage
	switch typ {
	case 'Q':
		return decodeQuery(wire.Body(frame))
	case 'P':
		return decodeParse(wire.Body(frame))
	case 'B':
		msg = &pgproto3.Bind{}
	case 'D':
		msg = &pgproto3.Describe{}
	case 'E':
		msg = &pgproto3.Execute{}
	case 'C':
		msg = &pgproto3.Close{}
	case 'S':
		msg = &pgproto3.Sync{}
	case 'H':
		msg = &pgproto3.Flush{}
	case 'X':
		msg = &pgproto3.Terminate{}
	case 'd':
		msg = &pgproto3.CopyData{}
	case 'c':
		msg = &pgproto3.CopyDone{}
	case 'f':
		msg = &pgproto3.CopyFail{}
	case 'F':
		msg = &pgproto3.FunctionCall{}
	default:
		return nil, pgerr.Fatal(pgerr.ProtocolViolation, "invalid frontend message type %d", typ)
	}
	if err := msg.Decode(wire.Body(frame)); err != nil {
		return nil, fmt.Errorf("invalid message format for message type %q: %v", typ, err)
	}
	return msg, nil
}

// errorResponse flattens e for the wire.
func errorResponse(e *pgerr.Error) *pgproto3.ErrorResponse {
	sev := e.Severity
	if sev == "" {
		sev = pgerr.SeverityError
	}
	r := &pgproto3.ErrorResponse{
		Severity:            sev,
		SeverityUnlocalized: sev,
		Code:                string(e.Code),
		Message:             e.Message,
		Detail:              e.Detail,
		Hint:                e.Hint,
	}
	if r.Code == "" {
		r.Code = string(pgerr.InternalError)
	}
	return r
}

// authRelay gives a passthrough handler the client side of authentication.
type authRelay struct{ c *conn }

func (a authRelay) SendAuth(msg pgproto3.BackendMessage) error {
	if err := a.c.w.Send(msg); err != nil {
		return err
	}
	return a.c.w.Flush()
}

func (a authRelay) ReceiveAuth() ([]byte, error) {
	typ, frame, err := a.c.r.Next()
	if err != nil {
		return nil, err
	}
	if typ != 'p' {
		return nil, pgerr.Fatal(pgerr.ProtocolViolation, "expected password response, got message type %d", typ)
	}
	return frame, nil
}
