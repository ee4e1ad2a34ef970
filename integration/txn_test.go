package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Read-only transactions: read at their first statement's timestamp, held
// until they end, confined to their timedomain.

// explainedTimestamp runs EXPLAIN TIMESTAMP for query and returns its query
// timestamp.
func explainedTimestamp(t *testing.T, ctx context.Context, conn *pgx.Conn, query string, mode pgx.QueryExecMode) uint64 {
	t.Helper()
	var text string
	if err := conn.QueryRow(ctx, "EXPLAIN TIMESTAMP FOR "+query, mode).Scan(&text); err != nil {
		t.Fatalf("EXPLAIN TIMESTAMP FOR %s: %v", query, err)
	}
	m := queryTimestamp.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no query timestamp in:\n%s", text)
	}
	ts, _ := strconv.ParseUint(m[1], 10, 64)
	return ts
}

// readHolds is the proxy's count of read holds granted now.
func (p *proxyProc) readHolds(t testing.TB) float64 {
	t.Helper()
	_, m := get(t, p.metricsAddr(t), "/metrics")
	return metricValue(t, m, "mzproxy_read_holds")
}

func (p *proxyProc) awaitHolds(t testing.TB, want float64, what string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%v read holds %s", want, what), func() bool { return p.readHolds(t) == want })
}

func mustExec(t *testing.T, ctx context.Context, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func count(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string, mode pgx.QueryExecMode) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx, sql, mode).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestTxnReadOnlyTimestamp: a transaction whose first statement reads
// reads every statement at that statement's timestamp (the present, history
// reads, mz_now() and EXPLAIN TIMESTAMP alike), in a REPEATABLE READ backend
// transaction, holding it until COMMIT; a client's SERIALIZABLE is kept.
func TestTxnReadOnlyTimestamp(t *testing.T) {
	for _, mode := range []struct {
		name string
		args []string
	}{{"present", nil}, {"history", []string{"--history-reads"}}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := testContext(t)
			db := freshDatabase(t, ctx)
			p := startProxy(t, append([]string{"--metrics-listen", "127.0.0.1:0"}, mode.args...)...)
			a := connectTo(t, ctx, p.URL("postgres", db))
			b := connectTo(t, ctx, p.URL("postgres", db))
			mustExec(t, ctx, a, "CREATE TABLE rt (x int)", "INSERT INTO rt VALUES (1)")
			for _, qm := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
				t.Run(qm.String(), func(t *testing.T) {
					mustExec(t, ctx, a, "BEGIN")
					before := count(t, ctx, a, "SELECT count(*) FROM rt", qm)
					var level string
					if err := a.QueryRow(ctx, "SELECT current_setting('transaction_isolation')", qm).Scan(&level); err != nil || level != "repeatable read" {
						t.Fatalf("backend isolation %q, %v; want repeatable read", level, err)
					}
					if got := p.readHolds(t); got != 1 {
						t.Fatalf("%v read holds in the transaction, want 1", got)
					}
					mustExec(t, ctx, b, "INSERT INTO rt VALUES (2)")
					written := readTS(t, ctx, b)
					if got := count(t, ctx, a, "SELECT count(*) FROM rt", qm); got != before {
						t.Fatalf("second read counts %d rows, first %d", got, before)
					}
					var now int64
					if err := a.QueryRow(ctx, "SELECT mz_now() FROM rt LIMIT 1", qm).Scan(&now); err != nil {
						t.Fatal(err)
					}
					if uint64(now) >= written {
						t.Fatalf("mz_now() %d in the transaction is not before a later write at %d", now, written)
					}
					if ts := explainedTimestamp(t, ctx, a, "SELECT * FROM rt", qm); ts != uint64(now) {
						t.Fatalf("EXPLAIN TIMESTAMP %d, mz_now() %d: want the transaction's one timestamp", ts, now)
					}
					mustExec(t, ctx, a, "COMMIT")
					p.awaitHolds(t, 0, "after COMMIT")
					if got := count(t, ctx, a, "SELECT count(*) FROM rt", qm); got != before+1 {
						t.Fatalf("after COMMIT %d rows, want %d", got, before+1)
					}
				})
			}
			// BEGIN pipelined with the first read, as JDBC sends it.
			batch := &pgx.Batch{}
			batch.Queue("BEGIN")
			batch.Queue("SELECT current_setting('transaction_isolation') FROM rt LIMIT 1")
			br := a.SendBatch(ctx, batch)
			if _, err := br.Exec(); err != nil {
				t.Fatal(err)
			}
			var pipelined string
			if err := br.QueryRow().Scan(&pipelined); err != nil || pipelined != "repeatable read" {
				t.Fatalf("pipelined BEGIN and read: backend isolation %q, %v", pipelined, err)
			}
			if err := br.Close(); err != nil {
				t.Fatal(err)
			}
			mustExec(t, ctx, a, "COMMIT")
			// The client's own SERIALIZABLE is not weakened.
			mustExec(t, ctx, a, "BEGIN ISOLATION LEVEL SERIALIZABLE")
			var level string
			if err := a.QueryRow(ctx, "SELECT current_setting('transaction_isolation') FROM rt LIMIT 1", simple(a)).Scan(&level); err != nil || level != "serializable" {
				t.Fatalf("backend isolation %q, %v; want serializable", level, err)
			}
			mustExec(t, ctx, a, "COMMIT")
			// A transaction that begins with a write is not pinned.
			mustExec(t, ctx, a, "BEGIN", "INSERT INTO rt VALUES (3)")
			if err := a.QueryRow(ctx, "SELECT current_setting('transaction_isolation')", simple(a)).Scan(&level); err != nil || level != "read committed" {
				t.Fatalf("backend isolation after a write %q, %v; want read committed", level, err)
			}
			mustExec(t, ctx, a, "COMMIT")
			p.awaitHolds(t, 0, "at the end")
		})
	}
}

