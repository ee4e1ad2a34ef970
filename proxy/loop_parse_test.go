package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Timestamped reads sent as the unnamed statement's Parse in the event
// loop (loop_parse.go), on a session against the test server driven by a
// real loop (loopClient).

// parsedBatch is a driver's batch for a query with parameters: the
// unnamed statement parsed (with the parameter types declared), bound,
// its portal described (unless !describe), run, and Sync.
func parsedBatch(tb testing.TB, sql string, oids []uint32, describe bool, params ...string) []byte {
	tb.Helper()
	values := make([][]byte, len(params))
	for i, p := range params {
		values[i] = []byte(p)
	}
	msgs := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql, ParameterOIDs: oids}, &pgproto3.Bind{Parameters: values}}
	if describe {
		msgs = append(msgs, &pgproto3.Describe{ObjectType: 'P'})
	}
	return encodeFrames(tb, append(msgs, &pgproto3.Execute{}, &pgproto3.Sync{})...)
}

// newParsedReadTable makes a table of 100 keys (aid, abalance = aid * 10)
// with history, for the session of c.
func newParsedReadTable(tb testing.TB, ctx context.Context, c *loopClient, prefix string) string {
	tb.Helper()
	table := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	for _, sql := range []string{
		"CREATE TABLE " + table + " (aid int PRIMARY KEY, abalance int NOT NULL)",
		"INSERT INTO " + table + " SELECT g, g * 10 FROM generate_series(1, 100) g",
		"ALTER TABLE " + table + " SET (RETAIN HISTORY FOR '1h')",
	} {
		if out := query(tb, ctx, c.s, c.client, sql); strings.Contains(out, "ERROR") {
			tb.Fatalf("%s: %s", sql, out)
		}
	}
	return table
}

// TestParsedReadInLoop: a timestamped read of the present, one AS OF a
// number and one AS OF $2 (bound as text and as a declared bigint), each
// sent as the unnamed statement's Parse with its Bind, a Describe of the
// portal or none, Execute and Sync, are served by the event loop once the
// session has seen the catalog (on d31f8c1 the loop gave every such
// batch to the session's goroutine): the client gets its own answers,
// ParseComplete first, the Describe the rewrite's columns, its mz_now()
// the guard's pin, and no hold is left.
func TestParsedReadInLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	table := newParsedReadTable(t, ctx, c, "lp")
	ts := firstValueOf(t, query(t, ctx, c.s, c.client, "SELECT mz_now()::text"))
	tsread := "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"
	// The first read learns the catalog.
	c.handleBatch(t, ctx, parsedBatch(t, tsread, nil, true, "1"))
	last := uint64(0)
	for aid := 2; aid < 7; aid++ {
		describe := aid%2 == 0
		answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, tsread, nil, describe, fmt.Sprint(aid)))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the timestamped read back", aid)
		}
		first := "12"
		if describe {
			first = "12T"
			if !strings.Contains(answer, "mz_now\x00") || !strings.Contains(answer, "abalance\x00") {
				t.Fatalf("RowDescription without the read's columns: %q", answer)
			}
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
	asof := "SELECT abalance FROM " + table + " WHERE aid = $1 AS OF " + ts
	asofParam := "SELECT abalance FROM " + table + " WHERE aid = $1 AS OF $2"
	// Below the floor: the first read publishes its hold (the goroutine's).
	c.handleBatch(t, ctx, parsedBatch(t, asof, nil, true, "1"))
	for aid := 2; aid < 5; aid++ {
		for _, r := range []struct {
			batch []byte
			first string
		}{
			{parsedBatch(t, asof, nil, true, fmt.Sprint(aid)), "12T"},
			{parsedBatch(t, asofParam, nil, true, fmt.Sprint(aid), ts), "12T"},
			{parsedBatch(t, asofParam, []uint32{23, 20}, false, fmt.Sprint(aid), ts), "12"},
		} {
			answer, inLoop := c.turnBatch(t, ctx, r.batch)
			if !inLoop {
				t.Fatalf("aid %d: the loop gave the AS OF read back: %q", aid, r.batch)
			}
			checkAnswer(t, answer, r.first, fmt.Sprint(aid*10))
			if n := len(c.s.proxy.Holds()); n != 0 {
				t.Fatalf("%d holds after the read", n)
			}
		}
	}
}

