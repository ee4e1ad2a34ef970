package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// firstWritesOf runs two blocks' first writes of one never-written table,
// each prepared first (pgx's cache_statement sends the Parse in a round
// trip of its own, and parse analysis locks the target ROW EXCLUSIVE
// until the block ends): block 0 prepares, block 1 prepares, writes and
// commits on its own goroutine until it waits for a lock on the table
// (seen in pg_locks), then block 0 writes and commits. Until session 22
// each block's history build (ensure_history, SHARE ROW EXCLUSIVE) ran at
// its Execute, after its Parse's lock: the lock upgrade two blocks cannot
// both make, and PostgreSQL's deadlock detector failed one with 40P01.
// Built before the Parse, block 1's build waits for block 0 to end and
// finds the history there. Both blocks must commit, with no error, and
// each row be there once.
func firstWritesOf(t *testing.T, ctx context.Context, tb string, urls [2]string, direct, admin *pgx.Conn) {
	t.Helper()
	ins := "INSERT INTO " + tb + " VALUES ($1, 0)"
	conns := [2]*pgx.Conn{
		connectMode(t, ctx, urls[0], pgx.QueryExecModeCacheStatement),
		connectMode(t, ctx, urls[1], pgx.QueryExecModeCacheStatement),
	}
	tx0, err := conns[0].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx0.Rollback(ctx) //nolint:errcheck // committed, unless the test failed
	if _, err := tx0.Prepare(ctx, "ins", ins); err != nil {
		t.Fatalf("block 0: prepare: %v", err)
	}
	second := make(chan error, 1)
	go func() {
		second <- func() error {
			tx1, err := conns[1].Begin(ctx)
			if err != nil {
				return err
			}
			defer tx1.Rollback(ctx) //nolint:errcheck // committed, unless it failed
			if _, err := tx1.Prepare(ctx, "ins", ins); err != nil {
				return err
			}
			if _, err := tx1.Exec(ctx, "ins", 2); err != nil {
				return err
			}
			return tx1.Commit(ctx)
		}()
	}()
	eventually(t, 20*time.Second, "block 1 waiting for a lock on the table", func() bool {
		var n int
		err := direct.QueryRow(ctx, "SELECT count(*)::int FROM pg_locks WHERE relation = $1::regclass AND NOT granted", tb).Scan(&n)
		return err == nil && n > 0
	})
	if _, err := tx0.Exec(ctx, "ins", 1); err != nil {
		t.Errorf("block 0: %v (%s)", err, sqlState(err))
	} else if err := tx0.Commit(ctx); err != nil {
		t.Errorf("block 0: COMMIT: %v", err)
	}
	if err := <-second; err != nil {
		t.Errorf("block 1: %v (%s)", err, sqlState(err))
	}
	var n, distinct int
	if err := admin.QueryRow(ctx, "SELECT count(*)::int, count(DISTINCT k)::int FROM "+tb+" WHERE k IN (1, 2)",
		pgx.QueryExecModeSimpleProtocol).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != 2 || distinct != 2 {
		t.Errorf("%d rows (%d keys), want 2 (2)", n, distinct)
	}
}

// TestOutside22FirstWritesNoDeadlock: firstWritesOf through one proxy.
// On 0467027 one block failed with 40P01.
func TestOutside22FirstWritesNoDeadlock(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)")
	firstWritesOf(t, ctx, tb, [2]string{p.URL("postgres", db), p.URL("postgres", db)}, direct, admin)
	p.awaitHolds(t, 0, "after the blocks")
	// The history has both writes: a read at the present sees them.
	if n := count(t, ctx, admin, "SELECT count(*)::int FROM "+tb+" AS OF AT LEAST mz_now()", pgx.QueryExecModeSimpleProtocol); n != 2 {
		t.Errorf("AS OF: %d rows, want 2", n)
	}
}

// TestOutside22FirstWritesTwoProxies: firstWritesOf with each block on a
// proxy of its own (neither knows what the other built). On 0467027 one
// block failed with 40P01.
func TestOutside22FirstWritesTwoProxies(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	q := startProxy(t)
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)")
	firstWritesOf(t, ctx, tb, [2]string{p.URL("postgres", db), q.URL("postgres", db)}, direct, admin)
}

