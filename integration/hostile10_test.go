package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Session 10's hostile user: an ordinary role, through the proxy and
// directly, against what storage versions 25 to 28 and the read
// statements brought: errors of its own that look like the proxy's
// (a view refused under restrict_nonsystem_relation_kind, a read's
// prepared statement gone), the setting toggled every way a session can,
// and writes that try to break the history trigger.

// forgedErrors are errors a role's own function raises with the SQLSTATE
// and message the proxy reads as its own statements' refusals. NAME is
// replaced with the name of a read statement the proxy prepared, read
// from pg_prepared_statements.
var forgedErrors = []struct{ code, message string }{
	{"55000", `access to non-system view "settled_pin" is restricted`},
	{"55000", `access to non-system view "settled_writes" is restricted`},
	{"26000", `prepared statement "NAME" does not exist`},
	{"22P02", `invalid input syntax for type bigint: "mzproxy: plan of a changed catalog"`},
	{"22P02", `invalid input syntax for type bigint: "mzproxy: pin refused"`},
	// The steady and learning guards' and the pin guard's refusals since
	// session 25 (refusal: a setting the marker names, which cannot exist).
	{"42704", `unrecognized configuration parameter "mzproxy: plan of a changed catalog"`},
	{"42704", `unrecognized configuration parameter "mzproxy: pin refused"`},
}

// forgingRole makes an ordinary role that owns, in db, a sequence runs
// and two functions that count their runs in it and, when their argument
// is positive, raise the error of SQLSTATE code and text msg: forge_at_plan
// is IMMUTABLE, so PostgreSQL runs it when it plans a statement calling it
// with constants (at a Bind, for a prepared one), forge_at_run is VOLATILE
// and runs when the statement does. The role may read g.
func forgingRole(t *testing.T, ctx context.Context, p *proxyProc, db string) string {
	t.Helper()
	role := ordinaryRole(t, ctx)
	pointTable(t, ctx, p.URL("postgres", db), role, 5)
	owner := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, owner, "GRANT CREATE ON SCHEMA public TO "+role)
	conn := connectTo(t, ctx, p.URL(role, db))
	body := `LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_catalog.nextval('runs');
	IF n > 0 THEN
		RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg;
	END IF;
	RETURN n;
END $$`
	mustExec(t, ctx, conn, "CREATE SEQUENCE runs",
		"CREATE FUNCTION forge_at_plan(code text, msg text, n int) RETURNS int IMMUTABLE "+body,
		"CREATE FUNCTION forge_at_run(code text, msg text, n int) RETURNS int VOLATILE "+body)
	return role
}

// runs is how many times the role's functions ran so far.
func runs(t *testing.T, ctx context.Context, conn *pgx.Conn) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(ctx, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM runs", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		t.Fatalf("runs: %v", err)
	}
	return n
}

// attempt runs sql on conn and says what the client saw and how many
// times the role's functions ran for it, counted on counter.
func attempt(t *testing.T, ctx context.Context, conn, counter *pgx.Conn, sql string, mode pgx.QueryExecMode) string {
	t.Helper()
	before := runs(t, ctx, counter)
	answer := "ok"
	rows, err := conn.Query(ctx, sql, mode)
	if err == nil {
		for rows.Next() {
		}
		rows.Close()
		err = rows.Err()
	}
	if pe, ok := err.(*pgconn.PgError); ok {
		answer = pe.Code + " " + pe.Message
	} else if err != nil {
		answer = "error: " + err.Error()
	}
	return fmt.Sprintf("%s, ran %d", answer, runs(t, ctx, counter)-before)
}

