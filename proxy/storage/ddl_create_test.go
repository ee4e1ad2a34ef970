package storage

import (
	"context"
	"strings"
	"testing"
)

// triggerSig is the signature sync_triggers left on table's trigger
// functions (the comment of h<id>_upd()), up to its first space.
func triggerSig(t *testing.T, conn Querier, table string) string {
	t.Helper()
	sig := queryText(t, conn, `SELECT d.description FROM pg_description d, `+Schema+`.catalog k
		WHERE k.oid = $1::regclass AND k.dropped_ts IS NULL AND d.classoid = 'pg_proc'::regclass AND d.objsubid = 0
		  AND d.objoid = to_regprocedure(k.history || '_upd()')`, table)
	first, _, _ := strings.Cut(sig, " ")
	return first
}

// genTriggersRow is gen_triggers' row version in pg_proc, as table_shape
// and (since version 36) sync_triggers' signature name it.
const genTriggersRow = `SELECT g.xmin::text FROM pg_proc g WHERE g.oid = '` + Schema + `.gen_triggers(bigint)'::regprocedure`

// TestCreateTableSignsByRowVersion: CREATE TABLE signs the trigger
// functions it makes with gen_triggers' row version (version 36), not md5
// of gen_triggers' text, which every CREATE TABLE read out of line,
// decompressed and hashed before (0.37M backend instructions of a
// CREATE+DROP pair, docs/ddl-cost.md). The table's history is recorded as
// before.
func TestCreateTableSignsByRowVersion(t *testing.T) {
	_, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x')")
	if got, want := triggerSig(t, conn, "k"), queryText(t, conn, genTriggersRow); got != want {
		t.Errorf("k's trigger functions signed %q, want gen_triggers' row version (xmin %s)", got, want)
	}
	historyMatches(t, conn, "k", inWrite(t, conn, "UPDATE k SET b = 'y'", "INSERT INTO k VALUES (2, 'z')"), "writes after CREATE TABLE")
}

// TestDDLLeavesMarkAlone: a CREATE VIEW and a DROP VIEW through mzproxy,
// which run no DDL of mzproxy's own, neither set nor reset the mark
// mzproxy.in_ddl (version 36: on_ddl_command_end reset it at the end of
// every statement, one more query each); a value the client set is no
// mark, and the DDL is recorded as before.
func TestDDLLeavesMarkAlone(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)")
	for _, stmt := range []string{"CREATE VIEW v AS SELECT a, b FROM k", "DROP VIEW v"} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"SET LOCAL mzproxy.in_ddl = 'forged'", OpenWriteFor(-1), stmt} {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		if got := queryText(t, tx, "SELECT current_setting('mzproxy.in_ddl')"); got != "forged" {
			t.Errorf("%s: mzproxy.in_ddl %q after it, want the client's value left alone", stmt, got)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".catalog WHERE kind = 'view' AND name = 'v' AND dropped_ts > created_ts"); n != 1 {
		t.Errorf("%d catalog rows of view v made and dropped, want 1", n)
	}
}

// TestUpgradeToVersion36: a table made at version 34, whose trigger
// functions are signed with md5 of gen_triggers' text, keeps its triggers
// through the upgrade; its next sync signs it again with the row version
// and rewrites none of its trigger functions (gen_triggers finds their
// text unchanged); a table made after the upgrade is signed so at once.
func TestUpgradeToVersion36(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 34)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a')")
	if sig := triggerSig(t, conn, "old"); len(sig) != 32 {
		t.Fatalf("old's signature at version 34 is %q, want an md5", sig)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	funcRows := `SELECT string_agg(p.xmin::text, ',' ORDER BY p.proname) FROM pg_proc p, ` + Schema + `.catalog k
		WHERE k.oid = 'old'::regclass AND p.pronamespace = '` + Schema + `'::regnamespace AND p.proname LIKE 'h' || k.id || '\_%'`
	before := queryText(t, conn, funcRows)
	// A unique index changes the table's shape: reconcile syncs it
	// (writeCalls commits).
	calls := writeCalls(t, cs, -1, "ALTER TABLE old ADD CONSTRAINT old_v UNIQUE (v)")
	if n := callCount(calls, "sync_triggers"); n != 1 {
		t.Fatalf("ADD UNIQUE ran sync_triggers %d times, want 1 (%v)", n, calls)
	}
	if got, want := triggerSig(t, conn, "old"), queryText(t, conn, genTriggersRow); got != want {
		t.Errorf("old signed %q after its sync, want gen_triggers' row version %s", got, want)
	}
	if after := queryText(t, conn, funcRows); after != before {
		t.Errorf("old's functions rewritten by the sync after the upgrade: row versions %s, were %s", after, before)
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 'b'", "INSERT INTO old VALUES (2, 'c')"), "writes after the upgrade")
	inWrite(t, conn, "CREATE TABLE fresh (k int PRIMARY KEY)")
	if got, want := triggerSig(t, conn, "fresh"), queryText(t, conn, genTriggersRow); got != want {
		t.Errorf("fresh signed %q, want %s", got, want)
	}
}
