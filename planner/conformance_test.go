package planner

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The conformance test runs rewritten statements on a real PostgreSQL and
// checks that history mode changes no answer. It needs PostgreSQL's server
// binaries and is off unless asked for:
//
//	go test ./planner -run TestConformance -pg
var withPG = flag.Bool("pg", os.Getenv("MZPROXY_TEST_PG") != "", "run tests that start a PostgreSQL server")

// startPG starts a throwaway PostgreSQL on a Unix socket and returns a
// connection to it.
func startPG(t *testing.T) *pgconn.PgConn {
	t.Helper()
	bin := "/usr/lib/postgresql/15/bin"
	if p, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(p, "--bindir").Output(); err == nil {
			bin = strings.TrimSpace(string(out))
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	dir, err := os.MkdirTemp("", "mzproxy-planner-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	run := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		c.Dir = dir
		return c
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	srv := run("postgres", "-D", data, "-k", dir, "-p", "5432", "-c", "listen_addresses=", "-c", "fsync=off")
	logf, _ := os.Create(filepath.Join(dir, "log"))
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGINT)
		srv.Wait()
		logf.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := pgconn.Connect(ctx, fmt.Sprintf("host=%s port=5432 user=postgres dbname=postgres", dir))
		if err == nil {
			t.Cleanup(func() { conn.Close(context.Background()) })
			return conn
		}
		if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("connecting: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rows runs sql (simple protocol) and returns its rows as sorted strings.
func rows(ctx context.Context, conn *pgconn.PgConn, sql string) ([]string, error) {
	res, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range res {
		for _, row := range r.Rows {
			var cells []string
			for _, c := range row {
				if c == nil {
					cells = append(cells, "NULL")
				} else {
					cells = append(cells, string(c))
				}
			}
			out = append(out, strings.Join(cells, "|"))
		}
	}
	slices.Sort(out)
	return out, nil
}

const conformanceSetup = `
CREATE SCHEMA mzproxy; CREATE SCHEMA s;
CREATE TABLE t (a int, b int); CREATE TABLE u (x int); CREATE TABLE s.w (k int);
INSERT INTO t VALUES (1, 1), (2, 0), (3, 5), (NULL, 2), (2, 2), (4, NULL);
INSERT INTO u VALUES (1), (2), (2), (7), (NULL);
INSERT INTO s.w VALUES (1), (3);
CREATE TABLE mzproxy.h1 AS SELECT a, b, 100::int8 AS mz_from, 9223372036854775807::int8 AS mz_to FROM t;
INSERT INTO mzproxy.h1 VALUES (99, 99, 10, 100), (98, 1, 100, 100), (97, 1, 2000, 9223372036854775807);
CREATE TABLE mzproxy.h2 AS SELECT x, 100::int8 AS mz_from, 9223372036854775807::int8 AS mz_to FROM u;
INSERT INTO mzproxy.h2 VALUES (42, 10, 100);
CREATE TABLE mzproxy.h3 AS SELECT k, 100::int8 AS mz_from, 9223372036854775807::int8 AS mz_to FROM s.w;
CREATE VIEW v AS SELECT t.a, t.b FROM t WHERE t.b > 0;
CREATE VIEW vv AS SELECT v.a FROM v UNION ALL SELECT u.x FROM u;
CREATE VIEW vt AS SELECT count(*) AS n FROM pg_class WHERE relname = 't';
`

// conformanceQueries are reads whose answer must not change in history
// mode at a timestamp where the history's current versions are the tables'
// rows (1000: after mz_from 100, before the future version at 2000).
var conformanceQueries = []string{
	"SELECT * FROM t",
	"TABLE t",
	"SELECT a, sum(b) OVER (PARTITION BY a ORDER BY b ROWS BETWEEN 1 PRECEDING AND CURRENT ROW), row_number() OVER w FROM t WINDOW w AS (ORDER BY a, b)",
	"SELECT DISTINCT ON (a) a, b FROM t ORDER BY a, b DESC NULLS LAST LIMIT 10 OFFSET 1",
	"SELECT a, b, count(*) FROM t GROUP BY GROUPING SETS ((a), (b), ()) HAVING count(*) >= 1",
	"SELECT * FROM t WHERE (a, b) > (1, 2) AND (a, b) IN (SELECT x, x FROM u)",
	"SELECT * FROM t ORDER BY a, b FETCH FIRST 3 ROWS WITH TIES",
	"WITH RECURSIVE r(n) AS (SELECT a FROM t WHERE a IS NOT NULL UNION SELECT n + 1 FROM r, u WHERE n < u.x) SELECT * FROM r",
	"SELECT t.*, public.t.*, public.t.a, t, s.w.k FROM public.t, s.w",
	"SELECT t1.a, t2.a FROM t t1 JOIN t AS t2 USING (a) NATURAL JOIN u",
	"SELECT * FROM t AS q(c, d) WHERE q.c = 1",
	"SELECT * FROM ONLY t",
	"SELECT * FROM v, vv, vt",
	"SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS x(n, s) JOIN t ON t.a = x.n",
	"SELECT a FROM t INTERSECT ALL SELECT x FROM u ORDER BY 1",
	"SELECT a FROM t EXCEPT SELECT x FROM u UNION SELECT k FROM s.w",
	"SELECT * FROM t LEFT JOIN LATERAL (SELECT * FROM u WHERE u.x = t.a LIMIT 1) l ON true",
	"SELECT array(SELECT a FROM t ORDER BY a), (SELECT max(x) FROM u), CASE WHEN EXISTS (SELECT FROM s.w) THEN 1 END",
	"SELECT json_agg(t ORDER BY a, b) FROM t",
	"WITH t AS (SELECT 1 AS a) SELECT * FROM t, public.t AS p",
	"WITH x AS MATERIALIZED (SELECT * FROM t) SELECT count(*), sum(a) FILTER (WHERE b > 0) FROM x",
	"SELECT * FROM t FULL JOIN u ON t.a = u.x",
	"SELECT a, (SELECT count(*) FROM u WHERE u.x = t.a) FROM t",
	"SELECT * FROM t WHERE a = ANY (SELECT x FROM u) OR b NOT IN (SELECT k FROM s.w)",
	"SELECT string_agg(a::text, ',' ORDER BY a) FROM t",
	"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY a) FROM t",
	"SELECT * FROM t, generate_series(1, 2) g",
	"SELECT * FROM t WHERE mz_now() > 0",
	"SELECT mz_now() IS NOT NULL FROM t",
	"SELECT u.x FROM u GROUP BY ROLLUP (u.x)",
	"SELECT * FROM t WHERE EXISTS (SELECT 1 FROM t AS t2 WHERE t2.a = t.a AND t2.b <> t.b)",
	"SELECT (SELECT v.b FROM v WHERE v.a = t.a LIMIT 1) FROM t",
	// Constructs whose deparsed form must mean the same.
	"SELECT a, E'x\\ny', U&'\\0041', 'it''s', $q$a'b$q$, B'101', X'1F', 1.50::numeric(5,2), 1e3, -2^2 FROM t",
	"SELECT date '2020-01-01' + a, interval '1' hour * a, timestamp(3) with time zone '2020-01-01 00:00:00.1234+02' FROM t WHERE a IS NOT NULL",
	"SELECT a IS DISTINCT FROM b, a OPERATOR(pg_catalog.+) b, a BETWEEN SYMMETRIC b AND 3, a = ANY('{1,2}'), b::text COLLATE \"C\" FROM t",
	"SELECT coalesce(a, -1), nullif(a, 2), greatest(a, b), least(a, b), CASE a WHEN 1 THEN 'one' ELSE 'other' END FROM t",
	"SELECT row(a, b), (a, b)::text, ARRAY[a, b], (ARRAY[[1, 2], [3, 4]])[1:2][1], 'a' || a FROM t",
	"SELECT json_build_object('a', a), jsonb_agg(b ORDER BY b) FILTER (WHERE b IS NOT NULL) FROM t GROUP BY a",
	"SELECT a, b FROM t WHERE a IN (1, 2) AND NOT (b < 0 OR b IS NULL) AND b::text LIKE '%' AND b::text NOT ILIKE 'x%' AND b::text SIMILAR TO '[0-9]+'",
	"SELECT count(DISTINCT a), array_agg(DISTINCT b ORDER BY b) FROM t",
	"SELECT a, lag(b, 1, 0) OVER (ORDER BY a NULLS FIRST, b), rank() OVER (PARTITION BY a ORDER BY b RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW EXCLUDE TIES) FROM t",
	"SELECT x, substring('hello' FROM 2 FOR 3), trim(both 'x' FROM 'xhix'), position('l' IN 'hello'), extract(year FROM date '2020-02-02'), overlay('abc' PLACING 'X' FROM 2) FROM u",
	"SELECT * FROM t WHERE b = (SELECT max(b) FROM t) OR a < ALL (SELECT x FROM u WHERE x IS NOT NULL)",
	"SELECT xmlelement(name x, a), xmlforest(a, b) FROM t",
	"SELECT pg_typeof(q.o), q.o::regclass::text, t.a FROM (SELECT 't'::regclass::oid AS o) q, t",
}

func TestConformance(t *testing.T) {
	if !*withPG {
		t.Skip("needs a PostgreSQL server: run with -pg")
	}
	conn := startPG(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, conformanceSetup).ReadAll(); err != nil {
		t.Fatal(err)
	}
	cat := newFakeCatalog()
	cat.addTable("public", "t", "a", "b")
	cat.addTable("public", "u", "x")
	cat.addTable("s", "w", "k")
	// View definitions as the proxy would capture them: pg_get_viewdef
	// under a search_path that makes it qualify every name.
	for _, v := range []string{"v", "vv", "vt"} {
		res, err := conn.Exec(ctx, "SET search_path = pg_catalog; SELECT pg_get_viewdef('public."+v+"'::regclass); RESET search_path").ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		def := string(res[1].Rows[0][0])
		var cols []string
		switch v {
		case "v":
			cols = []string{"a", "b"}
		case "vv":
			cols = []string{"a"}
		case "vt":
			cols = []string{"n"}
		}
		cat.addView("public", v, def, cols...)
	}
	p := New(0)
	opts := Options{SearchPath: []string{"$user", "public"}, ExplicitTimestamp: true}
	for _, q := range conformanceQueries {
		stmts, err := p.Plan(q, cat, opts)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		st := stmts[0]
		if st.Template == nil {
			t.Errorf("%s: no template in history mode", q)
			continue
		}
		if strings.Contains(q, "mz_now") {
			// mz_now() does not exist in PostgreSQL: compare with its value.
			q = strings.ReplaceAll(q, "mz_now()", "1000::bigint")
		}
		want, err := rows(ctx, conn, q)
		if err != nil {
			t.Errorf("native %s: %v", q, err)
			continue
		}
		lit := st.Template.RenderLiteral(1000)
		got, err := rows(ctx, conn, lit)
		if err != nil {
			t.Errorf("rewritten %s: %v\n%s", q, err, lit)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s\nrewritten: %s\ngot  %q\nwant %q", q, lit, got, want)
		}
		// The extended protocol: the timestamp as parameter $N.
		if st.Params == 0 {
			res := conn.ExecParams(ctx, st.Template.RenderParam(), [][]byte{[]byte("1000")}, []uint32{20}, nil, nil).Read()
			if res.Err != nil {
				t.Errorf("rewritten (extended) %s: %v", q, res.Err)
			}
		}
	}

	// The rights guard costs no planning of its relations: PostgreSQL
	// removes it before it plans them (a plan of the guard's relations
	// opened and estimated each, 122k instructions per simple read), and
	// its plan is the history's alone.
	for _, q := range []string{"SELECT a FROM t WHERE a = 1", "SELECT * FROM v", "SELECT k FROM s.w"} {
		stmts, err := p.Plan(q, cat, opts)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := rows(ctx, conn, "EXPLAIN (COSTS OFF) "+stmts[0].Template.RenderLiteral(1000))
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for _, line := range plan {
			if strings.Contains(line, " on ") && !strings.Contains(line, " on h") || strings.Contains(line, "One-Time Filter") {
				t.Errorf("%s: the guard is planned: %q in\n%s", q, line, strings.Join(plan, "\n"))
			}
		}
	}

	// And history mode reads history: AS OF 50 sees the retracted
	// versions only, AS OF 3000 the future one too.
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"SELECT a, b FROM t AS OF 50", []string{"99|99"}},
		{"SELECT count(*) FROM t AS OF 3000", []string{"7"}},
		{"SELECT x FROM u AS OF 50", []string{"42"}},
		{"SELECT a FROM v AS OF 50", []string{"99"}},
		{"SELECT count(*) FROM t AS OF 100", []string{"6"}},
	} {
		stmts, err := p.Plan(c.q, cat, Options{SearchPath: []string{"public"}})
		if err != nil {
			t.Fatal(err)
		}
		ts, _ := strconv.ParseUint(stmts[0].AsOf.Expr, 10, 64)
		got, err := rows(ctx, conn, stmts[0].Template.RenderLiteral(ts))
		if err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %q want %q", c.q, got, c.want)
		}
	}
}
