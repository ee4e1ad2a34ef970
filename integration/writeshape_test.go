package integration

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestWritesOneRoundTrip (issue 14): an autocommit write that takes the
// optimistic loop is one backend round trip with one ReadyForQuery, in
// both protocols, with no BEGIN, COMMIT or commit_write: a tap between
// mzproxy and PostgreSQL counts what the client's backend connection
// carries. The slot is the Bind/Execute of its prepared statement in both
// (storage version 30): a simple-protocol write's Query is the client's
// text alone. A write's answers and an error's position are still
// PostgreSQL's own.
func TestWritesOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	tap := startBackendTap(t)
	p := startProxy(t, "--backend", tap.url())
	conn := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{
		"CREATE TABLE shape (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO shape SELECT g, 0 FROM generate_series(1, 10) g",
	} {
		if _, err := execSimple(ctx, conn, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	const update = "UPDATE shape SET v = v + 1 WHERE id = $1"
	if _, err := conn.Prepare(ctx, "shape_update", update); err != nil {
		t.Fatal(err)
	}
	// Whatever a session does once (the first write's own statement) is
	// done before the window the tap looks at.
	if _, err := conn.Exec(ctx, "shape_update", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := execSimple(ctx, conn, "UPDATE shape SET v = v + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}

	const writes = 3
	if _, err := execSimple(ctx, conn, "SELECT 'shape-start'"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < writes; i++ {
		// Ends with a comment and a ';', as psql may send it.
		tag, err := execSimple(ctx, conn, fmt.Sprintf("UPDATE shape SET v = v + 1 WHERE id = %d -- simple;", i+2))
		if err != nil || tag.String() != "UPDATE 1" {
			t.Fatalf("simple-protocol write: %q, %v", tag, err)
		}
		tag, err = conn.Exec(ctx, "shape_update", i+2)
		if err != nil || tag.String() != "UPDATE 1" {
			t.Fatalf("extended-protocol write: %q, %v", tag, err)
		}
	}
	if _, err := execSimple(ctx, conn, "SELECT 'shape-end'"); err != nil {
		t.Fatal(err)
	}

	window := tap.between("shape-start", "shape-end")
	var readies, requests int
	for _, e := range window {
		switch {
		case e == "Z":
			readies++
		case e == "S":
			requests++
		case strings.HasPrefix(e, "Q "):
			requests++
			if !strings.HasPrefix(e, "Q UPDATE shape") && !strings.HasPrefix(e, "Q SELECT 'shape-") {
				t.Errorf("a simple-protocol write's Query carried more than the client's text: %q", e)
			}
		}
		for _, own := range []string{"BEGIN", "COMMIT", "commit_write"} {
			if strings.Contains(e, own) {
				t.Errorf("the backend was sent %q", e)
			}
		}
	}
	if readies != 2*writes || requests != 2*writes {
		t.Errorf("%d writes: %d ReadyForQuery, %d Query or Sync; want one each per write; the backend connection carried:\n%s",
			2*writes, readies, requests, strings.Join(window, "\n"))
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM shape WHERE id = 2", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != 2 {
		t.Errorf("row 2 after two increments: %d, %v", v, err)
	}

	// A client that deallocates the proxy's prepared slot statement by
	// name sees nothing of it, in either protocol: the write's Bind of it
	// fails before anything ran (26000), and the attempt is sent again
	// with the statement prepared again.
	for _, write := range []func() (pgconn.CommandTag, error){
		func() (pgconn.CommandTag, error) { return conn.Exec(ctx, "shape_update", 3) },
		func() (pgconn.CommandTag, error) {
			return execSimple(ctx, conn, "UPDATE shape SET v = v + 1 WHERE id = 3")
		},
	} {
		if _, err := execSimple(ctx, conn, "DEALLOCATE "+ownStatementName(t, ctx, conn, "mzproxy_begin_write")); err != nil {
			t.Fatal(err)
		}
		if tag, err := write(); err != nil || tag.String() != "UPDATE 1" {
			t.Fatalf("the write after its slot statement was deallocated: %q, %v", tag, err)
		}
	}
	if err := conn.QueryRow(ctx, "SELECT v FROM shape WHERE id = 3", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != 4 {
		t.Errorf("row 3 after four increments: %d, %v", v, err)
	}

	// An error in the client's text points where PostgreSQL points.
	const bad = "UPDATE shape SET v = v + nosuch WHERE id = 1"
	_, direct := execSimple(ctx, connectTo(t, ctx, directURL("postgres", db)), bad)
	_, proxied := execSimple(ctx, conn, bad)
	var dpe, ppe *pgconn.PgError
	if !errors.As(direct, &dpe) || !errors.As(proxied, &ppe) {
		t.Fatalf("%s: directly %v, through mzproxy %v", bad, direct, proxied)
	}
	if ppe.Code != dpe.Code || ppe.Position != dpe.Position || ppe.Message != dpe.Message {
		t.Errorf("%s: through mzproxy %s %q at %d, directly %s %q at %d",
			bad, ppe.Code, ppe.Message, ppe.Position, dpe.Code, dpe.Message, dpe.Position)
	}
}

// backendTap relays TCP connections to the test PostgreSQL and records,
// per connection, what each carries: "Q <text>" and "P <text>" for a Query
// or a Parse, "C <kind><name>" for a Close (kind S or P), "S" for a Sync
// the frontend sent, "Z" for a ReadyForQuery
// the backend sent, "W" where a write of mzproxy's begins (recordWrite),
// in the order the tap saw them.
type backendTap struct {
	l     net.Listener
	mu    sync.Mutex
	conns [][]string
	open  []net.Conn
	wg    sync.WaitGroup
	// binds: record each Bind too, as "B <statement>" (recordBinds).
	binds bool
}

// recordBinds makes the tap record each Bind from now on, for the tests
// that count the statements the backend runs.
func (tap *backendTap) recordBinds() {
	tap.mu.Lock()
	tap.binds = true
	tap.mu.Unlock()
}

func (tap *backendTap) recordingBinds() bool {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return tap.binds
}

// startBackendTap starts a tap, stopped when the test ends (after the
// proxies the test starts later, which stop first).
func startBackendTap(t *testing.T) *backendTap {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tap := &backendTap{l: l}
	tap.wg.Add(1)
	go tap.accept()
	t.Cleanup(func() {
		l.Close()
		tap.mu.Lock()
		for _, c := range tap.open {
			c.Close()
		}
		tap.mu.Unlock()
		tap.wg.Wait()
	})
	return tap
}

// url is a backend URL for mzproxy that goes through the tap.
func (tap *backendTap) url() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", tap.l.Addr())
}

func (tap *backendTap) accept() {
	defer tap.wg.Done()
	socket := filepath.Join(env.pg.SocketDir(), fmt.Sprintf(".s.PGSQL.%d", env.pg.Port()))
	for {
		client, err := tap.l.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("unix", socket, 10*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		tap.mu.Lock()
		i := len(tap.conns)
		tap.conns = append(tap.conns, nil)
		tap.open = append(tap.open, client, server)
		tap.mu.Unlock()
		tap.wg.Add(2)
		go tap.relay(i, client, server, true)
		go tap.relay(i, server, client, false)
	}
}

// relay copies src to dst message by message, recording them; frontend:
// src is mzproxy (whose first message, the startup packet, has no type).
func (tap *backendTap) relay(i int, src, dst net.Conn, frontend bool) {
	defer tap.wg.Done()
	defer dst.Close()
	defer src.Close()
	if frontend {
		var n [4]byte
		if _, err := io.ReadFull(src, n[:]); err != nil {
			return
		}
		rest := make([]byte, binary.BigEndian.Uint32(n[:])-4)
		if _, err := io.ReadFull(src, rest); err != nil {
			return
		}
		if _, err := dst.Write(append(n[:], rest...)); err != nil {
			return
		}
	}
	r := bufio.NewReaderSize(src, 1<<16)
	for {
		// Nothing of mzproxy's left to relay: what comes next is another
		// write of its own.
		fresh := r.Buffered() == 0
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		if frontend && fresh {
			tap.recordWrite(i)
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		tap.record(i, frontend, head[0], body)
		if _, err := dst.Write(append(head[:], body...)); err != nil {
			return
		}
	}
}

func (tap *backendTap) record(i int, frontend bool, typ byte, body []byte) {
	var e string
	switch {
	case frontend && typ == 'Q':
		e = "Q " + strings.TrimRight(string(body), "\x00")
	case frontend && typ == 'P':
		// Name, then the query text.
		name, text, _ := strings.Cut(string(body), "\x00")
		text, _, _ = strings.Cut(text, "\x00")
		e = "P " + name + ": " + text
	case frontend && typ == 'C':
		e = "C " + strings.TrimRight(string(body), "\x00")
	case frontend && typ == 'S':
		e = "S"
	case frontend && typ == 'B':
		if !tap.recordingBinds() {
			return
		}
		// Portal, then the statement's name.
		_, stmt, _ := strings.Cut(string(body), "\x00")
		stmt, _, _ = strings.Cut(stmt, "\x00")
		e = "B " + stmt
	case !frontend && typ == 'Z':
		e = "Z"
	default:
		return
	}
	tap.mu.Lock()
	tap.conns[i] = append(tap.conns[i], e)
	tap.mu.Unlock()
}

// recordWrite records "W" when mzproxy begins another write to the
// backend (the tap found nothing of its earlier writes still to relay):
// the writes of a request answered before the next is sent are its round
// trips.
func (tap *backendTap) recordWrite(i int) {
	tap.mu.Lock()
	tap.conns[i] = append(tap.conns[i], "W")
	tap.mu.Unlock()
}

// between is what the connection that carried a Query containing start
// recorded after that Query's ReadyForQuery and before the Query
// containing end.
func (tap *backendTap) between(start, end string) []string {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	for _, events := range tap.conns {
		from := -1
		for j, e := range events {
			switch {
			case from < 0 && strings.HasPrefix(e, "Q ") && strings.Contains(e, start):
				from = j
			case from >= 0 && strings.HasPrefix(e, "Q ") && strings.Contains(e, end):
				return append([]string(nil), events[from+2:j]...)
			}
		}
	}
	return nil
}

// TestSlotExecuteThenQuery: what PostgreSQL does with a Query that follows
// an Execute with no Sync between them, which is how mzproxy sends a
// simple-protocol autocommit write (the slot's Bind/Execute, then the
// client's Query; proxy/write.go). Run against PostgreSQL directly, so a
// server that behaved otherwise fails here, not in a write:
//
//   - the Execute and the Query are one transaction, committed at the end
//     of the Query, with one ReadyForQuery;
//   - an error in the Query rolls the Execute's work back too;
//   - an error in the Execute skips the Query, and everything up to a Sync,
//     which then ends the rolled-back transaction;
//   - a statement PostgreSQL refuses in a transaction block (VACUUM) is
//     refused there too (25001), the whole transaction rolled back: the
//     proxy sends only one INSERT, UPDATE, DELETE, MERGE, TRUNCATE or COPY
//     FROM a file behind the slot (route.replayable), none of which is.
func TestSlotExecuteThenQuery(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	conn, err := pgconn.Connect(ctx, directURL("postgres", db))
	if err != nil {
		t.Fatal(err)
	}
	hj, err := conn.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hj.Conn.Close()
	fe := hj.Frontend
	// exchange sends msgs and returns what came back up to the
	// ReadyForQuery (or up to the last message when ready is false).
	exchange := func(ready bool, msgs ...pgproto3.FrontendMessage) []string {
		t.Helper()
		for _, m := range msgs {
			fe.Send(m)
		}
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		_ = hj.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var got []string
		for {
			if !ready {
				// Nothing more may come: read with a short deadline.
				_ = hj.Conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			}
			m, err := fe.Receive()
			if err != nil {
				if !ready && errors.Is(err, os.ErrDeadlineExceeded) {
					return got
				}
				t.Fatalf("after %v: %v", got, err)
			}
			switch m := m.(type) {
			case *pgproto3.ErrorResponse:
				got = append(got, "E "+m.Code)
			case *pgproto3.CommandComplete:
				got = append(got, "C "+string(m.CommandTag))
			case *pgproto3.DataRow:
				got = append(got, "D "+string(m.Values[0]))
			case *pgproto3.ReadyForQuery:
				return append(got, "Z "+string(m.TxStatus))
			}
		}
	}
	expect := func(what string, got []string, want ...string) {
		t.Helper()
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s:\n got %v\nwant %v", what, got, want)
		}
	}
	execute := func(name string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{
			&pgproto3.Bind{DestinationPortal: name, PreparedStatement: name},
			&pgproto3.Execute{Portal: name},
		}
	}
	count := func() []string {
		return exchange(true, &pgproto3.Query{String: "SELECT count(*) FROM x"})
	}
	expect("setup", exchange(true,
		&pgproto3.Query{String: "CREATE TABLE x (i int)"},
		&pgproto3.Parse{Name: "slot", Query: "SELECT set_config('mzproxy_test.slot', 'taken', true)"},
		&pgproto3.Parse{Name: "ins", Query: "INSERT INTO x VALUES (1)"},
		&pgproto3.Parse{Name: "bad", Query: "SELECT 1 / 0"},
		&pgproto3.Sync{}), "C CREATE TABLE", "Z I")
	// (The setup's Query had its own ReadyForQuery: read the Sync's.)
	expect("setup's Sync", exchange(true), "Z I")

	expect("the slot, then a Query that reads its transaction-local setting",
		exchange(true, append(execute("slot"), &pgproto3.Query{String: "SELECT current_setting('mzproxy_test.slot')"})...),
		"D taken", "C SELECT 1", "D taken", "C SELECT 1", "Z I")
	expect("the next Query, in a transaction of its own",
		exchange(true, &pgproto3.Query{String: "SELECT current_setting('mzproxy_test.slot')"}),
		"D ", "C SELECT 1", "Z I")
	expect("an INSERT's Execute, then a Query that writes",
		exchange(true, append(execute("ins"), &pgproto3.Query{String: "INSERT INTO x VALUES (2)"})...),
		"C INSERT 0 1", "C INSERT 0 1", "Z I")
	expect("both committed", count(), "D 2", "C SELECT 1", "Z I")

	expect("an INSERT's Execute, then a Query that fails",
		exchange(true, append(execute("ins"), &pgproto3.Query{String: "SELECT 1 / 0"})...),
		"C INSERT 0 1", "E 22012", "Z I")
	expect("the Execute's INSERT rolled back", count(), "D 2", "C SELECT 1", "Z I")

	expect("a failed Execute, then a Query: nothing until a Sync",
		exchange(false, append(execute("bad"), &pgproto3.Query{String: "INSERT INTO x VALUES (3)"})...),
		"E 22012")
	expect("the Sync", exchange(true, &pgproto3.Sync{}), "Z I")
	expect("the Query was skipped", count(), "D 2", "C SELECT 1", "Z I")

	expect("an INSERT's Execute, then VACUUM",
		exchange(true, append(execute("ins"), &pgproto3.Query{String: "VACUUM x"})...),
		"C INSERT 0 1", "E 25001", "Z I")
	expect("the INSERT rolled back", count(), "D 2", "C SELECT 1", "Z I")
}