// readStatementName is the name the proxy gives the first statement it
// prepares for a repeated read on conn's backend connection: its own
// names share a suffix, which the role reads from the read guard's name
// in pg_prepared_statements.
func readStatementName(t *testing.T, ctx context.Context, conn *pgx.Conn) string {
	t.Helper()
	var suffix string
	for range 3 {
		if err := conn.QueryRow(ctx, "SELECT v, mz_now() AS ts FROM g WHERE k = 1", pgx.QueryExecModeSimpleProtocol).Scan(new(string), new(int64)); err != nil {
			t.Fatal(err)
		}
	}
	err := conn.QueryRow(ctx, "SELECT substring(name from '_([0-9a-f]{12})$') FROM pg_prepared_statements WHERE name ~ '^mzproxy_read_guard_[0-9a-f]{12}$'",
		pgx.QueryExecModeSimpleProtocol).Scan(&suffix)
	if err != nil {
		t.Fatalf("the proxy's read guard: %v", err)
	}
	return "mzproxy_read_0_" + suffix
}

// TestHostile10ForgedRefusals: a role's own function raises, in a
// timestamped read (simple, repeated so that the proxy prepares it, and
// extended), in AS OF mz_now() and in the first read of a transaction
// block, errors with the SQLSTATE and text of the refusals the proxy
// takes as its own statements': a view refused under
// restrict_nonsystem_relation_kind (55000), the read's prepared statement
// gone (26000, with the proxy's real statement name), the guards' markers
// (22P02, 42704). Each statement runs its function exactly as often as the same
// statement run directly on PostgreSQL (counted by a sequence), and the
// client sees the function's error: the proxy neither skips the statement
// nor runs it again. The session reads right afterwards.
func TestHostile10ForgedRefusals(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	role := forgingRole(t, ctx, p, db)
	counter := connectTo(t, ctx, directURL(role, db))
	name := readStatementName(t, ctx, connectTo(t, ctx, p.URL(role, db)))
	scripts := [][]string{
		{"SELECT k, mz_now() AS ts, FN('CODE', 'MSG', 1) FROM g WHERE k = 1"},
		{"SELECT k, FN('CODE', 'MSG', 1) FROM g WHERE k = 2 AS OF mz_now()"},
		{"BEGIN", "SELECT k, FN('CODE', 'MSG', 1) FROM g WHERE k = 3", "ROLLBACK"},
		{"BEGIN", "SELECT k, mz_now() AS ts, FN('CODE', 'MSG', 1) FROM g WHERE k = 3", "ROLLBACK"},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for _, fn := range []string{"forge_at_plan", "forge_at_run"} {
			for _, forged := range forgedErrors {
				what := fmt.Sprintf("%s %s %s %q", mode, fn, forged.code, forged.message)
				proxied := connectTo(t, ctx, p.URL(role, db))
				direct := connectTo(t, ctx, directURL(role, db))
				msg := strings.ReplaceAll(forged.message, "NAME", name)
				fill := strings.NewReplacer("FN", fn, "CODE", forged.code, "MSG", strings.ReplaceAll(msg, "'", "''"))
				// Each script three times: the proxy prepares a repeated
				// read at its second use.
				for i := range 3 {
					for _, script := range scripts {
						for _, stmt := range script {
							sql := fill.Replace(stmt)
							plain := strings.NewReplacer(" AS OF mz_now()", "", "mz_now() AS ts, ", "").Replace(sql)
							want := attempt(t, ctx, direct, counter, plain, mode)
							if got := attempt(t, ctx, proxied, counter, sql, mode); got != want {
								t.Errorf("%s: %s (run %d): %s, want %s", what, sql, i+1, got, want)
							}
						}
					}
				}
				var v string
				if err := proxied.QueryRow(ctx, "SELECT v, mz_now() FROM g WHERE k = 4").Scan(&v, new(int64)); err != nil || v != "v4" {
					t.Errorf("%s: the next read: %q, %v", what, v, err)
				}
			}
		}
	}
	p.mustAlive(t, ctx)
}

