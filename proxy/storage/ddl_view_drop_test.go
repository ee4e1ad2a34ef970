package storage

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// dropRevisionMovesOnce checks, on a database at any version since 46,
// that every DROP through mzproxy moves the catalog revision once: a
// managed view's, also inside a savepoint; a function's, which drops
// nothing managed, under the pending slot and in a block; an index's in a
// block; DROP OWNED, whose revocations on_ddl_command_end syncs; and a
// DROP outside mzproxy moves none, and of a managed view is refused.
// savepointMoves is how far a DROP VIEW in a savepoint moves it: twice
// before version 59 (on_sql_drop's hand-over was by the revision row's
// xmin, the subtransaction's), once since.
func dropRevisionMovesOnce(t *testing.T, cs string, conn *pgx.Conn, savepointMoves int64) {
	t.Helper()
	ctx := context.Background()
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	inWrite(t, conn, "CREATE TABLE dk (a int PRIMARY KEY, b text)", "CREATE INDEX dk_b ON dk (b)",
		"CREATE VIEW dv1 AS SELECT a FROM dk", "CREATE VIEW dv2 AS SELECT a FROM dk", "CREATE VIEW dv3 AS SELECT a FROM dk",
		"CREATE FUNCTION df1() RETURNS int LANGUAGE sql AS 'SELECT 1'",
		"CREATE FUNCTION df2() RETURNS int LANGUAGE sql AS 'SELECT 2'",
		"CREATE ROLE drop_owner", "CREATE FUNCTION df3() RETURNS int LANGUAGE sql AS 'SELECT 3'",
		"ALTER FUNCTION df3() OWNER TO drop_owner", "GRANT SELECT ON dk TO drop_owner")
	t.Cleanup(func() {
		c := connect(t, cs)
		c.Exec(context.Background(), "DROP OWNED BY drop_owner; DROP ROLE drop_owner") //nolint:errcheck // best effort
	})
	for _, c := range []struct {
		name  string
		stmts []string
		pend  bool // the pending slot (autocommit), else a block's
		want  int64
	}{
		{"DROP VIEW, pending slot", []string{"DROP VIEW dv1"}, true, 1},
		{"DROP VIEW in a savepoint", []string{"SAVEPOINT s", "DROP VIEW dv2", "RELEASE SAVEPOINT s"}, false, savepointMoves},
		{"DROP FUNCTION, pending slot", []string{"DROP FUNCTION df1()"}, true, 1},
		{"DROP FUNCTION in a block", []string{"DROP FUNCTION df2()"}, false, 1},
		{"DROP INDEX in a block", []string{"DROP INDEX dk_b"}, false, 1},
		{"DROP VIEW, then DROP OWNED", []string{"DROP VIEW dv3", "DROP OWNED BY drop_owner"}, false, 2},
	} {
		before := revision()
		if c.pend {
			writeCalls(t, cs, -1, c.stmts...)
		} else {
			inWrite(t, conn, c.stmts...)
		}
		if got := revision() - before; got != c.want {
			t.Errorf("%s: revision moved %d, want %d", c.name, got, c.want)
		}
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name IN ('dv1', 'dv2', 'dv3') AND dropped_ts IS NULL"); n != 0 {
		t.Errorf("%d of dv1, dv2, dv3 still live in the catalog after their DROP", n)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_proc WHERE proname = 'df3'"); n != 0 {
		t.Errorf("DROP OWNED left df3")
	}

	// Outside mzproxy: no revision move for an unmanaged object's DROP,
	// and a managed view's is refused.
	inWrite(t, conn, "CREATE VIEW dv4 AS SELECT a FROM dk", "CREATE FUNCTION df4() RETURNS int LANGUAGE sql AS 'SELECT 4'")
	before := revision()
	if _, err := conn.Exec(ctx, "DROP FUNCTION df4()"); err != nil {
		t.Fatal(err)
	}
	if got := revision() - before; got != 0 {
		t.Errorf("DROP FUNCTION outside mzproxy: revision moved %d, want 0", got)
	}
	_, err := conn.Exec(ctx, "DROP VIEW dv4")
	wantCode(t, err, "MZ003", "DROP VIEW of a managed view outside mzproxy")
}

