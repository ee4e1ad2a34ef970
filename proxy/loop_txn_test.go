package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// answerTypes are the types of answer's frames.
func answerTypes(answer string) string {
	var types []byte
	for _, f := range answerFrames(answer) {
		types = append(types, f[0])
	}
	return string(types)
}

// answerFrames splits answer into its whole frames (a cut last one
// left out).
func answerFrames(answer string) []string {
	var frames []string
	for b := answer; len(b) >= 5; {
		n := 1 + int(binary.BigEndian.Uint32([]byte(b[1:5])))
		if n > len(b) {
			break
		}
		frames = append(frames, b[:n])
		b = b[n:]
	}
	return frames
}

// frameOf is answer's first frame of type typ.
func frameOf(tb testing.TB, answer string, typ byte) string {
	tb.Helper()
	for _, f := range answerFrames(answer) {
		if f[0] == typ {
			return f
		}
	}
	tb.Fatalf("no frame %q in %q", typ, answer)
	return ""
}

// stepBatch runs a client's batch (a Query, or extended messages up to a
// Sync) as the frontend would: through the event loop when the session
// is one it can drive, else on the session's own path.
func (c *loopClient) stepBatch(tb testing.TB, ctx context.Context, batch []byte) (answer string, inLoop bool) {
	tb.Helper()
	if c.s.LoopBackend() == nil {
		return c.handleBatch(tb, ctx, batch), false
	}
	return c.turnBatch(tb, ctx, batch)
}

// txnShape is how a client sends a read-only transaction's statements:
// each one's batch and the frames its answer begins with (before a
// read's DataRow, CommandComplete and ReadyForQuery).
type txnShape struct {
	name               string
	prepare            []string // statements parsed first: name, text
	begin, commit      func(tb testing.TB) []byte
	read               func(tb testing.TB, table string, aid int) []byte
	beginAns, readHead string
	// describe, if set, is a batch sent before each read (its answer
	// describe's types): pgx's describe_exec mode parses and describes
	// the unnamed statement, then binds it in a batch of its own.
	describe    func(tb testing.TB, table string) []byte
	describeAns string
}

func simpleFrame(sql string) func(testing.TB) []byte {
	return func(tb testing.TB) []byte { return encodeFrames(tb, &pgproto3.Query{String: sql}) }
}

