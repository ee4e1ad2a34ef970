package storage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// settledPinSQL reads the lock-free pin as the read guard does.
const settledPinSQL = "SELECT t FROM " + Schema + ".settled_pin"

// The view settled_pin answers what pin() answers without the gate, and
// NULL wherever pin() would do more: a write slot taken since the last pin
// (in progress or committed), a write slot of the reader's own or any
// value in mzproxy.write_ts, P over a second behind the clock. An ordinary
// role reads it, and may not set the sequence it reads.
func TestSettledPin(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE c (x int)")
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzsettled; CREATE ROLE mzsettled LOGIN"); err != nil {
		t.Fatal(err)
	}
	role := connect(t, server.ConnString("mzsettled", conn.Config().Database))

	p := queryInt(t, conn, ReadTSSQL)
	for name, reader := range map[string]Querier{"owner": conn, "ordinary role": role} {
		if got := nullableInt(t, reader, settledPinSQL); got == nil || *got != p {
			t.Fatalf("settled_pin as the %s after a pin = %v, want P = %d", name, got, p)
		}
	}
	// Since version 32 (pin_seq.sql) it may read the sequence, as the
	// read-only transaction's guard does, but not move it.
	if _, err := role.Exec(ctx, "SELECT setval('"+Schema+".pinned', 1)"); err == nil {
		t.Fatal("an ordinary role sets the sequence pinned")
	}

	w := beginLazy(t, conn)
	if _, err := w.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if got := nullableInt(t, w, settledPinSQL); got != nil {
		t.Fatalf("settled_pin in a transaction with a write slot = %d, want NULL", *got)
	}
	if got := nullableInt(t, role, settledPinSQL); got != nil {
		t.Fatalf("settled_pin with a write in progress = %d, want NULL", *got)
	}
	tw := commitLazy(t, w)
	if got := nullableInt(t, role, settledPinSQL); got != nil {
		t.Fatalf("settled_pin after a write no pin settled = %d, want NULL", *got)
	}
	pw := queryInt(t, role, ReadTSSQL)
	if pw < tw {
		t.Fatalf("pin() after a write at %d = %d", tw, pw)
	}
	if got := nullableInt(t, role, settledPinSQL); got == nil || *got != pw {
		t.Fatalf("settled_pin after the pin that settled the write = %v, want %d", got, pw)
	}

	tx, err := role.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('mzproxy.write_ts', '1 - forged', true)"); err != nil {
		t.Fatal(err)
	}
	if got := nullableInt(t, tx, settledPinSQL); got != nil {
		t.Fatalf("settled_pin with mzproxy.write_ts set = %d, want NULL (pin() checks the value)", *got)
	}
	tx.Rollback(ctx)

	time.Sleep(1100 * time.Millisecond)
	if got := nullableInt(t, role, settledPinSQL); got != nil {
		t.Fatalf("settled_pin with P over a second old = %d, want NULL", *got)
	}
}

// BenchmarkGuardPin times the pin part of the proxy's read guard (its
// value set into mzproxy.read_ts) as the guard of version 17 ran it
// (pin(), PL/pgSQL) and as it runs it now (settled_pin, pin() only when
// NULL), on the lock-free path (no write since the last pin), interleaved
// so load from elsewhere on the machine hits both alike. Two figures each:
// the server's own time per guard (a loop of 2,000 in one DO block, no
// round trip, no parse) and the median round trip of the guard as a
// prepared statement from this process.
//
//	go test ./proxy/storage/ -run '^$' -bench GuardPin -benchtime 2000x
func BenchmarkGuardPin(b *testing.B) {
	ctx := context.Background()
	prev := connect(b, newDB(b))
	if _, err := prev.Exec(ctx, strings.ReplaceAll(strings.Join(migrations[:17], "\n"), "@SCHEMA@", Schema)); err != nil {
		b.Fatal(err)
	}
	_, cur := installedDB(b)
	guards := []struct {
		name string
		conn *pgx.Conn
		pin  string
	}{
		{"v17", prev, Schema + ".pin()"},
		{"now", cur, "coalesce((SELECT t FROM " + Schema + ".settled_pin), " + Schema + ".pin())"},
	}
	serverUs := func(conn *pgx.Conn, pin string) float64 {
		var us float64
		err := conn.QueryRow(ctx, `SELECT set_config('bench.us', '', false)`).Scan(new(string))
		if err == nil {
			_, err = conn.Exec(ctx, `DO $$ DECLARE s timestamptz := clock_timestamp(); BEGIN
				FOR i IN 1 .. 2000 LOOP PERFORM set_config('mzproxy.read_ts', (`+pin+`)::text, true); END LOOP;
				PERFORM set_config('bench.us', (extract(epoch FROM clock_timestamp() - s) * 1e6 / 2000)::text, false); END $$`)
		}
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT current_setting('bench.us')::float8").Scan(&us)
		}
		if err != nil {
			b.Fatal(err)
		}
		return us
	}
	rounds := make([][]time.Duration, len(guards))
	server := make([][]time.Duration, len(guards))
	for _, guard := range guards {
		// Prepared, as the proxy prepares its guard: planned once.
		if _, err := guard.conn.PgConn().Prepare(ctx, "guard", "SELECT set_config('mzproxy.read_ts', ("+guard.pin+")::text, true)", nil); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		for g, guard := range guards {
			start := time.Now()
			if _, err := guard.conn.PgConn().ExecPrepared(ctx, "guard", nil, nil, nil).Close(); err != nil {
				b.Fatal(err)
			}
			rounds[g] = append(rounds[g], time.Since(start))
			if i%500 == 0 {
				server[g] = append(server[g], time.Duration(serverUs(guard.conn, guard.pin)*1000))
			}
		}
	}
	for g, guard := range guards {
		b.ReportMetric(medianNs(server[g])/1000, guard.name+"-server-µs")
		b.ReportMetric(medianNs(rounds[g])/1000, guard.name+"-roundtrip-µs")
	}
}
