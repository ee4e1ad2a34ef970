package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The trust model (README, Security) played by an ordinary role, through a
// proxy and directly: mzproxy's functions are not PUBLIC's, a write's
// timestamp is the oracle's choice, DDL on a managed table cannot be hidden
// from the event triggers, and RETAIN HISTORY is the owner's.

// publicGrants serializes the tests' GRANTs and REVOKEs on schema public
// of the shared database: PostgreSQL fails one of two concurrent updates of
// the schema's privileges with "tuple concurrently updated" (XX000).
var publicGrants sync.Mutex

// ordinaryRole creates a LOGIN role without superuser that may create
// tables in public, dropped with what it owns when the test ends.
func ordinaryRole(t *testing.T, ctx context.Context) string {
	t.Helper()
	role := strings.Replace(tableName(t), "t_", "r_", 1)
	func() {
		publicGrants.Lock()
		defer publicGrants.Unlock()
		execDirect(t, ctx, fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER; GRANT CREATE ON SCHEMA public TO %s", role, role))
	}()
	t.Cleanup(func() {
		ctx := context.Background()
		publicGrants.Lock()
		defer publicGrants.Unlock()
		if conn, err := pgx.Connect(ctx, directURL("postgres", "postgres")); err == nil {
			conn.Exec(ctx, fmt.Sprintf("DROP OWNED BY %s CASCADE; DROP ROLE %s", role, role))
			conn.Close(ctx)
		}
	})
	return role
}

func connectAs(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// oracleReadTS is the oracle's read timestamp, read directly.
func oracleReadTS(t *testing.T, ctx context.Context, conn *pgx.Conn) int64 {
	t.Helper()
	var ts int64
	if err := conn.QueryRow(ctx, "SELECT mzproxy.read_ts()").Scan(&ts); err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestTrustInternalFunctions: an ordinary role can execute only the few
// functions a client's connection needs, write none of mzproxy's tables,
// and cannot move the timeline, fence the proxies or retire one.
func TestTrustInternalFunctions(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	admin := connectDirect(t, ctx)
	eventually(t, time.Minute, "mzproxy's schema installed", func() bool {
		var v *int64
		err := admin.QueryRow(ctx, "SELECT (SELECT max(version) FROM mzproxy.schema_version) WHERE to_regclass('mzproxy.schema_version') IS NOT NULL").Scan(&v)
		return err == nil && v != nil
	})

	// A managed table, so that its trigger functions are among those checked.
	if _, err := connectAs(t, ctx, p.URL(role, "postgres")).Exec(ctx, "CREATE TABLE "+tableName(t)+" (k int)"); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'mzproxy'::regnamespace AND p.prokind = 'f'
		  AND has_function_privilege($1, p.oid, 'EXECUTE') ORDER BY 1`, role)
	if err != nil {
		t.Fatal(err)
	}
	executable, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{
		"mzproxy.await_slot()", "mzproxy.begin_write()", "mzproxy.begin_write(bigint)",
		"mzproxy.begin_write_occ(bigint,bigint)", "mzproxy.commit_write(bigint)", "mzproxy.commit_write_tx(bigint)",
		"mzproxy.now_ms()", "mzproxy.raise_fenced(bigint)", "mzproxy.read_ts()",
		"mzproxy.set_retention(regclass,bigint)", "mzproxy.type_name(oid,integer)", "mzproxy.view_definition(oid)",
		// Pins of reads of the present, and the write slot after a pinned read.
		"mzproxy.pin()", "mzproxy.pin_held()", "mzproxy.pin_peek()", "mzproxy.pin_check(bigint)", "mzproxy.pinned_writes()", "mzproxy.upper()",
		"mzproxy.open_write_deferred(bigint,bigint)",
		// A table's history built before its first write (checks the
		// caller's rights first).
		"mzproxy.ensure_history(oid[])",
	}
	for _, f := range executable {
		if !slices.Contains(allowed, f) {
			t.Errorf("%s is executable by an ordinary role", f)
		}
	}
	var writable []string
	rows, err = admin.Query(ctx, `SELECT c.oid::regclass::text FROM pg_class c
		WHERE c.relnamespace IN ('mzproxy'::regnamespace, 'mz_internal'::regnamespace) AND c.relkind IN ('r', 'v', 'S')
		  AND (has_table_privilege($1, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
		       OR (c.relname = 'write_key' AND has_table_privilege($1, c.oid, 'SELECT')))`, role)
	if err != nil {
		t.Fatal(err)
	}
	if writable, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	// The gate has no rows: UPDATE on it is what LOCK TABLE needs, which a
	// read-only transaction runs before its snapshot.
	if writable = slices.DeleteFunc(writable, func(r string) bool { return r == "mzproxy.gate" }); len(writable) > 0 {
		t.Errorf("an ordinary role may write (or read the key of) %v", writable)
	}

	attacks := []string{
		"SELECT mzproxy.apply_write(9223372036854775807)",
		"SELECT * FROM mzproxy.register(1000000, 60000, 'attacker', 1)",
		"SELECT mzproxy.deregister(id) FROM mzproxy.incarnations",
		"SELECT mzproxy.begin_write_at(9223372036854775000)",
		"SELECT mzproxy.begin_write_internal(9223372036854775000, NULL)",
		"SELECT mzproxy.write_ts()",
		"SELECT mzproxy.compact(0, 1)",
		"SELECT mzproxy.set_slot(1, NULL)",
	}
	for _, via := range []struct{ name, url string }{{"proxy", p.URL(role, "postgres")}, {"direct", directURL(role, "postgres")}} {
		conn := connectAs(t, ctx, via.url)
		for _, a := range attacks {
			_, err := conn.Exec(ctx, a, pgx.QueryExecModeSimpleProtocol)
			if sqlState(err) != "42501" {
				t.Errorf("%s: %s: %v, want 42501", via.name, a, err)
			}
		}
	}

	// What stays executable cannot push the timeline ahead: a floor far in
	// the future is capped at a second past the oracle's own choice.
	conn := connectAs(t, ctx, directURL(role, "postgres"))
	if _, err := conn.Exec(ctx, "BEGIN; SELECT mzproxy.begin_write_occ(NULL, 9223372036854775000); SELECT mzproxy.commit_write(NULL); COMMIT",
		pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	var upper, now int64
	if err := admin.QueryRow(ctx, "SELECT upper, mzproxy.now_ms() FROM mzproxy.txns").Scan(&upper, &now); err != nil {
		t.Fatal(err)
	}
	if upper > now+60_000 {
		t.Errorf("an ordinary role moved the upper to %d, %d ms past the clock", upper, upper-now)
	}

	// The proxy still serves: registered, not fenced, writes commit.
	tbl := tableName(t)
	app := connectAs(t, ctx, p.URL(role, "postgres"))
	for _, q := range []string{"CREATE TABLE " + tbl + " (k int PRIMARY KEY)", "INSERT INTO " + tbl + " VALUES (1)"} {
		if _, err := app.Exec(ctx, q); err != nil {
			t.Fatalf("%s after the attacks: %v", q, err)
		}
	}
}

// TestTrustForgedWriteTimestamp: mzproxy.write_ts set by the user, through
// the proxy or directly, with a made-up value or one copied from another
// transaction, is refused (42501) and changes no history; the pending
// request set by the user writes at a T the oracle chooses (storage 42);
// mzproxy.in_ddl does not hide DDL from the event triggers.
func TestTrustForgedWriteTimestamp(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	tbl := tableName(t)
	viaProxy := connectAs(t, ctx, p.URL(role, "postgres"))
	direct := connectAs(t, ctx, directURL(role, "postgres"))
	for _, q := range []string{"CREATE TABLE " + tbl + " (k int PRIMARY KEY, v int)", "INSERT INTO " + tbl + " VALUES (1, 1)"} {
		if _, err := viaProxy.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t0 := oracleReadTS(t, ctx, direct)
	asOf := func(ts int64) string {
		t.Helper()
		var got []string
		rows, err := viaProxy.Query(ctx, fmt.Sprintf("SELECT k, v FROM %s ORDER BY k AS OF %d", tbl, ts), pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatalf("AS OF %d: %v", ts, err)
		}
		for rows.Next() {
			var k, v int
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprint(k, "=", v))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, ",")
	}
	before := asOf(t0)

	// A T genuinely chosen in another transaction of the same session
	// (the pending slot is a request, not a credential, since storage 42:
	// its T is chosen, counted and tagged at the write, with the gate
	// held; see below).
	var copied string
	err := pgx.BeginFunc(ctx, direct, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT mzproxy.begin_write_occ(NULL, NULL)"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE "+tbl+" SET v = v"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT current_setting('mzproxy.write_ts')").Scan(&copied)
	})
	if err != nil {
		t.Fatal(err)
	}
	forged := []string{fmt.Sprint(t0 - 500), copied, fmt.Sprintf("%d - %064d", t0-500, 0)}
	writes := []string{"UPDATE " + tbl + " SET v = 99", "INSERT INTO " + tbl + " VALUES (2, 2)", "DELETE FROM " + tbl}
	for _, via := range []struct {
		name string
		conn *pgx.Conn
	}{{"proxy", viaProxy}, {"direct", direct}} {
		for _, value := range forged {
			if _, err := via.conn.Exec(ctx, "SELECT set_config('mzproxy.write_ts', $1, false)", value); err != nil {
				t.Fatal(err)
			}
			for _, w := range writes {
				_, err := via.conn.Exec(ctx, w, pgx.QueryExecModeSimpleProtocol)
				if sqlState(err) != "42501" {
					t.Errorf("%s with mzproxy.write_ts = %q: %s: %v, want 42501", via.name, value, w, err)
				}
			}
			if _, err := via.conn.Exec(ctx, "RESET mzproxy.write_ts"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after := asOf(t0); after != before {
		t.Errorf("AS OF %d changed after the fact: %q, was %q", t0, after, before)
	}

	// The pending request set by the user is what begin_write_occ(NULL,
	// NULL) would give it: the write commits at a T the oracle chose,
	// above every timestamp handed out before, and history below stays.
	for _, via := range []struct {
		name string
		conn *pgx.Conn
	}{{"proxy", viaProxy}, {"direct", direct}} {
		t1 := oracleReadTS(t, ctx, direct)
		if _, err := via.conn.Exec(ctx, "SELECT set_config('mzproxy.write_ts', '0 - pending', false)"); err != nil {
			t.Fatal(err)
		}
		if _, err := via.conn.Exec(ctx, "UPDATE "+tbl+" SET v = v + 1", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Errorf("%s: a write with the pending request set by the user: %v", via.name, err)
		}
		if _, err := via.conn.Exec(ctx, "RESET mzproxy.write_ts"); err != nil {
			t.Fatal(err)
		}
		if after := asOf(t1); after == asOf(oracleReadTS(t, ctx, direct)) {
			t.Errorf("%s: the write is visible at %d, read before it", via.name, t1)
		}
	}
	if after := asOf(t0); after != before {
		t.Errorf("AS OF %d changed after the fact: %q, was %q", t0, after, before)
	}

	// The event triggers' own marker, set by the user, hides nothing.
	if _, err := direct.Exec(ctx, "SET mzproxy.in_ddl = 'on'"); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{"ALTER TABLE " + tbl + " ADD COLUMN w int", "ALTER TABLE " + tbl + " DISABLE TRIGGER ALL", "DROP TABLE " + tbl} {
		_, err := direct.Exec(ctx, ddl)
		wantCode(t, err, "MZ003")
	}

	// Through the proxy, writes go on as before once the setting is gone.
	if _, err := viaProxy.Exec(ctx, "UPDATE "+tbl+" SET v = 2"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if now := asOf(oracleReadTS(t, ctx, direct)); now != "1=2" {
		t.Errorf("after a proxy UPDATE: %q", now)
	}
}

// TestTrustRetentionOwnerOnly: RETAIN HISTORY of a table is changed by its
// owner only, through ALTER TABLE and through set_retention alike.
func TestTrustRetentionOwnerOnly(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t)
	owner, other := ordinaryRole(t, ctx), ordinaryRole(t, ctx)
	tbl := tableName(t)
	ownerConn := connectAs(t, ctx, p.URL(owner, "postgres"))
	for _, q := range []string{
		"CREATE TABLE " + tbl + " (k int) WITH (RETAIN HISTORY FOR '1h')",
		"GRANT ALL ON " + tbl + " TO " + other,
	} {
		if _, err := ownerConn.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	admin := connectDirect(t, ctx)
	retain := func() int64 {
		t.Helper()
		var ms int64
		if err := admin.QueryRow(ctx, `SELECT c.retain_ms FROM mzproxy.collections c JOIN mzproxy.catalog k USING (id)
			WHERE k.oid = $1::regclass AND k.dropped_ts IS NULL`, tbl).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	if ms := retain(); ms != 3_600_000 {
		t.Fatalf("retain_ms %d after CREATE ... RETAIN HISTORY FOR '1h'", ms)
	}

	otherConn := connectAs(t, ctx, p.URL(other, "postgres"))
	_, err := otherConn.Exec(ctx, "ALTER TABLE "+tbl+" SET (RETAIN HISTORY FOR '0s')", pgx.QueryExecModeSimpleProtocol)
	wantCode(t, err, "42501")
	_, err = otherConn.Exec(ctx, "ALTER TABLE "+tbl+" ADD COLUMN x int", pgx.QueryExecModeSimpleProtocol)
	wantCode(t, err, "42501")
	otherDirect := connectAs(t, ctx, directURL(other, "postgres"))
	_, err = otherDirect.Exec(ctx, "BEGIN; SELECT mzproxy.begin_write_occ(NULL, NULL); SELECT mzproxy.set_retention('"+tbl+"', 0); COMMIT",
		pgx.QueryExecModeSimpleProtocol)
	wantCode(t, err, "42501")
	otherDirect.Exec(ctx, "ROLLBACK")
	if ms := retain(); ms != 3_600_000 {
		t.Errorf("retain_ms %d after a non-owner's attempts", ms)
	}

	if _, err := ownerConn.Exec(ctx, "ALTER TABLE "+tbl+" SET (RETAIN HISTORY FOR '2h')", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("owner's ALTER TABLE ... RETAIN HISTORY: %v", err)
	}
	if ms := retain(); ms != 7_200_000 {
		t.Errorf("retain_ms %d after the owner's ALTER", ms)
	}
}

// TestTrustAdvisoryLocks: an ordinary role holding the advisory keys that
// mzproxy used to serialize read holds, registration, compaction and
// installs stalls none of them: mzproxy's locks are row and catalog locks
// only the backend role can take.
func TestTrustAdvisoryLocks(t *testing.T) {
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	squatter := connectAs(t, ctx, directURL(role, "postgres"))
	for _, key := range []int64{7888888888888888801, 7888727027521446243, 30815395836295289} {
		if _, err := squatter.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
			t.Fatal(err)
		}
	}
	admin := connectDirect(t, ctx)
	ranAt := func() time.Time {
		var at *time.Time
		if err := admin.QueryRow(ctx, "SELECT (SELECT ran_at FROM mzproxy.compactor) WHERE to_regclass('mzproxy.compactor') IS NOT NULL").Scan(&at); err != nil || at == nil {
			return time.Time{}
		}
		return *at
	}
	before := ranAt()

	// A new proxy registers (under the hold lock) and serves.
	p := startProxy(t, fastLease...)
	conn := connectAs(t, ctx, p.URL(role, "postgres")+"&options=-c%20statement_timeout%3D20s")
	tbl := tableName(t)
	for _, q := range []string{"CREATE TABLE " + tbl + " (k int) WITH (RETAIN HISTORY FOR '1h')", "INSERT INTO " + tbl + " VALUES (1)"} {
		if _, err := conn.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s while a role holds mzproxy's old advisory keys: %v", q, err)
		}
	}
	var ts int64
	if err := conn.QueryRow(ctx, "SELECT mz_now()", pgx.QueryExecModeSimpleProtocol).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	// A read well below the floor publishes its hold under the hold lock.
	time.Sleep(time.Second)
	var n int
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s AS OF %d", tbl, ts), pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil || n != 1 {
		t.Fatalf("AS OF %d: %d rows, %v", ts, n, err)
	}
	// Compaction rounds go on.
	eventually(t, 30*time.Second, "a compaction round", func() bool { return ranAt().After(before) })
}

// TestTrustDefinerRunsNoUserCode: mzproxy's functions run as the schema's
// owner (a superuser), so none of them may evaluate a role's own code: not
// a domain's CHECK when history stores or converts values, not a cast the
// role created when ALTER COLUMN TYPE converts history. Each statement
// below ran the role's function as the superuser before, which made the
// role a superuser.
func TestTrustDefinerRunsNoUserCode(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	conn := connectAs(t, ctx, p.URL(role, "postgres"))
	run := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	run("CREATE TABLE seen (who text)")
	run(`CREATE FUNCTION escalate() RETURNS bool LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO public.seen VALUES (current_user);
			BEGIN
				EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
			EXCEPTION WHEN insufficient_privilege THEN NULL;
			END;
			RETURN true;
		END $$`)
	run("CREATE DOMAIN checked AS int CHECK (escalate())")
	run("CREATE DOMAIN checked2 AS int CHECK (escalate())")
	run("CREATE TYPE boxed AS (v int)")
	run(`CREATE FUNCTION to_boxed(int) RETURNS boxed LANGUAGE plpgsql AS $$ BEGIN PERFORM escalate(); RETURN ROW($1)::boxed; END $$`)
	run("CREATE CAST (int AS boxed) WITH FUNCTION to_boxed(int)")
	for _, q := range []string{
		"CREATE TABLE d1 (x checked, arr checked[])",
		"INSERT INTO d1 VALUES (1, ARRAY[1, 2])",
		"ALTER TABLE d1 ALTER COLUMN x TYPE checked2",
		"ALTER TABLE d1 ADD COLUMN y checked DEFAULT 5",
		"UPDATE d1 SET x = 2",
		"CREATE TABLE d2 AS SELECT 1::checked AS z",
		"CREATE TABLE c1 (x int)",
		"INSERT INTO c1 VALUES (7)",
		"ALTER TABLE c1 ALTER COLUMN x TYPE boxed USING x::boxed",
	} {
		run(q)
	}
	admin := connectDirect(t, ctx)
	var super bool
	if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = $1", role).Scan(&super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Fatalf("role %s made itself a superuser through mzproxy's functions", role)
	}
	var others []string
	rows, err := admin.Query(ctx, "SELECT DISTINCT who FROM seen WHERE who <> $1", role)
	if err != nil {
		t.Fatal(err)
	}
	if others, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(others) > 0 {
		t.Errorf("the role's function ran as %v", others)
	}
	// The tables are still managed and read back through history.
	var now int64
	if err := conn.QueryRow(ctx, "SELECT mz_now()", pgx.QueryExecModeSimpleProtocol).Scan(&now); err != nil {
		t.Fatal(err)
	}
	var x, y int
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT x, y FROM d1 AS OF %d", now), pgx.QueryExecModeSimpleProtocol).Scan(&x, &y); err != nil || x != 2 || y != 5 {
		t.Errorf("d1 AS OF %d: %d %d %v", now, x, y, err)
	}
}
