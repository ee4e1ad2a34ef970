package storage

import (
	"context"
	"strings"
	"testing"
)

// TestDDLWithoutT: under the pending slot mzproxy takes for an autocommit
// DDL, a view's CREATE and DROP and an ALTER TABLE of a table without
// history choose no T (version 46): no ddl_ts, no write counted, so the
// next pin need not move P. The catalog revision still moves once per
// statement, a view's row records view_ts (the oracle's read frontier,
// at or above every pin before it and at or below the next), and what
// records T still chooses one: CREATE TABLE, an ALTER of a table with
// history, DROP TABLE, and a view dropped in the same statement as a
// table (DROP TABLE ... CASCADE) records that T.
func TestDDLWithoutT(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE written (a int PRIMARY KEY, b text)", "INSERT INTO written VALUES (1, 'x')")
	// (writeCalls builds no history, inWrite every table's: probe is
	// never written until the loop's end.)
	writeCalls(t, cs, -1, "CREATE TABLE probe (a int PRIMARY KEY, b text)")
	writes := func() int64 { return queryInt(t, conn, "SELECT last_value FROM "+Schema+".writes") }
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	for _, stmt := range []string{
		"CREATE VIEW v AS SELECT a, b FROM probe", "DROP VIEW v",
		"ALTER TABLE probe ADD COLUMN c int", "ALTER TABLE probe DROP COLUMN c",
		"ALTER TABLE probe RENAME TO probe2", "ALTER TABLE probe2 RENAME TO probe",
		"CREATE OR REPLACE VIEW v AS SELECT a FROM probe", "CREATE OR REPLACE VIEW v AS SELECT a, b FROM probe",
	} {
		pin := queryInt(t, conn, "SELECT "+Schema+".pin()")
		w, rev := writes(), revision()
		calls := writeCalls(t, cs, -1, stmt)
		for _, f := range []string{"ddl_ts", "choose_ts", "current_write_ts"} {
			if n := callCount(calls, f); n != 0 {
				t.Errorf("%s: %d calls of %s, want none (%v)", stmt, n, f, calls)
			}
		}
		if got := writes(); got != w {
			t.Errorf("%s: writes counted %d -> %d, want none", stmt, w, got)
		}
		if got := revision(); got != rev+1 {
			t.Errorf("%s: catalog revision %d -> %d, want it moved once", stmt, rev, got)
		}
		// (A replaced view keeps its row and its created_ts.)
		if stmt == "CREATE VIEW v AS SELECT a, b FROM probe" || stmt == "DROP VIEW v" {
			col := "created_ts"
			if strings.HasPrefix(stmt, "DROP") {
				col = "dropped_ts"
			}
			ts := queryInt(t, conn, "SELECT "+col+" FROM "+Schema+".catalog WHERE name = 'v' AND revision = $1", rev+1)
			if clock := queryInt(t, conn, "SELECT "+Schema+".now_ms()"); ts < pin || ts > clock {
				t.Errorf("%s: %s %d, want at or above the pin before it (%d) and at or below the clock after it (%d)", stmt, col, ts, pin, clock)
			}
		}
	}
	for _, stmt := range []string{
		"ALTER TABLE written ADD COLUMN c int", "ALTER TABLE written DROP COLUMN c",
		"CREATE TABLE t2 (a int PRIMARY KEY)", "DROP TABLE t2",
	} {
		if n := callCount(writeCalls(t, cs, -1, stmt), "ddl_ts"); n != 1 {
			t.Errorf("%s: %d calls of ddl_ts, want 1", stmt, n)
		}
	}
	// A view that goes with its table: the table's T, for both rows.
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY)", "CREATE VIEW kv AS SELECT a FROM k")
	inWrite(t, conn, "DROP TABLE k CASCADE")
	if n := queryInt(t, conn, "SELECT count(DISTINCT dropped_ts) FROM "+Schema+".catalog WHERE name IN ('k', 'kv') AND dropped_ts IS NOT NULL"); n != 1 {
		t.Errorf("DROP TABLE k CASCADE: k and kv dropped at %d timestamps, want one", n)
	}
	// A block's slot (deferred) and a T chosen by a write before the
	// view's DDL: the view records that T, as before.
	ts := inWrite(t, conn, "INSERT INTO written VALUES (2, 'y')", "CREATE VIEW w AS SELECT a FROM written")
	if got := queryInt(t, conn, "SELECT created_ts FROM "+Schema+".catalog WHERE name = 'w' AND dropped_ts IS NULL"); uint64(got) != ts {
		t.Errorf("view w made after a write at %d: created_ts %d", ts, got)
	}
	historyMatches(t, conn, "written", inWrite(t, conn, "UPDATE written SET b = 'z'"), "a write after the DDL")
}

