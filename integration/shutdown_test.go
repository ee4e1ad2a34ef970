package integration

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestGracefulShutdown: on SIGTERM an idle session is ended at once with
// 57P01, a busy one finishes its statement first, and the process exits 0.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	p := startProxy(t)

	idle := p.dialRaw(t)
	idle.startup()
	// A session that ran LISTEN has the proxy reading its backend while it
	// is idle; it is ended like any idle one.
	listening := p.dialRaw(t)
	listening.startup()
	l, _ := (&pgproto3.Query{String: "LISTEN shutdown_test"}).Encode(nil)
	listening.write(l)
	for {
		if _, ok := listening.receive().(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	busy := p.dialRaw(t)
	busy.startup()
	q, _ := (&pgproto3.Query{String: "SELECT pg_sleep(4), 'finished'"}).Encode(nil)
	busy.write(q)
	// The busy session's query is under way when its first answer is due;
	// wait until the backend runs it.
	ctx := testContext(t)
	direct := connectDirect(t, ctx)
	eventually(t, 20*time.Second, "the busy query runs", func() bool {
		return activeQueries(t, ctx, direct, "'finished'") == 1
	})

	p.signal(syscall.SIGTERM)

	// The idle session is told before the busy one's statement is done.
	type event struct {
		at   time.Time
		what string
	}
	idleEv, busyEv := make(chan event, 1), make(chan event, 1)
	go func() {
		m, err := idle.fe.Receive()
		if er, ok := m.(*pgproto3.ErrorResponse); ok && err == nil {
			idleEv <- event{time.Now(), er.Severity + " " + er.Code}
			return
		}
		idleEv <- event{time.Now(), fmt.Sprintf("not an ErrorResponse: %T %v", m, err)}
	}()
	go func() {
		var msgs []string
		for {
			m, err := busy.fe.Receive()
			if err != nil {
				busyEv <- event{time.Now(), fmt.Sprintf("%q then %v", msgs, err)}
				return
			}
			name, line := describeBackend(m)
			msgs = append(msgs, line)
			if name == "ErrorResponse" || name == "ReadyForQuery" {
				busyEv <- event{time.Now(), strings.Join(msgs, "; ")}
				return
			}
		}
	}()
	var gotIdle, gotBusy event
	for _, ch := range []chan event{idleEv, busyEv} {
		select {
		case ev := <-ch:
			if ch == idleEv {
				gotIdle = ev
			} else {
				gotBusy = ev
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no answer within 30s")
		}
	}
	if gotIdle.what != "FATAL 57P01" {
		t.Fatalf("idle session got %q, want FATAL 57P01", gotIdle.what)
	}
	if want := "RowDescription [pg_sleep ?column?]; DataRow  finished; CommandComplete SELECT 1; ReadyForQuery I"; gotBusy.what != want {
		t.Fatalf("busy session got %q, want %q", gotBusy.what, want)
	}
	if !gotIdle.at.Before(gotBusy.at) {
		t.Fatalf("the idle session was told %v after the busy one finished", gotIdle.at.Sub(gotBusy.at))
	}
	idle.expectClosed()
	listening.expectFatal("57P01")
	// After its statement the busy session is ended too.
	busy.expectFatal("57P01")

	if !p.wait(20 * time.Second) {
		t.Fatal("mzproxy did not exit within 20s of SIGTERM with no sessions left")
	}
	if p.err != nil {
		t.Fatalf("mzproxy exited with %v", p.err)
	}
}

// TestShutdownTimeout: a session still busy when --shutdown-timeout passes
// is cut, and its backend query is stopped, not left running.
func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "--shutdown-timeout", "1s")
	ctx := testContext(t)
	direct := connectDirect(t, ctx)
	app := tableName(t)
	conn := p.connectApp(t, ctx, app)
	marker := "/* " + app + " */"
	errc := make(chan error, 1)
	go func() { _, err := conn.Exec(ctx, marker+" SELECT pg_sleep(30)"); errc <- err }()
	waitActive(t, ctx, direct, app)

	start := time.Now()
	p.signal(syscall.SIGTERM)
	if !p.wait(15 * time.Second) {
		t.Fatal("mzproxy did not exit within 15s with --shutdown-timeout 1s")
	}
	t.Logf("exited %v after SIGTERM: %v", time.Since(start).Round(time.Millisecond), p.err)
	if p.err != nil {
		t.Fatalf("exit status: %v", p.err)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the cut query reported success")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client was not released")
	}
	eventually(t, 15*time.Second, "the backend query is gone", func() bool {
		return activeQueries(t, ctx, direct, marker) == 0
	})
}

// TestShutdownWithSilentClient: a connection that never sends its startup
// packet must not hold up shutdown until the drain deadline; PostgreSQL
// does not wait for clients that have not logged in.
func TestShutdownWithSilentClient(t *testing.T) {
	t.Parallel()
	p := startProxy(t) // the default drain deadline, 30s
	silent := p.dialRaw(t)
	ctx := testContext(t)
	p.mustAlive(t, ctx)
	start := time.Now()
	p.signal(syscall.SIGTERM)
	if !p.wait(20 * time.Second) {
		t.Fatal("mzproxy did not exit within 20s of SIGTERM: a client that sent nothing holds the drain")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	silent.expectClosed()
}
