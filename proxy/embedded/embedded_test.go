package embedded

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/lib/pq"
)

func queryInt(t *testing.T, s *Server, q string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.ConnString("", ""))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func exec1(t *testing.T, s *Server, q string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.ConnString("", ""))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestStartQueryRestart(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	s := startServer(t, cfg)

	if got := queryInt(t, s, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
	if !regexp.MustCompile(`^\d+(\.\d+)*`).MatchString(s.Version()) || strings.Contains(s.Version(), " ") {
		t.Errorf("Version() = %q", s.Version())
	}
	if s.Port() != DefaultPort {
		t.Errorf("Port() = %d", s.Port())
	}
	if want := filepath.Join(s.DataDir(), "sock"); s.SocketDir() != want {
		t.Errorf("SocketDir() = %q, want %q", s.SocketDir(), want)
	}
	if _, err := os.Stat(filepath.Join(s.SocketDir(), ".s.PGSQL.5432")); err != nil {
		t.Errorf("socket: %v", err)
	}
	if got := queryInt(t, s, "SELECT current_setting('max_connections')::int"); got != DefaultMaxConnections {
		t.Errorf("max_connections = %d", got)
	}
	if got := queryInt(t, s, "SELECT length(current_setting('listen_addresses'))"); got != 0 {
		t.Errorf("listen_addresses is not empty")
	}
	if got := queryInt(t, s, "SELECT count(*) FROM pg_roles WHERE rolname = 'postgres' AND rolsuper"); got != 1 {
		t.Errorf("superuser postgres missing")
	}

	// lib/pq takes the same string.
	db, err := sql.Open("postgres", s.ConnString("", ""))
	if err != nil {
		t.Fatal(err)
	}
	var enc string
	if err := db.QueryRow("SHOW server_encoding").Scan(&enc); err != nil {
		t.Fatalf("lib/pq: %v", err)
	}
	db.Close()
	if enc != "UTF8" {
		t.Errorf("server_encoding = %q", enc)
	}

	exec1(t, s, "CREATE TABLE survivor (x int); INSERT INTO survivor VALUES (42)")
	stopServer(t, s)
	if err := s.Err(); err != nil {
		t.Errorf("Err() after a clean stop = %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	s2 := startServer(t, cfg)
	if got := queryInt(t, s2, "SELECT x FROM survivor"); got != 42 {
		t.Fatalf("after restart: x = %d", got)
	}
	log, err := os.ReadFile(s2.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "mzproxy: initdb"); n != 1 {
		t.Errorf("initdb ran %d times, want 1", n)
	}
	if n := strings.Count(string(log), "mzproxy: postgres"); n != 2 {
		t.Errorf("postgres started %d times, want 2", n)
	}
}

func TestStaleLockFiles(t *testing.T) {
	t.Parallel()
	cfg := clusterConfig(t)
	stopServer(t, startServer(t, cfg))
	pgdata := filepath.Join(cfg.DataDir, "pgdata")

	// A process that is alive but not postgres: a recycled pid.
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	// A pid that is gone.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, content string
	}{
		{"dead pid", strconv.Itoa(gone.Process.Pid) + "\n" + pgdata + "\n"},
		{"recycled pid", strconv.Itoa(sleeper.Process.Pid) + "\n" + pgdata + "\n"},
		{"torn file", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeAsPostgres(t, filepath.Join(pgdata, "postmaster.pid"), tc.content)
			writeAsPostgres(t, filepath.Join(cfg.DataDir, "sock", ".s.PGSQL.5432.lock"), tc.content)
			s := startServer(t, cfg)
			if got := queryInt(t, s, "SELECT 1"); got != 1 {
				t.Fatalf("SELECT 1 = %d", got)
			}
			stopServer(t, s)
			if processGone(sleeper.Process.Pid) {
				t.Fatalf("the unrelated process was killed")
			}
		})
	}
}

// writeAsPostgres writes a file as postgres would have: owned by the owner
// of the directory it is in.
func writeAsPostgres(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Chown(path, int(st.Uid), int(st.Gid)); err != nil {
		t.Fatal(err)
	}
}

func TestDataDirInUse(t *testing.T) {
	t.Parallel()
	cfg := clusterConfig(t)
	s := startServer(t, cfg)
	_, err := Start(context.Background(), cfg)
	if !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("second Start: %v, want ErrDataDirInUse", err)
	}
	if got := queryInt(t, s, "SELECT 1"); got != 1 {
		t.Fatalf("first server hurt: SELECT 1 = %d", got)
	}
}

