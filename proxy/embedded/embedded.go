package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"
)

// Defaults for the zero values of Config.
const (
	DefaultPort           = 5432
	DefaultSuperUser      = "postgres"
	DefaultRunAsUser      = "postgres"
	DefaultMaxConnections = 200
)

// ErrDataDirInUse is wrapped by Start's error when another Server (in this
// process or another) holds the data directory.
var ErrDataDirInUse = errors.New("embedded: data directory is in use by another running mzproxy")

// Config says where and how to run the embedded PostgreSQL.
type Config struct {
	// DataDir holds the cluster (DataDir/pgdata, made by initdb on first
	// start), the socket directory, postgres.log and a lock file. Required.
	DataDir string
	// BinDir is the directory of postgres and initdb; "" means FindBinDir.
	BinDir string
	// RunAsUser is the OS user initdb and postgres run as when this process
	// is root; "" means "postgres". Ignored when not root.
	RunAsUser string
	// Port only names the Unix socket (.s.PGSQL.<Port>); nothing listens on
	// TCP. 0 means 5432.
	Port int
	// SuperUser is the database superuser initdb creates; "" means
	// "postgres". It only matters on first start: an existing cluster keeps
	// the superuser it was made with.
	SuperUser string
	// Settings are extra postgres -c settings, e.g. max_connections (default
	// 200) or fsync=off for throwaway clusters. listen_addresses,
	// unix_socket_directories, port and data_directory are the launcher's and
	// are refused here.
	Settings map[string]string
	// ChmodParents, when root, adds o+x to existing ancestors of DataDir
	// that RunAsUser could not otherwise search, instead of failing. For
	// tests; see the package documentation.
	ChmodParents bool
	// Logger gets the launcher's own messages; postgres's output goes to
	// DataDir/postgres.log. nil discards them.
	Logger *logrus.Entry
}

// reservedSettings are set by the launcher and may not come from Config.Settings.
var reservedSettings = map[string]bool{
	"listen_addresses":        true,
	"unix_socket_directories": true,
	"port":                    true,
	"data_directory":          true,
}

// maxLogSize is the size of postgres.log past which Start moves it to
// postgres.log.1 (replacing an older one) and begins a new one.
const maxLogSize = 64 << 20

// Server is a running embedded PostgreSQL. Its methods are safe for
// concurrent use.
type Server struct {
	binDir, dataDir, pgData, sockDir, logPath string
	tmpSockDir                                bool // sockDir is under /tmp, removed on exit
	port                                      int
	superUser                                 string
	version                                   string
	log                                       *logrus.Entry

	lock     *os.File
	lockOnce sync.Once

	proc     *os.Process
	ready    atomic.Bool // Start returned it
	stopping atomic.Bool
	done     chan struct{}
	exitErr  error // written before done is closed
}

// Start starts PostgreSQL in cfg.DataDir, making the cluster first if there
// is none, and returns once it accepts connections. ctx bounds the whole
// start; when it ends first, the postmaster is killed.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded: Config.DataDir is required")
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("embedded: port %d out of range", cfg.Port)
	}
	if cfg.SuperUser == "" {
		cfg.SuperUser = DefaultSuperUser
	}
	if cfg.RunAsUser == "" {
		cfg.RunAsUser = DefaultRunAsUser
	}
	log := cfg.Logger
	if log == nil {
		l := logrus.New()
		l.Out = io.Discard
		log = logrus.NewEntry(l)
	}
	settings, err := buildSettings(cfg.Settings)
	if err != nil {
		return nil, err
	}

	binDir, err := FindBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	version, err := serverVersion(ctx, binDir)
	if err != nil {
		return nil, err
	}
	id, err := lookupIdentity(cfg.RunAsUser)
	if err != nil {
		return nil, err
	}
	if err := prepareDataDir(dataDir, id, cfg.ChmodParents); err != nil {
		return nil, err
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}

	s := &Server{
		binDir:    binDir,
		dataDir:   dataDir,
		pgData:    filepath.Join(dataDir, "pgdata"),
		logPath:   filepath.Join(dataDir, "postgres.log"),
		port:      cfg.Port,
		superUser: cfg.SuperUser,
		version:   version,
		log:       log.WithField("pgdata", filepath.Join(dataDir, "pgdata")),
		lock:      lock,
		done:      make(chan struct{}),
	}
	started := false
	defer func() {
		if !started {
			if s.tmpSockDir {
				_ = os.Remove(s.sockDir)
			}
			s.releaseLock()
		}
	}()

	s.sockDir, s.tmpSockDir = socketDir(dataDir, cfg.Port)
	if err := makeSocketDir(s.sockDir, s.tmpSockDir, id); err != nil {
		return nil, err
	}
	if s.tmpSockDir {
		s.log.WithField("socket_dir", s.sockDir).Info("data dir path too long for a Unix socket; using a socket dir under /tmp")
	}
	if err := s.clearLeftovers(ctx); err != nil {
		return nil, err
	}

	// Postgres writes to the log as long as it runs; it is rotated only here,
	// between runs, and only once it is big.
	if fi, err := os.Stat(s.logPath); err == nil && fi.Size() > maxLogSize {
		_ = os.Rename(s.logPath, s.logPath+".1")
	}
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	// The children get their own copies of the descriptor.
	defer logFile.Close()
	if id.cred != nil {
		_ = logFile.Chown(id.uid, id.gid)
	}
	fi, err := logFile.Stat()
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	logStart := fi.Size()

	if err := s.ensureCluster(ctx, id, cfg.SuperUser, isOff(settings["fsync"]), logFile, logStart); err != nil {
		return nil, err
	}

	if err := s.startPostmaster(id, settings, logFile); err != nil {
		return nil, err
	}
	started = true // the monitor goroutine releases the lock from now on

	if err := s.waitReady(ctx); err != nil {
		s.abort()
		return nil, fmt.Errorf("embedded: PostgreSQL did not start: %w%s", err, tailSince(s.logPath, logStart))
	}
	s.ready.Store(true)
	s.log.WithFields(logrus.Fields{"version": s.version, "socket_dir": s.sockDir, "pid": s.proc.Pid}).Info("embedded PostgreSQL ready")
	return s, nil
}

