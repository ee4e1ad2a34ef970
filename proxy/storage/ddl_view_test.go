package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestDropMovesRevisionOnce: a DROP of a managed view or table through
// mzproxy takes its timestamp and moves the catalog revision once, in
// on_sql_drop (version 40; before, on_ddl_command_end checked the slot
// and moved the revision a second time). Every other DROP still moves it
// once, also after a managed DROP in the same transaction, inside a
// savepoint, and with the hand-over setting forged.
func TestDropMovesRevisionOnce(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x')",
		"CREATE TABLE u (a int PRIMARY KEY, b text)", "CREATE VIEW v AS SELECT a, b FROM k",
		"CREATE VIEW v2 AS SELECT a FROM k", "CREATE VIEW v3 AS SELECT b FROM k",
		"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
		"CREATE FUNCTION g() RETURNS int LANGUAGE sql AS 'SELECT 2'",
		"CREATE FUNCTION h() RETURNS int LANGUAGE sql AS 'SELECT 3'")
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	for _, st := range []struct{ sql, rel string }{
		{"DROP VIEW v", "v"}, {"DROP TABLE u", "u"}, {"DROP TABLE k CASCADE", "k"}, {"DROP FUNCTION f()", ""},
	} {
		oid := int64(0)
		if st.rel != "" {
			oid = queryInt(t, conn, "SELECT $1::regclass::oid::bigint", st.rel)
		}
		before := revision()
		calls := writeCalls(t, cs, -1, st.sql)
		// (Version 46: a table's DROP chooses T; a view's and a
		// function's, under the pending slot, choose none.)
		want := 0
		if strings.HasPrefix(st.sql, "DROP TABLE") {
			want = 1
		}
		if n := callCount(calls, "ddl_ts"); n != want {
			t.Errorf("%s: %d calls of ddl_ts, want %d (%v)", st.sql, n, want, calls)
		}
		after := revision()
		if after != before+1 {
			t.Errorf("%s: catalog revision %d -> %d, want it moved once", st.sql, before, after)
		}
		if oid != 0 {
			if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE oid = $1 AND dropped_ts IS NOT NULL AND revision = $2", oid, after); n != 1 {
				t.Errorf("%s: %d dropped catalog rows at revision %d, want 1", st.sql, n, after)
			}
		}
	}
	// Views v2 and v3 went with k (CASCADE), dropped at the same T.
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name IN ('v2', 'v3') AND dropped_ts IS NULL"); n != 0 {
		t.Errorf("%d of v2, v3 still live after DROP TABLE k CASCADE", n)
	}

	// rev runs stmts in one write transaction and returns how far the
	// revision moved.
	rev := func(stmts ...string) int64 {
		t.Helper()
		before := revision()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		for _, s := range append([]string{OpenWriteFor(-1)}, stmts...) {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return revision() - before
	}
	inWrite(t, conn, "CREATE TABLE w (a int PRIMARY KEY)", "CREATE VIEW w1 AS SELECT a FROM w",
		"CREATE VIEW w2 AS SELECT a FROM w", "CREATE VIEW w3 AS SELECT a FROM w")
	// A managed DROP, then a DROP that on_sql_drop leaves alone: the hand-over
	// is this statement's only.
	if n := rev("DROP VIEW w1", "DROP FUNCTION g()"); n != 2 {
		t.Errorf("DROP VIEW w1; DROP FUNCTION g(): revision moved %d, want 2", n)
	}
	// Inside a savepoint the revision row's xmin is the subtransaction's:
	// the DROP moves it twice, as before version 40.
	if n := rev("SAVEPOINT s", "DROP VIEW w2", "RELEASE SAVEPOINT s"); n < 1 {
		t.Errorf("DROP VIEW w2 in a savepoint: revision moved %d, want at least 1", n)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'w2' AND dropped_ts IS NOT NULL"); n != 1 {
		t.Errorf("w2 not dropped in the catalog after its DROP in a savepoint")
	}
	// A client that sets the hand-over itself, in a transaction that has
	// not moved the revision, is not let off.
	if n := rev("SELECT set_config('mzproxy.drop_rev', revision::text, true) FROM "+Schema+".catalog_revision", "DROP FUNCTION h()"); n != 1 {
		t.Errorf("DROP FUNCTION h() with mzproxy.drop_rev forged: revision moved %d, want 1", n)
	}
	if n := rev("SELECT set_config('mzproxy.drop_rev', revision::text, true) FROM "+Schema+".catalog_revision", "DROP VIEW w3"); n != 1 {
		t.Errorf("DROP VIEW w3 with mzproxy.drop_rev forged: revision moved %d, want 1", n)
	}
}

