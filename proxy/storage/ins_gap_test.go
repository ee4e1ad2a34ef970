package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// overlappingVersions counts the pairs of versions of one key of table
// (column k) in its history that are visible at a common timestamp.
func overlappingVersions(t *testing.T, conn *pgx.Conn, table string) int64 {
	t.Helper()
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", table)
	return queryInt(t, conn, "SELECT count(*) FROM "+hist+" a JOIN "+hist+` b
		ON a.k = b.k AND a.ctid < b.ctid AND a.mz_from < b.mz_to AND b.mz_from < a.mz_to`)
}

// clockPast waits until the backend's clock is past ts, so that a T chosen
// afterwards is above ts.
func clockPast(t *testing.T, conn *pgx.Conn, ts int64) {
	t.Helper()
	for queryInt(t, conn, "SELECT "+Schema+".now_ms()") <= ts {
		time.Sleep(time.Millisecond)
	}
}

// wantDeletedLater checks that err is the 40001 of an INSERT of a key
// deleted at a later T naming table; after the snapshot (iso REPEATABLE
// READ), PostgreSQL's own.
func wantDeletedLater(t *testing.T, err error, iso pgx.TxIsoLevel, table, what string) {
	t.Helper()
	if !isSerializationFailure(err) {
		t.Fatalf("%s: %v, want 40001", what, err)
	}
	pe := err.(*pgconn.PgError)
	if iso == pgx.RepeatableRead {
		if pe.Message != "could not serialize access due to concurrent update" {
			t.Fatalf("%s: %q, want PostgreSQL's concurrent update", what, pe.Message)
		}
		return
	}
	if pe.Message != "could not serialize access due to concurrent delete" || !strings.Contains(pe.Detail, "a row of "+table+" ") {
		t.Fatalf("%s: %q (%q), want the concurrent delete of a row of %s", what, pe.Message, pe.Detail, table)
	}
}

// Y chose its T (a later statement of a write, a block whose T was fixed
// early, at READ COMMITTED and REPEATABLE READ), then X deleted key 1 of k
// and committed at a later T, before Y's INSERT of key 1 or while it
// waited on X's delete: the INSERT fails with 40001, and history never
// shows two versions of key 1 at once (before version 22 it did, between
// Y's T and X's).
func TestInsertOfKeyDeletedAtLaterTimestamp(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"INSERT INTO k VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)")
	yConn, xConn := connect(t, cs), connect(t, cs)
	ctx := context.Background()

	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		for _, block := range []bool{false, true} {
			for _, waits := range []bool{false, true} {
				what := string(iso)
				if block {
					what += ", block with T fixed early"
				} else {
					what += ", later statement"
				}
				if waits {
					what += ", INSERT waits for the DELETE"
				}
				y, tsY := earlyTimestampWriterIso(t, yConn, iso, block)
				clockPast(t, xConn, tsY)
				x := beginLazy(t, xConn)
				if _, err := x.Exec(ctx, "DELETE FROM k WHERE k = 1"); err != nil {
					t.Fatal(err)
				}
				var err error
				if waits {
					inserted := make(chan error, 1)
					go func() {
						_, err := y.Exec(ctx, "INSERT INTO k VALUES (1, 1)")
						inserted <- err
					}()
					time.Sleep(100 * time.Millisecond) // Y now waits on X's delete in k's key
					tsX := commitLazy(t, x)
					err = <-inserted
					t.Logf("%s: Y at %d, X at %d", what, tsY, tsX)
				} else {
					commitLazy(t, x)
					_, err = y.Exec(ctx, "INSERT INTO k VALUES (1, 1)")
				}
				if err == nil {
					err = y.Commit(ctx)
				}
				y.Rollback(ctx)
				if n := overlappingVersions(t, conn, "k"); n != 0 {
					t.Fatalf("%s: %d pairs of versions of one key overlap (Y's INSERT: %v)", what, n, err)
				}
				wantDeletedLater(t, err, iso, "public.k", what)
				autocommitWrite(t, conn, "INSERT INTO k VALUES (1, 0)")
			}
		}
	}
}

