package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/evloop"
)

// Guarded reads in the event loop (loop_read.go), on a session against the
// test server driven by a real loop: the test is the client, on a socket
// pair, and does what the frontend does when the loop gives the session
// back (its leftover Query handled on the session's own path, whose
// answers go to the session's client writer).

// loopTestPeer is the evloop.Peer of a test session.
type loopTestPeer struct{ *Session }

func (loopTestPeer) MaxMessageSize() int    { return 1 << 20 }
func (loopTestPeer) Readable(_ []byte) bool { return true }

// testReadLoop is one loop for the tests, as the proxy has one.
var testReadLoop = sync.OnceValues(func() (*evloop.Loop, error) { return evloop.New(64 << 10) })

// loopClient is the client of a session the loop drives.
type loopClient struct {
	s      *Session
	client *clientBuffer // what the session's own path sent
	sock   net.Conn      // the test's end
	lc     *evloop.Conn  // the session's end
}

func newLoopClient(tb testing.TB, ctx context.Context) *loopClient {
	tb.Helper()
	s, client := openSession(tb, ctx, Config{EventLoop: true})
	return wrapLoopClient(tb, s, client)
}

// wrapLoopClient puts the session s on a socket pair the loop can drive.
func wrapLoopClient(tb testing.TB, s *Session, client *clientBuffer) *loopClient {
	tb.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		conns[i], err = net.FileConn(f)
		_ = f.Close()
		if err != nil {
			tb.Fatal(err)
		}
	}
	lc := evloop.Wrap(conns[0])
	tb.Cleanup(func() { _ = lc.Close(); _ = conns[1].Close() })
	return &loopClient{s: s, client: client, sock: conns[1], lc: lc}
}

// turn is one statement through the loop: sql is sent to the session's
// socket while the loop drives it, the loop is asked for the session back
// once the answer is in (or returns it), and a leftover Query is handled on
// the session's own path. It returns everything the client got, and
// whether the loop served the statement itself.
func (c *loopClient) turn(tb testing.TB, ctx context.Context, sql string) (answer string, inLoop bool) {
	tb.Helper()
	frame, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	return c.turnBatch(tb, ctx, frame)
}

// turnBatch is turn for a client's batch of frames (a Query, or extended
// messages up to a Sync): a batch given back is handled message by
// message on the session's own path, as the frontend does.
func (c *loopClient) turnBatch(tb testing.TB, ctx context.Context, frame []byte) (answer string, inLoop bool) {
	tb.Helper()
	be := c.s.LoopBackend()
	if be == nil {
		tb.Fatal("the session is not one the loop can drive")
	}
	type ran struct {
		res evloop.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		loop, err := testReadLoop()
		if err != nil {
			done <- ran{err: err}
			return
		}
		res, err := loop.Run(c.lc, be, loopTestPeer{c.s})
		done <- ran{res, err}
	}()
	if _, err := c.sock.Write(frame); err != nil {
		tb.Fatal(err)
	}
	got := make(chan string, 1)
	go func() { got <- readToReady(c.sock) }()
	var r ran
	select {
	case answer = <-got:
		// Served in the loop: the session back (a deadline wants it).
		_ = c.lc.SetReadDeadline(time.Time{})
		r = <-done
	case r = <-done:
		// Given back: the frontend reads the leftover first.
		_ = c.sock.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		answer = <-got
		_ = c.sock.SetReadDeadline(time.Time{})
	}
	if r.err != nil || r.res.Over != nil {
		tb.Fatalf("%q: the loop ended the session: %v, %v", frame, r.err, r.res.Over)
	}
	if left := r.res.Leftover; len(left) > 0 {
		if string(left) != string(frame) {
			tb.Fatalf("%q: the loop gave back %q, not the batch", frame, left)
		}
		answer += c.handleBatch(tb, ctx, left)
		return answer, false
	}
	return answer, r.res.Forwarded > 0
}

