package integration

import (
	"testing"
)

// TestSmoke: a query through the proxy answers as PostgreSQL does.
func TestSmoke(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t)
	conn := p.connect(t, ctx)
	var n int
	var s string
	if err := conn.QueryRow(ctx, "SELECT 41 + 1, current_user").Scan(&n, &s); err != nil {
		t.Fatal(err)
	}
	if n != 42 || s != "postgres" {
		t.Fatalf("got %d %q", n, s)
	}
}
