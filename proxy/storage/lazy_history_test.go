package storage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// slotWrite runs stmts in one proxy write transaction as the proxy
// sends them, with no build of its own (inWrite builds every history).
func slotWrite(t *testing.T, conn *pgx.Conn, stmts ...string) error {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	if _, err := tx.Exec(ctx, BeginWriteSQL); err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// historyState is a table's catalog flag, whether its history relation
// exists, and its mzproxy triggers with their enabled state.
func historyState(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	return queryText(t, conn, `SELECT k.history_built || ' ' || (to_regclass(k.history) IS NOT NULL) || ' ' ||
		coalesce((SELECT string_agg(tgname || ':' || tgenabled::text, ',' ORDER BY tgname) FROM pg_trigger WHERE tgrelid = k.oid AND NOT tgisinternal), '')
		FROM `+Schema+`.catalog k WHERE k.oid = $1::regclass`, table)
}

const (
	lazyState = "false false mzproxy_pending_history:A"
	// builtState: built at the first write (the refusing trigger
	// disabled); eagerState: built at CREATE or before version 38.
	builtState = "true true mzproxy_history_del:A,mzproxy_history_ins:A,mzproxy_history_trunc:A,mzproxy_history_upd:A,mzproxy_pending_history:D"
	eagerState = "true true mzproxy_history_del:A,mzproxy_history_ins:A,mzproxy_history_trunc:A,mzproxy_history_upd:A"
)

// TestLazyCreateTable: CREATE TABLE records the table without history
// and with the refusing trigger; every write before the build is refused
// with 40001 naming the table's oid, also under session_replication_role
// = replica and outside mzproxy; ensure_history builds in the caller's
// transaction what manage_table built at CREATE until version 37, and
// the writes after it are recorded.
func TestLazyCreateTable(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	if err := slotWrite(t, conn, "CREATE TABLE lz (k int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	if got := historyState(t, conn, "lz"); got != lazyState {
		t.Fatalf("after CREATE: %q, want %q", got, lazyState)
	}
	oid := queryText(t, conn, "SELECT 'lz'::regclass::oid::text")
	for _, w := range []string{"INSERT INTO lz VALUES (1, 'a')", "UPDATE lz SET v = 'b'", "DELETE FROM lz", "TRUNCATE lz",
		"MERGE INTO lz USING (SELECT 1 AS k) s ON lz.k = s.k WHEN NOT MATCHED THEN INSERT VALUES (s.k, 'm')"} {
		err := slotWrite(t, conn, w)
		wantCode(t, err, "40001", w)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Detail != "mzproxy: the history of relation "+oid+" is not built" {
			t.Errorf("%s: DETAIL %q", w, pe.Detail)
		}
	}
	_, err := conn.Exec(ctx, "INSERT INTO lz VALUES (1, 'a')")
	wantCode(t, err, "40001", "a write outside mzproxy")
	_, err = conn.Exec(ctx, "BEGIN; SET LOCAL session_replication_role = replica; INSERT INTO lz VALUES (1, 'a'); COMMIT")
	wantCode(t, err, "40001", "a write as replica")
	conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // after the error
	rev := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision")
	// The build and the first write in one transaction, as the proxy
	// sends them.
	if err := slotWrite(t, conn, EnsureHistorySQL([]string{"to_regclass('lz')"}), "INSERT INTO lz VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	if got := historyState(t, conn, "lz"); got != builtState {
		t.Fatalf("after the build: %q, want %q", got, builtState)
	}
	if got := queryInt(t, conn, "SELECT revision FROM "+Schema+".catalog_revision"); got != rev {
		t.Errorf("the build moved the catalog revision %d -> %d", rev, got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".index_mirrors m JOIN pg_index x ON x.indexrelid = m.index_oid WHERE x.indrelid = 'lz'::regclass"); n != 1 {
		t.Errorf("%d mirrors of lz's primary key, want 1", n)
	}
	historyMatches(t, conn, "lz", inWrite(t, conn, "UPDATE lz SET v = 'b'", "INSERT INTO lz VALUES (2, 'c')"), "after the build")
	// A second build is a no-op.
	if err := slotWrite(t, conn, EnsureHistorySQL([]string{"'lz'::regclass"})); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "UPDATE lz SET v = 'x'")
	wantCode(t, err, string(CodeWriteOutsideProxy), "a write outside mzproxy once built")
}

// TestLazyCreateTableAs: a table made with rows is built at its CREATE,
// its rows versions at the CREATE's timestamp; made without rows, lazy;
// made with eager_history on, built.
func TestLazyCreateTableAs(t *testing.T) {
	_, conn := installedDB(t)
	if err := slotWrite(t, conn, "CREATE TABLE full_t AS SELECT g AS k FROM generate_series(1, 3) g"); err != nil {
		t.Fatal(err)
	}
	if got := historyState(t, conn, "full_t"); !strings.HasPrefix(got, "true true ") {
		t.Fatalf("CREATE TABLE AS with rows: %q", got)
	}
	ts := queryInt(t, conn, "SELECT created_ts FROM "+Schema+".catalog WHERE oid = 'full_t'::regclass")
	historyMatches(t, conn, "full_t", uint64(ts), "CREATE TABLE AS")
	if err := slotWrite(t, conn, "SELECT 1 AS k INTO empty_t WHERE false"); err != nil {
		t.Fatal(err)
	}
	if got := historyState(t, conn, "empty_t"); got != lazyState {
		t.Fatalf("SELECT INTO without rows: %q, want %q", got, lazyState)
	}
	// A query string that creates a table and writes it (the proxy sets
	// eager_history for it).
	if err := slotWrite(t, conn, EagerHistorySQL, "CREATE TABLE eager_t (k int)", "INSERT INTO eager_t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if got := historyState(t, conn, "eager_t"); got != eagerState {
		t.Fatalf("CREATE TABLE with eager_history: %q, want %q", got, eagerState)
	}
}

// TestLazyDDL: DDL on a table without history follows its name and
// columns only; the build then makes the history of the table as it is
// (its columns, its unique indexes' mirrors, its grants). DROP TABLE and
// compaction need no history. The refusing trigger cannot be dropped.
func TestLazyDDL(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzlazyreader; CREATE ROLE mzlazyreader"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Exec(ctx, "DROP OWNED BY mzlazyreader CASCADE; DROP ROLE mzlazyreader") }) //nolint:errcheck // cleanup
	for _, st := range []struct{ sql, table string }{
		{"CREATE TABLE d (a int, b text, c int)", "d"},
		{"ALTER TABLE d ADD COLUMN e numeric(10, 2)", "d"},
		{"ALTER TABLE d DROP COLUMN b", "d"},
		{"ALTER TABLE d RENAME COLUMN c TO cc", "d"},
		{"ALTER TABLE d ALTER COLUMN a TYPE bigint", "d"},
		{"ALTER TABLE d RENAME TO dd", "dd"},
		{"CREATE UNIQUE INDEX dd_a ON dd (a)", "dd"},
		{"GRANT SELECT ON dd TO mzlazyreader", "dd"},
	} {
		if err := slotWrite(t, conn, st.sql); err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
		if got := historyState(t, conn, st.table); got != lazyState {
			t.Errorf("after %s: %q, want %q", st.sql, got, lazyState)
		}
	}
	// (Version 41: no columns recorded before the history is made.)
	columns := "SELECT name || ' ' || coalesce((SELECT string_agg(c.name || ':' || c.type, ',' ORDER BY c.attnum) FROM " + Schema + ".columns c WHERE c.id = k.id), '-') FROM " + Schema + ".catalog k WHERE k.oid = 'dd'::regclass"
	if got := queryText(t, conn, columns); got != "dd -" {
		t.Errorf("catalog after the DDL: %q", got)
	}
	_, err := conn.Exec(ctx, "BEGIN; "+OpenWriteFor(-1)+"; DROP TRIGGER mzproxy_pending_history ON dd")
	wantCode(t, err, "MZ003", "DROP TRIGGER mzproxy_pending_history")
	conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // after the error
	_, err = conn.Exec(ctx, "ALTER TABLE dd ADD COLUMN f int")
	wantCode(t, err, "MZ003", "ALTER TABLE outside mzproxy")
	ts := inWrite(t, conn, "INSERT INTO dd VALUES (1, 2, 3.5)")
	historyMatches(t, conn, "dd", ts, "the first write after the DDL")
	if got := queryText(t, conn, columns); got != "dd a:bigint,cc:integer,e:numeric(10,2)" {
		t.Errorf("catalog after the first write: %q", got)
	}
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'dd'::regclass")
	if got := queryText(t, conn, "SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped", hist); got != "mz_from,mz_to,mz_hash,a,cc,e" {
		t.Errorf("history columns %q", got)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".index_mirrors WHERE index_oid = 'dd_a'::regclass"); n != 1 {
		t.Errorf("%d mirrors of dd_a, want 1", n)
	}
	if !queryBool(t, conn, "SELECT has_table_privilege('mzlazyreader', $1::regclass, 'SELECT')", hist) {
		t.Error("the grant made before the build did not reach the history")
	}
	// DROP of a table never written, and compaction after it.
	if err := slotWrite(t, conn, "CREATE TABLE gone (a int)", "DROP TABLE gone"); err != nil {
		t.Fatal(err)
	}
	if err := slotWrite(t, conn, "CREATE TABLE gone2 (a int)"); err != nil {
		t.Fatal(err)
	}
	if err := slotWrite(t, conn, "DROP TABLE gone2"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT * FROM "+Schema+".compact(0, 0)"); err != nil {
		t.Fatalf("compaction after dropping tables without history: %v", err)
	}
}

func queryBool(t *testing.T, q Querier, sql string, args ...any) bool {
	t.Helper()
	var v bool
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// TestEnsureHistoryRights: a role that may neither read nor write a table
// is refused (42501) by ensure_history before any lock is taken (a
// transaction holding a lock that conflicts with the build's does not
// make it wait), and the table stays without history; a role with SELECT
// only builds it (a read at a timestamp needs the history).
func TestEnsureHistoryRights(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	db := conn.Config().Database
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzlazyhostile; DROP ROLE IF EXISTS mzlazyread; CREATE ROLE mzlazyhostile LOGIN; CREATE ROLE mzlazyread LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(ctx, "DROP OWNED BY mzlazyhostile, mzlazyread CASCADE; DROP ROLE mzlazyhostile; DROP ROLE mzlazyread") //nolint:errcheck // cleanup
	})
	if err := slotWrite(t, conn, "CREATE TABLE guarded (a int)", "GRANT SELECT ON guarded TO mzlazyread"); err != nil {
		t.Fatal(err)
	}
	holder := connect(t, server.ConnString("postgres", db))
	if _, err := holder.Exec(ctx, "BEGIN; LOCK TABLE guarded IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	hostile := connect(t, server.ConnString("mzlazyhostile", db))
	if _, err := hostile.Exec(ctx, "SET statement_timeout = '3s'"); err != nil {
		t.Fatal(err)
	}
	_, err := hostile.Exec(ctx, EnsureHistorySQL([]string{"'guarded'::regclass"}))
	wantCode(t, err, "42501", "ensure_history by a role without rights")
	// And through SET ROLE from a role that has them.
	_, err = conn.Exec(ctx, "BEGIN; SET LOCAL ROLE mzlazyhostile; "+EnsureHistorySQL([]string{"'guarded'::regclass"}))
	wantCode(t, err, "42501", "ensure_history after SET ROLE to a role without rights")
	conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // after the error
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if got := historyState(t, conn, "guarded"); got != lazyState {
		t.Fatalf("after the refused builds: %q", got)
	}
	reader := connect(t, server.ConnString("mzlazyread", db))
	if _, err := reader.Exec(ctx, EnsureHistorySQL([]string{"'guarded'::regclass"})); err != nil {
		t.Fatalf("ensure_history by a reader: %v", err)
	}
	if got := historyState(t, conn, "guarded"); got != builtState {
		t.Fatalf("after the reader's build: %q", got)
	}
}

// TestUpgradeToVersion38: the tables of a database at version 37 keep
// their history (history_built true, no refusing trigger) and take writes
// as before; a table made after the upgrade is lazy.
func TestUpgradeToVersion38(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 37)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "CREATE TABLE old_empty (k int)", "INSERT INTO old VALUES (1, 'a')")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade", got)
	}
	for _, table := range []string{"old", "old_empty"} {
		if got := historyState(t, conn, table); got != eagerState {
			t.Errorf("%s after the upgrade: %q, want %q", table, got, eagerState)
		}
	}
	if err := slotWrite(t, conn, "UPDATE old SET v = 'b'", "INSERT INTO old_empty VALUES (1)"); err != nil {
		t.Fatalf("writes after the upgrade: %v", err)
	}
	if err := slotWrite(t, conn, "CREATE TABLE fresh (k int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if got := historyState(t, conn, "fresh"); got != lazyState {
		t.Errorf("fresh: %q, want %q", got, lazyState)
	}
}
