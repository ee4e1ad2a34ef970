package storage

import (
	"context"
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
	defer conn.Close(ctx)
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
