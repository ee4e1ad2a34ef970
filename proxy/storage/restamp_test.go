package storage

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// restampPages runs blocks of one UPDATE of table (int key id, column v)
// each, as mzproxy runs a client's block, and returns the most pages of
// the indexes of table's history one block's COMMIT read:
// pg_stat_get_xact_blocks_fetched around the slot's fix
// (CommitWriteTxFor, what COMMIT runs), in the block's own transaction.
// Seven blocks: PL/pgSQL planned the restamp's statement five times for
// the arguments, then kept a generic plan (since version 54, a generic
// plan from the first).
func restampPages(t *testing.T, conn *pgx.Conn, table string) (most int64) {
	t.Helper()
	ctx := context.Background()
	fetched := "SELECT sum(pg_stat_get_xact_blocks_fetched(x.indexrelid))::bigint FROM pg_index x WHERE x.indrelid = '" +
		queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", table) + "'::regclass"
	for i := 1; i <= 7; i++ {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{OpenWriteDeferredFor(-1), "UPDATE " + table + " SET v = v + 1 WHERE id = " + strconv.Itoa(i)} {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		before := queryInt(t, tx, fetched)
		if _, err := tx.Exec(ctx, CommitWriteTxFor(-1)); err != nil {
			t.Fatal(err)
		}
		most = max(most, queryInt(t, tx, fetched)-before)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return most
}

// A block's COMMIT restamps the versions it wrote through an index of the
// history ((mz_to, mz_from), since version 54 the partial _pending): the
// pages it reads do not grow with the table.
// Versions 17 to 33 looked for them by mz_from alone and read the whole
// index at every COMMIT (52 pages here).
func TestBlockRestampIndexed(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 50000) g")
	if _, err := conn.Exec(context.Background(), "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	if got := restampPages(t, conn, "a"); got > 20 {
		t.Fatalf("a block's COMMIT read %d pages of the history's indexes of a table of 50,000 rows", got)
	}
	historyMatches(t, conn, "a", uint64(queryInt(t, conn, ReadTSSQL)), "after the blocks")
	// A block that writes a key again, and closes what it wrote: what the
	// restamp finds by mz_to is all it wrote.
	blockCalls(t, cs, -1, "UPDATE a SET v = v + 1 WHERE id = 1", "UPDATE a SET v = v + 1 WHERE id = 1",
		"INSERT INTO a VALUES (50001, 0)", "UPDATE a SET v = 5 WHERE id = 50001", "UPDATE a SET id = 50003 WHERE id = 50001",
		"INSERT INTO a VALUES (50002, 0)", "DELETE FROM a WHERE id = 50002", "DELETE FROM a WHERE id = 2")
	historyMatches(t, conn, "a", uint64(queryInt(t, conn, ReadTSSQL)), "after a block that wrote keys again")
}

// The upgrade to 34 makes every table's restamp functions again, from the
// text new tables get; blocks then restamp their history as before.
func TestUpgradeToVersion34(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 33)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "INSERT INTO a SELECT g, 0 FROM generate_series(1, 20000) g")
	restamp := "SELECT p.prosrc FROM pg_proc p, " + Schema + ".catalog k WHERE p.proname = 'h' || k.id || '_restamp' AND k.oid = 'a'::regclass"
	if src := queryText(t, conn, restamp); strings.Contains(src, "9223372036854775807") {
		t.Fatalf("before the upgrade the restamp already names mz_to for the versions written: %s", src)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	// Since version 50 the table's restamp is _fix alone (_restamp
	// dropped); since 54 it finds the written versions by the placeholder
	// a version carries, mz_from when mz_to is Infinity.
	fix := strings.Replace(restamp, "'_restamp'", "'_fix'", 1)
	if src := queryText(t, conn, fix); !strings.Contains(src, "(CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) = p") {
		t.Fatalf("after the upgrade the restamp is %s", src)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM information_schema.routine_privileges WHERE grantee = 'PUBLIC' AND routine_schema = '"+Schema+"' AND (routine_name LIKE 'h%\\_restamp' OR routine_name LIKE 'h%\\_fix')"); n != 0 {
		t.Fatalf("PUBLIC may run %d restamp functions", n)
	}
	if got := restampPages(t, conn, "a"); got > 20 {
		t.Fatalf("after the upgrade a block's COMMIT read %d pages of the history index", got)
	}
	historyMatches(t, conn, "a", uint64(queryInt(t, conn, ReadTSSQL)), "blocks after the upgrade")
	inWrite(t, conn, "CREATE TABLE b (id int PRIMARY KEY, v int)", "INSERT INTO b SELECT g, 0 FROM generate_series(1, 20000) g")
	if got := restampPages(t, conn, "b"); got > 20 {
		t.Fatalf("a table made after the upgrade: a block's COMMIT read %d pages of the history index", got)
	}
}

// A block's T is raised to the newest version it closed, and every table
// it wrote is restamped with that one T (computed once, before any table
// is restamped). The newer version is made by hand: with the oracle's
// clock and P it cannot be ahead of the T a later COMMIT chooses. (The
// version of b it closes is left empty, written and retracted at T, as
// before: no read sees it.)
func TestBlockRestampRaisedOnce(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"CREATE TABLE c (id int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)", "INSERT INTO c VALUES (1, 0)")
	hb := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'b'::regclass")
	ahead := queryInt(t, conn, "SELECT "+Schema+".now_ms() + 3600000")
	if _, err := conn.Exec(context.Background(), "UPDATE "+hb+" SET mz_from = $1 WHERE mz_to = 9223372036854775807", ahead); err != nil {
		t.Fatal(err)
	}
	blockCalls(t, cs, -1, "UPDATE a SET v = 1", "UPDATE b SET v = 1", "UPDATE c SET v = 1")
	for _, table := range []string{"a", "b", "c"} {
		hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", table)
		if got := queryInt(t, conn, "SELECT mz_from FROM "+hist+" WHERE mz_to = 9223372036854775807"); got != ahead {
			t.Errorf("%s's new version is at %d, want the closed version's %d", table, got, ahead)
		}
		if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from < 0 OR mz_to < 0"); n != 0 {
			t.Errorf("%d placeholder versions of %s committed", n, table)
		}
	}
}