// TestOutside22FirstWriteBesideDDL: a block's first write of a
// never-written table, prepared first, beside DDL of the same table
// through mzproxy: an ALTER TABLE sent while the block holds what its
// Parse took waits for the block, which writes and commits; an ALTER
// TABLE in a block held open makes the next block's prepare wait, which
// then builds the history with the column the ALTER added and writes. No
// error anywhere, and the rows are there once.
func TestOutside22FirstWriteBesideDDL(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	waiting := func(tb, what string) {
		eventually(t, 20*time.Second, what, func() bool {
			var n int
			err := direct.QueryRow(ctx, "SELECT count(*)::int FROM pg_locks WHERE relation = $1::regclass AND NOT granted", tb).Scan(&n)
			return err == nil && n > 0
		})
	}

	// The DDL after the block's Parse.
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)")
	writer := connectMode(t, ctx, p.URL("postgres", db), pgx.QueryExecModeCacheStatement)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Prepare(ctx, "ins", "INSERT INTO "+tb+" VALUES ($1, 0)"); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	ddl := connectTo(t, ctx, p.URL("postgres", db))
	altered := make(chan error, 1)
	go func() { _, err := ddl.Exec(ctx, "ALTER TABLE "+tb+" ADD COLUMN w int"); altered <- err }()
	waiting(tb, "the ALTER TABLE waiting for the block")
	if _, err := tx.Exec(ctx, "ins", 1); err != nil {
		t.Errorf("write beside the ALTER: %v (%s)", err, sqlState(err))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Errorf("COMMIT beside the ALTER: %v (%s)", err, sqlState(err))
	}
	if err := <-altered; err != nil {
		t.Errorf("ALTER TABLE: %v (%s)", err, sqlState(err))
	}
	mustExec(t, ctx, admin, "INSERT INTO "+tb+" VALUES (2, 0, 2)")

	// The DDL in a block held open before the Parse.
	tb2 := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb2+" (k int PRIMARY KEY, v int)")
	ddlTx, err := ddl.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ddlTx.Exec(ctx, "ALTER TABLE "+tb2+" ADD COLUMN w int"); err != nil {
		t.Fatalf("ALTER TABLE in a block: %v", err)
	}
	wrote := make(chan error, 1)
	go func() {
		wrote <- func() error {
			tx, err := writer.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx) //nolint:errcheck // committed, unless it failed
			if _, err := tx.Prepare(ctx, "ins2", "INSERT INTO "+tb2+" VALUES ($1, 0, $1)"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "ins2", 1); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}()
	}()
	waiting(tb2, "the block's prepare waiting for the ALTER's block")
	if err := ddlTx.Commit(ctx); err != nil {
		t.Errorf("COMMIT of the ALTER's block: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Errorf("write after the ALTER's block: %v (%s)", err, sqlState(err))
	}
	for _, c := range []struct {
		tb   string
		want int
	}{{tb, 2}, {tb2, 1}} {
		if n := count(t, ctx, admin, "SELECT count(*)::int FROM "+c.tb+" AS OF AT LEAST mz_now()", pgx.QueryExecModeSimpleProtocol); n != c.want {
			t.Errorf("%s AS OF: %d rows, want %d", c.tb, n, c.want)
		}
	}
	p.awaitHolds(t, 0, "after the blocks")
}

