package integration

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DROP DATABASE of a database mzproxy has served (proxy/dropdb.go,
// proxy/idle.go): the proxies' own connections to it (catalog, lease)
// must not keep its owner from dropping it, through mzproxy or directly,
// and PostgreSQL's own rules hold for the clients' sessions.

// useDB makes a managed table t in the database of conn, writes to it
// and reads it at a timestamp, so that the proxy serving conn has its
// lease and catalog connection there.
func useDB(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	mustExec(t, ctx, conn, "CREATE TABLE t (k int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')", "UPDATE t SET v = 'b' WHERE k = 1")
	var ts int64
	if err := conn.QueryRow(ctx, "SELECT mz_now() FROM t LIMIT 1", pgx.QueryExecModeSimpleProtocol).Scan(&ts); err != nil {
		t.Fatalf("mz_now(): %v", err)
	}
	var v string
	if err := conn.QueryRow(ctx, "SELECT v FROM t WHERE k = 1 AS OF $1", ts).Scan(&v); err != nil || v != "b" {
		t.Fatalf("AS OF %d: %q, %v; want b", ts, v, err)
	}
}

// dropExec runs sql (a DROP DATABASE) in the simple protocol.
func dropExec(ctx context.Context, conn *pgx.Conn, sql string) error {
	_, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	return err
}

// TestDropDBOwnerThroughProxy: a role with CREATEDB that made a database
// through mzproxy and used it drops it through mzproxy at once after its
// sessions left (before this, 55006: the proxy's own connections), with
// IF EXISTS too; in a transaction block it gets PostgreSQL's 25001;
// the database made again under the same name works from scratch (a
// table of the same name, writes, AS OF).
func TestDropDBOwnerThroughProxy(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	direct := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, direct, "CREATE ROLE maker LOGIN CREATEDB")
	// The idle release would let go of the database by itself: it is
	// kept, so that the DROP meets the proxy's connections.
	p := startProxy(t, "--backend", pg.url(), "--idle-release", "0")
	maker := connectTo(t, ctx, p.URL("maker", "postgres"))
	for round := 0; round < 2; round++ {
		mustExec(t, ctx, maker, "CREATE DATABASE made")
		used := connectTo(t, ctx, p.URL("maker", "made"))
		useDB(t, ctx, used)
		used.Close(ctx)
		if n := count(t, ctx, direct, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'made'", pgx.QueryExecModeSimpleProtocol); n == 0 {
			t.Fatalf("round %d: the proxy has no connection of its own to the database: the test tests nothing", round)
		}
		tx, err := maker.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, dropExec(ctx, tx.Conn(), "DROP DATABASE made"), "25001")
		_ = tx.Rollback(ctx)
		sql := "DROP DATABASE made"
		if round == 1 {
			sql = "DROP DATABASE IF EXISTS made"
		}
		// At once: no waiting for the proxy to let go by itself.
		if err := dropExec(ctx, maker, sql); err != nil {
			t.Fatalf("round %d: the owner's %s of a database it used through mzproxy: %v", round, sql, err)
		}
	}
	if err := dropExec(ctx, maker, "DROP DATABASE IF EXISTS made"); err != nil {
		t.Fatalf("DROP DATABASE IF EXISTS of a database that is gone: %v", err)
	}
	wantCode(t, dropExec(ctx, maker, "DROP DATABASE made"), "3D000")
	p.mustAlive(t, ctx)
}

