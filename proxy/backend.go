package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
)

const (
	backendReadBuffer  = 32 << 10
	backendWriteBuffer = 16 << 10
	// backendMaxMessage bounds what the proxy accepts from its backend: a
	// DataRow can be as large as PostgreSQL's 1 GB field limit allows.
	backendMaxMessage = 1<<30 + 1<<20
)

// backend is one session's connection to PostgreSQL, after startup, owned
// by that session.
type backend struct {
	nc     net.Conn
	r      *wire.Reader
	w      *wire.Writer
	pid    uint32
	secret []byte
	params map[string]string
	cfg    *pgconn.Config // for cancel requests
	// async takes the asynchronous messages (NotificationResponse,
	// ParameterStatus) that next reads; nil: they are dropped.
	async func(frame []byte) error
	// unsynced: the backend answered an extended-protocol message (the
	// client's or the proxy's own) since its last ReadyForQuery, so it is
	// in the implicit transaction of a batch not yet ended by Sync, which
	// may have taken its snapshot already (a Parse of a SELECT does).
	unsynced bool
	// bound: of those messages, a Bind was answered: the batch has a
	// portal, which a Sync would end, and may have run an Execute, after
	// which PostgreSQL refuses DISCARD ALL or VACUUM in the batch (25001).
	bound bool
	// failed: an ErrorResponse came since the last ReadyForQuery (the
	// backend skips to a Sync, or its answers go on to a ReadyForQuery);
	// status is that of the last ReadyForQuery (0 before the first one
	// next reads).
	failed bool
	status byte
	// clientBatch: the message being handled is part of the client's
	// extended-protocol batch, which the client's own Sync ends (set by
	// Session.handle). A proxy's query that fails then leaves the backend
	// skipping to that Sync, as the batch's error, rather than ending the
	// batch with a Sync of its own.
	clientBatch bool
	// valueLeft: a failed internalValues left its statement prepared (the
	// backend skipped its Close): the next call closes it first.
	valueLeft bool
	// escapingStrings: the session has standard_conforming_strings off
	// (strings_scs.go).
	escapingStrings bool
	// foreignText: the session's client_encoding is neither UTF8 nor
	// SQL_ASCII (strings_scs.go).
	foreignText bool
	// guards are the read guards prepared on this connection, one per
	// shape (seen_read.go, guardSlot); guardUsed is the one sent last.
	guards    [guardSlots]preparedGuard
	guardUsed int
	// peek is what the read guards learned of the database's writes
	// (seen_read.go, readPeek).
	peek readPeek
	// viewsRestricted: the session refused a view of mzproxy's
	// (restrict_nonsystem_relation_kind, see restrictedView), so the
	// proxy's statements in front of its reads use the functions instead.
	viewsRestricted bool
	// reads are the simple Queries' reads prepared on this connection
	// (read_statements.go).
	reads readStatements
	// pendingRead is the read guard queued in front of the client's Bind
	// whose answers have not been read (bound_read.go).
	pendingRead *pendingReadGuard
	// readGuardScratch is the storage pendingRead points to when set.
	readGuardScratch pendingReadGuard
	// unread: r reads what the event loop gave back of an answer first
	// (Session.Unread).
	unread unreadReader
}

// next reads the backend's next message. Every read of a session's
// backend connection goes through here, so that asynchronous messages,
// which may come between any two others, are handled one way on every
// path: handed to async as they arrive, never returned. An error of async
// is a clientError.
func (b *backend) next() (typ byte, frame []byte, err error) {
	for {
		typ, frame, err = b.r.Next()
		if err != nil || typ != 'A' && typ != 'S' {
			b.followBatch(typ)
			switch typ {
			case 'E':
				b.failed = true
			case 'Z':
				b.failed, b.status = false, frame[5]
			}
			return typ, frame, err
		}
		if typ == 'S' {
			b.noteParameter(frame)
		}
		if b.async == nil {
			continue
		}
		if err := b.async(frame); err != nil {
			return 0, nil, clientError{err}
		}
	}
}