// TestTxnWriteAfterRead: a write in a read-only transaction is not refused;
// its writes are at a later timestamp than its reads, so it fails with
// 40001 at COMMIT when another write began since the transaction read, and
// writes nothing.
func TestTxnWriteAfterRead(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	b := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE TABLE wr (x int)")
	mustExec(t, ctx, a, "BEGIN", "SELECT * FROM wr", "INSERT INTO wr VALUES (1)", "COMMIT")
	if got := count(t, ctx, b, "SELECT count(*) FROM wr", simple(b)); got != 1 {
		t.Fatalf("%d rows, want 1", got)
	}
	mustExec(t, ctx, a, "BEGIN", "SELECT * FROM wr")
	mustExec(t, ctx, b, "INSERT INTO wr VALUES (2)")
	if _, err := a.Exec(ctx, "INSERT INTO wr VALUES (3)", simple(a)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Exec(ctx, "COMMIT", simple(a))
	wantCode(t, err, "40001")
	if got := count(t, ctx, b, "SELECT count(*) FROM wr WHERE x = 3", simple(b)); got != 0 {
		t.Fatalf("the failed transaction's row is there (%d)", got)
	}
}

// TestTxnTimedomain: a read-only transaction may read the managed objects
// in the schemas its first read named, and anything unmanaged; another
// managed object is refused with Materialize's error, which aborts the
// transaction; AS OF is exempt, up to the transaction's timestamp.
func TestTxnTimedomain(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn,
		"CREATE SCHEMA s1", "CREATE SCHEMA s2",
		"CREATE TABLE s1.a (x int)", "CREATE TABLE s1.b (x int)", "CREATE TABLE s2.c (x int)",
		"CREATE VIEW s1.v AS SELECT * FROM s2.c",
		"INSERT INTO s2.c VALUES (1)")
	before := readTS(t, ctx, conn)
	for _, qm := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(qm.String(), func(t *testing.T) {
			mustExec(t, ctx, conn, "BEGIN")
			count(t, ctx, conn, "SELECT count(*) FROM s1.a", qm)
			count(t, ctx, conn, "SELECT count(*) FROM s1.b JOIN pg_class ON false", qm)
			// A view in the timedomain reads a table outside it.
			if got := count(t, ctx, conn, "SELECT count(*) FROM s1.v", qm); got != 1 {
				t.Fatalf("view: %d rows", got)
			}
			if got := count(t, ctx, conn, fmt.Sprintf("SELECT count(*) FROM s2.c AS OF %d", before), qm); got != 1 {
				t.Fatalf("AS OF: %d rows", got)
			}
			_, err := execAs(ctx, conn, qm, "SELECT * FROM s2.c AS OF 99999999999999")
			wantCode(t, err, "0A000")
			mustExec(t, ctx, conn, "ROLLBACK", "BEGIN")
			count(t, ctx, conn, "SELECT count(*) FROM s1.a", qm)
			_, err = execAs(ctx, conn, qm, "SELECT * FROM s1.a, s2.c")
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "25000" ||
				pe.Message != "Transactions can only reference objects in the same timedomain. See https://materialize.com/docs/sql/begin/#same-timedomain-error" {
				t.Fatalf("read outside the timedomain: %v, want 25000", err)
			}
			wantDetail := fmt.Sprintf("The following relations in the query are outside the transaction's time domain:\n%q.\"s2\".\"c\"\nOnly the following relations are available:\n%q.\"s1\".\"a\"\n%q.\"s1\".\"b\"\n%q.\"s1\".\"v\"", db, db, db, db)
			if pe.Detail != wantDetail {
				t.Fatalf("detail:\n%s\nwant:\n%s", pe.Detail, wantDetail)
			}
			// The transaction is aborted, as in Materialize.
			_, err = execAs(ctx, conn, qm, "SELECT 1")
			wantCode(t, err, "25P02")
			mustExec(t, ctx, conn, "ROLLBACK")
			p.awaitHolds(t, 0, "after ROLLBACK")
			// A first read naming no managed object leaves the timedomain
			// to the first that does.
			mustExec(t, ctx, conn, "BEGIN")
			count(t, ctx, conn, "SELECT count(*) FROM pg_class WHERE false", qm)
			count(t, ctx, conn, "SELECT count(*) FROM s2.c", qm)
			_, err = execAs(ctx, conn, qm, "SELECT * FROM s1.a")
			wantCode(t, err, "25000")
			mustExec(t, ctx, conn, "ROLLBACK")
		})
	}
	// Names resolve with the search_path of the moment.
	mustExec(t, ctx, conn, "BEGIN", "SELECT * FROM s1.a", "SET LOCAL search_path = s2")
	_, err := conn.Exec(ctx, "SELECT * FROM c", simple(conn))
	wantCode(t, err, "25000")
	mustExec(t, ctx, conn, "ROLLBACK")
	// Outside a transaction block nothing is confined.
	count(t, ctx, conn, "SELECT count(*) FROM s1.a, s2.c", simple(conn))
	mustExec(t, ctx, conn, "BEGIN", "SELECT * FROM s1.a", "COMMIT")
	count(t, ctx, conn, "SELECT count(*) FROM s2.c", simple(conn))
}

