package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPlanCacheRepeatedLiterals: statements that differ only in their
// literals share a plan (the plan cache's misses do not grow with them),
// and each still runs with its own literals: writes land their own
// values, and reads AS OF a literal timestamp, whose plans hold the
// literal, see their own timestamp's data.
func TestPlanCacheRepeatedLiterals(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	addr := p.metricsAddr(t)
	awaitReady(t, addr)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE fp (k int, v text) WITH (RETAIN HISTORY FOR '1h')", simple(conn)); err != nil {
		t.Fatal(err)
	}
	misses := func() float64 {
		_, m := get(t, addr, "/metrics")
		return metricValue(t, m, "mzproxy_plan_cache_misses_total")
	}

	// The first INSERT is planned; the next ones are hits.
	const n = 40
	var ts []uint64
	before := misses()
	for i := 1; i <= n; i++ {
		q := fmt.Sprintf("INSERT INTO fp VALUES (%d, 'v%d')", i, i)
		if _, err := conn.Exec(ctx, q, simple(conn)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		ts = append(ts, readTS(t, ctx, conn))
	}
	// Generous: the proxy plans a few statements of its own, but not one
	// per INSERT (each INSERT was several misses before the fingerprint).
	if d := misses() - before; d >= n/2 {
		t.Fatalf("%d INSERTs differing in literals: %v plan cache misses, want a few", n, d)
	}

	var count, sum int
	if err := conn.QueryRow(ctx, "SELECT count(*), sum(k) FROM fp WHERE v = 'v' || k", simple(conn)).Scan(&count, &sum); err != nil {
		t.Fatal(err)
	}
	if count != n || sum != n*(n+1)/2 {
		t.Fatalf("rows %d with sum %d, want %d with sum %d: an INSERT ran with another's literals", count, sum, n, n*(n+1)/2)
	}

	// AS OF <literal>: each read sees the rows written up to its timestamp.
	for i := n - 1; i >= 0; i -= 7 {
		q := "SELECT count(*) FROM fp WHERE k > 0 AS OF " + strconv.FormatUint(ts[i], 10)
		if err := conn.QueryRow(ctx, q, simple(conn)).Scan(&count); err != nil || count != i+1 {
			t.Fatalf("%s: %d rows, %v; want %d", q, count, err, i+1)
		}
	}
	// A literal-only difference that is a syntax error is still one.
	_, err := conn.Exec(ctx, "INSERT INTO fp VALUES (1, 'unterminated)", simple(conn))
	if code, _, _ := errParts(err); code != "42601" {
		t.Fatalf("unterminated literal: %v, want 42601", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO fp VALUES (99, 'ok')", simple(conn)); err != nil {
		t.Fatalf("after the error: %v", err)
	}
}

// TestPlanCacheTimestampedReadsRepeatedLiterals: timestamped reads (mz_now(),
// AS OF a number, AS OF AT LEAST, AS OF a timestamptz literal) that differ
// only in their literals share a plan, in the simple and the extended
// protocol, and each answers with its own literals, as the history says;
// AS OF before the table's since is still refused after its plan is
// cached.
func TestPlanCacheTimestampedReadsRepeatedLiterals(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	addr := p.metricsAddr(t)
	awaitReady(t, addr)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE tsfp (k int, v text) WITH (RETAIN HISTORY FOR '1h')")
	// Misses are a few per skeleton (the literal plan is made at its second
	// text); reads grow with n.
	const n = 24
	var ts []uint64 // ts[i]: rows 1..i+1 exist
	for i := 1; i <= n; i++ {
		mustExec(t, ctx, conn, fmt.Sprintf("INSERT INTO tsfp VALUES (%d, 'v%d')", i, i))
		ts = append(ts, readTS(t, ctx, conn))
	}
	misses := func() float64 {
		_, m := get(t, addr, "/metrics")
		return metricValue(t, m, "mzproxy_plan_cache_misses_total")
	}
	// count(*) and sum(k) of the rows k > above among 1..rows.
	want := func(rows, above int) (int, int) {
		c, s := 0, 0
		for k := above + 1; k <= rows; k++ {
			c, s = c+1, s+k
		}
		return c, s
	}
	stamp := func(ms uint64) string {
		return time.UnixMilli(int64(ms)).UTC().Format("2006-01-02 15:04:05.000+00")
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		before, reads := misses(), 0
		for i := n - 1; i >= 0; i-- {
			above := i % 4
			for _, asOf := range []string{
				strconv.FormatUint(ts[i], 10),
				"'" + stamp(ts[i]) + "'::timestamptz",
			} {
				q := fmt.Sprintf("SELECT count(*), coalesce(sum(k), 0) FROM tsfp WHERE k > %d AS OF %s", above, asOf)
				var count, sum int
				if err := conn.QueryRow(ctx, q, mode).Scan(&count, &sum); err != nil {
					t.Fatalf("%s (%s): %v", q, mode, err)
				}
				if wc, ws := want(i+1, above); count != wc || sum != ws {
					t.Fatalf("%s (%s): %d rows with sum %d, want %d with sum %d", q, mode, count, sum, wc, ws)
				}
				reads++
			}
			// The present: every row; mz_now() at or after the last write.
			var v string
			var now int64
			q := fmt.Sprintf("SELECT v, mz_now() FROM tsfp WHERE k = %d", i+1)
			if err := conn.QueryRow(ctx, q, mode).Scan(&v, &now); err != nil || v != fmt.Sprintf("v%d", i+1) || uint64(now) < ts[n-1] {
				t.Fatalf("%s (%s): %q at %d, %v; want v%d at or after %d", q, mode, v, now, err, i+1, ts[n-1])
			}
			q = fmt.Sprintf("SELECT count(*) FROM tsfp WHERE k <= %d AS OF AT LEAST %d", i+1, ts[i])
			var count int
			if err := conn.QueryRow(ctx, q, mode).Scan(&count); err != nil || count != i+1 {
				t.Fatalf("%s (%s): %d, %v; want %d", q, mode, count, err, i+1)
			}
			reads += 2
		}
		// Generous: the proxy plans a few statements of its own, but not
		// one per read.
		if d := misses() - before; d >= float64(reads)/4 {
			t.Fatalf("%s: %d timestamped reads differing in literals: %v plan cache misses, want a few", mode, reads, d)
		}
		// AS OF before the table existed: its plan is cached, the time
		// is still checked.
		var count int
		err := conn.QueryRow(ctx, "SELECT count(*), 0 FROM tsfp WHERE k > 1 AS OF 5", mode).Scan(&count, new(int))
		if code, msg, _ := errParts(err); code != "XX000" || !strings.HasPrefix(msg, "Timestamp (5) is not valid for all inputs") {
			t.Fatalf("AS OF 5 (%s): %v, want XX000 Timestamp (5) is not valid", mode, err)
		}
	}
}