// TestOutside22HostileRestamp: session 21's restamp at COMMIT (a table's
// h<id>_fix, restamp_raise; storage 49; since 50 no _closed or
// _restamp) and the slot's new branches
// (open_write_deferred, storage 47), probed by an ordinary role through
// mzproxy and directly: every call of the restamp's functions, outside a
// block and in one against its own placeholders, fails with 42501; a
// slot call with a forged count leaves mzproxy's check as it was (the
// role's block that read a total and writes after another write of it
// fails at COMMIT with 40001); the history is as it was, and the proxy
// goes on.
func TestOutside22HostileRestamp(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)",
		"INSERT INTO "+tb+" VALUES (1, 100), (2, 100)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON "+tb+" TO "+role)
	var hist string
	var id int64
	if err := direct.QueryRow(ctx, "SELECT history, id FROM mzproxy.catalog WHERE oid = $1::regclass", tb).Scan(&hist, &id); err != nil {
		t.Fatal(err)
	}
	historyOf := func() string {
		var s string
		if err := direct.QueryRow(ctx, "SELECT count(*) || ' ' || coalesce(sum(mz_from)::text, '') || ' ' || coalesce(sum(mz_to)::text, '') FROM "+hist).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := historyOf()
	calls := []string{
		"SELECT " + hist + "_fix(-1, 1)",
		"SELECT " + hist + "_fix(9223372036854775807, 1)",
		"SELECT mzproxy.restamp_raise(ARRAY['" + hist + "'], 1, 2)",
		"SELECT mzproxy.restamp_functions('" + hist + "')",
		fmt.Sprintf("SELECT mzproxy.gen_restamp(%d)", id),
		"SELECT mzproxy.fix_write()",
		"SELECT mzproxy.fix_write(true)",
	}
	for _, via := range []struct {
		name string
		url  string
	}{{"mzproxy", p.URL(role, db)}, {"directly", directURL(role, db)}} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			conn := connectTo(t, ctx, via.url)
			for _, c := range calls {
				_, err := conn.Exec(ctx, c, mode)
				if sqlState(err) != "42501" {
					t.Errorf("%s, %v: %s: %v, want 42501", via.name, mode, c, err)
				}
			}
			// Storage 50 made _fix a table's only restamp function.
			for _, c := range []string{"SELECT " + hist + "_restamp(-1, 1)", "SELECT " + hist + "_closed(-1)"} {
				if _, err := conn.Exec(ctx, c, mode); sqlState(err) != "42883" {
					t.Errorf("%s, %v: %s: %v, want 42883 (no such function)", via.name, mode, c, err)
				}
			}
			// In its own block, against its own placeholders.
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if via.name == "directly" {
				if _, err := tx.Exec(ctx, "SELECT mzproxy.open_write_deferred(NULL)", mode); err != nil {
					t.Fatalf("%s: the slot: %v", via.name, err)
				}
			}
			if _, err := tx.Exec(ctx, "UPDATE "+tb+" SET v = v + 1 WHERE k = 1", mode); err != nil {
				t.Fatalf("%s, %v: UPDATE: %v", via.name, mode, err)
			}
			_, err = tx.Exec(ctx, "SELECT "+hist+"_fix(-pg_current_xact_id()::text::bigint, 1)", mode)
			if sqlState(err) != "42501" {
				t.Errorf("%s, %v: the role's _fix of its own block: %v, want 42501", via.name, mode, err)
			}
			tx.Rollback(ctx) //nolint:errcheck // failed
			conn.Close(ctx)
		}
	}
	if got := historyOf(); got != before {
		t.Errorf("history after the refused calls: %s, was %s", got, before)
	}

	// A forged count in the role's block through mzproxy: after its read
	// at its timestamp, before its write (mzproxy's slot comes with the
	// write and keeps the smaller count), and after it.
	for _, forged := range []string{
		"SELECT mzproxy.open_write_deferred(NULL, 9223372036854775807)",
		"SELECT mzproxy.open_write_deferred(NULL, NULL)",
	} {
		for _, after := range []bool{false, true} {
			conn := connectTo(t, ctx, p.URL(role, db))
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var sum int
			if err := tx.QueryRow(ctx, "SELECT sum(v)::int FROM "+tb).Scan(&sum); err != nil {
				t.Fatal(err)
			}
			steps := []string{forged, "UPDATE " + tb + " SET v = v - 1 WHERE k = 1"}
			if after {
				steps[0], steps[1] = steps[1], steps[0]
			}
			for _, s := range steps {
				if _, err := tx.Exec(ctx, s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			mustExec(t, ctx, admin, "UPDATE "+tb+" SET v = v + 1 WHERE k = 2")
			err = tx.Commit(ctx)
			if sqlState(err) != "40001" {
				t.Errorf("%s (after the write: %v): COMMIT: %v, want 40001", forged, after, err)
			}
			conn.Close(ctx)
		}
	}
	p.mustAlive(t, ctx)
}

// TestOutside22FirstWriteNoRights: a role with no right on a
// never-written table prepares and runs a write of it in a block through
// mzproxy: 42501 (at its Parse now, the build's check; PostgreSQL
// refuses at the Execute), the block aborts (25P02) until ROLLBACK, the
// history is not built, and the session goes on.
func TestOutside22FirstWriteNoRights(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)")
	conn := connectMode(t, ctx, p.URL(role, db), pgx.QueryExecModeCacheStatement)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Prepare(ctx, "ins", "INSERT INTO "+tb+" VALUES ($1, 0)")
	if err == nil {
		_, err = tx.Exec(ctx, "ins", 1)
	}
	if sqlState(err) != "42501" {
		t.Errorf("the write: %v, want 42501", err)
	}
	_, err = tx.Exec(ctx, "SELECT 1")
	if sqlState(err) != "25P02" {
		t.Errorf("after the refusal: %v, want 25P02", err)
	}
	tx.Rollback(ctx) //nolint:errcheck // failed
	var built bool
	if err := direct.QueryRow(ctx, "SELECT history_built FROM mzproxy.catalog WHERE oid = $1::regclass", tb).Scan(&built); err != nil {
		t.Fatal(err)
	}
	if built {
		t.Error("the history was built by a role without rights")
	}
	if n := count(t, ctx, conn, "SELECT 1", pgx.QueryExecModeSimpleProtocol); n != 1 {
		t.Errorf("the session after ROLLBACK: %d", n)
	}
}
