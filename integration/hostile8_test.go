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

// Session 8's surfaces played by an attacker from the outside: the
// per-table read-then-write check's marks (proxy/storage/rw_check.sql,
// ddl_lean.sql), the pin riding in front of a read-only transaction's
// first read and the read guard (proxy/pin_read.go, seen_read.go) and
// their prepared statements.

// accTable creates acc (two rows of 100) through conn and returns its oid,
// read directly through admin.
func accTable(t *testing.T, ctx context.Context, conn, admin *pgx.Conn) uint32 {
	t.Helper()
	mustExec(t, ctx, conn, "CREATE TABLE acc (id int PRIMARY KEY, bal int)", "INSERT INTO acc VALUES (1, 100), (2, 100)")
	var oid uint32
	if err := admin.QueryRow(ctx, "SELECT 'acc'::regclass::oid").Scan(&oid); err != nil {
		t.Fatal(err)
	}
	return oid
}

// writeSkew runs the classic write skew through a and b (two sessions
// of the proxy): each reads the sum of acc in a block, then withdraws
// from its own row what the sum allowed; a COMMITs first. b's COMMIT
// must fail with 40001 (a wrote a table b read since b's timestamp), and
// the sum must stay what one of them left.
func writeSkew(t *testing.T, ctx context.Context, a, b *pgx.Conn, what string) {
	t.Helper()
	var before int
	if err := a.QueryRow(ctx, "SELECT sum(bal) FROM acc").Scan(&before); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, c := range []*pgx.Conn{a, b} {
		var sum int
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatalf("%s: BEGIN: %v", what, err)
		}
		if err := c.QueryRow(ctx, "SELECT sum(bal) FROM acc").Scan(&sum); err != nil || sum != before {
			t.Fatalf("%s: the read in the block: %d, %v; want %d", what, sum, err, before)
		}
	}
	mustExec(t, ctx, a, "UPDATE acc SET bal = bal - 10 WHERE id = 1")
	mustExec(t, ctx, b, "UPDATE acc SET bal = bal - 10 WHERE id = 2")
	if _, err := a.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("%s: the first COMMIT: %v", what, err)
	}
	_, err := b.Exec(ctx, "COMMIT")
	if sqlState(err) != "40001" {
		t.Fatalf("%s: the second COMMIT of a write skew: %v, want SQLSTATE 40001", what, err)
	}
	var after int
	if err := a.QueryRow(ctx, "SELECT sum(bal) FROM acc").Scan(&after); err != nil || after != before-10 {
		t.Fatalf("%s: sum %d after the write skew (%v), want %d", what, after, err, before-10)
	}
}

// readThenWrite runs one read-then-write transaction on acc through c and
// returns its COMMIT's error.
func readThenWrite(ctx context.Context, c *pgx.Conn) error {
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		var sum int
		if err := tx.QueryRow(ctx, "SELECT sum(bal) FROM acc").Scan(&sum); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE acc SET bal = bal + 1 WHERE id = 1")
		return err
	})
}

