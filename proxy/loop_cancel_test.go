package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
)

// TestCancelReachesLoopBatchTakenOver: a batch the event loop sent to
// the backend and gave back (evloop.Back) is taken over by the session's
// goroutine message by message (takeLoopTxn at a first read's Bind,
// resumeLoopBind, resumeLoopParse): between two of those messages no
// message's context is there to end, while the backend runs the batch. A
// Cancel then must still reach the backend: the statement fails with
// 57014 at once. On 0467027 the takeover cleared loopFlight, Cancel found
// no target and dropped the cancel, and the statement ran to its end (the
// third lost-cancel window of docs/outside.md, session 21). Once the
// statement that took the batch over ends, a Cancel has nothing to stop.
func TestCancelReachesLoopBatchTakenOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, client := openSession(t, ctx, Config{})
	if out := query(t, ctx, s, client, "SELECT 1"); out == "" {
		t.Fatal("no answer")
	}

	// What the loop does for a batch it admits: the batch at the
	// backend, loopFlight set (Admit).
	const sleepy = "SELECT pg_sleep(30) /*loop-taken-over*/"
	if err := s.be.w.Send(&pgproto3.Query{String: sleepy}); err != nil {
		t.Fatal(err)
	}
	if err := s.be.w.Flush(); err != nil {
		t.Fatal(err)
	}
	s.loopFlight.Store(true)
	// The goroutine takes it over at a message (a first read's Bind), and
	// is between that message and the next.
	s.loopTxn.g = &pinGuard{}
	s.takeLoopTxn(1)
	s.txn.guard, s.loopRead.sent = nil, 0

	start := time.Now()
	wait := whenRunning(t, ctx, "loop-taken-over", s.Cancel)
	wait()
	code := ""
	for {
		typ, frame, err := s.be.next()
		if err != nil {
			t.Fatal(err)
		}
		if typ == 'E' {
			code = errorCode(wire.Body(frame))
		}
		if typ == 'Z' {
			break
		}
	}
	if code != string(pgerr.QueryCanceled) {
		t.Fatalf("the batch ended with %q after %v, want 57014: the cancel did not reach the backend", code, time.Since(start))
	}

	// The statement that took the batch over ends (handleStatement): a
	// Cancel from now on is for nothing at the backend.
	if out := query(t, ctx, s, client, "SELECT 2"); out == "" {
		t.Fatal("no answer")
	}
	if s.loopFlight.Load() {
		t.Fatal("loopFlight still set after the statement ended")
	}
	s.Cancel()
	if out := query(t, ctx, s, client, "SELECT 3 AS after_cancel"); !strings.Contains(out, "after_cancel") {
		t.Fatalf("a statement after a Cancel between statements: %q", out)
	}
}
