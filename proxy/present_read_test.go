package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestPresentReadBindsProxyStatement: a client's prepared read of the
// present, served by the event loop, binds from its second use a
// statement of the proxy's whose holes read the guard's setting
// (readTSExpr), not the client's statement with its timestamp parameter
// (present_read.go); the client's answers are its own. When a function
// of the client's deallocates the proxy's statement unseen, the next
// read's Bind fails with 26000 behind the guard: the batch is given back
// and answered once, right, through the client's statement, and the
// statement is made again. A client's DISCARD ALL (seen) leaves the reads
// right, and a read whose own function raises 26000 is answered with
// that error once, not served again. Without the change the backend's
// statements show the client's statement run at every read and none of
// the proxy's.
func TestPresentReadBindsProxyStatement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	table := newParsedReadTable(t, ctx, c, "lpr")
	prepare := func() {
		t.Helper()
		c.handleBatch(t, ctx, encodeFrames(t, &pgproto3.Parse{Name: "tsread", Query: "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"},
			&pgproto3.Sync{}))
	}
	// Made first: a function is DDL, which a guard refuses after.
	if out := query(t, ctx, c.s, c.client, "CREATE FUNCTION "+table+"_drop() RETURNS int LANGUAGE plpgsql AS $$ BEGIN"+
		" EXECUTE (SELECT string_agg('DEALLOCATE ' || quote_ident(name), '; ') FROM pg_prepared_statements WHERE name LIKE 'mzproxy_read_%' AND statement LIKE '%"+table+"%');"+
		" RETURN 1; END $$"); strings.Contains(out, "ERROR") {
		t.Fatal(out)
	}
	prepare()
	c.handleBatch(t, ctx, boundBatch(t, "tsread", false, "1"))
	// The RowDescription of the client's statement, to compare with the
	// proxy's: the client sees the same columns.
	described := frameOf(t, c.handleBatch(t, ctx, boundBatch(t, "tsread", true, "1")), 'T')
	reads := func(from, to int) {
		t.Helper()
		for aid := from; aid < to; aid++ {
			answer, inLoop := c.turnBatch(t, ctx, boundBatch(t, "tsread", aid%2 == 0, fmt.Sprint(aid)))
			if !inLoop {
				t.Fatalf("aid %d: the loop gave the read back", aid)
			}
			first := "2"
			if aid%2 == 0 {
				first = "2T"
				if got := frameOf(t, answer, 'T'); got != described {
					t.Fatalf("aid %d: RowDescription %q, want the client's statement's %q", aid, got, described)
				}
			}
			checkAnswer(t, answer, first, fmt.Sprint(aid*10))
		}
	}
	// The backend's statements of the read with their runs: the client's
	// by its name, the proxy's as "proxy" (with the holes it has).
	statements := func() string {
		t.Helper()
		return firstValueOf(t, query(t, ctx, c.s, c.client, "SELECT coalesce(string_agg(CASE WHEN name LIKE 'mzproxy_read_%' THEN 'proxy'"+
			" || CASE WHEN statement LIKE '%coalesce%' THEN ' coalesce' ELSE '' END ELSE name END || ' ' || (generic_plans + custom_plans), ', ' ORDER BY name), '')"+
			" FROM pg_prepared_statements WHERE statement LIKE '%"+table+"%' AND (name = 'tsread' OR name LIKE 'mzproxy_read_%')"))
	}
	reads(2, 10)
	// The goroutine's read and the text's first use in the loop bound the
	// client's statement; the seven after it the proxy's.
	if got := statements(); got != "proxy 7, tsread 3" {
		t.Fatalf("the backend's statements of the read: %q, want \"proxy 7, tsread 3\"", got)
	}
	// Unseen: the proxy's statement deallocated inside a function.
	for _, sql := range []string{"SELECT " + table + "_drop()"} {
		if out := query(t, ctx, c.s, c.client, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", sql, out)
		}
	}
	if got := statements(); got != "tsread 3" {
		t.Fatalf("after the function: %q, want \"tsread 3\"", got)
	}
	answer, inLoop := c.turnBatch(t, ctx, boundBatch(t, "tsread", true, "11"))
	if inLoop {
		t.Fatal("the read whose statement was gone was not given back")
	}
	checkAnswer(t, answer, "2T", "110")
	if n := len(c.s.proxy.Holds()); n != 0 {
		t.Fatalf("%d holds after the read given back", n)
	}
	reads(12, 16)
	if got := statements(); got != "proxy 3, tsread 5" {
		t.Fatalf("after the read given back: %q, want \"proxy 3, tsread 5\" (made again at the second use)", got)
	}
	// Seen: DISCARD ALL drops the client's statement too.
	if out := query(t, ctx, c.s, c.client, "DISCARD ALL"); strings.Contains(out, "ERROR") {
		t.Fatal(out)
	}
	prepare()
	for aid := 16; ; aid++ {
		answer, inLoop := c.stepBatch(t, ctx, boundBatch(t, "tsread", true, fmt.Sprint(aid)))
		checkAnswer(t, answer, "2T", fmt.Sprint(aid*10))
		if inLoop {
			break
		}
		if aid == 20 {
			t.Fatal("the reads after DISCARD ALL stay the goroutine's")
		}
	}
	reads(30, 34)
	if got := statements(); !strings.HasPrefix(got, "proxy ") || strings.Contains(got, "coalesce") {
		t.Fatalf("after DISCARD ALL: %q, want the proxy's statement made again", got)
	}
	// A read whose own function raises 26000 (as the Bind of a statement
	// that is gone does) is answered with it once.
	for _, sql := range []string{
		"CREATE FUNCTION " + table + "_forge(int) RETURNS int LANGUAGE plpgsql STABLE AS $$ BEGIN" +
			" IF $1 = 7 THEN RAISE EXCEPTION USING ERRCODE = '26000', MESSAGE = 'prepared statement \"mzproxy_read_0\" does not exist'; END IF;" +
			" RETURN $1; END $$",
	} {
		if out := query(t, ctx, c.s, c.client, sql); strings.Contains(out, "ERROR") {
			t.Fatalf("%s: %s", sql, out)
		}
	}
	c.handleBatch(t, ctx, encodeFrames(t, &pgproto3.Parse{Name: "forged", Query: "SELECT abalance, mz_now() FROM " + table + " WHERE aid = " + table + "_forge($1)"},
		&pgproto3.Sync{}))
	for _, aid := range []string{"3", "4", "5", "7", "6"} {
		answer, _ := c.stepBatch(t, ctx, boundBatch(t, "forged", false, aid))
		if aid != "7" {
			checkAnswer(t, answer, "2", aid+"0")
			continue
		}
		if types := answerTypes(answer); !strings.HasSuffix(types, "EZ") || strings.Count(types, "E") != 1 || strings.Contains(types, "D") {
			t.Fatalf("the forged 26000: answer's frames %q, want one error then ReadyForQuery: %q", types, answer)
		}
		if !strings.Contains(answer, "26000") {
			t.Fatalf("the forged 26000 answered %q", answer)
		}
	}
}

