package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

// AS OF with a bound parameter ($1: a bigint of milliseconds or a
// timestamptz), from pgx in every exec mode and from lib/pq; AS OF a
// literal, an expression or mz_now(); the column mz_now() is named by; and
// the hints of mzproxy's own AS OF errors.

// asOfHistory is a managed table written at known timestamps: all[i] is
// the whole table and k1[i] the value of k = 1 as of ts[i].
type asOfHistory struct {
	tbl     string
	ts      []uint64
	all, k1 []string
}

// writeAsOfHistory makes the table (with an hour of history, so that every
// timestamp stays readable however slow the machine) and its history.
func writeAsOfHistory(t *testing.T, ctx context.Context, conn *pgx.Conn) asOfHistory {
	h := asOfHistory{tbl: "asof_hist"}
	steps := []struct {
		sql    string
		all, k []string
	}{
		{sql: "INSERT INTO asof_hist VALUES (1, 'a'), (2, 'x')"},
		{sql: "UPDATE asof_hist SET v = 'b' WHERE k = 1"},
		{sql: "UPDATE asof_hist SET v = 'c' WHERE k = 1; DELETE FROM asof_hist WHERE k = 2"},
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE asof_hist (k int, v text) WITH (RETAIN HISTORY FOR '1h')", simple(conn)); err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		for _, q := range strings.Split(st.sql, "; ") {
			if _, err := conn.Exec(ctx, q, simple(conn)); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		h.ts = append(h.ts, readTS(t, ctx, conn))
	}
	h.all = []string{"1=a,2=x", "1=b,2=x", "1=c"}
	h.k1 = []string{"a", "b", "c"}
	return h
}

// allRows reads the whole table as one string; "" when empty.
const allRows = "SELECT coalesce(string_agg(k || '=' || v, ',' ORDER BY k), '') FROM asof_hist"

// querier runs a query returning one text value with a driver.
type querier func(ctx context.Context, q string, args ...any) (string, error)

// errParts is the SQLSTATE, message and hint of a pgx or lib/pq error.
func errParts(err error) (code, msg, hint string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe.Message, pe.Hint
	}
	var qe *pq.Error
	if errors.As(err, &qe) {
		return string(qe.Code), qe.Message, qe.Hint
	}
	return "", "", ""
}

// checkAsOfParams reads the history through q with the timestamp as a
// parameter. describes: the driver types its arguments from the server's
// description, which says bigint for a bare $n (a time.Time then needs
// $n::timestamptz).
func checkAsOfParams(t *testing.T, ctx context.Context, q querier, h asOfHistory, describes bool) {
	want := func(query, expect string, args ...any) {
		t.Helper()
		got, err := q(ctx, query, args...)
		if err != nil || got != expect {
			t.Fatalf("%s %v: %q, %v; want %q", query, args, got, err, expect)
		}
	}
	for i, ts := range h.ts {
		at := time.UnixMilli(int64(ts))
		want(allRows+" AS OF $1", h.all[i], int64(ts))
		want(allRows+" AS OF AT LEAST $1", h.all[i], int64(ts))
		want(allRows+" AS OF $1::timestamptz", h.all[i], at)
		want(allRows+" AS OF AT LEAST $1::timestamptz", h.all[i], at)
		if !describes {
			want(allRows+" AS OF $1", h.all[i], at)
		}
		// Parameters of the query's own before, after and around it.
		want("SELECT v FROM asof_hist WHERE k = $1 AS OF $2", h.k1[i], 1, int64(ts))
		want("SELECT v FROM asof_hist WHERE k = $2 AS OF $1", h.k1[i], int64(ts), 1)
		want("SELECT v FROM asof_hist WHERE k = $1 AND v <> $3 AS OF $2", h.k1[i], 1, int64(ts), "zzz")
	}
	// Below the since: AT LEAST reads at the since (the table's creation,
	// empty); AS OF fails, saying where history starts.
	want(allRows+" AS OF AT LEAST $1", "", int64(1))
	_, err := q(ctx, allRows+" AS OF $1", int64(1))
	code, msg, hint := errParts(err)
	if code != "XX000" || !strings.HasPrefix(msg, "Timestamp (1) is not valid for all inputs") ||
		!strings.HasPrefix(hint, "The earliest readable time is ") || !strings.Contains(hint, "RETAIN HISTORY") {
		t.Fatalf("AS OF $1 below the since: %v (hint %q)", err, hint)
	}
	_, err = q(ctx, allRows+" AS OF $1", nil)
	if code, _, _ := errParts(err); code != "22004" {
		t.Fatalf("AS OF $1 with NULL: %v, want 22004", err)
	}
	// The session goes on.
	want(allRows+" AS OF $1", h.all[2], int64(h.ts[2]))
}

