package storage

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// restampPlans returns the plans (auto_explain's, from explainWatched) of
// the restamp statement of _fix among plans, the UPDATE of history hist.
func restampPlans(plans []string, hist string) []string {
	var got []string
	for _, p := range plans {
		if strings.Contains(p, "Query Text: UPDATE "+hist+" h SET mz_to = CASE WHEN h.mz_to = p THEN t") {
			got = append(got, p)
		}
	}
	return got
}

// checkRestampPlans fails unless each of the n restamp plans of history
// hist (schema-qualified) among plans scans its _pending index, and no
// other, with the placeholder as a parameter: the generic plan, the same at every
// call, whatever the statistics were.
func checkRestampPlans(t *testing.T, plans []string, hist string, n int, when string) {
	t.Helper()
	got := restampPlans(plans, hist)
	if len(got) != n {
		t.Fatalf("%s: %d plans of %s's restamp, want %d", when, len(got), hist, n)
	}
	h := strings.TrimPrefix(hist, Schema+".")
	for _, p := range got {
		// An index scan or a bitmap scan of _pending, and no other index
		// (the range h<id>_mz_to, a key's mirror h<id>_k<oid>).
		if !strings.Contains(p, " "+h+"_pending ") || strings.Contains(p, " "+h+"_mz_to ") || strings.Contains(p, " "+h+"_k") ||
			!strings.Contains(p, " = $1))") || strings.Contains(p, "Seq Scan") {
			t.Errorf("%s: %s's restamp was not the generic plan on its _pending index:\n%s", when, hist, p)
			return
		}
	}
}