// createViewFromCommand checks the catalog row of a view made through
// mzproxy: its schema and name as PostgreSQL has them, also where they
// need quoting and under quote_all_identifiers; CREATE OR REPLACE keeps
// the row and records the new text; a temporary view has no row.
func createViewFromCommand(t *testing.T, cs string, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA "Q.x"`); err != nil {
		t.Fatal(err)
	}
	writeCalls(t, cs, -1, "CREATE TABLE ck (a int PRIMARY KEY, b text)")
	writeCalls(t, cs, -1, `CREATE VIEW "Q.x"."V""y z" AS SELECT a FROM ck`)
	writeCalls(t, cs, -1, `SET LOCAL quote_all_identifiers = on; CREATE VIEW plain_v AS SELECT a FROM ck`)
	writeCalls(t, cs, -1, `CREATE TEMPORARY VIEW temp_v AS SELECT a FROM ck`)
	row := func(rel string) string {
		t.Helper()
		return queryText(t, conn, "SELECT concat_ws('|', id, schema_name, name, view_sql) FROM "+Schema+
			".catalog WHERE oid = $1::regclass AND kind = 'view' AND dropped_ts IS NULL", rel)
	}
	odd := row(`"Q.x"."V""y z"`)
	if !strings.Contains(odd, `|Q.x|V"y z|`) {
		t.Errorf(`"Q.x"."V""y z"'s row %q, want schema Q.x and name V"y z`, odd)
	}
	if got := row("plain_v"); !strings.Contains(got, "|public|plain_v|") {
		t.Errorf("plain_v (made under quote_all_identifiers) row %q, want schema public and name plain_v", got)
	}
	writeCalls(t, cs, -1, `CREATE OR REPLACE VIEW "Q.x"."V""y z" AS SELECT a, b FROM ck`)
	replaced := row(`"Q.x"."V""y z"`)
	if id, _, _ := strings.Cut(replaced, "|"); !strings.HasPrefix(odd, id+"|") || !strings.Contains(replaced, "b") {
		t.Errorf("CREATE OR REPLACE: row %q -> %q, want the same id and the new text", odd, replaced)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'temp_v'"); n != 0 {
		t.Errorf("a temporary view has %d catalog rows, want 0", n)
	}
}

// TestDropRevisionMovesOnce: since version 59 on_sql_drop alone moves a
// DROP's revision; a DROP VIEW in a savepoint moves it once (twice
// before).
func TestDropRevisionMovesOnce(t *testing.T) {
	cs, conn := installedDB(t)
	dropRevisionMovesOnce(t, cs, conn, 1)
}

// TestCreateViewFromCommand: version 59's row from the command keeps the
// names, the replacement and the temporary view's absence.
func TestCreateViewFromCommand(t *testing.T) {
	cs, conn := installedDB(t)
	createViewFromCommand(t, cs, conn)
}

// TestUpgradeToVersion59: a database at version 58 gets version 59's
// event trigger functions (before, on_ddl_command_end reads the
// mzproxy.drop_rev hand-over), with the bounds above kept.
func TestUpgradeToVersion59(t *testing.T) {
	cs := newDB(t)
	conn := connect(t, cs)
	installVersion(t, conn, 58)
	const readsDropRev = "SELECT (pg_get_functiondef('" + Schema + ".on_ddl_command_end()'::regprocedure) LIKE '%drop_rev%')::text"
	if got := queryText(t, conn, readsDropRev); got != "true" {
		t.Fatalf("version 58: on_ddl_command_end reads drop_rev: %s, want true", got)
	}
	if err := Install(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got := queryText(t, conn, readsDropRev); got != "false" {
		t.Errorf("after the upgrade: on_ddl_command_end reads drop_rev: %s, want false", got)
	}
	dropRevisionMovesOnce(t, cs, conn, 1)
	createViewFromCommand(t, cs, conn)
}