// markAttacks are what an ordinary role runs against the marks of acc
// (oid %[1]d): the marker w<oid>, the check mark c<oid>, the dummy
// relation checking, the view settled_pin and the check's functions.
// Each is refused (the role has no right to any of them) except the
// view, which answers a timestamp or NULL.
var markAttacks = []string{
	"SELECT setval('mzproxy.w%[1]d', 0)",
	"SELECT setval('mzproxy.c%[1]d', 0)",
	"SELECT setval('mzproxy.w%[1]d', 0, false)",
	"SELECT setval('mzproxy.w%[1]d', 9223372036854775807)",
	"SELECT nextval('mzproxy.w%[1]d')",
	"SELECT nextval('mzproxy.c%[1]d')",
	"SELECT pg_sequence_last_value('mzproxy.w%[1]d')",
	"SELECT last_value FROM mzproxy.c%[1]d",
	"ALTER SEQUENCE mzproxy.w%[1]d RESTART",
	"ALTER SEQUENCE mzproxy.c%[1]d MAXVALUE 1",
	"ALTER SEQUENCE mzproxy.w%[1]d RENAME TO x%[1]d",
	"DROP SEQUENCE mzproxy.w%[1]d",
	"DROP SEQUENCE mzproxy.c%[1]d CASCADE",
	"CREATE SEQUENCE mzproxy.sw%[1]d",
	"LOCK TABLE mzproxy.checking",
	"LOCK TABLE mzproxy.checking IN ACCESS SHARE MODE",
	"LOCK TABLE mzproxy.w%[1]d",
	"TRUNCATE mzproxy.checking",
	"DROP TABLE mzproxy.checking",
	"ALTER TABLE mzproxy.checking SET LOGGED",
	"SELECT * FROM mzproxy.checking",
	"SELECT * FROM mzproxy.spare_markers",
	"INSERT INTO mzproxy.spare_markers VALUES ('mzproxy.w%[1]d'::regclass, 'mzproxy.c%[1]d'::regclass)",
	"SELECT mzproxy.mark_written(ARRAY[%[1]d]::oid[])",
	"SELECT mzproxy.mark_written(NULL)",
	"SELECT mzproxy.check_reads(9223372036854775807, 0)",
	"SELECT mzproxy.check_reads(NULL, NULL)",
	"SELECT mzproxy.check_reads(-1, -9223372036854775808)",
	"SELECT mzproxy.raise_read_later(%[1]d, 0)",
	"SELECT mzproxy.make_marker(%[1]d)",
	"SELECT mzproxy.make_marker(0)",
	"SELECT mzproxy.retire_marker(%[1]d)",
	"SELECT mzproxy.take_spare_marker(%[1]d)",
	"SELECT mzproxy.stamp_ts(%[1]d)",
	"SELECT mzproxy.fix_write()",
}

