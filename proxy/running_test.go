package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// whenRunning calls f, on a goroutine of its own, once a backend of the
// test server other than its own runs a statement whose text holds marker
// (pg_stat_activity), and returns a wait for that goroutine. A cancel
// sent at a fixed delay can find the statement not yet begun, in the
// proxy (nothing to cancel) or at PostgreSQL (which ignores a cancel
// while its backend waits for a command): on a loaded machine 300 ms was
// not always enough.
func whenRunning(t *testing.T, ctx context.Context, marker string, f func()) (wait func()) {
	t.Helper()
	watcher, err := pgconn.Connect(ctx, server.ConnString("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		defer watcher.Close(context.Background())
		for {
			res, err := watcher.Exec(ctx, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%"+
				marker+"%' AND pid <> pg_backend_pid()").ReadAll()
			if err != nil {
				done <- err
				return
			}
			if string(res[0].Rows[0][0]) != "0" {
				f()
				done <- nil
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatalf("waiting for a statement marked %s to run: %v", marker, err)
		}
	}
}
