package integration

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestOutside18ParsedReadStatementDropped: a driver's repeated read with
// a parameter, sent as the unnamed statement's Parse (pgx's exec mode), is
// bound to a statement of the proxy's (mzproxy_read_N) from its second
// use. A client that drops that statement every way it can (DEALLOCATE of
// the name it read from pg_prepared_statements, a protocol Close,
// DEALLOCATE ALL, DISCARD ALL, each simple and extended, in a pipeline
// between reads) gets the right answer at its next reads of the text,
// never 26000; with and without the event loop. A function's DEALLOCATE,
// which the proxy cannot see, cost the loop's next read one 26000 until
// session 22 (the loop now holds the client's ParseComplete until the
// Bind's answer, and a 26000 there gives the read to the session's
// goroutine, which serves it again). On 79addbc the protocol Close failed
// so too.
func TestOutside18ParsedReadStatementDropped(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 20, proxies: [][]string{{"--event-loop=false"}, nil}})
	ctx, role, db := st.ctx, st.role, st.db
	admin := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, admin, `CREATE FUNCTION drop_statement(name text) RETURNS void LANGUAGE plpgsql
		AS $$ BEGIN EXECUTE 'DEALLOCATE ' || quote_ident(name); END $$`)
	drops := map[string]func(conn *pgx.Conn, name string) error{
		"DEALLOCATE": func(conn *pgx.Conn, name string) error {
			_, err := conn.Exec(ctx, "DEALLOCATE "+name, pgx.QueryExecModeSimpleProtocol)
			return err
		},
		"DEALLOCATE, extended": func(conn *pgx.Conn, name string) error {
			_, err := conn.Exec(ctx, "DEALLOCATE "+name, pgx.QueryExecModeExec)
			return err
		},
		"protocol Close": func(conn *pgx.Conn, name string) error { return conn.PgConn().Deallocate(ctx, name) },
		"DEALLOCATE ALL": func(conn *pgx.Conn, _ string) error {
			_, err := conn.Exec(ctx, "DEALLOCATE ALL", pgx.QueryExecModeSimpleProtocol)
			return err
		},
		"DEALLOCATE ALL, extended": func(conn *pgx.Conn, _ string) error {
			_, err := conn.Exec(ctx, "DEALLOCATE ALL", pgx.QueryExecModeExec)
			return err
		},
		"DISCARD ALL": func(conn *pgx.Conn, _ string) error {
			_, err := conn.Exec(ctx, "DISCARD ALL", pgx.QueryExecModeSimpleProtocol)
			return err
		},
		"DISCARD ALL, extended": func(conn *pgx.Conn, _ string) error {
			_, err := conn.Exec(ctx, "DISCARD ALL", pgx.QueryExecModeExec)
			return err
		},
		"a function's DEALLOCATE": func(conn *pgx.Conn, name string) error {
			_, err := conn.Exec(ctx, "SELECT drop_statement('"+name+"')", pgx.QueryExecModeSimpleProtocol)
			return err
		},
		// Mid-stream: in the batch of a read, in front of it.
		"DEALLOCATE ALL in a Query": func(conn *pgx.Conn, _ string) error {
			_, err := conn.PgConn().Exec(ctx, "SELECT 1; DEALLOCATE ALL; SELECT 2").ReadAll()
			return err
		},
		"DEALLOCATE ALL in a pipeline with reads": func(conn *pgx.Conn, _ string) error {
			// One batch, one Sync, every statement the unnamed one.
			b := &pgconn.Batch{}
			const read = "SELECT v, mz_now() > 0 FROM g WHERE k = $1"
			b.ExecParams(read, [][]byte{[]byte("1")}, nil, nil, nil)
			b.ExecParams("DEALLOCATE ALL", nil, nil, nil, nil)
			b.ExecParams(read, [][]byte{[]byte("2")}, nil, nil, nil)
			b.ExecParams(read, [][]byte{[]byte("3")}, nil, nil, nil)
			res, err := conn.PgConn().ExecBatch(ctx, b).ReadAll()
			if err == nil && (len(res) != 4 || len(res[3].Rows) != 1 || string(res[3].Rows[0][0]) != "v3") {
				err = fmt.Errorf("answered %v", res)
			}
			return err
		},
	}
	read := func(conn *pgx.Conn, mode pgx.QueryExecMode, k int) error {
		var v string
		const sql = "SELECT v, mz_now() > 0 FROM g WHERE k = $1"
		if err := conn.QueryRow(ctx, sql, mode, k).Scan(&v, new(bool)); err != nil {
			return fmt.Errorf("%s (k = %d): %w", sql, k, err)
		}
		if v != fmt.Sprintf("v%d", k) {
			return fmt.Errorf("%s (k = %d): %q", sql, k, v)
		}
		return nil
	}
	for i, p := range st.proxies {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe} {
			for what, drop := range drops {
				conn := connectTo(t, ctx, p.URL(role, db))
				for k := 1; k <= 6; k++ {
					if err := read(conn, mode, k); err != nil {
						t.Fatal(err)
					}
				}
				// Only the event loop binds a statement of the proxy's (loop_parse.go).
				var name string
				err := conn.QueryRow(ctx, "SELECT name FROM pg_prepared_statements WHERE name ~ '^mzproxy_read_0_[0-9a-f]{12}$'",
					pgx.QueryExecModeSimpleProtocol).Scan(&name)
				if i == 0 {
					name = "mzproxy_read_0_000000000000"
					_, _ = conn.Exec(ctx, "PREPARE "+name+" AS SELECT 1", pgx.QueryExecModeSimpleProtocol)
				} else if err != nil {
					rows, _ := conn.Query(ctx, "SELECT name || ' ' || statement FROM pg_prepared_statements", pgx.QueryExecModeSimpleProtocol)
					names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
					t.Fatalf("the proxy's statement mzproxy_read_0: %v %q", err, names)
				}
				if err := drop(conn, name); err != nil {
					t.Fatalf("%s of %s: %v", what, name, err)
				}
				for k := 4; k <= 7; k++ {
					if err := read(conn, mode, k); err != nil {
						t.Errorf("proxy %d, %v: after %s of the proxy's %s: %v", i, mode, what, name, err)
					}
				}
				// The pin's statements, forgotten with them, are
				// prepared again too.
				res, err := conn.PgConn().Exec(ctx, "BEGIN; SELECT v FROM g WHERE k = 1; COMMIT").ReadAll()
				if err != nil || len(res) != 3 || len(res[1].Rows) != 1 || string(res[1].Rows[0][0]) != "v1" {
					t.Errorf("proxy %d, %v: a read-only transaction after %s: %v", i, mode, what, err)
				}
				conn.Close(context.Background())
			}
		}
		p.mustAlive(t, ctx)
	}
}

