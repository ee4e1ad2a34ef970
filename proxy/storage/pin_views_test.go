package storage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PinPeekSQL and PinCheckSQL read the views settled_writes and pin_state
// (version 26), which answer what the functions pin_peek and pin_check
// answer, in every state of the sequences they read: after a pin, with a
// write in progress, after a write no pin settled; for the peek, an older
// count and NULL. An ordinary role reads the views, and calls no function
// of mzproxy's doing so.
func TestPinViewsAsFunctions(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (x int)")
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzpinviews; CREATE ROLE mzpinviews LOGIN; ALTER ROLE mzpinviews SET track_functions = 'all'"); err != nil {
		t.Fatal(err)
	}
	role := connect(t, server.ConnString("mzpinviews", conn.Config().Database))

	same := func(state string) {
		t.Helper()
		viewPeek := nullableInt(t, role, PinPeekSQL)
		funcPeek := nullableInt(t, role, "SELECT "+Schema+".pin_peek()")
		if fmt.Sprint(deref(viewPeek)) != fmt.Sprint(deref(funcPeek)) {
			t.Fatalf("%s: settled_writes = %v, pin_peek() = %v", state, deref(viewPeek), deref(funcPeek))
		}
		peeks := []string{"NULL"}
		if funcPeek != nil {
			peeks = append(peeks, fmt.Sprint(*funcPeek), fmt.Sprint(*funcPeek-1))
		}
		for _, peek := range peeks {
			tx, err := role.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			viewCheck := nullableInt(t, tx, PinCheckSQL(peek+"::int8"))
			funcCheck := nullableInt(t, tx, "SELECT "+Schema+".pin_check("+peek+")")
			tx.Rollback(ctx)
			if fmt.Sprint(deref(viewCheck)) != fmt.Sprint(deref(funcCheck)) {
				t.Fatalf("%s, peek %s: pin_state = %v, pin_check() = %v", state, peek, deref(viewCheck), deref(funcCheck))
			}
		}
	}

	p := queryInt(t, conn, ReadTSSQL)
	if got := nullableInt(t, role, PinCheckSQL(fmt.Sprint(*nullableInt(t, role, PinPeekSQL)))); got == nil || *got != p {
		t.Fatalf("pin_state after a pin = %v, want P = %d", deref(got), p)
	}
	same("after a pin")
	w := beginLazy(t, conn)
	if _, err := w.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	same("with a write in progress")
	commitLazy(t, w)
	same("after a write no pin settled")
	queryInt(t, conn, ReadTSSQL)
	same("after the pin that settled it")

	// Only the functions the comparison called itself: the views call none.
	if _, err := role.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	before := queryInt(t, conn, "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname = '"+Schema+"'")
	for range 5 {
		nullableInt(t, role, PinPeekSQL)
		nullableInt(t, role, PinCheckSQL("0"))
	}
	if _, err := role.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	if after := queryInt(t, conn, "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE schemaname = '"+Schema+"'"); after != before {
		t.Fatalf("reading the views called mzproxy's functions %d times", after-before)
	}
}

// deref is *v, or nil.
func deref(v *int64) any {
	if v == nil {
		return nil
	}
	return *v
}

// BenchmarkPinViews measures the server's own time per read-only
// transaction pin, peek and check, as the functions pin_peek and
// pin_check (before version 26, and in a session that restricts views)
// and as the views (PinPeekSQL, PinCheckSQL): a loop of 2,000 of each in
// one DO block (no round trip, no parse), interleaved rounds, medians.
//
//	go test ./proxy/storage/ -run '^$' -bench PinViews -benchtime 20x
func BenchmarkPinViews(b *testing.B) {
	ctx := context.Background()
	_, conn := installedDB(b)
	queryInt(b, conn, ReadTSSQL)
	pins := []struct{ name, peek, check string }{
		{"functions", PinPeekFunctionSQL, PinCheckFunctionSQL("peek")},
		{"views", PinPeekSQL, PinCheckSQL("peek")},
	}
	server := make([][]time.Duration, len(pins))
	for i := 0; i < b.N; i++ {
		for p, pin := range pins {
			var us float64
			_, err := conn.Exec(ctx, `DO $$ DECLARE s timestamptz := clock_timestamp(); peek bigint; BEGIN
				FOR i IN 1 .. 2000 LOOP peek := (`+pin.peek+`); PERFORM (`+pin.check+`); END LOOP;
				PERFORM set_config('bench.us', (extract(epoch FROM clock_timestamp() - s) * 1e6 / 2000)::text, false); END $$`)
			if err == nil {
				err = conn.QueryRow(ctx, "SELECT current_setting('bench.us')::float8").Scan(&us)
			}
			if err != nil {
				b.Fatal(err)
			}
			server[p] = append(server[p], time.Duration(us*1000))
		}
	}
	for p, pin := range pins {
		b.ReportMetric(medianNs(server[p])/1000, pin.name+"-server-µs")
	}
}
