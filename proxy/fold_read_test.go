package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestFoldedRead: a steady session's timestamped read of the present,
// prepared on its connection, runs in the loop with its guard folded in
// (foldedRead: one statement, no guard of its own); everything that makes
// the peek guard refuse or pin makes the folded read refuse, and the read
// is then served the ordinary way with the right answer: a write through
// another session (the writes moved), a table dropped and made again, a
// view replaced through another session (the revision moved with no write
// counted). A read with no row folds too; a read that fails on its own is
// answered with its own error, once, and is not folded again. Without the
// fold (4fb8452) no read's text is the folded one, and the test fails at
// the first fold.
func TestFoldedRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	other, otherClient := openSession(t, ctx, Config{})
	table := fmt.Sprintf("fold_%d", time.Now().UnixNano())
	run := func(sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			if out := query(t, ctx, other, otherClient, sql); strings.Contains(out, "ERROR") {
				t.Fatalf("%s: %s", sql, out)
			}
		}
	}
	folded := func() bool { return strings.Contains(c.s.be.reads.scratch.key.text, foldAlias) }
	// key is the next of the keys 1 to 3, all of the same value: a read
	// whose text differs from the last one only in a literal is sent as a
	// statement prepared on the connection (planner.Bound), which is what
	// folds.
	keys := 0
	key := func(read string) string {
		keys++
		return fmt.Sprintf(read, 1+keys%3)
	}
	// fold reads until one runs folded in the loop; before each, the
	// other session's read of the present pins P afresh when it is a
	// second old (a late tick would make the fold refuse).
	fold := func(read, first, want string) string {
		t.Helper()
		for range 50 {
			run("SELECT mz_now()")
			answer, inLoop := c.turn(t, ctx, key(read))
			checkFrames(t, answer, first)
			if want != "" {
				checkAnswer(t, answer, first, want)
			}
			if inLoop && folded() && c.s.be.peek.steady {
				return answer
			}
		}
		t.Fatalf("no read folded in 50 (%+v)", c.s.be.peek)
		return ""
	}
	run("CREATE TABLE "+table+" (k int, v int)", "INSERT INTO "+table+" VALUES (1, 0), (2, 0), (3, 0)")
	read := "SELECT v, mz_now() FROM " + table + " WHERE k = %d"
	answer := fold(read, "T", "0")
	if ts := secondValueOf(t, answer); ts == 0 {
		t.Fatalf("mz_now() of a folded read: %d", ts)
	}
	for i := 1; i <= 2; i++ {
		run(fmt.Sprintf("UPDATE %s SET v = %d", table, i))
		answer, _ := c.turn(t, ctx, key(read))
		checkAnswer(t, answer, "T", fmt.Sprint(i))
		if c.s.be.peek.steady {
			t.Errorf("after write %d the session still reads through the count it learned before", i)
		}
		fold(read, "T", fmt.Sprint(i))
	}
	// No row: the fold's answer is the CommandComplete.
	fold("SELECT v, mz_now() FROM "+table+" WHERE k = 1%d", "T", "")
	run("DROP TABLE "+table, "CREATE TABLE "+table+" (k int, v int)", "INSERT INTO "+table+" VALUES (1, 7), (2, 7), (3, 7)")
	answer, inLoop := c.turn(t, ctx, key(read))
	if inLoop {
		t.Fatal("a read of a stale catalog was served in the loop")
	}
	checkAnswer(t, answer, "T", "7")
	fold(read, "T", "7")
	view := table + "_v"
	run("CREATE VIEW " + view + " AS SELECT k, v AS m FROM " + table)
	viewRead := "SELECT m, mz_now() FROM " + view + " WHERE k = %d"
	fold(viewRead, "T", "7")
	run("CREATE OR REPLACE VIEW " + view + " AS SELECT k, v + 100 AS m FROM " + table)
	answer, inLoop = c.turn(t, ctx, key(viewRead))
	if inLoop {
		t.Fatal("a read of a replaced view was served in the loop with the plan of its old text")
	}
	checkAnswer(t, answer, "T", "107")
	// A read that fails on its own: its error once, relayed from the
	// folded read (not run again: a read's functions may have effects).
	bad := "SELECT 1 / (v - 7), mz_now() FROM " + table + " WHERE k = %d"
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatal("no failing read folded in 50")
		}
		run("SELECT mz_now()")
		c.s.be.reads.scratch.key = readStatementKey{}
		answer, inLoop := c.turn(t, ctx, key(bad))
		if n := strings.Count(answer, "22012"); n != 1 || frameTypes(answer) != "TEZ" && frameTypes(answer) != "EZ" {
			t.Fatalf("failing read %d: frames %q, 22012 %d times: %q", i, frameTypes(answer), n, answer)
		}
		if inLoop && folded() {
			break
		}
	}
	// Columns of the same name, and an ORDER BY of the read's own.
	run("INSERT INTO " + table + " VALUES (4, 8), (5, 9)")
	fold("SELECT v, v, mz_now() FROM "+table+" WHERE k = %d", "T", "7")
	answer = fold("SELECT v, mz_now() FROM "+table+" WHERE k > %d ORDER BY v DESC", "T", "")
	if got := firstValueOf(t, answer); got != "9" || !strings.HasPrefix(frameTypes(answer), "TDD") {
		t.Fatalf("ordered read: frames %q, first %q", frameTypes(answer), got)
	}
	// A refusal at the Execute of the batch that prepared the folded
	// statement (a new text's second use, after a write): the statement
	// stays known, not left on the backend unnamed to the proxy.
	fresh := "SELECT v + 0, mz_now() FROM " + table + " WHERE k = %d"
	fold(read, "T", "7")
	for range 2 { // the skeleton's first text, then the folded text's first use
		run("SELECT mz_now()")
		c.turn(t, ctx, key(fresh))
	}
	if !c.s.be.peek.steady {
		t.Fatal("the session is not steady before the write")
	}
	run("UPDATE " + table + " SET v = 7")
	if answer, _ := c.turn(t, ctx, key(fresh)); !strings.Contains(answer, "SELECT 1") {
		t.Fatalf("read after a write: %q", answer)
	}
	answer, _ = c.turn(t, ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name ~ '^mzproxy_read_[0-9]+_'")
	if got, want := firstValueOf(t, answer), fmt.Sprint(c.s.be.reads.cache().Len()); got != want {
		t.Fatalf("%s of the proxy's read statements on the backend, %s known to the proxy", got, want)
	}
	if n := len(c.s.proxy.Holds()); n != 0 {
		t.Fatalf("%d holds after the reads", n)
	}
}

// frameTypes is the type bytes of answer's frames.
func frameTypes(answer string) string {
	var types []byte
	for b := []byte(answer); len(b) >= 5; {
		types = append(types, b[0])
		b = b[1+int(binary.BigEndian.Uint32(b[1:5])):]
	}
	return string(types)
}

// checkFrames checks that answer is a read's rows with first its first
// frame's type.
func checkFrames(tb testing.TB, answer, first string) {
	tb.Helper()
	got := frameTypes(answer)
	if rows := strings.TrimRight(strings.TrimPrefix(strings.TrimSuffix(got, "CZ"), first), "D"); rows != "" || !strings.HasSuffix(got, "CZ") {
		tb.Fatalf("answer's frames %q: %q", got, answer)
	}
}