// SocketDir is the directory holding the Unix socket.
func (s *Server) SocketDir() string { return s.sockDir }

// Port is the port number in the socket's name.
func (s *Server) Port() int { return s.port }

// Version is the server version, e.g. "15.18".
func (s *Server) Version() string { return s.version }

// DataDir is the absolute data directory (Config.DataDir).
func (s *Server) DataDir() string { return s.dataDir }

// PGData is the cluster directory, DataDir/pgdata.
func (s *Server) PGData() string { return s.pgData }

// LogPath is the file postgres writes to.
func (s *Server) LogPath() string { return s.logPath }

// BinDir is the directory the binaries were run from.
func (s *Server) BinDir() string { return s.binDir }

// SuperUser is the superuser name the server was started for.
func (s *Server) SuperUser() string { return s.superUser }

// PID is the postmaster's process id.
func (s *Server) PID() int { return s.proc.Pid }

// Done is closed when the postmaster has exited, for any reason.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is how the postmaster exited (as from exec.Cmd.Wait), once Done is
// closed; nil before, or after a clean shutdown.
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.exitErr
	default:
		return nil
	}
}

// ConnString is a libpq keyword/value connection string for the Unix socket,
// accepted by pgx, pgconn and lib/pq. user "" is the superuser, database ""
// is "postgres".
func (s *Server) ConnString(user, database string) string {
	if user == "" {
		user = s.superUser
	}
	if database == "" {
		database = "postgres"
	}
	return strings.Join([]string{
		connParam("host", s.sockDir),
		connParam("port", strconv.Itoa(s.port)),
		connParam("user", user),
		connParam("dbname", database),
		connParam("sslmode", "disable"),
	}, " ")
}

func connParam(k, v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r'\\") {
		return k + "=" + v
	}
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `\'`)
	return k + "='" + v + "'"
}

// shutdownGrace is how long Stop and abort wait after SIGQUIT before
// SIGKILL. A variable so tests need not wait that long.
var shutdownGrace = 5 * time.Second

// Stop shuts PostgreSQL down: SIGINT (fast shutdown: sessions are
// disconnected, a checkpoint is written) and wait. When ctx ends first it
// sends SIGQUIT (immediate shutdown) and, if the postmaster is still there
// five seconds later, SIGKILL, to it and then to any backend it left
// behind; it then returns an error saying so. Stop
// returns nil when the server is already down. It may be called more than
// once and concurrently.
func (s *Server) Stop(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	s.stopping.Store(true)
	s.log.Info("stopping embedded PostgreSQL (fast shutdown)")
	s.signal(syscall.SIGINT)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	s.log.Warn("fast shutdown did not finish in time; sending SIGQUIT")
	s.signal(syscall.SIGQUIT)
	t := time.NewTimer(shutdownGrace)
	defer t.Stop()
	select {
	case <-s.done:
		return fmt.Errorf("embedded: fast shutdown cut short (%w); PostgreSQL stopped with SIGQUIT", context.Cause(ctx))
	case <-t.C:
	}
	s.log.Warn("immediate shutdown did not finish in time; sending SIGKILL")
	s.kill()
	return fmt.Errorf("embedded: fast shutdown cut short (%w); PostgreSQL killed with SIGKILL", context.Cause(ctx))
}

