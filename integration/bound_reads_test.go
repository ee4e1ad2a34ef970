package integration

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A repeated simple-Query timestamped read runs a statement the proxy
// prepared once on the session's backend connection, its int4 literals
// compared in a WHERE and its timestamp as parameters, instead of a new
// spliced text the backend parses and plans at each call
// (proxy/read_statements.go, planner/bound.go; issue 15).

// preparedReads are the executions of the proxy's prepared reads on the
// backend session of conn, as pg_prepared_statements counts them:
// statements, generic plans, custom plans.
func preparedReads(t *testing.T, ctx context.Context, conn *pgx.Conn) (stmts, generic, custom int) {
	t.Helper()
	err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) "+
		"FROM pg_prepared_statements WHERE name ~ '^mzproxy_read_[0-9]+_'", pgx.QueryExecModeSimpleProtocol).
		Scan(&stmts, &generic, &custom)
	if err != nil {
		t.Fatal(err)
	}
	return stmts, generic, custom
}

// TestBoundReadPlannedOnce: a timestamped point read of the present,
// repeated with other literals, is one statement on the backend, run with
// a generic plan: parsed and planned once, not at every call. Reads stay
// right (the present, linearizable: a write through another proxy is
// seen), and a client's DISCARD ALL or DEALLOCATE ALL, which drop the
// proxy's statements too, cost nothing but a new Parse.
func TestBoundReadPlannedOnce(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	q := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	b := connectTo(t, ctx, q.URL("postgres", db))
	mustExec(t, ctx, b, "CREATE TABLE acc (aid int4 PRIMARY KEY, abalance int4)",
		"INSERT INTO acc SELECT g, g * 10 FROM generate_series(1, 100) AS g")
	read := func(aid, want int) uint64 {
		t.Helper()
		var got int
		var ts int64
		err := a.QueryRow(ctx, "SELECT abalance, mz_now() FROM acc WHERE aid = "+strconv.Itoa(aid),
			pgx.QueryExecModeSimpleProtocol).Scan(&got, &ts)
		if err != nil || got != want {
			t.Fatalf("aid %d: %d, %v; want %d", aid, got, err, want)
		}
		return uint64(ts)
	}
	const reads = 30
	for i := 1; i <= reads; i++ {
		read(i, i*10)
	}
	stmts, generic, custom := preparedReads(t, ctx, a)
	t.Logf("after %d reads: %d prepared reads, %d generic plans, %d custom plans", reads, stmts, generic, custom)
	// The first text of the skeleton is planned by itself, the second is
	// the first use of the statement's text, spliced: the rest run the
	// one statement, with custom plans (PostgreSQL's first five) then the
	// generic one.
	if stmts != 1 || generic+custom != reads-2 || generic == 0 {
		t.Fatalf("%d prepared reads, %d generic and %d custom plans after %d reads; want 1 statement run %d times, most generic",
			stmts, generic, custom, reads, reads-2)
	}
	// Linearizable: a write acknowledged by another proxy is seen.
	mustExec(t, ctx, b, "UPDATE acc SET abalance = -1 WHERE aid = 7")
	written := readTS(t, ctx, b)
	if ts := read(7, -1); ts < written {
		t.Fatalf("mz_now() %d is before the write acknowledged at %d", ts, written)
	}
	// Another proxy changes the catalog: the read, planned with the one
	// seen last, is refused by its guard with its prepared statement's run
	// queued behind, which the backend skips; it is planned again.
	mustExec(t, ctx, b, "CREATE TABLE other (x int)")
	for aid := 10; aid < 15; aid++ {
		read(aid, aid*10)
	}
	for _, drop := range []string{"DISCARD ALL", "DEALLOCATE ALL"} {
		mustExec(t, ctx, a, drop)
		if n, _, _ := preparedReads(t, ctx, a); n != 0 {
			t.Fatalf("%s left %d prepared reads", drop, n)
		}
		read(8, 80) // spliced, the text seen once again
		read(9, 90)
		if n, _, _ := preparedReads(t, ctx, a); n != 1 {
			t.Fatalf("after %s: %d prepared reads, want 1", drop, n)
		}
	}
}

// TestBoundReadsBounded: the reads prepared on one connection are at most
// readStatementsPerConn (64); the evicted are deallocated.
func TestBoundReadsBounded(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE TABLE bt (k int4, v int4)", "INSERT INTO bt VALUES (1, 1), (2, 2), (3, 3)")
	for i := 0; i < 80; i++ {
		for _, k := range []int{1, 2, 3} {
			var v int
			sql := fmt.Sprintf("SELECT v AS v%d, mz_now() FROM bt WHERE k = %d", i, k) // a skeleton of its own
			if err := a.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&v, new(int64)); err != nil || v != k {
				t.Fatalf("%s: %d, %v", sql, v, err)
			}
		}
	}
	if n, _, _ := preparedReads(t, ctx, a); n != 64 {
		t.Fatalf("%d prepared reads on the connection, want 64", n)
	}
}