// decodeFrontend decodes a client's frame of a batch the loop forwards.
func decodeFrontend(tb testing.TB, frame []byte) pgproto3.FrontendMessage {
	tb.Helper()
	var msg pgproto3.FrontendMessage
	switch frame[0] {
	case 'Q':
		msg = &pgproto3.Query{}
	case 'P':
		msg = &pgproto3.Parse{}
	case 'B':
		msg = &pgproto3.Bind{}
	case 'D':
		msg = &pgproto3.Describe{}
	case 'E':
		msg = &pgproto3.Execute{}
	case 'S':
		msg = &pgproto3.Sync{}
	default:
		tb.Fatalf("frame %q", frame)
	}
	if err := msg.Decode(frame[5:]); err != nil {
		tb.Fatal(err)
	}
	return msg
}

// encodeFrames is the frames of msgs, one batch.
func encodeFrames(tb testing.TB, msgs ...pgproto3.FrontendMessage) []byte {
	tb.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			tb.Fatal(err)
		}
	}
	return b
}

// readToReady reads frames up to a ReadyForQuery (or a read's error).
func readToReady(r io.Reader) string {
	var out []byte
	hdr := make([]byte, 5)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return string(out)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return string(out)
		}
		out = append(append(out, hdr...), body...)
		if hdr[0] == 'Z' {
			return string(out)
		}
	}
}

// TestGuardedReadInLoop: a timestamped read of the present and one AS OF
// a number are served by the event loop once the session has seen the
// catalog and its search_path (before, the loop gave every timestamped
// read to the session's goroutine): the answer is the client's alone (no
// answer of the guard's), its mz_now() the guard's pin, and the hold is
// released at its end.
func TestGuardedReadInLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	table := fmt.Sprintf("lr_%d", time.Now().UnixNano())
	for _, sql := range []string{
		"CREATE TABLE " + table + " (aid int PRIMARY KEY, abalance int NOT NULL)",
		"INSERT INTO " + table + " SELECT g, g * 10 FROM generate_series(1, 100) g",
		"ALTER TABLE " + table + " SET (RETAIN HISTORY FOR '1h')",
	} {
		if out := query(t, ctx, c.s, c.client, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", sql, out)
		}
	}
	// The first read learns the search_path and the catalog.
	query(t, ctx, c.s, c.client, "SELECT abalance, mz_now() FROM "+table+" WHERE aid = 1")
	ts := firstValueOf(t, query(t, ctx, c.s, c.client, "SELECT mz_now()::text"))
	last := uint64(0)
	for aid := 2; aid < 6; aid++ {
		answer, inLoop := c.turn(t, ctx, fmt.Sprintf("SELECT abalance, mz_now() FROM %s WHERE aid = %d", table, aid))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the timestamped read back", aid)
		}
		checkAnswer(t, answer, "T", fmt.Sprint(aid*10))
		now := secondValueOf(t, answer)
		if now < last {
			t.Fatalf("mz_now() went back from %d to %d", last, now)
		}
		last = now
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%d holds after the read", n)
		}
	}
	// ts at or below the floor: no wait for the upper. The first read
	// below it publishes its hold (a round trip: the goroutine's); the
	// next ones' holds are covered by it.
	for range 2 {
		if err := c.s.lease.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	asof := "SELECT abalance FROM " + table + " WHERE aid = %d AS OF " + ts
	query(t, ctx, c.s, c.client, fmt.Sprintf(asof, 1))
	for aid := 2; aid < 5; aid++ {
		answer, inLoop := c.turn(t, ctx, fmt.Sprintf(asof, aid))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the AS OF read back", aid)
		}
		checkAnswer(t, answer, "T", fmt.Sprint(aid*10))
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%d holds after the read", n)
		}
	}
}

// TestGuardedReadInLoopRefused: when the catalog changed since the
// session saw it (another proxy replaced the table), the guard refuses in
// the loop, which gives the read back before relaying anything; the
// session's goroutine plans it again and reads the new table. The read
// after it is the loop's again.
func TestGuardedReadInLoopRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	other, otherClient := openSession(t, ctx, Config{})
	table := fmt.Sprintf("lrr_%d", time.Now().UnixNano())
	run := func(s *Session, client *clientBuffer, sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			if out := query(t, ctx, s, client, sql); strings.Contains(out, "ERROR") {
				t.Fatalf("%s: %s", sql, out)
			}
		}
	}
	run(c.s, c.client, "CREATE TABLE "+table+" (v text)", "INSERT INTO "+table+" VALUES ('one')")
	read := "SELECT v, mz_now() FROM " + table
	run(c.s, c.client, read)
	if answer, inLoop := c.turn(t, ctx, read); !inLoop {
		t.Fatal("the first read was given back")
	} else {
		checkAnswer(t, answer, "T", "one")
	}
	run(other, otherClient, "DROP TABLE "+table, "CREATE TABLE "+table+" (v text)", "INSERT INTO "+table+" VALUES ('two')")
	answer, inLoop := c.turn(t, ctx, read)
	if inLoop {
		t.Fatal("a read of a stale catalog was served in the loop")
	}
	checkAnswer(t, answer, "T", "two")
	if n := len(c.s.proxy.Holds()); n != 0 {
		t.Fatalf("%d holds after the refused read", n)
	}
	answer, inLoop = c.turn(t, ctx, read)
	if !inLoop {
		t.Fatal("the read after the refusal was given back")
	}
	checkAnswer(t, answer, "T", "two")
}