// Version 54 (restamp_generic.sql): a block's restamp of each table it
// wrote is the generic plan on the table's _pending index, kept for the
// session, also when it was made at one-row statistics and the history
// grew to 40,000 versions after (before, _fix was planned at every call
// with the values, because a generic plan of its conditions could scan
// the key's mirror: TestHistoryPlansStayFlat). Fails on version 53 (a
// custom plan, its placeholder a constant, on (mz_to, mz_from)).
func TestRestampPlannedOnce(t *testing.T) {
	cs, admin := installedDB(t)
	ctx := context.Background()
	inWrite(t, admin, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO n VALUES (1, 0)")
	hist := map[string]string{}
	for _, tb := range []string{"a", "n"} {
		hist[tb] = queryText(t, admin, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", tb)
		for _, s := range []string{"ALTER TABLE " + hist[tb] + " SET (autovacuum_enabled = false)", "VACUUM ANALYZE " + tb, "VACUUM ANALYZE " + hist[tb]} {
			if _, err := admin.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	conn, plans := explainWatched(t, cs)
	// Each table: a version closed, one written and closed again.
	block := []string{OpenWriteDeferredFor(-1), "UPDATE a SET v = v + 1 WHERE id = 1", "INSERT INTO a VALUES (2, 0)", "DELETE FROM a WHERE id = 2",
		"UPDATE n SET v = v + 1", "INSERT INTO n VALUES (2, 0)", "DELETE FROM n WHERE id = 2"}
	runBlock := func() {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, s := range block {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 7 {
		runBlock()
	}
	for _, tb := range []string{"a", "n"} {
		checkRestampPlans(t, plans(), hist[tb], 7, "seven blocks at one-row statistics")
	}
	// The history grows to 40,000 versions (20,000 current, 20,000 closed)
	// with its statistics left at one row, then is analyzed: the session's
	// plan stays, and one made again after the ANALYZE is the same.
	inWrite(t, admin, "INSERT INTO a SELECT g, 0 FROM generate_series(3, 20002) g")
	if _, err := admin.Exec(ctx, "INSERT INTO "+hist["a"]+" SELECT g, g + 1, 0, 1, 0 FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	before := len(plans())
	runBlock()
	if _, err := admin.Exec(ctx, "ANALYZE "+hist["a"]); err != nil {
		t.Fatal(err)
	}
	runBlock()
	checkRestampPlans(t, plans()[before:], hist["a"], 2, "at 40,000 versions, before and after ANALYZE")
	for _, tb := range []string{"a", "n"} {
		historyMatches(t, admin, tb, uint64(queryInt(t, admin, ReadTSSQL)), "the blocks")
		if n := queryInt(t, admin, "SELECT count(*) FROM "+hist[tb]+" WHERE mz_from < 0 OR mz_to < 0"); n != 0 {
			t.Errorf("%d placeholder versions of %s", n, tb)
		}
	}
}

// pendingIndexes lists the tables among tables (by name) whose history has
// its index h<id>_pending, in order.
func pendingIndexes(t *testing.T, conn *pgx.Conn, tables ...string) string {
	t.Helper()
	got, err := collectText(context.Background(), conn, `SELECT k.name FROM `+Schema+`.catalog k, pg_index x, pg_class i
		WHERE k.name = ANY ($1) AND x.indrelid = to_regclass(k.history) AND i.oid = x.indexrelid
		  AND i.relname = replace(k.history, '`+Schema+`.', '') || '_pending'
		ORDER BY k.name`, tables)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, ",")
}

// The upgrade from 53 makes the _pending index and _fix again for every
// table that has a _fix (a dropped table's too, whose history is kept),
// _fix with a generic plan and not PUBLIC's; blocks after it restamp by
// the index and keep history exact; a table made after it gets both at
// its first write.
func TestUpgradeToVersion54(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 53)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)", "CREATE TABLE d (id int PRIMARY KEY)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g", "INSERT INTO n VALUES (1, 1)", "INSERT INTO d VALUES (1)")
	inWrite(t, conn, "DROP TABLE d")
	blockCalls(t, cs, -1, "UPDATE a SET v = 1 WHERE id = 1", "UPDATE n SET v = 2")
	fixModes := "SELECT string_agg(p.proname || ' ' || array_to_string(p.proconfig, ' '), ', ' ORDER BY p.proname) FROM pg_proc p " +
		"WHERE p.pronamespace = '" + Schema + "'::regnamespace AND p.proname ~ '^h[0-9]+_fix$'"
	if got := queryText(t, conn, fixModes); strings.Count(got, "plan_cache_mode=force_custom_plan") != 3 {
		t.Fatalf("_fix at version 53: %s, want three with force_custom_plan", got)
	}
	if got := pendingIndexes(t, conn, "a", "n", "d"); got != "" {
		t.Fatalf("_pending indexes at version 53: %s", got)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got := queryText(t, conn, fixModes); strings.Count(got, "plan_cache_mode=force_generic_plan") != 3 || strings.Contains(got, "force_custom_plan") {
		t.Errorf("_fix after the upgrade: %s, want three with force_generic_plan", got)
	}
	if got := pendingIndexes(t, conn, "a", "n", "d"); got != "a,d,n" {
		t.Errorf("_pending indexes after the upgrade: %s", got)
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM information_schema.routine_privileges WHERE grantee = 'PUBLIC' AND routine_schema = '`+Schema+`'
		AND (routine_name LIKE 'h%\_fix' OR routine_name = 'restamp_functions')`); n != 0 {
		t.Errorf("PUBLIC may run %d restamp functions", n)
	}
	watched, plans := explainWatched(t, cs)
	ha := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")
	inWrite(t, watched, "CREATE TABLE b (id int PRIMARY KEY, v int)", "INSERT INTO b VALUES (1, 1)")
	hb := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'b'::regclass")
	for i := range 2 {
		tx, err := watched.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{OpenWriteDeferredFor(-1), "UPDATE a SET v = 2 WHERE id = 1", "DELETE FROM a WHERE id = " + strconv.Itoa(3+i),
			"UPDATE b SET v = v + 1", "INSERT INTO b VALUES (" + strconv.Itoa(2+i) + ", 0)", "UPDATE n SET v = 3"} {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkRestampPlans(t, plans(), ha, 2, "blocks after the upgrade")
	checkRestampPlans(t, plans(), hb, 2, "blocks of a table made after the upgrade")
	if got := pendingIndexes(t, conn, "b"); got != "b" {
		t.Errorf("a table made after the upgrade has _pending indexes %q", got)
	}
	inWrite(t, conn, "UPDATE a SET v = 4 WHERE id = 5", "DELETE FROM n")
	for _, table := range []string{"a", "n", "b"} {
		historyMatches(t, conn, table, uint64(queryInt(t, conn, ReadTSSQL)), "writes after the upgrade")
	}
	for _, h := range []string{ha, hb} {
		if n := queryInt(t, conn, "SELECT count(*) FROM "+h+" WHERE mz_from < 0 OR mz_to < 0"); n != 0 {
			t.Errorf("%d placeholder versions in %s", n, h)
		}
	}
}
