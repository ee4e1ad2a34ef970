package proxy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/mzproxy/mzproxy/proxy/embedded/embeddedtest"
)

// TestPolledWrite: an autocommit write that is the only one in flight
// waits for its answer in poll(2) (write_wait.go), and behaves as every
// optimistic write: it commits once, a deadlock (40P01) and a
// serialization failure (40001) are retried, a statement timeout, a
// cancel and a client gone end it with nothing written and no goroutine
// left behind, and its backend's death ends the session with the
// backend's FATAL error. With another write in flight it waits in the
// netpoller.
func TestPolledWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Every statement has a deadline (the polled wait's timer), a generous
	// one: the table's first write builds its history, which took over
	// 400 ms under load.
	s, client := openSession(t, ctx, Config{EventLoop: true, StatementTimeout: 10 * time.Second})
	px := s.proxy
	direct := func() *pgconn.PgConn {
		c, err := pgconn.Connect(ctx, server.ConnString("postgres", "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	holder, watcher := direct(), direct()
	// Names of their own: the test can run again on the same server (-count).
	w, plain := fmt.Sprintf("polled_w_%d", time.Now().UnixNano()), fmt.Sprintf("polled_plain_%d", time.Now().UnixNano())
	run := func(c *pgconn.PgConn, sql string) string {
		t.Helper()
		res, err := c.Exec(ctx, sql).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if len(res) == 0 || len(res[len(res)-1].Rows) == 0 {
			return ""
		}
		return string(res[len(res)-1].Rows[0][0])
	}
	for _, sql := range []string{"CREATE TABLE " + w + " (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO " + w + " VALUES (1, 0), (2, 0)"} {
		if out := query(t, ctx, s, client, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %q", sql, out)
		}
	}
	values := func() string { return run(watcher, "SELECT string_agg(v::text, ',' ORDER BY id) FROM "+w) }
	before := goleak.IgnoreCurrent()
	settled := func(what string) {
		t.Helper()
		if err := embeddedtest.FindLeaks(before); err != nil {
			t.Fatalf("%s: goroutines outlive the write: %v", what, err)
		}
	}
	// write runs sql through the session and checks that it was polled
	// (or not) and what the client got.
	write := func(what, sql string, polled bool, want ...string) {
		t.Helper()
		n := px.PolledWrites()
		out := query(t, ctx, s, client, sql)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("%s: the client got %q, want %q in it", what, out, w)
			}
		}
		if got := px.PolledWrites() - n; got != map[bool]int64{false: 0, true: 1}[polled] {
			t.Fatalf("%s: %d writes polled, want polled %v", what, got, polled)
		}
	}

	write("a write alone", "UPDATE "+w+" SET v = v + 1 WHERE id = 1", true, "UPDATE 1", "Z")
	if v := values(); v != "1,0" {
		t.Fatalf("after one increment: %s", v)
	}
	settled("a write")

	// Another write in flight: the netpoller, and the write notes when.
	px.writeWaits.inFlight.Add(1)
	beside := time.Now().UnixNano()
	write("a write beside another", "UPDATE "+w+" SET v = v + 1 WHERE id = 1", false, "UPDATE 1")
	px.writeWaits.inFlight.Add(-1)
	if together := px.writeWaits.together.Load(); together < beside {
		t.Fatalf("a write beside another noted it at %d, before it began (%d)", together, beside)
	}
	// ... and so does the next write, until none was beside another for
	// writeAloneQuiet. The note is taken again as the write beside
	// another took it: on a loaded machine that write's own round trips
	// can outlast writeAloneQuiet, and the next one is then alone.
	px.writeWaits.together.Store(time.Now().UnixNano())
	write("a write just after two at once", "UPDATE "+w+" SET v = v + 1 WHERE id = 1", false, "UPDATE 1")
	time.Sleep(writeAloneQuiet + 50*time.Millisecond)
	if v := values(); v != "3,0" {
		t.Fatalf("after three increments: %s", v)
	}

	// A deadlock with a block that holds row 2 and then asks for row 1:
	// the write's backend detects it (deadlock_timeout, 1 s; the block's
	// is longer), its attempt is rolled back, and the next one waits for
	// the block and commits.
	run(holder, "BEGIN; SET LOCAL deadlock_timeout = '60s'; SELECT v FROM "+w+" WHERE id = 2 FOR UPDATE")
	retries, polled := px.occStats.Retries.Load(), px.PolledWrites()
	query(t, ctx, s, client, "SET statement_timeout = 0")
	done := make(chan string, 1)
	go func() {
		done <- query(t, ctx, s, client, "UPDATE "+w+" SET v = v + 10 WHERE id IN (1, 2) /*polled-deadlock*/")
	}()
	waiting := func(marker string) bool {
		return run(watcher, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+marker+"%' AND pid <> pg_backend_pid()") == "1"
	}
	for !waiting("polled-deadlock") {
		select {
		case out := <-done:
			t.Fatalf("the write ended before it waited for the block: %q", out)
		case <-time.After(10 * time.Millisecond):
		}
	}
	run(holder, "SELECT v FROM "+w+" WHERE id = 1 FOR UPDATE")
	run(holder, "COMMIT")
	select {
	case out := <-done:
		if !strings.Contains(out, "UPDATE 2") || strings.Contains(out, "ERROR") {
			t.Fatalf("the write that met a deadlock: %q", out)
		}
	case <-time.After(time.Minute):
		t.Fatal("the write that met a deadlock did not end")
	}
	if px.occStats.Retries.Load() == retries {
		t.Fatal("the write that met a deadlock was not run again")
	}
	if px.PolledWrites() != polled+1 {
		t.Fatalf("the write that met a deadlock: %d writes polled, want 1", px.PolledWrites()-polled)
	}
	if v := values(); v != "13,10" {
		t.Fatalf("after the deadlock's retry: %s, want 12,10", v)
	}
	settled("a deadlock retried")

	// A serialization failure (40001): in a repeatable-read session the
	// write waits for a block that updates its row of a table made
	// outside mzproxy, and fails when the block commits; the next attempt
	// takes a new snapshot and commits.
	run(watcher, "CREATE TABLE "+plain+" (id int PRIMARY KEY, v int NOT NULL); INSERT INTO "+plain+" VALUES (1, 0)")
	query(t, ctx, s, client, "SET default_transaction_isolation = 'repeatable read'")
	run(holder, "BEGIN; UPDATE "+plain+" SET v = v + 100 WHERE id = 1")
	retries, polled = px.occStats.Retries.Load(), px.PolledWrites()
	go func() {
		done <- query(t, ctx, s, client, "UPDATE "+plain+" SET v = v + 1 WHERE id = 1 /*polled-serial*/")
	}()
	for !waiting("polled-serial") {
		select {
		case out := <-done:
			t.Fatalf("the write ended before it waited for the block: %q", out)
		case <-time.After(10 * time.Millisecond):
		}
	}
	run(holder, "COMMIT")
	select {
	case out := <-done:
		if !strings.Contains(out, "UPDATE 1") || strings.Contains(out, "ERROR") {
			t.Fatalf("the write that met a serialization failure: %q", out)
		}
	case <-time.After(time.Minute):
		t.Fatal("the write that met a serialization failure did not end")
	}
	if px.occStats.Retries.Load() == retries || px.PolledWrites() != polled+1 {
		t.Fatalf("the write that met a serialization failure: %d retries, %d polled; want some, and 1",
			px.occStats.Retries.Load()-retries, px.PolledWrites()-polled)
	}
	if v := run(watcher, "SELECT v FROM "+plain); v != "101" {
		t.Fatalf("after the serialization failure's retry: %s, want 101", v)
	}
	query(t, ctx, s, client, "RESET default_transaction_isolation")
	settled("a serialization failure retried")

	// The sleep outlasts every bound below by far: a write that was not
	// interrupted cannot pass for one that was.
	sleepy := "UPDATE " + w + " SET v = v + 1 + (SELECT 0 FROM pg_sleep(60)) WHERE id = 1 /*polled-sleepy*/"
	// A statement timeout needs no help: the proxy's deadline ends the
	// write wherever it is. 2 s leaves a loaded machine time to send the
	// write (the check wants it polled), and 20 s is far from 60.
	query(t, ctx, s, client, "SET statement_timeout = '2s'")
	start := time.Now()
	write("a statement timeout", sleepy, true, "canceling statement due to statement timeout", "C57014")
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the timeout ended the write after %v", d)
	}
	settled("timeout")

	query(t, ctx, s, client, "SET statement_timeout = 0")
	wait := whenRunning(t, ctx, "polled-sleepy", s.Cancel)
	write("a cancel", sleepy, true, "canceling statement due to user request")
	wait()
	settled("cancel")

	// The client goes away: its connection's context ends.
	cctx, gone := context.WithCancel(ctx)
	var goneAt time.Time
	wait = whenRunning(t, ctx, "polled-sleepy", func() { goneAt = time.Now(); gone() })
	n := px.PolledWrites()
	query(t, cctx, s, client, sleepy)
	wait()
	if d := time.Since(goneAt); goneAt.IsZero() || d > 20*time.Second {
		t.Fatalf("a write whose client went away ran %v after", d)
	}
	if px.PolledWrites() == n {
		t.Fatal("the write whose client went away was not polled")
	}
	settled("client gone")
	if v := values(); v != "13,10" {
		t.Fatalf("after the interrupted writes: %s, want 12,10", v)
	}

	// The backend dies under the write: the client gets its FATAL error
	// and the session ends.
	pid := s.be.pid
	wait = whenRunning(t, ctx, "polled-sleepy", func() {
		_, _ = watcher.Exec(ctx, "SELECT pg_terminate_backend("+strconv.FormatUint(uint64(pid), 10)+")").ReadAll()
	})
	write("its backend terminated", sleepy, true, "57P01")
	// The write can end before the watcher has read its own answer.
	wait()
	if v := values(); v != "13,10" {
		t.Fatalf("after the backend died: %s, want 12,10", v)
	}
}
