package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestOutside19SelectWritingFunction: a statement that does not write
// (SELECT f()) calling a function that writes a never-written managed
// table meets the refusing trigger (40001, "might succeed if retried").
// The retry must not get the same 40001 forever: the session's next
// statement, whatever its kind, builds that table first, so the retry gets
// the answer it gets once the table is built (MZ002, a write outside
// mzproxy's write path), in autocommit and in a block, in every pgx mode.
// An INSERT that calls f() is a write of mzproxy's and lands. On 9b0837e
// the retry got 40001 again.
func TestOutside19SelectWritingFunction(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	direct := connectTo(t, ctx, directURL("postgres", db))
	for _, mode := range pgxModes {
		c := connectMode(t, ctx, p.URL("postgres", db), mode)
		tb := tableName(t)
		fn := tb + "_f"
		mustExec(t, ctx, c, "CREATE TABLE "+tb+" (k int)",
			"CREATE FUNCTION "+fn+"() RETURNS int LANGUAGE sql AS $$ INSERT INTO "+tb+" VALUES (1) RETURNING k $$")
		wantLazy(t, ctx, direct, tb)

		// Autocommit: one 40001, then what a built table answers.
		var k int
		err := c.QueryRow(ctx, "SELECT "+fn+"()").Scan(&k)
		wantCode(t, err, "40001")
		for try := 0; try < 2; try++ {
			err = c.QueryRow(ctx, "SELECT "+fn+"()").Scan(&k)
			wantCode(t, err, "MZ002")
		}
		wantHistory(t, ctx, direct, tb, 0)

		// The session goes on, and a write of mzproxy's through f lands.
		if _, err := c.Exec(ctx, "INSERT INTO "+tb+" SELECT "+fn+"() + 1"); err != nil {
			t.Fatalf("%v: INSERT through the function: %v", mode, err)
		}
		if n := count(t, ctx, c, "SELECT count(*) FROM "+tb, pgx.QueryExecModeSimpleProtocol); n != 2 {
			t.Errorf("%v: %d rows, want 2", mode, n)
		}

		// A block whose first statement is such a read, on a second
		// never-written table: 40001 aborts it; the client's retry of the
		// block gets MZ002, as for a built table.
		tb2 := tb + "_b"
		fn2 := tb2 + "_f"
		mustExec(t, ctx, c, "CREATE TABLE "+tb2+" (k int)",
			"CREATE FUNCTION "+fn2+"() RETURNS int LANGUAGE sql AS $$ INSERT INTO "+tb2+" VALUES (1) RETURNING k $$")
		for try, want := range []string{"40001", "MZ002"} {
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatalf("%v: begin %d: %v", mode, try, err)
			}
			err = tx.QueryRow(ctx, "SELECT "+fn2+"()").Scan(&k)
			wantCode(t, err, want)
			if err := tx.Rollback(ctx); err != nil {
				t.Fatalf("%v: rollback %d: %v", mode, try, err)
			}
		}
		if n := count(t, ctx, c, "SELECT count(*) FROM "+tb2, pgx.QueryExecModeSimpleProtocol); n != 0 {
			t.Errorf("%v: %d rows in %s, want 0", mode, n, tb2)
		}
	}
}