// TestDropDBTwoProxies: two proxies both served the database (each has
// its lease and catalog connection there); its owner's DROP through one
// succeeds, the other proxy lets go of it (no connection of its own
// there, no reconnecting in a loop), gives a session to it PostgreSQL's
// 3D000, and serves the database made again under the name from
// scratch.
func TestDropDBTwoProxies(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	direct := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, direct, "CREATE ROLE maker LOGIN CREATEDB")
	p1 := startProxy(t, "--backend", pg.url(), "--idle-release", "0")
	p2 := startProxy(t, "--backend", pg.url(), "--idle-release", "0")
	maker := connectTo(t, ctx, p1.URL("maker", "postgres"))
	mustExec(t, ctx, maker, "CREATE DATABASE two")
	on1 := connectTo(t, ctx, p1.URL("maker", "two"))
	useDB(t, ctx, on1)
	on2 := connectTo(t, ctx, p2.URL("maker", "two"))
	mustExec(t, ctx, on2, "INSERT INTO t VALUES (2, 'c')")
	var v string
	if err := on2.QueryRow(ctx, "SELECT v, mz_now() FROM t WHERE k = 2", pgx.QueryExecModeSimpleProtocol).Scan(&v, new(int64)); err != nil || v != "c" {
		t.Fatalf("mz_now() through the second proxy: %q, %v", v, err)
	}
	on1.Close(ctx)
	on2.Close(ctx)
	const internal = "SELECT count(*) FROM pg_stat_activity WHERE datname = 'two' AND application_name = 'mzproxy internal'"
	awaitCount(t, ctx, direct, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'two' AND application_name <> 'mzproxy internal' AND backend_type = 'client backend'", 0)
	if n := count(t, ctx, direct, internal, pgx.QueryExecModeSimpleProtocol); n < 2 {
		t.Fatalf("%d connections of the proxies' own to the database, want at least 2: the test tests nothing", n)
	}
	if err := dropExec(ctx, maker, "DROP DATABASE two"); err != nil {
		t.Fatalf("the owner's DROP DATABASE of a database two proxies served: %v", err)
	}
	// The second proxy's lease loop finds the database gone at its next
	// round trip and stops: no connection attempts to it go on (the
	// backend counts none: there is no database to count in, so its log
	// is read instead).
	named := regexp.MustCompile(`\btwo\b`)
	time.Sleep(3 * time.Second)
	before := len(named.FindAllString(p2.log.String(), -1))
	time.Sleep(3 * time.Second)
	if after := len(named.FindAllString(p2.log.String(), -1)); after != before {
		t.Errorf("the second proxy still goes on about the dropped database: %d log lines naming it in 3 s", after-before)
	}
	_, err := pgx.Connect(ctx, p2.URL("maker", "two"))
	wantCode(t, err, "3D000")
	// Made again, through the proxy that did not drop it.
	maker2 := connectTo(t, ctx, p2.URL("maker", "postgres"))
	mustExec(t, ctx, maker2, "CREATE DATABASE two")
	again := connectTo(t, ctx, p2.URL("maker", "two"))
	useDB(t, ctx, again)
	if n := count(t, ctx, again, "SELECT count(*) FROM t", pgx.QueryExecModeSimpleProtocol); n != 1 {
		t.Fatalf("the database made again has %d rows in t, want 1", n)
	}
	again1 := connectTo(t, ctx, p1.URL("maker", "two"))
	var n int
	if err := again1.QueryRow(ctx, "SELECT count(*), mz_now() FROM t", pgx.QueryExecModeSimpleProtocol).Scan(&n, new(int64)); err != nil || n != 1 {
		t.Fatalf("the database made again, through the first proxy: %d rows in t (%v), want 1", n, err)
	}
	p1.mustAlive(t, ctx)
	p2.mustAlive(t, ctx)
}

// awaitCount waits until sql counts want (backends take a moment to go
// after their client closed).
func awaitCount(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := count(t, ctx, conn, sql, pgx.QueryExecModeSimpleProtocol)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", sql, n, want)
		}
	}
}

