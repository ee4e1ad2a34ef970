package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// lazyStateOf reports, read directly, whether a managed table's history is
// built, and how many versions it holds (-1: no history relation).
func lazyStateOf(t *testing.T, ctx context.Context, direct *pgx.Conn, table string) (built bool, versions int) {
	t.Helper()
	var hist string
	var exists bool
	if err := direct.QueryRow(ctx, "SELECT history_built, history, to_regclass(history) IS NOT NULL FROM mzproxy.catalog WHERE oid = $1::regclass AND dropped_ts IS NULL",
		table).Scan(&built, &hist, &exists); err != nil {
		t.Fatalf("catalog row of %s: %v", table, err)
	}
	if !exists {
		return built, -1
	}
	return built, count(t, ctx, direct, "SELECT count(*) FROM "+hist, simple(direct))
}

// wantHistory fails unless table's history is built and holds versions.
func wantHistory(t *testing.T, ctx context.Context, direct *pgx.Conn, table string, versions int) {
	t.Helper()
	if built, n := lazyStateOf(t, ctx, direct, table); !built || n != versions {
		t.Errorf("%s: history built %v with %d versions, want built with %d", table, built, n, versions)
	}
}

// wantLazy fails unless table has no history yet.
func wantLazy(t *testing.T, ctx context.Context, direct *pgx.Conn, table string) {
	t.Helper()
	if built, n := lazyStateOf(t, ctx, direct, table); built || n != -1 {
		t.Errorf("%s: history built %v (%d versions), want none yet", table, built, n)
	}
}

