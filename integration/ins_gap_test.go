package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// overlappingKeyVersions counts, directly in PostgreSQL, the pairs of
// versions of one key of table (column k) visible at a common timestamp.
func overlappingKeyVersions(t *testing.T, ctx context.Context, direct *pgx.Conn, table string) int {
	t.Helper()
	var hist string
	if err := direct.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE oid = $1::regclass", table).Scan(&hist); err != nil {
		t.Fatal(err)
	}
	return count(t, ctx, direct, "SELECT count(*) FROM "+hist+" a JOIN "+hist+` b
		ON a.k = b.k AND a.ctid < b.ctid AND a.mz_from < b.mz_to AND b.mz_from < a.mz_to`, simple(direct))
}

// TestWritesInsertOfKeyDeletedLater: through mzproxy, a write whose T was
// chosen before its INSERT of key 1 (a block after DDL; the second
// statement of an autocommit query string, which waits for the delete),
// while another session deletes key 1 and commits at a later T, fails with
// 40001 (storage version 22), and so does a block's UPDATE that moves a row
// to key 1: history never shows two versions of key 1 at once. The session
// goes on, and so does the other; an INSERT of another key in the same
// position commits.
func TestWritesInsertOfKeyDeletedLater(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	y := connectTo(t, ctx, p.URL("postgres", db))
	x := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, y, "CREATE TABLE k (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"INSERT INTO k VALUES (1, 0), (2, 0)", "INSERT INTO b VALUES (1, 0)")

	// A block whose T the DDL fixed; the delete commits after it, at a later T.
	mustExec(t, ctx, y, "BEGIN", "CREATE TABLE side (a int)")
	time.Sleep(10 * time.Millisecond) // the clock moves past Y's T
	mustExec(t, ctx, x, "DELETE FROM k WHERE k = 1")
	_, err := y.Exec(ctx, "INSERT INTO k VALUES (1, 1)", simple(y))
	wantCode(t, err, "40001")
	mustExec(t, ctx, y, "ROLLBACK")
	if n := overlappingKeyVersions(t, ctx, direct, "k"); n != 0 {
		t.Fatalf("block after DDL: %d pairs of versions of one key overlap", n)
	}
	// Another key deleted meanwhile does not matter.
	mustExec(t, ctx, y, "BEGIN", "CREATE TABLE side (a int)")
	time.Sleep(10 * time.Millisecond)
	mustExec(t, ctx, x, "DELETE FROM k WHERE k = 2")
	mustExec(t, ctx, y, "INSERT INTO k VALUES (3, 0)", "COMMIT")

	// An autocommit query string of two statements: the first chooses T,
	// the second waits for a block's delete of key 1, which commits later.
	mustExec(t, ctx, x, "INSERT INTO k VALUES (1, 0)", "BEGIN", "DELETE FROM k WHERE k = 1")
	const marker = "/* ins_gap waits */"
	inserted := make(chan error, 1)
	go func() {
		_, err := y.Exec(ctx, "UPDATE b SET v = v + 1; INSERT INTO k VALUES (1, 1) "+marker, simple(y))
		inserted <- err
	}()
	eventually(t, 30*time.Second, "Y's INSERT waits for X's delete", func() bool {
		return count(t, ctx, direct, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position('`+marker+`' in query) > 0`, simple(direct)) == 1
	})
	mustExec(t, ctx, x, "COMMIT")
	wantCode(t, <-inserted, "40001")
	if n := overlappingKeyVersions(t, ctx, direct, "k"); n != 0 {
		t.Fatalf("autocommit query string: %d pairs of versions of one key overlap", n)
	}
	if v := count(t, ctx, y, "SELECT v FROM b WHERE k = 1", simple(y)); v != 0 {
		t.Fatalf("b.v = %d after the failed query string, want 0", v)
	}
	mustExec(t, ctx, y, "INSERT INTO k VALUES (1, 1)")
	if n := count(t, ctx, x, "SELECT count(*) FROM k", simple(x)); n != 2 {
		t.Fatalf("%d rows in k, want 2 (keys 1 and 3)", n)
	}

	// An UPDATE that moves a row to a key deleted at a later T: the same.
	mustExec(t, ctx, y, "BEGIN", "CREATE TABLE side2 (a int)")
	time.Sleep(10 * time.Millisecond)
	mustExec(t, ctx, x, "DELETE FROM k WHERE k = 1")
	_, err = y.Exec(ctx, "UPDATE k SET k = 1 WHERE k = 3", simple(y))
	wantCode(t, err, "40001")
	mustExec(t, ctx, y, "ROLLBACK")
	if n := overlappingKeyVersions(t, ctx, direct, "k"); n != 0 {
		t.Fatalf("UPDATE to a deleted key: %d pairs of versions of one key overlap", n)
	}
}
