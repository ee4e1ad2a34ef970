package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestSessionState: what PostgreSQL tells a client about its session
// reaches it through the proxy, at startup and later.
func TestSessionState(t *testing.T) {
	t.Parallel()
	p := startProxy(t)

	t.Run("parameter status", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		direct := connectDirect(t, ctx)
		// Startup reports what PostgreSQL reports.
		for _, name := range []string{"server_version", "server_encoding", "client_encoding", "DateStyle", "integer_datetimes", "standard_conforming_strings"} {
			if got, want := conn.PgConn().ParameterStatus(name), direct.PgConn().ParameterStatus(name); got != want || got == "" {
				t.Errorf("ParameterStatus(%s) = %q, PostgreSQL says %q", name, got, want)
			}
		}
		// And changes made later.
		if _, err := conn.Exec(ctx, "SET application_name = 'renamed'; SET TimeZone = 'Asia/Kolkata'"); err != nil {
			t.Fatal(err)
		}
		if got := conn.PgConn().ParameterStatus("application_name"); got != "renamed" {
			t.Errorf("application_name %q", got)
		}
		if got := conn.PgConn().ParameterStatus("TimeZone"); got != "Asia/Kolkata" {
			t.Errorf("TimeZone %q", got)
		}
		var ts time.Time
		if err := conn.QueryRow(ctx, "SELECT '2024-01-01 00:00:00'::timestamp AT TIME ZONE 'UTC'").Scan(&ts); err != nil {
			t.Fatal(err)
		}
		if !ts.Equal(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("timestamptz %v", ts)
		}
	})

	t.Run("idle in transaction timeout", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		// PostgreSQL ends the session on its own while it is idle; the
		// client learns it at its next statement, as it would directly.
		run := func(url string) error {
			conn := connectURL(t, ctx, url)
			if _, err := conn.Exec(ctx, "SET idle_in_transaction_session_timeout = 300"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond)
			qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			_, err := conn.Exec(qctx, "SELECT 1")
			return err
		}
		// Directly, pgx's next write fails (broken pipe) and it never reads
		// PostgreSQL's FATAL 25P03. Through the proxy the client must get
		// an error too: PostgreSQL's 25P03 if the proxy read it, else the
		// proxy's 08006 (today's behaviour: its write to the backend fails
		// first).
		if err := run(directURL("postgres", "postgres")); err == nil {
			t.Fatal("directly: the session survived the timeout")
		}
		via := run(p.URL("postgres", "postgres"))
		if code := sqlState(via); code != "25P03" && code != "08006" {
			t.Fatalf("through the proxy: %v (SQLSTATE %q), want 25P03 or 08006", via, code)
		}
		p.mustAlive(t, ctx)
	})

	t.Run("temporary objects stay with their session", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		a := p.connect(t, ctx)
		b := p.connect(t, ctx)
		if _, err := a.Exec(ctx, "CREATE TEMP TABLE mine (v int); INSERT INTO mine VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Exec(ctx, "PREPARE only_a AS SELECT 42"); err != nil {
			t.Fatal(err)
		}
		_, err := b.Exec(ctx, "SELECT * FROM mine")
		wantCode(t, err, "42P01")
		_, err = b.Exec(ctx, "EXECUTE only_a")
		wantCode(t, err, "26000")
		var n int
		if err := a.QueryRow(ctx, "EXECUTE only_a").Scan(&n); err != nil || n != 42 {
			t.Fatalf("EXECUTE in its own session: %d %v", n, err)
		}
	})
}

// TestConcurrentSessions runs many sessions at once through one proxy,
// each checking that it gets its own answers.
func TestConcurrentSessions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	const sessions, queries = 40, 25
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, p.URL("postgres", "postgres")+fmt.Sprintf("&application_name=conc%d", i))
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			for j := range queries {
				var app string
				var v int
				mode := pgx.QueryExecModeCacheStatement
				if j%2 == 1 {
					mode = pgx.QueryExecModeSimpleProtocol
				}
				if err := conn.QueryRow(ctx, "SELECT current_setting('application_name'), $1::int", mode, i*1000+j).Scan(&app, &v); err != nil {
					errs <- err
					return
				}
				if app != fmt.Sprintf("conc%d", i) || v != i*1000+j {
					errs <- fmt.Errorf("session %d query %d: got %q %d", i, j, app, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestProtocolNegotiation: a client that asks for protocol 3.2 (PostgreSQL
// 18's, with longer cancel keys) is told 3.0 and works, cancel included;
// so does one that sends _pq_ options.
func TestProtocolNegotiation(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	conn, err := connectCancelable(t, ctx, p.URL("postgres", "postgres")+"&max_protocol_version=3.2&min_protocol_version=3.0")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT $1::int", 9).Scan(&n); err != nil || n != 9 {
		t.Fatalf("%d %v", n, err)
	}
	qctx, cancel := context.WithTimeout(ctx, cancelAfter)
	defer cancel()
	_, err = conn.Exec(qctx, "SELECT pg_sleep(30)")
	wantCode(t, err, "57014")

	// A raw StartupMessage asking for 3.2 and an unknown _pq_ option gets
	// NegotiateProtocolVersion naming both.
	c := p.dialRaw(t)
	msg, _ := (&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersion30 | 2,
		Parameters:      map[string]string{"user": "postgres", "database": "postgres", "_pq_.no_such_option": "x"},
	}).Encode(nil)
	c.write(msg)
	var negotiated *pgproto3.NegotiateProtocolVersion
	for {
		m := c.receive()
		if np, ok := m.(*pgproto3.NegotiateProtocolVersion); ok {
			cp := *np
			negotiated = &cp
		}
		if er, ok := m.(*pgproto3.ErrorResponse); ok {
			t.Fatalf("startup: %s %s", er.Code, er.Message)
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	if negotiated == nil || negotiated.NewestMinorProtocol != 0 ||
		len(negotiated.UnrecognizedOptions) != 1 || negotiated.UnrecognizedOptions[0] != "_pq_.no_such_option" {
		t.Fatalf("NegotiateProtocolVersion: %+v", negotiated)
	}
}