// TestLazyHistoryWrites: a CREATE TABLE through mzproxy makes no history;
// the first write builds it, in the write's own transaction, by every
// path a write takes: an autocommit Query (the optimistic path), the
// extended protocol (optimistic and in a block), several statements in one
// Query, COPY FROM, MERGE, TRUNCATE, and a block that made the table
// itself; a block rolled back takes its build with it. Each write is
// recorded. A table with history takes the same writes unchanged.
func TestLazyHistoryWrites(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	c := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	tables := []string{"w_simple", "w_ext", "w_multi_a", "w_multi_b", "w_copy", "w_merge", "w_trunc", "w_block", "w_block_ext", "w_rollback"}
	for _, tb := range tables {
		mustExec(t, ctx, c, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v text)")
		wantLazy(t, ctx, direct, tb)
	}

	mustExec(t, ctx, c, "INSERT INTO w_simple VALUES (1, 'a')")
	wantHistory(t, ctx, direct, "w_simple", 1)
	mustExec(t, ctx, c, "UPDATE w_simple SET v = 'b'")
	wantHistory(t, ctx, direct, "w_simple", 2)

	if _, err := c.Exec(ctx, "INSERT INTO w_ext VALUES ($1, $2)", 1, "a"); err != nil {
		t.Fatalf("extended INSERT: %v", err)
	}
	wantHistory(t, ctx, direct, "w_ext", 1)

	mustExec(t, ctx, c, "INSERT INTO w_multi_a VALUES (1, 'a'); INSERT INTO w_multi_b VALUES (1, 'b')")
	wantHistory(t, ctx, direct, "w_multi_a", 1)
	wantHistory(t, ctx, direct, "w_multi_b", 1)

	n, err := c.CopyFrom(ctx, pgx.Identifier{"w_copy"}, []string{"k", "v"}, pgx.CopyFromRows([][]any{{1, "a"}, {2, "b"}}))
	if err != nil || n != 2 {
		t.Fatalf("COPY FROM: %d rows, %v", n, err)
	}
	wantHistory(t, ctx, direct, "w_copy", 2)

	mustExec(t, ctx, c, "MERGE INTO w_merge m USING (SELECT 1 AS k) s ON m.k = s.k WHEN NOT MATCHED THEN INSERT VALUES (s.k, 'm')")
	wantHistory(t, ctx, direct, "w_merge", 1)

	mustExec(t, ctx, c, "TRUNCATE w_trunc")
	if built, _ := lazyStateOf(t, ctx, direct, "w_trunc"); !built {
		t.Error("TRUNCATE did not build w_trunc's history")
	}

	// A block: its second write finds the history built by its first.
	mustExec(t, ctx, c, "BEGIN", "INSERT INTO w_block VALUES (1, 'a')", "INSERT INTO w_block VALUES (2, 'b')",
		"CREATE TABLE w_in_block (k int PRIMARY KEY)", "INSERT INTO w_in_block VALUES (1)", "COMMIT")
	wantHistory(t, ctx, direct, "w_block", 2)
	wantHistory(t, ctx, direct, "w_in_block", 1)

	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := tx.Exec(ctx, "INSERT INTO w_block_ext VALUES ($1, 'x')", i); err != nil {
			t.Fatalf("extended INSERT %d in a block: %v", i, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantHistory(t, ctx, direct, "w_block_ext", 2)

	// Rolled back: the build goes with the block, and the next write
	// builds again.
	mustExec(t, ctx, c, "BEGIN", "INSERT INTO w_rollback VALUES (1, 'a')", "ROLLBACK")
	wantLazy(t, ctx, direct, "w_rollback")
	mustExec(t, ctx, c, "BEGIN", "SAVEPOINT s", "INSERT INTO w_rollback VALUES (1, 'a')", "ROLLBACK TO SAVEPOINT s",
		"INSERT INTO w_rollback VALUES (2, 'b')", "COMMIT")
	wantHistory(t, ctx, direct, "w_rollback", 1)

	// The same writes again, to tables with history now.
	mustExec(t, ctx, c, "INSERT INTO w_simple VALUES (2, 'c')", "BEGIN", "INSERT INTO w_block VALUES (3, 'c')", "COMMIT")
	if _, err := c.Exec(ctx, "INSERT INTO w_ext VALUES ($1, $2)", 2, "b"); err != nil {
		t.Fatal(err)
	}
	wantHistory(t, ctx, direct, "w_simple", 3)
	wantHistory(t, ctx, direct, "w_block", 3)
	wantHistory(t, ctx, direct, "w_ext", 2)

	// A table dropped and made again under the same name: the proxy's
	// catalog still knows the old one, built.
	mustExec(t, ctx, c, "CREATE TABLE w_again (k int)", "INSERT INTO w_again VALUES (1)", "DROP TABLE w_again",
		"CREATE TABLE w_again (k int)", "BEGIN", "INSERT INTO w_again VALUES (2)", "COMMIT")
	wantHistory(t, ctx, direct, "w_again", 1)

	// Writes outside mzproxy are refused before the build and after it.
	mustExec(t, ctx, c, "CREATE TABLE w_outside (k int)")
	_, err = direct.Exec(ctx, "INSERT INTO w_outside VALUES (1)")
	wantCode(t, err, "40001")
	_, err = direct.Exec(ctx, "INSERT INTO w_simple VALUES (9, 'z')")
	wantCode(t, err, "MZ002")
}

// TestLazyHistoryReads: a read at a timestamp of a table never written
// builds its history first (AS OF, EXPLAIN TIMESTAMP, SUBSCRIBE's
// snapshot), and reads what the table held at that time; before and
// after its first write.
func TestLazyHistoryReads(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	c := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, c, "CREATE TABLE r_asof (k int)", "CREATE TABLE r_explain (k int)", "CREATE TABLE r_written (k int)",
		"CREATE TABLE r_ext (k int)")
	if got := count(t, ctx, c, "SELECT count(*) FROM r_asof AS OF AT LEAST 0", simple(c)); got != 0 {
		t.Errorf("AS OF a never-written table: %d rows", got)
	}
	wantHistory(t, ctx, direct, "r_asof", 0)
	if got := count(t, ctx, c, "SELECT count(*) FROM r_ext AS OF AT LEAST 0", pgx.QueryExecModeExec); got != 0 {
		t.Errorf("AS OF (extended) a never-written table: %d rows", got)
	}
	wantHistory(t, ctx, direct, "r_ext", 0)
	rows, err := c.Query(ctx, "EXPLAIN TIMESTAMP FOR SELECT * FROM r_explain", simple(c))
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		t.Fatalf("EXPLAIN TIMESTAMP: %v", err)
	}
	wantHistory(t, ctx, direct, "r_explain", 0)

	// Written first: the read at its creation sees nothing, the present
	// the row.
	mustExec(t, ctx, c, "INSERT INTO r_written VALUES (1)")
	if got := count(t, ctx, c, "SELECT count(*) FROM r_written AS OF AT LEAST 0", simple(c)); got != 0 {
		t.Errorf("AS OF the creation of a table written since: %d rows", got)
	}
	mustExec(t, ctx, c, "INSERT INTO r_asof VALUES (1)")
	if got := count(t, ctx, c, "SELECT count(*) FROM r_asof", simple(c)); got != 1 {
		t.Errorf("r_asof after its write: %d rows", got)
	}
	wantHistory(t, ctx, direct, "r_asof", 1)
}

