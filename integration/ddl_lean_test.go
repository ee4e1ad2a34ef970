package integration

import "testing"

// TestCreateAfterDropTakesMarkers: through mzproxy, a CREATE TABLE after a
// DROP TABLE takes the dropped table's marker and check mark (storage
// version 18) instead of creating two unlogged sequences, each of which
// flushed WAL; the new table's read-then-write transactions are checked
// as a new table's: alone they commit, with a write of the table since
// their read they fail with 40001.
func TestCreateAfterDropTakesMarkers(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	b := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	sequences := func() int {
		return count(t, ctx, direct, "SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relnamespace = 'mzproxy'::regnamespace", simple(direct))
	}

	mustExec(t, ctx, a, "CREATE TABLE old (k int PRIMARY KEY, v int)", "INSERT INTO old VALUES (1, 0)",
		"BEGIN", "SELECT * FROM old", "UPDATE old SET v = 1", "COMMIT", "DROP TABLE old")
	before := sequences()
	mustExec(t, ctx, a, "CREATE TABLE fresh (k int PRIMARY KEY, v int)", "INSERT INTO fresh VALUES (1, 0)")
	if got := sequences(); got != before {
		t.Errorf("CREATE TABLE after DROP TABLE: %d sequences in mzproxy's schema, want %d (none created)", got, before)
	}

	mustExec(t, ctx, a, "BEGIN", "SELECT * FROM fresh", "INSERT INTO fresh VALUES (2, 0)", "COMMIT")
	mustExec(t, ctx, a, "BEGIN", "SELECT * FROM fresh")
	mustExec(t, ctx, b, "UPDATE fresh SET v = v + 1 WHERE k = 1")
	if _, err := a.Exec(ctx, "INSERT INTO fresh VALUES (3, 0)", simple(a)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Exec(ctx, "COMMIT", simple(a))
	wantCode(t, err, "40001")
	if got := count(t, ctx, b, "SELECT count(*) FROM fresh", simple(b)); got != 2 {
		t.Fatalf("%d rows in fresh, want 2", got)
	}
}