// restrictToggles are the ways a session turns restrict_nonsystem_relation_kind
// on and off behind the proxy's back, each followed by the reads of
// toggledReads. A function of the role's (restrict_in) restricts views for
// its own duration (its SET clause); restrict_session sets it for the
// session with set_config, which no statement text shows.
var restrictToggles = [][]string{
	{"SET restrict_nonsystem_relation_kind = 'view'"},
	{"RESET restrict_nonsystem_relation_kind"},
	{"SELECT restrict_session('view')"},
	{"SELECT k, restrict_in(k) FROM g WHERE k = 1"},
	{"SELECT restrict_session('')"},
	{"BEGIN", "SET LOCAL restrict_nonsystem_relation_kind = 'view'", "SELECT v FROM g WHERE k = 2", "SELECT v, mz_now() AS ts FROM g WHERE k = 2", "COMMIT"},
	{"BEGIN", "SELECT v FROM g WHERE k = 2", "SELECT set_config('restrict_nonsystem_relation_kind', 'view', true)", "SELECT v, mz_now() AS ts FROM g WHERE k = 2", "SELECT v FROM g WHERE k = 3 AS OF mz_now()", "COMMIT"},
	{"BEGIN READ ONLY", "SELECT restrict_session('view, foreign-table')", "SELECT v, mz_now() AS ts FROM g WHERE k = 2", "ROLLBACK"},
	{"DO $$ BEGIN PERFORM set_config('restrict_nonsystem_relation_kind', 'view', false); END $$"},
	{"BEGIN", "SELECT v, mz_now() AS ts FROM g WHERE k = 1", "SET LOCAL restrict_nonsystem_relation_kind = ''", "SELECT v FROM g WHERE k = 3 AS OF mz_now()", "COMMIT"},
	{"SELECT k, restrict_in(k), mz_now() AS ts FROM g WHERE k = 1"},
	{"RESET ALL"},
}

// toggledReads are what each toggle is followed by: timestamped reads
// (the first twice, prepared at its second use), AS OF, and transaction
// blocks whose first read is plain or timestamped.
var toggledReads = [][]string{
	{"SELECT k, v, mz_now() AS ts FROM g WHERE k = 4"},
	{"SELECT k, v, mz_now() AS ts FROM g WHERE k = 4"},
	{"SELECT k, v FROM g ORDER BY k AS OF mz_now()"},
	{"BEGIN", "SELECT k, v FROM g ORDER BY k", "SELECT k, v, mz_now() AS ts FROM g WHERE k = 5", "COMMIT"},
	{"BEGIN READ ONLY", "SELECT k, v, mz_now() AS ts FROM g WHERE k = 5", "SELECT count(*) FROM g", "COMMIT"},
	{"BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT k, v FROM g WHERE k = 1 AS OF mz_now()", "COMMIT"},
}

// TestHostile10RestrictToggles: a role turns restrict_nonsystem_relation_kind
// on and off mid-session every way it can (SET and RESET, SET LOCAL and
// set_config(..., true) in a block, after the block's first read or
// before it, a function's SET clause, set_config in a function or a DO
// block, RESET ALL), over the simple and the extended protocol. After
// each, every statement answers as in a session of the role that never
// restricted views: the same rows, or the same SQLSTATE, and a timestamp
// wherever mz_now() is read.
func TestHostile10RestrictToggles(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 5, create: true})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	mustExec(t, ctx, connectTo(t, ctx, p.URL(role, db)),
		"CREATE FUNCTION restrict_in(k int) RETURNS int LANGUAGE sql SET restrict_nonsystem_relation_kind = 'view' AS 'SELECT k'",
		"CREATE FUNCTION restrict_session(kinds text) RETURNS text LANGUAGE sql AS $$SELECT set_config('restrict_nonsystem_relation_kind', kinds, false)$$")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		plain := connectMode(t, ctx, p.URL(role, db), mode)
		conn := connectMode(t, ctx, p.URL(role, db), mode)
		for _, toggle := range restrictToggles {
			// The toggle in conn only; its reads answer as plain's.
			for _, stmt := range toggle {
				got, want := answerOf(t, ctx, conn, stmt), ""
				if strings.HasPrefix(stmt, "SELECT v") || strings.HasPrefix(stmt, "SELECT k") {
					want = answerOf(t, ctx, plain, stmt)
				} else if !strings.HasPrefix(got, "error: ") {
					want = got
				}
				if got != want {
					t.Errorf("%s: toggle %q: %s: %s, want %s", mode, toggle, stmt, got, want)
				}
			}
			for _, script := range toggledReads {
				for _, stmt := range script {
					if got, want := answerOf(t, ctx, conn, stmt), answerOf(t, ctx, plain, stmt); got != want {
						t.Errorf("%s after %q: %s: %s, want %s", mode, toggle, stmt, got, want)
					}
				}
			}
		}
	}
	p.mustAlive(t, ctx)
}