// TestLazyHistoryHistoryMode: with --history-reads every read reads the
// history; a table's first read builds it.
func TestLazyHistoryHistoryMode(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--history-reads")
	c := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, c, "CREATE TABLE hm (k int)")
	if got := count(t, ctx, c, "SELECT count(*) FROM hm", simple(c)); got != 0 {
		t.Errorf("first read: %d rows", got)
	}
	wantHistory(t, ctx, direct, "hm", 0)
	mustExec(t, ctx, c, "INSERT INTO hm VALUES (1)")
	if got := count(t, ctx, c, "SELECT count(*) FROM hm", simple(c)); got != 1 {
		t.Errorf("read after the write: %d rows", got)
	}
}

// TestLazyHistoryHiddenWriter: a user trigger that writes a table never
// written before is a write mzproxy cannot see coming: the refusing
// trigger's 40001 makes the autocommit statement run again with that
// table built, once; in a block the client gets the 40001, and its retry
// succeeds.
func TestLazyHistoryHiddenWriter(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	c := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, c,
		"CREATE TABLE src (k int PRIMARY KEY)", "CREATE TABLE audit (k int)", "CREATE TABLE audit2 (k int)",
		`CREATE FUNCTION copy_to_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO audit VALUES (NEW.k); IF NEW.k > 100 THEN INSERT INTO audit2 VALUES (NEW.k); END IF; RETURN NEW; END $$`,
		"CREATE TRIGGER src_audit AFTER INSERT ON src FOR EACH ROW EXECUTE FUNCTION copy_to_audit()")
	mustExec(t, ctx, c, "INSERT INTO src VALUES (1)")
	wantHistory(t, ctx, direct, "src", 1)
	wantHistory(t, ctx, direct, "audit", 1)
	_, err := c.Exec(ctx, "BEGIN; INSERT INTO src VALUES (101); COMMIT", simple(c))
	wantCode(t, err, "40001")
	c.Exec(ctx, "ROLLBACK", simple(c)) //nolint:errcheck // whatever state the error left
	if !strings.Contains(fmt.Sprint(err), "audit2") {
		t.Errorf("the 40001 does not name the table: %v", err)
	}
	// The client's retry: the block again, now as one autocommit write.
	mustExec(t, ctx, c, "INSERT INTO src VALUES (101)")
	wantHistory(t, ctx, direct, "audit2", 1)
	wantHistory(t, ctx, direct, "audit", 2)
}

// TestLazyHistoryRights: a role that may not touch a table cannot make
// mzproxy build its history, through a write or by calling ensure_history,
// and takes no lock on it (a transaction holding a lock the build would
// wait for does not make it wait).
func TestLazyHistoryRights(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	direct := connectTo(t, ctx, directURL("postgres", db))
	role := "lazy_hostile_" + strings.ToLower(strings.TrimPrefix(db, "ts_"))
	if len(role) > 60 {
		role = role[:60]
	}
	execDirect(t, ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	t.Cleanup(func() {
		_, _ = direct.Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
		execDirect(t, context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	})
	owner := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, owner, "CREATE TABLE secret (k int)")
	holder := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, holder, "BEGIN", "LOCK TABLE secret IN ROW EXCLUSIVE MODE")
	hostile := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, hostile, "SET statement_timeout = '5s'")
	_, err := hostile.Exec(ctx, "INSERT INTO secret VALUES (1)", simple(hostile))
	wantCode(t, err, "42501")
	_, err = hostile.Exec(ctx, "SELECT mzproxy.ensure_history(ARRAY['secret'::regclass::oid])", simple(hostile))
	wantCode(t, err, "42501")
	mustExec(t, ctx, holder, "COMMIT")
	wantLazy(t, ctx, direct, "secret")
}

