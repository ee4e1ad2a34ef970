package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestCancelBetweenBatchMessages sends a statement's messages one write at
// a time, with a pause after each, and a CancelRequest in one of the
// pauses, to PostgreSQL itself and to mzproxy with and without the event
// loop. PostgreSQL's rule is the expected answer: a cancel while the
// backend waits for the client's next message with no statement sent is
// dropped (the statement then runs); a cancel once the statement's Execute
// (or Query) was sent stops it with 57014, even before its Sync. Either
// way the session's next statement runs undisturbed.
func TestCancelBetweenBatchMessages(t *testing.T) {
	t.Parallel()
	proxies := newStage(t, stageOpts{postgres: true, db: "postgres", proxies: [][]string{nil, {"--event-loop=false"}}}).proxies
	extended := func(sleep string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "SELECT pg_sleep(" + sleep + ")::text"},
			&pgproto3.Bind{},
			&pgproto3.Execute{},
			&pgproto3.Sync{},
		}
	}
	simple := func(sleep string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT pg_sleep(" + sleep + ")::text"}}
	}
	cases := []struct {
		name     string
		msgs     func(sleep string) []pgproto3.FrontendMessage
		cancelAt int // messages sent before the cancel
		canceled bool
	}{
		{"extended, idle before Parse", extended, 0, false},
		{"extended, after Parse", extended, 1, false},
		{"extended, after Bind", extended, 2, false},
		{"extended, after Execute before Sync", extended, 3, true},
		{"extended, after Sync", extended, 4, true},
		{"simple, idle before Query", simple, 0, false},
		{"simple, after Query", simple, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// A statement that is to be canceled sleeps long enough to
			// tell; one that is to run sleeps briefly.
			sleep := "0.2"
			if c.canceled {
				sleep = "8"
			}
			run := func(addr string) string {
				w := dialWire(t, addr, "postgres", "postgres", "cancel_batch")
				defer w.nc.Close()
				msgs := c.msgs(sleep)
				for _, m := range msgs[:c.cancelAt] {
					w.send(m)
					time.Sleep(300 * time.Millisecond)
				}
				start := time.Now()
				w.cancel(addr)
				for _, m := range msgs[c.cancelAt:] {
					w.send(m)
					time.Sleep(100 * time.Millisecond)
				}
				out := w.answers(1)
				if c.canceled && time.Since(start) > 6*time.Second {
					t.Errorf("at %s: the canceled statement took %v", addr, time.Since(start))
				}
				// The cancel, dropped or used, reaches nothing later.
				w.send(&pgproto3.Query{String: "SELECT pg_sleep(0.3)::text"})
				out = append(out, "-- next")
				out = append(out, w.answers(1)...)
				return strings.Join(out, "\n")
			}
			want := run("")
			if c.canceled != strings.Contains(want, "57014") {
				t.Fatalf("PostgreSQL itself: canceled=%v, answers:\n%s", !c.canceled, want)
			}
			for i, p := range proxies {
				got := run(p.addr)
				if got != want {
					t.Errorf("proxy %d: directly:\n%s\nthrough the proxy:\n%s", i, want, got)
				}
			}
		})
	}
}

// cancel sends a CancelRequest for w's session to the server it is
// connected to (addr as for dialWire) and returns once the server has
// acted on it.
func (w *wire) cancel(addr string) {
	w.t.Helper()
	network := "tcp"
	if addr == "" {
		network, addr = "unix", filepath.Join(env.pg.SocketDir(), fmt.Sprintf(".s.PGSQL.%d", env.pg.Port()))
	}
	rawCancel(w.t, network, addr, w.key.ProcessID, w.key.SecretKey)
}