// TestTxnCursorHold: a cursor in a read-only transaction reads at the
// transaction's timestamp and its hold lasts while the cursor is open; it
// is released at COMMIT, on error, on cancel and on disconnect.
func TestTxnCursorHold(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	conn := connectTo(t, ctx, p.URL("postgres", db))
	other := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE cur (x int)", "INSERT INTO cur SELECT generate_series(1, 10)")

	mustExec(t, ctx, conn, "BEGIN", "DECLARE c CURSOR FOR SELECT x FROM cur ORDER BY x")
	var first int
	if err := conn.QueryRow(ctx, "FETCH 1 FROM c", simple(conn)).Scan(&first); err != nil || first != 1 {
		t.Fatalf("FETCH: %d, %v", first, err)
	}
	if got := p.readHolds(t); got != 1 {
		t.Fatalf("%v read holds with the cursor open, want 1", got)
	}
	mustExec(t, ctx, other, "INSERT INTO cur VALUES (11)")
	rows, err := conn.Query(ctx, "FETCH ALL FROM c", simple(conn))
	if err != nil {
		t.Fatal(err)
	}
	xs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(xs) != 9 {
		t.Fatalf("rest of the cursor: %v, %v; want 2..10", xs, err)
	}
	if got := count(t, ctx, conn, "SELECT count(*) FROM cur", simple(conn)); got != 10 {
		t.Fatalf("a read after the cursor: %d rows, want the transaction's 10", got)
	}
	mustExec(t, ctx, conn, "COMMIT")
	p.awaitHolds(t, 0, "after COMMIT")

	// Error.
	mustExec(t, ctx, conn, "BEGIN", "DECLARE c CURSOR FOR SELECT x FROM cur")
	if got := p.readHolds(t); got != 1 {
		t.Fatalf("%v read holds, want 1", got)
	}
	_, err = conn.Exec(ctx, "SELECT 1/0", simple(conn))
	wantCode(t, err, "22012")
	p.awaitHolds(t, 0, "after an error")
	mustExec(t, ctx, conn, "ROLLBACK")

	// Cancel of a slow FETCH.
	mustExec(t, ctx, conn, "BEGIN", "DECLARE c CURSOR FOR SELECT x, pg_sleep(30) FROM cur")
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = conn.Exec(cctx, "FETCH ALL FROM c", simple(conn))
	cancel()
	if err == nil {
		t.Fatal("a canceled FETCH succeeded")
	}
	p.awaitHolds(t, 0, "after cancel")

	// Disconnect.
	gone := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, gone, "BEGIN", "DECLARE c CURSOR FOR SELECT x FROM cur")
	if got := p.readHolds(t); got != 1 {
		t.Fatalf("%v read holds, want 1", got)
	}
	gone.Close(ctx)
	p.awaitHolds(t, 0, "after disconnect")
}

