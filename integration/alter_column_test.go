package integration

import (
	"strconv"
	"strings"
	"testing"
)

// TestAlterColumnSkipsSyncs: through mzproxy, an ADD COLUMN of a column
// outside any index runs none of the history syncs (storage version 24:
// the table's shape is unchanged), and history stays exact across the
// ADD and a DROP COLUMN: reads AS OF a time before each see the rows as
// they were, without the dropped column.
func TestAlterColumnSkipsSyncs(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, simple(conn)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rowsAt := func(asOf string) string {
		t.Helper()
		var s string
		q := "SELECT coalesce(string_agg(k || '=' || v, ',' ORDER BY k), '') FROM ac" + asOf
		if err := conn.QueryRow(ctx, q, simple(conn)).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return s
	}
	exec("CREATE TABLE ac (k int PRIMARY KEY, v text) WITH (RETAIN HISTORY FOR '1h')")
	exec("INSERT INTO ac VALUES (1, 'a')")
	beforeAdd := readTS(t, ctx, conn)

	// In a block, so that its own transaction's function calls can be read.
	exec("BEGIN")
	exec("SET LOCAL track_functions = 'all'")
	exec("ALTER TABLE ac ADD COLUMN w int")
	rows, err := conn.Query(ctx, `SELECT funcname || '×' || calls FROM pg_stat_xact_user_functions
		WHERE schemaname = 'mzproxy' AND funcname IN ('sync_indexes', 'sync_triggers', 'sync_grants', 'gen_triggers')`, simple(conn))
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	exec("COMMIT")
	if len(calls) > 0 {
		t.Errorf("ALTER TABLE ADD COLUMN through mzproxy called %s, want none", strings.Join(calls, ", "))
	}

	exec("UPDATE ac SET w = 7, v = 'b'")
	beforeDrop := readTS(t, ctx, conn)
	exec("ALTER TABLE ac DROP COLUMN w")
	exec("INSERT INTO ac VALUES (2, 'c')")
	for asOf, want := range map[string]string{
		" AS OF " + strconv.FormatUint(beforeAdd, 10):  "1=a",
		" AS OF " + strconv.FormatUint(beforeDrop, 10): "1=b",
		"": "1=b,2=c",
	} {
		if got := rowsAt(asOf); got != want {
			t.Errorf("ac%s: %q, want %q", asOf, got, want)
		}
	}
}