// TestPresentParsedReadBindsProxyStatement: a read of the present sent as
// the unnamed statement's Parse (loop_parse.go) binds, from its second
// use, the proxy's statement with the holes of a read of the present
// (present_read.go), its answers the client's; without the change it
// binds one with the client's rewrite (the coalesce of the timestamp
// parameter).
func TestPresentParsedReadBindsProxyStatement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newLoopClient(t, ctx)
	table := newParsedReadTable(t, ctx, c, "lppr")
	tsread := "SELECT abalance, mz_now() FROM " + table + " WHERE aid = $1"
	c.handleBatch(t, ctx, parsedBatch(t, tsread, nil, true, "1"))
	for aid := 2; aid < 8; aid++ {
		answer, inLoop := c.turnBatch(t, ctx, parsedBatch(t, tsread, nil, true, fmt.Sprint(aid)))
		if !inLoop {
			t.Fatalf("aid %d: the loop gave the read back", aid)
		}
		checkAnswer(t, answer, "12T", fmt.Sprint(aid*10))
	}
	got := firstValueOf(t, query(t, ctx, c.s, c.client, "SELECT coalesce(string_agg((generic_plans + custom_plans) ||"+
		" CASE WHEN statement LIKE '%coalesce%' THEN ' coalesce' ELSE '' END, ', '), '') FROM pg_prepared_statements"+
		" WHERE name LIKE 'mzproxy_read_%' AND statement LIKE '%"+table+"%'"))
	if got != "5" {
		t.Fatalf("the proxy's statements of the read, runs: %q, want \"5\" (one, with the holes of a read of the present)", got)
	}
}
