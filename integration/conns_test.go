package integration

import (
	"context"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mzproxy/mzproxy/proxy/embedded"
)

// The proxy's own (internal) connections to its backend across backend
// restarts and re-created databases, and its start with a backend that
// cannot be reached yet.

// privateCluster is a PostgreSQL of one test's own, which it may stop and
// start again (the shared one must not be restarted under other tests).
type privateCluster struct {
	cfg embedded.Config
	srv *embedded.Server // nil while stopped
}

// newPrivateCluster starts a PostgreSQL for t; it is stopped when t ends.
// newDurableCluster is newPrivateCluster restarted with synchronous
// commits before anything is written: acknowledged commits survive a
// crash (the shared test PostgreSQL commits asynchronously).
func newDurableCluster(t *testing.T, ctx context.Context) *privateCluster {
	t.Helper()
	pg := newPrivateCluster(t, ctx)
	pg.cfg.Settings["synchronous_commit"] = "on"
	pg.restart(t, ctx)
	return pg
}

func newPrivateCluster(t *testing.T, ctx context.Context) *privateCluster {
	t.Helper()
	// Under the directory the test PostgreSQL runs in, whose ancestors the
	// postgres user can search.
	dir, err := os.MkdirTemp(env.dir, "private-")
	if err != nil {
		t.Fatal(err)
	}
	c := &privateCluster{cfg: embedded.Config{
		DataDir:      dir,
		ChmodParents: true,
		Settings:     map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"},
	}}
	c.start(t, ctx)
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *privateCluster) start(t *testing.T, ctx context.Context) {
	t.Helper()
	srv, err := embedded.Start(ctx, c.cfg)
	if err != nil {
		t.Fatalf("starting the private PostgreSQL: %v", err)
	}
	c.srv = srv
}

func (c *privateCluster) stop(t *testing.T) {
	t.Helper()
	if c.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.srv.Stop(ctx); err != nil {
		t.Errorf("stopping the private PostgreSQL: %v", err)
	}
	c.srv = nil
}

// restart stops PostgreSQL (a fast shutdown: every connection, the
// proxy's included, is told 57P01 and closed) and starts it again, then
// waits until a direct connection gets an answer.
func (c *privateCluster) restart(t *testing.T, ctx context.Context) {
	t.Helper()
	url := c.url()
	c.stop(t)
	c.start(t, ctx)
	eventually(t, 30*time.Second, "the restarted PostgreSQL answers", func() bool {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx) == nil
	})
}

// crash kills PostgreSQL as a crash would (SIGQUIT: an immediate
// shutdown, no checkpoint; every connection is cut) and starts it again,
// which replays its WAL.
func (c *privateCluster) crash(t *testing.T, ctx context.Context) {
	t.Helper()
	_ = syscall.Kill(c.srv.PID(), syscall.SIGQUIT)
	select {
	case <-c.srv.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("PostgreSQL did not stop on SIGQUIT")
	}
	c.srv = nil
	c.start(t, ctx)
}

// url is the superuser's connection string for the postgres database.
func (c *privateCluster) url() string { return c.srv.ConnString("", "postgres") }

// firstStatement runs sql as the first statement of a new session through
// the proxy.
func firstStatement(t *testing.T, ctx context.Context, p *proxyProc, database, sql string) {
	t.Helper()
	conn := connectTo(t, ctx, p.URL("postgres", database))
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Errorf("first statement of a new session, %s: %v", sql, err)
	}
}