// abort stops a postmaster that failed to become ready.
func (s *Server) abort() {
	s.stopping.Store(true)
	s.signal(syscall.SIGQUIT)
	t := time.NewTimer(shutdownGrace)
	defer t.Stop()
	select {
	case <-s.done:
		return
	case <-t.C:
	}
	s.kill()
}

// kill SIGKILLs the postmaster and then its backends: a killed postmaster
// cannot take them down, and one busy in a query would go on until it next
// waits.
func (s *Server) kill() {
	s.signal(syscall.SIGKILL)
	<-s.done
	for _, pid := range postgresIn(s.pgData) {
		_ = stopLeftover(context.Background(), pid, s.pgData, []stopStep{{syscall.SIGKILL, shutdownGrace}})
	}
}

func (s *Server) signal(sig os.Signal) {
	if err := s.proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.log.WithError(err).WithField("signal", sig).Warn("signalling postmaster")
	}
}

func (s *Server) releaseLock() {
	s.lockOnce.Do(func() { _ = s.lock.Close() })
}

// buildSettings merges the launcher's defaults with the user's settings.
// The socket settings are added by startPostmaster.
func buildSettings(user map[string]string) (map[string]string, error) {
	out := map[string]string{
		"max_connections": strconv.Itoa(DefaultMaxConnections),
	}
	for k, v := range user {
		key := strings.ToLower(strings.TrimSpace(k))
		if reservedSettings[key] {
			return nil, fmt.Errorf("embedded: setting %q is managed by the launcher (PostgreSQL listens only on its Unix socket)", k)
		}
		if key == "" || strings.ContainsAny(key, "= \t\n") {
			return nil, fmt.Errorf("embedded: bad setting name %q", k)
		}
		out[key] = v
	}
	return out, nil
}

