package frontend

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/frontend/wire"
)

// AuthMethod is how the frontend authenticates clients.
type AuthMethod string

// The authentication methods.
const (
	// AuthTrust accepts every client as the user it names.
	AuthTrust AuthMethod = "trust"
	// AuthSCRAM runs SCRAM-SHA-256 against the users file.
	AuthSCRAM AuthMethod = "scram-sha-256"
	// AuthPassthrough relays the backend's own authentication exchange.
	AuthPassthrough AuthMethod = "passthrough"
)

// Config configures a Server.
type Config struct {
	Handler Handler
	// TLS, when set, is offered to clients that send an SSLRequest.
	TLS *tls.Config
	// Auth is the authentication method; Users is consulted for AuthSCRAM.
	Auth  AuthMethod
	Users *Users
	// MaxConnections bounds concurrent client sessions; 0 means no bound.
	MaxConnections int
	// MaxMessageSize bounds one client message; 0 means wire's default.
	MaxMessageSize int
	// AuthTimeout bounds the startup phase (PostgreSQL's
	// authentication_timeout); 0 means one minute.
	AuthTimeout time.Duration
	Logger      *logrus.Entry
	// EventLoop, when set, drives sessions idle in a plain state (see
	// LoopSession): their plain reads bypass Go's netpoller.
	EventLoop *evloop.Loop
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("frontend: server closed")

// Server accepts PostgreSQL clients and runs their sessions.
type Server struct {
	cfg Config
	log *logrus.Entry

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[uint32]*conn // by issued process id
	draining  bool
	closed    chan struct{} // closed when draining starts
	wg        sync.WaitGroup

	active atomic.Int64 // sessions past startup
	// slots counts the connections holding one of MaxConnections' places:
	// taken at the StartupMessage, before authentication, and given back
	// when the connection ends.
	slots    atomic.Int64
	refused  atomic.Int64
	accepted atomic.Int64

	// mockSecret makes the SCRAM salts of unknown users (see
	// mockCredentials): random per process, as PostgreSQL's mock nonce.
	mockSecret [32]byte
}

// NewServer returns a Server; call Serve to accept connections.
func NewServer(cfg Config) *Server {
	if cfg.AuthTimeout == 0 {
		cfg.AuthTimeout = time.Minute
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = wire.DefaultMaxMessageSize
	}
	if cfg.Auth == "" {
		cfg.Auth = AuthTrust
	}
	log := cfg.Logger
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	s := &Server{
		cfg:       cfg,
		log:       log,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[uint32]*conn),
		closed:    make(chan struct{}),
	}
	_, _ = rand.Read(s.mockSecret[:])
	return s
}

// Stats are the server's connection counts.
type Stats struct {
	Active, Accepted, Refused int64
}

// Stats returns the current connection counts.
func (s *Server) Stats() Stats {
	return Stats{Active: s.active.Load(), Accepted: s.accepted.Load(), Refused: s.refused.Load()}
}

// Serve accepts connections on l until Shutdown or Close, and returns
// ErrServerClosed then.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return ErrServerClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscallEMFILE) {
				// Out of file descriptors or a transient error: back off as
				// net/http does instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.WithError(err).Warn("accept failed; retrying")
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		// Add under the lock that startDrain takes, so that no Add can
		// race with Shutdown's Wait: a connection accepted as the drain
		// starts is either waited for or closed here.
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(nc)
		}()
	}
}

// register issues a process id and secret for c. It fails when the server
// is draining.
func (s *Server) register(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		pid := binary.BigEndian.Uint32(b[:4]) & 0x7fffffff // positive, as a pid looks
		if pid == 0 || s.conns[pid] != nil {
			continue
		}
		c.pid = pid
		c.secret = append([]byte(nil), b[4:]...)
		s.conns[pid] = c
		return true
	}
}

// reserveSlot takes one of MaxConnections' places, or reports that none is
// free. The check and the increment are one compare-and-swap: checked
// first and counted later, a burst of clients all pass the check.
func (s *Server) reserveSlot() bool {
	limit := int64(s.cfg.MaxConnections)
	for {
		n := s.slots.Load()
		if limit > 0 && n >= limit {
			return false
		}
		if s.slots.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	if s.conns[c.pid] == c {
		delete(s.conns, c.pid)
	}
	s.mu.Unlock()
}

// cancel routes a CancelRequest to the session it names. A request whose key
// does not match does nothing, as in PostgreSQL.
func (s *Server) cancel(pid uint32, secret []byte) {
	s.mu.Lock()
	c := s.conns[pid]
	s.mu.Unlock()
	if c == nil || subtle.ConstantTimeCompare(c.secret, secret) != 1 {
		s.log.WithField("pid", pid).Debug("cancel request with unknown key ignored")
		return
	}
	c.cancel()
}

// Shutdown stops accepting connections, ends idle sessions with 57P01 at
// once and busy ones when their current message is done, and waits for all
// sessions to end. When ctx ends first, it closes the remaining connections
// (canceling their backend work), waits for them, and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.startDrain()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.closeAll()
		<-done
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() {
	s.startDrain()
	s.closeAll()
	s.wg.Wait()
}

func (s *Server) startDrain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	s.draining = true
	close(s.closed)
	for l := range s.listeners {
		l.Close()
	}
	for _, c := range s.conns {
		c.wakeIfIdle()
	}
}

func (s *Server) closeAll() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.forceClose()
	}
}

func (s *Server) isDraining() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}