// TestLazyHistoryConcurrentFirstWrites: first writes to the same new
// tables through two proxies at once all commit; one builds, the others
// wait for its lock and find the history there.
func TestLazyHistoryConcurrentFirstWrites(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p1, p2 := startProxy(t), startProxy(t)
	direct := connectTo(t, ctx, directURL("postgres", db))
	setup := connectTo(t, ctx, p1.URL("postgres", db))
	const tables, writers = 4, 4
	for i := 0; i < tables; i++ {
		mustExec(t, ctx, setup, fmt.Sprintf("CREATE TABLE cw%d (k int PRIMARY KEY)", i))
	}
	var conns []*pgx.Conn
	for w := 0; w < writers; w++ {
		p := p1
		if w%2 == 1 {
			p = p2
		}
		conns = append(conns, connectTo(t, ctx, p.URL("postgres", db)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, tables*writers)
	for w, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < tables; i++ {
				sql := fmt.Sprintf("INSERT INTO cw%d VALUES (%d)", (i+w)%tables, w)
				if w >= 2 {
					sql = fmt.Sprintf("BEGIN; INSERT INTO cw%d VALUES (%d); COMMIT", (i+w)%tables, w)
				}
				for attempt := 0; ; attempt++ {
					_, err := conn.Exec(ctx, sql, simple(conn))
					if err != nil && attempt < 5 && (sqlState(err) == "40001" || sqlState(err) == "40P01") {
						// A block's deadlock with another first writer is
						// the client's to retry, as after any conflict.
						conn.Exec(ctx, "ROLLBACK", simple(conn)) //nolint:errcheck // after the error
						continue
					}
					if err != nil {
						errs <- fmt.Errorf("%s: %w", sql, err)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := 0; i < tables; i++ {
		wantHistory(t, ctx, direct, fmt.Sprintf("cw%d", i), writers)
	}
}

// TestLazyHistoryReadRights: a read at a timestamp of a never-written
// table builds its history only for a role that may read what the read
// names, as PostgreSQL checks it: SELECT on the table (or on any of its
// columns) for the role the session runs as (SET ROLE's), SELECT on a
// view and the view's own tables as the view's owner. A role without it
// gets PostgreSQL's 42501 naming the relation as written, by every path
// a read at a timestamp takes (AS OF in simple and extended protocol,
// mz_now(), EXPLAIN TIMESTAMP, history mode; with and without the event
// loop), and nothing is built or locked: a transaction holding
// a lock the build would wait for does not make it wait. In a block the
// refusal aborts the block, as the read's own would. On the old code
// every one of them built the history (and waited for the lock), and the
// read was refused naming the history table.
func TestLazyHistoryReadRights(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{proxies: [][]string{nil, {"--event-loop=false"}, {"--history-reads"}}})
	ctx, db, role := st.ctx, st.db, st.role
	group := role + "_g"
	func() {
		publicGrants.Lock()
		defer publicGrants.Unlock()
		// NOINHERIT: the group's rights are the role's after SET ROLE only.
		execDirect(t, ctx, fmt.Sprintf("CREATE ROLE %s NOLOGIN NOSUPERUSER; GRANT %s TO %s; ALTER ROLE %s NOINHERIT", group, group, role, role))
	}()
	t.Cleanup(func() {
		publicGrants.Lock()
		defer publicGrants.Unlock()
		if conn, err := pgx.Connect(context.Background(), directURL("postgres", db)); err == nil {
			conn.Exec(context.Background(), fmt.Sprintf("DROP OWNED BY %s CASCADE; DROP ROLE %s", group, group)) //nolint:errcheck // best effort
			conn.Close(context.Background())
		}
	})
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	direct := connectTo(t, ctx, directURL("postgres", db))
	holder := connectTo(t, ctx, directURL("postgres", db))
	// denied fails unless err is PostgreSQL's 42501 for relation what.
	denied := func(t *testing.T, err error, what string) {
		t.Helper()
		wantCode(t, err, "42501")
		if !strings.Contains(err.Error(), "permission denied for "+what) {
			t.Errorf("the 42501 does not name %s as PostgreSQL does: %v", what, err)
		}
	}
	for i, p := range st.proxies {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			n := func(name string) string { return fmt.Sprintf("%s_%d", name, i) }
			mustExec(t, ctx, owner,
				"CREATE TABLE "+n("secret")+" (k int)",
				"CREATE TABLE "+n("viarole")+" (k int)", "GRANT SELECT ON "+n("viarole")+" TO "+group,
				"CREATE TABLE "+n("cols")+" (k int, v text)", "GRANT SELECT (k) ON "+n("cols")+" TO "+role,
				"CREATE TABLE "+n("base")+" (k int)", "CREATE VIEW "+n("vw")+" AS SELECT k FROM "+n("base"),
				"GRANT SELECT ON "+n("vw")+" TO "+role,
				"CREATE TABLE "+n("hidden")+" (k int)", "CREATE VIEW "+n("novw")+" AS SELECT k FROM "+n("hidden"))
			for _, tb := range []string{"secret", "viarole", "cols", "base", "hidden"} {
				wantLazy(t, ctx, direct, n(tb))
			}
			history := i == 2
			asOf := " AS OF AT LEAST 0"
			if history {
				asOf = "" // every read reads the history
			}
			// A lock the build would wait for, held throughout.
			mustExec(t, ctx, holder, "BEGIN", "LOCK TABLE "+n("secret")+", "+n("hidden")+" IN ROW EXCLUSIVE MODE")
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			reads := []string{"SELECT k FROM " + n("secret") + asOf}
			if !history {
				reads = append(reads, "SELECT k FROM "+n("secret")+" WHERE mz_now() > 0",
					"EXPLAIN TIMESTAMP FOR SELECT k FROM "+n("secret"))
			}
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
				conn := connectMode(t, rctx, p.URL(role, db), mode)
				for _, read := range reads {
					_, err := pgxValue(rctx, conn, read)
					denied(t, err, "table "+n("secret"))
				}
				_, err := pgxValue(rctx, conn, "SELECT k FROM "+n("novw")+asOf)
				denied(t, err, "view "+n("novw"))
				// The session goes on.
				if v, err := pgxValue(rctx, conn, "SELECT 'on'"); err != nil || v != "on" {
					t.Fatalf("after the refusals: %q, %v", v, err)
				}
			}
			c := connectTo(t, rctx, p.URL(role, db))
			// In a block: the refusal aborts it.
			mustExec(t, rctx, c, "BEGIN")
			_, err := c.Exec(rctx, "SELECT k FROM "+n("secret")+asOf, simple(c))
			denied(t, err, "table "+n("secret"))
			_, err = c.Exec(rctx, "SELECT 1", simple(c))
			wantCode(t, err, "25P02")
			mustExec(t, rctx, c, "ROLLBACK")
			// Rights of another role: refused as the login role, read
			// after SET ROLE to the role that has them.
			_, err = pgxValue(rctx, c, "SELECT k FROM "+n("viarole")+asOf)
			denied(t, err, "table "+n("viarole"))
			wantLazy(t, ctx, direct, n("viarole"))
			mustExec(t, ctx, holder, "COMMIT")
			for _, tb := range []string{"secret", "hidden"} {
				wantLazy(t, ctx, direct, n(tb))
			}
			mustExec(t, rctx, c, "SET ROLE "+group)
			if v, err := pgxValue(rctx, c, "SELECT count(*)::text FROM "+n("viarole")+asOf); err != nil || v != "0" {
				t.Errorf("after SET ROLE: %q, %v", v, err)
			}
			wantHistory(t, ctx, direct, n("viarole"), 0)
			mustExec(t, rctx, c, "RESET ROLE")
			// SELECT on one column is a right to read the table, and so is
			// SELECT on a view whose owner may read its table: the build
			// is the reader's (what the read then answers is README's).
			pgxValue(rctx, c, "SELECT k FROM "+n("cols")+asOf) //nolint:errcheck // see above
			wantHistory(t, ctx, direct, n("cols"), 0)
			pgxValue(rctx, c, "SELECT k FROM "+n("vw")+asOf) //nolint:errcheck // see above
			wantHistory(t, ctx, direct, n("base"), 0)
		})
	}
}

// TestLazyHistorySearchPath: what the proxy remembers as built, for a
// target written unqualified, holds for the search_path it resolved by
// only: a session that changed its search_path, and another session with
// another one, each write their own never-written table of the same name
// in a block without a 40001, and a read at a timestamp of a third one
// builds it. On the old code the name alone was remembered (the block got
// 40001: mzproxy left out the build) and every table of that name was
// taken as built (the read found no history relation).
func TestLazyHistorySearchPath(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	owner := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, owner, "CREATE TABLE w (k int)", "INSERT INTO w VALUES (1)")
	for _, sch := range []string{"s1", "s2", "s3", "s4", "s5"} {
		mustExec(t, ctx, owner, "CREATE SCHEMA "+sch, "CREATE TABLE "+sch+".t (k int)")
	}
	// The path as the proxy knows it: a read at a timestamp asks for it.
	learnPath := func(c *pgx.Conn, path string) {
		t.Helper()
		mustExec(t, ctx, c, "SET search_path = "+path)
		count(t, ctx, c, "SELECT count(*) FROM public.w AS OF AT LEAST 0", simple(c))
	}
	block := func(c *pgx.Conn) {
		t.Helper()
		if _, err := c.Exec(ctx, "BEGIN; INSERT INTO t VALUES (1); COMMIT", simple(c)); err != nil {
			c.Exec(ctx, "ROLLBACK", simple(c)) //nolint:errcheck // after the error
			t.Errorf("a block's first write to t: %v", err)
		}
	}
	// One session, the path unknown to the proxy, changed between writes.
	mustExec(t, ctx, owner, "SET search_path = s1", "INSERT INTO t VALUES (1)", "SET search_path = s2")
	block(owner)
	// Two sessions whose paths the proxy knows.
	a, b := connectTo(t, ctx, p.URL("postgres", db)), connectTo(t, ctx, p.URL("postgres", db))
	learnPath(a, "s3")
	learnPath(b, "s4")
	mustExec(t, ctx, a, "INSERT INTO t VALUES (1)")
	block(b)
	for _, sch := range []string{"s1", "s2", "s3", "s4"} {
		wantHistory(t, ctx, direct, sch+".t", 1)
	}
	// Never written: the writes to the other t's did not build it.
	if got := count(t, ctx, a, "SELECT count(*) FROM s5.t AS OF AT LEAST 0", simple(a)); got != 0 {
		t.Errorf("s5.t at a timestamp: %d rows", got)
	}
	wantHistory(t, ctx, direct, "s5.t", 0)
}

