package storage

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// writeCounter counts the writes on a connection (a request, or a batch
// of them sent at once: a round trip's client side).
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestInstallRoundTrips: Install on a database already at SchemaVersion
// costs two round trips, and on a copy of the template database (its
// install-time values computed afresh) two as well; before, six and ten
// (the role, BEGIN, LOCK, the version read in two statements of the
// extended protocol, the script and COMMIT, each a round trip, and the
// extended protocol's first Parse of each statement another). A new
// database's first session waits for the copy's. A refused Install
// leaves no transaction open.
func TestInstallRoundTrips(t *testing.T) {
	ctx := context.Background()
	cs := newDB(t)
	if err := InstallTemplate(ctx, connect(t, cs)); err != nil {
		t.Fatal(err)
	}
	conn, writes := countedConn(t, cs)
	for _, step := range []string{"the copy's", "an installed database's"} {
		before := writes.Load()
		if err := Install(ctx, conn); err != nil {
			t.Fatalf("%s Install: %v", step, err)
		}
		if n := writes.Load() - before; n != 2 {
			t.Errorf("%s Install: %d round trips, want 2", step, n)
		}
	}
	var marked bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", TemplateMarker).Scan(&marked); err != nil || marked {
		t.Fatalf("after Install the copy is still marked (%v, %v)", marked, err)
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("after Install the connection's transaction status is %q, want idle", st)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO "+Schema+".schema_version (version) VALUES ($1)", SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if err := Install(ctx, conn); err == nil || !strings.Contains(err.Error(), "newer than this proxy's") {
		t.Errorf("Install under a newer schema: %v", err)
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("after a refused Install the connection's transaction status is %q, want idle", st)
	}
}

// TestInstallAndRegister: the registration rides with the install's last
// round trip, so InstallAndRegister costs what Install does (two round
// trips), not a third. In a new database (a fresh install, or a copy of
// the template database) it runs in the install's transaction: the
// incarnation's row is written by the transaction that installed the
// schema or computed the copy's values, one commit for both; a refused
// registration there rolls the install back with it. In an installed
// database it runs after the install's COMMIT, in a transaction of its
// own, and its refusal is a *RegisterError. Every refusal leaves the
// connection idle, and a host with a quote and a backslash is recorded as
// it is.
func TestInstallAndRegister(t *testing.T) {
	ctx := context.Background()
	// register runs InstallAndRegister and checks its round trips and
	// that the connection is idle after it.
	register := func(conn *pgx.Conn, writes *atomic.Int64, r Registration) (Incarnation, error) {
		t.Helper()
		before := writes.Load()
		inc, err := InstallAndRegister(ctx, conn, r)
		if n := writes.Load() - before; err == nil && n != 2 {
			t.Errorf("InstallAndRegister(%+v): %d round trips, want 2", r, n)
		}
		if st := conn.PgConn().TxStatus(); st != 'I' {
			t.Errorf("after InstallAndRegister(%+v) the connection's transaction status is %q, want idle", r, st)
		}
		return inc, err
	}
	// sameTxn reports whether incarnation id's row was written by the
	// transaction that wrote the first row of table (a table of the
	// schema).
	sameTxn := func(conn *pgx.Conn, id int64, table string) bool {
		t.Helper()
		var same bool
		if err := conn.QueryRow(ctx, "SELECT i.xmin::text = (SELECT x.xmin::text FROM "+Schema+"."+table+" x LIMIT 1) FROM "+Schema+".incarnations i WHERE i.id = $1", id).Scan(&same); err != nil {
			t.Fatal(err)
		}
		return same
	}
	incarnations := func(conn *pgx.Conn) (n int) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+Schema+".incarnations").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("fresh install", func(t *testing.T) {
		conn, writes := countedConn(t, newDB(t))
		inc, err := register(conn, writes, Registration{GraceMS: 1000, Host: "h", PID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if inc.Generation != 1 || !sameTxn(conn, inc.ID, "schema_version") {
			t.Errorf("fresh install's registration: %+v, in the install's transaction: %v; want generation 1, true", inc, sameTxn(conn, inc.ID, "schema_version"))
		}
	})

	t.Run("copy of the template", func(t *testing.T) {
		cs := newDB(t)
		if err := InstallTemplate(ctx, connect(t, cs)); err != nil {
			t.Fatal(err)
		}
		conn, writes := countedConn(t, cs)
		var key string
		readKey := func() string {
			t.Helper()
			var k string
			if err := conn.QueryRow(ctx, "SELECT k FROM "+Schema+".write_key").Scan(&k); err != nil {
				t.Fatal(err)
			}
			return k
		}
		key = readKey()
		// A refused registration in a copy rolls back its fresh values.
		if _, err := conn.Exec(ctx, "UPDATE "+Schema+".fence SET generation = 3"); err != nil {
			t.Fatal(err)
		}
		_, err := register(conn, writes, Registration{Generation: 2, GraceMS: 1000, Host: "h", PID: 1})
		var re *RegisterError
		if !IsFenced(err) || errors.As(err, &re) {
			t.Fatalf("generation 2 under 3 in a copy: %v; want fenced, as the install's error", err)
		}
		var marked bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", TemplateMarker).Scan(&marked); err != nil {
			t.Fatal(err)
		}
		if !marked || readKey() != key || incarnations(conn) != 0 {
			t.Errorf("after a refused registration in a copy: marked %v, key changed %v, %d incarnations; want the copy as it was", marked, readKey() != key, incarnations(conn))
		}

		inc, err := register(conn, writes, Registration{GraceMS: 1000, Host: "h", PID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if inc.Generation != 3 || readKey() == key || !sameTxn(conn, inc.ID, "write_key") {
			t.Errorf("copy's registration: %+v, key computed afresh %v, in the transaction that computed it %v; want generation 3, true, true",
				inc, readKey() != key, sameTxn(conn, inc.ID, "write_key"))
		}

		// Installed now: the registration commits on its own.
		const host = `it's a\host`
		again, err := register(conn, writes, Registration{GraceMS: 1000, Host: host, PID: 2})
		if err != nil {
			t.Fatal(err)
		}
		if again.ID == inc.ID || sameTxn(conn, again.ID, "write_key") {
			t.Errorf("installed database's registration: %+v (the copy's %+v), in the copy's transaction %v", again, inc, sameTxn(conn, again.ID, "write_key"))
		}
		var got string
		if err := conn.QueryRow(ctx, "SELECT host FROM "+Schema+".incarnations WHERE id = $1", again.ID).Scan(&got); err != nil || got != host {
			t.Errorf("host recorded: %q (%v), want %q", got, err, host)
		}
		_, err = register(conn, writes, Registration{Generation: 2, GraceMS: 1000, Host: "h", PID: 1})
		if !IsFenced(err) || !errors.As(err, &re) {
			t.Errorf("generation 2 under 3 in an installed database: %v; want fenced, as a *RegisterError", err)
		}
		if n := incarnations(conn); n != 2 {
			t.Errorf("%d incarnations, want 2", n)
		}
	})
}

// countedConn connects to cs and counts the connection's writes (its
// round trips: the client writes once per round trip).
func countedConn(t *testing.T, cs string) (*pgx.Conn, *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(cs)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{nc, &writes}, nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn, &writes
}
