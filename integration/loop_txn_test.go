package integration

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestLoopReadOnlyTxnCancelAndGone: a simple-protocol read-only
// transaction whose session's pins agree (the event loop serves it whole,
// proxy/loop_txn.go), with the loop on and off: a cancel reaches its
// first read (the one behind the pin guard) and a later read (57014, the
// transaction failed, its holds released at ROLLBACK, the session goes
// on), and a client that goes away during a read gets the backend's work
// stopped and the holds released.
func TestLoopReadOnlyTxnCancelAndGone(t *testing.T) {
	for _, loop := range []string{"--event-loop=true", "--event-loop=false"} {
		t.Run(loop, func(t *testing.T) {
			ctx := testContext(t)
			p := startProxy(t, loop, "--metrics-listen", "127.0.0.1:0")
			direct := connectDirect(t, ctx)
			table := fmt.Sprintf("ltx_%d", time.Now().UnixNano())
			c := p.dialRaw(t)
			key := c.startup()
			run := func(sqls ...string) {
				t.Helper()
				for _, sql := range sqls {
					if got := strings.Join(c.answers(queryFrame(sql)), "; "); strings.Contains(got, "E ") {
						t.Fatalf("%s: %s", sql, got)
					}
				}
			}
			run("CREATE TABLE "+table+" (v int)", "INSERT INTO "+table+" VALUES (7)")
			read := "SELECT v FROM " + table
			// The pins come to agree, the proxy learns the defaults, and
			// the connection's back-off from the loop ends.
			for range 10 {
				run("BEGIN", read, "COMMIT")
			}
			slowRead := func(marker string) {
				t.Helper()
				c.write(queryFrame("SELECT v AS " + marker + " FROM " + table + " WHERE pg_sleep(120) IS NOT NULL"))
				eventually(t, 15*time.Second, "the read running", func() bool {
					return activeQueries(t, ctx, direct, marker) == 1
				})
			}
			canceled := func(what string) {
				t.Helper()
				start := time.Now()
				p.sendCancel(t, key.ProcessID, key.SecretKey)
				var got []string
				for {
					m := c.receive()
					if er, ok := m.(*pgproto3.ErrorResponse); ok {
						got = append(got, er.Code)
					}
					if z, ok := m.(*pgproto3.ReadyForQuery); ok {
						if z.TxStatus != 'E' {
							t.Fatalf("%s: ReadyForQuery %c after the cancel, want E", what, z.TxStatus)
						}
						break
					}
				}
				if len(got) != 1 || got[0] != "57014" {
					t.Fatalf("%s: errors %q after the cancel, want [57014]", what, got)
				}
				if took := time.Since(start); took > 20*time.Second {
					t.Fatalf("%s: the cancel took %v", what, took)
				}
				run("ROLLBACK")
				p.awaitHolds(t, 0, what+": after ROLLBACK")
				run("BEGIN", read, "COMMIT")
			}

			run("BEGIN")
			slowRead("ltx_first_cancel")
			canceled("the first read")

			run("BEGIN", read)
			if n := p.readHolds(t); n < 1 {
				t.Fatalf("%v read holds in the transaction, want at least 1", n)
			}
			slowRead("ltx_later_cancel")
			canceled("a later read")

			run("BEGIN", read)
			slowRead("ltx_gone")
			c.nc.Close()
			eventually(t, 20*time.Second, "the read stopped", func() bool {
				return activeQueries(t, ctx, direct, "ltx_gone") == 0
			})
			p.awaitHolds(t, 0, "after the client went away")
			p.mustAlive(t, ctx)
		})
	}
}

// boundFrames is the batch that runs the prepared statement stmt in the
// unnamed portal with the text parameters params, as libpq's
// PQexecPrepared sends it (pgbench -M prepared): Bind, Describe of the
// portal, Execute, Sync.
func boundFrames(stmt string, params ...string) []byte {
	values := make([][]byte, len(params))
	for i, p := range params {
		values[i] = []byte(p)
	}
	var b []byte
	for _, m := range []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: stmt, Parameters: values},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}} {
		b, _ = m.Encode(b)
	}
	return b
}

