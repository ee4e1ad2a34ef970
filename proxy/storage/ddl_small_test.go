package storage

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestSmallDDLTriggerWork: CREATE/DROP INDEX, CREATE/DROP VIEW and DROP
// TABLE through the proxy skip the event-trigger work that cannot change
// their result (version 28): a plain index runs no sync_indexes, a
// client's DDL computes no mark (a hash) unless mzproxy runs DDL of its
// own for it, DROP INDEX
// chooses its timestamp once, and DROP TABLE leaves the trigger functions
// to compaction. What they do still holds: a unique index gets its
// mirror, views are recorded and dropped at T, every DDL bumps the
// catalog revision, history stays exact.
func TestSmallDDLTriggerWork(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x')")
	// (Since version 29 the event triggers take the timestamp through
	// ddl_ts, current_write_ts in one statement.)
	funcs := []string{"sync_indexes", "ddl_mark", "ddl_ts", "current_write_ts"}
	revision := func() int64 { return queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision") }
	mirrors := func() int64 {
		return queryInt(t, conn, `SELECT count(*) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
			WHERE x.indrelid = (SELECT history FROM `+Schema+`.catalog WHERE oid = 'k'::regclass)::regclass AND i.relname ~ '_k[0-9]+$'`)
	}
	for _, st := range []struct {
		sql  string
		want map[string]int64 // calls of funcs (absent: none)
	}{
		// No DDL of mzproxy's own: no mark computed, none set. (Version
		// 46: none of these records a T, so none chooses one under the
		// pending slot.)
		{"CREATE INDEX k_b ON k (b)", map[string]int64{}},
		// The mark set for the mirror's CREATE INDEX, whose guard compares it.
		{"CREATE UNIQUE INDEX k_ub ON k (b)", map[string]int64{"sync_indexes": 1, "ddl_mark": 2}},
		{"DROP INDEX k_b", map[string]int64{}},
		{"CREATE VIEW v AS SELECT a, b FROM k", map[string]int64{}},
		// (on_sql_drop stamps the view's dropped_ts and moves the
		// revision; since version 40 on_ddl_command_end is left nothing.)
		{"DROP VIEW v", map[string]int64{}},
	} {
		before := revision()
		calls := writeCalls(t, cs, -1, st.sql)
		for _, f := range funcs {
			if got := callCount(calls, f); int64(got) != st.want[f] {
				t.Errorf("%s: %d calls of %s, want %d", st.sql, got, f, st.want[f])
			}
		}
		if after := revision(); after <= before {
			t.Errorf("%s: catalog revision %d, was %d: want it bumped", st.sql, after, before)
		}
		historyMatches(t, conn, "k", inWrite(t, conn, "UPDATE k SET b = b || 'y'", "INSERT INTO k (a, b) SELECT max(a) + 1, 'n' || max(a) FROM k"),
			"writes after "+st.sql)
	}
	if got := mirrors(); got != 2 { // the key's and k_ub's
		t.Errorf("%d lookup mirrors after the index DDL, want 2", got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE kind = 'view' AND name = 'v' AND dropped_ts IS NOT NULL"); n != 1 {
		t.Errorf("%d dropped catalog rows of view v, want 1", n)
	}

	// DROP TABLE: the trigger functions stay with the history table until
	// compaction removes both.
	id := queryInt(t, conn, "SELECT id FROM "+Schema+".catalog WHERE oid = 'k'::regclass AND dropped_ts IS NULL")
	triggerFuncs := func() int64 {
		return queryInt(t, conn, `SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace
			AND proname IN ('h' || $2::bigint || '_ins', 'h' || $2::bigint || '_upd', 'h' || $2::bigint || '_del', 'h' || $2::bigint || '_trunc')`, Schema, id)
	}
	ts := inWrite(t, conn, "DROP TABLE k")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE id = $1 AND dropped_ts = $2", id, int64(ts)); n != 1 {
		t.Errorf("k's catalog row not dropped at T = %d", ts)
	}
	if n := triggerFuncs(); n != 4 {
		t.Errorf("%d trigger functions of the dropped k before compaction, want 4 (left to compaction)", n)
	}
	compactUntilRemoved(t, conn, id, "k")
	if n := triggerFuncs(); n != 0 {
		t.Errorf("%d trigger functions of k after compaction removed its history, want 0", n)
	}
}

// TestUpgradeToVersion28: a database at version 24 with a managed table
// and a table dropped there (its trigger functions already gone) upgrades;
// compaction then removes the dropped table without a NOTICE or an error,
// and the live table's plain CREATE INDEX runs no sync_indexes.
func TestUpgradeToVersion28(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 24)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v int)", "INSERT INTO old VALUES (1, 0)",
		"CREATE TABLE gone (k int PRIMARY KEY)")
	inWrite(t, conn, "DROP TABLE gone")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if got := callCount(writeCalls(t, cs, -1, "CREATE INDEX old_v ON old (v)"), "sync_indexes"); got != 0 {
		t.Errorf("a plain CREATE INDEX after the upgrade called sync_indexes %d times, want none", got)
	}
	var notices []string
	cfg, err := pgx.ParseConfig(cs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	compactor, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer compactor.Close(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE name = 'gone'") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("compaction did not remove the table dropped before the upgrade in 20 s")
		}
		queryInt(t, conn, "SELECT count(*) FROM "+Schema+".tick(1)")
		queryInt(t, compactor, "SELECT count(*) FROM "+Schema+".compact(0, NULL)")
		time.Sleep(10 * time.Millisecond)
	}
	if len(notices) > 0 {
		t.Errorf("compaction sent notices %v", notices)
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 1", "INSERT INTO old VALUES (2, 2)"), "writes after the upgrade")
}
