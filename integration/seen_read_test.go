package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reads on the explicit-timestamp path outside a block are one round trip:
// planned with the catalog the proxy saw last, behind a guard of the
// proxy's own that checks it and pins the oracle (proxy/seen_read.go).

// TestSeenCatalogRead: a read planned with a catalog another proxy has
// changed since is planned again, never run with the old plan (the old
// table's history would still answer it); a session whose transactions
// take one snapshot for all statements is read the ordinary way; and the
// read's inputs are held while it runs.
func TestSeenCatalogRead(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	q := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	b := connectTo(t, ctx, q.URL("postgres", db))
	mustExec(t, ctx, b, "CREATE TABLE gt (v text)", "INSERT INTO gt VALUES ('one')")
	read := func(sql, want string) uint64 {
		t.Helper()
		var got string
		var ts int64
		if err := a.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&got, &ts); err != nil || got != want {
			t.Fatalf("%s: %q, %v; want %q", sql, got, err, want)
		}
		return uint64(ts)
	}
	present := "SELECT v, mz_now() FROM gt"
	first := read(present, "one")
	second := read(present, "one")
	if second < first {
		t.Fatalf("mz_now() went back from %d to %d", first, second)
	}
	// A write through the other proxy is seen: the guard pinned the oracle.
	mustExec(t, ctx, b, "UPDATE gt SET v = 'one, updated'")
	written := readTS(t, ctx, b)
	if ts := read(present, "one, updated"); ts < written {
		t.Fatalf("mz_now() %d is before the write acknowledged at %d", ts, written)
	}
	asOf := "SELECT v, " + strconv.FormatUint(second, 10) + "::int8 FROM gt AS OF " + strconv.FormatUint(second, 10)
	read(asOf, "one")
	// The other proxy replaces the table: p's catalog is stale.
	mustExec(t, ctx, b, "DROP TABLE gt", "CREATE TABLE gt (v text)", "INSERT INTO gt VALUES ('two')")
	read(present, "two")
	mustExec(t, ctx, b, "DROP TABLE gt", "CREATE TABLE gt (v text)", "INSERT INTO gt VALUES ('three')")
	now := readTS(t, ctx, b)
	read("SELECT v, mz_now() FROM gt AS OF AT LEAST "+strconv.FormatUint(now, 10), "three")

	// One snapshot per transaction: the guard refuses, the read runs the
	// ordinary way and still sees the latest write.
	mustExec(t, ctx, a, "SET default_transaction_isolation = 'repeatable read'")
	mustExec(t, ctx, b, "UPDATE gt SET v = 'three, updated'")
	read(present, "three, updated")
	mustExec(t, ctx, a, "RESET default_transaction_isolation")

	// Held while it runs.
	slow := connectTo(t, ctx, p.URL("postgres", db))
	done := make(chan error, 1)
	go func() {
		var v string
		var ts int64
		done <- slow.QueryRow(ctx, "SELECT v, mz_now() FROM gt WHERE pg_sleep(1) IS NOT NULL", pgx.QueryExecModeSimpleProtocol).Scan(&v, &ts)
	}()
	eventually(t, 10*time.Second, "a hold while the slow read runs", func() bool { return p.readHolds(t) == 1 })
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal(context.Cause(ctx))
	}
	p.awaitHolds(t, 0, "after the slow read")
}