// followBatch follows, from the backend's answers, whether it is in an
// unsynced extended-protocol batch: ParseComplete, BindComplete,
// CloseComplete, ParameterDescription, NoData and PortalSuspended answer
// extended-protocol messages only, and ReadyForQuery ends every batch.
func (b *backend) followBatch(typ byte) {
	switch typ {
	case 'Z':
		b.unsynced, b.bound = false, false
	case '2':
		b.unsynced, b.bound = true, true
	case '1', '3', 't', 'n', 's':
		b.unsynced = true
	}
}

// clientError is a failed write to the client met while reading the
// backend.
type clientError struct{ err error }

func (e clientError) Error() string { return e.err.Error() }
func (e clientError) Unwrap() error { return e.err }

// connectionLost reports a failed read of the backend on a path of the
// proxy's own.
func connectionLost(err error) error {
	var ce clientError
	if errors.As(err, &ce) {
		return ce.err
	}
	return pgerr.Fatal(pgerr.ConnectionFailure, "backend connection lost: %v", err)
}

// connectBackend opens a backend connection for start with pgconn, which
// handles TLS and authentication to the backend, then takes the socket over.
func connectBackend(ctx context.Context, base *pgconn.Config, start wire.Startup, password string) (*backend, error) {
	cfg := base.Copy()
	cfg.User = start.User
	cfg.Database = start.Database
	if password != "" {
		cfg.Password = password
	}
	cfg.RuntimeParams = backendParams(base.RuntimeParams, start.Params)
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(err)
	}
	// A write of the startup that lasts over 15 ms (a loaded machine)
	// makes pgconn start its background reader, which may still be
	// blocked in a read of the socket when the connection is ready: it
	// would take the backend's answer to the proxy's first query, which
	// then waits for an answer already read (TestConnectBackendSlowStartupWrite).
	// SyncConn stops it (with a ping, only then), as Hijack's
	// documentation asks.
	if err := pc.SyncConn(ctx); err != nil {
		pc.Close(ctx)
		return nil, connectError(err)
	}
	hj, err := pc.Hijack()
	if err != nil {
		pc.Close(ctx)
		return nil, pgerr.Wrap(pgerr.ConnectionFailure, err)
	}
	return newBackend(hj.Conn, hj.PID, hj.SecretKey, hj.ParameterStatuses, cfg), nil
}

func newBackend(nc net.Conn, pid uint32, secret []byte, params map[string]string, cfg *pgconn.Config) *backend {
	return &backend{
		nc:              nc,
		r:               wire.NewReader(nc, backendReadBuffer, backendMaxMessage),
		w:               wire.NewWriter(nc, backendWriteBuffer),
		pid:             pid,
		secret:          secret,
		params:          params,
		cfg:             cfg,
		escapingStrings: params[scsParameter] == "off",
		foreignText:     foreignEncoding(params[encodingParameter]),
	}
}

// backendParams are the startup parameters passed on: the client's, less
// those the proxy sets itself, over the configured defaults.
func backendParams(defaults, client map[string]string) map[string]string {
	out := make(map[string]string, len(defaults)+len(client))
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range client {
		switch k {
		case "user", "database":
			continue
		}
		out[k] = v
	}
	return out
}

// connectError turns a failed backend connection into what the client
// should see: the backend's own error when it sent one.
func connectError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fromPgError(pe)
	}
	return pgerr.Fatal(pgerr.ConnectionFailure, "mzproxy could not connect to its PostgreSQL backend: %v", err)
}

func fromPgError(pe *pgconn.PgError) *pgerr.Error {
	return &pgerr.Error{
		Severity: pe.Severity,
		Code:     pgerr.Code(pe.Code),
		Message:  pe.Message,
		Detail:   pe.Detail,
		Hint:     pe.Hint,
	}
}

