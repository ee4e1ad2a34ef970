package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"
)

// literalConds are WHERE conditions in pairs and runs that differ only in
// their literals' spellings (what the Go scanner, the fingerprint and the
// literal plans of a timestamped read must tell apart): 1e5 then 1e6, 'x'
// then E'x', -1 then - 1, ...; U&'...' is one the Go scanner leaves to
// pg_query.
var literalConds = []string{
	"a = 1e5", "a = 1e6", "a = 100000",
	"b = 'x'", "b = E'x'", "b = E'x\\n'", "b = 'x\n'", "b = 'x' \n 'y'", "b = E'it\\'s'",
	"a = -1", "a = - 1", "a = -2", "a = - -1",
	"a = 00012", "a = 12.0", "a = .5", "a = 5.", "a = 1.5e-3", "a = 0.0015",
	"b = 'it''s'", "b = $$it's$$", "b = $q$it's$q$", "b = U&'d\\0061t'", "b = 'dat'",
	"a = 2147483648", "a = -2147483648", "a = -2147483649", "a > -1 AND a < 1e6", "a > - 1 AND a < 1e7",
}

// literalWrites are writes that differ only in their literals' spellings;
// each is run through mzproxy on one table and directly on its twin.
var literalWrites = []string{
	"UPDATE %s SET b = E'w\\n1' WHERE a = 1e5",
	"UPDATE %s SET b = 'w2' WHERE a = 1e6",
	"UPDATE %s SET b = 'w''3' WHERE a = -1",
	"UPDATE %s SET b = $$w4$$ WHERE a = - 2147483648",
	"INSERT INTO %s VALUES (-7, E'q\\\\n'), (- 8, 'r'), (1.5e-3, $$s$$)",
	"INSERT INTO %s VALUES (-9, 'q'), (- 10, E'r'), (2.5e-3, $t$s$t$)",
	"DELETE FROM %s WHERE a = -7",
	"DELETE FROM %s WHERE a = - 8",
	"UPDATE %s SET a = a + 1e5 WHERE b = 'x'",
	"UPDATE %s SET a = a + 1e6 WHERE b = E'x'",
}

// literalClient runs a statement and returns the rows' first two columns
// (a::text and b) as text, sorted.
type literalClient struct {
	name string
	rows func(ctx context.Context, q string) ([]string, error)
	exec func(ctx context.Context, q string) error
}

func pgxLiteralClient(t *testing.T, ctx context.Context, url string, mode pgx.QueryExecMode) literalClient {
	conn := connectMode(t, ctx, url, mode)
	return literalClient{
		name: mode.String(),
		rows: func(ctx context.Context, q string) ([]string, error) { return firstTwoColumns(ctx, conn, q) },
		exec: func(ctx context.Context, q string) error { _, err := conn.Exec(ctx, q); return err },
	}
}

// libpqLiteralClient is lib/pq's Query, Exec or Prepare (how).
func libpqLiteralClient(t *testing.T, url, how string) literalClient {
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	query := func(ctx context.Context, q string) (*sql.Rows, error) {
		if how != "prepare" {
			return db.QueryContext(ctx, q)
		}
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		return st.QueryContext(ctx)
	}
	return literalClient{
		name: "lib/pq " + how,
		rows: func(ctx context.Context, q string) ([]string, error) {
			rows, err := query(ctx, q)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			cols, _ := rows.Columns()
			var out []string
			for rows.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					return nil, err
				}
				out = append(out, fmt.Sprintf("%s|%s", vals[0], vals[1]))
			}
			slices.Sort(out)
			return out, rows.Err()
		},
		exec: func(ctx context.Context, q string) error {
			if how != "prepare" {
				_, err := db.ExecContext(ctx, q)
				return err
			}
			st, err := db.PrepareContext(ctx, q)
			if err != nil {
				return err
			}
			defer st.Close()
			_, err = st.ExecContext(ctx)
			return err
		},
	}
}

