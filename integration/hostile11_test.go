package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Session 11's hostile user: an ordinary role, through the proxy and
// directly, calls every function and reads every view storage versions 25
// to 29 added or changed, with forged and extreme arguments, while other
// sessions write and read: pin() (view_safe.sql), pin_peek and pin_check
// and the views settled_writes and pin_state that stand in for them
// (pin_views.sql), compact() and register() (view_safe.sql), the history
// trigger's own choice of T (write_lean.sql), ddl_ts and
// plain_column_change with the event triggers that call them
// (ddl_column.sql), and the column changes that take that path with names
// and types chosen to break the ALTER it builds.

// sweepCalls are the attacker's statements and the SQLSTATE each must end
// with ("" for success). DB is replaced with a managed table of the
// attacker's, HIST with its history table.
var sweepCalls = []struct{ sql, code string }{
	{"SELECT mzproxy.pin()", ""},
	{"SELECT mzproxy.pin_peek()", ""},
	{"SELECT mzproxy.pin_check(NULL)", ""},
	{"SELECT mzproxy.pin_check(-1)", ""},
	{"SELECT mzproxy.pin_check(0)", ""},
	{"SELECT mzproxy.pin_check(9223372036854775807)", ""},
	{"SELECT mzproxy.pin_check(mzproxy.pin_peek())", ""},
	{"SELECT * FROM mzproxy.settled_writes", ""},
	{"SELECT * FROM mzproxy.pin_state", ""},
	{"SELECT * FROM mzproxy.settled_pin", ""},
	{"SELECT s.t FROM mzproxy.pin_state s, generate_series(1, 1000)", ""},
	// Locks through the views reach the sequences only in the mode SELECT
	// allows.
	{"BEGIN; LOCK TABLE mzproxy.pin_state IN ACCESS EXCLUSIVE MODE", "42501"},
	{"ROLLBACK", ""},
	{"BEGIN; LOCK TABLE mzproxy.settled_writes IN EXCLUSIVE MODE", "42501"},
	{"ROLLBACK", ""},
	{"SELECT * FROM mzproxy.settled_writes FOR UPDATE", "42501|0A000|42809"},
	{"SELECT mzproxy.compact(0, 1)", "42501"},
	{"SELECT mzproxy.compact(-9223372036854775808, 9223372036854775807)", "42501"},
	{"SELECT * FROM mzproxy.register(9223372036854775807, 0, repeat('x', 100000), -1)", "42501"},
	{"SELECT * FROM mzproxy.register(-1, -9223372036854775808, NULL, NULL)", "42501"},
	{"SELECT mzproxy.ddl_ts()", "42501"},
	{"SELECT mzproxy.plain_column_change(1, 'DB'::regclass, 'pg_catalog.pg_authid')", "42501"},
	{"SELECT mzproxy.plain_column_change(id, oid, 'pg_catalog.pg_authid') FROM mzproxy.catalog", "42501"},
	{"SELECT mzproxy.reconcile(1, 9223372036854775807, false)", "42501"},
	{"SELECT mzproxy.on_ddl_command_end()", "42501|0A000"},
	{"SELECT mzproxy.on_sql_drop()", "42501|0A000"},
	{"SELECT mzproxy.current_write_ts()", "42501"},
	{"UPDATE mzproxy.catalog SET history = 'pg_catalog.pg_authid'", "42501"},
	{"ALTER FUNCTION mzproxy.ddl_ts() SET search_path = public", "42501"},
	// The history trigger with a forged slot: the value looks pending
	// ('0'), stamped, or is garbage.
	{"SET mzproxy.write_ts = '0 0 forged'", ""},
	{"UPDATE DB SET v = 'forged' WHERE k = 1", "42501|MZ002"},
	{"SET mzproxy.write_ts = '9223372036854775807 0 forged'", ""},
	{"INSERT INTO DB VALUES (100, 'forged')", "42501|MZ002"},
	{"SET mzproxy.write_ts = '1 - x'", ""},
	{"DELETE FROM DB", "42501|MZ002"},
	// The event triggers (ddl_ts) with a forged slot.
	{"SET mzproxy.write_ts = '0 0 forged'", ""},
	{"CREATE TABLE forged_t (k int)", "42501"},
	{"ALTER TABLE DB ADD COLUMN forged int", "42501"},
	{"ALTER TABLE DB DROP COLUMN v", "42501"},
	{"SELECT set_config('mzproxy.write_ts', '5 5 forged', false)", ""},
	{"CREATE INDEX ON DB (v)", "42501"},
	{"DROP TABLE DB", "42501"},
	{"RESET mzproxy.write_ts", ""},
	{"UPDATE HIST SET mz_to = 0", "42501"},
	{"DELETE FROM HIST", "42501"},
}

