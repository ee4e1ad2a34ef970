package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// inBlock runs stmts in a transaction block with a deferred slot (as
// mzproxy runs a client's BEGIN ... COMMIT) and returns its T.
func inBlock(t *testing.T, conn *pgx.Conn, stmts ...string) uint64 {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, s := range append([]string{OpenWriteDeferredFor(-1)}, stmts...) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	var ts int64
	if err := tx.QueryRow(ctx, CommitWriteTxFor(-1)).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return uint64(ts)
}

// historyMatches fails t unless the versions of table's history visible at
// ts are the table's rows (as whole-row text of the table's columns now).
func historyMatches(t *testing.T, conn *pgx.Conn, table string, ts uint64, what string) {
	t.Helper()
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", table)
	cols := queryText(t, conn, `SELECT coalesce(string_agg(quote_ident(attname), ', ' ORDER BY attnum), '')
		FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table)
	got := snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s WHERE mz_from <= $1 AND mz_to > $1", cols, hist), int64(ts))
	want := snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s", cols, table))
	if !slices.Equal(got, want) {
		t.Errorf("%s: history of %s at %d is %v, the table %v", what, table, ts, got, want)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from < 0 OR mz_to < 0 OR mz_from >= mz_to"); n != 0 {
		t.Errorf("%s: %d versions of %s with a placeholder or empty", what, n, table)
	}
}

// triggerFunctions is the history trigger functions of table, each with the
// xmin of its pg_proc row (a function made again has a new one).
func triggerFunctions(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	return queryText(t, conn, `SELECT string_agg(p.proname || ':' || p.xmin, ' ' ORDER BY p.proname)
		FROM pg_proc p, `+Schema+`.catalog k
		WHERE k.oid = $1::regclass AND p.pronamespace = $2::regnamespace
		  AND p.proname IN ('h' || k.id || '_ins', 'h' || k.id || '_upd', 'h' || k.id || '_del', 'h' || k.id || '_trunc')`,
		table, Schema)
}

// TestColumnChangesKeepTriggerFunctions: a history table made since storage
// version 13 (ddl_trim.sql) has mz_from, mz_to and mz_hash first, so its
// trigger functions name no column and ALTER TABLE ADD/DROP COLUMN (of any
// kind: NULL, a default, a domain, generated, identity, unique) and RENAME
// COLUMN keep them; the history stays the table after each, with writes
// (autocommit and blocks, in one session whose plans PL/pgSQL keeps) in
// between. A type change that history cannot convert (its column dropped
// and added again, last) leaves the columns in another order, and the
// functions spell them out again.
func TestColumnChangesKeepTriggerFunctions(t *testing.T) {
	_, conn := installedDB(t)
	inWrite(t, conn, "CREATE DOMAIN three AS int DEFAULT 3", "CREATE TYPE mood AS ENUM ('v', 'w', 'x')",
		"CREATE TABLE k (a int PRIMARY KEY, b text)",
		"CREATE TABLE bag (a int, b text)",
		"CREATE TABLE dk (a int PRIMARY KEY DEFERRABLE, b text)")
	tables := []string{"k", "bag", "dk"}
	for _, tb := range tables {
		if got := queryText(t, conn, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
			WHERE attrelid = (SELECT history FROM mzproxy.catalog WHERE oid = $1::regclass)::regclass AND attnum > 0`, tb); got != "mz_from,mz_to,mz_hash,a,b" {
			t.Fatalf("history of %s has columns %s", tb, got)
		}
	}
	writes := func(step int) {
		t.Helper()
		for _, tb := range tables {
			ts := inWrite(t, conn, fmt.Sprintf("INSERT INTO %s (a) SELECT g FROM generate_series(%d, %d) g", tb, step*10, step*10+3))
			historyMatches(t, conn, tb, ts, fmt.Sprintf("insert after step %d", step))
			ts = inWrite(t, conn, fmt.Sprintf("UPDATE %s SET a = a + 1000 WHERE a = %d", tb, step*10+1),
				fmt.Sprintf("DELETE FROM %s WHERE a = %d", tb, step*10+2))
			historyMatches(t, conn, tb, ts, fmt.Sprintf("update and delete after step %d", step))
			ts = inBlock(t, conn, fmt.Sprintf("UPDATE %s SET a = a + 2000 WHERE a = %d", tb, step*10),
				fmt.Sprintf("INSERT INTO %s (a) VALUES (%d)", tb, step*10+5), fmt.Sprintf("DELETE FROM %s WHERE a = %d", tb, step*10+3))
			historyMatches(t, conn, tb, ts, fmt.Sprintf("block after step %d", step))
		}
		ts := inWrite(t, conn, fmt.Sprintf("INSERT INTO k (a) VALUES (%d) ON CONFLICT (a) DO UPDATE SET a = k.a + 3000", step*10+5))
		historyMatches(t, conn, "k", ts, fmt.Sprintf("upsert after step %d", step))
	}
	writes(0)
	functions := map[string]string{}
	for _, tb := range tables {
		functions[tb] = triggerFunctions(t, conn, tb)
	}
	steps := []string{
		"ADD COLUMN n int",
		"ADD COLUMN d int DEFAULT 7",
		"ADD COLUMN dm three",
		"ADD COLUMN g int GENERATED ALWAYS AS (a * 2) STORED",
		"ADD COLUMN i int GENERATED ALWAYS AS IDENTITY",
		"DROP COLUMN b",
		"ADD COLUMN u int UNIQUE",
		"RENAME COLUMN n TO n2",
		"ALTER COLUMN d TYPE bigint",
		"DROP COLUMN u",
		"ADD COLUMN b text DEFAULT 'x'",
	}
	for i, st := range steps {
		for _, tb := range tables {
			historyMatches(t, conn, tb, inWrite(t, conn, "ALTER TABLE "+tb+" "+st), st)
			if got := triggerFunctions(t, conn, tb); got != functions[tb] {
				t.Errorf("ALTER TABLE %s %s made the trigger functions again: %s, were %s", tb, st, got, functions[tb])
			}
		}
		writes(i + 1)
	}
	// A write, a column change and writes in one transaction (the plans
	// PL/pgSQL made before the change are made again within it).
	for _, tb := range tables {
		historyMatches(t, conn, tb, inWrite(t, conn, "INSERT INTO "+tb+" (a) VALUES (500)",
			"ALTER TABLE "+tb+" ADD COLUMN q int DEFAULT 4", "INSERT INTO "+tb+" (a, q) VALUES (501, 5)",
			"UPDATE "+tb+" SET q = 6 WHERE a = 500", "ALTER TABLE "+tb+" DROP COLUMN n2",
			"INSERT INTO "+tb+" (a) VALUES (502)", "DELETE FROM "+tb+" WHERE a = 501"), "column changes between writes in one transaction")
	}
	// No built-in conversion to an enum: history's column is dropped and
	// added again, last, where the user's stays in the middle.
	for _, tb := range tables {
		historyMatches(t, conn, tb, inWrite(t, conn, "ALTER TABLE "+tb+" ALTER COLUMN dm TYPE mood USING 'w'"), "dm to an enum")
		if got := triggerFunctions(t, conn, tb); got == functions[tb] {
			t.Errorf("%s: the trigger functions kept their text after history's columns changed order", tb)
		}
	}
	writes(len(steps) + 1)
}