func TestAsOfParams(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	h := writeAsOfHistory(t, ctx, connectTo(t, ctx, p.URL("postgres", db)))
	for _, mode := range pgxModes {
		t.Run(mode.String(), func(t *testing.T) {
			conn := connectMode(t, ctx, p.URL("postgres", db), mode)
			q := func(ctx context.Context, query string, args ...any) (string, error) {
				var s string
				err := conn.QueryRow(ctx, query, args...).Scan(&s)
				return s, err
			}
			describes := mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeSimpleProtocol
			checkAsOfParams(t, ctx, q, h, describes)
		})
	}
	t.Run("lib/pq", func(t *testing.T) {
		conn, err := sql.Open("postgres", p.URL("postgres", db))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetMaxOpenConns(1)
		q := func(ctx context.Context, query string, args ...any) (string, error) {
			var s string
			err := conn.QueryRowContext(ctx, query, args...).Scan(&s)
			return s, err
		}
		checkAsOfParams(t, ctx, q, h, false)
	})
}

// TestAsOfParamDescribed: a client that asks is told the AS OF parameter's
// type: bigint, or the cast's, or the type it declared; its own parameters
// keep theirs, and the proxy's timestamp parameter is not shown.
func TestAsOfParamDescribed(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	h := writeAsOfHistory(t, ctx, conn)
	for _, tc := range []struct {
		query    string
		declared []uint32
		want     []uint32
	}{
		{"SELECT v FROM asof_hist WHERE k = $1 AS OF $2", nil, []uint32{23, 20}},
		{"SELECT v FROM asof_hist AS OF AT LEAST $1::timestamptz", nil, []uint32{1184}},
		{"SELECT v FROM asof_hist AS OF $1", []uint32{1184}, []uint32{1184}},
		{"SELECT 1 AS OF $1", nil, []uint32{20}},
		{"EXPLAIN TIMESTAMP FOR SELECT v FROM asof_hist WHERE k = $1 AS OF $2", nil, []uint32{25, 20}},
	} {
		sd, err := conn.PgConn().Prepare(ctx, "", tc.query, tc.declared)
		if err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
		if fmt.Sprint(sd.ParamOIDs) != fmt.Sprint(tc.want) {
			t.Fatalf("%s: parameters described as %v, want %v", tc.query, sd.ParamOIDs, tc.want)
		}
	}
	// EXPLAIN TIMESTAMP reads its AS OF parameter too.
	var text string
	err := conn.QueryRow(ctx, "EXPLAIN TIMESTAMP FOR SELECT v FROM asof_hist WHERE k = $1 AS OF $2", "1", int64(h.ts[1])).Scan(&text)
	if m := queryTimestamp.FindStringSubmatch(text); err != nil || m == nil || m[1] != fmt.Sprint(h.ts[1]) {
		t.Fatalf("EXPLAIN TIMESTAMP ... AS OF $2 = %d: %v\n%s", h.ts[1], err, text)
	}
}