// keyShuffles are writes that move, delete and re-create primary keys
// inside one statement or one block: the history trigger of version 27
// closes an old version by key alone on its first write of a
// transaction, and must still close exactly the versions the statement
// changed. Each script runs on a fresh table of rows (k, v) = (1..4).
var keyShuffles = [][]string{
	{"UPDATE TBL SET k = k + 1"},
	{"UPDATE TBL SET k = 5 - k"},
	{"UPDATE TBL SET k = k - 1 WHERE k > 1"},
	{"WITH d AS (DELETE FROM TBL WHERE k = 2 RETURNING k, v) INSERT INTO TBL SELECT k, v || '!' FROM d"},
	{"WITH d AS (DELETE FROM TBL WHERE k <= 2 RETURNING k, v) INSERT INTO TBL SELECT k + 10, v FROM d"},
	{"INSERT INTO TBL VALUES (2, 'x'), (5, 'y') ON CONFLICT (k) DO UPDATE SET v = excluded.v || TBL.v"},
	{"DELETE FROM TBL WHERE k = 1", "INSERT INTO TBL VALUES (1, 'again')"},
	{"BEGIN", "UPDATE TBL SET k = k + 10", "UPDATE TBL SET k = k - 10", "DELETE FROM TBL WHERE k = 3", "INSERT INTO TBL VALUES (3, 'new')", "COMMIT"},
	{"BEGIN", "DELETE FROM TBL", "INSERT INTO TBL VALUES (1, 'a'), (2, 'b')", "UPDATE TBL SET k = 3 - k", "COMMIT"},
	{"UPDATE TBL SET v = v WHERE k = 1", "UPDATE TBL SET v = v || v"},
}

// TestHostile10KeyShuffles: an ordinary role's writes that move and
// re-create primary keys (keyShuffles), through the proxy on a managed
// table, leave the same rows as on a plain table directly, and the table's
// history answers, AS OF the timestamp after each statement, exactly the
// rows the table had then: no version lost, none current twice (a second
// current version would answer a key twice). session_replication_role,
// which would skip the history trigger, is refused to the role (42501).
func TestHostile10KeyShuffles(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db, plainDB := freshDatabase(t, ctx), freshDatabase(t, ctx)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	for _, url := range []string{p.URL("postgres", db), directURL("postgres", plainDB)} {
		mustExec(t, ctx, connectTo(t, ctx, url), "GRANT CREATE ON SCHEMA public TO "+role)
	}
	managed := connectTo(t, ctx, p.URL(role, db))
	plain := connectTo(t, ctx, directURL(role, plainDB))
	_, err := managed.Exec(ctx, "SET session_replication_role = replica")
	wantCode(t, err, "42501")
	for i, script := range keyShuffles {
		table := fmt.Sprintf("shuffle_%d", i)
		create := []string{"CREATE TABLE " + table + " (k int PRIMARY KEY, v text)",
			"INSERT INTO " + table + " SELECT i, 'v' || i FROM generate_series(1, 4) i"}
		mustExec(t, ctx, managed, append(create, "ALTER TABLE "+table+" SET (RETAIN HISTORY FOR '1h')")...)
		mustExec(t, ctx, plain, create...)
		contents := "SELECT k, v FROM " + table + " ORDER BY k"
		seen := map[uint64]string{readTS(t, ctx, managed): answerOf(t, ctx, managed, contents)}
		for _, stmt := range script {
			sql := strings.ReplaceAll(stmt, "TBL", table)
			if got, want := answerOf(t, ctx, managed, sql), answerOf(t, ctx, plain, sql); got != want {
				t.Errorf("%s: %s, want %s", sql, got, want)
			}
			if got, want := answerOf(t, ctx, managed, contents), answerOf(t, ctx, plain, contents); got != want {
				t.Errorf("%q after %s: %s, want %s", script, sql, got, want)
			}
			if managed.PgConn().TxStatus() == 'I' {
				seen[readTS(t, ctx, managed)] = answerOf(t, ctx, managed, contents)
			}
		}
		for ts, want := range seen {
			asOf := fmt.Sprintf("%s AS OF %d", contents, ts)
			if got := answerOf(t, ctx, managed, asOf); got != want {
				t.Errorf("%q: %s: %s, want %s", script, asOf, got, want)
			}
		}
	}
	p.mustAlive(t, ctx)
}