// TestHostileDDLWithoutT: a role that bypasses mzproxy gets what it got
// before version 46 from DDL that now chooses no T: without a slot, a
// managed view's DROP and a never-written table's ALTER fail with MZ003
// (an unmanaged view of its own passes); with a forged slot, 42501; with
// the pending request set by hand (as begin_write_occ(NULL, 0), which
// PUBLIC may call, sets it), the DDL is managed, moves the revision and
// chooses no T: no write counted, no timestamp of its choosing.
func TestHostileDDLWithoutT(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	db := conn.Config().Database
	loginRole(t, conn, "mzlazytshostile")
	// (writeCalls builds no history: ht is never written.)
	writeCalls(t, cs, -1, "CREATE TABLE ht (a int PRIMARY KEY, b text)", "ALTER TABLE ht OWNER TO mzlazytshostile",
		"CREATE VIEW hv AS SELECT a FROM ht", "ALTER VIEW hv OWNER TO mzlazytshostile",
		"GRANT CREATE ON SCHEMA public TO mzlazytshostile")
	hostile := connect(t, server.ConnString("mzlazytshostile", db))
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	writes := func() int64 { return queryInt(t, conn, "SELECT last_value FROM "+Schema+".writes") }
	try := func(slot, stmt, code string) {
		t.Helper()
		rev := revision()
		sql := "BEGIN; "
		if slot != "" {
			sql += "SELECT set_config('mzproxy.write_ts', '" + slot + "', true); "
		}
		_, err := hostile.Exec(ctx, sql+stmt+"; COMMIT")
		if code == "" {
			if err != nil {
				t.Errorf("%s (slot %q): %v", stmt, slot, err)
			}
			return
		}
		wantCode(t, err, code, stmt+" (slot "+slot+")")
		hostile.Exec(ctx, "ROLLBACK") //nolint:errcheck // failed
		if got := revision(); got != rev {
			t.Errorf("%s (slot %q) refused but the revision moved %d -> %d", stmt, slot, rev, got)
		}
	}
	try("", "DROP VIEW hv", "MZ003")
	try("", "ALTER TABLE ht ADD COLUMN c int", "MZ003")
	try("", "CREATE VIEW own AS SELECT 1 AS one", "")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'own'"); n != 0 {
		t.Errorf("a view made outside mzproxy is managed")
	}
	try("7 - forged", "DROP VIEW hv", "42501")
	try("7 - forged", "ALTER TABLE ht ADD COLUMN c int", "42501")
	try("0 - pending x", "DROP VIEW hv", "42501")
	w, rev := writes(), revision()
	try("0 - pending", "ALTER TABLE ht ADD COLUMN c int", "")
	try("0 - pending", "DROP VIEW hv", "")
	if got := revision(); got != rev+2 {
		t.Errorf("two DDL statements with the pending request set by hand: revision %d -> %d, want +2", rev, got)
	}
	if got := writes(); got != w {
		t.Errorf("DDL with the pending request set by hand counted writes %d -> %d", w, got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'hv' AND dropped_ts IS NOT NULL"); n != 1 {
		t.Errorf("hv not recorded as dropped")
	}
}

// TestUpgradeToVersion46: from version 45, a view made before the upgrade is dropped without a T
// and with the revision moved once, a never-written table made before it
// is altered without one, a written one with one, and the refusing
// trigger's DROP is still refused.
func TestUpgradeToVersion46(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 45)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a')",
		"CREATE VIEW old_v AS SELECT k, v FROM old")
	writeCalls(t, cs, -1, "CREATE TABLE lazy (k int PRIMARY KEY)")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	before := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision")
	for _, c := range []struct {
		stmt string
		ts   int
	}{{"DROP VIEW old_v", 0}, {"ALTER TABLE lazy ADD COLUMN c text", 0}, {"ALTER TABLE old ADD COLUMN c text", 1}} {
		if n := callCount(writeCalls(t, cs, -1, c.stmt), "ddl_ts"); n != c.ts {
			t.Errorf("%s after the upgrade: %d calls of ddl_ts, want %d", c.stmt, n, c.ts)
		}
	}
	if after := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision"); after != before+3 {
		t.Errorf("three DDL statements: revision %d -> %d, want +3", before, after)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'old_v' AND dropped_ts IS NOT NULL"); n != 1 {
		t.Errorf("old_v not recorded as dropped")
	}
	_, err := conn.Exec(ctx, "BEGIN; "+OpenWriteFor(-1)+"; DROP TRIGGER mzproxy_pending_history ON lazy")
	wantCode(t, err, "MZ003", "DROP TRIGGER mzproxy_pending_history after the upgrade")
	conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // failed
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 'b'", "INSERT INTO old VALUES (2, 'c', 'd')"), "writes after the upgrade")
}
