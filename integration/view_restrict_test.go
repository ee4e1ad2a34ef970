package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A session may SET restrict_nonsystem_relation_kind = 'view' (pg_dump
// 15.8+ does): PostgreSQL then refuses, when it rewrites a query, any
// view with an OID >= FirstNormalObjectId, mzproxy's own among them. The
// proxy's statements in front of a client's reads (the read guard, the
// pin before and in a read-only transaction, pin()) must not depend on
// them: every read answers in such a session as in one without it.

// restrictedReads are the reads compared, each run three times (a simple
// read is prepared on the connection at its second use). TBL is the
// table, TS a timestamp read just before. The column named ts is the
// read's timestamp, not compared.
var restrictedReads = []string{
	"SELECT id, v, mz_now() AS ts FROM TBL ORDER BY id",
	"SELECT id, v, mz_now() AS ts FROM TBL WHERE id = 2",
	"SELECT id, v FROM TBL ORDER BY id AS OF TS",
	"SELECT id, v FROM TBL ORDER BY id AS OF AT LEAST TS",
	"SELECT id, v FROM TBL ORDER BY id AS OF mz_now()",
}

// restrictedBlocks are transaction blocks: their statements in order, the
// middle ones reads compared (TBL is the table).
var restrictedBlocks = [][]string{
	{"BEGIN READ ONLY", "SELECT id, v FROM TBL ORDER BY id", "SELECT count(*) FROM TBL", "COMMIT"},
	{"BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", "SELECT id, v FROM TBL ORDER BY id", "COMMIT"},
	{"BEGIN", "SELECT id, v, mz_now() AS ts FROM TBL ORDER BY id", "SELECT id, v FROM TBL ORDER BY id AS OF mz_now()", "COMMIT"},
	// A write block: the UPDATE changes no value.
	{"BEGIN", "UPDATE TBL SET v = v WHERE id = 1", "SELECT id, v FROM TBL ORDER BY id", "COMMIT"},
}

// TestRestrictedViewsReads: with the setting from SET, from the startup
// options, from the role's settings, or from set_config in the middle of a session (after the
// proxy's statements were prepared without it), timestamped reads, AS OF,
// EXPLAIN TIMESTAMP and reads in blocks answer as in a session without
// it, over the simple and the extended protocol.
func TestRestrictedViewsReads(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	url := p.URL("postgres", db)
	setup := connectTo(t, ctx, url)
	table := tableName(t)
	mustExec(t, ctx, setup, "CREATE TABLE "+table+" (id int PRIMARY KEY, v text)",
		"ALTER TABLE "+table+" SET (RETAIN HISTORY FOR '1h')",
		"INSERT INTO "+table+" VALUES (1, 'one'), (2, 'two'), (3, 'three')")

	restrict := func(t *testing.T, conn *pgx.Conn, how string) {
		t.Helper()
		mustExec(t, ctx, conn, how)
		var shown string
		if err := conn.QueryRow(ctx, "SHOW restrict_nonsystem_relation_kind").Scan(&shown); err != nil || shown != "view" {
			t.Fatalf("restrict_nonsystem_relation_kind = %q, %v", shown, err)
		}
	}
	options := url + "&options=-c%20restrict_nonsystem_relation_kind%3Dview"
	// A role whose settings restrict views.
	role := ordinaryRole(t, ctx)
	execDirect(t, ctx, "ALTER ROLE "+role+" SET restrict_nonsystem_relation_kind = 'view'")
	mustExec(t, ctx, setup, "GRANT SELECT, UPDATE ON "+table+" TO "+role)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			plain := connectMode(t, ctx, url, mode)
			t.Run("SET", func(t *testing.T) {
				conn := connectMode(t, ctx, url, mode)
				restrict(t, conn, "SET restrict_nonsystem_relation_kind = 'view'")
				sameAnswers(t, ctx, plain, conn, table)
			})
			t.Run("options", func(t *testing.T) {
				conn := connectMode(t, ctx, options, mode)
				restrict(t, conn, "SELECT 1")
				sameAnswers(t, ctx, plain, conn, table)
			})
			t.Run("ALTER ROLE", func(t *testing.T) {
				conn := connectMode(t, ctx, p.URL(role, db), mode)
				restrict(t, conn, "SELECT 1")
				sameAnswers(t, ctx, plain, conn, table)
			})
			t.Run("set_config", func(t *testing.T) {
				conn := connectMode(t, ctx, url, mode)
				sameAnswers(t, ctx, plain, conn, table)
				restrict(t, conn, "SELECT set_config('restrict_nonsystem_relation_kind', 'view', false)")
				// A new catalog revision: the proxy prepares its guards
				// again, now under the setting.
				mustExec(t, ctx, setup, "CREATE TABLE "+tableName(t)+" (x int)")
				sameAnswers(t, ctx, plain, conn, table)
				// Back to no restriction: still the same answers.
				mustExec(t, ctx, conn, "RESET restrict_nonsystem_relation_kind")
				sameAnswers(t, ctx, plain, conn, table)
			})
		})
	}
}