// sweepColumns are the attacker's column changes through the proxy, which
// take plain_column_change's path or fall to reconcile's: each must end as
// PostgreSQL's ALTER would (code "" or its refusal), with the history
// table's columns following, and nothing else run.
var sweepColumns = []struct{ sql, code string }{
	{`ALTER TABLE DB ADD COLUMN "x""; DROP TABLE g; --" int`, ""},
	{`ALTER TABLE DB ADD COLUMN "mz_from" int`, "42939"},
	{`ALTER TABLE DB ADD COLUMN "mz_to" text`, "42939"},
	{`ALTER TABLE DB ADD COLUMN a int, ADD COLUMN "mz_hash" text`, "42939"},
	{`CREATE TYPE "e'); DROP TABLE g; --" AS ENUM ('a')`, ""},
	{`ALTER TABLE DB ADD COLUMN en "e'); DROP TABLE g; --"`, ""},
	{`CREATE TYPE "c, ADD COLUMN owned int" AS (a int)`, ""},
	{`ALTER TABLE DB ADD COLUMN co "c, ADD COLUMN owned int"`, ""},
	{`ALTER TABLE DB DROP COLUMN "x""; DROP TABLE g; --", ADD COLUMN "x""; DROP TABLE g; --" text`, ""},
	{`ALTER TABLE DB DROP COLUMN en, DROP COLUMN co`, ""},
	{`ALTER TABLE DB ADD COLUMN a1 int, ADD COLUMN a2 int`, ""},
	{`ALTER TABLE DB DROP COLUMN a1, ADD COLUMN a3 int8, DROP COLUMN a2`, ""},
}