// TestLeftoverPostmaster: the owner of a postmaster is gone (its lock is
// released) but the postmaster still runs; the next Start stops it.
func TestLeftoverPostmaster(t *testing.T) {
	t.Parallel()
	cfg := clusterConfig(t)
	old := startServer(t, cfg)
	exec1(t, old, "CREATE TABLE t (x int); INSERT INTO t VALUES (7)")
	old.releaseLock() // as if its mzproxy had died

	s := startServer(t, cfg)
	select {
	case <-old.Done():
	default:
		t.Fatalf("the leftover postmaster still runs")
	}
	if s.PID() == old.PID() {
		t.Fatalf("same postmaster")
	}
	if got := queryInt(t, s, "SELECT x FROM t"); got != 7 {
		t.Fatalf("x = %d", got)
	}
}

func TestKillParent(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	copyTemplate(t, dataDir)
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+dataDir)
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := helper.StdinPipe() // held open until the kill
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = helper.Process.Kill(); _ = helper.Wait() }()

	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading from helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "pid "))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	pgdata := filepath.Join(dataDir, "pgdata")
	if !isPostgresFor(pid, pgdata) {
		t.Fatalf("pid %d is not a postmaster in %s", pid, pgdata)
	}

	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	// The postmaster and every backend must go.
	waitNoPostgresIn(t, pgdata, 5*time.Second)

	// The next run starts over what the killed one left.
	s := startServer(t, testConfigAt(dataDir))
	if got := queryInt(t, s, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
}

