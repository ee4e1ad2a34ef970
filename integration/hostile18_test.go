package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Session 18's hostile user: a role without superuser that may create
// databases, and owns the one it attacks from.

// TestHostile18DatabaseSearchPath: a role with CREATEDB makes a database
// of its own directly and, as its owner, sets the database's search_path
// to a schema of its own ahead of pg_catalog, where its operators and
// functions shadow the built-in ones and, when a superuser runs them,
// make the role a superuser (PostgreSQL's CVE-2018-1058 pattern: the
// setting applies to every role that connects, superusers too). mzproxy's
// own connections (install, catalog, leases, compaction) are a
// superuser's: they must not take that search_path. Through a proxy
// started afterwards the role creates, writes, reads AS OF, and drops
// tables and views, in and out of blocks; none of its functions ever runs
// as anyone but itself, and it is still no superuser. The database's role
// setting (SET role to the owner, which a superuser's session takes too)
// does not make the proxy's own connections the role's.
func TestHostile18DatabaseSearchPath(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	execDirect(t, ctx, "ALTER ROLE "+role+" CREATEDB")
	db := databaseOwnedBy(t, ctx, role)
	attack := []string{
		"CREATE SCHEMA evil",
		"CREATE TABLE evil.calls (who text)",
		"GRANT USAGE ON SCHEMA evil TO PUBLIC",
		"GRANT INSERT ON evil.calls TO PUBLIC",
		// Logs who runs it, and tries to make the role a superuser.
		fmt.Sprintf(`CREATE FUNCTION evil.pwn() RETURNS void LANGUAGE plpgsql AS $$
		BEGIN
			-- (Not in a read-only transaction.)
			BEGIN INSERT INTO evil.calls VALUES (pg_catalog.concat_ws(' ', current_user, session_user, pg_catalog.current_setting('application_name'), pg_catalog.current_setting('search_path'), pg_catalog.left(pg_catalog.current_query(), 200))); EXCEPTION WHEN others THEN NULL; END;
			BEGIN EXECUTE 'ALTER ROLE %s SUPERUSER'; EXCEPTION WHEN others THEN NULL; END;
		END $$`, role),
		`CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
		BEGIN PERFORM evil.pwn(); RETURN pg_catalog.now(); END $$`,
		`CREATE FUNCTION evil.txid_current() RETURNS bigint LANGUAGE plpgsql AS $$
		BEGIN PERFORM evil.pwn(); RETURN pg_catalog.txid_current(); END $$`,
	}
	n := 0
	for _, typ := range []string{"bigint", "integer", "text", "oid", "name", "boolean", "regclass", "smallint"} {
		for _, op := range []string{"=", "<>", "<", ">", "<=", ">="} {
			n++
			attack = append(attack,
				fmt.Sprintf(`CREATE FUNCTION evil.op%d(a %s, b %s) RETURNS boolean LANGUAGE plpgsql AS $$
				BEGIN PERFORM evil.pwn(); RETURN a OPERATOR(pg_catalog.%s) b; END $$`, n, typ, typ, op),
				fmt.Sprintf("CREATE OPERATOR evil.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = evil.op%d)", op, typ, typ, n))
		}
	}
	attack = append(attack, "ALTER DATABASE "+db+" SET search_path = evil, pg_catalog, public",
		// Taken by a superuser's session too: it then runs as the role.
		"ALTER DATABASE "+db+" SET role = "+role)
	mustExec(t, ctx, connectAs(t, ctx, directURL(role, db)), attack...)

	// A proxy started now: its own connections to the database are new.
	p := startProxy(t)
	conn := connectAs(t, ctx, p.URL(role, db))
	mustExec(t, ctx, conn,
		"CREATE TABLE public.t (k int PRIMARY KEY, v int)",
		"INSERT INTO public.t VALUES (1, 1), (2, 2)",
		"UPDATE public.t SET v = v + 1 WHERE k = 1",
		"SELECT * FROM public.t AS OF mz_now()",
		"BEGIN", "SELECT * FROM public.t", "COMMIT",
		"BEGIN", "INSERT INTO public.t VALUES (3, 3)", "DELETE FROM public.t WHERE k = 2", "COMMIT",
		"CREATE VIEW public.tv AS SELECT k FROM public.t",
		"SELECT * FROM public.tv AS OF mz_now()",
		"DROP VIEW public.tv",
		"CREATE TABLE public.u (k int)",
		"INSERT INTO public.u VALUES (1)",
		"DROP TABLE public.u")
	for k := 1; k <= 3; k++ {
		if _, err := conn.Exec(ctx, "SELECT v FROM public.t WHERE k = $1 AS OF mz_now()", k); err != nil {
			t.Fatal(err)
		}
	}
	var ts int64
	if err := conn.QueryRow(ctx, "SELECT mz_now()::text::bigint", pgx.QueryExecModeSimpleProtocol).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	var n3 int
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM public.t AS OF %d", ts), pgx.QueryExecModeSimpleProtocol).Scan(&n3); err != nil || n3 != 2 {
		t.Fatalf("AS OF %d: %d rows, %v", ts, n3, err)
	}
	p.mustAlive(t, ctx)

	admin := connectAs(t, ctx, directURL("postgres", db))
	// The test's own superuser connection must not take the trap either.
	mustExec(t, ctx, admin, "RESET role", "SET search_path = pg_catalog")
	var super bool
	if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1", role).Scan(&super); err != nil {
		t.Fatal(err)
	}
	// who: current_user, session_user, application_name, search_path and
	// the statement.
	rows, err := admin.Query(ctx, "SELECT DISTINCT who FROM evil.calls WHERE who !~ ('^' || $1 || ' ')", role)
	if err != nil {
		t.Fatal(err)
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if super || len(others) > 0 {
		t.Errorf("the database's search_path ran the role's functions as %v; the role is a superuser: %v", others, super)
	}
}