// TestOutside18ResultTypeChangedHolds: a read a client prepared (pgx's
// cache_statement mode: a named statement, with and without the event
// loop) whose table changed shape since fails with the proxy's 0A000
// "cached plan must not change result type", as PostgreSQL's would; the
// read hold the proxy took for it is released with the failed batch, not
// kept until the session ends. The table changes through the proxy, and
// through another (the proxy's catalog seen last is then stale, and the
// read's guard is refused first); and the search_path changes to a schema whose
// table has other columns.
func TestOutside18ResultTypeChangedHolds(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true, proxies: [][]string{
		{"--event-loop=false", "--metrics-listen", "127.0.0.1:0"}, {"--metrics-listen", "127.0.0.1:0"}}})
	ctx, db := st.ctx, st.db
	for i, p := range st.proxies {
		for _, how := range []string{"through the proxy", "through the other proxy", "search_path"} {
			tbl := fmt.Sprintf("t_%d_%s", i, strings.ReplaceAll(how, " ", "_"))
			owner := connectTo(t, ctx, p.URL("postgres", db))
			mustExec(t, ctx, owner, "CREATE TABLE "+tbl+" (k int PRIMARY KEY, v text)", "INSERT INTO "+tbl+" VALUES (1, 'a')")
			if how == "search_path" {
				mustExec(t, ctx, owner, "CREATE SCHEMA IF NOT EXISTS other",
					"CREATE TABLE other."+tbl+" (k int PRIMARY KEY, v text, w int)", "INSERT INTO other."+tbl+" VALUES (1, 'b', 2)")
			}
			conn := connectMode(t, ctx, p.URL("postgres", db), pgx.QueryExecModeCacheStatement)
			read := "SELECT * FROM " + tbl + " WHERE k = $1 AS OF mz_now()"
			for range 4 {
				if _, err := pgxValue(ctx, conn, read, 1); err != nil {
					t.Fatalf("proxy %d: %s: %v", i, read, err)
				}
			}
			p.awaitHolds(t, 0, "before the change")
			switch how {
			case "through the proxy":
				mustExec(t, ctx, owner, "ALTER TABLE "+tbl+" ADD COLUMN w int")
			case "through the other proxy":
				other := connectTo(t, ctx, st.proxies[1-i].URL("postgres", db))
				mustExec(t, ctx, other, "ALTER TABLE "+tbl+" ADD COLUMN w int")
				other.Close(context.Background())
			case "search_path":
				mustExec(t, ctx, conn, "SET search_path = other, public")
			}
			var errs []string
			for n := range 3 {
				if _, err := pgxValue(ctx, conn, read, 1); err != nil {
					errs = append(errs, sqlState(err))
				}
				if n == 0 {
					// The session idles after its first read since the
					// change: it holds nothing.
					p.awaitHolds(t, 0, fmt.Sprintf("proxy %d, %s: after the first read since (failed with %v)", i, how, errs))
				}
			}
			t.Logf("proxy %d, %s: %v", i, how, errs)
			if len(errs) > 1 || len(errs) == 1 && errs[0] != "0A000" {
				t.Errorf("proxy %d, %s: the reads after the change failed with %v, want at most one 0A000", i, how, errs)
			}
			p.awaitHolds(t, 0, fmt.Sprintf("proxy %d, %s: after the reads (failed with %v)", i, how, errs))
			conn.Close(context.Background())
		}
		p.mustAlive(t, ctx)
	}
}