// TestHostile8MarkSequences: an ordinary role, directly and through the
// proxy, runs markAttacks against another role's table, each in a block
// of its own left open while another role's write skew runs. None
// succeeds, the marks keep their values, the write skew still fails its
// second COMMIT, plain read-then-write transactions still commit, and the
// role gains no right on mzproxy's relations or functions.
func TestHostile8MarkSequences(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	admin := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, admin, "GRANT CREATE ON SCHEMA public TO "+role)
	owner := connectTo(t, ctx, p.URL("postgres", db))
	oid := accTable(t, ctx, owner, admin)
	victimA, victimB := connectTo(t, ctx, p.URL("postgres", db)), connectTo(t, ctx, p.URL("postgres", db))
	writeSkew(t, ctx, victimA, victimB, "before the attacks")
	rights := func() string {
		var s string
		if err := admin.QueryRow(ctx, `SELECT string_agg(c.relname || ':' || has_table_privilege($1, c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE'), ',' ORDER BY c.relname)
			|| ' ' || (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'mzproxy'::regnamespace AND has_function_privilege($1, p.oid, 'EXECUTE'))
			FROM pg_class c WHERE c.relnamespace = 'mzproxy'::regnamespace`, role).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	marks := func() string {
		var s string
		if err := admin.QueryRow(ctx, fmt.Sprintf("SELECT (SELECT last_value || ' ' || is_called FROM mzproxy.w%d) || ' ' || (SELECT last_value || ' ' || is_called FROM mzproxy.c%d)", oid, oid)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	rightsBefore := rights()

	for _, via := range []struct{ name, url string }{{"direct", directURL(role, db)}, {"proxy", p.URL(role, db)}} {
		attacker := connectTo(t, ctx, via.url)
		for _, a := range markAttacks {
			sql := fmt.Sprintf(a, oid)
			if _, err := attacker.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			before := marks()
			_, err := attacker.Exec(ctx, sql)
			if code := sqlState(err); code == "" || code == "XX000" {
				t.Errorf("%s: %s: %v, want it refused", via.name, sql, err)
			}
			if after := marks(); after != before {
				t.Errorf("%s: %s changed acc's marks from %q to %q", via.name, sql, before, after)
			}
			// Left open (failed) while the victims run.
			writeSkew(t, ctx, victimA, victimB, via.name+": "+sql)
			if _, err := attacker.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
		}
		var v *int64
		if err := attacker.QueryRow(ctx, "SELECT t FROM mzproxy.settled_pin").Scan(&v); err != nil {
			t.Fatalf("%s: settled_pin: %v", via.name, err)
		}
		if v != nil && (*v < 1_000_000_000_000 || *v > time.Now().UnixMilli()+60_000) {
			t.Errorf("%s: settled_pin answered %d", via.name, *v)
		}
	}
	if err := readThenWrite(ctx, victimA); err != nil {
		t.Fatalf("a read-then-write transaction after the attacks: %v", err)
	}
	if got := rights(); got != rightsBefore {
		t.Errorf("the role's rights on mzproxy's relations and functions: %s, before %s", got, rightsBefore)
	}
}

// TestHostile8ForgedWriteInProgress: a role with no right on acc holds,
// directly, the locks a write in progress holds (ROW EXCLUSIVE on acc, a
// lock on mzproxy.gate) taken by parse analysis alone (PREPARE checks no
// right), and idles. It stalls nothing, so nothing bounds it but
// idle_in_transaction_session_timeout; it must not make every
// read-then-write transaction on acc fail with 40001 meanwhile (the check
// took any lock on the gate for a writer's). A real write in progress
// still fails such a transaction.
func TestHostile8ForgedWriteInProgress(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	admin := connectTo(t, ctx, directURL("postgres", db))
	victim := connectTo(t, ctx, p.URL("postgres", db))
	accTable(t, ctx, victim, admin)
	attacker := connectTo(t, ctx, directURL(role, db))
	var writable bool
	if err := admin.QueryRow(ctx, "SELECT has_table_privilege($1, 'acc', 'INSERT,UPDATE,DELETE,TRUNCATE')", role).Scan(&writable); err != nil || writable {
		t.Fatalf("the role may write acc (%v, %v)", writable, err)
	}
	mustExec(t, ctx, attacker, "BEGIN",
		"PREPARE forged_write AS INSERT INTO acc VALUES (3, 0)",
		"PREPARE forged_gate AS SELECT FROM mzproxy.gate")
	var held int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE a.usename = $1 AND l.relation IN ('acc'::regclass, 'mzproxy.gate'::regclass)`, role).Scan(&held); err != nil || held != 2 {
		t.Fatalf("the role holds %d of the two locks (%v)", held, err)
	}
	for i := range 3 {
		if err := readThenWrite(ctx, victim); err != nil {
			t.Fatalf("read-then-write transaction %d while a role idles with forged locks: %v", i, err)
		}
	}
	mustExec(t, ctx, attacker, "ROLLBACK")
	other := connectTo(t, ctx, p.URL("postgres", db))
	writeSkew(t, ctx, victim, other, "after the forged locks")
}

// guardStep is one exchange of a guardScript: a simple Query (sql), or an
// extended-protocol batch of several statements ending in one Sync
// (batch), or a Parse of a named statement (prepare: name, sql), or a
// Close of one (closeStmt), or an Execute of one (execute).
type guardStep struct {
	sql       string
	batch     []string
	prepare   string
	closeStmt string
	execute   string
}

// transcript runs steps on conn and returns what each answered: rows as
// text, "ERROR <SQLSTATE>" for an error. A broken connection fails the
// test. direct: conn is PostgreSQL's, where a Query's reads AS OF
// mz_now() are plain reads.
func transcript(t *testing.T, ctx context.Context, conn *pgx.Conn, steps []guardStep, direct bool, effects func() string) []string {
	t.Helper()
	pc := conn.PgConn()
	var out []string
	note := func(results []*pgconn.Result, err error) {
		for _, r := range results {
			if r.Err != nil {
				continue
			}
			var rows []string
			for _, row := range r.Rows {
				var cols []string
				for _, c := range row {
					cols = append(cols, string(c))
				}
				rows = append(rows, strings.Join(cols, "|"))
			}
			out = append(out, r.CommandTag.String()+" "+strings.Join(rows, ","))
		}
		if err != nil {
			if sqlState(err) == "" {
				t.Fatalf("the connection broke: %v", err)
			}
			out = append(out, "ERROR "+sqlState(err))
		}
	}
	for _, s := range steps {
		switch {
		case s.batch != nil:
			b := &pgconn.Batch{}
			for _, q := range s.batch {
				b.ExecParams(q, nil, nil, nil, nil)
			}
			note(pc.ExecBatch(ctx, b).ReadAll())
		case s.prepare != "":
			_, err := pc.Prepare(ctx, s.prepare, s.sql, nil)
			note(nil, err)
		case s.closeStmt != "":
			note(nil, pc.Deallocate(ctx, s.closeStmt))
		case s.execute != "":
			r := pc.ExecPrepared(ctx, s.execute, nil, nil, nil).Read()
			note([]*pgconn.Result{r}, r.Err)
		case direct:
			// PostgreSQL's own equivalent of a read of the present.
			note(pc.Exec(ctx, strings.ReplaceAll(s.sql, " AS OF mz_now()", "")).ReadAll())
		default:
			note(pc.Exec(ctx, s.sql).ReadAll())
		}
		out = append(out, effects())
	}
	return out
}

// q is a guardStep of one simple Query.
func q(sql string) guardStep { return guardStep{sql: sql} }

// TestHostile8GuardNames: a client that uses the names of the proxy's
// prepared statements (the pin's guard and raise, the read guard) for its
// own, drops them (DEALLOCATE, DEALLOCATE ALL, DISCARD ALL, a protocol
// Close) between transactions and between the statements of one, changes
// the settings the guard checks through a function the proxy cannot see
// or with SET LOCAL before the first read, and sends the first read as a
// multi-statement Query or a pipelined batch of several Executes, with
// volatile first reads. Each script answers through the proxy exactly
// what it answers directly, and runs each nextval as often.
func TestHostile8GuardNames(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup,
		"CREATE TABLE g (k int PRIMARY KEY, v text)", "INSERT INTO g VALUES (1, 'public')",
		"CREATE SCHEMA other", "CREATE TABLE other.g (k int PRIMARY KEY, v text)", "INSERT INTO other.g VALUES (1, 'other')",
		"CREATE SEQUENCE fx",
		`CREATE FUNCTION unseen(name text, value text) RETURNS text LANGUAGE plpgsql AS $$
		 BEGIN PERFORM pg_catalog.set_config(name, value, false); RETURN value; END $$`,
		`CREATE FUNCTION bump() RETURNS bigint LANGUAGE sql AS $$ SELECT nextval('fx') $$`)
	admin := connectTo(t, ctx, directURL("postgres", db))
	// Unmanaged (made directly, no history): a function's own write.
	mustExec(t, ctx, admin, "CREATE TABLE fx_log (n bigint)",
		`CREATE FUNCTION logged() RETURNS bigint LANGUAGE sql AS $$ INSERT INTO fx_log SELECT nextval('fx') RETURNING n $$`)
	scripts := guardScripts()
	// side effects: how often nextval ran, and how often logged() wrote,
	// since the script began.
	side := func() (int64, int64) {
		var n, logged int64
		if err := admin.QueryRow(ctx, "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM fx), (SELECT count(*) FROM fx_log)").Scan(&n, &logged); err != nil {
			t.Fatal(err)
		}
		return n, logged
	}
	// The event loop forwards a session's reads itself (frontend/evloop).
	loop := startProxy(t, "--event-loop")
	for _, proxy := range []*proxyProc{p, loop} {
		for name, steps := range scripts {
			if proxy == loop {
				name += " (event loop)"
			}
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
				var answers [2][]string
				for i, url := range []string{directURL("postgres", db), proxy.URL("postgres", db)} {
					conn := connectTo(t, ctx, url)
					n0, l0 := side()
					answers[i] = transcript(t, ctx, conn, steps, i == 0, func() string {
						n, l := side()
						return fmt.Sprintf("  (nextval ran %d times, %d logged)", n-n0, l-l0)
					})
					conn.Close(ctx)
				}
				if d, px := strings.Join(answers[0], "\n"), strings.Join(answers[1], "\n"); d != px {
					t.Errorf("directly:\n%s\nthrough the proxy:\n%s", d, px)
				}
			})
		}
	}
	t.Run("characteristics changed unseen", func(t *testing.T) {
		unseenCharacteristics(t, ctx, p.URL("postgres", db), side)
	})
	t.Run("characteristics changed unseen (event loop)", func(t *testing.T) {
		unseenCharacteristics(t, ctx, loop.URL("postgres", db), side)
	})
	p.mustAlive(t, ctx)
	loop.mustAlive(t, ctx)
}

// guardScripts are TestHostile8GuardNames' scripts, by what they do, on
// the tables g (public.g and other.g), the sequence fx and the functions
// unseen (a set_config the proxy cannot see), bump (nextval) and logged
// (nextval written to a table).
func guardScripts() map[string][]guardStep {
	read := "SELECT v FROM g WHERE k = 1"
	ro := "BEGIN; " + read + "; COMMIT"
	return map[string][]guardStep{
		"PREPARE the names first": {
			q("PREPARE mzproxy_pin_guard AS SELECT 'mine1'"), q("PREPARE mzproxy_read_guard AS SELECT 'mine2'"),
			q("PREPARE mzproxy_pin_raise AS SELECT 'mine3'"), q("PREPARE mzproxy_pin_check AS SELECT 'mine4'"),
			q("BEGIN"), q(read), q("COMMIT"), q("SELECT v FROM g AS OF mz_now()"),
			q("EXECUTE mzproxy_pin_guard"), q("EXECUTE mzproxy_read_guard"), q("EXECUTE mzproxy_pin_raise"), q("EXECUTE mzproxy_pin_check"),
			q(ro), q("EXECUTE mzproxy_pin_guard"),
		},
		"Parse the names first": {
			{prepare: "mzproxy_pin_guard", sql: "SELECT 'mine1'"}, {prepare: "mzproxy_read_guard", sql: "SELECT 'mine2'"},
			{prepare: "mzproxy_pin_raise", sql: "SELECT 'mine3'"},
			q(ro), q("SELECT v FROM g AS OF mz_now()"),
			{execute: "mzproxy_pin_guard"}, {execute: "mzproxy_read_guard"}, {execute: "mzproxy_pin_raise"},
		},
		"PREPARE the names after the proxy": {
			q(ro), q("SELECT v FROM g AS OF mz_now()"),
			q("PREPARE mzproxy_pin_guard AS SELECT 'mine1'"), q("PREPARE mzproxy_read_guard AS SELECT 'mine2'"),
			q("EXECUTE mzproxy_pin_guard"), q("EXECUTE mzproxy_read_guard"), q(ro), q("SELECT v FROM g AS OF mz_now()"),
		},
		"dropped between transactions": {
			q(ro), q("SELECT v FROM g AS OF mz_now()"),
			q("DEALLOCATE mzproxy_pin_guard"), q(ro), q("DEALLOCATE mzproxy_read_guard"), q("SELECT v FROM g AS OF mz_now()"),
			q("DEALLOCATE ALL"), q(ro), q("SELECT v FROM g AS OF mz_now()"),
			q("DISCARD ALL"), q(ro), q("SELECT v FROM g AS OF mz_now()"),
			{closeStmt: "mzproxy_pin_guard"}, {closeStmt: "mzproxy_pin_raise"}, q(ro),
			{closeStmt: "mzproxy_read_guard"}, q("SELECT v FROM g AS OF mz_now()"),
		},
		"dropped inside a transaction": {
			q(ro), q("BEGIN"), q(read), q("DEALLOCATE ALL"), q(read), q("COMMIT"), q(ro),
			q("BEGIN"), q(read), {closeStmt: "mzproxy_pin_guard"}, q(read), q("COMMIT"), q(ro),
			q("BEGIN; " + read + "; DEALLOCATE ALL; " + read + "; COMMIT"), q(ro),
		},
		"search_path changed unseen": {
			q(ro), q("SELECT unseen('search_path', 'other, public')"), q(ro), q("BEGIN"), q(read), q("COMMIT"),
			q("BEGIN"), {batch: []string{read, read}}, q("COMMIT"), q("SELECT unseen('search_path', 'public')"), q(ro),
		},
		"SET LOCAL before the first read": {
			q(ro), q("BEGIN"), q("SET LOCAL search_path = other"), q(read), q("COMMIT"), q(ro),
			q("BEGIN; SET LOCAL search_path = other; " + read + "; COMMIT"), q(ro),
			q("BEGIN"), q("SET LOCAL transaction_read_only = on"), q(read), q("SHOW transaction_read_only"), q("COMMIT"),
			q("BEGIN"), q("SET LOCAL transaction_isolation = 'serializable'"), q(read), q("SHOW transaction_isolation"), q("COMMIT"),
		},
		"volatile first reads": {
			q(ro), q("BEGIN"), q("SELECT nextval('fx') > 0"), q("COMMIT"),
			q("BEGIN"), q("SELECT bump() > 0, v FROM g"), q("COMMIT"),
			q("BEGIN"), q("SELECT logged() > 0"), q("COMMIT"),
			q("BEGIN"), q("SELECT nextval('fx') > 0; SELECT nextval('fx') > 0, v FROM g"), q("COMMIT"),
			q("BEGIN"), q("SELECT logged() > 0; SELECT bump() > 0; " + read), q("COMMIT"),
			q("SELECT unseen('search_path', 'other, public')"),
			q("BEGIN"), q("SELECT nextval('fx') > 0, v FROM g"), q("COMMIT"),
			q("SELECT unseen('search_path', 'public')"),
			q("BEGIN READ ONLY"), q("SELECT nextval('fx')"), q("ROLLBACK"),
		},
		"pipelined first reads": {
			q(ro), q("BEGIN"), {batch: []string{read, "SELECT nextval('fx') > 0", "SELECT logged() > 0", read}}, q("COMMIT"),
			q("BEGIN"), {batch: []string{"SELECT bump() > 0", read, "SELECT bump() > 0"}}, q("COMMIT"),
			q("SELECT unseen('search_path', 'other, public')"),
			q("BEGIN"), {batch: []string{"SELECT nextval('fx') > 0, v FROM g", read}}, q("COMMIT"),
			q("DISCARD ALL"), q("BEGIN"), {batch: []string{"SELECT nextval('fx') > 0", read}}, q("COMMIT"),
			q("BEGIN"), {batch: []string{"SELECT 1/0", "SELECT nextval('fx') > 0"}}, q("ROLLBACK"),
		},
	}
}

// unseenCharacteristics: a function the proxy cannot see changes what a
// plain BEGIN gives (default_transaction_isolation, _read_only), or the
// level inside a block after its first statement. The next transaction's
// first read, a volatile one, in a Query or a pipelined batch, fails with
// 40001 as the README says (the characteristics changed unseen), or with
// PostgreSQL's own 25001 for the level set after the first statement; run
// again, it answers what PostgreSQL does. nextval runs once per read
// answered, never for a refused one.
func unseenCharacteristics(t *testing.T, ctx context.Context, url string, side func() (int64, int64)) {
	conn := connectTo(t, ctx, url)
	// nextval only where the transaction may run it (not READ ONLY).
	first := `SELECT CASE WHEN current_setting('transaction_read_only') = 'off' THEN nextval('fx') > 0 ELSE true END,
		v, current_setting('transaction_isolation'), current_setting('transaction_read_only') FROM g`
	for _, c := range []struct{ setting, value, isolation, readOnly string }{
		{"default_transaction_isolation", "serializable", "serializable", "off"},
		{"default_transaction_read_only", "on", "serializable", "on"},
		{"default_transaction_isolation", "read committed", "repeatable read", "on"},
		{"default_transaction_read_only", "off", "repeatable read", "off"},
	} {
		for _, batch := range []bool{false, true} {
			mustExec(t, ctx, conn, fmt.Sprintf("SELECT unseen('%s', '%s')", c.setting, c.value))
			want := fmt.Sprintf("t|public|%s|%s", c.isolation, c.readOnly)
			for attempt := 0; ; attempt++ {
				n0, _ := side()
				steps := []guardStep{q("BEGIN"), q(first)}
				if batch {
					steps[1] = guardStep{batch: []string{first}}
				}
				got := transcript(t, ctx, conn, steps, false, func() string { return "" })
				mustExec(t, ctx, conn, "ROLLBACK")
				n1, _ := side()
				runs := int64(1)
				if c.readOnly == "on" {
					runs = 0
				}
				switch {
				case got[2] == "SELECT 1 "+want && n1-n0 == runs:
				case got[2] == "ERROR 40001" && n1 == n0 && attempt == 0:
					continue
				default:
					t.Fatalf("%s = %s unseen, attempt %d (batch %v): %q, nextval ran %d times; want %q once",
						c.setting, c.value, attempt, batch, got[2], n1-n0, want)
				}
				break
			}
		}
	}
	// The level set inside the block after its first statement: PostgreSQL
	// takes it (the statement took no snapshot of its own yet); the
	// proxy's first statement has pinned REPEATABLE READ, so the level
	// cannot change, and the client gets PostgreSQL's error for that.
	got := transcript(t, ctx, conn, []guardStep{q("BEGIN"), q("SELECT unseen('transaction_isolation', 'read committed')")}, false, func() string { return "" })
	mustExec(t, ctx, conn, "ROLLBACK")
	if got[2] != "ERROR 25001" {
		t.Errorf("the level changed by the block's first statement: %q, want ERROR 25001", got[2])
	}
}

// ownStatementName is the name of the proxy's prepared statement base
// (its name without the per-process suffix) on conn's backend connection,
// read from pg_prepared_statements.
func ownStatementName(t *testing.T, ctx context.Context, conn *pgx.Conn, base string) string {
	t.Helper()
	var name string
	if err := conn.QueryRow(ctx, "SELECT name FROM pg_prepared_statements WHERE name ~ ('^' || $1 || '_[0-9a-f]{12}$')",
		pgx.QueryExecModeSimpleProtocol, base).Scan(&name); err != nil {
		t.Fatalf("the proxy's statement %s: %v", base, err)
	}
	return name
}

// TestHostile8SpareMarkerLocks: a role with no right on mzproxy's schema
// holds, directly, ACCESS SHARE locks on the spare marks DROP TABLE left
// (taken by PREPARE alone, which checks no right), and idles. Another
// role's CREATE TABLE through the proxy, which takes a spare pair and
// renames it (ACCESS EXCLUSIVE), must not wait for it: PostgreSQL's CREATE
// TABLE waits for no one's lock on an unrelated relation. The new table
// gets its marks, and the write skew check works on it.
func TestHostile8SpareMarkerLocks(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	owner := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, owner, "CREATE TABLE gone1 (k int)", "CREATE TABLE gone2 (k int)", "DROP TABLE gone1", "DROP TABLE gone2")
	attacker := connectTo(t, ctx, directURL(role, db))
	rows, err := attacker.Query(ctx, `SELECT 'mzproxy.' || quote_ident(relname) FROM pg_class
		WHERE relnamespace = 'mzproxy'::regnamespace AND relname ~ '^s[wc][0-9]+$'`)
	if err != nil {
		t.Fatal(err)
	}
	spares, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(spares) != 4 {
		t.Fatalf("spare marks %v (%v), want two pairs", spares, err)
	}
	mustExec(t, ctx, attacker, "BEGIN")
	for i, s := range spares {
		mustExec(t, ctx, attacker, fmt.Sprintf("PREPARE held%d AS SELECT * FROM %s", i, s))
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := owner.Exec(cctx, "CREATE TABLE acc (id int PRIMARY KEY, bal int)"); err != nil {
		t.Fatalf("CREATE TABLE while a role holds locks on the spare marks: %v after %v", err, time.Since(start))
	}
	t.Logf("CREATE TABLE took %v", time.Since(start))
	mustExec(t, ctx, owner, "INSERT INTO acc VALUES (1, 100), (2, 100)")
	writeSkew(t, ctx, owner, connectTo(t, ctx, p.URL("postgres", db)), "on the table created meanwhile")
	mustExec(t, ctx, attacker, "ROLLBACK")
	var marks int
	admin := connectTo(t, ctx, directURL("postgres", db))
	if err := admin.QueryRow(ctx, "SELECT (to_regclass('mzproxy.w' || 'acc'::regclass::oid) IS NOT NULL)::int + (to_regclass('mzproxy.c' || 'acc'::regclass::oid) IS NOT NULL)::int").Scan(&marks); err != nil || marks != 2 {
		t.Fatalf("acc has %d of its two marks (%v)", marks, err)
	}
}

// TestHostile8CheckingLocked: a role with no right on mzproxy.checking
// holds, directly, the strongest locks parse analysis takes on it without
// a right (ROW SHARE by PREPARE ... FOR UPDATE, ROW EXCLUSIVE by PREPARE
// INSERT), and idles. The per-table check of another role's read-then-write
// transaction locks checking to raise its marks: its COMMIT must not wait
// for the role, and a write skew still fails.
func TestHostile8CheckingLocked(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	admin := connectTo(t, ctx, directURL("postgres", db))
	victim := connectTo(t, ctx, p.URL("postgres", db))
	accTable(t, ctx, victim, admin)
	for _, hold := range []string{
		"PREPARE held AS SELECT FROM mzproxy.checking FOR UPDATE",
		"PREPARE held AS INSERT INTO mzproxy.checking DEFAULT VALUES",
	} {
		attacker := connectTo(t, ctx, directURL(role, db))
		mustExec(t, ctx, attacker, "BEGIN", hold)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		err := readThenWrite(cctx, victim)
		cancel()
		if err != nil {
			t.Fatalf("a read-then-write transaction while a role idles after %q: %v after %v", hold, err, time.Since(start))
		}
		writeSkew(t, ctx, victim, connectTo(t, ctx, p.URL("postgres", db)), "while a role holds "+hold)
		mustExec(t, ctx, attacker, "ROLLBACK")
		attacker.Close(ctx)
	}
}

// TestHostile8WriteKindsMarked: every way a client writes a managed table
// through the proxy marks it: a transaction that read acc at its
// timestamp and then writes another table fails its COMMIT with 40001
// when acc was changed since by any of these, autocommit (both
// protocols, COPY, MERGE, upsert, a writing CTE) or in a block. (TRUNCATE
// waits for the reader's lock, as directly.)
func TestHostile8WriteKindsMarked(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	url := p.URL("postgres", db)
	reader, writer := connectTo(t, ctx, url), connectTo(t, ctx, url)
	mustExec(t, ctx, writer, "CREATE TABLE acc (id int PRIMARY KEY, bal int)", "INSERT INTO acc VALUES (1, 100), (2, 100)",
		"CREATE TABLE other (n int)", "INSERT INTO other VALUES (0)")
	copyRow := func(ctx context.Context) error {
		_, err := writer.PgConn().CopyFrom(ctx, strings.NewReader("77\t1\n"), "COPY acc FROM STDIN")
		return err
	}
	writes := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"UPDATE", execFn(writer, "UPDATE acc SET bal = bal + 1 WHERE id = 1")},
		{"INSERT", execFn(writer, "INSERT INTO acc VALUES (3, 0)")},
		{"DELETE", execFn(writer, "DELETE FROM acc WHERE id = 3")},
		{"upsert", execFn(writer, "INSERT INTO acc VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET bal = acc.bal + 1")},
		{"MERGE", execFn(writer, "MERGE INTO acc a USING (VALUES (2)) v(id) ON a.id = v.id WHEN MATCHED THEN UPDATE SET bal = a.bal + 1")},
		{"CTE", execFn(writer, "WITH u AS (UPDATE acc SET bal = bal + 1 WHERE id = 2 RETURNING id) SELECT count(*) FROM u")},
		{"COPY", copyRow},
		{"DELETE the copied row", execFn(writer, "DELETE FROM acc WHERE id = 77")},
		{"extended UPDATE", func(ctx context.Context) error {
			_, err := writer.Exec(ctx, "UPDATE acc SET bal = bal + $1 WHERE id = 1", pgx.QueryExecModeCacheStatement, 1)
			return err
		}},
		{"block UPDATE", execFn(writer, "BEGIN; UPDATE acc SET bal = bal + 1 WHERE id = 1; COMMIT")},
		{"block read then UPDATE", execFn(writer, "BEGIN; SELECT 1 FROM other; UPDATE acc SET bal = bal + 1 WHERE id = 2; COMMIT")},
		{"block INSERT then DELETE", execFn(writer, "BEGIN; INSERT INTO acc VALUES (4, 0); DELETE FROM acc WHERE id = 4; COMMIT")},
	}
	for _, w := range writes {
		mustExec(t, ctx, reader, "BEGIN")
		var sum int
		if err := reader.QueryRow(ctx, "SELECT sum(bal) FROM acc").Scan(&sum); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := w.run(wctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		mustExec(t, ctx, reader, "UPDATE other SET n = n + 1")
		_, err = reader.Exec(ctx, "COMMIT")
		if sqlState(err) != "40001" {
			t.Errorf("%s since the read: the reader's COMMIT %v, want SQLSTATE 40001", w.name, err)
		}
	}
}

// execFn runs sql on conn as one simple Query.
func execFn(conn *pgx.Conn, sql string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := conn.PgConn().Exec(ctx, sql).ReadAll()
		return err
	}
}
