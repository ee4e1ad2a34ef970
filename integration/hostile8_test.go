package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