// TestSeenCatalogReadAsOfOld: AS OF a time below the lease's floor (its
// hold published first) is read behind the guard, again and again; a time
// compaction has passed fails as before, with Materialize's error, and the
// session goes on.
func TestSeenCatalogReadAsOfOld(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--heartbeat-interval", "100ms")
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE TABLE kept (v text)", "ALTER TABLE kept SET (RETAIN HISTORY FOR '1h')",
		"CREATE TABLE short (v text)", "INSERT INTO kept VALUES ('old')", "INSERT INTO short VALUES ('old')")
	old := readTS(t, ctx, a)
	mustExec(t, ctx, a, "UPDATE kept SET v = 'new'", "UPDATE short SET v = 'new'")
	updated := readTS(t, ctx, a)
	// Past the floor (heartbeats publish a newer one) and past the
	// default retention of short (one second).
	time.Sleep(2 * time.Second)
	mustExec(t, ctx, a, "SELECT v, mz_now() FROM kept") // the proxy has seen the catalog
	at := strconv.FormatUint(old, 10)
	for range 3 {
		var v string
		if err := a.QueryRow(ctx, "SELECT v FROM kept AS OF "+at, pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != "old" {
			t.Fatalf("AS OF %s: %q, %v; want old", at, v, err)
		}
	}
	// Past the update too, so that AS OF AT LEAST the old time, read at the
	// since, sees it.
	eventually(t, 10*time.Second, "short's history compacted past the update", func() bool {
		var since int64
		err := a.QueryRow(ctx, "SELECT read_frontier FROM mz_internal.mz_frontiers WHERE name = 'short'").Scan(&since)
		return err == nil && uint64(since) > updated
	})
	var v string
	err := a.QueryRow(ctx, "SELECT v FROM short AS OF "+at, pgx.QueryExecModeSimpleProtocol).Scan(&v)
	wantCode(t, err, "XX000")
	// The session goes on.
	if err := a.QueryRow(ctx, "SELECT v FROM short AS OF AT LEAST "+at, pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != "new" {
		t.Fatalf("AS OF AT LEAST %s: %q, %v; want new", at, v, err)
	}
}

// TestSeenReadSearchPathChangedUnseen: a function that SETs search_path
// changes the session's name resolution without any statement text saying
// so; the next mz_now() read, planned with the search_path the proxy knew,
// is refused by its guard and planned again: it reads the table the new
// search_path names, as PostgreSQL resolves it.
func TestSeenReadSearchPathChangedUnseen(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE SCHEMA other", "CREATE TABLE public.st (v text)", "CREATE TABLE other.st (v text)",
		"INSERT INTO public.st VALUES ('public')", "INSERT INTO other.st VALUES ('other')",
		`CREATE FUNCTION hop() RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.set_config('search_path', 'other, public', false); END $$`)
	read := func(want string) {
		t.Helper()
		var v string
		var ts int64
		if err := a.QueryRow(ctx, "SELECT v, mz_now() FROM st", pgx.QueryExecModeSimpleProtocol).Scan(&v, &ts); err != nil || v != want {
			t.Fatalf("read: %q, %v; want %q", v, err, want)
		}
	}
	read("public")
	// The call's text names neither search_path nor set_config.
	mustExec(t, ctx, a, "SELECT hop()")
	read("other")
}