// TestCreateViewOneStatement: CREATE [OR REPLACE] VIEW records or updates
// the view's catalog row in one statement (version 40: no call of
// view_definition, no relation or catalog lookups of its own), with what
// the longer path recorded: a managed view's row and text, a replaced
// view's new text and revision in the same row, no row for a temporary
// view.
func TestCreateViewOneStatement(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x')", "CREATE SCHEMA s")
	row := func(name string) (id int64, text string, revision int64) {
		t.Helper()
		if err := conn.QueryRow(context.Background(), "SELECT id, view_sql, revision FROM "+Schema+".catalog WHERE oid = $1::regclass AND kind = 'view' AND dropped_ts IS NULL",
			name).Scan(&id, &text, &revision); err != nil {
			t.Fatalf("%s's catalog row: %v", name, err)
		}
		return id, text, revision
	}
	want := func(name string) string {
		return queryText(t, conn, "SELECT "+Schema+".view_definition($1::regclass)", name)
	}
	for _, stmt := range []string{"CREATE VIEW v AS SELECT a, b FROM k", "CREATE VIEW s.v AS SELECT a FROM k WHERE a > 0"} {
		if n := callCount(writeCalls(t, cs, -1, stmt), "view_definition"); n != 0 {
			t.Errorf("%s: %d calls of view_definition, want 0", stmt, n)
		}
	}
	id, text, _ := row("v")
	if text != want("v") {
		t.Errorf("v recorded as %q, want %q", text, want("v"))
	}
	if _, text, _ := row("s.v"); text != want("s.v") {
		t.Errorf("s.v recorded as %q, want %q", text, want("s.v"))
	}
	if got := queryText(t, conn, "SELECT schema_name FROM "+Schema+".catalog WHERE oid = 's.v'::regclass"); got != "s" {
		t.Errorf("s.v recorded in schema %q", got)
	}
	inWrite(t, conn, "CREATE OR REPLACE VIEW v AS SELECT a, b, a + 1 AS c FROM k")
	id2, text2, rev2 := row("v")
	if id2 != id || text2 != want("v") || !strings.Contains(text2, "c") {
		t.Errorf("replaced v: row %d %q, want row %d with %q", id2, text2, id, want("v"))
	}
	if cur := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision"); rev2 != cur {
		t.Errorf("replaced v at revision %d, catalog at %d", rev2, cur)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'v' AND schema_name = 'public'"); n != 1 {
		t.Errorf("%d catalog rows of public.v after CREATE OR REPLACE, want 1", n)
	}
	inWrite(t, conn, "CREATE TEMP VIEW tv AS SELECT a FROM k")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'tv'"); n != 0 {
		t.Errorf("temporary view tv managed (%d rows)", n)
	}
	inWrite(t, conn, "ALTER VIEW v RENAME TO w")
	if _, text, _ := row("w"); text != want("w") {
		t.Errorf("w recorded as %q after the rename, want %q", text, want("w"))
	}
}