// TestParsedReadInLoopAnswersAsGoroutine: what the client sees of a
// timestamped read sent as the unnamed statement's Parse is the same
// from the loop as from the session's goroutine, for a read whose Bind
// fails (a key that is no integer: 22P02), one whose rewrite the backend
// refuses (a column that does not exist: 42703 with its position), and
// AS OF a timestamp as text (the goroutine's: the backend reads it).
func TestParsedReadInLoopAnswersAsGoroutine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	table := newParsedReadTable(t, ctx, c, "lpg")
	tsread := "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"
	c.handleBatch(t, ctx, parsedBatch(t, tsread, nil, true, "1"))
	ms, err := strconv.ParseUint(firstValueOf(t, query(t, ctx, c.s, c.client, "SELECT mz_now()::text")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		batch  []byte
		inLoop bool
	}{
		{"bad key", parsedBatch(t, tsread, nil, true, "x"), true},
		{"unknown column", parsedBatch(t, "SELECT nope, mz_now() FROM "+table+" WHERE aid = $1", nil, true, "1"), true},
		{"AS OF text", parsedBatch(t, "SELECT abalance FROM "+table+" WHERE aid = $1 AS OF $2", nil, true, "1",
			time.UnixMilli(int64(ms)).UTC().Format("2006-01-02 15:04:05.000+00")), false},
	} {
		want := c.handleBatch(t, ctx, tc.batch)
		got, inLoop := c.turnBatch(t, ctx, tc.batch)
		if inLoop != tc.inLoop {
			t.Errorf("%s: served in the loop %v, want %v", tc.name, inLoop, tc.inLoop)
		}
		if got != want {
			t.Errorf("%s: the loop's answer\n%q\nthe goroutine's\n%q", tc.name, got, want)
		}
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%s: %d holds after the read", tc.name, n)
		}
	}
}

// TestParsedReadInLoopRefused: when the catalog changed since the session
// saw it (another proxy made a table), the guard refuses the read in the
// loop, which gives the batch back before relaying anything; the
// session's goroutine takes it over at its Parse (resumeLoopParse), drops
// the skipped batch's answers and serves it afresh: the client sees one
// answer, the second attempt's. The read after it is the loop's again.
func TestParsedReadInLoopRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	other, otherClient := openSession(t, ctx, Config{})
	table := newParsedReadTable(t, ctx, c, "lpr")
	tsread := "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"
	c.handleBatch(t, ctx, parsedBatch(t, tsread, nil, true, "1"))
	if answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, tsread, nil, true, "2")); !inLoop {
		t.Fatal("the first read was given back")
	} else {
		checkAnswer(t, answer, "12T", "20")
	}
	if out := query(t, ctx, other, otherClient, "CREATE TABLE "+table+"_other (v text)"); strings.Contains(out, "ERROR") {
		t.Fatal(out)
	}
	answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, tsread, nil, true, "3"))
	if inLoop {
		t.Fatal("a read of a stale catalog was served in the loop")
	}
	checkAnswer(t, answer, "12T", "30")
	if n := len(c.s.proxy.Holds()); n != 0 {
		t.Fatalf("%d holds after the refused read", n)
	}
	answer, inLoop = c.turnBatch(t, ctx, parsedBatch(t, tsread, nil, true, "4"))
	if !inLoop {
		t.Fatal("the read after the refusal was given back")
	}
	checkAnswer(t, answer, "12T", "40")
}

// TestParsedReadInLoopNoticeInGuard: a notice among the guard's answers
// (the session's client_min_messages at debug5: PostgreSQL reports its
// transactions' starts) gives the batch back though the guard answered;
// the session's goroutine reads the guard's answers at the Parse and
// follows the rest as the loop sent it (takeParsedBind), without sending
// anything again: the client gets its read, and no hold is left.
func TestParsedReadInLoopNoticeInGuard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	table := newParsedReadTable(t, ctx, c, "lpn")
	tsread := "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"
	c.handleBatch(t, ctx, parsedBatch(t, tsread, nil, true, "1"))
	if answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, tsread, nil, true, "2")); !inLoop {
		t.Fatal("the read was given back")
	} else {
		checkAnswer(t, answer, "12T", "20")
	}
	query(t, ctx, c.s, c.client, "SET client_min_messages = debug5")
	for aid := 3; aid < 6; aid++ {
		answer, inLoop := c.stepBatch(t, ctx, parsedBatch(t, tsread, nil, true, fmt.Sprint(aid)))
		if inLoop {
			t.Fatal("a read with notices among its guard's answers was served in the loop")
		}
		if got := strings.ReplaceAll(answerTypes(answer), "N", ""); got != "12TDCZ" {
			t.Fatalf("answer's frames %q (notices aside), want 12TDCZ: %q", got, answer)
		}
		if got := firstValueOf(t, answer); got != fmt.Sprint(aid*10) {
			t.Fatalf("read %q, want %d", got, aid*10)
		}
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%d holds after the read", n)
		}
	}
	query(t, ctx, c.s, c.client, "RESET client_min_messages")
	// (RESET makes the session ask for its search_path again: the
	// goroutine's.)
	c.stepBatch(t, ctx, parsedBatch(t, tsread, nil, true, "6"))
	if answer, inLoop := c.stepBatch(t, ctx, parsedBatch(t, tsread, nil, true, "7")); !inLoop {
		t.Fatal("the read after the notices was given back")
	} else {
		checkAnswer(t, answer, "12T", "70")
	}
}