// TestOutside23LiteralSpellingsThroughProxy: texts that differ only in
// their literals' spellings, one after the other on one session (so each
// is planned from the cache the last left), through mzproxy with and
// without --history-reads, in pgx's five modes and lib/pq's Query and
// Prepare: reads at mz_now(), AS OF AT LEAST a timestamp and of the
// present give the rows PostgreSQL gives directly for the same condition,
// and writes of a managed table leave it as the same writes leave its
// twin written directly.
func TestOutside23LiteralSpellingsThroughProxy(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for _, flags := range [][]string{{"--retain-history", "10m"}, {"--retain-history", "10m", "--history-reads"}} {
		p := startProxy(t, flags...)
		db := freshDatabase(t, ctx)
		direct := connectTo(t, ctx, directURL("postgres", db))
		var clients []literalClient
		for _, mode := range pgxModes {
			clients = append(clients, pgxLiteralClient(t, ctx, p.URL("postgres", db), mode))
		}
		for _, how := range []string{"query", "prepare"} {
			clients = append(clients, libpqLiteralClient(t, p.URL("postgres", db), how))
		}
		for i, c := range clients {
			t.Run(strings.Join(flags[2:], "")+"/"+c.name, func(t *testing.T) {
				tp, td := fmt.Sprintf("lit%d", i), fmt.Sprintf("lit%d_direct", i)
				setup := "CREATE TABLE %s (a numeric, b text); INSERT INTO %s VALUES " +
					"(100000, 'x'), (1000000, 'x'), (-1, 'x'), (12, 'it''s'), (0.5, E'x\\n'), (5, 'xy'), " +
					"(0.0015, 'dat'), (2147483648, 'big'), (-2147483648, 'small'), (-2147483649, 'smaller')"
				if _, err := direct.Exec(ctx, fmt.Sprintf(setup, td, td)); err != nil {
					t.Fatal(err)
				}
				if err := c.exec(ctx, fmt.Sprintf("CREATE TABLE %s (a numeric, b text)", tp)); err != nil {
					t.Fatal(err)
				}
				if err := c.exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT * FROM %s", tp, td)); err != nil {
					t.Fatal(err)
				}
				check := func(step string) {
					t.Helper()
					var ts string
					got, err := c.rows(ctx, "SELECT mz_now()::text, 1")
					if err != nil || len(got) != 1 {
						t.Fatalf("%s: mz_now(): %v %v", step, got, err)
					}
					ts, _, _ = strings.Cut(got[0], "|")
					for _, cond := range literalConds {
						want, err := pgxRows(ctx, direct, fmt.Sprintf("SELECT a::text, b FROM %s WHERE %s", td, cond))
						if err != nil {
							t.Fatalf("%s: directly: %s: %v", step, cond, err)
						}
						for _, q := range []string{
							"SELECT a::text, b, mz_now() FROM %s WHERE %s",
							"SELECT a::text, b FROM %s WHERE %s AS OF AT LEAST " + ts,
							"SELECT a::text, b FROM %s WHERE %s",
						} {
							q = fmt.Sprintf(q, tp, cond)
							got, err := c.rows(ctx, q)
							if err != nil {
								t.Errorf("%s: %q: %v (%s)", step, q, err, sqlState(err))
							} else if !slices.Equal(got, want) {
								t.Errorf("%s: %q: %q, want %q", step, q, got, want)
							}
						}
					}
				}
				check("before the writes")
				for _, w := range literalWrites {
					if _, err := direct.Exec(ctx, fmt.Sprintf(w, td)); err != nil {
						t.Fatalf("directly: %s: %v", w, err)
					}
					if err := c.exec(ctx, fmt.Sprintf(w, tp)); err != nil {
						t.Fatalf("%s: %v (%s)", fmt.Sprintf(w, tp), err, sqlState(err))
					}
				}
				check("after the writes")
				// A bit string ends at its next quote: B'1''0' is B'1' and
				// '0', a syntax error, also after B'1' was planned.
				for _, q := range []string{"SELECT a::text, b FROM %s WHERE b = B'1'::text", "SELECT a::text, b, mz_now() FROM %s WHERE b = B'1'::text"} {
					q = fmt.Sprintf(q, tp)
					if _, err := c.rows(ctx, q); err != nil {
						t.Errorf("%s: %v", q, err)
					}
					if _, err := c.rows(ctx, strings.Replace(q, "B'1'", "B'1''0'", 1)); driverCode(err) != "42601" {
						t.Errorf("B'1''0': %v, want SQLSTATE 42601", err)
					}
				}
			})
		}
	}
}