// TestAsOfExpressions: AS OF a string literal, a typed timestamp, an
// expression, mz_now() and arithmetic on it, over the simple and the
// extended protocol; mz_now()'s column is named mz_now.
func TestAsOfExpressions(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	h := writeAsOfHistory(t, ctx, conn)
	if _, err := conn.Exec(ctx, "SET TimeZone = 'UTC'"); err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(int64(h.ts[1])).UTC()
	iso := at.Format("2006-01-02 15:04:05.000Z07:00")
	cases := []struct{ asOf, want string }{
		{fmt.Sprintf("'%s'", iso), h.all[1]},
		{fmt.Sprintf("'%d'", h.ts[1]), h.all[1]},
		{fmt.Sprintf("TIMESTAMPTZ '%s'", iso), h.all[1]},
		{fmt.Sprintf("TIMESTAMP '%s'", at.Format("2006-01-02 15:04:05.000")), h.all[1]},
		{fmt.Sprintf("%d + 0", h.ts[1]), h.all[1]},
		{"mz_now()", h.all[2]},
		{"AT LEAST mz_now() - 3600000", ""},               // below the since: read at it
		{"AT LEAST now() - interval '1 hour'", ""},        // likewise
		{fmt.Sprintf("AT LEAST '%s'", iso), h.all[1]},     // above the since
		{"AT LEAST mz_catalog.mz_now()", h.all[2]},        // qualified
		{fmt.Sprintf("(%d)::numeric", h.ts[0]), h.all[0]}, // a numeric type
		{"AT LEAST DATE '2000-01-01'", ""},                // a date
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for _, tc := range cases {
			var got string
			q := allRows + " AS OF " + tc.asOf
			if err := conn.QueryRow(ctx, q, mode).Scan(&got); err != nil || got != tc.want {
				t.Fatalf("%s (%s): %q, %v; want %q", q, mode, got, err, tc.want)
			}
		}
		rows, err := conn.Query(ctx, "SELECT mz_now(), mz_now() AS chosen, mz_now() + 0 FROM asof_hist LIMIT 1", mode)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range rows.FieldDescriptions() {
			names = append(names, f.Name)
		}
		rows.Close()
		if err := rows.Err(); err != nil || strings.Join(names, ",") != "mz_now,chosen,?column?" {
			t.Fatalf("mz_now() columns (%s): %v, %v; want mz_now,chosen,?column?", mode, names, err)
		}
	}
}

// TestAsOfErrors: mzproxy's own AS OF errors say what to do, over both
// protocols, and leave the session usable.
func TestAsOfErrors(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	h := writeAsOfHistory(t, ctx, conn)
	cases := []struct{ query, code, msg, hint string }{
		{allRows + " AS OF 5 ORDER BY 1", "42601", "Expected end of statement, found ORDER", "must come last"},
		{"SELECT v FROM asof_hist AS OF 5 WHERE k = 1", "42601", "Expected end of statement, found WHERE", "must come last"},
		{allRows + " AS OF 1", "XX000", "Timestamp (1) is not valid for all inputs", "RETAIN HISTORY"},
		{allRows + " AS OF -5", "22023", `AS OF: "-5" is not a valid timestamp`, ""},
		{allRows + " AS OF NULL", "22004", "AS OF must not be null", ""},
		{allRows + " AS OF 'yesterday-ish'", "22007", "invalid input syntax for type timestamp with time zone", ""},
		{allRows + " AS OF $1 + 1", "0A000", "AS OF takes a parameter only on its own", "AS OF $1::timestamptz"},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for _, tc := range cases {
			if strings.Contains(tc.query, "$1") && mode == pgx.QueryExecModeSimpleProtocol {
				continue
			}
			var got string
			var args []any
			if strings.Contains(tc.query, "$1") {
				args = []any{int64(h.ts[0])}
			}
			err := conn.QueryRow(ctx, tc.query, append([]any{mode}, args...)...).Scan(&got)
			code, msg, hint := errParts(err)
			if code != tc.code || !strings.HasPrefix(msg, tc.msg) || !strings.Contains(hint, tc.hint) {
				t.Fatalf("%s (%s): %v (SQLSTATE %s, hint %q); want %s %q, hint with %q", tc.query, mode, err, code, hint, tc.code, tc.msg, tc.hint)
			}
			var all string
			if err := conn.QueryRow(ctx, allRows, mode).Scan(&all); err != nil || all != h.all[2] {
				t.Fatalf("after %s (%s): %q, %v", tc.query, mode, all, err)
			}
		}
	}
}