// queryAnswer is everything a simple Query's answer tells a client, but an
// error's position.
type queryAnswer struct {
	Fields []pgconn.FieldDescription
	Rows   [][][]byte
	Tag    string
	Code   string
	Msg    string
}

func simpleAnswer(ctx context.Context, conn *pgx.Conn, sql string) queryAnswer {
	var out queryAnswer
	res, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if len(res) > 0 {
		out.Fields, out.Rows, out.Tag = res[0].FieldDescriptions, res[0].Rows, res[0].CommandTag.String()
		if res[0].Err != nil {
			err = res[0].Err
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		out.Code, out.Msg = pe.Code, pe.Message
	} else if err != nil {
		out.Msg = err.Error()
	}
	return out
}

// TestBoundReadAnswersAsSpliced: for a corpus of literal shapes (literals
// that become parameters, and those that must not: in the select list,
// positions, LIMIT, strings, numerics, negative, the int4 bounds, errors
// at parse and at run time), a read of a cached skeleton answers exactly
// as the spliced text does: the same RowDescription, rows, tag, or
// SQLSTATE and message. The spliced answer is another proxy's, one per
// text, for which the text is the skeleton's first (never cached).
func TestBoundReadAnswersAsSpliced(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE TABLE ct (a int4, b int8, c numeric, d text, e int2)",
		"INSERT INTO ct SELECT g, g * 1000000000000, g / 4.0, 'x''' || g, g FROM generate_series(-3, 12) AS g",
		"INSERT INTO ct VALUES (2147483647, 0, 0, '', 0), (-2147483648, 0, 0, '', 0)")
	at := strconv.FormatUint(readTS(t, ctx, a), 10)
	corpus := []string{
		"SELECT a, b, mz_now() FROM ct WHERE a = %s",
		"SELECT * FROM ct WHERE b = %s AND a > %s",
		"SELECT a FROM ct WHERE c = %s",
		"SELECT a FROM ct WHERE e = %s ORDER BY 1",
		"SELECT a FROM ct WHERE d = %s",           // 42883 at Parse
		"SELECT a / (a - a) FROM ct WHERE a = %s", // 22012 at run time
		"SELECT a, %s FROM ct WHERE a = %s",       // a literal in the select list
		"SELECT %s FROM ct WHERE %s < a",          // a literal alone in the select list
		"SELECT a FROM ct WHERE a > %s ORDER BY 1 LIMIT %s",
		"SELECT a FROM ct WHERE a = -%s OR a = - %s",
		"SELECT count(*), b FROM ct WHERE a <= %s GROUP BY 2 ORDER BY 2",
		"SELECT a = %s FROM ct WHERE a = %s GROUP BY a = %s",
		"SELECT a FROM ct WHERE a = %s UNION SELECT b::int4 FROM ct WHERE a = %s ORDER BY 1",
		"SELECT a FROM (SELECT a FROM ct WHERE a < %s) s WHERE a >= %s ORDER BY a",
		"WITH w AS (SELECT a, d FROM ct WHERE a <> %s) SELECT count(*) FROM w WHERE a > %s",
		"SELECT a FROM ct WHERE a = %s AND d <> 'x''y' AND d = E'x\\'' || %s",
		"SELECT (SELECT max(a) FROM ct WHERE a < %s) FROM ct WHERE a = %s",
		"SELECT a FROM ct WHERE (a, e) = (%s, %s)",
		"SELECT a FROM ct WHERE a = 2147483646 + %s",
		"SELECT a FROM ct WHERE NOT (a <> %s)",
	}
	values := [][]string{{"1", "2"}, {"3", "3"}, {"007", "0"}, {"2147483647", "1"}, {"12", "5"}}
	var refs []*pgx.Conn // reference proxies' sessions, one per text of a form
	for range values[2:] {
		refs = append(refs, connectTo(t, ctx, startProxy(t).URL("postgres", db)))
	}
	for _, form := range corpus {
		n := strings.Count(form, "%s")
		texts := make([]string, len(values))
		for i, v := range values {
			args := make([]any, n)
			for j := range args {
				args[j] = v[j%len(v)]
			}
			texts[i] = fmt.Sprintf(form, args...) + " AS OF " + at
		}
		for i, text := range texts {
			got := simpleAnswer(ctx, a, text) // from the cache after the first two
			if i < 2 {
				continue
			}
			want := simpleAnswer(ctx, refs[i-2], text) // the skeleton's first text there: spliced
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s:\n got %+v\nwant %+v", text, got, want)
			}
		}
	}
	// Every form but three has a literal the read takes as a parameter:
	// not (a, e) = (x, y) (a row), a = 2147483646 + x (not a column) nor
	// d = x (its Parse failed: forgotten). The six with other literals in
	// the text (the select list, LIMIT, a sublink, a concatenation) make a
	// text per value, never used twice here: not prepared.
	if n, _, _ := preparedReads(t, ctx, a); n != len(corpus)-3-6 {
		t.Fatalf("%d reads prepared, want %d", n, len(corpus)-3-6)
	}
}