// TestZeroColumnTableHistory: a table without columns has the whole-row
// text "()", as a row of one NULL column has; its trigger functions are
// made again when it gains or loses its only column, and history follows.
func TestZeroColumnTableHistory(t *testing.T) {
	_, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE z ()")
	historyMatches(t, conn, "z", inWrite(t, conn, "INSERT INTO z DEFAULT VALUES", "INSERT INTO z DEFAULT VALUES"), "insert")
	historyMatches(t, conn, "z", inWrite(t, conn, "ALTER TABLE z ADD COLUMN a int"), "add a")
	historyMatches(t, conn, "z", inWrite(t, conn, "INSERT INTO z VALUES (1), (NULL)", "DELETE FROM z WHERE a IS NULL"), "writes with a")
	historyMatches(t, conn, "z", inWrite(t, conn, "ALTER TABLE z DROP COLUMN a"), "drop a")
	historyMatches(t, conn, "z", inWrite(t, conn, "DELETE FROM z WHERE ctid = (SELECT min(ctid) FROM z)", "INSERT INTO z DEFAULT VALUES"), "writes without columns")
	historyMatches(t, conn, "z", inWrite(t, conn, "TRUNCATE z"), "truncate")
}

// TestHistoryIndexes: a new history table has one index on (mz_to, mz_from)
// where it had one on mz_to and a partial one of pending versions (each a
// btree PostgreSQL 15 fsyncs when built); compaction's deletion and a read
// at a timestamp use it. Since version 54 a block's restamp uses a partial
// index of pending versions again, on the placeholder they carry
// (restamp_generic.sql), made at the table's first write.
func TestHistoryIndexes(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k SELECT g, 'v' FROM generate_series(1, 2000) g")
	inWrite(t, conn, "UPDATE k SET b = 'w' WHERE a % 2 = 0")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	name := strings.TrimPrefix(hist, Schema+".")
	got := snapshotRows(t, conn, "SELECT regexp_replace(pg_get_indexdef(indexrelid), '_k[0-9]+ ', '_k<oid> ') FROM pg_index WHERE indrelid = $1::regclass", hist)
	// (Version 54: and the partial index of versions a block has not
	// restamped yet, by the placeholder they carry; restamp_generic.sql.)
	pending := "(\nCASE\n    WHEN (mz_to = '9223372036854775807'::bigint) THEN mz_from\n    ELSE mz_to\nEND)"
	want := []string{
		fmt.Sprintf("CREATE INDEX %s_k<oid> ON %s USING btree (a, mz_to)", name, hist),
		fmt.Sprintf("CREATE INDEX %s_mz_to ON %s USING btree (mz_to, mz_from)", name, hist),
		// (Version 56: its predicate least(mz_to, mz_from) < 0; hist_trim.sql.)
		fmt.Sprintf("CREATE INDEX %s_pending ON %s USING btree (%s) WHERE (LEAST(mz_to, mz_from) < 0)", name, hist, pending),
	}
	if !slices.Equal(got, want) {
		t.Errorf("indexes of %s: %q, want %q", hist, got, want)
	}
	if _, err := conn.Exec(ctx, "ANALYZE "+hist); err != nil {
		t.Fatal(err)
	}
	for q, index := range map[string]string{
		// The restamp of a block (its generic plan, as PL/pgSQL caches it;
		// since version 54 by the placeholder, restamp_generic.sql).
		fmt.Sprintf(`UPDATE %s h SET mz_to = $2
			WHERE (CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) = $1
			  AND (CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) < 0
			  AND least(h.mz_to, h.mz_from) < 0`, hist): name + "_pending",
		fmt.Sprintf("DELETE FROM %s WHERE mz_to <= $1", hist):                       name + "_mz_to",
		fmt.Sprintf("SELECT a, b FROM %s WHERE mz_from <= $1 AND mz_to > $1", hist): name + "_mz_to",
	} {
		plan := explainGeneric(t, conn, q)
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, index) {
			t.Errorf("%s:\n%s", q, plan)
		}
	}
	historyMatches(t, conn, "k", inBlock(t, conn, "UPDATE k SET b = 'x' WHERE a < 5", "INSERT INTO k VALUES (0, 'n')"), "block")
}

