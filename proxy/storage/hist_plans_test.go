package storage

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// histBlocks counts the buffers a statement reads of a history table and
// its indexes, within one transaction (pg_stat_get_xact_blocks_fetched
// before and after: the pending counts are flushed only between
// transactions).
type histBlocks struct {
	sql string
}

func newHistBlocks(hist string) histBlocks {
	return histBlocks{sql: "SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(r)), 0)::bigint FROM (SELECT '" + hist +
		"'::regclass::oid UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = '" + hist + "'::regclass) x(r)"}
}

// The plans of the history triggers' close, _closed and the restamp are
// cached per session (PL/pgSQL keeps a generic plan after five custom
// ones). Made while the history table was small and analyzed, as pgbench
// -i or an early autovacuum leaves it, a plan that scans the table whole
// stays until the table is analyzed again; the cost of every write then
// grows with the history. Here a table's history (with a primary key, and
// without) is analyzed at one row, the session's plans are made by
// autocommit writes and blocks, the history grows to 20,000 closed versions of a written row and 20,000
// current versions of other rows (autovacuum off: nothing re-plans), and
// the buffers a write reads of the history may not grow with it.
func TestHistoryPlansStayFlat(t *testing.T) {
	for _, table := range []string{"c (id int PRIMARY KEY, v int)", "n (id int, v int)"} {
		name := table[:1]
		t.Run(name, func(t *testing.T) { historyPlansStayFlat(t, name, table, name == "c") })
	}
}

