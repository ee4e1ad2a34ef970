package integration

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestEventLoopReads runs reads that the event loop forwards and
// statements it hands back, interleaved on one connection, in every pgx
// exec mode: point reads, a result far larger than the socket buffers,
// an error, a write, a transaction.
func TestEventLoopReads(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t, "--event-loop")
	table := tableName(t)
	execDirect(t, ctx, "CREATE TABLE "+table+" (id int PRIMARY KEY, v text)")
	for _, mode := range pgxModes {
		t.Run(mode.String(), func(t *testing.T) {
			conn := connectMode(t, ctx, p.URL("postgres", "postgres"), mode)
			for i := range 20 {
				var n int
				if err := conn.QueryRow(ctx, "SELECT $1::int + 1", i).Scan(&n); err != nil || n != i+1 {
					t.Fatalf("point read %d: %d, %v", i, n, err)
				}
			}
			// About 8 MB: many times the socket buffers and the loop's.
			var rows, total int
			err := conn.QueryRow(ctx,
				"SELECT count(*), sum(length(repeat('x', 80) || g)) FROM (SELECT g FROM generate_series(1, 100000) g) s").Scan(&rows, &total)
			if err != nil || rows != 100000 {
				t.Fatalf("count: %d, %v", rows, err)
			}
			r, err := conn.Query(ctx, "SELECT repeat('x', 80) || g FROM generate_series(1, 100000) g")
			if err != nil {
				t.Fatal(err)
			}
			got, size := 0, 0
			for r.Next() {
				var s string
				if err := r.Scan(&s); err != nil {
					t.Fatal(err)
				}
				got++
				size += len(s)
			}
			if r.Err() != nil || got != 100000 || size != total {
				t.Fatalf("large result: %d rows, %d bytes (want %d), %v", got, size, total, r.Err())
			}
			_, err = conn.Exec(ctx, "SELECT 1/0")
			wantCode(t, err, "22012")
			id := int(mode) * 1000
			if _, err := conn.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, 'a')", id); err != nil {
				t.Fatal(err)
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var v string
			if err := tx.QueryRow(ctx, "SELECT v FROM "+table+" WHERE id = $1", id).Scan(&v); err != nil || v != "a" {
				t.Fatalf("read in a transaction: %q, %v", v, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(ctx, "SELECT v FROM "+table+" WHERE id = $1", id).Scan(&v); err != nil || v != "a" {
				t.Fatalf("read after the transaction: %q, %v", v, err)
			}
		})
	}
}

// queryFrame is a Query message's bytes.
func queryFrame(sql string) []byte {
	b, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	return b
}

// TestEventLoopPartialFrames sends a Query a few bytes at a time, then two
// Queries in one write (a pipeline the loop hands back), and a malformed
// length: each is answered as without the loop.
func TestEventLoopPartialFrames(t *testing.T) {
	p := startProxy(t, "--event-loop")
	c := p.dialRaw(t)
	c.startup()
	q := queryFrame("SELECT 41 + 1")
	for i := 0; i < len(q); i += 3 {
		c.write(q[i:min(i+3, len(q))])
		time.Sleep(20 * time.Millisecond)
	}
	expectRow(t, c, "42")
	c.write(append(queryFrame("SELECT 1"), queryFrame("SELECT 2")...))
	expectRow(t, c, "1")
	expectRow(t, c, "2")
	bad := queryFrame("SELECT 3")
	binary.BigEndian.PutUint32(bad[1:], 2)
	c.write(bad)
	c.expectFatal("08P01")
}

// expectRow reads one query's answers: a single row whose value is want,
// then ReadyForQuery 'I'.
func expectRow(t *testing.T, c *rawClient, want string) {
	t.Helper()
	var got []string
	for {
		switch m := c.receive().(type) {
		case *pgproto3.DataRow:
			got = append(got, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			t.Fatalf("error %s: %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			if len(got) != 1 || got[0] != want || m.TxStatus != 'I' {
				t.Fatalf("got rows %q, status %c; want [%s], I", got, m.TxStatus, want)
			}
			return
		}
	}
}

// TestEventLoopCancel cancels a plain read that the loop forwarded: the
// CancelRequest must reach the backend (57014 on the same connection),
// and the session goes on.
func TestEventLoopCancel(t *testing.T) {
	p := startProxy(t, "--event-loop")
	c := p.dialRaw(t)
	key := c.startup()
	c.write(queryFrame("SELECT 1"))
	expectRow(t, c, "1")
	c.write(queryFrame("SELECT pg_sleep(60)"))
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	p.sendCancel(t, key.ProcessID, key.SecretKey)
	for {
		m := c.receive()
		if er, ok := m.(*pgproto3.ErrorResponse); ok {
			if er.Code != "57014" {
				t.Fatalf("got %s %s, want 57014", er.Code, er.Message)
			}
			break
		}
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the cancel took %v", took)
	}
	if z, ok := c.receive().(*pgproto3.ReadyForQuery); !ok || z.TxStatus != 'I' {
		t.Fatalf("want ReadyForQuery I after the cancel, got %#v", z)
	}
	c.write(queryFrame("SELECT 3"))
	expectRow(t, c, "3")
}

// TestEventLoopClientGone: a client that goes away while its plain read
// runs in the loop gets the backend's work stopped.
func TestEventLoopClientGone(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t, "--event-loop")
	direct := connectDirect(t, ctx)
	c := p.dialRaw(t)
	c.startup()
	c.write(queryFrame("SELECT 1"))
	expectRow(t, c, "1")
	const marker = "/* evloop_client_gone */"
	c.write(queryFrame("SELECT pg_sleep(120) " + marker))
	eventually(t, 15*time.Second, "the query running", func() bool {
		return activeQueries(t, ctx, direct, marker) == 1
	})
	c.nc.Close()
	eventually(t, 20*time.Second, "the query stopped", func() bool {
		return activeQueries(t, ctx, direct, marker) == 0
	})
	p.mustAlive(t, ctx)
}

// TestEventLoopDrain: SIGTERM ends a session idle in the loop with 57P01
// at once, and lets one whose read is at the backend finish it first.
func TestEventLoopDrain(t *testing.T) {
	p := startProxy(t, "--event-loop", "--shutdown-timeout", "30s")
	idle := p.dialRaw(t)
	idle.startup()
	idle.write(queryFrame("SELECT 1"))
	expectRow(t, idle, "1")
	busy := p.dialRaw(t)
	busy.startup()
	busy.write(queryFrame("SELECT 2"))
	expectRow(t, busy, "2")
	busy.write(queryFrame("SELECT 7 FROM pg_sleep(2)"))
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	p.signal(syscall.SIGTERM)
	idle.expectFatal("57P01")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the idle session ended after %v", took)
	}
	expectRow(t, busy, "7")
	busy.expectFatal("57P01")
	if !p.wait(30 * time.Second) {
		t.Fatal("the proxy did not exit")
	}
}