// explainGeneric is the generic plan of q, whose parameters ($1, $2) are
// bigint.
func explainGeneric(t *testing.T, conn *pgx.Conn, q string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	// (A parameter declared and not used is allowed.)
	if _, err := tx.Exec(ctx, "PREPARE q(bigint, bigint) AS "+q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	rows, err := collectText(ctx, tx, "EXPLAIN EXECUTE q(-5, 7)")
	if err != nil {
		t.Fatal(err)
	}
	// (Prepared statements outlive the transaction.)
	if _, err := tx.Exec(ctx, "DEALLOCATE q"); err != nil {
		t.Fatal(err)
	}
	return strings.Join(rows, "\n")
}

// TestUpgradeKeepsHistoryLayout: a database at version 11 keeps its history
// tables as they are (validity columns last, the pending versions' index)
// with trigger functions that spell out the columns, which still record
// history right after ADD/DROP COLUMN and in blocks; a table made after
// the upgrade has the new layout.
func TestUpgradeKeepsHistoryLayout(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	v11 := strings.ReplaceAll(strings.Join(migrations[:11], "\n"), "@SCHEMA@", Schema)
	if _, err := conn.PgConn().Exec(ctx, "BEGIN; "+v11+"; COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	inWrite(t, conn, "CREATE TABLE old (a int PRIMARY KEY, b text)", "INSERT INTO old SELECT g, 'v' FROM generate_series(1, 10) g",
		"CREATE TABLE oldbag (a int, b text)", "INSERT INTO oldbag SELECT g % 3, 'v' FROM generate_series(1, 10) g")
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	inWrite(t, conn, "CREATE TABLE new (a int PRIMARY KEY, b text)")
	layout := `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = (SELECT history FROM mzproxy.catalog WHERE oid = $1::regclass)::regclass AND attnum > 0 AND NOT attisdropped`
	for tb, want := range map[string]string{"old": "a,b,mz_from,mz_to,mz_hash", "oldbag": "a,b,mz_from,mz_to,mz_hash", "new": "mz_from,mz_to,mz_hash,a,b"} {
		if got := queryText(t, conn, layout, tb); got != want {
			t.Errorf("history of %s: %s, want %s", tb, got, want)
		}
	}
	for _, tb := range []string{"old", "oldbag", "new"} {
		historyMatches(t, conn, tb, inWrite(t, conn, "ALTER TABLE "+tb+" ADD COLUMN c int DEFAULT 1"), "add column")
		historyMatches(t, conn, tb, inWrite(t, conn, "INSERT INTO "+tb+" VALUES (20, 'n', 2)", "UPDATE "+tb+" SET c = 3 WHERE a = 1"), "writes")
		historyMatches(t, conn, tb, inBlock(t, conn, "UPDATE "+tb+" SET c = 4 WHERE a = 2", "INSERT INTO "+tb+" VALUES (21, 'm', 5)"), "block")
		historyMatches(t, conn, tb, inWrite(t, conn, "ALTER TABLE "+tb+" DROP COLUMN b"), "drop column")
		historyMatches(t, conn, tb, inBlock(t, conn, "DELETE FROM "+tb+" WHERE a = 20", "UPDATE "+tb+" SET c = 6 WHERE a = 21"), "block after drop")
	}
}

// TestColumnChangeSeenByOtherSession: a session whose history trigger
// plans were made before another session changed the table's columns
// records its next writes with the new columns (the change to the history
// table invalidates the plans that expand the new rows' columns).
func TestColumnChangeSeenByOtherSession(t *testing.T) {
	cs, conn := installedDB(t)
	other := connect(t, cs)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "CREATE TABLE bag (a int, b text)")
	for _, tb := range []string{"k", "bag"} {
		historyMatches(t, other, tb, inWrite(t, other, "INSERT INTO "+tb+" VALUES (1, 'x'), (2, 'y')", "UPDATE "+tb+" SET b = 'z' WHERE a = 1"), "writes before")
		inWrite(t, conn, "ALTER TABLE "+tb+" ADD COLUMN c int DEFAULT 9", "ALTER TABLE "+tb+" DROP COLUMN b")
		historyMatches(t, other, tb, inWrite(t, other, "INSERT INTO "+tb+" VALUES (3, 4)", "UPDATE "+tb+" SET c = 5 WHERE a = 1", "DELETE FROM "+tb+" WHERE a = 2"), "writes after another session's column change")
	}
}

