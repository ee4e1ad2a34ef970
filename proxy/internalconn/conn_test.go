package internalconn

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mzproxy/mzproxy/proxy/embedded"
	"github.com/mzproxy/mzproxy/proxy/embedded/embeddedtest"
)

var server *embedded.Server

func TestMain(m *testing.M) { os.Exit(embeddedtest.Main(m, "internalconn", &server)) }

// tracked is a Conn to the test server that counts its dials and
// tells the backend pid of its connection.
type tracked struct {
	*Conn
	dials int
}

func newTracked(t *testing.T) *tracked {
	tc := &tracked{}
	tc.Conn = New(nil, func(ctx context.Context) (*pgx.Conn, error) {
		tc.dials++
		return pgx.Connect(ctx, server.ConnString("", "postgres"))
	})
	t.Cleanup(tc.Close)
	return tc
}

func (tc *tracked) pid(t *testing.T) uint32 {
	t.Helper()
	var pid uint32
	if err := tc.Run(context.Background(), Once, func(c *pgx.Conn) error { pid = c.PgConn().PID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return pid
}

// terminate ends the backend pid as DROP DATABASE ... WITH (FORCE) or a
// restart would (57P01) and waits until it is gone.
func terminate(t *testing.T, pid uint32) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, server.ConnString("", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1::int, 10000)", pid); err != nil {
		t.Fatal(err)
	}
}

// awaitSleeping waits until backend pid runs the test's pg_sleep.
func awaitSleeping(t *testing.T, pid uint32) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, server.ConnString("", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep(30)%'", int(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
	}
	t.Fatal("the statement did not start within 20s")
}

// TestDeadConnectionRedialedBeforeUse: a connection the server ended while
// idle is found dead before the statement is sent, so even a statement
// that must not run twice runs once, on a new connection.
func TestDeadConnectionRedialedBeforeUse(t *testing.T) {
	tc := newTracked(t)
	terminate(t, tc.pid(t))
	runs := 0
	err := tc.Run(context.Background(), Once, func(c *pgx.Conn) error {
		runs++
		_, err := c.Exec(context.Background(), "SELECT 1")
		return err
	})
	if err != nil || runs != 1 || tc.dials != 2 {
		t.Fatalf("after the idle connection was terminated: err %v, runs %d, dials %d (want nil, 1, 2)", err, runs, tc.dials)
	}
}

// TestEndedUnderStatement: a connection the server ends while a statement
// runs is dropped; the statement runs again on a new connection only if
// it may (Idempotent), never when it may have written (Once).
func TestEndedUnderStatement(t *testing.T) {
	for _, retry := range []Retry{Once, Idempotent} {
		tc := newTracked(t)
		pid := tc.pid(t)
		runs := 0
		done := make(chan error, 1)
		go func() {
			done <- tc.Run(context.Background(), retry, func(c *pgx.Conn) error {
				runs++
				sql := "SELECT 1"
				if runs == 1 {
					sql = "SELECT pg_sleep(30)"
				}
				_, err := c.Exec(context.Background(), sql)
				return err
			})
		}()
		awaitSleeping(t, pid)
		terminate(t, pid)
		err := <-done
		switch {
		case retry == Once && (err == nil || runs != 1):
			t.Errorf("Once: err %v after %d runs, want the 57P01 after 1", err, runs)
		case retry == Idempotent && (err != nil || runs != 2):
			t.Errorf("Idempotent: err %v after %d runs, want nil after 2", err, runs)
		}
		if err := tc.Run(context.Background(), Once, func(c *pgx.Conn) error { return c.Ping(context.Background()) }); err != nil {
			t.Errorf("the next Run after the connection ended: %v", err)
		}
	}
}