// TestDropDBSessions: with other client sessions in the database,
// PostgreSQL's rules hold through mzproxy: without FORCE 55006; WITH
// (FORCE) 42501 while another role's session is there (an owner cannot
// end it), and the proxy's own lease there is untouched (a transaction
// holding a timestamp in it goes on); once only the owner's own session
// is left, WITH (FORCE) ends it and drops the database. A role that may
// not drop the database gets 42501, and the proxies keep serving it.
func TestDropDBSessions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	direct := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, direct, "CREATE ROLE maker LOGIN CREATEDB", "CREATE ROLE other LOGIN")
	p := startProxy(t, "--backend", pg.url(), "--idle-release", "0")
	maker := connectTo(t, ctx, p.URL("maker", "postgres"))
	mustExec(t, ctx, maker, "CREATE DATABASE busy")
	own := connectTo(t, ctx, p.URL("maker", "busy"))
	useDB(t, ctx, own)
	mustExec(t, ctx, own, "GRANT SELECT ON t TO other")
	others := connectTo(t, ctx, p.URL("other", "busy"))
	// A read-only transaction holding its timestamp under the proxy's
	// lease in the database.
	tx, err := others.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ts int64
	if err := tx.QueryRow(ctx, "SELECT mz_now() FROM t LIMIT 1", pgx.QueryExecModeSimpleProtocol).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	otherPostgres := connectTo(t, ctx, p.URL("other", "postgres"))

	wantCode(t, dropExec(ctx, otherPostgres, "DROP DATABASE busy"), "42501")
	wantCode(t, dropExec(ctx, otherPostgres, "DROP DATABASE busy WITH (FORCE)"), "42501")
	wantCode(t, dropExec(ctx, maker, "DROP DATABASE busy"), "55006")
	wantCode(t, dropExec(ctx, maker, "DROP DATABASE busy WITH (FORCE)"), "42501")
	// Nothing of the proxy's was released for these: the transaction
	// still reads at its timestamp.
	time.Sleep(1500 * time.Millisecond) // past a tick and a compaction
	var ts2 int64
	if err := tx.QueryRow(ctx, "SELECT mz_now() FROM t LIMIT 1", pgx.QueryExecModeSimpleProtocol).Scan(&ts2); err != nil || ts2 != ts {
		t.Fatalf("the transaction after the refused drops: mz_now() %d, %v; want %d", ts2, err, ts)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	others.Close(ctx)
	awaitCount(t, ctx, direct, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'busy' AND usename = 'other'", 0)
	// The owner's own session is still there: FORCE ends it.
	wantCode(t, dropExec(ctx, maker, "DROP DATABASE busy"), "55006")
	if err := dropExec(ctx, maker, "DROP DATABASE busy WITH (FORCE)"); err != nil {
		t.Fatalf("the owner's DROP DATABASE WITH (FORCE) over its own session: %v", err)
	}
	if err := own.Ping(ctx); err == nil {
		t.Errorf("the owner's session in the dropped database still answers")
	}
	p.mustAlive(t, ctx)
}

// TestDropDBDirectAfterIdle: once a database has had no session through
// mzproxy for --idle-release, the proxy has no connection of its own
// left there, and its owner drops it connected to PostgreSQL directly.
func TestDropDBDirectAfterIdle(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	direct := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, direct, "CREATE ROLE maker LOGIN CREATEDB")
	p := startProxy(t, "--backend", pg.url(), "--idle-release", "1s")
	maker := connectTo(t, ctx, p.URL("maker", "postgres"))
	mustExec(t, ctx, maker, "CREATE DATABASE idle")
	used := connectTo(t, ctx, p.URL("maker", "idle"))
	useDB(t, ctx, used)
	used.Close(ctx)
	makerDirect := connectTo(t, ctx, pg.srv.ConnString("maker", "postgres"))
	var err error
	start := time.Now()
	for deadline := start.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = dropExec(ctx, makerDirect, "DROP DATABASE idle"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("the owner's direct DROP DATABASE, 10 s after its last session through mzproxy: %v", err)
	}
	t.Logf("dropped directly %v after the last session left", time.Since(start).Round(100*time.Millisecond))
	// The proxy serves the database made again under the name.
	mustExec(t, ctx, maker, "CREATE DATABASE idle")
	again := connectTo(t, ctx, p.URL("maker", "idle"))
	useDB(t, ctx, again)
	p.mustAlive(t, ctx)
}