// TestUserColumnsStorageTypes: the user's columns as history stores them,
// a domain as its base type (also as an array's element), with storage_type
// called only for domains and arrays (it was called for every column: a
// PL/pgSQL call and a catalog query each, per ALTER TABLE and CREATE TABLE).
func TestUserColumnsStorageTypes(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE DOMAIN posint AS int CHECK (VALUE > 0)", "CREATE DOMAIN code AS varchar(5)",
		`CREATE TABLE w (a int, b text COLLATE "C", c numeric(10, 2), d posint, e posint[], f code, g int[], h varchar(7)[])`)
	got := queryText(t, conn, "SELECT string_agg(name || ' ' || type, ', ' ORDER BY attnum) FROM "+Schema+".user_columns('w'::regclass)")
	const want = `a integer, b text COLLATE pg_catalog."C", c numeric(10,2), d integer, e integer[], f character varying(5), g integer[], h character varying(7)[]`
	if got != want {
		t.Errorf("user_columns(w):\n%s\nwant\n%s", got, want)
	}
	calls := functionCalls(t, cs, "SELECT count(*) FROM "+Schema+".user_columns('w'::regclass)")
	// d, e, f, g, h and e's and g's and h's elements.
	if n := callCount(calls, "storage_type"); n != 8 {
		t.Errorf("storage_type ran %d times for five domain or array columns, want 8 (%v)", n, calls)
	}
}