// driverCode is err's SQLSTATE, from pgx or lib/pq.
func driverCode(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return string(pqErr.Code)
	}
	return sqlState(err)
}

// pgxRows is the first two columns of q's rows as text, sorted, read in
// the simple protocol.
func pgxRows(ctx context.Context, conn *pgx.Conn, q string) ([]string, error) {
	return firstTwoColumns(ctx, conn, q, pgx.QueryExecModeSimpleProtocol)
}

// firstTwoColumns is the first two columns of q's rows as text, sorted, in
// the connection's exec mode unless args names another.
func firstTwoColumns(ctx context.Context, conn *pgx.Conn, q string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, fmt.Sprintf("%v|%v", vals[0], vals[1]))
	}
	rows.Close()
	slices.Sort(out)
	return out, rows.Err()
}

// TestOutside23AlterIndexRenamesManaged: PostgreSQL's ALTER INDEX ...
// RENAME TO renames a table or a view too. Directly, an ordinary role's
// rename of its own managed table or view that way is refused (MZ003), as
// ALTER TABLE is; until storage 55 it renamed them behind the catalog's
// back (the catalog kept the old names, and a table made with the old name
// through mzproxy got a second row of that name). Through mzproxy the
// renames work and reads by the new names give the rows, at the present
// and AS OF.
func TestOutside23AlterIndexRenamesManaged(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	direct := connectTo(t, ctx, directURL("postgres", db))
	role := "ai23_" + strings.ToLower(strings.TrimPrefix(db, "ts_"))
	if len(role) > 60 {
		role = role[:60]
	}
	ident := pgx.Identifier{role}.Sanitize()
	execDirect(t, ctx, "CREATE ROLE "+ident+" LOGIN")
	t.Cleanup(func() {
		// (Its tables were dropped through mzproxy at the end.)
		_, _ = direct.Exec(ctx, "DROP OWNED BY "+ident)
		execDirect(t, ctx, "DROP ROLE IF EXISTS "+ident)
	})
	mustExec(t, ctx, direct, "GRANT CREATE ON SCHEMA public TO "+ident)
	own := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, own, "CREATE TABLE ai (k int PRIMARY KEY)", "INSERT INTO ai VALUES (1), (2)",
		"CREATE VIEW aiv AS SELECT k FROM ai")
	outside := connectTo(t, ctx, directURL(role, db))
	for _, rename := range []string{"ALTER INDEX ai RENAME TO ai_out", "ALTER INDEX aiv RENAME TO aiv_out"} {
		_, err := outside.Exec(ctx, rename, simple(outside))
		wantCode(t, err, "MZ003")
	}
	// An index's own rename is index maintenance: allowed outside.
	mustExec(t, ctx, outside, "ALTER INDEX ai_pkey RENAME TO ai_key")
	var names string
	if err := direct.QueryRow(ctx, "SELECT string_agg(name, ',' ORDER BY name) FROM mzproxy.catalog WHERE dropped_ts IS NULL").Scan(&names); err != nil {
		t.Fatal(err)
	}
	if names != "ai,aiv" {
		t.Errorf("catalog names %q, want ai,aiv", names)
	}
	before := readTS(t, ctx, own)
	mustExec(t, ctx, own, "ALTER INDEX ai RENAME TO ai_in", "ALTER INDEX aiv RENAME TO aiv_in", "INSERT INTO ai_in VALUES (3)")
	for q, want := range map[string]int{
		"SELECT count(*)::int FROM ai_in": 3, "SELECT count(*)::int FROM aiv_in": 3,
		fmt.Sprintf("SELECT count(*)::int FROM ai_in AS OF %d", before):  2,
		fmt.Sprintf("SELECT count(*)::int FROM aiv_in AS OF %d", before): 2,
	} {
		if n := count(t, ctx, own, q, pgx.QueryExecModeSimpleProtocol); n != want {
			t.Errorf("%s: %d, want %d", q, n, want)
		}
	}
	mustExec(t, ctx, own, "DROP VIEW aiv_in", "DROP TABLE ai_in")
}

