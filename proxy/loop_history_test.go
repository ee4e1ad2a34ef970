package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// History mode's reads sent as the unnamed statement's Parse in the event
// loop (issue 15): planned with the catalog seen last behind the read
// guard (loop_parse.go), not after a round trip of the Parse's own on the
// database's catalog connection.

// newHistoryLoopClient is newLoopClient for a proxy in history mode.
func newHistoryLoopClient(tb testing.TB, ctx context.Context) *loopClient {
	tb.Helper()
	s, client := openSession(tb, ctx, Config{EventLoop: true, HistoryReads: true})
	return wrapLoopClient(tb, s, client)
}

// TestHistoryParsedReadInLoop: in history mode a read sent as the unnamed
// statement's Parse with its Bind, a Describe of the portal or none,
// Execute and Sync, is served by the event loop once the session has
// seen the catalog and the table's history is built (on bb2708d no
// session in history mode was the loop's). Each read sees the write
// committed before it, and leaves no hold.
func TestHistoryParsedReadInLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newHistoryLoopClient(t, ctx)
	table := newParsedReadTable(t, ctx, c, "hlp")
	read := "SELECT abalance FROM " + table + " WHERE aid = $1"
	// The first read learns the catalog and builds the table's history.
	checkAnswer(t, c.handleBatch(t, ctx, parsedBatch(t, read, nil, true, "1")), "12T", "10")
	for aid := 2; aid < 7; aid++ {
		describe := aid%2 == 0
		answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, read, nil, describe, fmt.Sprint(aid)))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the history read back", aid)
		}
		first := "12"
		if describe {
			first = "12T"
		}
		checkAnswer(t, answer, first, fmt.Sprint(aid*10))
		// A write, then the next read of it in the loop.
		update := fmt.Sprintf("UPDATE %s SET abalance = abalance + 1 WHERE aid = %d", table, aid)
		if out := query(t, ctx, c.s, c.client, update); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", update, out)
		}
		answer, inLoop = c.turnBatch(t, ctx, parsedBatch(t, read, nil, true, fmt.Sprint(aid)))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the read after the write back", aid)
		}
		checkAnswer(t, answer, "12T", fmt.Sprint(aid*10+1))
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%d holds after the read", n)
		}
	}
}

// TestHistoryQueryInLoop: in history mode a plain read sent as a Query is
// served by the event loop behind the read guard once the session has
// seen the catalog (on bb2708d no session in history mode was the
// loop's): it sees the write before it and leaves no hold. After another
// proxy drops the table and makes a new one of the same name, the guard
// refuses the read in the loop and the session's goroutine plans it
// again: the client sees the new table's row only. A Query that is no
// plain read (SHOW transaction_isolation, which the proxy answers) goes
// to the goroutine, and gets its answer.
func TestHistoryQueryInLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newHistoryLoopClient(t, ctx)
	other, otherClient := openSession(t, ctx, Config{HistoryReads: true})
	table := newParsedReadTable(t, ctx, c, "hlq")
	read := func(aid int) string { return fmt.Sprintf("SELECT * FROM %s WHERE aid = %d", table, aid) }
	// The first read learns the catalog and builds the table's history.
	if got := secondValueOf(t, query(t, ctx, c.s, c.client, read(1))); got != 10 {
		t.Fatalf("read %d, want 10", got)
	}
	for aid := 2; aid < 5; aid++ {
		answer, inLoop := c.turn(t, ctx, read(aid))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the history read back", aid)
		}
		if got := secondValueOf(t, answer); got != uint64(aid*10) {
			t.Fatalf("aid %d: read %d", aid, got)
		}
		update := fmt.Sprintf("UPDATE %s SET abalance = abalance + 1 WHERE aid = %d", table, aid)
		if out := query(t, ctx, c.s, c.client, update); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", update, out)
		}
		answer, inLoop = c.turn(t, ctx, read(aid))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the read after the write back", aid)
		}
		if got := secondValueOf(t, answer); got != uint64(aid*10+1) {
			t.Fatalf("aid %d: read %d after the write", aid, got)
		}
		if n := len(c.s.proxy.Holds()); n != 0 {
			t.Fatalf("%d holds after the read", n)
		}
	}
	want := query(t, ctx, c.s, c.client, "SHOW transaction_isolation")
	if got, inLoop := c.turn(t, ctx, "SHOW transaction_isolation"); inLoop || got != want {
		t.Fatalf("SHOW in the loop %v: %q, want %q", inLoop, got, want)
	}
	replaceTable(t, ctx, other, otherClient, table)
	answer, inLoop := c.turn(t, ctx, read(2))
	if inLoop {
		t.Fatal("a read planned with a stale catalog was served in the loop")
	}
	if !strings.Contains(answer, "extra\x00") || !strings.Contains(answer, "777") || !strings.Contains(answer, "new") {
		t.Fatalf("not the new table's row: %q", answer)
	}
	if n := len(c.s.proxy.Holds()); n != 0 {
		t.Fatalf("%d holds after the refused read", n)
	}
	if answer, inLoop := c.turn(t, ctx, read(2)); !inLoop || !strings.Contains(answer, "777") {
		t.Fatalf("the read after the refusal: in the loop %v, %q", inLoop, answer)
	}
}