// historyPlansStayFlat requires the flat cost of a keyed table only: a
// keyless table's triggers still plan by the statistics (logged, not
// required; docs/write-cost.md).
func historyPlansStayFlat(t *testing.T, c, table string, keyed bool) {
	cs, _ := installedDB(t)
	ctx := context.Background()
	conn, jitted := jitWatched(t, cs)
	inWrite(t, conn, "CREATE TABLE "+table, "INSERT INTO "+c+" VALUES (1, 0)")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", c)
	for _, s := range []string{
		"ALTER TABLE " + hist + " SET (autovacuum_enabled = false)",
		"VACUUM ANALYZE " + c, "VACUUM ANALYZE " + hist,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	inWrite(t, conn, "INSERT INTO "+c+" VALUES (2, 0)")
	hb := newHistBlocks(hist)
	// measured runs stmts in one transaction and returns the history
	// buffers read by all but the first (the slot); the last ends the
	// write (commit_write or commit_write_tx, whose restamp is counted).
	measured := func(stmts ...string) int64 {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, stmts[0]); err != nil {
			t.Fatalf("%s: %v", stmts[0], err)
		}
		before := queryInt(t, tx, hb.sql)
		for _, s := range stmts[1:] {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		n := queryInt(t, tx, hb.sql) - before
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return n
	}
	upd := func(id string) string { return "UPDATE " + c + " SET v = v + 1 WHERE id = " + id }
	// The general path (a block's later write of the table, a write
	// whose T was chosen before it) still plans by the statistics: logged,
	// not required to stay flat (docs/write-cost.md).
	shapes := []struct {
		name    string
		stmts   []string
		general bool
	}{
		{"autocommit UPDATE", []string{OpenWriteFor(-1), upd("1"), CommitWriteFor(-1)}, false},
		{"autocommit DELETE and INSERT", []string{OpenWriteFor(-1), "DELETE FROM " + c + " WHERE id = 2",
			"INSERT INTO " + c + " VALUES (2, 0)", CommitWriteFor(-1)}, false},
		{"block, a row written twice", []string{OpenWriteDeferredFor(-1), upd("1"), upd("2"), upd("1"), CommitWriteTxFor(-1)}, true},
		{"block, two rows", []string{OpenWriteDeferredFor(-1), "UPDATE " + c + " SET v = v + 1 WHERE id IN (1, 2)", CommitWriteTxFor(-1)}, false},
		{"block, DELETE and INSERT", []string{OpenWriteDeferredFor(-1), "DELETE FROM " + c + " WHERE id = 2",
			"INSERT INTO " + c + " VALUES (2, 0)", CommitWriteTxFor(-1)}, false},
	}
	small := make([]int64, len(shapes))
	for round := 0; round < 8; round++ {
		for i, s := range shapes {
			small[i] = measured(s.stmts...)
		}
	}
	inWrite(t, conn, "INSERT INTO "+c+" SELECT g, 0 FROM generate_series(3, 20002) g")
	if _, err := conn.Exec(ctx, "INSERT INTO "+hist+" SELECT g, g + 1, 0, 1, 0 FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	for i, s := range shapes {
		big := measured(s.stmts...)
		t.Logf("%s: %d history buffers at 2 rows, %d at 20,000 rows and 20,000 old versions", s.name, small[i], big)
		// An index probe's depth grows by a level or two; a scan reads
		// hundreds of pages.
		if big > 2*small[i]+12 && !s.general && keyed {
			t.Errorf("%s read %d buffers of the history with 40,000 versions, %d with a few: a plan that scans it",
				s.name, big, small[i])
		}
	}
	if j := jitted(); j != "" {
		t.Errorf("a write's statement was JIT-compiled (about 100 ms at each execution):\n%s", j)
	}
}

// explainWatched connects to cs with auto_explain loaded in the session,
// every statement's plan (nested ones too: the triggers' and functions')
// sent as a notice; plans returns the plans sent so far, in order, each
// with its statement's text ("Query Text: ...").
func explainWatched(t *testing.T, cs string) (conn *pgx.Conn, plans func() []string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(cs)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(n.Message, "Query Text:") {
			seen = append(seen, n.Message)
		}
	}
	ctx := context.Background()
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, s := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on", "SET auto_explain.log_level = notice"} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return conn, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// jitWatched is explainWatched with the server's defaults for JIT,
// whatever the cluster's are; jitted returns the first plan that was
// JIT-compiled, "" if none was. enable_seqscan = off adds disable_cost
// (1e10) to any plan that still has a sequential scan, far past
// jit_above_cost: a function with the setting must run with jit = off
// too.
func jitWatched(t *testing.T, cs string) (conn *pgx.Conn, jitted func() string) {
	t.Helper()
	conn, plans := explainWatched(t, cs)
	for _, s := range []string{"SET jit = on", "RESET jit_above_cost", "RESET jit_optimize_above_cost", "RESET jit_inline_above_cost"} {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if queryText(t, conn, "SELECT pg_jit_available()::text") != "true" {
		t.Log("JIT is not available in this server: the check for JIT-compiled plans checks nothing")
	}
	return conn, func() string {
		for _, p := range plans() {
			if strings.Contains(p, "JIT:") {
				return p
			}
		}
		return ""
	}
}

// The upgrade to 37 makes every table's trigger and restamp functions
// again with sequential scans and JIT disabled; writes then commit as
// before.
func TestUpgradeToVersion37(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 36)
	inWrite(t, conn, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE n (id int, v int)",
		"INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g", "INSERT INTO n VALUES (1, 1)")
	// The functions of a's and n's history that run the history's
	// statements, and whether each has the setting.
	settings := func() []string {
		t.Helper()
		got, err := collectText(ctx, conn, `SELECT p.proname || ' ' || (coalesce(p.proconfig, '{}') @> '{enable_seqscan=off,jit=off}')
			FROM pg_proc p, `+Schema+`.catalog k
			WHERE k.oid IN ('a'::regclass, 'n'::regclass) AND p.pronamespace = '`+Schema+`'::regnamespace
			  AND p.proname IN ('h' || k.id || '_ins', 'h' || k.id || '_upd', 'h' || k.id || '_del',
			                    'h' || k.id || '_closed', 'h' || k.id || '_restamp', 'h' || k.id || '_fix')
			ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	before := settings()
	if len(before) != 10 || strings.Contains(strings.Join(before, ","), "true") {
		t.Fatalf("before the upgrade: %v", before)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	// No function plans with enable_seqscan = off and JIT (hist_plans.sql).
	if bad, err := collectText(ctx, conn, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = '`+Schema+`'::regnamespace AND p.proconfig @> '{enable_seqscan=off}'
		  AND NOT p.proconfig @> '{jit=off}' ORDER BY 1`); err != nil || len(bad) > 0 {
		t.Fatalf("functions with enable_seqscan = off and JIT after the upgrade: %v %v", bad, err)
	}
	// The keyless table's triggers plan as before (hist_plans.sql). Since
	// version 49 each table's restamp is _fix, and since 50 _closed and
	// _restamp are gone (restamp_lean.sql); _fix has the settings too.
	if after := strings.Join(settings(), ","); after != "h1_del true,h1_fix true,h1_ins true,h1_upd true,"+
		"h2_del false,h2_fix true,h2_ins false,h2_upd false" {
		t.Fatalf("after the upgrade: %v", after)
	}
	blockCalls(t, cs, -1, "UPDATE a SET v = 1 WHERE id = 1", "UPDATE a SET v = 2 WHERE id = 1", "UPDATE n SET v = 2", "DELETE FROM a WHERE id = 2")
	inWrite(t, conn, "UPDATE a SET v = 3 WHERE id = 3", "INSERT INTO n VALUES (2, 2)")
	for _, tb := range []string{"a", "n"} {
		historyMatches(t, conn, tb, uint64(queryInt(t, conn, ReadTSSQL)), "writes after the upgrade")
	}
}