// TestParsedReadInLoopBindsOneStatement: the loop binds a statement of
// the proxy's for a timestamped read sent as the unnamed statement's
// Parse, prepared once per backend connection at the text's second use
// (on b63d217 every read sent its rewrite as the unnamed statement's
// Parse, which PostgreSQL parsed and planned each time): after six reads
// the backend has one such statement, bound five times. A Bind or a
// Describe of the unnamed statement that the client does not parse again
// finds the client's statement (parsed again: reparseUnnamed); DISCARD
// ALL drops the proxy's statement, prepared again after it.
func TestParsedReadInLoopBindsOneStatement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	table := newParsedReadTable(t, ctx, c, "lps")
	tsread := "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"
	c.handleBatch(t, ctx, parsedBatch(t, tsread, nil, true, "1"))
	reads := func(from, to int) {
		t.Helper()
		for aid := from; aid < to; aid++ {
			answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, tsread, nil, aid%2 == 0, fmt.Sprint(aid)))
			if !inLoop {
				t.Fatalf("aid %d: the loop gave the read back", aid)
			}
			first := "12"
			if aid%2 == 0 {
				first = "12T"
			}
			checkAnswer(t, answer, first, fmt.Sprint(aid*10))
		}
	}
	// The backend's statements of the read, each with its runs.
	prepared := func() string {
		t.Helper()
		return firstValueOf(t, query(t, ctx, c.s, c.client, "SELECT coalesce(string_agg(name || ' ' || (generic_plans + custom_plans), ', '), '')"+
			" FROM pg_prepared_statements WHERE name LIKE 'mzproxy_read_%' AND statement LIKE '%"+table+"%'"))
	}
	reads(2, 8)
	// The client's unnamed statement, bound and described again unparsed
	// (a simple Query, such as the one prepared sends, drops it).
	again := encodeFrames(t, &pgproto3.Bind{Parameters: [][]byte{[]byte("9")}}, &pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	answer, _ := c.turnBatch(t, ctx, again)
	checkAnswer(t, answer, "2T", "90")
	reads(10, 12)
	answer, _ = c.turnBatch(t, ctx, encodeFrames(t, &pgproto3.Describe{ObjectType: 'S'}, &pgproto3.Sync{}))
	if got := answerTypes(answer); got != "tTZ" {
		t.Fatalf("Describe of the statement: %q, want tTZ: %q", got, answer)
	}
	if params := binary.BigEndian.Uint16([]byte(answer[5:7])); params != 1 {
		t.Fatalf("ParameterDescription of %d parameters, want the client's 1", params)
	}
	before := prepared()
	if name, runs, _ := strings.Cut(before, " "); runs != "7" || strings.Contains(runs, ",") {
		t.Fatalf("the backend's statements of the read and their runs: %q, want one (%s) run 7 times", before, name)
	}
	if out := query(t, ctx, c.s, c.client, "DISCARD ALL"); strings.Contains(out, "ERROR") {
		t.Fatal(out)
	}
	// (The session asks for its search_path again: the goroutine's.)
	for i := 0; ; i++ {
		answer, inLoop := c.stepBatch(t, ctx, parsedBatch(t, tsread, nil, true, "1"))
		checkAnswer(t, answer, "12T", "10")
		if inLoop {
			break
		}
		if i == 3 {
			t.Fatal("the reads after DISCARD ALL stay the goroutine's")
		}
	}
	reads(12, 15)
	after := prepared()
	if name, runs, _ := strings.Cut(after, " "); strings.Contains(runs, ",") || runs < "3" || len(runs) != 1 ||
		strings.HasPrefix(before, name+" ") {
		t.Fatalf("after DISCARD ALL, the backend's statements of the read and their runs: %q, want one other than %q, run 3 or 4 times",
			after, before)
	}
}
