package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestOCCStatementForms: every form of write issue #5 names (UPDATE with
// FROM and subqueries, DELETE USING, INSERT ... SELECT, ON CONFLICT DO
// NOTHING / DO UPDATE, MERGE, RETURNING), autocommit through the
// optimistic loop, answers exactly as PostgreSQL does directly on plain
// tables: the same command tags, the same returned rows, the same final
// contents.
func TestOCCStatementForms(t *testing.T) {
	ctx := testContext(t)
	script := []string{
		"CREATE TABLE a (id int PRIMARY KEY, v int NOT NULL)",
		"CREATE TABLE b (id int, w int)",
		"INSERT INTO a SELECT g, g FROM generate_series(1, 10) g",
		"INSERT INTO b VALUES (1, 100), (2, 200), (12, 1200)",
		"UPDATE a SET v = a.v + b.w FROM b WHERE a.id = b.id",
		"UPDATE a SET v = (SELECT max(w) FROM b) WHERE id = 3 RETURNING v",
		"UPDATE a SET v = v * 2 WHERE id IN (SELECT id + 3 FROM b)",
		"DELETE FROM a USING b WHERE a.id = b.id AND b.w = 100 RETURNING a.id, a.v",
		"INSERT INTO a VALUES (1, 1) ON CONFLICT (id) DO NOTHING",
		"INSERT INTO a VALUES (1, 1) ON CONFLICT (id) DO NOTHING",
		"INSERT INTO a VALUES (2, 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v + a.v RETURNING v",
		"MERGE INTO a USING b ON a.id = b.id WHEN MATCHED THEN UPDATE SET v = a.v + 1 WHEN NOT MATCHED THEN INSERT VALUES (b.id, b.w)",
		"INSERT INTO a SELECT id + 100, w FROM b RETURNING id",
		"DELETE FROM b WHERE w > 150",
		"DELETE FROM a WHERE id > 8 AND id < 101",
		"INSERT INTO b VALUES (7, 70)",
		"TABLE a ORDER BY id",
		"TABLE b ORDER BY id, w",
	}
	run := func(url string) []string {
		conn := connectTo(t, ctx, url)
		var out []string
		for _, sql := range script {
			out = append(out, sql+" => "+answer(ctx, conn, sql))
		}
		return out
	}
	want := run(directURL("postgres", freshDatabase(t, ctx)))
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	got := run(p.URL("postgres", freshDatabase(t, ctx)))
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mzproxy:\n got %s\nwant %s", got[i], want[i])
		}
	}
	// The writes went the way under test: 14 optimistic loops.
	_, m := get(t, p.metricsAddr(t), "/metrics")
	if n := metricValue(t, m, "mzproxy_occ_writes_total"); n != 14 {
		t.Errorf("mzproxy_occ_writes_total = %v, want 14", n)
	}
}

// answer is what one simple Query returned: each result's rows and
// command tag, or the error.
func answer(ctx context.Context, conn *pgx.Conn, sql string) string {
	results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for _, r := range results {
		for _, row := range r.Rows {
			fmt.Fprintf(&b, "%q ", row)
		}
		b.WriteString(r.CommandTag.String())
	}
	return b.String()
}
