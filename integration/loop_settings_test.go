package integration

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestLoopSetConfigSearchPath: a set_config of search_path sent as a plain
// read (the event loop forwards it in the extended protocol) is followed
// by a timestamped read of the unqualified table, whose history rewrite
// resolves it in the session's search_path: it reads the schema set_config
// chose, as PostgreSQL does. Not with a statement the client prepared
// before the change (pgx's cache_statement mode): its rewrite keeps the
// schema of its Parse (README, Limitations).
func TestLoopSetConfigSearchPath(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	url := p.URL("postgres", db)
	setup := connectTo(t, ctx, url)
	mustExec(t, ctx, setup, "CREATE SCHEMA a", "CREATE SCHEMA b",
		"CREATE TABLE a.t (v text)", "CREATE TABLE b.t (v text)",
		"INSERT INTO a.t VALUES ('a')", "INSERT INTO b.t VALUES ('b')")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			conn := connectMode(t, ctx, url, mode)
			for _, schema := range []string{"a", "b", "a"} {
				mustExec(t, ctx, conn, "SELECT set_config('search_path', '"+schema+"', false)")
				for range 2 {
					readTS(t, ctx, setup)
					var v string
					var ts int64
					if err := conn.QueryRow(ctx, "SELECT v, mz_now() FROM t").Scan(&v, &ts); err != nil {
						t.Fatal(err)
					}
					if v != schema {
						t.Fatalf("search_path %s: read %q", schema, v)
					}
				}
			}
		})
	}
}
