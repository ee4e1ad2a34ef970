package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitActive waits until the backend of the session with application_name
// app is running a statement, seen directly in pg_stat_activity.
func waitActive(t testing.TB, ctx context.Context, direct *pgx.Conn, app string) {
	t.Helper()
	waitOneRow(t, ctx, direct, app+" active in pg_stat_activity",
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'", app)
}

// waitOneRow waits (30 s at most) until countSQL, a count(*) of what the
// test waits for, counts exactly one.
func waitOneRow(t testing.TB, ctx context.Context, direct *pgx.Conn, what, countSQL string, args ...any) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() bool {
		var n int
		if err := direct.QueryRow(ctx, countSQL, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
}

// TestCancelRoutesToTheRightSession: a CancelRequest carrying the key the
// proxy issued to one session cancels that session's query and no other;
// a request with a wrong key does nothing.
func TestCancelRoutesToTheRightSession(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	direct := connectDirect(t, ctx)
	appA, appB := tableName(t)+"_a", tableName(t)+"_b"
	a := p.connectApp(t, ctx, appA)
	b := p.connectApp(t, ctx, appB)

	// The proxy issues its own keys: they are not the backend's.
	var backendPID uint32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backendPID); err != nil {
		t.Fatal(err)
	}
	if a.PgConn().PID() == backendPID {
		t.Logf("note: proxy-issued pid equals the backend pid %d (by chance?)", backendPID)
	}

	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { _, err := a.Exec(ctx, "SELECT pg_sleep(30)"); errA <- err }()
	go func() { _, err := b.Exec(ctx, "SELECT pg_sleep(4)"); errB <- err }()
	waitActive(t, ctx, direct, appA)
	waitActive(t, ctx, direct, appB)

	// Wrong secret and unknown pid first: nothing may happen.
	wrong := append([]byte(nil), a.PgConn().SecretKey()...)
	wrong[0] ^= 0xff
	p.sendCancel(t, a.PgConn().PID(), wrong)
	p.sendCancel(t, a.PgConn().PID()^0x5a5a, a.PgConn().SecretKey())
	p.sendCancel(t, backendPID, a.PgConn().SecretKey())
	select {
	case err := <-errA:
		t.Fatalf("session A ended after cancel requests with wrong keys: %v", err)
	case <-time.After(time.Second):
	}

	if err := a.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errA:
		wantCode(t, err, "57014")
	case <-time.After(20 * time.Second):
		t.Fatal("session A was not canceled within 20s")
	}
	select {
	case err := <-errB:
		if err != nil {
			t.Fatalf("session B: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("session B did not complete")
	}
	// Both sessions go on.
	for _, c := range []*pgx.Conn{a, b} {
		var n int
		if err := c.QueryRow(ctx, "SELECT 5").Scan(&n); err != nil || n != 5 {
			t.Fatalf("after cancel: %d %v", n, err)
		}
	}

	// A cancel that arrives while the session is idle does not cancel its
	// next statement.
	if err := a.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := a.Exec(ctx, "SELECT pg_sleep(0.5)"); err != nil {
		t.Fatalf("statement after an idle cancel: %v", err)
	}
}