// viewChurnReads is what TestOutside18DriversViewChurn runs through one
// driver: read is a one-row read with one argument ($1), returning its
// value as text. In a database of its own: a view over a table, read four
// times with mz_now() and four times AS OF $1 (so the event loop binds a
// statement of the proxy's for each); the view dropped and created again
// under the same name over another table, never written before, which
// the driver then writes; the same texts read again four times each,
// answering from the new view; a write to the first table is not seen
// AS OF a timestamp read before it.
//
// prepared: the driver keeps its statement prepared across the change,
// whose first read then gets mzproxy's 0A000 (README: a prepared read's
// managed inputs changed), and the next ones answer.
func viewChurnReads(ctx context.Context, prepared bool, exec func(sql string, args ...any) error,
	read func(sql string, arg any) (string, error)) error {
	for _, sql := range []string{
		"CREATE TABLE vc_a (k int PRIMARY KEY, v text)",
		"INSERT INTO vc_a VALUES (1, 'a1'), (2, 'a2')",
		"CREATE VIEW vc AS SELECT k, v FROM vc_a",
	} {
		if err := exec(sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	stamped := "SELECT v || ' ' || (mz_now() > 0)::text FROM vc WHERE k = $1"
	changed := false
	series := func(want1 string) (string, error) {
		for i := range 4 {
			k := 1 + i%2
			v, err := read(stamped, k)
			if changed && prepared && sqlState(err) == "0A000" {
				changed = false
				v, err = read(stamped, k)
			}
			if want := fmt.Sprintf("%s%d true", want1[:1], k); err != nil || v != want {
				return "", fmt.Errorf("read %d of the view, k = %d: %q, %v; want %q", i, k, v, err, want)
			}
		}
		ts, err := read("SELECT mz_now()::text WHERE $1::int > 0", 1)
		if err != nil {
			return "", fmt.Errorf("mz_now(): %w", err)
		}
		for i := range 4 {
			v, err := read("SELECT v FROM vc WHERE k = $1 AS OF "+ts, 1)
			if err != nil || v != want1 {
				return "", fmt.Errorf("AS OF %s read %d: %q, %v; want %q", ts, i, v, err, want1)
			}
		}
		return ts, nil
	}
	ts, err := series("a1")
	if err != nil {
		return err
	}
	for _, sql := range []string{
		"DROP VIEW vc",
		"CREATE TABLE vc_b (k int PRIMARY KEY, v text, w int)",
		"CREATE VIEW vc AS SELECT k, v FROM vc_b",
	} {
		if err := exec(sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	changed = true
	// vc_b's first writes, with arguments.
	for k := 1; k <= 2; k++ {
		if err := exec("INSERT INTO vc_b VALUES ($1, $2, $3)", k, fmt.Sprintf("b%d", k), k); err != nil {
			return fmt.Errorf("the first write of vc_b: %w", err)
		}
	}
	if _, err := series("b1"); err != nil {
		return fmt.Errorf("after the view was created again: %w", err)
	}
	if err := exec("UPDATE vc_a SET v = $1 WHERE k = $2", "changed", 1); err != nil {
		return err
	}
	for i := range 3 {
		v, err := read("SELECT v FROM vc_a WHERE k = $1 AS OF "+ts, 1)
		if err != nil || v != "a1" {
			return fmt.Errorf("vc_a AS OF %s, read %d: %q, %v; want a1", ts, i, v, err)
		}
	}
	return nil
}

// TestOutside18DriversViewChurn: viewChurnReads through lib/pq (Exec and
// Query with arguments, Prepare, and in a transaction) and pgx in each
// exec mode, with the event loop on.
func TestOutside18DriversViewChurn(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	for _, mode := range pgxModes {
		t.Run("pgx "+mode.String(), func(t *testing.T) {
			ctx := testContext(t)
			conn := connectMode(t, ctx, p.URL("postgres", freshDatabase(t, ctx)), mode)
			exec := func(sql string, args ...any) error { _, err := conn.Exec(ctx, sql, args...); return err }
			read := func(sql string, arg any) (string, error) {
				var v string
				err := conn.QueryRow(ctx, sql, arg).Scan(&v)
				return v, err
			}
			if err := viewChurnReads(ctx, mode == pgx.QueryExecModeCacheStatement, exec, read); err != nil {
				t.Error(err)
			}
		})
	}
	for _, how := range []string{"query", "prepare", "tx"} {
		t.Run("lib/pq "+how, func(t *testing.T) {
			ctx := testContext(t)
			db, err := sql.Open("postgres", p.URL("postgres", freshDatabase(t, ctx)))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			exec := func(q string, args ...any) error { _, err := db.ExecContext(ctx, q, args...); return err }
			read := func(q string, arg any) (string, error) {
				var v string
				var err error
				switch how {
				case "query":
					err = db.QueryRowContext(ctx, q, arg).Scan(&v)
				case "prepare":
					var st *sql.Stmt
					if st, err = db.PrepareContext(ctx, q); err == nil {
						err = st.QueryRowContext(ctx, arg).Scan(&v)
						st.Close()
					}
				case "tx":
					var tx *sql.Tx
					if tx, err = db.BeginTx(ctx, nil); err == nil {
						err = tx.QueryRowContext(ctx, q, arg).Scan(&v)
						if cerr := tx.Commit(); err == nil {
							err = cerr
						}
					}
				}
				return v, err
			}
			if err := viewChurnReads(ctx, false, exec, read); err != nil {
				t.Error(err)
			}
		})
	}
	p.awaitHolds(t, 0, "after the reads")
}
