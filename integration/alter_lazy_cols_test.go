package integration

import (
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestAlterColumnsNeverWrittenAsOf: through mzproxy, column changes of a
// table never written (storage 42: its columns are recorded when its
// history is made, at the first write) and then of the same table written:
// ADD, RENAME, ALTER TYPE, DROP, and an ADD in a block rolled back. Reads
// AS OF each time in between see the rows as they were (none before the
// first write) in the table's current columns. An ordinary role's ALTER
// of a table it does not own is refused with the SQLSTATE PostgreSQL gives
// it directly, and its ALTER of its own table outside mzproxy with MZ003,
// a forged mark set or not.
func TestAlterColumnsNeverWrittenAsOf(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	rowsAt := func(asOf string) string {
		t.Helper()
		var s string
		q := "SELECT coalesce(string_agg(k || '=' || v3 || '/' || d, ',' ORDER BY k), '') FROM nw" + asOf
		if err := conn.QueryRow(ctx, q, simple(conn)).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return s
	}
	mustExec(t, ctx, conn, "CREATE TABLE nw (k int PRIMARY KEY, v text) WITH (RETAIN HISTORY FOR '1h')")
	created := readTS(t, ctx, conn)
	mustExec(t, ctx, conn, "ALTER TABLE nw ADD COLUMN w int", "ALTER TABLE nw RENAME COLUMN v TO vv",
		"ALTER TABLE nw ALTER COLUMN w TYPE bigint")
	// A block rolled back: its column never was.
	mustExec(t, ctx, conn, "BEGIN", "ALTER TABLE nw ADD COLUMN z int", "ROLLBACK")
	_, err := conn.Exec(ctx, "SELECT z FROM nw", simple(conn))
	wantCode(t, err, "42703")
	mustExec(t, ctx, conn, "ALTER TABLE nw DROP COLUMN w", "ALTER TABLE nw ADD COLUMN d numeric(10, 2)")
	beforeWrite := readTS(t, ctx, conn)
	wantLazy(t, ctx, direct, "nw")
	mustExec(t, ctx, conn, "INSERT INTO nw VALUES (1, 'a', 1.5)")
	firstWrite := readTS(t, ctx, conn)
	mustExec(t, ctx, conn, "ALTER TABLE nw ADD COLUMN x int", "UPDATE nw SET x = 5, vv = 'b'")
	withX := readTS(t, ctx, conn)
	mustExec(t, ctx, conn, "ALTER TABLE nw RENAME COLUMN vv TO v3", "ALTER TABLE nw ALTER COLUMN d TYPE numeric(12, 3)",
		"BEGIN", "ALTER TABLE nw ADD COLUMN y int", "UPDATE nw SET y = 1", "ROLLBACK",
		"ALTER TABLE nw DROP COLUMN x", "INSERT INTO nw VALUES (2, 'c', 2.25)")
	for _, c := range []struct {
		asOf uint64
		want string
	}{{created, ""}, {beforeWrite, ""}, {firstWrite, "1=a/1.500"}, {withX, "1=b/1.500"}} {
		if got := rowsAt(" AS OF " + strconv.FormatUint(c.asOf, 10)); got != c.want {
			t.Errorf("nw AS OF %d: %q, want %q", c.asOf, got, c.want)
		}
	}
	if got := rowsAt(""); got != "1=b/1.500,2=c/2.250" {
		t.Errorf("nw now: %q", got)
	}

	role := "cols_" + strings.ToLower(strings.TrimPrefix(db, "ts_"))
	if len(role) > 60 {
		role = role[:60]
	}
	ident := pgx.Identifier{role}.Sanitize()
	execDirect(t, ctx, "CREATE ROLE "+ident+" LOGIN")
	t.Cleanup(func() {
		_, _ = direct.Exec(ctx, "DROP OWNED BY "+ident)
		execDirect(t, ctx, "DROP ROLE IF EXISTS "+ident)
	})
	mustExec(t, ctx, direct, "GRANT CREATE ON SCHEMA public TO "+ident, "GRANT SELECT, INSERT ON nw TO "+ident)
	for _, url := range []string{directURL(role, db), p.URL(role, db)} {
		c := connectTo(t, ctx, url)
		_, err := c.Exec(ctx, "ALTER TABLE nw ADD COLUMN q int", simple(c))
		wantCode(t, err, "42501")
	}
	own := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, own, "CREATE TABLE mine (k int PRIMARY KEY)")
	outside := connectTo(t, ctx, directURL(role, db))
	_, err = outside.Exec(ctx, "ALTER TABLE mine ADD COLUMN q int", simple(outside))
	wantCode(t, err, "MZ003")
	_, err = outside.Exec(ctx, "SELECT set_config('mzproxy.in_ddl', 'forged', false); ALTER TABLE mine ADD COLUMN q int", simple(outside))
	wantCode(t, err, "MZ003")
	mustExec(t, ctx, own, "ALTER TABLE mine ADD COLUMN q int", "INSERT INTO mine VALUES (1, 2)",
		// (Through mzproxy: DROP OWNED at cleanup, directly, would be refused.)
		"DROP TABLE mine")
}