// checkAnswer fails unless answer's frames are first, DataRows whose first
// value is want, CommandComplete and ReadyForQuery: what a simple Query of
// one row answers, nothing of the proxy's own in it.
func checkAnswer(tb testing.TB, answer, first, want string) {
	tb.Helper()
	if types := answerTypes(answer); types != first+"DCZ" {
		tb.Fatalf("answer's frames %q, want %sDCZ: %q", types, first, answer)
	}
	if got := firstValueOf(tb, answer); got != want {
		tb.Fatalf("read %q, want %q", got, want)
	}
}

// secondValueOf is the second column of the first DataRow in answer, a
// number.
func secondValueOf(tb testing.TB, answer string) uint64 {
	tb.Helper()
	f := frameOf(tb, answer, 'D')
	row := &pgproto3.DataRow{}
	if err := row.Decode([]byte(f[5:])); err != nil || len(row.Values) < 2 {
		tb.Fatalf("DataRow %q: %v", f, err)
	}
	var v uint64
	if _, err := fmt.Sscan(string(row.Values[1]), &v); err != nil {
		tb.Fatal(err)
	}
	return v
}

// loopReadCases are bench/managed.sh's tsread and asof as simple Queries
// served the way the event loop serves them (Admit, the batch written to
// the backend, each answer frame followed with Answer until the
// ReadyForQuery), on a session against the test server, without the
// loop's goroutine: what the session's part of a read costs.
func loopReadCases(tb testing.TB) []timestampedReadCase {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	tb.Cleanup(cancel)
	s, client := openSession(tb, ctx, Config{EventLoop: true})
	table := fmt.Sprintf("lrc_%d", time.Now().UnixNano())
	for _, sql := range []string{
		"CREATE TABLE " + table + " (aid int PRIMARY KEY, abalance int NOT NULL)",
		"INSERT INTO " + table + " SELECT g, 0 FROM generate_series(1, 1000) g",
		"ALTER TABLE " + table + " SET (RETAIN HISTORY FOR '1h')",
		"SELECT abalance, mz_now() FROM " + table + " WHERE aid = 1",
	} {
		if out := query(tb, ctx, s, client, sql); strings.Contains(out, "ERROR") {
			tb.Fatalf("%s: %s", sql, out)
		}
	}
	ts := firstValueOf(tb, query(tb, ctx, s, client, "SELECT mz_now()::text"))
	for range 2 {
		if err := s.lease.Heartbeat(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	asof := "SELECT abalance FROM " + table + " WHERE aid = %d AS OF " + ts
	query(tb, ctx, s, client, fmt.Sprintf(asof, 1)) // its hold below the floor, published
	// The prepared reads, bound once each on the session's own path.
	prepared := encodeFrames(tb,
		&pgproto3.Parse{Name: "tsread", Query: "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"},
		&pgproto3.Parse{Name: "asof", Query: strings.Replace(asof, "%d", "$1", 1)}, &pgproto3.Sync{})
	prepared = append(prepared, boundBatch(tb, "tsread", true, "1")...)
	prepared = append(prepared, boundBatch(tb, "asof", true, "1")...)
	for len(prepared) > 0 {
		n := 1 + int(binary.BigEndian.Uint32(prepared[1:5]))
		if err := s.Handle(ctx, decodeFrontend(tb, prepared[:n]), prepared[:n]); err != nil {
			tb.Fatal(err)
		}
		prepared = prepared[n:]
	}
	client.take()
	be := s.LoopBackend()
	if be == nil {
		tb.Fatal("the session is not one the loop can drive")
	}
	var batch, hdr, body []byte
	hdr = make([]byte, 5)
	aid := 0
	// A Query of the text format with the next key, or (stmt not empty)
	// the batch that binds the statement stmt to it, as pgbench -M
	// prepared sends it: Bind, Describe, Execute, Sync; or (stmt "-") that
	// batch of the unnamed statement with the Parse of format in front of
	// it, as pgbench -M extended sends it.
	read := func(format, stmt string) {
		aid = aid%1000 + 1
		var err error
		switch {
		case stmt == "":
			batch = fmt.Appendf(batch[:0], "Q\x00\x00\x00\x00"+format+"\x00", aid)
			binary.BigEndian.PutUint32(batch[1:], uint32(len(batch)-1))
		case stmt == "-":
			// The unnamed statement parsed in front of its Bind (pgbench
			// -M extended, a driver's query with parameters).
			batch = append(batch[:0], 'P', 0, 0, 0, 0, 0)
			batch = append(append(batch, format...), 0, 0, 0)
			binary.BigEndian.PutUint32(batch[1:], uint32(len(batch)-1))
			batch = preparedBatch(batch, "", aid)
		default:
			batch = preparedBatch(batch[:0], stmt, aid)
		}
		send, ok := s.Admit(batch)
		if !ok || send == nil {
			tb.Fatalf("%q not admitted as a guarded read", batch)
		}
		if _, err = be.Write(send); err != nil {
			tb.Fatal(err)
		}
		held, rows := true, 0
		for {
			if _, err = io.ReadFull(be, hdr); err != nil {
				tb.Fatal(err)
			}
			n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
			body = slices.Grow(append(body[:0], hdr...), n)[:5+n]
			if _, err = io.ReadFull(be, body[5:]); err != nil {
				tb.Fatal(err)
			}
			if hdr[0] == 'D' && !held {
				rows++ // the loop does not show the client's rows
				continue
			}
			switch v := s.Answer(hdr[0], body); v {
			case evloop.Drop:
			case evloop.Hold:
				// (A parsed read's ParseComplete, until its Bind's answer.)
				if hdr[0] != '1' {
					tb.Fatalf("answer %c held", hdr[0])
				}
			case evloop.Relay:
				held = false
			default:
				tb.Fatalf("answer %c: verdict %d", hdr[0], v)
			}
			if hdr[0] == 'Z' {
				break
			}
		}
		if rows != 1 {
			tb.Fatalf("%d rows", rows)
		}
	}
	tsreadParsed := "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"
	asofParsed := strings.Replace(asof, "%d", "$1", 1)
	return []timestampedReadCase{
		{"tsread-loop", func() { read("SELECT abalance, mz_now() FROM "+table+" WHERE aid = %d", "") }},
		{"asof-loop", func() { read(asof, "") }},
		{"tsread-prepared-loop", func() { read("", "tsread") }},
		{"asof-prepared-loop", func() { read("", "asof") }},
		{"tsread-parsed-loop", func() { read(tsreadParsed, "-") }},
		{"asof-parsed-loop", func() { read(asofParsed, "-") }},
	}
}

// preparedBatch appends to b the batch that binds the statement stmt to
// the text parameter aid and runs it (Bind, Describe, Execute, Sync),
// without an allocation of its own.
func preparedBatch(b []byte, stmt string, aid int) []byte {
	start := len(b)
	b = append(b, 'B', 0, 0, 0, 0, 0)
	b = append(append(b, stmt...), 0, 0, 0, 0, 1)
	at := len(b)
	b = strconv.AppendInt(append(b, 0, 0, 0, 0), int64(aid), 10)
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	b = append(b, 0, 0)
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-1))
	return append(b, 'D', 0, 0, 0, 6, 'P', 0, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0, 'S', 0, 0, 0, 4)
}