// TestHostile11StorageSweep runs the sweep, directly and through the proxy,
// in a loop beside a writer and a read-only transaction of other sessions,
// and then checks what must not have happened: a history changed (g's,
// the victim's table, or the attacker's own under forged slots), the read-only transaction's
// timestamp or answers moved, a write of the writer's waited long, the
// attacker became a superuser, or the proxy died.
func TestHostile11StorageSweep(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 5, create: true, proxies: [][]string{nil, nil}})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	admin := connectTo(t, ctx, directURL("postgres", db))
	owner := connectTo(t, ctx, st.url(1, "postgres"))
	mustExec(t, ctx, owner, "CREATE TABLE counter (id int PRIMARY KEY, n bigint)", "INSERT INTO counter VALUES (1, 0)",
		"GRANT SELECT ON counter TO "+role)
	attacker := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, attacker, "CREATE TABLE mine (k int PRIMARY KEY, v text)", "INSERT INTO mine VALUES (1, 'one'), (2, 'two')")
	var gHistory, mineHistory string
	if err := admin.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE oid = 'g'::regclass").Scan(&gHistory); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE oid = 'mine'::regclass").Scan(&mineHistory); err != nil {
		t.Fatal(err)
	}
	historyOf := func(h string) string {
		t.Helper()
		var s string
		if err := admin.QueryRow(ctx, "SELECT coalesce(string_agg(x::text, ';' ORDER BY x::text), '') FROM "+h+" x").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	gBefore, mineBefore := historyOf(gHistory), historyOf(mineHistory)

	// The victims: a read-only transaction at its timestamp, and a writer.
	reader := connectTo(t, ctx, st.url(1, "postgres"))
	mustExec(t, ctx, reader, "BEGIN")
	var readTS string
	var readCounter int64
	if err := reader.QueryRow(ctx, "SELECT mz_now()::text, (SELECT n FROM counter WHERE id = 1)").Scan(&readTS, &readCounter); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked, slowest := 0, time.Duration(0)
	wg.Add(1)
	go func() {
		defer wg.Done()
		writer := connectTo(t, ctx, st.url(1, "postgres"))
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			_, err := writer.Exec(ctx, "UPDATE counter SET n = n + 1 WHERE id = 1")
			mu.Lock()
			if err == nil {
				acked++
			}
			slowest = max(slowest, time.Since(start))
			mu.Unlock()
			if err != nil {
				t.Errorf("the writer: %v", err)
				return
			}
		}
	}()

	attack := func(conn *pgx.Conn, via string) {
		for _, c := range sweepCalls {
			sql := strings.ReplaceAll(strings.ReplaceAll(c.sql, "HIST", mineHistory), "DB", "mine")
			_, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
			if got := sqlState(err); !codeIn(got, c.code) {
				t.Errorf("%s, %s: %v (SQLSTATE %q), want %q", via, sql, err, got, c.code)
			}
		}
	}
	direct := connectTo(t, ctx, directURL(role, db))
	for round := range 3 {
		for _, a := range []struct {
			conn *pgx.Conn
			via  string
		}{{direct, "directly"}, {attacker, "through the proxy"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				attack(a.conn, fmt.Sprintf("%s (round %d)", a.via, round))
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A third session pins as fast as it can meanwhile.
			c := connectTo(t, ctx, directURL(role, db))
			for range 200 {
				if _, err := c.Exec(ctx, "SELECT mzproxy.pin(), mzproxy.pin_check(mzproxy.pin_peek())"); err != nil {
					t.Errorf("pin: %v", err)
					return
				}
			}
		}()
		// The attacks of a round run side by side, the next round after.
		time.Sleep(2 * time.Second)
	}
	// The forged slots wrote nothing (the attacker's own table is written
	// by no one else).
	if after := historyOf(mineHistory); after != mineBefore {
		t.Errorf("the attacker's history changed under forged slots:\n%s\nthen\n%s", mineBefore, after)
	}
	for _, c := range sweepColumns {
		sql := strings.ReplaceAll(c.sql, "DB", "mine")
		_, err := attacker.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
		if got := sqlState(err); !codeIn(got, c.code) {
			t.Errorf("%s: %v (SQLSTATE %q), want %q", sql, err, got, c.code)
		}
		// The history table has the user's columns and its own, no more.
		var extra string
		if err := admin.QueryRow(ctx, `SELECT coalesce(string_agg(h.attname, ', '), '') FROM pg_attribute h
			WHERE h.attrelid = $1::regclass AND h.attnum > 0 AND NOT h.attisdropped
			  AND h.attname NOT IN ('mz_from', 'mz_to', 'mz_hash')
			  AND NOT EXISTS (SELECT 1 FROM pg_attribute u WHERE u.attrelid = 'mine'::regclass AND u.attname = h.attname AND NOT u.attisdropped)`,
			mineHistory).Scan(&extra); err != nil {
			t.Fatal(err)
		}
		if extra != "" {
			t.Errorf("after %s: the history table has columns the table has not: %s", sql, extra)
		}
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	// The read-only transaction kept its timestamp and its answers.
	var ts2 string
	var counter2 int64
	if err := reader.QueryRow(ctx, "SELECT mz_now()::text, (SELECT n FROM counter WHERE id = 1)").Scan(&ts2, &counter2); err != nil {
		t.Fatal(err)
	}
	if ts2 != readTS || counter2 != readCounter {
		t.Errorf("the read-only transaction moved: %s %d, then %s %d", readTS, readCounter, ts2, counter2)
	}
	mustExec(t, ctx, reader, "COMMIT")
	var n int64
	if err := reader.QueryRow(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil || n != int64(acked) {
		t.Errorf("counter %d (%v), %d writes acknowledged", n, err, acked)
	}
	// A write of the writer's may wait for a pin, never for an attacker.
	if slowest > 5*time.Second {
		t.Errorf("the slowest of %d writes took %v", acked, slowest)
	}
	if acked == 0 {
		t.Error("no write landed during the sweep")
	}
	if after := historyOf(gHistory); after != gBefore {
		t.Errorf("g's history changed:\n%s\nthen\n%s", gBefore, after)
	}
	var super bool
	if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = $1", role).Scan(&super); err != nil || super {
		t.Errorf("the attacker is a superuser: %v %v", super, err)
	}
	var g int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM g").Scan(&g); err != nil || g != 5 {
		t.Errorf("g has %d rows (%v)", g, err)
	}
	for _, q := range st.proxies {
		q.mustAlive(t, ctx)
	}
}

// codeIn reports whether SQLSTATE got is one of the codes separated by
// "|" in want (a code ending short matches by prefix: "MZ" is any of
// mzproxy's own).
func codeIn(got, want string) bool {
	if want == "" {
		return got == ""
	}
	for _, w := range strings.Split(want, "|") {
		if got != "" && strings.HasPrefix(got, w) {
			return true
		}
	}
	return false
}
