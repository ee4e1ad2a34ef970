package integration

import (
	"testing"
)

// TestBlockRecordSavepointClient: an ordinary role, through the proxy,
// writes its own table in blocks, each of which records the table in its
// row of deferred_slots at its first write (the record fix_write restamps
// from at COMMIT; storage 58 changed the conditions around it, not it).
// A savepoint rolled back takes the table's write out with its history; a
// write after it records the table again. In a block that wrote the table
// the role cannot reach the block's record (deferred_slots: read, emptied,
// its T forged, deleted, truncated: 42501 each, inside a savepoint), and
// the COMMIT after each refusal restamps the table's history: no
// placeholder left, every key's versions chained, the current ones the
// table.
func TestBlockRecordSavepointClient(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{create: true})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	admin := connectTo(t, ctx, directURL("postgres", db))
	c := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, c, "CREATE TABLE rec (id int PRIMARY KEY, v int)", "INSERT INTO rec VALUES (1, 0), (2, 0)")
	hist := historyOf(t, ctx, admin, "rec")
	checkHistory := func(when string) {
		t.Helper()
		var bad, gaps, differ int
		if err := admin.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM `+hist+` WHERE mz_from < 0 OR mz_to < 0 OR mz_from >= mz_to),
			(SELECT count(*) FROM (SELECT mz_to, lead(mz_from) OVER (PARTITION BY id ORDER BY mz_from) AS next FROM `+hist+`) v
			  WHERE v.next IS NOT NULL AND v.next <> v.mz_to),
			(SELECT count(*) FROM ((SELECT id, v FROM rec EXCEPT ALL SELECT id, v FROM `+hist+` WHERE mz_to = 9223372036854775807)
			  UNION ALL (SELECT id, v FROM `+hist+` WHERE mz_to = 9223372036854775807 EXCEPT ALL SELECT id, v FROM rec)) d)`).Scan(&bad, &gaps, &differ); err != nil {
			t.Fatal(err)
		}
		if bad != 0 || gaps != 0 || differ != 0 {
			t.Fatalf("%s: %d placeholder or empty versions, %d gaps, %d rows differ from the current versions", when, bad, gaps, differ)
		}
	}
	checkHistory("after the inserts")

	mustExec(t, ctx, c, "BEGIN", "SAVEPOINT s", "UPDATE rec SET v = 1 WHERE id = 1", "ROLLBACK TO SAVEPOINT s",
		"UPDATE rec SET v = 2 WHERE id = 2", "COMMIT")
	checkHistory("a block whose first write was rolled back to a savepoint")
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+hist+" WHERE v = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d versions of the UPDATE rolled back to its savepoint", n)
	}
	mustExec(t, ctx, c, "BEGIN", "UPDATE rec SET v = 3 WHERE id = 1", "SAVEPOINT s", "UPDATE rec SET v = 4 WHERE id = 2",
		"ROLLBACK TO SAVEPOINT s", "COMMIT")
	checkHistory("a block whose second write was rolled back to a savepoint")

	for _, sql := range []string{
		"SELECT rels FROM mzproxy.deferred_slots",
		"UPDATE mzproxy.deferred_slots SET rels = '{}'",
		"UPDATE mzproxy.deferred_slots SET fixed_t = 1",
		"DELETE FROM mzproxy.deferred_slots",
		"TRUNCATE mzproxy.deferred_slots",
	} {
		mustExec(t, ctx, c, "BEGIN", "UPDATE rec SET v = v + 1", "SAVEPOINT s")
		if _, err := c.Exec(ctx, sql); sqlState(err) != "42501" {
			t.Errorf("%s in a block that wrote rec: %v, want 42501", sql, err)
		}
		mustExec(t, ctx, c, "ROLLBACK TO SAVEPOINT s", "UPDATE rec SET v = v + 1 WHERE id = 1", "COMMIT")
		checkHistory("after " + sql)
	}
	p.mustAlive(t, ctx)
}
