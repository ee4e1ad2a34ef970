package storage

import (
	"context"
	"sort"
	"strings"
	"testing"
)

// scannedRelations is the relations a plan of sql scans, from EXPLAIN
// (VERBOSE): each costs the backend a lock, a rights check and a scan's
// start at every run of a statement that names it.
func scannedRelations(t *testing.T, q Querier, sql string) []string {
	t.Helper()
	lines, err := collectText(context.Background(), q, "EXPLAIN (VERBOSE, COSTS OFF) "+sql)
	if err != nil {
		t.Fatal(err)
	}
	var scans []string
	for _, line := range lines {
		if i := strings.Index(line, "Scan on "); i >= 0 {
			scans = append(scans, strings.Fields(line[i+len("Scan on "):])[0])
		}
	}
	sort.Strings(scans)
	return scans
}

// Version 51 (pin_last_value.sql): settled_pin and settled_writes scan
// only the sequences they read as a row (writes; settled_pin's P,
// pinned), and read the others by pg_sequence_last_value. Before the
// upgrade settled_pin scanned four sequences and settled_writes three. An
// ordinary role reads both as before, and each answers as before: P and
// w once a pin settled every write, NULL for settled_pin when P is more
// than a second behind the clock, NULL for both while a write is not
// settled.
func TestUpgradeToVersion51(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 50)
	const writesSQL = "SELECT w FROM " + Schema + ".settled_writes"
	before := map[string][]string{
		settledPinSQL: {Schema + ".pinned", Schema + ".writes", Schema + ".writes", Schema + ".writes_seen"},
		writesSQL:     {Schema + ".pinned", Schema + ".writes", Schema + ".writes_seen"},
	}
	after := map[string][]string{
		settledPinSQL: {Schema + ".pinned", Schema + ".writes"},
		writesSQL:     {Schema + ".writes"},
	}
	for sql, want := range before {
		if got := scannedRelations(t, conn, sql); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("%s at version 50 scans %v, want %v", sql, got, want)
		}
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	for sql, want := range after {
		if got := scannedRelations(t, conn, sql); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s after the upgrade scans %v, want %v", sql, got, want)
		}
	}

	loginRole(t, conn, "mzlastvalue")
	role := connect(t, server.ConnString("mzlastvalue", conn.Config().Database))
	inWrite(t, conn, "CREATE TABLE c (x int)")
	wantSettled := func(what string, t0, w *int64) {
		t.Helper()
		for name, q := range map[string]Querier{"owner": conn, "ordinary role": role} {
			got := nullableInt(t, q, settledPinSQL)
			if (got == nil) != (t0 == nil) || got != nil && *got != *t0 {
				t.Errorf("%s: settled_pin as the %s = %v, want %v", what, name, got, t0)
			}
			got = nullableInt(t, q, writesSQL)
			if (got == nil) != (w == nil) || got != nil && *got != *w {
				t.Errorf("%s: settled_writes as the %s = %v, want %v", what, name, got, w)
			}
		}
	}
	count := func() *int64 {
		w := queryInt(t, conn, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "+Schema+".writes")
		return &w
	}

	p := queryInt(t, role, ReadTSSQL)
	wantSettled("after a pin", &p, count())

	tx := beginLazy(t, conn)
	if _, err := tx.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	wantSettled("a write in progress", nil, nil)
	commitLazy(t, tx)
	wantSettled("a write no pin settled", nil, nil)
	p = queryInt(t, role, ReadTSSQL)
	wantSettled("after the pin that settled the write", &p, count())

	// P's age, set by hand well clear of the second's bound on either side
	// (the clock moves while the test runs).
	ahead := queryInt(t, conn, "SELECT setval('"+Schema+".pinned', "+Schema+".now_ms() + 600000)")
	wantSettled("P ahead of the clock", &ahead, count())
	queryInt(t, conn, "SELECT setval('"+Schema+".pinned', "+Schema+".now_ms() - 5000)")
	wantSettled("P five seconds old", nil, count())
}
