package integration

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
)

// sqlState is the SQLSTATE of err, or "" when err carries none.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// wantCode fails the test unless err carries SQLSTATE code.
func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want SQLSTATE %s", code)
	}
	if got := sqlState(err); got != code {
		t.Fatalf("got error %v (SQLSTATE %q), want SQLSTATE %s", err, got, code)
	}
}

var nameSeq atomic.Int64

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// tableName is a table name no other test uses: the tests share one
// PostgreSQL and run in parallel.
func tableName(t testing.TB) string {
	n := strings.ToLower(unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "_"))
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return fmt.Sprintf("t_%s_%d", strings.Trim(n, "_"), nameSeq.Add(1))
}

// execDirect runs sql on PostgreSQL itself, not through the proxy.
func execDirect(t testing.TB, ctx context.Context, sql string, args ...any) {
	t.Helper()
	conn := connectDirect(t, ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	conn.Close(ctx)
}

// eventually polls cond every 100ms until it holds or d has passed.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// activeQueries counts backends, seen directly in pg_stat_activity, that
// run a query containing marker (a comment unique to the test). The
// counting query itself is excluded.
func activeQueries(t testing.TB, ctx context.Context, direct *pgx.Conn, marker string) int {
	t.Helper()
	var n int
	err := direct.QueryRow(ctx,
		`SELECT count(*) FROM pg_stat_activity
		 WHERE state = 'active' AND pid <> pg_backend_pid() AND position($1 in query) > 0`, marker).Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

// sleepingQueries counts the backends (not direct's own) whose statement
// holds marker and is in its pg_sleep: running, past the Parse and the
// round trips a proxy may make with its text first, which show as active
// too (activeQueries).
func sleepingQueries(t testing.TB, ctx context.Context, direct *pgx.Conn, marker string) int {
	t.Helper()
	var n int
	err := direct.QueryRow(ctx,
		`SELECT count(*) FROM pg_stat_activity
		 WHERE state = 'active' AND wait_event = 'PgSleep' AND pid <> pg_backend_pid() AND position($1 in query) > 0`, marker).Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

// connectApp opens a pgx connection through p with an application_name,
// by which the test finds its backend in pg_stat_activity.
func (p *proxyProc) connectApp(t testing.TB, ctx context.Context, app string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, p.URL("postgres", "postgres")+"&application_name="+app)
	if err != nil {
		t.Fatalf("connecting through mzproxy: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// rawClient is a bare TCP connection to the proxy, for writing bytes no
// driver would send.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	fe *pgproto3.Frontend
}

func (p *proxyProc) dialRaw(t testing.TB) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", p.addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawClient{t: t, nc: nc, fe: pgproto3.NewFrontend(nc, nc)}
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("writing to the proxy: %v", err)
	}
}

// startup sends a StartupMessage for postgres/postgres and reads up to
// ReadyForQuery, returning the BackendKeyData.
func (c *rawClient) startup() *pgproto3.BackendKeyData {
	c.t.Helper()
	msg, _ := (&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters:      map[string]string{"user": "postgres", "database": "postgres"},
	}).Encode(nil)
	c.write(msg)
	var key *pgproto3.BackendKeyData
	for {
		m := c.receive()
		switch m := m.(type) {
		case *pgproto3.BackendKeyData:
			k := *m
			key = &k
		case *pgproto3.ErrorResponse:
			c.t.Fatalf("startup failed: %s %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return key
		}
	}
}

func (c *rawClient) receive() pgproto3.BackendMessage {
	c.t.Helper()
	m, err := c.fe.Receive()
	if err != nil {
		c.t.Fatalf("reading from the proxy: %v", err)
	}
	return m
}

// expectFatal reads until an ErrorResponse, which must carry code (or one
// of the codes separated by "|"), and then expects the proxy to close the
// connection.
func (c *rawClient) expectFatal(code string) {
	c.t.Helper()
	for {
		m, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("connection ended (%v) before an ErrorResponse %s", err, code)
		}
		if er, ok := m.(*pgproto3.ErrorResponse); ok {
			if !slices.Contains(strings.Split(code, "|"), er.Code) {
				c.t.Fatalf("got ErrorResponse %s %q, want %s", er.Code, er.Message, code)
			}
			break
		}
	}
	c.expectClosed()
}

// expectClosed expects the proxy to close the connection without sending
// anything more.
func (c *rawClient) expectClosed() {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	var b [1]byte
	n, err := c.nc.Read(b[:])
	if n > 0 {
		c.t.Fatalf("got more bytes after the error (%q), want the connection closed", b[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("the proxy did not close the connection")
	}
	if err != io.EOF && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		c.t.Fatalf("reading after the error: %v", err)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// sendCancel sends a raw CancelRequest for (pid, secret) to the proxy and
// waits for it to close the connection, as it does once it acted on it.
func (p *proxyProc) sendCancel(t testing.TB, pid uint32, secret []byte) {
	t.Helper()
	rawCancel(t, "tcp", p.addr, pid, secret)
}

// rawCancel sends a raw CancelRequest for (pid, secret) to the server at
// address and waits for it to close the connection (PostgreSQL's
// postmaster and mzproxy do once they acted on it).
func rawCancel(t testing.TB, network, address string, pid uint32, secret []byte) {
	t.Helper()
	nc, err := net.DialTimeout(network, address, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	buf := binary.BigEndian.AppendUint32(nil, uint32(12+len(secret)))
	buf = binary.BigEndian.AppendUint32(buf, 80877102)
	buf = binary.BigEndian.AppendUint32(buf, pid)
	buf = append(buf, secret...)
	if _, err := nc.Write(buf); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, nc)
}

// mustAlive checks the proxy still serves a normal client.
func (p *proxyProc) mustAlive(t testing.TB, ctx context.Context) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("mzproxy exited: %v", p.err)
	default:
	}
	conn, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
	if err != nil {
		t.Fatalf("a new connection after the test failed: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("SELECT 1 on a new connection: %v", err)
	}
}

// connectURL opens a pgx connection to url, closed when the test ends.
func connectURL(t testing.TB, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// connectCancelable opens a pgx connection to url whose context
// cancellation sends a CancelRequest (pgconn's default closes the socket).
func connectCancelable(t testing.TB, ctx context.Context, url string) (*pgx.Conn, error) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 20 * time.Second}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, nil
}

// cancelAfter is how long a test lets pg_sleep(30) run before its context
// cancels it: long enough, on a loaded machine, for the query to have
// reached the backend (a cancel that arrives before is dropped, as
// PostgreSQL drops one for an idle session).
const cancelAfter = 2 * time.Second

// pgxModes are pgx's five query exec modes.
var pgxModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

// connectMode opens a pgx connection to url whose queries run in exec
// mode mode; it is closed when the test ends.
func connectMode(t testing.TB, ctx context.Context, url string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