// TestLazyHistoryBlockRemembers: a table built by a block that committed
// is known built to the proxy from then on, as after an autocommit
// write: the next block's write carries no ensure_history (counted by
// PostgreSQL's function statistics in the block's own transaction), for
// a managed table and for a temporary one (never managed, so never in
// the catalog as built); a block rolled back, or rolled back to a
// savepoint after its build, leaves the next write to build. On the old
// code every block's write to such a table called ensure_history again.
func TestLazyHistoryBlockRemembers(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	c := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, c, "CREATE TABLE bt (k int)", "CREATE TABLE bt_rb (k int)", "CREATE TEMP TABLE tmp (k int)",
		"SET track_functions = 'pl'")
	// calls is how many times the block's writes called ensure_history.
	// (The function's statistics pending in the session may hold calls of
	// transactions before: the difference is the write's.)
	const calls0 = "SELECT coalesce(pg_stat_get_xact_function_calls('mzproxy.ensure_history(oid[])'::regprocedure), 0)"
	calls := func(write string) int {
		t.Helper()
		mustExec(t, ctx, c, "BEGIN")
		before := count(t, ctx, c, calls0, simple(c))
		mustExec(t, ctx, c, write)
		n := count(t, ctx, c, calls0, simple(c)) - before
		mustExec(t, ctx, c, "COMMIT")
		return n
	}
	for _, tb := range []string{"bt", "tmp"} {
		if n := calls("INSERT INTO " + tb + " VALUES (1)"); n != 1 {
			t.Errorf("%s: the first block called ensure_history %d times, want 1", tb, n)
		}
		for i := 0; i < 2; i++ {
			if n := calls("INSERT INTO " + tb + " VALUES (2)"); n != 0 {
				t.Errorf("%s: block %d after the build called ensure_history %d times, want 0", tb, i+2, n)
			}
		}
	}
	wantHistory(t, ctx, direct, "bt", 3)
	mustExec(t, ctx, c, "BEGIN", "INSERT INTO bt_rb VALUES (1)", "ROLLBACK")
	mustExec(t, ctx, c, "BEGIN", "SAVEPOINT s", "INSERT INTO bt_rb VALUES (1)", "ROLLBACK TO SAVEPOINT s", "COMMIT")
	wantLazy(t, ctx, direct, "bt_rb")
	if n := calls("INSERT INTO bt_rb VALUES (1)"); n != 1 {
		t.Errorf("bt_rb after the rollbacks: ensure_history called %d times, want 1", n)
	}
	wantHistory(t, ctx, direct, "bt_rb", 1)
}