// TestLoopReadAllocations bounds the allocations of a timestamped read the
// event loop serves (loopReadCases): the session's part, the test's own
// few included. 32 and 34 when they were first served so (the session's
// own path: 39 and 40, TestTimestampedReadAllocations); sent as the
// unnamed statement's Parse, 11 and 9 (the session's own path: 72 and 70).
func TestLoopReadAllocations(t *testing.T) {
	want := map[string]float64{"tsread-loop": 34, "asof-loop": 36, "tsread-prepared-loop": 11, "asof-prepared-loop": 9,
		"tsread-parsed-loop": 13, "asof-parsed-loop": 11}
	for _, c := range loopReadCases(t) {
		c.next()
		c.next()
		got := fewestAllocsPerRun(20, 10, c.next)
		t.Logf("%s: %.1f allocations per read", c.name, got)
		if got > want[c.name] {
			t.Errorf("%s: %.1f allocations per read, want at most %.0f", c.name, got, want[c.name])
		}
	}
}

// BenchmarkLoopRead is BenchmarkTimestampedRead for loopReadCases.
func BenchmarkLoopRead(b *testing.B) {
	for _, c := range loopReadCases(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				c.next()
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// boundBatch is the client's batch that runs the prepared statement stmt
// with the parameters params: Bind, Describe of the portal (unless
// !describe), Execute, Sync.
func boundBatch(tb testing.TB, stmt string, describe bool, params ...string) []byte {
	tb.Helper()
	values := make([][]byte, len(params))
	for i, p := range params {
		values[i] = []byte(p)
	}
	msgs := []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: stmt, Parameters: values}}
	if describe {
		msgs = append(msgs, &pgproto3.Describe{ObjectType: 'P'})
	}
	return encodeFrames(tb, append(msgs, &pgproto3.Execute{}, &pgproto3.Sync{})...)
}