// TestTxnExplainTimestampExtended: EXPLAIN TIMESTAMP over the extended
// protocol is answered by the proxy like over the simple one; AS OF,
// mz_now() and EXPLAIN TIMESTAMP among other statements of one query
// string are refused.
func TestTxnExplainTimestampExtended(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE ext (k int)", "INSERT INTO ext VALUES (1)")
	written := readTS(t, ctx, conn)
	extended := explainedTimestamp(t, ctx, conn, "SELECT * FROM ext WHERE k = 1", pgx.QueryExecModeCacheStatement)
	if extended < written {
		t.Fatalf("query timestamp %d before the last write %d", extended, written)
	}
	var js string
	if err := conn.QueryRow(ctx, "EXPLAIN TIMESTAMP AS JSON FOR SELECT * FROM ext").Scan(&js); err != nil {
		t.Fatal(err)
	}
	var parsed map[string]any
	if err := json.Unmarshal([]byte(js), &parsed); err != nil || parsed["determination"] == nil {
		t.Fatalf("JSON form: %v\n%s", err, js)
	}
	pc := conn.PgConn()
	sd, err := pc.Prepare(ctx, "et", "EXPLAIN TIMESTAMP FOR SELECT * FROM ext WHERE k = $1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sd.Fields) != 1 || sd.Fields[0].Name != "Timestamp" || len(sd.ParamOIDs) != 1 {
		t.Fatalf("described as %d columns %v, %d parameters", len(sd.Fields), sd.Fields, len(sd.ParamOIDs))
	}
	mustExec(t, ctx, conn, "INSERT INTO ext VALUES (2)")
	later := readTS(t, ctx, conn)
	res := pc.ExecPrepared(ctx, "et", [][]byte{[]byte("1")}, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 {
		t.Fatalf("executing: %v, %d rows", res.Err, len(res.Rows))
	}
	m := queryTimestamp.FindSubmatch(res.Rows[0][0])
	if ts, _ := strconv.ParseUint(string(m[1]), 10, 64); m == nil || ts < later {
		t.Fatalf("prepared EXPLAIN TIMESTAMP at %s, want at least %d: a fresh timestamp per execution", m, later)
	}
	// Errors come in order and leave the connection usable.
	batch := &pgx.Batch{}
	batch.Queue("SELECT 1")
	batch.Queue("EXPLAIN TIMESTAMP FOR SELECT * FROM ext AS OF 0")
	batch.Queue("SELECT 2")
	err = conn.SendBatch(ctx, batch).Close()
	if err == nil || !strings.Contains(err.Error(), "not valid for all inputs") {
		t.Fatalf("a batch with EXPLAIN TIMESTAMP below the since: %v", err)
	}
	if got := count(t, ctx, conn, "SELECT count(*) FROM ext", pgx.QueryExecModeCacheStatement); got != 2 {
		t.Fatalf("after the failed batch: %d", got)
	}
	_, err = conn.Exec(ctx, "SELECT 1; EXPLAIN TIMESTAMP FOR SELECT * FROM ext", simple(conn))
	wantCode(t, err, "0A000")
}

// TestTxnPreparedAfterAlter: a SELECT prepared before ALTER TABLE ... ADD
// or DROP COLUMN is refused with PostgreSQL's 0A000, never answered with
// the old shape, in history mode too.
func TestTxnPreparedAfterAlter(t *testing.T) {
	for _, mode := range []struct {
		name string
		args []string
	}{{"present", nil}, {"history", []string{"--history-reads"}}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := testContext(t)
			db := freshDatabase(t, ctx)
			p := startProxy(t, mode.args...)
			conn := connectTo(t, ctx, p.URL("postgres", db))
			other := connectTo(t, ctx, p.URL("postgres", db))
			mustExec(t, ctx, conn, "CREATE TABLE pal (x int, y int)", "INSERT INTO pal VALUES (1, 2)")
			pc := conn.PgConn()
			for _, alter := range []string{"ALTER TABLE pal ADD COLUMN z int DEFAULT 3", "ALTER TABLE pal DROP COLUMN y"} {
				if _, err := pc.Prepare(ctx, "q", "SELECT * FROM pal", nil); err != nil {
					t.Fatal(err)
				}
				mustExec(t, ctx, other, alter)
				res := pc.ExecPrepared(ctx, "q", nil, nil, nil).Read()
				var pe *pgconn.PgError
				if !errors.As(res.Err, &pe) || pe.Code != "0A000" {
					t.Fatalf("after %s: %v, %d columns, rows %q; want 0A000", alter, res.Err, len(res.FieldDescriptions), res.Rows)
				}
				if err := pc.Exec(ctx, "DEALLOCATE q").Close(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := pc.Prepare(ctx, "q", "SELECT * FROM pal", nil); err != nil {
				t.Fatal(err)
			}
			res := pc.ExecPrepared(ctx, "q", nil, nil, nil).Read()
			if res.Err != nil || len(res.FieldDescriptions) != 2 || len(res.Rows) != 1 || string(res.Rows[0][1]) != "3" {
				t.Fatalf("re-prepared: %v, %d columns, rows %q; want (1, 3)", res.Err, len(res.FieldDescriptions), res.Rows)
			}
		})
	}
}