// TestInternalConnsBackendRestart: after the backend restarts, the first
// /readyz says 200 and the first statement of a new session works, in
// history mode (where even SELECT 1 reads the catalog): every internal
// connection is checked before use and redialed.
func TestInternalConnsBackendRestart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	p := startProxy(t, "--backend", pg.url(), "--metrics-listen", "127.0.0.1:0", "--history-reads")
	addr := p.metricsAddr(t)
	awaitReady(t, addr)
	s := p.connect(t, ctx)
	mustExec(t, ctx, s, "CREATE TABLE r (x int)", "INSERT INTO r VALUES (1)", "UPDATE r SET x = x", "SELECT * FROM r")
	s.Close(ctx)

	// Each restart is followed by the check of one internal connection's
	// first use; the statements after it make every internal connection
	// live again before the next restart.
	pg.restart(t, ctx)
	if code, body := get(t, addr, "/readyz"); code != http.StatusOK {
		t.Errorf("the first /readyz after the backend came back: %d %q", code, body)
	}
	firstStatement(t, ctx, p, "postgres", "INSERT INTO r VALUES (2)")
	firstStatement(t, ctx, p, "postgres", "SELECT * FROM r")

	pg.restart(t, ctx)
	firstStatement(t, ctx, p, "postgres", "SELECT 1") // the catalog's connection
	firstStatement(t, ctx, p, "postgres", "INSERT INTO r VALUES (3)")

	pg.restart(t, ctx)
	firstStatement(t, ctx, p, "postgres", "INSERT INTO r VALUES (4)")
	firstStatement(t, ctx, p, "postgres", "CREATE TABLE r2 (y text)")
	conn := p.connect(t, ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM r").Scan(&n); err != nil || n != 4 {
		t.Fatalf("SELECT count(*) FROM r: %d %v", n, err)
	}
}

// TestInternalConnsDatabaseRecreated: after DROP DATABASE ... WITH (FORCE)
// and CREATE DATABASE under the same name (which kills the proxy's
// catalog connection to it), the first statements of a new session that
// need mzproxy's schema and catalog work, and see the new database's
// catalog, not the old one's.
func TestInternalConnsDatabaseRecreated(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--history-reads")
	s := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, s, "CREATE TABLE again (x int)", "INSERT INTO again VALUES (1)", "SELECT x FROM again")
	s.Close(ctx)

	admin := connectDirect(t, ctx)
	for _, sql := range []string{"DROP DATABASE " + db + " WITH (FORCE)", "CREATE DATABASE " + db} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	firstStatement(t, ctx, p, db, "SELECT 1")
	firstStatement(t, ctx, p, db, "CREATE TABLE again (x int, y text); INSERT INTO again VALUES (2, 'two')")
	conn := connectTo(t, ctx, p.URL("postgres", db))
	var y string
	if err := conn.QueryRow(ctx, "SELECT y FROM again WHERE x = 2").Scan(&y); err != nil || y != "two" {
		t.Fatalf("reading the new database's table: %q %v", y, err)
	}
}

// TestStartupBackendUnreachable: with its backend not up, mzproxy accepts
// clients but does not say it is ready, /readyz says 503, and it says
// it waits for the backend with backoff instead of every second; once the
// backend is up it becomes ready.
func TestStartupBackendUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	url := pg.url()
	pg.stop(t) // the socket is gone: connections are refused
	p := startProxy(t, "--backend", url, "--metrics-listen", "127.0.0.1:0")
	addr := p.metricsAddr(t)
	time.Sleep(6500 * time.Millisecond)
	log := p.log.String()
	if strings.Contains(log, "mzproxy ready") {
		t.Errorf("mzproxy said it was ready without a backend")
	}
	// Attempts at about 0, 1, 3 s (then 7, 15, 30 s ...): a warning a
	// second would be 6 or more.
	if n := strings.Count(log, "level=warning"); n < 1 || n > 4 {
		t.Errorf("%d warnings in 6.5 s without a backend, want 1 to 4 (backoff)", n)
	}
	if !strings.Contains(log, "waiting for the backend") {
		t.Errorf("the log does not say mzproxy waits for the backend")
	}
	if code, body := get(t, addr, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz without a backend: %d %q", code, body)
	}

	pg.start(t, ctx)
	eventually(t, 45*time.Second, "mzproxy ready once the backend is up", func() bool {
		return strings.Contains(p.log.String(), "mzproxy ready")
	})
	if code, body := get(t, addr, "/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz once ready: %d %q", code, body)
	}
}