// TestDDLScansNoMzproxyCatalogFewTables: with few tables, the event
// triggers of bench/ddl.sh's view, column and DROP TABLE statements read
// mzproxy.catalog and mzproxy.columns through their indexes (version 40:
// on_ddl_command_end and on_sql_drop plan with enable_seqscan = off).
// Before, their generic plans scanned both whole, every row read and
// tested, while they are small: the dearer way for the backend.
func TestDDLScansNoMzproxyCatalogFewTables(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE probe (a int PRIMARY KEY, b text)", "CREATE TABLE written (a int PRIMARY KEY, b text)",
		"INSERT INTO written VALUES (1, 'x')")
	if _, err := conn.Exec(ctx, "ANALYZE "+Schema+".catalog, "+Schema+".columns"); err != nil {
		t.Fatal(err)
	}
	scans := func(stmts ...string) string {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		// (The session's counts not yet flushed are in the view too:
		// the difference is the statements'.)
		const count = `SELECT coalesce(sum(seq_scan) FILTER (WHERE relname = 'catalog'), 0) * 1000000 +
			coalesce(sum(seq_scan) FILTER (WHERE relname = 'columns'), 0)
			FROM pg_stat_xact_user_tables WHERE schemaname = '` + Schema + `'`
		before := queryInt(t, tx, count)
		for _, s := range append([]string{OpenWriteFor(-1)}, stmts...) {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		n := queryInt(t, tx, count) - before
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("catalog×%d columns×%d", n/1000000, n%1000000)
	}
	for _, stmt := range []string{
		"ALTER TABLE probe ADD COLUMN c int", "ALTER TABLE probe DROP COLUMN c",
		"ALTER TABLE written ADD COLUMN c int", "ALTER TABLE written DROP COLUMN c",
		"CREATE VIEW v AS SELECT a, b FROM probe", "DROP VIEW v",
		"CREATE TABLE t2 (a int PRIMARY KEY, b text)", "DROP TABLE t2",
	} {
		if got := scans(stmt); got != "" {
			t.Errorf("%s: sequential scans %s", stmt, got)
		}
	}
	historyMatches(t, conn, "written", inWrite(t, conn, "ALTER TABLE written ADD COLUMN d int", "INSERT INTO written VALUES (2, 'y', 3)",
		"UPDATE written SET b = 'z' WHERE a = 1"), "writes after the column changes")
}

// TestUpgradeToVersion40: after the upgrade from 39 the edited event
// triggers run with enable_seqscan = off, a DROP VIEW of a view made
// before it moves the revision once, CREATE OR REPLACE VIEW updates its
// row, and a table without history follows its columns (and refuses a
// reserved name).
func TestUpgradeToVersion40(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 39)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a')",
		"CREATE TABLE lazy (k int PRIMARY KEY)", "CREATE VIEW old_v AS SELECT k, v FROM old", "CREATE VIEW old_w AS SELECT k FROM old")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM pg_proc WHERE pronamespace = '`+Schema+`'::regnamespace
		AND proname IN ('on_ddl_command_end', 'on_sql_drop') AND proconfig @> ARRAY['enable_seqscan=off', 'jit=off']`); n != 2 {
		t.Errorf("%d of on_ddl_command_end and on_sql_drop run with enable_seqscan = off and jit = off, want 2", n)
	}
	before := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision")
	// (Version 46: a view's DROP chooses no T.)
	if n := callCount(writeCalls(t, cs, -1, "DROP VIEW old_w"), "ddl_ts"); n != 0 {
		t.Errorf("DROP VIEW old_w after the upgrade: %d calls of ddl_ts, want none", n)
	}
	if after := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision"); after != before+1 {
		t.Errorf("DROP VIEW old_w: revision %d -> %d, want it moved once", before, after)
	}
	id := queryInt(t, conn, "SELECT id FROM "+Schema+".catalog WHERE oid = 'old_v'::regclass AND dropped_ts IS NULL")
	inWrite(t, conn, "CREATE OR REPLACE VIEW old_v AS SELECT k, v, k * 2 AS d FROM old")
	if got := queryText(t, conn, "SELECT view_sql FROM "+Schema+".catalog WHERE id = $1", id); !strings.Contains(got, "d") {
		t.Errorf("old_v's recorded text after CREATE OR REPLACE: %q", got)
	}
	inWrite(t, conn, "ALTER TABLE lazy ADD COLUMN c text")
	if got := queryText(t, conn, "SELECT string_agg(name || ' ' || type, ',' ORDER BY attnum) FROM "+Schema+".columns WHERE id = (SELECT id FROM "+Schema+".catalog WHERE oid = 'lazy'::regclass)"); got != "k integer,c text" {
		t.Errorf("lazy's recorded columns: %q, want k integer,c text", got)
	}
	_, err := conn.Exec(ctx, "BEGIN; "+OpenWriteFor(-1)+"; ALTER TABLE lazy ADD COLUMN mz_from int")
	wantCode(t, err, "42939", "ALTER TABLE lazy ADD COLUMN mz_from")
	conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // failed
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 'b'", "INSERT INTO old VALUES (2, 'c')"), "writes after the upgrade")
}
