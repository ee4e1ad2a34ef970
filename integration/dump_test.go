package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// dumpSource is the database TestDumpRestore dumps: managed tables with and
// without a primary key, with RETAIN HISTORY (at CREATE and by ALTER) and
// another relation option, in two schemas, an index, a view, rows with
// history behind them.
const dumpSource = `
CREATE TABLE keyed (id int PRIMARY KEY, v text);
CREATE TABLE bag (x int, y text) WITH (RETAIN HISTORY FOR '1h');
CREATE TABLE opts (id int PRIMARY KEY, n numeric) WITH (fillfactor = 70);
CREATE TABLE unwritten (id int PRIMARY KEY);
ALTER TABLE opts SET (RETAIN HISTORY FOR '10min');
CREATE SCHEMA app;
CREATE TABLE app.events (id bigint PRIMARY KEY, body jsonb);
INSERT INTO keyed VALUES (1, 'one'), (2, 'two'), (3, 'three');
UPDATE keyed SET v = 'TWO' WHERE id = 2;
DELETE FROM keyed WHERE id = 3;
INSERT INTO bag VALUES (1, 'x'), (1, 'x'), (2, NULL), (3, 'tab	and
newline');
INSERT INTO opts VALUES (1, 1.5), (2, -0.25);
INSERT INTO app.events VALUES (1, '{"a": [1, 2]}');
CREATE INDEX bag_y ON bag (y);
CREATE VIEW recent AS SELECT id, v FROM keyed WHERE id > 1;
`

// dumpTables are dumpSource's tables with the RETAIN HISTORY each has (ms,
// 0: none).
// public.unwritten is never written: its history is not built, and its
// refusing trigger (storage version 38) is hidden as the history
// triggers are.
var dumpTables = map[string]int64{"public.keyed": 0, "public.bag": 3600000, "public.opts": 600000, "app.events": 0, "public.unwritten": 0}

// TestDumpRestore dumps a database through the proxy with pg_dump (plain
// and custom format) and restores it through the proxy into an empty
// database with psql and with pg_restore: the dump has the user's objects
// and none of mzproxy's, and every restored table is managed again with
// its rows and its RETAIN HISTORY.
func TestDumpRestore(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"pg_dump", "pg_restore", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install -y postgresql-client)", tool)
		}
	}
	ctx := testContext(t)
	// History older than the default retention (1s) stays readable, so
	// AS OF after the restore does not race compaction.
	p := startProxy(t, "--retain-history", "1h")
	src := freshDatabase(t, ctx)
	p.psqlTarget().mustRun(t, dumpSource, nil, "-v", "ON_ERROR_STOP=1", "-q", "-d", src)

	dir := t.TempDir()
	plain, custom := filepath.Join(dir, "dump.sql"), filepath.Join(dir, "dump.custom")
	runDumpTool(t, p, "pg_dump", "-f", plain, src)
	runDumpTool(t, p, "pg_dump", "-Fc", "-f", custom, src)
	text, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"mzproxy", "mz_internal", "EVENT TRIGGER"} {
		if lines := linesWith(string(text), s); len(lines) > 0 {
			t.Errorf("the dump mentions %q in %d lines, e.g.:\n%s", s, len(lines), strings.Join(lines[:min(len(lines), 5)], "\n"))
		}
	}
	for _, s := range []string{"CREATE TABLE public.keyed", "CREATE TABLE app.events", "CREATE VIEW public.recent",
		"CREATE INDEX bag_y", "WITH (retain_history='3600000ms')", "WITH (fillfactor='70', retain_history='600000ms')"} {
		if !bytes.Contains(text, []byte(s)) {
			t.Errorf("the dump lacks %q", s)
		}
	}
	if t.Failed() {
		return
	}

	t.Run("psql", func(t *testing.T) {
		dst := freshDatabase(t, ctx)
		p.psqlTarget().mustRun(t, "", nil, "-v", "ON_ERROR_STOP=1", "-q", "-d", dst, "-f", plain)
		checkRestored(t, ctx, p, src, dst)
	})
	t.Run("pg_restore", func(t *testing.T) {
		dst := freshDatabase(t, ctx)
		runDumpTool(t, p, "pg_restore", "--exit-on-error", "-d", dst, custom)
		checkRestored(t, ctx, p, src, dst)
	})
}

