// Command mzproxy is a PostgreSQL-wire frontend for a PostgreSQL backend.
//
// With no backend configured it starts a private PostgreSQL from the
// machine's own server binaries in its data directory and stops it on exit.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend"
	"github.com/mzproxy/mzproxy/frontend/evloop"
	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/embedded"
	"github.com/mzproxy/mzproxy/proxy/observe"
)

func main() {
	cfg, err := loadConfig(os.Args[1:], os.LookupEnv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		// One line per bad setting (errors.Join).
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "mzproxy:", line)
		}
		os.Exit(2)
	}
	log, err := newLogger(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mzproxy:", err)
		os.Exit(2)
	}
	if path := os.Getenv("MZPROXY_CPU_PROFILE"); path != "" {
		// For finding where the proxy's time goes under a benchmark.
		stopProfile, err := startCPUProfile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mzproxy:", err)
			os.Exit(2)
		}
		defer stopProfile()
	}
	if err := run(cfg, log); err != nil {
		log.WithError(err).Error("mzproxy stopped")
		os.Exit(1)
	}
}

func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func newLogger(cfg *config) (*logrus.Entry, error) {
	l := logrus.New()
	l.SetOutput(os.Stderr)
	level, err := logrus.ParseLevel(cfg.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	l.SetLevel(level)
	if err := setFormat(l, cfg.logFormat); err != nil {
		return nil, err
	}
	return logrus.NewEntry(l), nil
}

func setFormat(l *logrus.Logger, format string) error {
	switch format {
	case "text":
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		l.SetFormatter(&logrus.JSONFormatter{})
	default:
		return fmt.Errorf("--log-format: want text or json, got %q", format)
	}
	return nil
}

func run(cfg *config, log *logrus.Entry) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A SIGHUP from now on is a reload (handled once the reloader runs,
	// below), never the default action, which would kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	listener, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	defer listener.Close() // for the early returns; Serve closes it too
	auth, err := authMethod(cfg, listener.Addr())
	if err != nil {
		return err
	}
	var users *frontend.Users
	if cfg.usersFile != "" {
		if users, err = frontend.LoadUsers(cfg.usersFile); err != nil {
			return fmt.Errorf("users-file: %v", err)
		}
	}
	if auth == frontend.AuthSCRAM && users == nil {
		return errors.New("--auth scram-sha-256 needs --users-file")
	}
	var (
		tlsConfig *tls.Config
		cert      *certificate // nil without TLS
	)
	if cfg.tlsCert != "" || cfg.tlsKey != "" {
		cert = &certificate{}
		if err := cert.load(cfg.tlsCert, cfg.tlsKey); err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %v", err)
		}
		tlsConfig = cert.tlsConfig()
	}

	// The operations server (metrics, health) answers from the start, so
	// /livez works while an embedded PostgreSQL is initialized.
	ops, err := startOps(cfg.metricsListen, cfg.source["metrics-listen"] == "the default", log)
	if err != nil {
		return err
	}
	defer ops.close()
	tracer, stopTracing, err := startTracing(cfg, os.Stdout)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.WithError(err).Warn("flushing traces")
		}
	}()
	obs, err := observe.New(observe.Config{Meter: ops.meter(), Tracer: tracer, SlowThreshold: cfg.slowThreshold})
	if err != nil {
		return err
	}

	reloaded := make(chan struct{})
	r := &reloader{args: os.Args[1:], lookupEnv: os.LookupEnv, running: cfg, log: log, users: users, cert: cert, observer: obs,
		statementTimeout: cfg.statementTimeout, occMaxRetries: cfg.occMaxRetries}
	go func() {
		defer close(reloaded)
		for range hup {
			r.reload()
		}
	}()
	defer func() {
		signal.Stop(hup)
		close(hup)
		<-reloaded
	}()

	backendCfg, shutdownBackend, err := startBackend(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer shutdownBackend()

	px := proxy.New(proxy.Config{
		Backend:     backendCfg,
		Passthrough: auth == frontend.AuthPassthrough,
		Password: func(user string) string {
			if u, ok := users.Lookup(user); ok {
				return u.Password
			}
			return ""
		},
		Logger:           log,
		Observer:         obs,
		HistoryReads:     cfg.historyReads,
		IdleRelease:      idleRelease(cfg.idleRelease),
		NoTemplate:       cfg.noTemplate,
		EventLoop:        cfg.eventLoop,
		StatementTimeout: cfg.statementTimeout,
		OCCMaxAttempts:   cfg.occMaxRetries + 1,
		OCCMaxConcurrent: cfg.occMaxConcurrent,
		// Test-only failpoint (see proxy.Config.OCCPauseFile); not a flag.
		OCCPauseFile: os.Getenv("MZPROXY_TEST_OCC_PAUSE_FILE"),
		Lease:        cfg.leaseConfig(),
	})
	// A SIGHUP during the backend's start may have changed the default.
	r.attach(px)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := px.Close(cctx); err != nil {
			log.WithError(err).Warn("retiring the proxy's incarnations")
		}
	}()
	var loop *evloop.Loop
	if cfg.eventLoop {
		if loop, err = evloop.New(evloopMaxBatch); err != nil {
			return fmt.Errorf("event loop: %w", err)
		}
		// After the server's drain (deferred later, so run first): the
		// sessions are gone from the loop by then.
		defer loop.Close()
	}
	srv := frontend.NewServer(frontend.Config{
		EventLoop:      loop,
		Handler:        handler{px},
		TLS:            tlsConfig,
		Auth:           auth,
		Users:          users,
		MaxConnections: cfg.maxConnections,
		MaxMessageSize: cfg.maxMessageSize,
		Logger:         log,
	})
	if err := ops.serving(srv, px, backendCfg); err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(listener) }()
	fields := logrus.Fields{"listen": listener.Addr().String(), "auth": string(auth)}
	if ops.addr != "" {
		fields["metrics"] = ops.addr
	}
	if cfg.traceExporter != traceNone {
		fields["traces"] = cfg.traceExporter
	}
	// Listening is not ready: "mzproxy ready" waits for the backend.
	log.WithFields(fields).Info("mzproxy listening")
	startCtx, cancelStart := context.WithCancel(ctx)
	started := make(chan struct{})
	go func() {
		defer close(started)
		awaitBackend(startCtx, px, backendCfg.Database, log, fields)
		ops.backendAwaited()
	}()
	// Before the proxy's incarnations are retired (deferred above).
	defer func() {
		cancelStart()
		<-started
	}()

	select {
	case err := <-serveErr:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	stop() // a second signal kills at once
	log.WithField("timeout", cfg.shutdownTimeout).Info("shutting down: draining sessions")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.WithError(err).Warn("drain deadline passed; remaining sessions were cut")
	}
	// /readyz said 503 while draining; its backend connection must go
	// before an embedded backend stops.
	ops.close()
	return nil
}

