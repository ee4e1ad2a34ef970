package integration

import (
	"testing"
)

// TestExplainTimestampThenBegin: EXPLAIN TIMESTAMP over the simple protocol
// is answered by the proxy after its own queries choose the timestamp
// (extended protocol, no Sync). The transaction those queries opened on the
// backend must end with the answer: a BEGIN that follows must start a
// transaction of its own, in which a read-only transaction can still set
// its isolation level (PostgreSQL refuses SET TRANSACTION ISOLATION LEVEL
// after the first query of a transaction, 25001).
func TestExplainTimestampThenBegin(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE et (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO et VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	for _, begin := range []string{"BEGIN", "BEGIN ISOLATION LEVEL SERIALIZABLE", "START TRANSACTION READ ONLY"} {
		var text string
		if err := conn.QueryRow(ctx, "EXPLAIN TIMESTAMP FOR SELECT * FROM et", simple(conn)).Scan(&text); err != nil {
			t.Fatalf("EXPLAIN TIMESTAMP: %v", err)
		}
		if _, err := conn.Exec(ctx, begin, simple(conn)); err != nil {
			t.Fatalf("%s after EXPLAIN TIMESTAMP: %v", begin, err)
		}
		var first, second int64
		if err := conn.QueryRow(ctx, "SELECT mz_now()", simple(conn)).Scan(&first); err != nil {
			t.Fatalf("%s; SELECT mz_now() after EXPLAIN TIMESTAMP: %v", begin, err)
		}
		if err := conn.QueryRow(ctx, "SELECT mz_now() FROM et", simple(conn)).Scan(&second); err != nil {
			t.Fatalf("%s; second read: %v", begin, err)
		}
		if first != second {
			t.Errorf("%s: the transaction read at %d, then at %d", begin, first, second)
		}
		if _, err := conn.Exec(ctx, "COMMIT", simple(conn)); err != nil {
			t.Fatalf("COMMIT: %v", err)
		}
	}
}