// TestLoopPreparedReadOnlyTxn: read-only transactions whose statements
// are prepared (pgbench -M prepared: BEGIN, the reads and COMMIT each
// prepared; pgx's exec modes; lib/pq's Prepare inside a Tx), which
// the event loop serves once the session's pins agree
// (proxy/loop_txn.go), with the loop on and off: every read of a
// transaction is at its snapshot while another connection writes; an
// error inside aborts it (25P02 until ROLLBACK, its holds released); a
// write inside goes to the session's goroutine and commits; a cancel
// reaches the first read and a later one; a statement timeout ends a
// read; idle_in_transaction_session_timeout ends the session (25P03) and
// releases its holds.
func TestLoopPreparedReadOnlyTxn(t *testing.T) {
	for _, loop := range []string{"--event-loop=true", "--event-loop=false"} {
		t.Run(loop, func(t *testing.T) {
			ctx := testContext(t)
			p := startProxy(t, loop, "--metrics-listen", "127.0.0.1:0")
			direct := connectDirect(t, ctx)
			writer := p.connect(t, ctx)
			table := fmt.Sprintf("lptx_%d", time.Now().UnixNano())
			mustExec(t, ctx, writer, "CREATE TABLE "+table+" (k int PRIMARY KEY, v int NOT NULL)",
				"INSERT INTO "+table+" VALUES (1, 0), (2, 100)")
			read := "SELECT v FROM " + table + " WHERE k = $1"
			bump := func() {
				t.Helper()
				mustExec(t, ctx, writer, "UPDATE "+table+" SET v = v + 1 WHERE k = 1")
			}
			var v int
			if err := writer.QueryRow(ctx, "SELECT v FROM "+table+" WHERE k = 1").Scan(&v); err != nil {
				t.Fatal(err)
			}
			// check runs 12 transactions with txn, which reads k = 1 twice
			// with bump between, and fails unless both reads see the value
			// before the write, and the value after it once committed.
			check := func(t *testing.T, txn func(between func()) (int, int, error)) {
				for range 12 {
					a, b, err := txn(bump)
					if err != nil || a != v || b != v {
						t.Fatalf("reads %d, %d in one transaction, %v; want %d both", a, b, err, v)
					}
					v++
				}
				p.awaitHolds(t, 0, "after the transactions")
			}
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
				pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
				t.Run("pgx "+mode.String(), func(t *testing.T) {
					conn := connectMode(t, ctx, p.URL("postgres", "postgres"), mode)
					check(t, func(between func()) (a, b int, err error) {
						tx, err := conn.Begin(ctx)
						if err != nil {
							return 0, 0, err
						}
						defer tx.Rollback(ctx)
						if err = tx.QueryRow(ctx, read, 1).Scan(&a); err != nil {
							return
						}
						between()
						if err = tx.QueryRow(ctx, read, 1).Scan(&b); err != nil {
							return
						}
						return a, b, tx.Commit(ctx)
					})
				})
			}
			t.Run("lib/pq Prepare in a Tx", func(t *testing.T) {
				pool, err := sql.Open("postgres", p.URL("postgres", "postgres"))
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()
				pool.SetMaxOpenConns(1)
				check(t, func(between func()) (a, b int, err error) {
					tx, err := pool.BeginTx(ctx, nil)
					if err != nil {
						return 0, 0, err
					}
					defer tx.Rollback()
					stmt, err := tx.PrepareContext(ctx, read)
					if err != nil {
						return 0, 0, err
					}
					defer stmt.Close()
					if err = stmt.QueryRowContext(ctx, 1).Scan(&a); err != nil {
						return
					}
					between()
					if err = stmt.QueryRowContext(ctx, 1).Scan(&b); err != nil {
						return
					}
					return a, b, tx.Commit()
				})
			})

			// pgbench -M prepared: BEGIN, the reads and COMMIT prepared.
			c := p.dialRaw(t)
			key := c.startup()
			slow := func(marker string) string {
				return "SELECT v AS " + marker + " FROM " + table + " WHERE k = $1 AND pg_sleep(120) IS NOT NULL"
			}
			var parses []byte
			for _, s := range [][2]string{{"begin", "BEGIN"}, {"commit", "COMMIT"}, {"rollback", "ROLLBACK"},
				{"read", read}, {"div", "SELECT 1 / v FROM " + table + " WHERE k = $1"},
				{"write", "UPDATE " + table + " SET v = v + 1 WHERE k = $1"},
				{"cancel_first", slow("lptx_cancel_first")}, {"cancel_later", slow("lptx_cancel_later")},
				{"timeout", slow("lptx_timeout")}} {
				parses, _ = (&pgproto3.Parse{Name: s[0], Query: s[1]}).Encode(parses)
			}
			parses, _ = (&pgproto3.Sync{}).Encode(parses)
			// run sends each batch and fails unless its answers are want
			// (the errors' codes and the ReadyForQuery statuses, joined).
			run := func(want string, batches ...[]byte) {
				t.Helper()
				var got []string
				for _, b := range batches {
					for _, a := range c.answers(b) {
						if f := strings.Fields(a); f[0] == "E" {
							got = append(got, f[2])
						} else if f[0] == "Z" {
							got = append(got, f[1])
						}
					}
				}
				if s := strings.Join(got, " "); s != want {
					t.Fatalf("answers %q, want %q", s, want)
				}
			}
			run("I", parses)
			readRow := func(k string, want int) {
				t.Helper()
				c.write(boundFrames("read", k))
				var got []string
				for {
					switch m := c.receive().(type) {
					case *pgproto3.DataRow:
						got = append(got, string(m.Values[0]))
					case *pgproto3.ErrorResponse:
						t.Fatalf("read: error %s: %s", m.Code, m.Message)
					case *pgproto3.ReadyForQuery:
						if len(got) != 1 || got[0] != fmt.Sprint(want) || m.TxStatus != 'T' {
							t.Fatalf("read rows %q, status %c; want [%d], T", got, m.TxStatus, want)
						}
						return
					}
				}
			}
			t.Run("pgbench prepared", func(t *testing.T) {
				for range 12 {
					run("T", boundFrames("begin"))
					readRow("1", v)
					bump()
					readRow("1", v)
					readRow("2", 100)
					run("I", boundFrames("commit"))
					v++
				}
				p.awaitHolds(t, 0, "after the transactions")
			})
			t.Run("error inside", func(t *testing.T) {
				mustExec(t, ctx, writer, "UPDATE "+table+" SET v = 0 WHERE k = 2")
				run("T", boundFrames("begin"))
				readRow("1", v)
				run("22012 E", boundFrames("div", "2"))
				run("25P02 E", boundFrames("read", "1"))
				run("I", boundFrames("rollback"))
				p.awaitHolds(t, 0, "after ROLLBACK")
				mustExec(t, ctx, writer, "UPDATE "+table+" SET v = 100 WHERE k = 2")
				run("T", boundFrames("begin"))
				readRow("2", 100)
				run("I", boundFrames("commit"))
			})
			t.Run("write inside", func(t *testing.T) {
				run("T", boundFrames("begin"))
				readRow("1", v)
				run("T", boundFrames("write", "1"))
				readRow("1", v+1)
				run("I", boundFrames("commit"))
				v++
				p.awaitHolds(t, 0, "after COMMIT")
				for range 3 {
					run("T", boundFrames("begin"))
					readRow("1", v)
					run("I", boundFrames("commit"))
				}
			})
			// canceled sends a cancel for the slow read marked marker and
			// fails unless the read ends with 57014 and the transaction
			// ends at ROLLBACK, its holds released.
			canceled := func(marker string) {
				t.Helper()
				eventually(t, 15*time.Second, "the read running", func() bool {
					return activeQueries(t, ctx, direct, marker) == 1
				})
				p.sendCancel(t, key.ProcessID, key.SecretKey)
				var got []string
				for {
					m := c.receive()
					if er, ok := m.(*pgproto3.ErrorResponse); ok {
						got = append(got, er.Code)
					}
					if z, ok := m.(*pgproto3.ReadyForQuery); ok {
						got = append(got, string(z.TxStatus))
						break
					}
				}
				if s := strings.Join(got, " "); s != "57014 E" {
					t.Fatalf("%s: answers %q after the cancel, want \"57014 E\"", marker, s)
				}
				run("I", boundFrames("rollback"))
				p.awaitHolds(t, 0, marker+": after ROLLBACK")
			}
			t.Run("cancel", func(t *testing.T) {
				run("T", boundFrames("begin"))
				c.write(boundFrames("cancel_first", "1"))
				canceled("lptx_cancel_first")
				run("T", boundFrames("begin"))
				readRow("1", v)
				c.write(boundFrames("cancel_later", "1"))
				canceled("lptx_cancel_later")
			})
			t.Run("statement timeout", func(t *testing.T) {
				run("I", queryFrame("SET statement_timeout = '500ms'"))
				run("T", boundFrames("begin"))
				readRow("1", v)
				run("57014 E", boundFrames("timeout", "1"))
				run("I", boundFrames("rollback"))
				run("I", queryFrame("RESET statement_timeout"))
				p.awaitHolds(t, 0, "after ROLLBACK")
			})
			t.Run("idle in transaction, pgx exec", func(t *testing.T) {
				// Its first read pinned at its Parse by the session's
				// goroutine, its second the loop's, which then has the
				// session while it idles.
				conn := connectMode(t, ctx, p.URL("postgres", "postgres"), pgx.QueryExecModeExec)
				mustExec(t, ctx, conn, "SET idle_in_transaction_session_timeout = '1s'")
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var a int
				for range 2 {
					if err := tx.QueryRow(ctx, read, 1).Scan(&a); err != nil || a != v {
						t.Fatalf("read %d, %v; want %d", a, err, v)
					}
				}
				if n := p.readHolds(t); n < 1 {
					t.Fatalf("%v read holds in the transaction, want at least 1", n)
				}
				p.awaitHolds(t, 0, "after the idle-in-transaction timeout")
				wantCode(t, tx.QueryRow(ctx, read, 1).Scan(&a), "25P03")
			})
			t.Run("idle in transaction", func(t *testing.T) {
				for range 3 {
					run("T", boundFrames("begin"))
					readRow("1", v)
					run("I", boundFrames("commit"))
				}
				run("I", queryFrame("SET idle_in_transaction_session_timeout = '1s'"))
				run("T", boundFrames("begin"))
				readRow("1", v)
				if n := p.readHolds(t); n < 1 {
					t.Fatalf("%v read holds in the transaction, want at least 1", n)
				}
				p.awaitHolds(t, 0, "after the idle-in-transaction timeout")
				// The first error is the backend's; the session's own path
				// (the loop's off) may add its own about the lost backend
				// before it closes.
				c.write(boundFrames("read", "1"))
				var codes []string
				for {
					m, err := c.fe.Receive()
					if err != nil {
						break
					}
					if er, ok := m.(*pgproto3.ErrorResponse); ok {
						codes = append(codes, er.Code)
					}
				}
				if len(codes) == 0 || codes[0] != "25P03" {
					t.Fatalf("errors %q after the idle-in-transaction timeout, want 25P03 first", codes)
				}
			})
			p.mustAlive(t, ctx)
		})
	}
}
