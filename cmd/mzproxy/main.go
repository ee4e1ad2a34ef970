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
	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/embedded"
)

// config is every setting of mzproxy. Each flag can also be set with an
// environment variable MZPROXY_<NAME> (upper case, dashes as underscores);
// a flag on the command line wins.
type config struct {
	listen            string
	backend           string
	dataDir           string
	pgBinDir          string
	pgUser            string
	auth              string
	usersFile         string
	allowTrustRemote  bool
	tlsCert, tlsKey   string
	maxConnections    int
	maxMessageSize    int
	shutdownTimeout   time.Duration
	logLevel          string
	logFormat         string
	embeddedPGSetting stringList
	historyReads      bool
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func parseConfig(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("mzproxy", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:6875", "address for PostgreSQL clients (host:port)")
	fs.StringVar(&c.backend, "backend", "", "PostgreSQL backend URL (postgres://...); empty starts an embedded PostgreSQL")
	fs.StringVar(&c.dataDir, "data-dir", "./mzdata", "data directory of the embedded PostgreSQL")
	fs.StringVar(&c.pgBinDir, "pg-bindir", "", "directory of the PostgreSQL server binaries for the embedded backend (default: MZPROXY_PG_BINDIR, PATH, pg_config --bindir, newest /usr/lib/postgresql/*/bin)")
	fs.StringVar(&c.pgUser, "pg-user", "postgres", "unprivileged OS user that runs the embedded PostgreSQL when mzproxy runs as root")
	fs.StringVar(&c.auth, "auth", "", "client authentication: trust, scram-sha-256 or passthrough (default: trust on a loopback listener, else required)")
	fs.StringVar(&c.usersFile, "users-file", "", "users file for scram-sha-256 (lines: \"name\" \"password or SCRAM verifier\")")
	fs.BoolVar(&c.allowTrustRemote, "allow-trust-non-loopback", false, "allow trust authentication on a non-loopback listener")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "TLS certificate file (PEM); with --tls-key enables TLS for clients")
	fs.StringVar(&c.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	fs.IntVar(&c.maxConnections, "max-connections", 100, "maximum concurrent client sessions (0: no limit)")
	fs.IntVar(&c.maxMessageSize, "max-message-size", wire.DefaultMaxMessageSize, "maximum size of one client protocol message in bytes")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long busy sessions may finish before they are cut")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&c.historyReads, "history-reads", false, "read managed tables through their history at the oracle's timestamp, even for reads of the present (for conformance testing of the rewrite; slower)")
	fs.Var(&c.embeddedPGSetting, "pg-setting", "extra name=value setting for the embedded PostgreSQL (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "MZPROXY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && !set[f.Name] {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("environment variable %s: %v", name, err)
			}
		}
	})
	return c, envErr
}

func main() {
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mzproxy:", err)
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
	switch cfg.logFormat {
	case "text":
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		l.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("--log-format: want text or json, got %q", cfg.logFormat)
	}
	return logrus.NewEntry(l), nil
}

func run(cfg *config, log *logrus.Entry) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	listener, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	auth, err := authMethod(cfg, listener.Addr())
	if err != nil {
		listener.Close()
		return err
	}
	var users *frontend.Users
	if cfg.usersFile != "" {
		if users, err = frontend.LoadUsers(cfg.usersFile); err != nil {
			listener.Close()
			return err
		}
	}
	if auth == frontend.AuthSCRAM && users == nil {
		listener.Close()
		return errors.New("--auth scram-sha-256 needs --users-file")
	}
	var tlsConfig *tls.Config
	if cfg.tlsCert != "" || cfg.tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey)
		if err != nil {
			listener.Close()
			return fmt.Errorf("--tls-cert/--tls-key: %v", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	backendCfg, shutdownBackend, err := startBackend(ctx, cfg, log)
	if err != nil {
		listener.Close()
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
		Logger:       log,
		HistoryReads: cfg.historyReads,
	})
	srv := frontend.NewServer(frontend.Config{
		Handler:        handler{px},
		TLS:            tlsConfig,
		Auth:           auth,
		Users:          users,
		MaxConnections: cfg.maxConnections,
		MaxMessageSize: cfg.maxMessageSize,
		Logger:         log,
	})
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(listener) }()
	log.WithFields(logrus.Fields{"listen": listener.Addr().String(), "auth": string(auth)}).Info("mzproxy ready")

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

func (h handler) Connect(ctx context.Context, start wire.Startup, relay wire.AuthRelay, w *wire.Writer) (frontend.Session, error) {
	s, err := h.p.Connect(ctx, start, relay, w)
	if err != nil {
		return nil, err
	}
	return s, nil
}
