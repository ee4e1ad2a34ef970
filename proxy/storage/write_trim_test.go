package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// lazyWrite runs stmts in one transaction whose slot is pending until its
// first history write chooses T (begin_write_occ, as mzproxy takes it for
// an autocommit write), and returns T.
func lazyWrite(t *testing.T, conn *pgx.Conn, stmts ...string) uint64 {
	t.Helper()
	tx := beginLazy(t, conn)
	defer tx.Rollback(context.Background())
	for _, s := range stmts {
		if _, err := tx.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return uint64(commitLazy(t, tx))
}

// historyScans is the number of scans of history table hist (sequential
// and index) the current transaction has started.
func historyScans(t testing.TB, q Querier, hist string) int64 {
	t.Helper()
	return queryInt(t, q, `SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_xact_all_tables
		WHERE relid = $1::regclass`, hist)
}

// The history trigger whose stamp_ts chose T (the slot was pending) looks
// up only the versions it closes: the transaction has written nothing at
// T to prefer. A later statement of the same transaction also searches
// for a version written at T, and (version 22, ins_gap.sql) for a version
// of a new row's key retracted after T: two scans more per row. Before
// version 12 the first statement scanned twice too.
func TestRetractionScansWhenTChosen(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0), (2, 0)")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")

	for _, stmt := range []string{"UPDATE k SET v = v + 1 WHERE id = 1", "DELETE FROM k WHERE id = 2"} {
		tx := beginLazy(t, conn)
		before := historyScans(t, tx, hist)
		if _, err := tx.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		first := historyScans(t, tx, hist) - before
		if _, err := tx.Exec(ctx, "UPDATE k SET v = v + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		second := historyScans(t, tx, hist) - before - first
		commitLazy(t, tx)
		if first != 1 || second != 3 {
			t.Errorf("%s: history scans %d (the statement choosing T) and %d (a later one), want 1 and 3", stmt, first, second)
		}
	}
	if err := checkHistoryEqualsTable(ctx, conn, "k", "id, v", hist); err != nil {
		t.Fatal(err)
	}
}

// checkHistoryEqualsTable compares table's rows (columns cols) with the
// current versions of its history.
func checkHistoryEqualsTable(ctx context.Context, conn *pgx.Conn, table, cols, hist string) error {
	rows, err := collectText(ctx, conn, "SELECT ROW("+cols+")::text FROM "+table)
	if err != nil {
		return err
	}
	current, err := collectText(ctx, conn, "SELECT ROW("+cols+")::text FROM "+hist+" WHERE mz_to = $1", Infinity)
	if err != nil {
		return err
	}
	if !slices.Equal(rows, current) {
		return fmt.Errorf("table %s: rows %v, current versions %v", table, rows, current)
	}
	return nil
}

// A database at version 11 gets the trigger functions of its managed
// tables made again by the upgrade to 12, and their history stays exact:
// a write whose trigger chose T, then writable CTEs that delete and insert
// the same key again (the second trigger of the query searches for the
// version the first wrote at T).
func TestUpgradeFrom11RegeneratesTriggers(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	v11 := strings.ReplaceAll(strings.Join(migrations[:11], "\n"), "@SCHEMA@", Schema)
	if _, err := conn.PgConn().Exec(ctx, "BEGIN; "+v11+"; COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v text)", "INSERT INTO k VALUES (1, 'a'), (2, 'b')")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	fresh := "SELECT count(*) FROM pg_proc WHERE oid IN ($1::regproc, $2::regproc) AND prosrc LIKE '%IF _fresh THEN%'"
	if got := queryInt(t, conn, fresh, hist+"_upd", hist+"_del"); got != 0 {
		t.Fatalf("version 11 made %d trigger functions with the version 12 retraction", got)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after upgrade", got)
	}
	if got := queryInt(t, conn, fresh, hist+"_upd", hist+"_del"); got != 2 {
		t.Fatalf("%d of _upd and _del made again by the upgrade, want 2", got)
	}
	lazyWrite(t, conn, "UPDATE k SET v = 'a1' WHERE id = 1")
	lazyWrite(t, conn, "WITH d AS (DELETE FROM k WHERE id = 2 RETURNING *) INSERT INTO k SELECT id, v FROM d")
	lazyWrite(t, conn, "WITH d AS (DELETE FROM k WHERE id = 1 RETURNING *) INSERT INTO k SELECT id, 'a2' FROM d")
	if err := checkHistoryEqualsTable(ctx, conn, "k", "id, v", hist); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from >= mz_to"); n != 0 {
		t.Fatalf("%d empty versions", n)
	}
}