// TestHistoryParsedReadInLoopStale: a read planned with the catalog the
// session saw last, after another proxy dropped the table and made a
// new one of the same name (different rows, one more column): the guard
// refuses the plan in the loop, the batch goes back to the session's
// goroutine, which plans it again with the current catalog; the client
// sees the new table's row and columns only, never the old history's.
// The read after it is the loop's again.
// replaceTable drops table through another session and creates it again
// with a column more and another row 2 (aid 2, abalance 777, extra 'new'),
// so a plan of the old table is stale.
func replaceTable(t *testing.T, ctx context.Context, other *Session, otherClient *clientBuffer, table string) {
	t.Helper()
	for _, sql := range []string{
		"DROP TABLE " + table,
		"CREATE TABLE " + table + " (aid int PRIMARY KEY, abalance int NOT NULL, extra text)",
		"INSERT INTO " + table + " VALUES (2, 777, 'new')",
	} {
		if out := query(t, ctx, other, otherClient, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", sql, out)
		}
	}
}

func TestHistoryParsedReadInLoopStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newHistoryLoopClient(t, ctx)
	other, otherClient := openSession(t, ctx, Config{HistoryReads: true})
	table := newParsedReadTable(t, ctx, c, "hlps")
	read := "SELECT * FROM " + table + " WHERE aid = $1"
	checkAnswer(t, c.handleBatch(t, ctx, parsedBatch(t, read, nil, true, "1")), "12T", "1")
	if answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, read, nil, true, "2")); !inLoop {
		t.Fatal("the first read was given back")
	} else if strings.Contains(answer, "extra\x00") {
		t.Fatalf("the old table has no column extra: %q", answer)
	}
	replaceTable(t, ctx, other, otherClient, table)
	answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, read, nil, true, "2"))
	if inLoop {
		t.Fatal("a read planned with a stale catalog was served in the loop")
	}
	checkAnswer(t, answer, "12T", "2")
	if !strings.Contains(answer, "extra\x00") || !strings.Contains(answer, "777") || !strings.Contains(answer, "new") {
		t.Fatalf("not the new table's row: %q", answer)
	}
	if n := len(c.s.proxy.Holds()); n != 0 {
		t.Fatalf("%d holds after the refused read", n)
	}
	answer, inLoop = c.turnBatch(t, ctx, parsedBatch(t, read, nil, true, "2"))
	if !inLoop {
		t.Fatal("the read after the refusal was given back")
	}
	if !strings.Contains(answer, "777") || !strings.Contains(answer, "new") {
		t.Fatalf("not the new table's row: %q", answer)
	}
}