// handleBatch handles a batch's frames on the session's own path, as the
// frontend does, and returns what its client got.
func (c *loopClient) handleBatch(tb testing.TB, ctx context.Context, frames []byte) string {
	tb.Helper()
	for len(frames) > 0 {
		n := 1 + int(binary.BigEndian.Uint32(frames[1:5]))
		msg := decodeFrontend(tb, frames[:n])
		if err := c.s.Handle(ctx, msg, frames[:n]); err != nil {
			tb.Fatalf("%T: %v", msg, err)
		}
		frames = frames[n:]
	}
	return c.client.take()
}

// TestGuardedBindInLoop: a client-prepared timestamped read of the
// present and one AS OF a number are served by the event loop, Bind to
// Sync, with or without a Describe of the portal, once the session has
// seen the catalog and its search_path (before, the loop gave every such
// batch to the session's goroutine): the client gets its own answers
// only, its mz_now() the guard's pin, and no hold is left.
func TestGuardedBindInLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	table := fmt.Sprintf("lb_%d", time.Now().UnixNano())
	for _, sql := range []string{
		"CREATE TABLE " + table + " (aid int PRIMARY KEY, abalance int NOT NULL)",
		"INSERT INTO " + table + " SELECT g, g * 10 FROM generate_series(1, 100) g",
		"ALTER TABLE " + table + " SET (RETAIN HISTORY FOR '1h')",
	} {
		if out := query(t, ctx, c.s, c.client, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", sql, out)
		}
	}
	ts := firstValueOf(t, query(t, ctx, c.s, c.client, "SELECT mz_now()::text"))
	c.handleBatch(t, ctx, encodeFrames(t, &pgproto3.Parse{Name: "tsread", Query: "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"},
		&pgproto3.Parse{Name: "asof", Query: "SELECT abalance FROM " + table + " WHERE aid = $1 AS OF " + ts}, &pgproto3.Sync{}))
	// The first read learns the catalog.
	c.handleBatch(t, ctx, boundBatch(t, "tsread", false, "1"))
	last := uint64(0)
	for aid := 2; aid < 6; aid++ {
		describe := aid%2 == 0
		answer, inLoop := c.turnBatch(t, ctx, boundBatch(t, "tsread", describe, fmt.Sprint(aid)))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the prepared timestamped read back", aid)
		}
		first := "2"
		if describe {
			first = "2T"
		}
		checkAnswer(t, answer, first, fmt.Sprint(aid*10))
		now := secondValueOf(t, answer)
		if now < last {
			t.Fatalf("mz_now() went back from %d to %d", last, now)
		}
		last = now
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%d holds after the read", n)
		}
	}
	for range 2 {
		if err := c.s.lease.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Below the floor: the first read publishes its hold (the goroutine's).
	c.handleBatch(t, ctx, boundBatch(t, "asof", false, "1"))
	for aid := 2; aid < 5; aid++ {
		answer, inLoop := c.turnBatch(t, ctx, boundBatch(t, "asof", true, fmt.Sprint(aid)))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the prepared AS OF read back", aid)
		}
		checkAnswer(t, answer, "2T", fmt.Sprint(aid*10))
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%d holds after the read", n)
		}
	}
}

