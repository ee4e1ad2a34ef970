package integration

import "testing"

// TestDDLIndexWithoutSlot: through mzproxy, outside a transaction block,
// CREATE INDEX that is not UNIQUE and DROP INDEX on a managed table run
// as they are, without the write slot: no write is counted (the next pin
// need not move P) and the catalog revision stays, since nothing mzproxy
// records changed. A UNIQUE index still takes the slot (its lookup mirror
// on the history table is made then), so does an index made in a
// transaction block (the slot first, for the lock order), and the
// mirror of a unique index still goes with its DROP INDEX.
func TestDDLIndexWithoutSlot(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	state := func() (revision, writes, mirrors int) {
		t.Helper()
		if err := direct.QueryRow(ctx, `SELECT (SELECT revision FROM mzproxy.catalog_revision)::int,
		        (SELECT last_value FROM mzproxy.writes)::int, (SELECT count(*) FROM mzproxy.index_mirrors)::int`,
			simple(direct)).Scan(&revision, &writes, &mirrors); err != nil {
			t.Fatal(err)
		}
		return
	}

	mustExec(t, ctx, conn, "CREATE TABLE t (k int PRIMARY KEY, v int, w int)", "INSERT INTO t VALUES (1, 10, 100)")
	rev0, writes0, mirrors0 := state()
	mustExec(t, ctx, conn, "CREATE INDEX t_v ON t (v)", "DROP INDEX t_v", "CREATE INDEX t_w ON t (w) WHERE w > 0")
	if rev, writes, _ := state(); rev != rev0 || writes != writes0 {
		t.Errorf("plain CREATE/DROP INDEX: revision %d -> %d, writes %d -> %d; want both unchanged", rev0, rev, writes0, writes)
	}
	if got := count(t, ctx, direct, "SELECT count(*) FROM pg_indexes WHERE tablename = 't' AND indexname = 't_w'", simple(direct)); got != 1 {
		t.Fatalf("index t_w: %d, want 1", got)
	}

	mustExec(t, ctx, conn, "CREATE UNIQUE INDEX t_vu ON t (v)")
	rev1, writes1, mirrors1 := state()
	// (Storage 46: under the slot it takes, a DDL that records no T
	// chooses none, so counts no write.)
	if rev1 == rev0 || writes1 != writes0 || mirrors1 != mirrors0+1 {
		t.Errorf("CREATE UNIQUE INDEX: revision %d -> %d, writes %d -> %d, mirrors %d -> %d; want a new revision, no write counted, one more mirror",
			rev0, rev1, writes0, writes1, mirrors0, mirrors1)
	}
	mustExec(t, ctx, conn, "DROP INDEX t_vu")
	if rev, writes, mirrors := state(); rev != rev1 || writes != writes1 || mirrors != mirrors0 {
		t.Errorf("DROP INDEX of a unique index: revision %d -> %d, writes %d -> %d, mirrors %d -> %d; want revision and writes unchanged, its mirror gone",
			rev1, rev, writes1, writes, mirrors1, mirrors)
	}

	mustExec(t, ctx, conn, "BEGIN", "CREATE INDEX t_v2 ON t (v)", "COMMIT")
	if rev, writes, _ := state(); rev == rev1 || writes == writes1 {
		t.Errorf("CREATE INDEX in a block: revision %d -> %d, writes %d -> %d; want the slot taken", rev1, rev, writes1, writes)
	}

	// The table's history goes on as before.
	mustExec(t, ctx, conn, "UPDATE t SET v = 11 WHERE k = 1")
	if got := count(t, ctx, direct, "SELECT count(*) FROM mzproxy.h1", simple(direct)); got != 2 {
		t.Errorf("%d versions in the history, want 2", got)
	}
}
