package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A transaction that reads at its timestamp and then writes is checked
// against the tables it read (storage: rw_check.sql), not against every
// write in the database.

// bothProtocols are the query modes the tests below run in: the simple
// protocol, the extended one with prepared statements, and the extended
// one with the Parse in the Execute's batch.
var bothProtocols = []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec}

// execIn runs sqls on conn in query mode qm (execAs).
func execIn(t *testing.T, ctx context.Context, conn *pgx.Conn, qm pgx.QueryExecMode, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := execAs(ctx, conn, qm, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// backgroundWrites writes table other from its own session until the test
// ends, and returns how many writes committed so far. A write that fails
// fails the test.
func backgroundWrites(t *testing.T, ctx context.Context, url, other string) func() int {
	t.Helper()
	conn := connectTo(t, ctx, url)
	done := make(chan struct{})
	counts := make(chan int)
	go func() {
		defer close(counts)
		n, failed := 0, false
		for {
			if failed {
				// Answers counts until the test ends.
				select {
				case <-done:
					return
				case counts <- n:
				}
				continue
			}
			select {
			case <-done:
				return
			case counts <- n:
				continue
			default:
			}
			if _, err := conn.Exec(ctx, "INSERT INTO "+other+" VALUES (1)"); err != nil {
				t.Errorf("background write to %s: %v", other, err)
				failed = true
				continue
			}
			n++
		}
	}()
	t.Cleanup(func() {
		close(done)
		for range counts {
		}
	})
	return func() int { return <-counts }
}

// TestTxnWriteAfterReadOtherTables: a transaction that reads acc and then
// writes acc commits while other sessions write another table, before and
// during it (it failed with 40001 when any write began since its read);
// a write to acc itself since its read still fails it with 40001, and it
// writes nothing.
func TestTxnWriteAfterReadOtherTables(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	url := p.URL("postgres", db)
	a := connectTo(t, ctx, url)
	b := connectTo(t, ctx, url)
	mustExec(t, ctx, a, "CREATE TABLE acc (id int PRIMARY KEY, bal int)", "CREATE TABLE other (x int)",
		"INSERT INTO acc VALUES (1, 100), (2, 100)")
	written := backgroundWrites(t, ctx, url, "other")
	for _, qm := range bothProtocols {
		t.Run(qm.String(), func(t *testing.T) {
			before := written()
			base := count(t, ctx, b, "SELECT sum(bal) FROM acc", qm)
			for i := 0; i < 10; i++ {
				execIn(t, ctx, a, qm, "BEGIN")
				if got := count(t, ctx, a, "SELECT sum(bal) FROM acc", qm); got != base+2*i {
					t.Fatalf("sum %d, want %d", got, base+2*i)
				}
				// At least one write to other is known to begin after the read.
				execIn(t, ctx, b, qm, "INSERT INTO other VALUES (2)")
				execIn(t, ctx, a, qm, "UPDATE acc SET bal = bal + 1 WHERE id = 1", "UPDATE acc SET bal = bal + 1 WHERE id = 2")
				if _, err := execAs(ctx, a, qm, "COMMIT"); err != nil {
					t.Fatalf("COMMIT %d of a transaction that read and wrote acc while others wrote other: %v", i, err)
				}
			}
			t.Logf("%d background writes to other during the transactions", written()-before)

			execIn(t, ctx, a, qm, "BEGIN")
			sum := count(t, ctx, a, "SELECT sum(bal) FROM acc", qm)
			execIn(t, ctx, b, qm, "UPDATE acc SET bal = bal - 10 WHERE id = 2")
			execIn(t, ctx, a, qm, "UPDATE acc SET bal = bal + 1 WHERE id = 1")
			_, err := execAs(ctx, a, qm, "COMMIT")
			wantCode(t, err, "40001")
			if got := count(t, ctx, b, "SELECT sum(bal) FROM acc", qm); got != sum-10 {
				t.Fatalf("sum %d after the failed transaction, want %d", got, sum-10)
			}
			execIn(t, ctx, b, qm, "UPDATE acc SET bal = bal + 10 WHERE id = 2")
		})
	}
}

// TestTxnWriteAfterReadDisjointBothCommit: two transactions that each read
// and write their own table, overlapping, both commit (the second failed
// with 40001: the first's write began since its read).
func TestTxnWriteAfterReadDisjointBothCommit(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	url := p.URL("postgres", db)
	a := connectTo(t, ctx, url)
	b := connectTo(t, ctx, url)
	mustExec(t, ctx, a, "CREATE TABLE ta (id int PRIMARY KEY, n int)", "CREATE TABLE tb (id int PRIMARY KEY, n int)",
		"INSERT INTO ta VALUES (1, 0)", "INSERT INTO tb VALUES (1, 0)")
	for i, qm := range bothProtocols {
		t.Run(qm.String(), func(t *testing.T) {
			execIn(t, ctx, a, qm, "BEGIN")
			execIn(t, ctx, b, qm, "BEGIN")
			if got := count(t, ctx, a, "SELECT n FROM ta WHERE id = 1", qm); got != i {
				t.Fatalf("ta.n = %d, want %d", got, i)
			}
			if got := count(t, ctx, b, "SELECT n FROM tb WHERE id = 1", qm); got != i {
				t.Fatalf("tb.n = %d, want %d", got, i)
			}
			execIn(t, ctx, a, qm, "UPDATE ta SET n = n + 1 WHERE id = 1")
			execIn(t, ctx, b, qm, "UPDATE tb SET n = n + 1 WHERE id = 1")
			if _, err := execAs(ctx, a, qm, "COMMIT"); err != nil {
				t.Fatalf("COMMIT of the transaction on ta: %v", err)
			}
			if _, err := execAs(ctx, b, qm, "COMMIT"); err != nil {
				t.Fatalf("COMMIT of the transaction on tb, after the one on ta: %v", err)
			}
		})
	}
}

// TestTxnReadNeverAbortsWrite: an open read-only transaction that read acc
// makes no write to acc fail or wait, autocommit or read-then-write, and
// still reads its own timestamp after them.
func TestTxnReadNeverAbortsWrite(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	url := p.URL("postgres", db)
	r := connectTo(t, ctx, url)
	w := connectTo(t, ctx, url)
	mustExec(t, ctx, r, "CREATE TABLE acc (id int PRIMARY KEY, bal int)", "INSERT INTO acc VALUES (1, 100)")
	for _, qm := range bothProtocols {
		t.Run(qm.String(), func(t *testing.T) {
			execIn(t, ctx, r, qm, "BEGIN")
			seen := count(t, ctx, r, "SELECT bal FROM acc WHERE id = 1", qm)
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			execIn(t, wctx, w, qm, "UPDATE acc SET bal = bal + 1 WHERE id = 1")
			execIn(t, wctx, w, qm, "BEGIN")
			count(t, wctx, w, "SELECT sum(bal) FROM acc", qm)
			execIn(t, wctx, w, qm, "UPDATE acc SET bal = bal + 1 WHERE id = 1")
			if _, err := execAs(wctx, w, qm, "COMMIT"); err != nil {
				t.Fatalf("COMMIT of a read-then-write transaction while a read-only one is open: %v", err)
			}
			if got := count(t, ctx, r, "SELECT bal FROM acc WHERE id = 1", qm); got != seen {
				t.Fatalf("the read-only transaction read %d, then %d", seen, got)
			}
			execIn(t, ctx, r, qm, "COMMIT")
		})
	}
}
