package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// nowLagSQL reads mz_now() and the backend's clock in one statement: how
// far the timestamp of a read of the present trails the wall clock.
const nowLagSQL = "SELECT mz_now(), (extract(epoch FROM clock_timestamp()) * 1000)::int8"

// mzNowLag runs nowLagSQL through conn and returns mz_now() and its lag.
func mzNowLag(t *testing.T, ctx context.Context, conn *pgx.Conn) (uint64, time.Duration) {
	t.Helper()
	var ts, clock int64
	if err := conn.QueryRow(ctx, nowLagSQL, simple(conn)).Scan(&ts, &clock); err != nil {
		t.Fatal(err)
	}
	return uint64(ts), time.Duration(clock-ts) * time.Millisecond
}

var explainUpper = regexp.MustCompile(`(?m)^\s+upper:\[\s*(\d+)`)

// explainedUpper is the upper EXPLAIN TIMESTAMP reports for a read of table.
func explainedUpper(t *testing.T, ctx context.Context, conn *pgx.Conn, table string) uint64 {
	t.Helper()
	var text string
	if err := conn.QueryRow(ctx, "EXPLAIN TIMESTAMP FOR SELECT * FROM "+table, simple(conn)).Scan(&text); err != nil {
		t.Fatal(err)
	}
	m := explainUpper.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("EXPLAIN TIMESTAMP output does not match %s:\n%s", explainUpper, text)
	}
	u, _ := strconv.ParseUint(m[1], 10, 64)
	return u
}

// TestTimestampsFollowClockWhileIdle: with nothing written for seconds,
// mz_now() through the proxy stays within about a second (the default
// --tick-interval) of the wall clock, as in Materialize, whose tables'
// uppers advance every second; EXPLAIN TIMESTAMP's upper moves on; reads
// at mz_now()'s timestamp and at the present still see the last write.
func TestTimestampsFollowClockWhileIdle(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE idle (k int)", "INSERT INTO idle VALUES (1), (2)"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	written := readTS(t, ctx, conn)
	upperBefore := explainedUpper(t, ctx, conn, "idle")
	time.Sleep(3 * time.Second)

	// Sampled over three more idle seconds: "at all times", not once.
	var worst time.Duration
	var now uint64
	for i := 0; i < 10; i++ {
		var lag time.Duration
		now, lag = mzNowLag(t, ctx, conn)
		worst = max(worst, lag)
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("mz_now() trailed the clock by up to %v while idle", worst)
	if worst > 1500*time.Millisecond || now <= written+2000 {
		t.Fatalf("idle for 3 s after a write at %d: mz_now() %d trails the clock by up to %v, want at most 1.5 s", written, now, worst)
	}

	upperAfter := explainedUpper(t, ctx, conn, "idle")
	if upperAfter < upperBefore+3000 {
		t.Errorf("EXPLAIN TIMESTAMP's upper moved from %d to %d in 6 idle seconds", upperBefore, upperAfter)
	}
	// Reads at the advanced timestamps see the data written before them.
	for _, sql := range []string{
		fmt.Sprintf("SELECT count(*) FROM idle AS OF %d", now),
		"SELECT count(*) FROM idle AS OF AT LEAST now()",
		"SELECT count(*) FROM idle WHERE mz_now() > 0",
		"SELECT count(*) FROM idle",
	} {
		var n int
		if err := conn.QueryRow(ctx, sql, simple(conn)).Scan(&n); err != nil || n != 2 {
			t.Errorf("%s: %d rows, %v; want 2", sql, n, err)
		}
	}
}

// TestTimestampsIdleWithoutTick: --tick-interval 0 turns the tick off. A
// read of the present still follows the clock (it pins), but nothing else
// moves the upper while the database is idle.
func TestTimestampsIdleWithoutTick(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--tick-interval", "0")
	conn := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE idle (k int)"); err != nil {
		t.Fatal(err)
	}
	upperLag := func() time.Duration {
		var ms int64
		if err := direct.QueryRow(ctx, "SELECT mzproxy.now_ms() - (upper - 1) FROM mzproxy.txns").Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ms) * time.Millisecond
	}
	time.Sleep(2500 * time.Millisecond)
	if lag := upperLag(); lag < 2*time.Second {
		t.Fatalf("without a tick the upper trails the clock by %v after 2.5 idle seconds", lag)
	}
	if _, lag := mzNowLag(t, ctx, conn); lag > time.Second {
		t.Fatalf("mz_now() trails the clock by %v: a read of the present did not pin", lag)
	}
	if lag := upperLag(); lag > time.Second {
		t.Fatalf("after a read of the present the upper trails the clock by %v", lag)
	}
}
