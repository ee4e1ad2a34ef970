package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestLoopTimestampedReadCancelAndGone: a timestamped read of a session
// that has seen the catalog and its search_path (the event loop serves it
// in one round trip, proxy/loop_read.go), with the loop on and off: a
// cancel reaches it (57014 on the same connection; the session goes on,
// its next reads answer, no hold is left), and a client that goes away
// while it runs gets the backend's work stopped and its hold released.
func TestLoopTimestampedReadCancelAndGone(t *testing.T) {
	for _, loop := range []string{"--event-loop=true", "--event-loop=false"} {
		t.Run(loop, func(t *testing.T) {
			ctx := testContext(t)
			p := startProxy(t, loop, "--metrics-listen", "127.0.0.1:0")
			direct := connectDirect(t, ctx)
			table := fmt.Sprintf("ltr_%d", time.Now().UnixNano())
			c := p.dialRaw(t)
			key := c.startup()
			for _, sql := range []string{
				"CREATE TABLE " + table + " (v int)",
				"INSERT INTO " + table + " VALUES (7)",
			} {
				if got := strings.Join(c.answers(queryFrame(sql)), "; "); strings.Contains(got, "E ") {
					t.Fatalf("%s: %s", sql, got)
				}
			}
			read := "SELECT v FROM " + table + " WHERE mz_now() > 0"
			for range 3 {
				c.write(queryFrame(read))
				expectRow(t, c, "7")
			}
			// slowRead sends a timestamped read that sleeps, once the
			// backend runs it; marker is a column alias, which the history
			// rewrite keeps (a comment it does not; literals may become
			// parameters).
			slowRead := func(marker string) {
				t.Helper()
				c.write(queryFrame("SELECT v AS " + marker + " FROM " + table + " WHERE mz_now() > 0 AND pg_sleep(120) IS NOT NULL"))
				eventually(t, 15*time.Second, "the read running", func() bool {
					return activeQueries(t, ctx, direct, marker) == 1
				})
			}
			slowRead("loop_read_cancel")
			if n := p.readHolds(t); n != 1 {
				t.Fatalf("%v read holds while the read runs, want 1", n)
			}
			start := time.Now()
			p.sendCancel(t, key.ProcessID, key.SecretKey)
			var got []string
			for {
				m := c.receive()
				if er, ok := m.(*pgproto3.ErrorResponse); ok {
					got = append(got, er.Code)
				}
				if z, ok := m.(*pgproto3.ReadyForQuery); ok {
					if z.TxStatus != 'I' {
						t.Fatalf("ReadyForQuery %c after the cancel", z.TxStatus)
					}
					break
				}
			}
			if len(got) != 1 || got[0] != "57014" {
				t.Fatalf("errors %q after the cancel, want [57014]", got)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Fatalf("the cancel took %v", took)
			}
			p.awaitHolds(t, 0, "after the canceled read")
			c.write(queryFrame(read))
			expectRow(t, c, "7")

			slowRead("loop_read_gone")
			c.nc.Close()
			eventually(t, 20*time.Second, "the read stopped", func() bool {
				return activeQueries(t, ctx, direct, "loop_read_gone") == 0
			})
			p.awaitHolds(t, 0, "after the client went away")
			p.mustAlive(t, ctx)
		})
	}
}