// The reverse order and other keys: a delete at a lower T than the
// inserting transaction's (committed before its T was chosen, or chosen
// before it and committed after), a delete of another key at a later T,
// and an autocommit INSERT (its own statement chooses T) do not fail, and
// history stays one version per key at a time.
func TestInsertOfKeyDeletedAtEarlierTimestamp(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"INSERT INTO k VALUES (1, 0), (2, 0)", "INSERT INTO b VALUES (1, 0)")
	yConn, xConn := connect(t, cs), connect(t, cs)
	ctx := context.Background()
	insertCommits := func(y pgx.Tx, stmt, what string) {
		t.Helper()
		if _, err := y.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := y.Commit(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := overlappingVersions(t, conn, "k"); n != 0 {
			t.Fatalf("%s: %d pairs of versions of one key overlap", what, n)
		}
	}

	for _, block := range []bool{false, true} {
		// X deleted and committed before Y chose its T.
		autocommitWrite(t, xConn, "DELETE FROM k WHERE k = 1")
		y, _ := earlyTimestampWriter(t, yConn, block)
		insertCommits(y, "INSERT INTO k VALUES (1, 1)", "deleted before Y's T")

		// X chose its T first and committed after Y chose a later one.
		x := beginLazy(t, xConn)
		if _, err := x.Exec(ctx, "DELETE FROM k WHERE k = 1"); err != nil {
			t.Fatal(err)
		}
		tsX := queryInt(t, x, CommitWriteFor(-1))
		clockPast(t, yConn, tsX)
		y, tsY := earlyTimestampWriter(t, yConn, block)
		commitLazy(t, x)
		insertCommits(y, "INSERT INTO k VALUES (1, 2)", "deleted at a lower T, committed after Y's T was chosen")
		if tsY <= tsX {
			t.Fatalf("Y's T %d is not above X's %d", tsY, tsX)
		}

		// Another key deleted at a later T.
		y, tsY = earlyTimestampWriter(t, yConn, block)
		clockPast(t, xConn, tsY)
		autocommitWrite(t, xConn, "DELETE FROM k WHERE k = 2")
		insertCommits(y, "INSERT INTO k VALUES (3, 0)", "another key deleted at a later T")
		autocommitWrite(t, conn, "INSERT INTO k VALUES (2, 0)")
		autocommitWrite(t, conn, "DELETE FROM k WHERE k = 3")
	}

	// A statement of Y whose CTEs delete a key and insert it again: its
	// INSERT trigger may run before its DELETE trigger, while the key's
	// version is still open.
	for _, stmt := range []string{
		"WITH d AS (DELETE FROM k WHERE k = 1 RETURNING *) INSERT INTO k SELECT k, v + 1 FROM d",
		"WITH d AS (DELETE FROM k WHERE k = 1 RETURNING *), i AS (INSERT INTO k SELECT k, v + 1 FROM d RETURNING 1) SELECT count(*) FROM i",
		"WITH RECURSIVE i AS (INSERT INTO k SELECT k, v + 1 FROM d RETURNING 1), d AS (DELETE FROM k WHERE k = 1 RETURNING *) SELECT count(*) FROM i",
		// The INSERT ends after one row of d, before the DELETE ends.
		"WITH d AS (DELETE FROM k WHERE k IN (1, 2) RETURNING *) INSERT INTO k SELECT k, v + 1 FROM d LIMIT 1",
	} {
		for _, block := range []bool{false, true} {
			y, _ := earlyTimestampWriter(t, yConn, block)
			insertCommits(y, stmt, stmt)
			autocommitWrite(t, conn, "INSERT INTO k VALUES (1, 0), (2, 0) ON CONFLICT DO NOTHING")
		}
	}

	// An autocommit INSERT of a key just deleted: its own statement chose T.
	autocommitWrite(t, xConn, "DELETE FROM k WHERE k = 1")
	autocommitWrite(t, yConn, "INSERT INTO k VALUES (1, 3)")
	if n := overlappingVersions(t, conn, "k"); n != 0 {
		t.Fatalf("autocommit: %d pairs of versions of one key overlap", n)
	}
}

