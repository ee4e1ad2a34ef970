package integration

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// unnamedFrames is the batch a driver sends for a query with parameters
// (pgx's exec modes, psycopg 3, node-postgres): the unnamed statement's
// Parse, its Bind with the text parameters params, a Describe of the
// portal, Execute, Sync.
func unnamedFrames(sql string, params ...string) []byte {
	values := make([][]byte, len(params))
	for i, p := range params {
		values[i] = []byte(p)
	}
	var b []byte
	for _, m := range []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{Parameters: values},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}} {
		b, _ = m.Encode(b)
	}
	return b
}

// TestLoopUnnamedParseReadOnlyTxn: read-only transactions whose first
// read is the unnamed statement's Parse (with its Bind, or described and
// then bound: the event loop serves them with the pin in front of the
// Parse, proxy/loop_txn.go), with the loop on and off, in every pgx exec
// mode, psycopg 3 (normal and pipeline) and node-postgres: every read of
// a transaction, plain or with mz_now(), sees its snapshot while another
// connection writes, and mz_now() is one timestamp; an error inside
// aborts it (25P02 until ROLLBACK, its holds released); a write inside
// goes to the session's goroutine and commits; a cancel reaches a first
// read sent so, and a statement timeout ends one.
func TestLoopUnnamedParseReadOnlyTxn(t *testing.T) {
	for _, loop := range []string{"--event-loop=true", "--event-loop=false"} {
		t.Run(loop, func(t *testing.T) {
			ctx := testContext(t)
			p := startProxy(t, loop, "--metrics-listen", "127.0.0.1:0")
			direct := connectDirect(t, ctx)
			writer := p.connect(t, ctx)
			table := fmt.Sprintf("lutx_%d", time.Now().UnixNano())
			mustExec(t, ctx, writer, "CREATE TABLE "+table+" (k int PRIMARY KEY, v int NOT NULL)",
				"INSERT INTO "+table+" VALUES (1, 0), (2, 100)")
			read := "SELECT v FROM " + table + " WHERE k = $1"
			stamped := "SELECT v, mz_now()::text FROM " + table + " WHERE k = $1"
			bump := func() {
				t.Helper()
				mustExec(t, ctx, writer, "UPDATE "+table+" SET v = v + 1 WHERE k = 1")
			}
			current := func() (v int) {
				t.Helper()
				if err := writer.QueryRow(ctx, "SELECT v FROM "+table+" WHERE k = 1").Scan(&v); err != nil {
					t.Fatal(err)
				}
				return v
			}
			for _, mode := range pgxModes {
				t.Run("pgx "+mode.String(), func(t *testing.T) {
					conn := connectMode(t, ctx, p.URL("postgres", "postgres"), mode)
					for i := range 8 {
						want := current()
						tx, err := conn.Begin(ctx)
						if err != nil {
							t.Fatal(err)
						}
						var a, b, c, other int
						var ts1, ts2 string
						err = tx.QueryRow(ctx, read, 1).Scan(&a)
						if err == nil {
							bump()
							err = tx.QueryRow(ctx, stamped, 1).Scan(&b, &ts1)
						}
						if err == nil {
							bump()
							err = tx.QueryRow(ctx, read, 1).Scan(&c)
						}
						if err == nil {
							err = tx.QueryRow(ctx, stamped, 2).Scan(&other, &ts2)
						}
						if err == nil {
							err = tx.Commit(ctx)
						}
						if err != nil || a != want || b != want || c != want || other != 100 || ts1 != ts2 || ts1 == "" {
							_ = tx.Rollback(ctx)
							t.Fatalf("transaction %d: reads %d, %d, %d, %d, mz_now() %q and %q, %v; want %d three times, 100, one timestamp",
								i, a, b, c, other, ts1, ts2, err, want)
						}
					}
					p.awaitHolds(t, 0, "after the transactions")

					// An error inside: 25P02 until ROLLBACK.
					tx, err := conn.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					var v int
					wantCode(t, tx.QueryRow(ctx, "SELECT 1 / (v - v) FROM "+table+" WHERE k = $1", 1).Scan(&v), "22012")
					wantCode(t, tx.QueryRow(ctx, read, 1).Scan(&v), "25P02")
					if err := tx.Rollback(ctx); err != nil {
						t.Fatal(err)
					}
					p.awaitHolds(t, 0, "after ROLLBACK")

					// A write inside: the session's goroutine serves it.
					want := current()
					tx, err = conn.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if err := tx.QueryRow(ctx, read, 1).Scan(&v); err != nil || v != want {
						t.Fatalf("read %d, %v before the write; want %d", v, err, want)
					}
					if _, err := tx.Exec(ctx, "UPDATE "+table+" SET v = v + 1 WHERE k = $1", 1); err != nil {
						t.Fatal(err)
					}
					if err := tx.QueryRow(ctx, read, 1).Scan(&v); err != nil || v != want+1 {
						t.Fatalf("read %d, %v after the write; want %d", v, err, want+1)
					}
					if err := tx.Commit(ctx); err != nil {
						t.Fatal(err)
					}
					if got := current(); got != want+1 {
						t.Fatalf("after COMMIT: %d, want %d", got, want+1)
					}
					p.awaitHolds(t, 0, "after COMMIT")
				})
			}

			host, port := p.hostPort()
			url := libpqURL(host, port, "postgres")
			t.Run("psycopg", func(t *testing.T) {
				command, err := pythonModule("psycopg")()
				requireDriver(t, err, "apt-get install -y python3-psycopg")
				results := runDriverProgram(t, filepath.Join("testdata", "python"), nil, command[0],
					"psycopg_rotxn.py", url, table)
				reportCases(t, results, "txn", "error", "write", "pipeline_txn", "pipeline_error")
				p.awaitHolds(t, 0, "after psycopg's transactions")
			})
			t.Run("node-postgres", func(t *testing.T) {
				command, err := nodeModule("pg", "pg_rotxn.js")()
				requireDriver(t, err, "apt-get install -y nodejs npm, then (cd integration/testdata/node && npm ci)")
				results := runDriverProgram(t, filepath.Join("testdata", "node"), nil, command[0], command[1], url, table)
				reportCases(t, results, "txn", "error", "write", "steady")
				p.awaitHolds(t, 0, "after node-postgres's transactions")
			})

			// A raw client: the first read of a transaction, sent as the
			// unnamed statement's Parse, is canceled, or ends at the
			// statement timeout.
			c := p.dialRaw(t)
			key := c.startup()
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
			// The pins come to agree: the loop serves the transactions.
			for range 10 {
				run("T T I", queryFrame("BEGIN"), unnamedFrames(read, "1"), queryFrame("COMMIT"))
			}
			slow := func(marker string) []byte {
				return unnamedFrames("SELECT v AS "+marker+" FROM "+table+" WHERE k = $1 AND pg_sleep(120) IS NOT NULL", "1")
			}
			t.Run("cancel", func(t *testing.T) {
				run("T", queryFrame("BEGIN"))
				c.write(slow("lutx_cancel"))
				eventually(t, 15*time.Second, "the read running", func() bool {
					return activeQueries(t, ctx, direct, "lutx_cancel") == 1
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
					t.Fatalf("answers %q after the cancel, want \"57014 E\"", s)
				}
				run("25P02 E", unnamedFrames(read, "1"))
				run("I", queryFrame("ROLLBACK"))
				p.awaitHolds(t, 0, "after ROLLBACK")
				run("T T I", queryFrame("BEGIN"), unnamedFrames(read, "1"), queryFrame("COMMIT"))
			})
			t.Run("statement timeout", func(t *testing.T) {
				run("I", queryFrame("SET statement_timeout = '500ms'"))
				run("T", queryFrame("BEGIN"))
				run("57014 E", slow("lutx_timeout"))
				run("I", queryFrame("ROLLBACK"))
				run("I", queryFrame("RESET statement_timeout"))
				p.awaitHolds(t, 0, "after ROLLBACK")
				run("T T I", queryFrame("BEGIN"), unnamedFrames(read, "1"), queryFrame("COMMIT"))
			})
			p.mustAlive(t, ctx)
		})
	}
}

// reportCases fails t for each of the cases a driver program did not
// report as ok.
func reportCases(t *testing.T, results caseResults, cases ...string) {
	t.Helper()
	var failed []error
	for _, name := range cases {
		if failure, ran := results[name]; !ran {
			failed = append(failed, fmt.Errorf("%s: not reported", name))
		} else if failure != "" {
			failed = append(failed, fmt.Errorf("%s: %s", name, failure))
		}
	}
	if err := errors.Join(failed...); err != nil {
		t.Error(err)
	}
}