// TestRestrictedViewsPreparedAfter: set_config restricts views after the
// peek before BEGIN was prepared (its plan still reads its view), and
// before the pin's check (a read with mz_now() first in a block) or its
// guard (a plain read first) was: the peek tells that the session
// restricts views, so the check and the guard are prepared calling the
// functions, and the reads answer as without the setting. Before, the
// check, prepared inside the client's batch, failed it with 55000.
func TestRestrictedViewsPreparedAfter(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	url := p.URL("postgres", db)
	setup := connectTo(t, ctx, url)
	table := tableName(t)
	mustExec(t, ctx, setup, "CREATE TABLE "+table+" (id int PRIMARY KEY, v text)",
		"INSERT INTO "+table+" VALUES (1, 'one'), (2, 'two')")
	plainRead := []string{"BEGIN", "SELECT id, v FROM TBL ORDER BY id", "COMMIT"}
	timestamped := []string{"BEGIN", "SELECT id, v, mz_now() AS ts FROM TBL ORDER BY id", "COMMIT"}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			plain := connectMode(t, ctx, url, mode)
			for _, order := range [][2][]string{{plainRead, timestamped}, {timestamped, plainRead}} {
				conn := connectMode(t, ctx, url, mode)
				for i, block := range order {
					if i == 1 {
						mustExec(t, ctx, conn, "SELECT set_config('restrict_nonsystem_relation_kind', 'view', false)")
					}
					for range 2 {
						// Every write settled: the peek answers.
						readTS(t, ctx, setup)
						if got, want := blockAnswers(t, ctx, conn, table, block), blockAnswers(t, ctx, plain, table, block); got != want {
							t.Fatalf("%q after %q: %s, want %s", block, order[0], got, want)
						}
					}
				}
			}
		})
	}
}

// TestRestrictedViewsDatabase: with the setting a database's own (ALTER
// DATABASE ... SET), the proxy's own connection to it has it too: the
// catalog and frontiers it reads for a timestamped read must not come
// from a view either.
func TestRestrictedViewsDatabase(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	setup := connectTo(t, ctx, p.URL("postgres", db))
	table := tableName(t)
	mustExec(t, ctx, setup, "CREATE TABLE "+table+" (id int PRIMARY KEY, v text)",
		"ALTER TABLE "+table+" SET (RETAIN HISTORY FOR '1h')",
		"INSERT INTO "+table+" VALUES (1, 'one'), (2, 'two')")
	execDirect(t, ctx, "ALTER DATABASE "+db+" SET restrict_nonsystem_relation_kind = 'view'")
	// A proxy started now: its connections to db have the setting.
	q := startProxy(t)
	url := q.URL("postgres", db)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			plain := connectMode(t, ctx, url+"&options=-c%20restrict_nonsystem_relation_kind%3D", mode)
			conn := connectMode(t, ctx, url, mode)
			sameAnswers(t, ctx, plain, conn, table)
		})
	}
}

// sameAnswers runs restrictedReads, EXPLAIN TIMESTAMP and restrictedBlocks
// in conn and in plain, and fails unless they answer alike.
func sameAnswers(t *testing.T, ctx context.Context, plain, conn *pgx.Conn, table string) {
	t.Helper()
	for _, read := range restrictedReads {
		ts := readTS(t, ctx, plain)
		sql := strings.NewReplacer("TBL", table, "TS", strconv.FormatUint(ts, 10)).Replace(read)
		want := answerOf(t, ctx, plain, sql)
		if strings.HasPrefix(want, "error: ") {
			t.Fatalf("%s without the setting: %s", sql, want)
		}
		for range 3 {
			if got := answerOf(t, ctx, conn, sql); got != want {
				t.Fatalf("%s: %s, want %s", sql, got, want)
			}
		}
	}
	explain := "EXPLAIN TIMESTAMP FOR SELECT * FROM " + table
	if got := answerOf(t, ctx, conn, explain); !strings.Contains(got, "query timestamp") {
		t.Fatalf("%s: %s", explain, got)
	}
	for _, block := range restrictedBlocks {
		for range 2 {
			// One block after the other: the write block's row lock.
			if got, want := blockAnswers(t, ctx, conn, table, block), blockAnswers(t, ctx, plain, table, block); got != want {
				t.Fatalf("%q: %s, want %s", block, got, want)
			}
		}
	}
}

// blockAnswers runs the statements of block in conn and returns what its
// reads (all but the first and the last) answered.
func blockAnswers(t *testing.T, ctx context.Context, conn *pgx.Conn, table string, block []string) string {
	t.Helper()
	var answers []string
	for i, stmt := range block {
		sql := strings.ReplaceAll(stmt, "TBL", table)
		if i == 0 || i == len(block)-1 {
			mustExec(t, ctx, conn, sql)
		} else {
			answers = append(answers, answerOf(t, ctx, conn, sql))
		}
	}
	return strings.Join(answers, " | ")
}

// answerOf is the rows sql answers in conn, as text, without the values
// of a column named ts (a read's timestamp), which must not be NULL; or
// the error.
func answerOf(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string) string {
	t.Helper()
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return "error: " + err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return "error: " + err.Error()
		}
		var kept []any
		for i, f := range rows.FieldDescriptions() {
			if f.Name != "ts" {
				kept = append(kept, values[i])
			} else if values[i] == nil {
				return "error: NULL timestamp"
			}
		}
		out = append(out, fmt.Sprint(kept...))
	}
	if err := rows.Err(); err != nil {
		return "error: " + err.Error()
	}
	return strings.Join(out, "; ")
}
