package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// versions is every version of table's history as "key mz_from mz_to", in
// order: what a restamp changed.
func versions(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", table)
	got, err := collectText(context.Background(), conn,
		"SELECT id || ' ' || mz_from || ' ' || mz_to FROM "+hist+" ORDER BY id, mz_from, mz_to")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// commitBlock runs stmts in a block with a deferred slot and COMMITs it,
// as mzproxy runs a client's block (the restamp at COMMIT, in
// fix_at_commit).
func commitBlock(t *testing.T, conn *pgx.Conn, stmts ...string) error {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after COMMIT, a no-op
	for _, s := range append([]string{OpenWriteDeferredFor(-1)}, stmts...) {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// Version 49 (restamp_fold.sql): a block's COMMIT restamps each table at T
// with h<id>_fix, which returns the newest start of a version it closed.
// When that is above T, restamp_raise moves this block's versions (and only
// its own) from T to it. Here P is set ahead of the clock, so T is P + 1
// for every write that follows; autocommit writes of other keys land at that
// T first (a version started at T and one ended at T, other transactions'
// that share T), and b's current version starts an hour after it. The
// block's versions of a, b and c all move to that hour; the other
// transactions' versions at T stay. Without the xmin, restamp_raise would
// move them too; without the raise, b's closed version would end before it
// starts.
func TestBlockRestampRaisedByXmin(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"CREATE TABLE c (id int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 0), (9, 0)", "INSERT INTO b VALUES (1, 0)", "INSERT INTO c VALUES (1, 0)")
	start := queryInt(t, conn, "SELECT mz_from FROM "+queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")+" WHERE id = 1")
	p := queryInt(t, conn, "SELECT setval('"+Schema+".pinned', "+Schema+".now_ms() + 600000)")
	T := p + 1
	inWrite(t, conn, "INSERT INTO a VALUES (8, 0)", "DELETE FROM a WHERE id = 9")
	hb := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'b'::regclass")
	ahead := T + 3600000
	if _, err := conn.Exec(ctx, "UPDATE "+hb+" SET mz_from = $1 WHERE mz_to = 9223372036854775807", ahead); err != nil {
		t.Fatal(err)
	}
	if err := commitBlock(t, conn, "UPDATE a SET v = 1 WHERE id = 1", "UPDATE b SET v = 1", "UPDATE c SET v = 1"); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"a": {fmt.Sprintf("1 %d %d", start, ahead), fmt.Sprintf("1 %d 9223372036854775807", ahead),
			fmt.Sprintf("8 %d 9223372036854775807", T), fmt.Sprintf("9 %d %d", start, T)},
		"b": {fmt.Sprintf("1 %d %d", ahead, ahead), fmt.Sprintf("1 %d 9223372036854775807", ahead)},
		"c": {fmt.Sprintf("1 %d %d", start, ahead), fmt.Sprintf("1 %d 9223372036854775807", ahead)},
	}
	for _, table := range []string{"a", "b", "c"} {
		if got := versions(t, conn, table); strings.Join(got, ", ") != strings.Join(want[table], ", ") {
			t.Errorf("%s's versions: %v, want %v", table, got, want[table])
		}
	}
	historyMatches(t, conn, "a", uint64(ahead), "at the raised T")
}

// An ordinary role cannot run the restamp itself: neither a table's _fix
// (which would restamp its placeholders at a T of its choosing, or a
// committed version's end) nor restamp_raise; it cannot write history. Its
// own blocks are restamped at COMMIT, at a T above the reads before them,
// with no placeholder left, and a T it sets itself is refused.
func TestRestampFoldByHostileRole(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	db := conn.Config().Database
	loginRole(t, conn, "mzfoldhostile")
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0), (2, 0)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON k TO mzfoldhostile")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	hostile := connect(t, server.ConnString("mzfoldhostile", db))
	before := versions(t, conn, "k")

	for _, s := range []string{
		"SELECT " + hist + "_fix(-1, 1)",
		"SELECT " + hist + "_fix(9223372036854775807, 1)",
		"SELECT " + Schema + ".restamp_raise(ARRAY['" + hist + "'], 1, 2)",
		"UPDATE " + hist + " SET mz_from = 1",
	} {
		_, err := hostile.Exec(ctx, s)
		wantCode(t, err, "42501", s)
	}
	// In its own block, against its own placeholders.
	tx, err := hostile.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{OpenWriteDeferredFor(-1), "UPDATE k SET v = 5 WHERE id = 1"} {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	_, err = tx.Exec(ctx, "SELECT "+hist+"_fix(-pg_current_xact_id()::text::bigint, 1)")
	wantCode(t, err, "42501", "the role's _fix of its own block")
	tx.Rollback(ctx) //nolint:errcheck // failed
	if got := versions(t, conn, "k"); strings.Join(got, ", ") != strings.Join(before, ", ") {
		t.Fatalf("history after the refused calls: %v, was %v", got, before)
	}

	read := queryInt(t, conn, ReadTSSQL)
	if err := commitBlock(t, hostile, "UPDATE k SET v = 6 WHERE id = 1", "DELETE FROM k WHERE id = 2", "INSERT INTO k VALUES (3, 3)"); err != nil {
		t.Fatal(err)
	}
	T := queryInt(t, conn, "SELECT mz_from FROM "+hist+" WHERE id = 3")
	if T <= read {
		t.Errorf("the role's block wrote at %d, not above the read at %d", T, read)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_to = $1", T); n != 2 {
		t.Errorf("%d versions end at the block's T %d, want 2 (k 1 and 2)", n, T)
	}
	historyMatches(t, conn, "k", uint64(T), "the role's block")
	if got := queryText(t, conn, "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM "+hist+" WHERE mz_from <= $1 AND mz_to > $1", T-1); got != "1=0,2=0" {
		t.Errorf("AS OF just before the role's block: %s", got)
	}

	// A T of its own, set after its writes: COMMIT refuses it.
	err = commitBlock(t, hostile, "UPDATE k SET v = 7 WHERE id = 1",
		"SELECT set_config('mzproxy.write_ts', '1 - forged', true)")
	wantCode(t, err, "42501", "a block's T set by the role")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from < 0 OR mz_to < 0 OR mz_from <= 1 OR mz_to <= 1"); n != 0 {
		t.Errorf("%d versions at a placeholder or the forged T", n)
	}
}

// The upgrade to 49 gives every table with restamp functions its _fix (run
// by no role but the owner), and blocks then restamp with it, once per
// table; history stays exact, also with T raised (restamp_raise).
func TestUpgradeToVersion49(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 46)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g", "INSERT INTO n VALUES (1, 1)")
	blockCalls(t, cs, -1, "UPDATE a SET v = 1 WHERE id = 1", "UPDATE n SET v = 2")
	fixes := "SELECT count(*) FROM pg_proc p, " + Schema + ".catalog k WHERE p.proname = 'h' || k.id || '_fix' AND p.pronamespace = '" + Schema + "'::regnamespace"
	if n := queryInt(t, conn, fixes); n != 0 {
		t.Fatalf("%d _fix functions before the upgrade", n)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if n := queryInt(t, conn, fixes); n != 2 {
		t.Fatalf("%d _fix functions after the upgrade, want 2", n)
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM information_schema.routine_privileges WHERE grantee = 'PUBLIC' AND routine_schema = '`+Schema+`'
		AND (routine_name LIKE 'h%\_fix' OR routine_name = 'restamp_raise')`); n != 0 {
		t.Fatalf("PUBLIC may run %d of the new functions", n)
	}
	ha := strings.TrimPrefix(queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass"), Schema+".")
	calls := blockCalls(t, cs, -1, "UPDATE a SET v = 2 WHERE id = 1", "UPDATE a SET v = 3 WHERE id = 2", "UPDATE n SET v = 3", "DELETE FROM a WHERE id = 3")
	if callCount(calls, ha+"_fix") != 1 || callCount(calls, ha+"_closed") != 0 || callCount(calls, ha+"_restamp") != 0 {
		t.Errorf("a block after the upgrade: %v, want %s_fix once and neither _closed nor _restamp", calls, ha)
	}
	for _, table := range []string{"a", "n"} {
		historyMatches(t, conn, table, uint64(queryInt(t, conn, ReadTSSQL)), "blocks after the upgrade")
	}
	ahead := queryInt(t, conn, "SELECT "+Schema+".now_ms() + 3600000")
	if _, err := conn.Exec(ctx, "UPDATE "+Schema+"."+ha+" SET mz_from = $1 WHERE id = 4 AND mz_to = 9223372036854775807", ahead); err != nil {
		t.Fatal(err)
	}
	if err := commitBlock(t, conn, "UPDATE a SET v = 4 WHERE id IN (4, 5)", "UPDATE n SET v = 4"); err != nil {
		t.Fatal(err)
	}
	// (a 4's version written by hand at the raised T is closed there:
	// empty, and so left out of the comparison.)
	historyMatches(t, conn, "n", uint64(ahead), "a block with T raised after the upgrade")
	if got := queryText(t, conn, "SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM "+Schema+"."+ha+" WHERE mz_from <= $1 AND mz_to > $1", ahead); got != "1=2,2=3,4=4,5=4,6=0,7=0,8=0,9=0,10=0" {
		t.Errorf("a at the raised T: %s", got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+"."+ha+" WHERE mz_from < 0 OR mz_to < 0"); n != 0 {
		t.Errorf("%d placeholder versions of a", n)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+"."+ha+" WHERE mz_from = $1 AND mz_to = 9223372036854775807", ahead); n != 2 {
		t.Errorf("%d of the raised block's versions of a at the raised T, want 2", n)
	}
}
