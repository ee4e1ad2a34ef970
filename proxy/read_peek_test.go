package proxy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadGuardLearnsWrites: the guards of a session's reads of the
// present learn the settled count of writes and then read only P, the
// writes and the catalog revision (shapePeek, readGuardSQL); a write
// acknowledged through another session before a read is in that read,
// whatever shape its guard had; a DROP and CREATE, and a view replaced
// (which counts no write), through another session are planned again; the
// session learns the new count.
func TestReadGuardLearnsWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	other, otherClient := openSession(t, ctx, Config{})
	table := fmt.Sprintf("rgl_%d", time.Now().UnixNano())
	run := func(sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			if out := query(t, ctx, other, otherClient, sql); strings.Contains(out, "ERROR") {
				t.Fatalf("%s: %s", sql, out)
			}
		}
	}
	run("CREATE TABLE "+table+" (v int)", "INSERT INTO "+table+" VALUES (0)")
	read := "SELECT max(v), mz_now() FROM " + table
	// peek reads until a guard reads through the learned count; before
	// each, the other session's read of the present pins P afresh when it
	// is a second old (a late tick would make the guard call pin()).
	peek := func(read, want string) {
		t.Helper()
		for range 50 {
			run("SELECT mz_now()")
			answer, _ := c.turn(t, ctx, read)
			checkAnswer(t, answer, "T", want)
			if key := c.s.be.guards[c.s.be.guardUsed].key; key.shape == shapePeek {
				return
			}
		}
		t.Fatalf("no guard read through a learned count in 50 reads (%+v)", c.s.be.peek)
	}
	peek(read, "0")
	for i := 1; i <= 3; i++ {
		run(fmt.Sprintf("INSERT INTO %s VALUES (%d)", table, i))
		answer, _ := c.turn(t, ctx, read)
		checkAnswer(t, answer, "T", strconv.Itoa(i))
		if shape := c.s.be.guards[c.s.be.guardUsed].key.shape; shape != shapePeek {
			t.Errorf("the read after write %d: guard shape %d, want the learned count's", i, shape)
		}
		if c.s.be.peek.steady {
			t.Errorf("after write %d the session still reads through the count it learned before", i)
		}
		peek(read, strconv.Itoa(i))
	}
	run("DROP TABLE "+table, "CREATE TABLE "+table+" (v int)", "INSERT INTO "+table+" VALUES (7)")
	answer, inLoop := c.turn(t, ctx, read)
	if inLoop {
		t.Fatal("a read of a stale catalog was served in the loop")
	}
	checkAnswer(t, answer, "T", "7")
	peek(read, "7")
	// A view replaced through another session moves the catalog revision
	// but counts no write (storage version 46: a view's DDL takes no T), so
	// a guard that read only P and the writes would let the session run
	// the plan of the view's old text: the read is planned again.
	view := table + "_v"
	run("CREATE VIEW " + view + " AS SELECT max(v) AS m FROM " + table)
	viewRead := "SELECT m, mz_now() FROM " + view
	peek(viewRead, "7")
	run("CREATE OR REPLACE VIEW " + view + " AS SELECT max(v) + 100 AS m FROM " + table)
	answer, inLoop = c.turn(t, ctx, viewRead)
	if inLoop {
		t.Fatal("a read of a replaced view was served in the loop with the plan of its old text")
	}
	checkAnswer(t, answer, "T", "107")
	if n := len(c.s.proxy.Holds()); n != 0 {
		t.Fatalf("%d holds after the reads", n)
	}
}
