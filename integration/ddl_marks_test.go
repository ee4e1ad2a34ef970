package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMarkersSurviveBackendCrash: a table made through mzproxy gets logged
// markers (storage version 20: creating an unlogged sequence flushed WAL),
// so after a crash of the backend (SIGQUIT, crash recovery) its marker
// keeps the count of writes of before the crash while the count starts
// over. A transaction that reads the table and then writes it alone still
// commits (the check skips a marker above the count); one with a write of
// the table since its read still fails with 40001.
func TestMarkersSurviveBackendCrash(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	p := startProxy(t, "--backend", pg.url())
	a := connectTo(t, ctx, p.URL("postgres", "postgres"))
	mustExec(t, ctx, a, "CREATE TABLE k (k int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)",
		"CREATE TABLE busy (k int PRIMARY KEY, v int)", "INSERT INTO busy VALUES (1, 0)")
	for i := 0; i < 30; i++ {
		mustExec(t, ctx, a, "UPDATE busy SET v = v + 1")
	}
	mustExec(t, ctx, a, "BEGIN", "SELECT * FROM k", "UPDATE k SET v = 1", "COMMIT")
	a.Close(ctx)

	direct := connectTo(t, ctx, pg.url())
	var persistence string
	var marker int64
	if err := direct.QueryRow(ctx, `SELECT string_agg(DISTINCT c.relpersistence::text, ','),
			max(pg_sequence_last_value(c.oid)) FILTER (WHERE c.relname LIKE 'w%')
		FROM pg_class c WHERE c.relnamespace = 'mzproxy'::regnamespace
		  AND c.relname IN ('w' || 'k'::regclass::oid, 'c' || 'k'::regclass::oid)`).Scan(&persistence, &marker); err != nil {
		t.Fatal(err)
	}
	if persistence != "p" {
		t.Fatalf("k's marker and check mark have relpersistence %q, want p (logged)", persistence)
	}
	// The shared settings commit asynchronously: make the marker durable.
	mustExec(t, ctx, direct, "CHECKPOINT")
	direct.Close(ctx)

	pg.crash(t, ctx)

	var b *pgx.Conn
	eventually(t, 30*time.Second, "mzproxy serves k after the crash", func() bool {
		conn, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
		if err != nil {
			return false
		}
		if _, err := conn.Exec(ctx, "SELECT * FROM k", pgx.QueryExecModeSimpleProtocol); err != nil {
			conn.Close(ctx)
			return false
		}
		b = conn
		return true
	})
	t.Cleanup(func() { b.Close(context.Background()) })
	direct = connectTo(t, ctx, pg.url())
	var kept, counted int64
	if err := direct.QueryRow(ctx, `SELECT pg_sequence_last_value(to_regclass('mzproxy.w' || 'k'::regclass::oid)),
			coalesce(pg_sequence_last_value('mzproxy.writes'), 0)`).Scan(&kept, &counted); err != nil {
		t.Fatal(err)
	}
	if kept != marker || counted >= marker {
		t.Fatalf("after the crash k's marker is %d and the count %d, want the marker kept (%d) above the count", kept, counted, marker)
	}

	mustExec(t, ctx, b, "BEGIN", "SELECT * FROM k", "UPDATE k SET v = 2")
	if _, err := b.Exec(ctx, "COMMIT", simple(b)); err != nil {
		t.Errorf("read k and wrote it alone after the crash: %v, want a commit", err)
	}
	c := connectTo(t, ctx, p.URL("postgres", "postgres"))
	mustExec(t, ctx, b, "BEGIN", "SELECT * FROM k")
	mustExec(t, ctx, c, "UPDATE k SET v = v + 1 WHERE k = 1")
	mustExec(t, ctx, b, "INSERT INTO k VALUES (3, 0)") // not the row c wrote: the check at COMMIT fails it
	_, err := b.Exec(ctx, "COMMIT", simple(b))
	wantCode(t, err, "40001")
}