// TestHostile18AsOfParamValues: an ordinary role binds AS OF $1 of a
// repeated read (so the event loop serves it, and binds a statement of
// the proxy's from its second use) to extreme and malformed values of
// every type a driver sends: each read answers rows or an error with a
// SQLSTATE of class 22 (data exception) or 42 (a type AS OF does not
// take), never XX000 or a closed connection, and the session and the
// proxy go on; with and without the event loop. A time past the upper
// waits for it, as in Materialize; such a read is canceled.
func TestHostile18AsOfParamValues(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 3, proxies: [][]string{{"--event-loop=false"}, nil}})
	ctx, role, db := st.ctx, st.role, st.db
	values := []any{
		int64(-9223372036854775808), int64(-1), int64(0),
		int32(2147483647), int16(-32768),
		float64(1e308), float64(-1e308), "infinity", "-infinity", "NaN", "1e400", "",
		"4713-01-01 BC", "now", "epoch", "allballs",
		"9999999999999999999999999999", "-0", "0x10", " 12 ", "12; DROP TABLE g",
		strings.Repeat("9", 10000), nil, true, []byte{0xff, 0xfe},
		time.Date(-4712, 1, 1, 0, 0, 0, 0, time.UTC),
		pgtype.Numeric{NaN: true, Valid: true}, pgtype.Numeric{InfinityModifier: pgtype.Infinity, Valid: true},
	}
	for i, p := range st.proxies {
		modes := []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol}
		if i == 0 {
			modes = modes[:1] // the goroutine's path: no statement of the proxy's
		}
		for _, mode := range modes {
			conn := connectMode(t, ctx, p.URL(role, db), mode)
			var waited []string
			for _, v := range values {
				for range 3 {
					// A time past the upper waits for it, as in Materialize
					// (only far ones are among the values).
					qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					rows, err := conn.Query(qctx, "SELECT v FROM g WHERE k = 1 AS OF $1", v)
					if err == nil {
						for rows.Next() {
						}
						rows.Close()
						err = rows.Err()
					}
					timedOut := qctx.Err() != nil
					cancel()
					code := sqlState(err)
					if timedOut {
						waited = append(waited, fmt.Sprintf("%T %.30v", v, v))
						if conn.IsClosed() {
							conn = connectMode(t, ctx, p.URL(role, db), mode)
						}
						break
					}
					// Below the since: Materialize's XX000 (the error catalog).
					belowSince := code == "XX000" && strings.Contains(err.Error(), "is not valid for all inputs")
					if err != nil && !strings.HasPrefix(code, "22") && !strings.HasPrefix(code, "42") && code != "0A000" && !belowSince {
						if code == "" && strings.Contains(err.Error(), "unable to encode") {
							break // pgx refuses to send it: nothing reached the proxy
						}
						t.Errorf("proxy %d, %v, AS OF %T %.40v: %v", i, mode, v, v, err)
						break
					}
				}
			}
			if len(waited) > 0 {
				t.Errorf("proxy %d, %v: waited for the upper: %q", i, mode, waited)
			}
			var one int
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Errorf("proxy %d, %v: the session after the values: %v", i, mode, err)
			}
			conn.Close(ctx)
		}
		// The farthest time waits for the upper until canceled (pgx's
		// cancel request at its context's end); the proxy goes on.
		conn := connectMode(t, ctx, p.URL(role, db), pgx.QueryExecModeExec)
		qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := conn.Exec(qctx, "SELECT v FROM g WHERE k = 1 AS OF $1", int64(9223372036854775807))
		cancel()
		if err == nil {
			t.Errorf("proxy %d: AS OF the largest bigint answered at once", i)
		}
		p.mustAlive(t, ctx)
	}
}

