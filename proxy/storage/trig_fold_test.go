package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestFlatSlotByHostileRole: since version 44 the proxy's write slot is a
// flat statement run as the client's role (OpenWriteFor). An ordinary
// role whose search_path puts its own schema first, with look-alikes of
// every function, operator, type and table the statement names (a
// set_config and current_setting that do nothing, "=" and "<>" that
// always hold, a table gate), runs it directly: a retired incarnation is
// still fenced (XX000), a live one gets the request and mzproxy's gate in
// ROW SHARE mode, and its write lands at a T chosen above every pin. A
// chosen T it set is still refused (42501), with or without the slot
// statement after it; the gate's new SELECT shows it nothing and lets it
// change nothing there or in history.
func TestFlatSlotByHostileRole(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	db := conn.Config().Database
	loginRole(t, conn, "mzflathostile")
	inWrite(t, conn, "CREATE TABLE k (id int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON k TO mzflathostile")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	live := queryInt(t, conn, "SELECT r_id FROM "+Schema+".register(0, 60000, 'test', 0)")
	retired := queryInt(t, conn, "SELECT r_id FROM "+Schema+".register(0, 60000, 'test', 0)")
	if _, err := conn.Exec(ctx, "UPDATE "+Schema+".incarnations SET retired_at = now() WHERE id = $1", retired); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA evil AUTHORIZATION mzflathostile"); err != nil {
		t.Fatal(err)
	}
	hostile := connect(t, server.ConnString("mzflathostile", db))
	for _, s := range []string{
		"CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 'evil' $$",
		"CREATE FUNCTION evil.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT '' $$",
		"CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '1970-01-01'::timestamptz $$",
		"CREATE FUNCTION evil.yes(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$",
		"CREATE FUNCTION evil.yes(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$",
		"CREATE FUNCTION evil.no(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$",
		"CREATE OPERATOR evil.= (FUNCTION = evil.yes, LEFTARG = bigint, RIGHTARG = bigint)",
		"CREATE OPERATOR evil.>= (FUNCTION = evil.yes, LEFTARG = timestamptz, RIGHTARG = timestamptz)",
		"CREATE OPERATOR evil.<> (FUNCTION = evil.no, LEFTARG = text, RIGHTARG = text)",
		"CREATE TABLE evil.gate ()",
		"CREATE DOMAIN evil.int8 AS int CHECK (VALUE < 0)",
		"SET search_path = evil, public, pg_catalog",
	} {
		if _, err := hostile.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	gateHeld := func() bool {
		return queryInt(t, conn, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND granted
			AND relation = '`+Schema+`.gate'::regclass AND mode = 'RowShareLock'`, hostile.PgConn().PID()) == 1
	}

	_, err := hostile.Exec(ctx, "BEGIN; "+OpenWriteFor(retired)+"; COMMIT")
	wantCode(t, err, "XX000", "the flat slot of a retired incarnation under a hostile search_path")
	if _, err := hostile.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}

	for _, stmt := range []string{"UPDATE k SET v = v + 1 WHERE id = 1", "INSERT INTO k VALUES (2, 0)", "DELETE FROM k WHERE id = 2"} {
		pinned := queryInt(t, conn, "SELECT "+Schema+".pin()")
		tx, err := hostile.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, OpenWriteFor(live)); err != nil {
			t.Fatalf("the flat slot under a hostile search_path: %v", err)
		}
		if got := queryText(t, tx, "SELECT pg_catalog.current_setting($1)", WriteTSSetting); got != pendingSlot {
			t.Errorf("the flat slot under a hostile search_path set %q, want %q", got, pendingSlot)
		}
		if !gateHeld() {
			t.Errorf("the flat slot under a hostile search_path does not hold %s.gate", Schema)
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		var chosen int64
		if _, err := fmt.Sscan(queryText(t, tx, "SELECT pg_catalog.current_setting($1)", WriteTSSetting), &chosen); err != nil || chosen <= pinned {
			t.Errorf("%s: T %d, want one above the pin %d (%v)", stmt, chosen, pinned, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		historyMatches(t, conn, "k", uint64(chosen), stmt+" after the flat slot under a hostile search_path")
	}

	// A T of its own choosing, set before the slot or after it, set for
	// the session: refused where T is read.
	before := queryInt(t, conn, "SELECT max(mz_from) FROM "+hist)
	forged := fmt.Sprintf("%d - %064d", before, 0)
	for _, steps := range [][]string{
		{"SELECT pg_catalog.set_config('" + WriteTSSetting + "', '" + forged + "', true)", OpenWriteFor(live), "UPDATE k SET v = 9"},
		{OpenWriteFor(live), "SELECT pg_catalog.set_config('" + WriteTSSetting + "', '" + forged + "', true)", "UPDATE k SET v = 9"},
		{"SET " + WriteTSSetting + " = '" + forged + "'", OpenWriteFor(live), "INSERT INTO k VALUES (5, 5)"},
	} {
		_, err := hostile.Exec(ctx, "BEGIN; "+strings.Join(steps, "; ")+"; COMMIT")
		wantCode(t, err, "42501", strings.Join(steps, "; "))
		if _, err := hostile.Exec(ctx, "ROLLBACK; RESET "+WriteTSSetting); err != nil {
			t.Fatal(err)
		}
	}
	if got := queryInt(t, conn, "SELECT max(mz_from) FROM "+hist); got != before {
		t.Errorf("history's newest version moved from %d to %d by refused writes", before, got)
	}

	// SELECT on the gate: no rows, no columns, nothing to change.
	if got := queryInt(t, hostile, "SELECT count(*) FROM "+Schema+".gate"); got != 0 {
		t.Errorf("the gate has %d rows", got)
	}
	for _, s := range []string{"INSERT INTO " + Schema + ".gate DEFAULT VALUES", "DELETE FROM " + Schema + ".gate",
		"TRUNCATE " + Schema + ".gate", "INSERT INTO " + hist + " SELECT 1, 9223372036854775807, 0, 7, 7",
		"UPDATE " + hist + " SET mz_to = 1", "SELECT " + Schema + ".begin_write_internal(1, NULL)"} {
		_, err := hostile.Exec(ctx, s)
		wantCode(t, err, "42501", s+" by an ordinary role")
	}
	historyMatches(t, conn, "k", inWrite(t, conn, "UPDATE k SET v = 8"), "writes after the role's")
}

// TestUpgradeToVersion44: a database at version 43 with a keyed and a
// keyless table gets the gate's SELECT for PUBLIC, so the flat slot works
// for an ordinary role there; a role that sets the request by hand still
// holds the gate after its write; history stays exact.
func TestUpgradeToVersion44(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 43)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "INSERT INTO old VALUES (1, 'a'), (2, 'b')",
		"CREATE TABLE old_nk (v text)", "INSERT INTO old_nk VALUES ('a')")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	if queryText(t, conn, "SELECT has_table_privilege('public', '"+Schema+".gate', 'SELECT')::text") != "true" {
		t.Errorf("PUBLIC may not select the gate after the upgrade")
	}
	db := conn.Config().Database
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzup44; CREATE ROLE mzup44 LOGIN; GRANT ALL ON old, old_nk TO mzup44"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(ctx, "DROP OWNED BY mzup44 CASCADE; DROP ROLE mzup44") //nolint:errcheck // cleanup
	})
	role := connect(t, server.ConnString("mzup44", db))
	for _, stmt := range []string{"UPDATE old SET v = 'a1' WHERE k = 1", "INSERT INTO old_nk VALUES ('b')", "DELETE FROM old_nk WHERE v = 'a'"} {
		// By hand: the trigger takes the gate.
		tx, err := role.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", WriteTSSetting, pendingSlot); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		if queryInt(t, conn, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND granted
			AND relation = '`+Schema+`.gate'::regclass AND mode = 'RowShareLock'`, role.PgConn().PID()) != 1 {
			t.Errorf("%s with the request set by hand: the gate is not held after the write", stmt)
		}
		var ts int64
		if _, err := fmt.Sscan(queryText(t, tx, "SELECT current_setting($1)", WriteTSSetting), &ts); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		table := strings.Fields(stmt)[map[bool]int{true: 1, false: 2}[strings.HasPrefix(stmt, "UPDATE")]]
		historyMatches(t, conn, table, uint64(ts), stmt+" with the request set by hand")
		// The flat slot, as the proxy sends it.
		if _, err := role.Exec(ctx, OpenWriteFor(-1)+"; "+stmt); err != nil {
			t.Fatalf("%s after the flat slot, as an ordinary role: %v", stmt, err)
		}
	}
	historyMatches(t, conn, "old", inWrite(t, conn, "UPDATE old SET v = 'a3'", "INSERT INTO old VALUES (4, 'd')"), "writes after the upgrade")
}