// TestGuardedBindInLoopRefused: when the catalog changed since the
// session saw it (another proxy made a table), the guard refuses a
// prepared read in the loop, which gives the batch back before relaying
// anything; the session's goroutine takes it over at its Bind
// (resumeLoopBind), without sending the client's messages again, binds
// it the ordinary way and sends them again: the client sees one answer,
// the second attempt's. The read after it is the loop's again.
func TestGuardedBindInLoopRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	other, otherClient := openSession(t, ctx, Config{})
	table := fmt.Sprintf("lbr_%d", time.Now().UnixNano())
	for _, sql := range []string{"CREATE TABLE " + table + " (v text)", "INSERT INTO " + table + " VALUES ('one')"} {
		if out := query(t, ctx, c.s, c.client, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", sql, out)
		}
	}
	c.handleBatch(t, ctx, encodeFrames(t, &pgproto3.Parse{Name: "r", Query: "SELECT v, mz_now() FROM " + table},
		&pgproto3.Sync{}))
	c.handleBatch(t, ctx, boundBatch(t, "r", true))
	if answer, inLoop := c.turnBatch(t, ctx, boundBatch(t, "r", true)); !inLoop {
		t.Fatal("the first read was given back")
	} else {
		checkAnswer(t, answer, "2T", "one")
	}
	if out := query(t, ctx, other, otherClient, "CREATE TABLE "+table+"_other (v text)"); strings.Contains(out, "ERROR") {
		t.Fatal(out)
	}
	answer, inLoop := c.turnBatch(t, ctx, boundBatch(t, "r", true))
	if inLoop {
		t.Fatal("a read of a stale catalog was served in the loop")
	}
	checkAnswer(t, answer, "2T", "one")
	if n := len(c.s.proxy.Holds()); n != 0 {
		t.Fatalf("%d holds after the refused read", n)
	}
	answer, inLoop = c.turnBatch(t, ctx, boundBatch(t, "r", true))
	if !inLoop {
		t.Fatal("the read after the refusal was given back")
	}
	checkAnswer(t, answer, "2T", "one")
}

// TestGuardedBindInLoopFollowsSearchPath: a prepared read whose session
// changed its search_path since the read's Parse is not the loop's: the
// session's goroutine plans and prepares it again (followSearchPath) and
// reads the table the new path names; the next Bind, planned under the
// path in force, is the loop's again and reads that table too.
func TestGuardedBindInLoopFollowsSearchPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	suffix := fmt.Sprint(time.Now().UnixNano())
	schema, table := "lbp_"+suffix, "lbpt_"+suffix
	for _, sql := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE TABLE public." + table + " (v text)", "INSERT INTO public." + table + " VALUES ('public')",
		"CREATE TABLE " + schema + "." + table + " (v text)", "INSERT INTO " + schema + "." + table + " VALUES ('other')",
	} {
		if out := query(t, ctx, c.s, c.client, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", sql, out)
		}
	}
	c.handleBatch(t, ctx, encodeFrames(t, &pgproto3.Parse{Name: "r", Query: "SELECT v, mz_now() FROM " + table},
		&pgproto3.Sync{}))
	c.handleBatch(t, ctx, boundBatch(t, "r", true))
	if answer, inLoop := c.turnBatch(t, ctx, boundBatch(t, "r", true)); !inLoop {
		t.Fatal("the read was given back")
	} else {
		checkAnswer(t, answer, "2T", "public")
	}
	query(t, ctx, c.s, c.client, "SET search_path = "+schema+", public")
	answer, inLoop := c.turnBatch(t, ctx, boundBatch(t, "r", true))
	if inLoop {
		t.Fatal("a read planned under another search_path was served in the loop")
	}
	checkAnswer(t, answer, "2T", "other")
	answer, inLoop = c.turnBatch(t, ctx, boundBatch(t, "r", true))
	if !inLoop {
		t.Fatal("the read planned again was given back")
	}
	checkAnswer(t, answer, "2T", "other")
}
