package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestLoopAnsweredBegin: the event loop answers a read-only transaction's
// plain BEGIN itself and sends it to the backend with the transaction's
// first read (proxy/loop_txn.go, replyBegin); whatever else comes first
// is served by the session's goroutine, which sends the BEGIN alone
// first. The same sequences of batches through a proxy with the loop and
// one without get the same frames: a BEGIN as a Query, as an unnamed
// Parse and as a prepared statement; followed by reads, by COMMIT or
// ROLLBACK at once, by SET LOCAL, by a write, by an error; a BEGIN with
// options or a Bind the backend refuses (not answered by the loop); a
// write acknowledged between the BEGIN and the first read is seen by it,
// as directly. TestReadOnlyTxnShape counts the round trips saved.
func TestLoopAnsweredBegin(t *testing.T) {
	ctx := testContext(t)
	on := startProxy(t, "--event-loop=true", "--metrics-listen", "127.0.0.1:0")
	off := startProxy(t, "--event-loop=false", "--metrics-listen", "127.0.0.1:0")
	table := fmt.Sprintf("lab_%d", time.Now().UnixNano())
	writer := on.connect(t, ctx)
	mustExec(t, ctx, writer, "CREATE TABLE "+table+" (k int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO "+table+" VALUES (1, 10), (2, 20)")
	q := queryFrame
	read := q("SELECT v FROM " + table + " WHERE k = 1")
	parsedBegin := func(params ...[]byte) []byte {
		return frames(&pgproto3.Parse{Query: "BEGIN"}, &pgproto3.Bind{Parameters: params},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	}
	preparedBegin := frames(&pgproto3.Bind{PreparedStatement: "lab_begin"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	parsedRead := frames(&pgproto3.Parse{Query: "SELECT v FROM " + table + " WHERE k = $1"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte("2")}}, &pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	// A read of a statement the client prepared, and a Bind of the
	// unnamed statement with no Parse in front of it.
	boundRead := frames(&pgproto3.Bind{PreparedStatement: "lab_read", Parameters: [][]byte{[]byte("1")}},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	unnamedBind := frames(&pgproto3.Bind{Parameters: [][]byte{[]byte("2")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
	sequences := []struct {
		name    string
		batches [][]byte
	}{
		{"query", [][]byte{q("BEGIN"), read, read, q("COMMIT")}},
		{"start transaction", [][]byte{q("START TRANSACTION"), read, q("COMMIT")}},
		{"parsed", [][]byte{parsedBegin(), parsedRead, read, q("COMMIT")}},
		{"prepared", [][]byte{preparedBegin, parsedRead, q("COMMIT")}},
		{"commit at once", [][]byte{q("BEGIN"), q("COMMIT")}},
		{"rollback at once", [][]byte{parsedBegin(), q("ROLLBACK")}},
		{"set local first", [][]byte{q("BEGIN"), q("SET LOCAL work_mem = '8MB'"), q("SHOW work_mem"), read, q("COMMIT"), q("SHOW work_mem")}},
		{"write first", [][]byte{q("BEGIN"), q("UPDATE " + table + " SET v = v WHERE k = 2"), read, q("COMMIT")}},
		{"error first", [][]byte{q("BEGIN"), q("SELECT 1 / 0"), read, q("ROLLBACK"), read}},
		{"error second", [][]byte{q("BEGIN"), read, q("SELECT 1 / 0"), q("COMMIT")}},
		{"options", [][]byte{q("BEGIN ISOLATION LEVEL SERIALIZABLE"), read, q("COMMIT")}},
		{"bind refused", [][]byte{parsedBegin([]byte("1")), read}},
		{"two statements", [][]byte{q("BEGIN; SELECT 1"), read, q("COMMIT")}},
		// The BEGIN Query in front of an extended read is sent as the
		// proxy's prepared BEGIN behind a Close of the unnamed statement,
		// which the Query drops: a Bind of it fails as directly.
		{"query then bound read", [][]byte{q("BEGIN"), boundRead, read, q("COMMIT")}},
		{"query drops the unnamed statement", [][]byte{parsedRead, q("BEGIN"), boundRead, unnamedBind, q("ROLLBACK")}},
		{"parsed then bound read", [][]byte{parsedBegin(), boundRead, q("COMMIT")}},
		{"prepared then bound read", [][]byte{preparedBegin, boundRead, unnamedBind, q("COMMIT")}},
	}
	clients := map[string]*rawClient{}
	for name, p := range map[string]*proxyProc{"loop": on, "goroutine": off} {
		c := p.dialRaw(t)
		c.startup()
		c.transcript(frames(&pgproto3.Parse{Name: "lab_begin", Query: "BEGIN"},
			&pgproto3.Parse{Name: "lab_read", Query: "SELECT v FROM " + table + " WHERE k = $1"}, &pgproto3.Sync{}))
		clients[name] = c
	}
	settle := func() {
		// The sessions learn their defaults and their last pins agree
		// (a write moves the count of writes): the loop takes the BEGIN.
		for _, c := range clients {
			for range 3 {
				for _, b := range [][]byte{q("BEGIN"), read, q("COMMIT")} {
					c.transcript(b)
				}
			}
		}
	}
	for _, sq := range sequences {
		for round := range 2 {
			settle()
			// One client's whole sequence, then the other's: a write
			// waits for the other's block to end.
			var got, want []string
			for _, b := range sq.batches {
				want = append(want, clients["goroutine"].transcript(b))
			}
			for _, b := range sq.batches {
				got = append(got, clients["loop"].transcript(b))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s (round %d): with the event loop\n%q\nwithout\n%q", sq.name, round, got, want)
			}
			if round == 0 {
				t.Logf("%s: %q", sq.name, want)
			}
		}
	}

	// A write acknowledged after the BEGIN the loop answered and before
	// the first read is in the read's snapshot, as directly (PostgreSQL
	// takes a block's snapshot at its first statement).
	c := clients["loop"]
	for i := range 3 {
		settle()
		c.transcript(q("BEGIN"))
		mustExec(t, ctx, writer, "UPDATE "+table+" SET v = v + 1 WHERE k = 1")
		want := fmt.Sprintf("T v:23:0; D %d; C SELECT 1; Z T", 11+i)
		if got := c.transcript(read); got != want {
			t.Fatalf("first read after a write: %s, want %s", got, want)
		}
		mustExec(t, ctx, writer, "UPDATE "+table+" SET v = v + 1 WHERE k = 2")
		c.transcript(q("COMMIT"))
	}
	for _, p := range []*proxyProc{on, off} {
		p.awaitHolds(t, 0, "after the transactions")
		p.mustAlive(t, ctx)
	}
}

// TestLoopBeginIdleTimeoutDefault: a session whose
// idle_in_transaction_session_timeout comes from its database's default
// (ALTER DATABASE ... SET, which the proxy sees no statement set) has
// its BEGIN sent as it is, not answered by the event loop (the peek finds
// the timeout set): the backend times the client's idle from the BEGIN
// on and ends the session, as directly. A session of another database
// without the timeout has its BEGIN answered by the loop, and lives.
func TestLoopBeginIdleTimeoutDefault(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--event-loop=true")
	setup := p.connect(t, ctx)
	mustExec(t, ctx, setup, "ALTER DATABASE "+db+" SET idle_in_transaction_session_timeout = '500ms'")
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE lbit (k int PRIMARY KEY, v int NOT NULL)", "INSERT INTO lbit VALUES (1, 10)")
	// The session's pins come to agree: the loop would take its BEGIN.
	for range 4 {
		mustExec(t, ctx, conn, "BEGIN", "SELECT v FROM lbit WHERE k = 1", "COMMIT")
	}
	if _, err := execSimple(ctx, conn, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	var v int
	err := conn.QueryRow(ctx, "SELECT v FROM lbit WHERE k = 1").Scan(&v)
	if code := sqlState(err); code != "25P03" && code != "08006" {
		t.Fatalf("a read after idling past the timeout: %v (SQLSTATE %q), want 25P03 or 08006", err, code)
	}

	other := p.connect(t, ctx)
	table := fmt.Sprintf("lbit_%d", time.Now().UnixNano())
	mustExec(t, ctx, other, "CREATE TABLE "+table+" (k int PRIMARY KEY, v int NOT NULL)", "INSERT INTO "+table+" VALUES (1, 10)")
	for range 4 {
		mustExec(t, ctx, other, "BEGIN", "SELECT v FROM "+table+" WHERE k = 1", "COMMIT")
	}
	if _, err := execSimple(ctx, other, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if err := other.QueryRow(ctx, "SELECT v FROM "+table+" WHERE k = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("read %d, %v; want 10", v, err)
	}
	mustExec(t, ctx, other, "COMMIT")
	p.mustAlive(t, ctx)
}