// TestHostile18PlantedSchema: a role with CREATEDB makes a database of
// its own directly and, before any proxy has served it, makes there a
// schema named as mzproxy's: its "schema_version" a view of a function of
// its own that tries to make the role a superuser. mzproxy's install
// (the backend superuser's connection) read that view to learn the
// installed version, so ran the function as a superuser. Now a proxy
// refuses to install into, or serve, a database whose mzproxy or
// mz_internal schema is not a superuser's: the session fails (42501,
// naming the schema), the role is no superuser, and the proxy serves
// other databases.
func TestHostile18PlantedSchema(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	execDirect(t, ctx, "ALTER ROLE "+role+" CREATEDB")
	p := startProxy(t)
	for _, schema := range []string{"mzproxy", "mz_internal"} {
		db := databaseOwnedBy(t, ctx, role)
		mustExec(t, ctx, connectAs(t, ctx, directURL(role, db)),
			"CREATE SCHEMA "+schema,
			fmt.Sprintf(`CREATE FUNCTION public.pwn() RETURNS int LANGUAGE plpgsql AS $$
			BEGIN
				BEGIN EXECUTE 'ALTER ROLE %s SUPERUSER'; EXCEPTION WHEN others THEN NULL; END;
				RETURN 40;
			END $$`, role),
			"CREATE VIEW "+schema+".schema_version AS SELECT public.pwn() AS version")
		conn, err := pgx.Connect(ctx, p.URL(role, db))
		if err == nil {
			conn.Close(ctx)
			t.Errorf("%s planted: a session through the proxy started", schema)
		} else if code := sqlState(err); code != "42501" || !strings.Contains(err.Error(), schema) {
			t.Errorf("%s planted: the session failed with %v (SQLSTATE %q), want 42501 naming the schema", schema, err, code)
		}
		var super bool
		admin := connectAs(t, ctx, directURL("postgres", "postgres"))
		if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1", role).Scan(&super); err != nil {
			t.Fatal(err)
		}
		if super {
			t.Fatalf("%s planted: the role is a superuser", schema)
		}
		admin.Close(ctx)
	}
	p.mustAlive(t, ctx)
}

// databaseOwnedBy has role (a CREATEDB one) create a database directly, as
// its owner, dropped at the test's end.
func databaseOwnedBy(t *testing.T, ctx context.Context, role string) string {
	t.Helper()
	db := strings.Replace(tableName(t), "t_", "d_", 1)
	owner := connectAs(t, ctx, directURL(role, "postgres"))
	mustExec(t, ctx, owner, "CREATE DATABASE "+db)
	owner.Close(ctx)
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), directURL("postgres", "postgres")); err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			conn.Close(context.Background())
		}
	})
	return db
}