// connectPassthrough opens a backend connection and relays the backend's
// authentication exchange to the client, so the backend authenticates the
// client itself.
func connectPassthrough(ctx context.Context, base *pgconn.Config, start wire.Startup, relay wire.AuthRelay) (*backend, error) {
	cfg := base.Copy()
	cfg.User = start.User
	cfg.Database = start.Database
	cfg.RuntimeParams = backendParams(base.RuntimeParams, start.Params)
	nc, err := dialBackend(ctx, cfg)
	if err != nil {
		return nil, pgerr.Fatal(pgerr.ConnectionFailure, "mzproxy could not connect to its PostgreSQL backend: %v", err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	b, err := passthroughStartup(nc, cfg, relay)
	if err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return b, nil
}

// dialBackend connects to the backend as libpq does for cfg's sslmode,
// from what pgconn parsed: the primary host with its TLS configuration
// (nil: plaintext), then each of cfg.Fallbacks, which is how pgconn spells
// sslmode prefer (TLS, then plaintext), allow (plaintext, then TLS) and
// several hosts. A target that cannot be reached, refuses the SSLRequest
// or fails the TLS handshake is followed by the next one; disable, require
// and the verify modes have one target per host, so a server without TLS
// fails require. The connection is ready for the StartupMessage.
func dialBackend(ctx context.Context, cfg *pgconn.Config) (net.Conn, error) {
	targets := append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...)
	var errs []error
	for _, target := range targets {
		nc, err := dialTarget(ctx, cfg, target)
		if err == nil {
			return nc, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// dialTarget connects to one target and starts TLS when it has a TLS
// configuration.
func dialTarget(ctx context.Context, cfg *pgconn.Config, target *pgconn.FallbackConfig) (net.Conn, error) {
	network, address := pgconn.NetworkAddress(target.Host, target.Port)
	nc, err := cfg.DialFunc(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", address, err)
	}
	if target.TLSConfig == nil || network == "unix" {
		return nc, nil
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	tc, err := startBackendTLS(ctx, nc, target.TLSConfig, cfg.SSLNegotiation == "direct")
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", address, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return tc, nil
}

// startBackendTLS asks the server for TLS with an SSLRequest (or, with
// sslnegotiation=direct, starts the handshake at once) and completes the
// handshake.
func startBackendTLS(ctx context.Context, nc net.Conn, tlsConfig *tls.Config, direct bool) (net.Conn, error) {
	if !direct {
		req, _ := (&pgproto3.SSLRequest{}).Encode(nil)
		if _, err := nc.Write(req); err != nil {
			return nil, err
		}
		var answer [1]byte
		if _, err := io.ReadFull(nc, answer[:]); err != nil {
			return nil, err
		}
		if answer[0] != 'S' {
			// libpq's words for sslmode=require against such a server.
			return nil, errors.New("server does not support SSL, but SSL was required")
		}
	}
	tc := tls.Client(nc, tlsConfig)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

func passthroughStartup(nc net.Conn, cfg *pgconn.Config, relay wire.AuthRelay) (*backend, error) {
	params := map[string]string{"user": cfg.User, "database": cfg.Database}
	for k, v := range cfg.RuntimeParams {
		params[k] = v
	}
	b := newBackend(nc, 0, nil, map[string]string{}, cfg)
	if err := b.w.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: params}); err != nil {
		return nil, err
	}
	if err := b.w.Flush(); err != nil {
		return nil, err
	}
	lost := func(err error) error {
		return pgerr.Fatal(pgerr.ConnectionFailure, "backend connection lost during startup: %v", err)
	}
	for {
		typ, frame, err := b.r.Next()
		if err != nil {
			return nil, lost(err)
		}
		body := wire.Body(frame)
		switch typ {
		case 'R':
			if err := relayAuthStep(b, body, relay); err != nil {
				return nil, err
			}
		case 'S':
			b.noteParameter(frame)
		case 'K':
			var kd pgproto3.BackendKeyData
			if err := kd.Decode(body); err != nil {
				return nil, lost(err)
			}
			b.pid, b.secret = kd.ProcessID, kd.SecretKey
		case 'E':
			var er pgproto3.ErrorResponse
			if err := er.Decode(body); err != nil {
				return nil, lost(err)
			}
			return nil, backendError(&er)
		case 'N', 'v':
			// Notices and protocol negotiation during startup: nothing
			// for the client to act on.
		case 'Z':
			return b, nil
		default:
			return nil, lost(fmt.Errorf("unexpected message type %q", typ))
		}
	}
}

// relayAuthStep passes one authentication request to the client and, when
// it expects an answer, the client's answer back to the backend.
func relayAuthStep(b *backend, body []byte, relay wire.AuthRelay) error {
	if len(body) < 4 {
		return pgerr.Fatal(pgerr.ProtocolViolation, "malformed authentication request from backend")
	}
	var msg pgproto3.BackendMessage
	switch kind := uint32(body[0])<<24 | uint32(body[1])<<16 | uint32(body[2])<<8 | uint32(body[3]); kind {
	case pgproto3.AuthTypeOk:
		return nil
	case pgproto3.AuthTypeCleartextPassword:
		msg = &pgproto3.AuthenticationCleartextPassword{}
	case pgproto3.AuthTypeMD5Password:
		m := &pgproto3.AuthenticationMD5Password{}
		if err := m.Decode(body); err != nil {
			return pgerr.Fatal(pgerr.ProtocolViolation, "malformed authentication request from backend")
		}
		msg = m
	case pgproto3.AuthTypeSASL:
		m := &pgproto3.AuthenticationSASL{}
		if err := m.Decode(body); err != nil {
			return pgerr.Fatal(pgerr.ProtocolViolation, "malformed authentication request from backend")
		}
		// Channel binding would bind to the proxy's TLS session, not the
		// backend's: offer only the mechanisms without it.
		var mechs []string
		for _, mech := range m.AuthMechanisms {
			if !strings.HasSuffix(mech, "-PLUS") {
				mechs = append(mechs, mech)
			}
		}
		m.AuthMechanisms = mechs
		msg = m
	case pgproto3.AuthTypeSASLContinue:
		m := &pgproto3.AuthenticationSASLContinue{}
		if err := m.Decode(body); err != nil {
			return pgerr.Fatal(pgerr.ProtocolViolation, "malformed authentication request from backend")
		}
		msg = m
	case pgproto3.AuthTypeSASLFinal:
		m := &pgproto3.AuthenticationSASLFinal{}
		if err := m.Decode(body); err != nil {
			return pgerr.Fatal(pgerr.ProtocolViolation, "malformed authentication request from backend")
		}
		// No answer is expected to the final message.
		return relay.SendAuth(m)
	default:
		return pgerr.Fatal(pgerr.FeatureNotSupported, "authentication method %d requested by the backend is not supported in passthrough mode", kind)
	}
	if err := relay.SendAuth(msg); err != nil {
		return err
	}
	answer, err := relay.ReceiveAuth()
	if err != nil {
		return err
	}
	if err := b.w.WriteFrame(answer); err != nil {
		return err
	}
	return b.w.Flush()
}

func backendError(er *pgproto3.ErrorResponse) *pgerr.Error {
	return &pgerr.Error{
		Severity: er.Severity,
		Code:     pgerr.Code(er.Code),
		Message:  er.Message,
		Detail:   er.Detail,
		Hint:     er.Hint,
	}
}

// cancel asks the backend to cancel whatever this connection runs, over a
// new connection, as a PostgreSQL client does.
func (b *backend) cancel(ctx context.Context) error {
	if b.pid == 0 {
		return nil
	}
	ctx, done := context.WithTimeout(ctx, 5*time.Second)
	defer done()
	nc, err := dialBackend(ctx, b.cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	req, err := (&pgproto3.CancelRequest{ProcessID: b.pid, SecretKey: b.secret}).Encode(nil)
	if err != nil {
		return err
	}
	if _, err := nc.Write(req); err != nil {
		return err
	}
	// The server closes the connection when it has processed the request.
	var buf [1]byte
	_, _ = nc.Read(buf[:])
	return nil
}

// close sends Terminate and closes the socket.
func (b *backend) close() {
	_ = b.nc.SetWriteDeadline(time.Now().Add(time.Second))
	_ = b.w.Send(&pgproto3.Terminate{})
	_ = b.w.Flush()
	_ = b.nc.Close()
}
