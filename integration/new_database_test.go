package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestNewDatabaseConnections: the first session through mzproxy in a new
// database costs the backend two sessions, the client's and the lease's
// (which installs the schema before it registers), not a third one for
// the install alone (issue 16: every sqllogictest file runs in a new
// database, and a backend start costs about a third of what the install
// script does). Counted by pg_stat_database.sessions once the proxy has
// stopped and every backend of the database has exited (each flushes its
// count when it exits).
func TestNewDatabaseConnections(t *testing.T) {
	ctx := testContext(t)
	name := fmt.Sprintf("newdb_%d", os.Getpid())
	execDirect(t, ctx, "CREATE DATABASE "+name)
	t.Cleanup(func() { execDirect(t, context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })

	p := startProxy(t)
	conn := connectURL(t, ctx, p.URL("postgres", name))
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	p.stop(t)

	direct := connectDirect(t, ctx)
	eventually(t, 30*time.Second, "every backend of the new database exited", func() bool {
		var n int
		if err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	var sessions int64
	if _, err := direct.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		t.Fatal(err)
	}
	if err := direct.QueryRow(ctx, "SELECT sessions FROM pg_stat_database WHERE datname = $1", name).Scan(&sessions); err != nil {
		t.Fatal(err)
	}
	if sessions != 2 {
		t.Errorf("the first session in a new database cost the backend %d sessions, want 2 (the client's and the lease's)", sessions)
	}
}
