package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