// churnWriteCodes are the SQLSTATEs a write may fail with while another
// session drops and creates its table: the table gone (42P01), a conflict
// with the DDL or another write (40001, 40P01), a key taken (23505).
var churnWriteCodes = map[string]bool{"42P01": true, "40001": true, "40P01": true, "23505": true}

// TestHostile10TableChurn: an ordinary role drops and creates a table of
// the same name over and over (version 28 leaves a dropped table's
// trigger functions to compaction), with a plain index and a unique one,
// while another of its sessions writes to whatever table has the name and
// the proxy compacts every 100 ms. The writes fail only as a write to a
// table being dropped does, never with XX000 or a missing function; each
// new table starts with only its own rows and its history answers them
// AS OF its writes; the role cannot attach a table's trigger function to
// a table of its own (42501); and compaction drops the trigger functions
// of every dropped table.
func TestHostile10TableChurn(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{create: true, proxies: [][]string{leaseArgs()}})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	ddl := connectTo(t, ctx, p.URL(role, db))
	writes := connectTo(t, ctx, p.URL(role, db))
	admin := connectTo(t, ctx, directURL("postgres", db))
	stop := make(chan struct{})
	written := make(chan map[string]int, 1)
	go func() {
		codes := map[string]int{}
		for i := 0; ; i++ {
			select {
			case <-stop:
				written <- codes
				return
			default:
			}
			sql := fmt.Sprintf("INSERT INTO churn VALUES (%d, 'w') ON CONFLICT (k) DO UPDATE SET v = churn.v || '.'", 100+i%7)
			if i%3 == 0 {
				sql = "UPDATE churn SET v = v || '+' WHERE k = 1"
			}
			_, err := writes.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
			if code := sqlState(err); err == nil {
				codes["ok"]++
			} else if code == "" {
				codes["error: "+err.Error()]++
				time.Sleep(50 * time.Millisecond)
			} else {
				codes[code]++
				time.Sleep(5 * time.Millisecond) // the table is being made: no spin
			}
		}
	}()
	for round := range 12 {
		mustExec(t, ctx, ddl, "DROP TABLE IF EXISTS churn",
			"CREATE TABLE churn (k int PRIMARY KEY, v text)",
			"ALTER TABLE churn SET (RETAIN HISTORY FOR '200ms')",
			"CREATE INDEX churn_v ON churn (v)",
			fmt.Sprintf("INSERT INTO churn VALUES (1, 'round %d'), (2, 'two')", round))
		if round%4 == 0 {
			mustExec(t, ctx, ddl, "CREATE UNIQUE INDEX churn_uv ON churn (k, v)")
		}
	}
	close(stop)
	codes := <-written
	t.Logf("writes while the table churned: %v", codes)
	for code := range codes {
		if code != "ok" && !churnWriteCodes[code] {
			t.Errorf("a write failed with %s (%d times)", code, codes[code])
		}
	}
	// The last table: its own rows only, and its history.
	mustExec(t, ctx, ddl, "DELETE FROM churn WHERE k > 2", "UPDATE churn SET v = 'one' WHERE k = 1")
	ts := readTS(t, ctx, ddl)
	if got := answerOf(t, ctx, ddl, fmt.Sprintf("SELECT k, v FROM churn ORDER BY k AS OF %d", ts)); got != "1one; 2two" {
		t.Errorf("the last table AS OF %d: %s", ts, got)
	}
	// A table's trigger function on a table of the role's own.
	var fn string
	if err := admin.QueryRow(ctx, `SELECT p.oid::regprocedure::text FROM pg_trigger g JOIN pg_proc p ON p.oid = g.tgfoid
		WHERE g.tgrelid = 'churn'::regclass AND p.proname LIKE 'h%_ins'`).Scan(&fn); err != nil {
		t.Fatalf("the table's insert trigger function: %v", err)
	}
	_, err := connectTo(t, ctx, directURL(role, db)).Exec(ctx, "CREATE TABLE mine (k int, v text); CREATE TRIGGER steal AFTER INSERT ON mine REFERENCING NEW TABLE AS mz_new FOR EACH STATEMENT EXECUTE FUNCTION "+fn)
	wantCode(t, err, "42501")
	eventually(t, time.Minute, "compaction dropped the dropped tables' trigger functions", func() bool {
		var left int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'mzproxy'::regnamespace
			AND p.proname ~ '^h[0-9]+_(ins|upd|del|trunc)$'
			AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgfoid = p.oid)`).Scan(&left)
		return err == nil && left == 0
	})
	p.mustAlive(t, ctx)
}

// viewAttacks are what an ordinary role tries against the views of
// storage 26 and the functions storage 25 made view-safe, in a session
// that restricts views and one that does not. leftOpen: a block others
// must not wait for.
var viewAttacks = []struct {
	sql string
	// code is the SQLSTATE it must fail with ("" when it answers);
	// RESTRICTED: 55000 in a session that restricts views (it names a
	// view), else it answers.
	code     string
	leftOpen bool
}{
	{sql: "SELECT * FROM mzproxy.settled_writes", code: "RESTRICTED"},
	{sql: "SELECT * FROM mzproxy.pin_state", code: "RESTRICTED"},
	{sql: "SELECT s.w, p.t, p.w FROM mzproxy.settled_writes s, mzproxy.pin_state p", code: "RESTRICTED"},
	{sql: "SELECT mzproxy.pin_check(w) FROM mzproxy.settled_writes", code: "RESTRICTED"},
	{sql: "SELECT mzproxy.pin()"},
	{sql: "SELECT mzproxy.pin_check(mzproxy.pin_peek() - 1)"},
	{sql: "SELECT mzproxy.compact(0, 9223372036854775807)", code: "42501"},
	{sql: "SELECT mzproxy.compact(-1, -1)", code: "42501"},
	{sql: "SELECT mzproxy.register(0, 0, 'forged', 1)", code: "42501"},
	{sql: "INSERT INTO mzproxy.writes_seen VALUES (1)", code: "42501"},
	{sql: "SELECT setval('mzproxy.writes_seen', 1)", code: "42501"},
	{sql: "SELECT setval('mzproxy.pinned', 9223372036854775000)", code: "42501"},
	{sql: "CREATE OR REPLACE VIEW mzproxy.settled_writes AS SELECT 0::bigint AS w", code: "42501"},
	// The role's own view of the name of a proxy's view: its refusal has
	// the text of the guard's.
	{sql: "SELECT * FROM public.settled_pin", code: "RESTRICTED"},
	{sql: "BEGIN; SELECT mzproxy.pin(); SELECT * FROM mzproxy.pin_state", code: "RESTRICTED", leftOpen: true},
	{sql: "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM mzproxy.settled_writes", code: "RESTRICTED", leftOpen: true},
}

// TestHostile10PinViews: an ordinary role reads the pin's views and calls
// the view-safe functions, with forged arguments, in sessions that
// restrict views and sessions that do not, through the proxy and
// directly (viewAttacks). The functions it may not call are refused with
// 42501, a view (the proxy's, or its own of the name of one) is refused
// as PostgreSQL refuses it (55000 when the session restricts views), the
// proxy relaying its refusal, and after each
// attack an acknowledged write is seen by another session's read of the
// present three ways and the oracle never went back (presentWitness).
func TestHostile10PinViews(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{create: true})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	admin := connectTo(t, ctx, directURL("postgres", db))
	owner := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, owner, "CREATE TABLE acct (k int PRIMARY KEY, v bigint)", "INSERT INTO acct VALUES (1, 0)",
		"CREATE VIEW public.settled_pin AS SELECT 1::bigint AS t")
	w := &presentWitness{t: t, ctx: ctx, admin: admin,
		writer: connectTo(t, ctx, p.URL(role, db)), reader: connectTo(t, ctx, restrictedURL(p.URL(role, db)))}
	w.check("before the attacks")
	for _, via := range []struct{ name, url string }{
		{"proxy", p.URL(role, db)}, {"proxy, restricted", restrictedURL(p.URL(role, db))},
		{"direct", directURL(role, db)}, {"direct, restricted", restrictedURL(directURL(role, db))},
	} {
		attacker := connectTo(t, ctx, via.url)
		restricted := strings.HasSuffix(via.name, "restricted")
		for _, a := range viewAttacks {
			_, err := attacker.PgConn().Exec(ctx, a.sql).ReadAll()
			want := a.code
			if want == "RESTRICTED" {
				want = map[bool]string{true: "55000"}[restricted]
			}
			if code := sqlState(err); code != want {
				t.Errorf("%s: %s: %v, want SQLSTATE %q", via.name, a.sql, err, want)
			}
			w.check(via.name + ": " + a.sql)
			if a.leftOpen {
				mustExec(t, ctx, attacker, "ROLLBACK")
			}
		}
	}
	noHoldsOn(t, ctx, admin, "acct")
	p.mustAlive(t, ctx)
}

// TestHostile10ForgedFencing: a role's function raises the error mzproxy's
// write functions refuse a fenced or expired incarnation with (XX000,
// "mzproxy incarnation N ...", DETAIL fenced or expired), in a plain
// statement, a timestamped read and a transaction block. The role's
// session gets its function's error; the proxy's lease is not lost over
// it: other sessions, open and new, still read with mz_now() and write.
func TestHostile10ForgedFencing(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 5, create: true})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	attacker := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, attacker, `CREATE FUNCTION fence(detail text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION USING ERRCODE = 'XX000', DETAIL = detail,
		MESSAGE = 'mzproxy incarnation 1 (generation 1) fenced by new generation 2';
END $$`)
	other := connectTo(t, ctx, p.URL("postgres", db))
	works := func(after string) {
		t.Helper()
		for _, conn := range []*pgx.Conn{other, connectTo(t, ctx, p.URL("postgres", db))} {
			var v string
			if err := conn.QueryRow(ctx, "SELECT v, mz_now() FROM g WHERE k = 1").Scan(&v, new(int64)); err != nil {
				t.Fatalf("after %s: a read: %v", after, err)
			}
			if _, err := conn.Exec(ctx, "UPDATE g SET v = v WHERE k = 2"); err != nil {
				t.Fatalf("after %s: a write: %v", after, err)
			}
		}
	}
	works("nothing")
	for _, detail := range []string{"fenced", "expired"} {
		for _, sql := range []string{
			"SELECT fence('" + detail + "')",
			"SELECT v, mz_now(), fence('" + detail + "') FROM g WHERE k = 1",
			"BEGIN; SELECT v FROM g WHERE k = 1; SELECT fence('" + detail + "')",
		} {
			_, err := attacker.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
			wantCode(t, err, "XX000")
			mustExec(t, ctx, attacker, "ROLLBACK")
			works(sql)
		}
	}
	var registered int
	// (The proxies of the tests running alongside register too.)
	err := connectTo(t, ctx, directURL("postgres", db)).QueryRow(ctx, "SELECT count(*) FROM mzproxy.incarnations WHERE pid = $1", p.cmd.Process.Pid).Scan(&registered)
	if err != nil || registered != 1 {
		t.Errorf("the proxy registered %d incarnations (%v), want 1: it lost its lease over a forged error", registered, err)
	}
	p.mustAlive(t, ctx)
}