// authMethod decides client authentication. Trust is the default only on a
// loopback listener; elsewhere it must be asked for twice.
func authMethod(cfg *config, addr net.Addr) (frontend.AuthMethod, error) {
	loopback := false
	if ta, ok := addr.(*net.TCPAddr); ok {
		loopback = ta.IP.IsLoopback()
	}
	auth := frontend.AuthMethod(cfg.auth)
	switch auth {
	case "":
		if !loopback {
			return "", fmt.Errorf("listening on non-loopback %s: choose --auth (scram-sha-256 or passthrough; trust also needs --allow-trust-non-loopback)", addr)
		}
		return frontend.AuthTrust, nil
	case frontend.AuthTrust:
		if !loopback && !cfg.allowTrustRemote {
			return "", fmt.Errorf("refusing trust authentication on non-loopback %s without --allow-trust-non-loopback", addr)
		}
		return auth, nil
	case frontend.AuthSCRAM, frontend.AuthPassthrough:
		return auth, nil
	default:
		return "", fmt.Errorf("--auth: want trust, scram-sha-256 or passthrough, got %q", cfg.auth)
	}
}

// startBackend returns the backend's connection config: the external
// backend's, or that of an embedded PostgreSQL started now.
func startBackend(ctx context.Context, cfg *config, log *logrus.Entry) (*pgconn.Config, func(), error) {
	if cfg.backend != "" {
		pc, err := pgconn.ParseConfig(cfg.backend)
		if err != nil {
			return nil, nil, fmt.Errorf("--backend: %v", err)
		}
		return pc, func() {}, nil
	}
	settings := map[string]string{}
	for _, s := range cfg.embeddedPGSetting {
		name, value, ok := strings.Cut(s, "=")
		if !ok {
			return nil, nil, fmt.Errorf("--pg-setting %q: want name=value", s)
		}
		settings[name] = value
	}
	srv, err := embedded.Start(ctx, embedded.Config{
		DataDir:   cfg.dataDir,
		BinDir:    cfg.pgBinDir,
		RunAsUser: cfg.pgUser,
		Settings:  settings,
		Logger:    log.WithField("component", "embedded-postgres"),
	})
	if err != nil {
		return nil, nil, err
	}
	log.WithFields(logrus.Fields{"version": srv.Version(), "socket_dir": srv.SocketDir()}).Info("embedded PostgreSQL started")
	pc, err := pgconn.ParseConfig(srv.ConnString(srv.SuperUser(), "postgres"))
	if err != nil {
		_ = srv.Stop(context.Background())
		return nil, nil, err
	}
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Stop(sctx); err != nil {
			log.WithError(err).Warn("stopping embedded PostgreSQL")
		} else {
			log.Info("embedded PostgreSQL stopped")
		}
	}
	return pc, shutdown, nil
}

// handler adapts the proxy to the frontend's Handler interface, so that
// neither package imports the other.
type handler struct{ p *proxy.Proxy }

// evloopMaxBatch bounds a client batch the event loop forwards itself;
// larger ones take the connection's own path.
const evloopMaxBatch = 64 << 10

func (h handler) Connect(ctx context.Context, start wire.Startup, relay wire.AuthRelay, w *wire.Writer) (frontend.Session, error) {
	s, err := h.p.Connect(ctx, start, relay, w)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// idleRelease is proxy.Config.IdleRelease for the idle-release setting,
// whose 0 means never.
func idleRelease(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