func isOff(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "false", "no", "0":
		return true
	}
	return false
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) ([0-9][^\s]*)`)

// serverVersion runs postgres -V (allowed as root) and returns e.g. "15.18".
func serverVersion(ctx context.Context, binDir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	bin := filepath.Join(binDir, "postgres")
	out, err := exec.CommandContext(ctx, bin, "-V").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("embedded: %s -V: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("embedded: %s -V: unexpected output %q", bin, out)
	}
	return string(m[1]), nil
}

// majorVersion is the part of a version PG_VERSION records: "15" for
// "15.18", "9.6" for "9.6.24".
func majorVersion(v string) string {
	n := parseVersion(v)
	switch {
	case len(n) == 0:
		return v
	case n[0] >= 10 || len(n) == 1:
		return strconv.Itoa(n[0])
	default:
		return strconv.Itoa(n[0]) + "." + strconv.Itoa(n[1])
	}
}

// childEnv is this process's environment without what would steer initdb
// or postgres behind the launcher's back: PG* (PGDATA, PGPORT, PGOPTIONS,
// ...) and the locale variables (the cluster is locale C).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") || name == "LANG" || name == "LANGUAGE" || strings.HasPrefix(name, "LC_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// ensureCluster makes DataDir/pgdata with initdb unless it holds a cluster,
// and checks that an existing one fits these binaries and this user.
func (s *Server) ensureCluster(ctx context.Context, id identity, superUser string, noSync bool, logFile *os.File, logStart int64) error {
	major := majorVersion(s.version)
	if b, err := os.ReadFile(filepath.Join(s.pgData, "PG_VERSION")); err == nil {
		if have := strings.TrimSpace(string(b)); have != major {
			return fmt.Errorf("embedded: cluster %s is PostgreSQL %s but the binaries in %s are %s; use binaries of version %s (--pg-bindir) or move the data dir away (upgrading needs pg_upgrade)",
				s.pgData, have, s.binDir, s.version, have)
		}
		fi, err := os.Stat(s.pgData)
		if err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != id.uid {
			return fmt.Errorf("embedded: cluster %s is owned by uid %d but postgres runs as %s (uid %d); chown -R it or use another data dir",
				s.pgData, st.Uid, id.name, id.uid)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("embedded: %w", err)
	}

	if entries, err := os.ReadDir(s.pgData); err == nil {
		if len(entries) > 0 {
			return fmt.Errorf("embedded: %s exists but holds no PostgreSQL cluster (no PG_VERSION); remove it or choose another data dir", s.pgData)
		}
		if err := os.Remove(s.pgData); err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
	}

	// initdb works in a side directory that is renamed into place only when
	// it succeeded: a start killed during initdb leaves no half cluster.
	work := s.pgData + ".initdb"
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("embedded: removing an unfinished initdb: %w", err)
	}
	args := []string{
		"-D", work,
		"-U", superUser,
		"-E", "UTF8",
		"--locale=C",
		"--auth-local=trust",
		"--auth-host=reject",
	}
	if noSync {
		args = append(args, "--no-sync")
	}
	s.log.WithField("superuser", superUser).Info("creating PostgreSQL cluster (initdb)")
	fmt.Fprintf(logFile, "\n%s mzproxy: initdb %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"), args...)
	cmd.Dir = s.dataDir
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: id.cred, Setpgid: true}
	exited, err := startTied(cmd, syscall.SIGKILL)
	if err == nil {
		err = <-exited
	}
	if err != nil {
		_ = os.RemoveAll(work)
		return fmt.Errorf("embedded: initdb failed: %w%s", err, tailSince(s.logPath, logStart))
	}
	if err := os.Rename(work, s.pgData); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	return nil
}

// startPostmaster starts postgres and the goroutine that notices its exit.
func (s *Server) startPostmaster(id identity, settings map[string]string, logFile *os.File) error {
	settings["listen_addresses"] = ""
	settings["unix_socket_directories"] = quoteDirList(s.sockDir)
	settings["port"] = strconv.Itoa(s.port)
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-D", s.pgData}
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	s.log.WithField("args", args).Info("starting embedded PostgreSQL")
	fmt.Fprintf(logFile, "\n%s mzproxy: postgres %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(args, " "))

	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	cmd.Dir = s.pgData
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: a terminal's Ctrl-C reaches mzproxy, which then
	// decides when to stop the backend.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: id.cred, Setpgid: true}
	// SIGQUIT is immediate shutdown: the postmaster takes its backends down
	// with it at once; the next start recovers from the WAL.
	exited, err := startTied(cmd, syscall.SIGQUIT)
	if err != nil {
		return fmt.Errorf("embedded: starting postgres: %w", err)
	}
	s.proc = cmd.Process
	go func() {
		err := <-exited
		s.exitErr = err
		if s.tmpSockDir {
			_ = os.Remove(s.sockDir) // only if postgres left it empty
		}
		s.releaseLock()
		switch {
		case !s.ready.Load():
			// Start reports this one, with the log's tail.
		case s.stopping.Load():
			s.log.WithError(err).Info("embedded PostgreSQL stopped")
		default:
			s.log.WithError(err).Error("embedded PostgreSQL exited unexpectedly")
		}
		close(s.done)
	}()
	return nil
}

// quoteDirList makes dir one element of a unix_socket_directories list.
func quoteDirList(dir string) string {
	if strings.ContainsAny(dir, ", \t\"") {
		return `"` + strings.ReplaceAll(dir, `"`, `""`) + `"`
	}
	return dir
}

// waitReady polls with real connections until one succeeds, the postmaster
// exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	cfg, err := pgconn.ParseConfig(s.ConnString(s.superUser, "postgres"))
	if err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.ConnectConfig(attemptCtx, cfg)
		cancel()
		if err == nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			return nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code != "57P03" { // 57P03: still starting up
			hint := ""
			if pgErr.Code == "28000" {
				hint = " (an existing cluster keeps the superuser initdb made it with)"
			}
			return fmt.Errorf("server answers but refuses %q%s: %w", s.superUser, hint, err)
		}
		lastErr = err
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited during startup (%v)", s.exitErr)
		case <-ctx.Done():
			return fmt.Errorf("%w while waiting for connections (last attempt: %v)", context.Cause(ctx), lastErr)
		case <-tick.C:
		}
	}
}

// tailSince returns the last lines written to path from offset on,
// formatted to be appended to an error, or "" when there are none.
func tailSince(path string, offset int64) string {
	const maxBytes, maxLines = 8 << 10, 25
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	if fi.Size()-offset > maxBytes {
		offset = fi.Size() - maxBytes
	}
	if offset < 0 {
		offset = 0
	}
	b := make([]byte, fi.Size()-offset)
	n, _ := f.ReadAt(b, offset)
	lines := strings.Split(strings.TrimRight(string(b[:n]), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	text := strings.TrimSpace(strings.Join(lines, "\n"))
	if text == "" {
		return ""
	}
	return fmt.Sprintf("\nlast lines of %s:\n%s", path, text)
}