// runDumpTool runs pg_dump or pg_restore against the proxy as postgres,
// with the application_name they choose themselves.
func runDumpTool(t *testing.T, p *proxyProc, tool string, args ...string) {
	t.Helper()
	host, port := p.hostPort()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, append([]string{"--no-password"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PGAPPNAME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PGHOST="+host, "PGPORT="+port, "PGUSER=postgres", "PGSSLMODE=disable", "PGOPTIONS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %q (at most 90s): %v\n%s", tool, args, err, out)
	}
}

// checkRestored compares database dst, restored from a dump of src, with
// src through the proxy: the same rows in every table, each table managed
// with its RETAIN HISTORY, the view, index and other options there, and
// writes recording history that AS OF reads.
func checkRestored(t *testing.T, ctx context.Context, p *proxyProc, src, dst string) {
	from := connectTo(t, ctx, p.URL("postgres", src))
	to := connectTo(t, ctx, p.URL("postgres", dst))
	for table := range dumpTables {
		q := "SELECT t::text FROM " + table + " t ORDER BY 1"
		if want, got := textRows(t, ctx, from, q), textRows(t, ctx, to, q); !slices.Equal(got, want) {
			t.Errorf("%s restored: %q, want %q", table, got, want)
		}
	}
	var managed []string
	for table, ms := range dumpTables {
		retain := "NULL"
		if ms != 0 {
			retain = fmt.Sprint(ms)
		}
		managed = append(managed, table+" "+retain)
	}
	managed = append(managed, "public.recent view")
	slices.Sort(managed)
	got := textRows(t, ctx, to, `SELECT c.schema_name || '.' || c.name || ' ' ||
		CASE c.kind WHEN 'table' THEN coalesce(k.retain_ms::text, 'NULL') ELSE c.kind END
		FROM mzproxy.catalog c LEFT JOIN mzproxy.collections k ON k.id = c.id WHERE c.dropped_ts IS NULL ORDER BY 1`)
	if !slices.Equal(got, managed) {
		t.Errorf("managed after the restore (name and retain_ms): %q, want %q", got, managed)
	}
	if got := textRows(t, ctx, to, `SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'public.opts'::regclass
		UNION ALL SELECT indexdef FROM pg_indexes WHERE indexname = 'bag_y'
		UNION ALL SELECT string_agg(id::text, ',' ORDER BY id) FROM recent`); !slices.Equal(got,
		[]string{"fillfactor=70", "CREATE INDEX bag_y ON public.bag USING btree (y)", "2"}) {
		t.Errorf("fillfactor, index and view after the restore: %q", got)
	}
	checkManagedWrites(t, ctx, to)
}

// checkManagedWrites writes to restored tables through the proxy and reads
// the state before the writes with AS OF.
func checkManagedWrites(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	var before int64
	if err := conn.QueryRow(ctx, "SELECT mz_now()", pgx.QueryExecModeSimpleProtocol).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"UPDATE keyed SET v = 'changed' WHERE id = 1", "DELETE FROM bag WHERE x = 1", "INSERT INTO app.events VALUES (2, 'null')",
		"INSERT INTO unwritten VALUES (1)"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	asOf := fmt.Sprintf(" AS OF %d", before)
	for q, want := range map[string][]string{
		"SELECT v FROM keyed ORDER BY id":                              {"changed", "TWO"},
		"SELECT v FROM keyed ORDER BY id" + asOf:                       {"one", "TWO"},
		"SELECT count(*)::text FROM bag":                               {"2"},
		"SELECT count(*)::text FROM bag" + asOf:                        {"4"},
		"SELECT count(*)::text FROM app.events" + asOf:                 {"1"},
		"SELECT string_agg(id::text, ',' ORDER BY id) FROM app.events": {"1,2"},
		"SELECT count(*)::text FROM unwritten" + asOf:                  {"0"},
		"SELECT count(*)::text FROM unwritten":                         {"1"},
	} {
		if got := textRows(t, ctx, conn, q); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", q, got, want)
		}
	}
}

// textRows runs q (simple protocol: AS OF needs it) and returns its first
// column as text.
func textRows(t *testing.T, ctx context.Context, conn *pgx.Conn, q string) []string {
	t.Helper()
	rows, err := conn.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var s *string
		err := r.Scan(&s)
		if s == nil {
			return "<NULL>", err
		}
		return *s, err
	})
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// linesWith returns the lines of text that contain s.
func linesWith(text, s string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