// TestPreparedReadGuardedBind (issue 15): the Bind of a prepared mz_now()
// or AS OF read that starts its batch asks nothing of the database's
// catalog or frontiers: it is planned with those the proxy saw last and
// checked by the guard on the session's own connection, which also pins a
// read of the present (one round trip, proxy/seen_read.go guardedBind).
// The test plays a backend whose frontiers cannot be read (a lock every
// frontiers read waits for): the Binds go on. The guard still catches a
// catalog another proxy changed, and a write acknowledged by another proxy
// is seen.
func TestPreparedReadGuardedBind(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p, q := startProxy(t, "--metrics-listen", "127.0.0.1:0"), startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	b := connectTo(t, ctx, q.URL("postgres", db))
	mustExec(t, ctx, b, "CREATE TABLE gb (k int, v text)", "INSERT INTO gb VALUES (1, 'one')")
	old := readTS(t, ctx, b)
	mustExec(t, ctx, b, "UPDATE gb SET v = 'uno' WHERE k = 1")
	for name, sql := range map[string]string{
		"now":  "SELECT v, mz_now() FROM gb WHERE k = $1",
		"asof": "SELECT v FROM gb WHERE k = $1 AS OF " + strconv.FormatUint(old, 10),
	} {
		if _, err := a.PgConn().Prepare(ctx, name, sql, nil); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	check := func(what string, want map[string]string) {
		t.Helper()
		for name, v := range want {
			if got, err := readPrepared(ctx, a, name); err != nil || got != v {
				t.Fatalf("%s: prepared %s read %q, %v; want %q", what, name, got, err, v)
			}
		}
	}
	both := map[string]string{"now": "uno", "asof": "one"}
	check("before the lock", both) // publishes the AS OF's hold

	mustExec(t, ctx, a, "SET statement_timeout = '5s'")
	locker := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, locker, "BEGIN", "LOCK TABLE mzproxy.collections IN ACCESS EXCLUSIVE MODE")
	for range 10 {
		check("frontiers locked", both)
	}
	mustExec(t, ctx, locker, "COMMIT")

	mustExec(t, ctx, b, "UPDATE gb SET v = 'eins' WHERE k = 1")
	written := readTS(t, ctx, b)
	res := a.PgConn().ExecPrepared(ctx, "now", [][]byte{[]byte("1")}, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != "eins" {
		t.Fatalf("prepared mz_now() read after another proxy's write: %v, %v", res.Rows, res.Err)
	}
	if ts, err := strconv.ParseUint(string(res.Rows[0][1]), 10, 64); err != nil || ts < written {
		t.Fatalf("mz_now() %s is before the write acknowledged at %d (%v)", res.Rows[0][1], written, err)
	}
	p.awaitHolds(t, 0, "after the prepared reads")

	// The other proxy replaces the table: the statements' plans read the
	// old one's history, and the guard refuses them.
	mustExec(t, ctx, b, "DROP TABLE gb", "CREATE TABLE gb (k int, v text)", "INSERT INTO gb VALUES (1, 'two')")
	for name := range both {
		_, err := readPrepared(ctx, a, name)
		wantCode(t, err, "0A000")
	}
	var v string
	if err := a.QueryRow(ctx, "SELECT v FROM gb WHERE k = 1").Scan(&v); err != nil || v != "two" {
		t.Fatalf("the session after the refused Binds: %q, %v", v, err)
	}
}

// TestReadGuardPreparedOnce (issue 15): the read guard is a statement the
// backend parses and plans once per session and catalog revision, not once
// per read (pg_prepared_statements counts its executions, over the three
// shapes of a guard of the present, each prepared once); a client that
// drops it (DEALLOCATE ALL, DISCARD ALL) reads on, the guard made again.
func TestReadGuardPreparedOnce(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE TABLE gp (k int, v text)", "INSERT INTO gp VALUES (1, 'one')")
	read := func(what string) {
		t.Helper()
		var v string
		var ts int64
		if err := a.QueryRow(ctx, "SELECT v, mz_now() FROM gp WHERE k = 1", pgx.QueryExecModeSimpleProtocol).Scan(&v, &ts); err != nil || v != "one" {
			t.Fatalf("%s: %q, %v", what, v, err)
		}
	}
	const reads = 20
	for range reads {
		read("a read")
	}
	var runs int64
	if err := a.QueryRow(ctx, "SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements WHERE name ~ '^mzproxy_read_guard_[0-9a-f]{12}(_peek)?$'",
		pgx.QueryExecModeSimpleProtocol).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs < reads-1 {
		t.Fatalf("the guard's prepared statement ran %d times for %d reads; want one statement for all", runs, reads)
	}

	prepare := func() {
		t.Helper()
		if _, err := a.PgConn().Prepare(ctx, "now", "SELECT v, mz_now() FROM gp WHERE k = $1", nil); err != nil {
			t.Fatal(err)
		}
	}
	readNow := func(what string) {
		t.Helper()
		if v, err := readPrepared(ctx, a, "now"); err != nil || v != "one" {
			t.Fatalf("prepared read %s: %q, %v", what, v, err)
		}
	}
	prepare()
	for _, drop := range []string{"DEALLOCATE ALL", "DISCARD ALL"} {
		// The guard is prepared (for a Bind, then for a Query); the drop
		// takes it with the client's statements. The next read meets it
		// gone.
		readNow("before " + drop)
		mustExec(t, ctx, a, drop)
		prepare()
		readNow("after " + drop)
		read("before the second " + drop)
		mustExec(t, ctx, a, drop)
		read("after the second " + drop)
		prepare()
	}
}