// TestOutside23HostileStorage51to53: an ordinary role against what
// storage 51-53 changed (the views settled_pin and settled_writes reading
// the sequences writes, pinned and writes_seen by pg_sequence_last_value;
// compaction dropping h<id>_fix; on_ddl_command_end's probe), directly and
// through mzproxy. It may read the views and the sequences' values (as
// before), and nothing more: no setval or nextval of them, no call of
// compaction, no function of its own in the schema, no write of a
// history; while it holds the views, the sequences and a read of the
// catalog in an open transaction, another session's reads at mz_now(),
// AS OF and of the present, its writes in and out of blocks and its DDL
// (a rename and a drop of a written table, with a view) finish with the
// right answers; the proxy stays up.
func TestOutside23HostileStorage51to53(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--retain-history", "10m")
	role := ordinaryRole(t, ctx)
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)",
		"INSERT INTO "+tb+" VALUES (1, 100), (2, 100)", "GRANT SELECT ON "+tb+" TO "+role)
	var hist string
	var id int64
	if err := direct.QueryRow(ctx, "SELECT history, id FROM mzproxy.catalog WHERE oid = $1::regclass", tb).Scan(&hist, &id); err != nil {
		t.Fatal(err)
	}
	reads := []string{
		"SELECT t FROM mzproxy.settled_pin", "SELECT w FROM mzproxy.settled_writes",
		"SELECT pg_sequence_last_value('mzproxy.writes'), pg_sequence_last_value('mzproxy.pinned'), pg_sequence_last_value('mzproxy.writes_seen')",
	}
	refused := map[string]string{
		"SELECT setval('mzproxy.writes', 1)": "42501", "SELECT nextval('mzproxy.writes')": "42501",
		"SELECT setval('mzproxy.pinned', 9999999999999)": "42501", "SELECT nextval('mzproxy.pinned')": "42501",
		"SELECT setval('mzproxy.writes_seen', 0)": "42501", "SELECT nextval('mzproxy.writes_seen')": "42501",
		"SELECT mzproxy.compact(0, 0)": "42501", "SELECT mzproxy.compact_batch(" + fmt.Sprint(id) + ", 10)": "42501",
		"CREATE FUNCTION mzproxy.h999999_fix(bigint, bigint) RETURNS void LANGUAGE sql AS ''": "42501",
		"CREATE VIEW mzproxy.settled_pin2 AS SELECT 1":                                        "42501",
		"CREATE OR REPLACE VIEW mzproxy.settled_pin AS SELECT NULL::bigint AS t":              "42501",
		"ALTER VIEW mzproxy.settled_pin RENAME TO x":                                          "42501",
		"INSERT INTO " + hist + " SELECT * FROM " + hist:                                      "42501",
		"UPDATE " + hist + " SET mz_to = 0":                                                   "42501",
		"SELECT " + hist + "_fix(-1, 1)":                                                      "42501",
	}
	for _, via := range []struct{ name, url string }{{"mzproxy", p.URL(role, db)}, {"directly", directURL(role, db)}} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			conn := connectTo(t, ctx, via.url)
			for _, q := range reads {
				if _, err := conn.Exec(ctx, q, mode); err != nil {
					t.Errorf("%s, %v: %s: %v", via.name, mode, q, err)
				}
			}
			for q, code := range refused {
				if _, err := conn.Exec(ctx, q, mode); sqlState(err) != code {
					t.Errorf("%s, %v: %s: %v, want %s", via.name, mode, q, err, code)
				}
			}
		}
	}

	// The role holds the views, the sequences and a catalog read open, in
	// a block of its own, while another session works.
	for round, url := range []string{directURL(role, db), p.URL(role, db)} {
		holder := connectTo(t, ctx, url)
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range append(reads, "LOCK TABLE mzproxy.settled_pin, mzproxy.settled_writes IN ACCESS SHARE MODE",
			"SELECT count(*) FROM mzproxy.writes, mzproxy.pinned, mzproxy.writes_seen") {
			if _, err := tx.Exec(ctx, q); err != nil {
				t.Fatalf("holder: %s: %v", q, err)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		before := readTS(t, wctx, admin)
		v := tableName(t)
		for _, q := range []string{
			"UPDATE " + tb + " SET v = v - 10 WHERE k = 1",
			"BEGIN", "SELECT sum(v) FROM " + tb, "UPDATE " + tb + " SET v = v + 10 WHERE k = 2", "COMMIT",
			"CREATE VIEW " + v + " AS SELECT k, v FROM " + tb,
			"ALTER TABLE " + tb + " ADD COLUMN w int",
			"ALTER TABLE " + tb + " DROP COLUMN w",
		} {
			if _, err := admin.Exec(wctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Errorf("beside the holder: %s: %v (%s)", q, err, sqlState(err))
			}
		}
		for q, want := range map[string]int{
			"SELECT sum(v)::int FROM " + tb:                                       200,
			"SELECT sum(v)::int FROM " + v + " AS OF AT LEAST mz_now()":           200,
			fmt.Sprintf("SELECT sum(v)::int FROM %s AS OF %d", tb, before):        200,
			fmt.Sprintf("SELECT v::int FROM %s WHERE k = 1 AS OF %d", tb, before): 100 - 10*round,
			"SELECT v::int FROM " + tb + " WHERE k = 1":                           90 - 10*round,
		} {
			if n := count(t, wctx, admin, q, pgx.QueryExecModeSimpleProtocol); n != want {
				t.Errorf("beside the holder: %s: %d, want %d", q, n, want)
			}
		}
		var sumNow int
		if err := admin.QueryRow(wctx, "SELECT sum(v)::int, mz_now() FROM "+tb).Scan(&sumNow, new(any)); err != nil || sumNow != 200 {
			t.Errorf("beside the holder: mz_now() read: %d, %v", sumNow, err)
		}
		mustExec(t, wctx, admin, "DROP VIEW "+v)
		cancel()
		if err := tx.Rollback(ctx); err != nil {
			t.Errorf("holder: rollback: %v", err)
		}
	}
	p.mustAlive(t, ctx)
}

// blockWriter is a driver's call mode running one block's statements with
// arguments.
type blockWriter struct {
	name  string
	begin func(ctx context.Context) (exec func(q string, args ...any) error, commit func() error, err error)
}

func pgxBlockWriter(t *testing.T, ctx context.Context, url string, mode pgx.QueryExecMode) blockWriter {
	conn := connectMode(t, ctx, url, mode)
	return blockWriter{name: mode.String(), begin: func(ctx context.Context) (func(string, ...any) error, func() error, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func(q string, args ...any) error { _, err := tx.Exec(ctx, q, args...); return err },
			func() error { return tx.Commit(ctx) }, nil
	}}
}

// libpqBlockWriter is lib/pq's Tx with Exec (args: the unnamed statement)
// or Prepare.
func libpqBlockWriter(t *testing.T, url string, prepare bool) blockWriter {
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	name := "lib/pq tx exec"
	if prepare {
		name = "lib/pq tx prepare"
	}
	return blockWriter{name: name, begin: func(ctx context.Context) (func(string, ...any) error, func() error, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		exec := func(q string, args ...any) error {
			if !prepare {
				_, err := tx.ExecContext(ctx, q, args...)
				return err
			}
			st, err := tx.PrepareContext(ctx, q)
			if err != nil {
				return err
			}
			defer st.Close()
			_, err = st.ExecContext(ctx, args...)
			return err
		}
		return exec, tx.Commit, nil
	}}
}

// TestOutside23FirstWritesEveryCallMode: session 22 builds a block's
// first write's history in front of the write's Parse (61888be). Two
// blocks' first writes of one never-written table, with arguments, in
// each of pgx's five modes and lib/pq's Tx with Exec and with Prepare:
// block A writes and stays open, block B writes (it waits for A), A reads
// its own write and commits, B commits. No error (no 40P01), both rows
// once, and a read AS OF after both sees them; a read AS OF before the
// first write sees none.
func TestOutside23FirstWritesEveryCallMode(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--retain-history", "10m")
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	var pairs [][2]blockWriter
	for _, mode := range pgxModes {
		pairs = append(pairs, [2]blockWriter{pgxBlockWriter(t, ctx, p.URL("postgres", db), mode), pgxBlockWriter(t, ctx, p.URL("postgres", db), mode)})
	}
	for _, prepare := range []bool{false, true} {
		pairs = append(pairs, [2]blockWriter{libpqBlockWriter(t, p.URL("postgres", db), prepare), libpqBlockWriter(t, p.URL("postgres", db), prepare)})
	}
	for i, pair := range pairs {
		t.Run(pair[0].name, func(t *testing.T) {
			tb := fmt.Sprintf("fw%d", i)
			mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v text)")
			before := readTS(t, ctx, admin)
			ins := "INSERT INTO " + tb + " VALUES ($1, $2)"
			execA, commitA, err := pair[0].begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := execA(ins, 1, "a"); err != nil {
				t.Fatalf("block A: %v (%s)", err, driverCode(err))
			}
			second := make(chan error, 1)
			go func() {
				second <- func() error {
					execB, commitB, err := pair[1].begin(ctx)
					if err != nil {
						return err
					}
					if err := execB(ins, 2, "b"); err != nil {
						return err
					}
					return commitB()
				}()
			}()
			// B waits for A's lock (the history A built), or is done.
			var doneB error
			finished := false
			eventually(t, 20*time.Second, "block B waiting or done", func() bool {
				select {
				case doneB = <-second:
					finished = true
					return true
				default:
				}
				var n int
				err := direct.QueryRow(ctx, "SELECT count(*)::int FROM pg_locks WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&n)
				return err == nil && n > 0
			})
			if err := execA("UPDATE "+tb+" SET v = v || '!' WHERE k = $1", 1); err != nil {
				t.Fatalf("block A: update: %v (%s)", err, driverCode(err))
			}
			if err := commitA(); err != nil {
				t.Fatalf("block A: commit: %v (%s)", err, driverCode(err))
			}
			if !finished {
				doneB = <-second
			}
			if doneB != nil {
				t.Fatalf("block B: %v (%s)", doneB, driverCode(doneB))
			}
			for q, want := range map[string]int{
				"SELECT count(*)::int FROM " + tb:                                2,
				"SELECT count(*)::int FROM " + tb + " WHERE v = 'a!'":            1,
				"SELECT count(*)::int FROM " + tb + " AS OF AT LEAST mz_now()":   2,
				fmt.Sprintf("SELECT count(*)::int FROM %s AS OF %d", tb, before): 0,
			} {
				if n := count(t, ctx, admin, q, pgx.QueryExecModeSimpleProtocol); n != want {
					t.Errorf("%s: %d, want %d", q, n, want)
				}
			}
		})
	}
}

// TestOutside23PsycopgPipeline: testdata/python/psycopg_pipeline23.py
// through mzproxy: a block's first write of a table with arguments in one
// pipeline (built in front of its Parse since session 22), and reads at
// mz_now() in one pipeline whose texts differ only in their literals'
// spellings.
func TestOutside23PsycopgPipeline(t *testing.T) {
	t.Parallel()
	command, err := pythonModule("psycopg")()
	requireDriver(t, err, "apt-get install -y python3-psycopg")
	ctx := testContext(t)
	p := startProxy(t)
	host, port := p.hostPort()
	results := runDriverProgram(t, filepath.Join("testdata", "python"), nil, command[0], "psycopg_pipeline23.py",
		libpqURL(host, port, freshDatabase(t, ctx)), tableName(t))
	for _, name := range []string{"first_write", "literals"} {
		if failure, ran := results[name]; !ran || failure != "" {
			t.Errorf("%s: ran %v: %s", name, ran, failure)
		}
	}
	p.mustAlive(t, ctx)
}

// TestOutside23CancelInBlockBatchEveryMode: a block's batch of its first
// read (the pin at the block's timestamp), a 30-second sleep and another
// read, sent as one pgx batch in each of pgx's five modes (one Query
// string in simple_protocol) and, a statement at a time, by lib/pq's
// ExecContext: the context's end (a CancelRequest to mzproxy) ends the
// sleep at the backend well before its 30 seconds (pgx then closes its
// connection, as it does directly), no read hold is left, and the
// session (or a new one) goes on.
func TestOutside23CancelInBlockBatchEveryMode(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	admin := connectTo(t, ctx, p.URL("postgres", db))
	direct := connectTo(t, ctx, directURL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)", "INSERT INTO "+tb+" VALUES (1, 10)")
	read := "SELECT v FROM " + tb + " WHERE k = $1"
	check := func(t *testing.T, err error, marker string, after func() error) {
		t.Helper()
		if err == nil {
			t.Errorf("the batch: no error, want 57014 or the context's end")
		}
		eventually(t, 15*time.Second, "the sleep ended at the backend", func() bool {
			return activeQueries(t, ctx, direct, marker) == 0
		})
		if err := after(); err != nil {
			t.Errorf("after the cancel: %v", err)
		}
	}
	for _, mode := range pgxModes {
		t.Run(mode.String(), func(t *testing.T) {
			conn := connectMode(t, ctx, p.URL("postgres", db), mode)
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			marker := "cancel23_" + mode.String()
			b := &pgx.Batch{}
			b.Queue(read, 1)
			b.Queue("SELECT pg_sleep(30) /*" + marker + "*/")
			b.Queue(read, 1)
			err = tx.SendBatch(cctx, b).Close()
			check(t, err, marker, func() error {
				_ = tx.Rollback(ctx)
				var v int
				if conn.IsClosed() {
					conn = connectMode(t, ctx, p.URL("postgres", db), mode)
				}
				return conn.QueryRow(ctx, read, 1).Scan(&v)
			})
		})
	}
	t.Run("lib/pq", func(t *testing.T) {
		sdb, err := sql.Open("postgres", p.URL("postgres", db))
		if err != nil {
			t.Fatal(err)
		}
		defer sdb.Close()
		sdb.SetMaxOpenConns(1)
		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, read, 1); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		_, err = tx.ExecContext(cctx, "SELECT pg_sleep(30) /*cancel23_pq*/, v FROM "+tb+" WHERE k = $1", 1)
		if code := driverCode(err); code != "57014" {
			t.Errorf("lib/pq: %v (%s), want 57014", err, code)
		}
		check(t, err, "cancel23_pq", func() error {
			_ = tx.Rollback()
			var v int
			return sdb.QueryRowContext(ctx, read, 1).Scan(&v)
		})
	})
	p.awaitHolds(t, 0, "after the cancels")
}
