package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/metric"

	"github.com/mzproxy/mzproxy/frontend"
	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/metrics"
)

// readyTimeout bounds /readyz's backend check, connecting included.
const readyTimeout = 2 * time.Second

// catalogLoadTimeout bounds one attempt at start to register in the
// backend's database and load its catalog (which may install mzproxy's
// backend schema).
const catalogLoadTimeout = time.Minute

// opsServer is the HTTP server for operators: /metrics (Prometheus),
// /livez (the process is up) and /readyz (it serves clients, reaches its
// backend and has loaded the catalog of the backend's database; 503 while
// starting and while draining).
type opsServer struct {
	addr    string // host:port it listens on; "" when disabled
	http    *http.Server
	done    chan struct{} // closed when Serve has returned
	metrics *metrics.Provider
	log     *logrus.Entry

	srv atomic.Pointer[frontend.Server] // set once clients are served
	px  atomic.Pointer[proxy.Proxy]
	// database is the backend URL's, where the proxy registers at start.
	database string
	// awaited is closed when the start's wait for the backend has ended
	// (awaitBackend: ready, fenced or login refused).
	awaited   chan struct{}
	probe     atomic.Pointer[backendProbe]
	closeOnce sync.Once
}

// startOps listens on addr and serves the endpoints. An empty addr
// disables the server; the returned opsServer then does nothing. When addr
// is the default (not configured) and in use, as by another mzproxy on the
// same machine, mzproxy runs without the server and says so: several
// proxies on one host (and every test) need not each pick a port.
func startOps(addr string, isDefault bool, log *logrus.Entry) (*opsServer, error) {
	o := &opsServer{log: log.WithField("component", "ops")}
	if addr == "" {
		return o, nil
	}
	m, err := metrics.New()
	if err != nil {
		return nil, err
	}
	o.metrics = m
	l, err := net.Listen("tcp", addr)
	if err != nil && isDefault && errors.Is(err, syscall.EADDRINUSE) {
		o.log.WithField("metrics_listen", addr).Warn("the default metrics-listen address is in use: running without /metrics, /livez and /readyz (set --metrics-listen)")
		_ = m.Shutdown(context.Background())
		return &opsServer{log: o.log}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metrics-listen: %v", err)
	}
	o.addr = l.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", o.readyz)
	o.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	o.done = make(chan struct{})
	go func() {
		defer close(o.done)
		if err := o.http.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.log.WithError(err).Error("metrics and health server stopped")
		}
	}()
	return o, nil
}

// meter is the meter for instruments recorded where they happen; nil when
// the server is disabled.
func (o *opsServer) meter() metric.Meter {
	if o.metrics == nil {
		return nil
	}
	return o.metrics.Meter()
}

// serving registers the metrics of srv and px and makes /readyz answer
// for them. Call it just before srv serves.
func (o *opsServer) serving(srv *frontend.Server, px *proxy.Proxy, backend *pgconn.Config) error {
	if o.http == nil {
		return nil
	}
	if err := registerInstruments(o.metrics, srv, px); err != nil {
		return err
	}
	o.probe.Store(&backendProbe{cfg: backend})
	o.database = backend.Database
	o.px.Store(px)
	o.awaited = make(chan struct{})
	o.srv.Store(srv)
	return nil
}

// backendAwaited tells /readyz that the start's wait for the backend has
// ended: from now on it checks the backend and catalog itself.
func (o *opsServer) backendAwaited() {
	if o.awaited != nil {
		close(o.awaited)
	}
}

func (o *opsServer) readyz(w http.ResponseWriter, r *http.Request) {
	srv := o.srv.Load()
	switch {
	case srv == nil:
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	case srv.Draining():
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	refused, err := o.probe.Load().check(ctx)
	if err != nil {
		o.log.WithError(err).Debug("readiness: backend unreachable")
		http.Error(w, "backend unreachable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !refused {
		// (With the proxy's own login refused, as with passthrough and no
		// password in --backend, it cannot read a catalog before a client
		// logs in; the backend being up is all readiness can tell.)
		select {
		case <-o.awaited:
		default:
			// Not registered, or the catalog not loaded, yet.
			http.Error(w, "waiting for the backend", http.StatusServiceUnavailable)
			return
		}
		if err := o.px.Load().LoadCatalog(ctx, false); err != nil {
			o.log.WithError(err).Debug("readiness: catalog not loaded")
			http.Error(w, "catalog not loaded: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		// Registered: a new generation has fenced the old one.
		if err := o.px.Load().LeaseErr(o.database); err != nil {
			http.Error(w, "no lease: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// close stops the server (after the proxy has drained: /readyz answers 503
// until then) and the backend probe's connection.
func (o *opsServer) close() {
	if o.http == nil {
		return
	}
	o.closeOnce.Do(o.doClose)
}

func (o *opsServer) doClose() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := o.http.Shutdown(ctx); err != nil {
		o.http.Close()
	}
	<-o.done
	if p := o.probe.Load(); p != nil {
		p.close()
	}
	_ = o.metrics.Shutdown(ctx)
}

// backendProbe checks that the backend answers a query, over one
// connection kept between checks (made again when it breaks).
type backendProbe struct {
	cfg *pgconn.Config

	mu   sync.Mutex // serializes checks; guards conn
	conn *pgconn.PgConn
}

// check reports whether the backend answers; refused says it answered by
// refusing the proxy's own login.
func (b *backendProbe) check(ctx context.Context) (refused bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if b.conn == nil {
			cfg := b.cfg.Copy()
			cfg.ConnectTimeout = readyTimeout
			if cfg.RuntimeParams == nil {
				cfg.RuntimeParams = map[string]string{}
			}
			cfg.RuntimeParams["application_name"] = "mzproxy readiness"
			conn, err := pgconn.ConnectConfig(ctx, cfg)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "28") {
				// The server answered, refusing the proxy's own
				// credentials (as with passthrough authentication and
				// no password in --backend): it is up.
				return true, nil
			}
			if err != nil {
				return false, err
			}
			b.conn = conn
		}
		_, err := b.conn.Exec(ctx, "SELECT 1").ReadAll()
		if err == nil {
			return false, nil
		}
		// A kept connection may have been closed by the server since the
		// last check (restart, idle timeout): try once on a new one.
		b.closeConn()
		if attempt > 0 || ctx.Err() != nil {
			return false, err
		}
	}
}

func (b *backendProbe) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeConn()
}

func (b *backendProbe) closeConn() {
	if b.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		b.conn.Close(ctx)
		b.conn = nil
	}
}