// unnamedFrame is a driver's batch for sql with parameters: the unnamed
// statement parsed, bound, described and run (pgbench -M extended, pgx's
// exec modes, node-postgres, psycopg).
func unnamedFrame(sql string, params ...string) func(testing.TB) []byte {
	return func(tb testing.TB) []byte {
		values := make([][]byte, len(params))
		for i, p := range params {
			values[i] = []byte(p)
		}
		return encodeFrames(tb, &pgproto3.Parse{Query: sql}, &pgproto3.Bind{Parameters: values},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	}
}

func boundFrame(stmt string) func(testing.TB) []byte {
	return func(tb testing.TB) []byte { return boundBatch(tb, stmt, true) }
}

// txnShapes: simple Queries; pgbench -M prepared (each statement
// prepared, bound with a Describe of the portal); pgx's cached statements
// (BEGIN and COMMIT simple, the reads prepared, with a Describe of the
// portal); lib/pq's Stmt (the read's Bind, Execute and Sync, no
// Describe); a driver's query with parameters (the unnamed statement
// parsed, bound, described and run: pgx's exec modes, node-postgres,
// psycopg); pgbench -M extended (BEGIN and COMMIT so too); pgx's
// describe_exec (the unnamed statement parsed and described, then bound
// in a batch of its own).
func txnShapes() []txnShape {
	simpleRead := func(tb testing.TB, table string, aid int) []byte {
		return encodeFrames(tb, &pgproto3.Query{String: fmt.Sprintf("SELECT abalance FROM %s WHERE aid = %d", table, aid)})
	}
	boundRead := func(describe bool) func(testing.TB, string, int) []byte {
		return func(tb testing.TB, _ string, aid int) []byte {
			return boundBatch(tb, "read", describe, fmt.Sprint(aid))
		}
	}
	return []txnShape{
		{name: "simple", begin: simpleFrame("BEGIN"), commit: simpleFrame("COMMIT"), read: simpleRead,
			beginAns: "CZ", readHead: "T"},
		{name: "prepared", prepare: []string{"begin", "BEGIN", "commit", "COMMIT", "read", "SELECT abalance FROM %s WHERE aid = $1"},
			begin: boundFrame("begin"), commit: boundFrame("commit"), read: boundRead(true), beginAns: "2nCZ", readHead: "2T"},
		{name: "cached", prepare: []string{"read", "SELECT abalance FROM %s WHERE aid = $1"},
			begin: simpleFrame("BEGIN"), commit: simpleFrame("COMMIT"), read: boundRead(true), beginAns: "CZ", readHead: "2T"},
		{name: "stmt", prepare: []string{"read", "SELECT abalance FROM %s WHERE aid = $1"},
			begin: simpleFrame("BEGIN"), commit: simpleFrame("COMMIT"), read: boundRead(false), beginAns: "CZ", readHead: "2"},
		{name: "unnamed", begin: simpleFrame("BEGIN"), commit: simpleFrame("COMMIT"), read: func(tb testing.TB, table string, aid int) []byte {
			return unnamedFrame("SELECT abalance FROM "+table+" WHERE aid = $1", fmt.Sprint(aid))(tb)
		}, beginAns: "CZ", readHead: "12T"},
		{name: "extended", begin: unnamedFrame("BEGIN"), commit: unnamedFrame("COMMIT"), read: func(tb testing.TB, table string, aid int) []byte {
			return unnamedFrame("SELECT abalance FROM "+table+" WHERE aid = $1", fmt.Sprint(aid))(tb)
		}, beginAns: "12nCZ", readHead: "12T"},
		{name: "described", begin: simpleFrame("BEGIN"), commit: simpleFrame("COMMIT"), describe: func(tb testing.TB, table string) []byte {
			return encodeFrames(tb, &pgproto3.Parse{Query: "SELECT abalance FROM " + table + " WHERE aid = $1"},
				&pgproto3.Describe{ObjectType: 'S'}, &pgproto3.Sync{})
		}, describeAns: "1tTZ", read: func(tb testing.TB, _ string, aid int) []byte {
			return boundBatch(tb, "", true, fmt.Sprint(aid))
		}, beginAns: "CZ", readHead: "2T"},
	}
}

// TestReadOnlyTxnInLoop: once the session's pins agree (no peek before
// BEGIN), a read-only transaction is served by the event loop whole,
// simple or prepared (before, every statement of it went to the session's
// goroutine, and a prepared one's always): BEGIN, the first read with the
// pin in front of it (nothing of the pin's reaches the client), a later
// read at the same snapshot while another proxy writes, COMMIT, which
// releases its holds. When a write came since the last pin, the guard
// refuses in the loop, which gives the read back before relaying
// anything; the goroutine pins with the gate and the read sees the write;
// later transactions are the loop's again.
func TestReadOnlyTxnInLoop(t *testing.T) {
	for _, shape := range txnShapes() {
		t.Run(shape.name, func(t *testing.T) { testReadOnlyTxnInLoop(t, shape) })
	}
}

func testReadOnlyTxnInLoop(t *testing.T, shape txnShape) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	other, otherClient := openSession(t, ctx, Config{})
	table := fmt.Sprintf("ltx_%d", time.Now().UnixNano())
	for _, sql := range []string{
		"CREATE TABLE " + table + " (aid int PRIMARY KEY, abalance int NOT NULL)",
		"INSERT INTO " + table + " SELECT g, g * 10 FROM generate_series(1, 10) g",
	} {
		if out := query(t, ctx, c.s, c.client, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", sql, out)
		}
	}
	for i := 0; i < len(shape.prepare); i += 2 {
		sql := strings.ReplaceAll(shape.prepare[i+1], "%s", table)
		c.handleBatch(t, ctx, encodeFrames(t, &pgproto3.Parse{Name: shape.prepare[i], Query: sql}, &pgproto3.Sync{}))
	}
	// readStep runs a read (after its describe batch, if the shape has
	// one) and reports whether the loop served all of it.
	readStep := func(read []byte, want string) bool {
		t.Helper()
		inLoop := true
		if shape.describe != nil {
			answer, served := c.stepBatch(t, ctx, shape.describe(t, table))
			if got := answerTypes(answer); got != shape.describeAns {
				t.Fatalf("the describe batch answered %q (%q)", got, answer)
			}
			inLoop = served
		}
		answer, served := c.stepBatch(t, ctx, read)
		checkAnswer(t, answer, shape.readHead, want)
		return inLoop && served
	}
	// txn runs one read-only transaction, a write of another proxy's
	// between its reads when write, and reports which statements the loop
	// served.
	txn := func(write bool, want1, want2 string) (served [4]bool) {
		t.Helper()
		var answer string
		answer, served[0] = c.stepBatch(t, ctx, shape.begin(t))
		if got := answerTypes(answer); got != shape.beginAns {
			t.Fatalf("BEGIN answered %q (%q)", got, answer)
		}
		served[1] = readStep(shape.read(t, table, 1), want1)
		if n := len(c.s.proxy.Holds()); n == 0 {
			t.Fatal("the transaction holds nothing after its first read")
		}
		if write {
			if out := query(t, ctx, other, otherClient, "UPDATE "+table+" SET abalance = abalance + 1 WHERE aid = 1"); strings.Contains(out, "ERROR") {
				t.Fatal(out)
			}
		}
		served[2] = readStep(shape.read(t, table, 1), want2)
		answer, served[3] = c.stepBatch(t, ctx, shape.commit(t))
		if got := answerTypes(answer); got != shape.beginAns {
			t.Fatalf("COMMIT answered %q (%q)", got, answer)
		}
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%d holds after COMMIT", n)
		}
		if c.s.tx != txIdle || c.s.txn.phase != txnNone {
			t.Fatalf("after COMMIT: transaction status %c, phase %v", c.s.tx, c.s.txn.phase)
		}
		return served
	}
	// The session's own path learns the search_path and the catalog, and
	// its pins come to agree.
	for range 3 {
		txn(false, "10", "10")
	}
	all := [4]bool{true, true, true, true}
	for i := range 2 {
		if served := txn(false, "10", "10"); served != all {
			t.Fatalf("transaction %d: the loop served %v of BEGIN, read, read, COMMIT", i, served)
		}
	}
	// The second read is at the first's snapshot.
	if served := txn(true, "10", "10"); served != all {
		t.Fatalf("with a write between its reads: the loop served %v", served)
	}
	// A write since the last pin: the guard refuses, and the goroutine
	// pins with the gate.
	served := txn(false, "11", "11")
	if served[1] {
		t.Fatal("the first read after a write was served by the loop: its guard had to refuse")
	}
	for i := range 4 {
		if served = txn(false, "11", "11"); served == all {
			return
		}
		t.Logf("transaction %d after the write: the loop served %v", i, served)
	}
	t.Fatal("the transactions after the refused guard never went back to the loop")
}