// A table made at version 21 gets the search on upgrade: its _ins function
// is made again, and the signature sync_triggers keeps is the new one (the
// next column change does not make the functions again).
func TestUpgradeFromVersion21(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 21)
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"INSERT INTO k VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	before := triggerFunctions(t, conn, "k")
	inWrite(t, conn, "ALTER TABLE k ADD COLUMN c int")
	if after := triggerFunctions(t, conn, "k"); after != before {
		t.Errorf("a column change after the upgrade made the trigger functions again:\n%s\n%s", before, after)
	}

	yConn, xConn := connect(t, cs), connect(t, cs)
	y, tsY := earlyTimestampWriter(t, yConn, false)
	clockPast(t, xConn, tsY)
	autocommitWrite(t, xConn, "DELETE FROM k WHERE k = 1")
	_, err := y.Exec(ctx, "INSERT INTO k VALUES (1, 1)")
	wantDeletedLater(t, err, pgx.ReadCommitted, "public.k", "a table made at version 21")
}

// An UPDATE that moves a row to a key another transaction deleted at a
// later T than the updating transaction's fails as the INSERT does; one
// that moves a row to a free key, or changes no key, after the same
// delete, commits.
func TestUpdateToKeyDeletedAtLaterTimestamp(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"INSERT INTO k VALUES (1, 0), (2, 0)", "INSERT INTO b VALUES (1, 0)")
	yConn, xConn := connect(t, cs), connect(t, cs)
	ctx := context.Background()

	for _, block := range []bool{false, true} {
		y, tsY := earlyTimestampWriter(t, yConn, block)
		clockPast(t, xConn, tsY)
		autocommitWrite(t, xConn, "DELETE FROM k WHERE k = 1")
		if _, err := y.Exec(ctx, "UPDATE k SET v = v + 1 WHERE k = 2"); err != nil {
			t.Fatalf("block %v: an UPDATE of another key: %v", block, err)
		}
		_, err := y.Exec(ctx, "UPDATE k SET k = 1 WHERE k = 2")
		y.Rollback(ctx)
		wantDeletedLater(t, err, pgx.ReadCommitted, "public.k", "an UPDATE to the deleted key")

		y, _ = earlyTimestampWriter(t, yConn, block)
		if _, err := y.Exec(ctx, "UPDATE k SET k = 3 WHERE k = 2"); err != nil {
			t.Fatalf("block %v: an UPDATE to a free key: %v", block, err)
		}
		if err := y.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n := overlappingVersions(t, conn, "k"); n != 0 {
			t.Fatalf("block %v: %d pairs of versions of one key overlap", block, n)
		}
		autocommitWrite(t, conn, "UPDATE k SET k = 2 WHERE k = 3")
		autocommitWrite(t, conn, "INSERT INTO k VALUES (1, 0)")
	}
}

// After bulk statements (whose plans the session caches), the search of a
// single-row INSERT or UPDATE whose T was chosen before it still probes
// the key's lookup mirror, not every version after T, and is not costed
// high enough for JIT (60 ms a statement). Checked on the plans
// auto_explain reports for the triggers' statements.
func TestKeySearchPlansAfterBulk(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, `CREATE TABLE big (id int PRIMARY KEY, n int)`, `INSERT INTO big SELECT g, 0 FROM generate_series(1, 5000) g`)
	var notices []string
	cfg, err := pgx.ParseConfig(cs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	sess, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	for i := 1; i <= 7; i++ { // past plpgsql's five custom plans; inWrite chooses T at once
		lo, hi := 5000*i+1, 5000*i+5000
		inWrite(t, sess, fmt.Sprintf(`INSERT INTO big SELECT g, 0 FROM generate_series(%d, %d) g`, lo, hi))
		inWrite(t, sess, fmt.Sprintf(`UPDATE big SET id = id + 1000000 WHERE id BETWEEN %d AND %d`, lo, hi))
	}
	if _, err := sess.Exec(ctx, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;
		SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice`); err != nil {
		t.Skip("auto_explain not available:", err)
	}
	notices = nil
	inWrite(t, sess, `INSERT INTO big VALUES (0, 0)`, `UPDATE big SET id = -1 WHERE id = 0`)
	var checked int
	for _, n := range notices {
		if !strings.Contains(n, "FOR NO KEY UPDATE") {
			continue
		}
		checked++
		if strings.Contains(n, "Seq Scan on h") || strings.Contains(n, "Hash Join") || strings.Contains(n, "JIT:") ||
			!strings.Contains(n, "Index Scan Backward using h") || !strings.Contains(n, "Index Cond: ((id = n.id) AND (mz_to > ") {
			t.Errorf("key search plan does not probe the key:\n%s", n)
		}
	}
	if checked != 2 {
		t.Errorf("saw %d key search plans, want 2", checked)
	}
}