// TestBoundReadTimeoutAndCancel: a prepared read is ended by
// statement_timeout and by a cancel as the spliced text is (57014), and
// the session goes on.
func TestBoundReadTimeoutAndCancel(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a, err := connectCancelable(t, ctx, p.URL("postgres", db))
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, a, "CREATE TABLE sl (k int4, v int4)", "INSERT INTO sl SELECT g, g FROM generate_series(1, 10) AS g")
	slow := func(k int) string {
		return "SELECT v, mz_now() FROM sl WHERE k = " + strconv.Itoa(k) + " AND pg_sleep(30) IS NOT NULL"
	}
	mustExec(t, ctx, a, "SET statement_timeout = '100ms'")
	for k := 1; k <= 4; k++ { // the third and fourth run the prepared statement
		_, err := a.Exec(ctx, slow(k), pgx.QueryExecModeSimpleProtocol)
		wantCanceled(t, err, true)
	}
	mustExec(t, ctx, a, "SET statement_timeout = 0")
	for k := 5; k <= 7; k++ {
		cctx, cancel := context.WithTimeout(ctx, cancelAfter)
		_, err := a.Exec(cctx, slow(k), pgx.QueryExecModeSimpleProtocol)
		cancel()
		wantCanceled(t, err, false)
	}
	var v int
	if err := a.QueryRow(ctx, "SELECT v, mz_now() FROM sl WHERE k = 9", pgx.QueryExecModeSimpleProtocol).Scan(&v, new(int64)); err != nil || v != 9 {
		t.Fatalf("after the cancels: %d, %v", v, err)
	}
	if n, _, _ := preparedReads(t, ctx, a); n != 1 {
		t.Fatalf("%d prepared reads, want 1: the slow read's", n)
	}
}

// TestAsOfReadsGenericPlans: a repeated point read AS OF an old time, with
// the timestamp a parameter of the backend's statement (simple Query: the
// proxy's prepared read; extended: the client's statement, rewritten), is
// run with PostgreSQL's generic plan after its first custom ones: the
// history read's generic plan does not lose to the custom plans, so no
// execution pays planning (issue 15, measured under pgbench's asof script:
// 48 plans for 80,000 executions on 8 connections). Both answer the
// history exactly.
func TestAsOfReadsGenericPlans(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE TABLE hacc (aid int4 PRIMARY KEY, abalance int4)",
		"ALTER TABLE hacc SET (RETAIN HISTORY FOR '1h')",
		"INSERT INTO hacc SELECT g, g * 10 FROM generate_series(1, 100) AS g")
	old := readTS(t, ctx, a)
	mustExec(t, ctx, a, "UPDATE hacc SET abalance = -abalance")
	const reads = 30
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for i := 1; i <= reads; i++ {
			var got int
			sql := fmt.Sprintf("SELECT abalance FROM hacc WHERE aid = %d AS OF %d", i, old)
			args := []any{mode}
			if mode == pgx.QueryExecModeCacheStatement {
				sql = fmt.Sprintf("SELECT abalance FROM hacc WHERE aid = $1 AS OF %d", old)
				args = append(args, i)
			}
			if err := a.QueryRow(ctx, sql, args...).Scan(&got); err != nil || got != i*10 {
				t.Fatalf("%v read %d AS OF %d: %d, %v; want %d", mode, i, old, got, err, i*10)
			}
		}
	}
	rows, err := a.Query(ctx, "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "+
		"WHERE statement LIKE '%FROM hacc%' OR statement LIKE '%mzproxy.h%' OR statement LIKE '%\"mzproxy\".\"h%'", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	type plans struct{ generic, custom int64 }
	byName, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		name string
		plans
	}, error) {
		var out struct {
			name string
			plans
		}
		return out, r.Scan(&out.name, &out.generic, &out.custom)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prepared history reads: %+v", byName)
	var simple, extended bool
	for _, s := range byName {
		switch {
		case s.generic+s.custom < reads-2:
			continue // not one of the repeated reads
		case s.custom > 5 || s.generic == 0:
			t.Errorf("%s: %d generic and %d custom plans; want the generic plan after at most 5 custom ones", s.name, s.generic, s.custom)
		}
		if strings.HasPrefix(s.name, "mzproxy_read_") {
			simple = true
		} else {
			extended = true
		}
	}
	if !simple || !extended {
		t.Fatalf("repeated reads found: simple %v, extended %v (%+v)", simple, extended, byName)
	}
}