func TestStartupFailureShowsLog(t *testing.T) {
	t.Parallel()
	cfg := clusterConfig(t)
	cfg.Settings["shared_buffers"] = "plenty"
	_, err := Start(context.Background(), cfg)
	if err == nil {
		t.Fatal("Start succeeded with a bad setting")
	}
	for _, want := range []string{"last lines of", "postgres.log", "shared_buffers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// A superuser the cluster was not made with.
	cfg.Settings["shared_buffers"] = "16MB"
	cfg.SuperUser = "someone_else"
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "keeps the superuser") {
		t.Errorf("Start with another superuser = %v", err)
	}
	cfg.SuperUser = ""
	// The failed starts released the data dir.
	delete(cfg.Settings, "shared_buffers")
	s := startServer(t, cfg)
	if got := queryInt(t, s, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
}

func TestStartContextEnds(t *testing.T) {
	cfg := testConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(ctx, cfg); err == nil {
		t.Fatal("Start with a canceled context succeeded")
	}
	waitNoPostgresIn(t, filepath.Join(cfg.DataDir, "pgdata"), 5*time.Second)
}

func TestLongDataDirUsesTmpSocket(t *testing.T) {
	t.Parallel()
	cfg := testConfigAt(filepath.Join(t.TempDir(), strings.Repeat("d", 100)))
	copyTemplate(t, cfg.DataDir)
	s := startServer(t, cfg)
	if !strings.HasPrefix(s.SocketDir(), "/tmp/mzproxy-") {
		t.Fatalf("SocketDir() = %q", s.SocketDir())
	}
	if got := queryInt(t, s, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
	stopServer(t, s)
	if _, err := os.Stat(s.SocketDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir left behind: %v", err)
	}
}

// TestStopEscalates is not parallel: it shortens shutdownGrace, which
// sequential tests restore before the parallel ones run.
func TestStopEscalates(t *testing.T) {
	defer func(d time.Duration) { shutdownGrace = d }(shutdownGrace)
	shutdownGrace = 300 * time.Millisecond

	cfg := clusterConfig(t)
	s := startServer(t, cfg)
	// A stopped postmaster ignores SIGINT and SIGQUIT until SIGKILL.
	if err := syscall.Kill(s.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.Stop(ctx)
	if err == nil || !strings.Contains(err.Error(), "SIGKILL") {
		t.Fatalf("Stop = %v, want an error about SIGKILL", err)
	}
	<-s.Done()
	if s.Err() == nil {
		t.Errorf("Err() = nil after SIGKILL")
	}
	if pids := postgresIn(filepath.Join(cfg.DataDir, "pgdata")); len(pids) > 0 {
		t.Errorf("postgres processes %v survived Stop", pids)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	base := func() Config {
		return Config{DataDir: filepath.Join(t.TempDir(), "data"), Logger: testLogger()}
	}
	for _, tc := range []struct {
		name   string
		root   bool // only meaningful when running as root
		mutate func(*Config)
		want   string
	}{
		{"no data dir", false, func(c *Config) { c.DataDir = "" }, "DataDir is required"},
		{"reserved setting", false, func(c *Config) { c.Settings = map[string]string{"Listen_Addresses": "*"} }, "managed by the launcher"},
		{"bad port", false, func(c *Config) { c.Port = 70000 }, "out of range"},
		{"bad bin dir", false, func(c *Config) { c.BinDir = t.TempDir() }, "no executable postgres or initdb"},
		{"run as root", true, func(c *Config) { c.RunAsUser = "root" }, "refuses to run as root"},
		{"no such user", true, func(c *Config) { c.RunAsUser = "no-such-user-mzproxy" }, "useradd"},
		{"unsearchable parent", true, func(c *Config) {
			parent := filepath.Join(t.TempDir(), "private")
			if err := os.Mkdir(parent, 0o700); err != nil {
				t.Fatal(err)
			}
			c.DataDir = filepath.Join(parent, "data")
		}, "chmod o+x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root")
			}
			cfg := base()
			tc.mutate(&cfg)
			_, err := Start(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConnString(t *testing.T) {
	s := &Server{sockDir: "/tmp/a dir/it's", port: 6543, superUser: "postgres"}
	for _, tc := range []struct{ user, db, wantUser, wantDB string }{
		{"", "", "postgres", "postgres"},
		{"alice", "shop", "alice", "shop"},
		{"bob smith", `we\ird`, "bob smith", `we\ird`},
	} {
		cs := s.ConnString(tc.user, tc.db)
		cfg, err := pgconn.ParseConfig(cs)
		if err != nil {
			t.Fatalf("%q: %v", cs, err)
		}
		if cfg.Host != s.sockDir || cfg.Port != 6543 || cfg.User != tc.wantUser || cfg.Database != tc.wantDB || cfg.TLSConfig != nil {
			t.Errorf("%q parsed as host=%q port=%d user=%q db=%q tls=%v", cs, cfg.Host, cfg.Port, cfg.User, cfg.Database, cfg.TLSConfig != nil)
		}
	}
}

func TestVersions(t *testing.T) {
	for _, tc := range []struct {
		in    string
		parts []int
		major string
	}{
		{"15.18", []int{15, 18}, "15"},
		{"9.6.24", []int{9, 6, 24}, "9.6"},
		{"17beta1", []int{17}, "17"},
		{"10", []int{10}, "10"},
		{"x", nil, "x"},
	} {
		if got := parseVersion(tc.in); compareVersions(got, tc.parts) != 0 || len(got) != len(tc.parts) {
			t.Errorf("parseVersion(%q) = %v, want %v", tc.in, got, tc.parts)
		}
		if got := majorVersion(tc.in); got != tc.major {
			t.Errorf("majorVersion(%q) = %q, want %q", tc.in, got, tc.major)
		}
	}
}

// TestOrphanedBackend: a postmaster killed with SIGKILL leaves a backend
// busy in a loop (it notices the death only when it next waits). The next
// Start stops it rather than run a second postmaster beside it.
func TestOrphanedBackend(t *testing.T) {
	t.Parallel()
	cfg := clusterConfig(t)
	s := startServer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.ConnString("", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}
	// If the test fails before the next Start stops it, the busy backend
	// would spin on a core until someone kills it.
	t.Cleanup(func() {
		if !processGone(backend) {
			_ = syscall.Kill(backend, syscall.SIGKILL)
		}
	})
	busy := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "DO $$BEGIN LOOP END LOOP; END$$")
		busy <- err
	}()
	// Wait until the loop runs.
	for queryInt(t, s, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'DO %' AND state = 'active'") == 0 {
		time.Sleep(20 * time.Millisecond)
	}

	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	if processGone(backend) {
		t.Fatalf("the backend died with its postmaster; nothing to test")
	}

	s2 := startServer(t, cfg)
	if !processGone(backend) {
		t.Fatalf("orphaned backend %d still runs", backend)
	}
	if got := queryInt(t, s2, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
	if err := <-busy; err == nil {
		t.Errorf("the busy loop ended without an error")
	}
}
