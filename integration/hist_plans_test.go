package integration

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestWritesHistoryPlansNoJIT: writes through mzproxy on a table whose
// history was analyzed at one row (its plans made then, autovacuum off),
// then grown to 20,000 rows and 20,000 closed versions of one row. With
// auto_explain logging every statement of the database, nested ones too,
// no plan of any session in it (the clients' writes, the triggers', the
// proxy's own) is JIT-compiled: storage version 37 plans the history
// statements with enable_seqscan = off, whose disable_cost puts any plan
// still holding a sequential scan past jit_above_cost, and PostgreSQL
// would JIT-compile it (about 100 ms) at every write, unless those
// functions run with jit = off. And a block's first UPDATE of a row
// reads a few pages of the history, not a scan of it.
func TestWritesHistoryPlansNoJIT(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	admin := connectDirect(t, ctx)
	for _, s := range []string{"session_preload_libraries = 'auto_explain'", "auto_explain.log_min_duration = 0",
		"auto_explain.log_nested_statements = on", "jit = on"} {
		mustExec(t, ctx, admin, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET "+s)
	}
	logFile, err := os.Open(env.pg.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	if _, err := logFile.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}

	p := startProxy(t)
	c := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, c, "CREATE TABLE c (id int PRIMARY KEY, v int)", "INSERT INTO c VALUES (1, 0), (2, 0)")
	var hist string
	if err := direct.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE oid = 'c'::regclass").Scan(&hist); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, direct, "ALTER TABLE "+hist+" SET (autovacuum_enabled = false)", "VACUUM ANALYZE c", "VACUUM ANALYZE "+hist)

	// blocks is the history's buffers read by a block's UPDATE of row 1,
	// through mzproxy (the block's first write of c: the close by key).
	histBuffers := "SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(r)), 0)::int FROM (SELECT '" + hist +
		"'::regclass::oid UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = '" + hist + "'::regclass) x(r)"
	blocks := func() int {
		t.Helper()
		mustExec(t, ctx, c, "BEGIN")
		before := count(t, ctx, c, histBuffers, simple(c))
		mustExec(t, ctx, c, "UPDATE c SET v = v + 1 WHERE id = 1")
		n := count(t, ctx, c, histBuffers, simple(c)) - before
		mustExec(t, ctx, c, "COMMIT")
		return n
	}
	writes := func() int {
		t.Helper()
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
			for _, s := range []string{"UPDATE c SET v = v + 1 WHERE id = 1", "DELETE FROM c WHERE id = 2", "INSERT INTO c VALUES (2, 0)"} {
				if _, err := c.Exec(ctx, s, mode); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
		}
		mustExec(t, ctx, c, "BEGIN", "UPDATE c SET v = v + 1 WHERE id IN (1, 2)", "COMMIT")
		return blocks()
	}
	var small int
	for round := 0; round < 8; round++ {
		small = writes()
	}
	mustExec(t, ctx, c, "INSERT INTO c SELECT g, 0 FROM generate_series(3, 20002) g")
	mustExec(t, ctx, direct, "INSERT INTO "+hist+" SELECT g, g + 1, 0, 1, 0 FROM generate_series(1, 20000) g")
	big := writes()
	t.Logf("a block's UPDATE of row 1 read %d buffers of the history at 2 rows, %d at 40,000 versions", small, big)
	if big > 2*small+12 {
		t.Errorf("a block's UPDATE of row 1 read %d buffers of the history at 40,000 versions, %d at 2 rows: a plan that scans it", big, small)
	}

	logged, err := io.ReadAll(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), "FROM mzproxy.write_key k") {
		t.Fatal("auto_explain logged no trigger's statement: the check for JIT checks nothing")
	}
	if i := strings.Index(string(logged), "JIT:"); i >= 0 {
		start := max(0, i-3000)
		t.Fatalf("a statement in the database was JIT-compiled:\n%s", logged[start:min(len(logged), i+300)])
	}
}
