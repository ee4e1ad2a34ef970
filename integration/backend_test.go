package integration

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// backendsOf counts the backends of application_name app, directly.
func backendsOf(t testing.TB, ctx context.Context, direct *pgx.Conn, app string) int {
	t.Helper()
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBackendTerminated: when the backend of a session is terminated
// mid-query, its client gets PostgreSQL's error and the session ends; other
// sessions and the proxy go on.
func TestBackendTerminated(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	direct := connectDirect(t, ctx)
	victimApp, otherApp := tableName(t)+"_victim", tableName(t)+"_other"
	victim := p.connectApp(t, ctx, victimApp)
	other := p.connectApp(t, ctx, otherApp)

	errc := make(chan error, 1)
	go func() { _, err := victim.Exec(ctx, "SELECT pg_sleep(30)"); errc <- err }()
	waitActive(t, ctx, direct, victimApp)
	var terminated bool
	if err := direct.QueryRow(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", victimApp).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend: %v %v", terminated, err)
	}
	select {
	case err := <-errc:
		if code := sqlState(err); code != "57P01" && code != "08006" {
			t.Fatalf("got %v, want SQLSTATE 57P01 or 08006", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the client was not told within 20s")
	}
	// The session is over: the next statement fails without a hang.
	qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := victim.Exec(qctx, "SELECT 1"); err == nil {
		t.Fatal("the terminated session still answers")
	}
	var n int
	if err := other.QueryRow(ctx, "SELECT 3").Scan(&n); err != nil || n != 3 {
		t.Fatalf("other session: %d %v", n, err)
	}
	p.mustAlive(t, ctx)

	// An idle session whose backend is terminated learns it at its next
	// statement.
	idleApp := tableName(t) + "_idle"
	idle := p.connectApp(t, ctx, idleApp)
	if _, err := direct.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", idleApp); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "idle backend gone", func() bool { return backendsOf(t, ctx, direct, idleApp) == 0 })
	_, err := idle.Exec(qctx, "SELECT 1")
	if code := sqlState(err); err == nil || code != "" && code != "57P01" && code != "08006" {
		t.Fatalf("statement on a session whose backend was terminated: %v", err)
	}
	p.mustAlive(t, ctx)
}

// TestClientDisconnectsMidQuery: a client that vanishes while its query
// runs does not leave the query running on the backend; nor does one that
// vanishes inside a transaction leave the backend session behind.
func TestClientDisconnectsMidQuery(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	direct := connectDirect(t, ctx)

	t.Run("running query", func(t *testing.T) {
		app := tableName(t)
		conn := p.connectApp(t, ctx, app)
		marker := "/* " + app + " */"
		go func() { _, _ = conn.Exec(ctx, marker+" SELECT pg_sleep(30)") }()
		waitActive(t, ctx, direct, app)
		if n := activeQueries(t, ctx, direct, marker); n != 1 {
			t.Fatalf("%d queries marked %s", n, marker)
		}
		// Close the socket under pgx, as a crashed client would.
		_ = conn.PgConn().Conn().Close()
		eventually(t, 15*time.Second, "the backend query is canceled", func() bool {
			return activeQueries(t, ctx, direct, marker) == 0
		})
		eventually(t, 15*time.Second, "the backend session ends", func() bool {
			return backendsOf(t, ctx, direct, app) == 0
		})
	})

	t.Run("raw client mid query", func(t *testing.T) {
		c := p.dialRaw(t)
		c.startup()
		marker := "/* " + tableName(t) + " */"
		q, _ := (&pgproto3.Query{String: marker + " SELECT pg_sleep(30)"}).Encode(nil)
		c.write(q)
		eventually(t, 15*time.Second, "the query runs", func() bool { return activeQueries(t, ctx, direct, marker) == 1 })
		// An abortive close (RST), not a FIN.
		if tc, ok := c.nc.(interface{ SetLinger(int) error }); ok {
			_ = tc.SetLinger(0)
		}
		c.nc.Close()
		eventually(t, 15*time.Second, "the backend query is canceled", func() bool {
			return activeQueries(t, ctx, direct, marker) == 0
		})
	})

	t.Run("Terminate then close mid query", func(t *testing.T) {
		// libpq's PQfinish during a query: Terminate, then FIN. PostgreSQL
		// itself would run the query to its end (client_connection_check_interval
		// is off by default); the proxy's watchdog is meant to do better.
		c := p.dialRaw(t)
		c.startup()
		marker := "/* " + tableName(t) + " */"
		q, _ := (&pgproto3.Query{String: marker + " SELECT pg_sleep(30)"}).Encode(nil)
		c.write(q)
		eventually(t, 15*time.Second, "the query runs", func() bool { return activeQueries(t, ctx, direct, marker) == 1 })
		x, _ := (&pgproto3.Terminate{}).Encode(nil)
		c.write(x)
		c.nc.Close()
		eventually(t, 15*time.Second, "the backend query is canceled", func() bool {
			return activeQueries(t, ctx, direct, marker) == 0
		})
	})

	t.Run("TLS client closes mid query", func(t *testing.T) {
		// tls.Conn.Close sends close_notify before the FIN. A raw client,
		// because pgx would also send a CancelRequest.
		cert, key := selfSignedCert(t)
		tp := startProxy(t, "--tls-cert", cert, "--tls-key", key)
		nc, err := net.DialTimeout("tcp", tp.addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
		req, _ := (&pgproto3.SSLRequest{}).Encode(nil)
		var answer [1]byte
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(nc, answer[:]); err != nil || answer[0] != 'S' {
			t.Fatalf("SSLRequest: %q %v", answer, err)
		}
		tc := tls.Client(nc, &tls.Config{InsecureSkipVerify: true})
		c := &rawClient{t: t, nc: tc, fe: pgproto3.NewFrontend(tc, tc)}
		c.startup()
		marker := "/* " + tableName(t) + " */"
		q, _ := (&pgproto3.Query{String: marker + " SELECT pg_sleep(30)"}).Encode(nil)
		c.write(q)
		eventually(t, 15*time.Second, "the query runs", func() bool { return activeQueries(t, ctx, direct, marker) == 1 })
		_ = tc.Close()
		eventually(t, 15*time.Second, "the backend query is canceled", func() bool {
			return activeQueries(t, ctx, direct, marker) == 0
		})
	})

	t.Run("open transaction", func(t *testing.T) {
		app := tableName(t)
		conn := p.connectApp(t, ctx, app)
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SELECT txid_current()"); err != nil {
			t.Fatal(err)
		}
		_ = conn.PgConn().Conn().Close()
		eventually(t, 15*time.Second, "the backend session ends", func() bool {
			return backendsOf(t, ctx, direct, app) == 0
		})
	})
	p.mustAlive(t, ctx)
}
