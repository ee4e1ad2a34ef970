package storage

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// pendingPredicates is each table's (by name, among tables) _pending index
// predicate, "name: predicate", in order of name.
func pendingPredicates(t *testing.T, cs string, tables ...string) string {
	t.Helper()
	conn := connect(t, cs)
	got, err := collectText(context.Background(), conn, `SELECT k.name || ': ' || pg_get_expr(x.indpred, x.indrelid)
		FROM `+Schema+`.catalog k, pg_index x, pg_class i
		WHERE k.name = ANY ($1) AND x.indrelid = to_regclass(k.history) AND i.oid = x.indexrelid
		  AND i.relname = replace(k.history, '`+Schema+`.', '') || '_pending'
		ORDER BY k.name`, tables)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, "; ")
}

// The upgrade from 55 makes every table's trigger functions again with
// fewer conditions per call (hist_trim.sql's edits of gen_triggers), and
// builds the _pending index of every table that has a
// _fix (a dropped table's too, whose history is kept) again with the
// predicate least(mz_to, mz_from) < 0, and makes _fix again with that
// condition, not PUBLIC's; blocks after it (and blocks of a table made
// after it) restamp by the generic plan on the index and keep history
// exact, with no placeholder left. Fails on version 55 (the predicate is
// the placeholder expression below 0, the checks where they were).
func TestUpgradeToVersion56(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 55)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)", "CREATE TABLE d (id int PRIMARY KEY)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g", "INSERT INTO n VALUES (1, 1)", "INSERT INTO d VALUES (1)")
	inWrite(t, conn, "DROP TABLE d")
	blockCalls(t, cs, -1, "UPDATE a SET v = 1 WHERE id = 1", "UPDATE n SET v = 2")
	const least = "(LEAST(mz_to, mz_from) < 0)"
	if got := pendingPredicates(t, cs, "a", "n", "d"); strings.Count(got, "CASE") != 3 || strings.Contains(got, least) {
		t.Fatalf("_pending predicates at version 55: %s, want three of the placeholder", got)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got, want := pendingPredicates(t, cs, "a", "n", "d"), "a: "+least+"; d: "+least+"; n: "+least; got != want {
		t.Errorf("_pending predicates after the upgrade: %s, want %s", got, want)
	}
	// The trigger functions made again (hist_trim.sql's edits of gen_triggers):
	// the MZ002 check inside stamp_ts' branch, and a fresh UPDATE's step
	// and overtaken checks inside its repair as well as in the general path.
	upd := queryText(t, conn, "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure((SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass) || '_upd()')")
	if strings.Count(upd, "is out of step") != 2 || strings.Count(upd, "raise_overtaken") != 2 ||
		!strings.Contains(upd, "_t := "+Schema+".stamp_ts(TG_RELID);\n        IF _t IS NULL THEN") {
		t.Errorf("a's UPDATE trigger after the upgrade:\n%s", upd)
	}
	fixes := "SELECT count(*) FROM pg_proc p WHERE p.pronamespace = '" + Schema + "'::regnamespace AND p.proname ~ '^h[0-9]+_fix$'" +
		" AND p.prosrc LIKE '%AND least(h.mz_to, h.mz_from) < 0%' AND 'plan_cache_mode=force_generic_plan' = ANY (p.proconfig)"
	if n := queryInt(t, conn, fixes); n != 3 {
		t.Errorf("%d _fix with the predicate as a condition and a generic plan after the upgrade, want 3", n)
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM information_schema.routine_privileges WHERE grantee = 'PUBLIC' AND routine_schema = '`+Schema+`'
		AND (routine_name LIKE 'h%\_fix' OR routine_name = 'restamp_functions')`); n != 0 {
		t.Errorf("PUBLIC may run %d restamp functions", n)
	}
	watched, plans := explainWatched(t, cs)
	ha := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")
	hn := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'n'::regclass")
	inWrite(t, watched, "CREATE TABLE b (id int PRIMARY KEY, v int)", "INSERT INTO b VALUES (1, 1)")
	hb := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'b'::regclass")
	if got := pendingPredicates(t, cs, "b"); got != "b: "+least {
		t.Errorf("a table made after the upgrade: _pending predicate %q", got)
	}
	for i := range 2 {
		tx, err := watched.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Each table: a version closed, one written and closed again.
		for _, s := range []string{OpenWriteDeferredFor(-1), "UPDATE a SET v = 2 WHERE id = 1", "DELETE FROM a WHERE id = " + strconv.Itoa(3+i),
			"UPDATE b SET v = v + 1", "INSERT INTO b VALUES (" + strconv.Itoa(2+i) + ", 0)", "DELETE FROM b WHERE id = " + strconv.Itoa(2+i),
			"UPDATE n SET v = 3", "INSERT INTO n VALUES (" + strconv.Itoa(5+i) + ", 0)"} {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkRestampPlans(t, plans(), ha, 2, "blocks after the upgrade")
	checkRestampPlans(t, plans(), hn, 2, "blocks of a keyless table after the upgrade")
	checkRestampPlans(t, plans(), hb, 2, "blocks of a table made after the upgrade")
	inWrite(t, conn, "UPDATE a SET v = 4 WHERE id = 5", "DELETE FROM n WHERE id = 5")
	for _, table := range []string{"a", "n", "b"} {
		historyMatches(t, conn, table, uint64(queryInt(t, conn, ReadTSSQL)), "writes after the upgrade")
	}
	for _, h := range []string{ha, hn, hb} {
		if n := queryInt(t, conn, "SELECT count(*) FROM "+h+" WHERE mz_from < 0 OR mz_to < 0"); n != 0 {
			t.Errorf("%d placeholder versions in %s", n, h)
		}
	}
}