// TestAlterKeepsTriggersBySignature: reconcile makes the trigger functions'
// text again (gen_triggers, a dozen catalog queries) only when what it
// depends on changed: the primary key's columns, their names or operator
// classes, whether the table has columns, or a trigger not in place; a
// column change otherwise costs one signature query. History stays right
// after each.
func TestAlterKeepsTriggersBySignature(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE k (a int PRIMARY KEY, b text)", "INSERT INTO k VALUES (1, 'x'), (2, 'y'), (3, 'z')")
	for _, st := range []struct {
		sql  string
		gens int
		key  string // the key column's name after it
	}{
		{"ALTER TABLE k ADD COLUMN c int", 0, "a"}, // CREATE TABLE recorded the signature (version 16)
		{"ALTER TABLE k DROP COLUMN c", 0, "a"},
		{"ALTER TABLE k ADD COLUMN d int DEFAULT 4", 0, "a"},
		{"ALTER TABLE k RENAME COLUMN b TO b2", 0, "a"},
		{"ALTER TABLE k RENAME COLUMN a TO a2", 1, "a2"},
		{"ALTER TABLE k DROP CONSTRAINT k_pkey", 1, "a2"},
		{"ALTER TABLE k ADD COLUMN e int", 0, "a2"},
		{"ALTER TABLE k ADD PRIMARY KEY (a2)", 1, "a2"},
		{"ALTER TABLE k ALTER COLUMN a2 TYPE bigint", 1, "a2"},
		{"ALTER TABLE k DISABLE TRIGGER mzproxy_history_ins", 1, "a2"},
		{"ALTER TABLE k DROP COLUMN e", 0, "a2"},
	} {
		calls := writeCalls(t, cs, -1, st.sql)
		if n := callCount(calls, "gen_triggers"); n != st.gens {
			t.Errorf("%s: gen_triggers ran %d times, want %d (%v)", st.sql, n, st.gens, calls)
		}
		k := st.key
		historyMatches(t, conn, "k", inWrite(t, conn, fmt.Sprintf("INSERT INTO k (%[1]s) SELECT max(%[1]s) + 1 FROM k", k),
			fmt.Sprintf("UPDATE k SET %[1]s = %[1]s + 1000 WHERE %[1]s = (SELECT min(%[1]s) FROM k)", k),
			fmt.Sprintf("DELETE FROM k WHERE %[1]s = (SELECT min(%[1]s) FROM k)", k)), "writes after "+st.sql)
	}
}
