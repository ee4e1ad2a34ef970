package storage

import (
	"context"
	"testing"
)

// triggerTimeZones is how many of table's history trigger functions (_ins,
// _upd, _del) set TimeZone, the mark of the six output settings.
func triggerTimeZones(t *testing.T, q Querier, table string) int64 {
	t.Helper()
	return queryInt(t, q, `SELECT count(*) FROM pg_proc p, `+Schema+`.catalog k
		WHERE k.oid = $1::regclass AND p.oid IN (to_regprocedure(k.history || '_ins()'), to_regprocedure(k.history || '_upd()'),
		                                         to_regprocedure(k.history || '_del()'))
		  AND 'TimeZone=UTC' = ANY (p.proconfig)`, table)
}

// row_text_fixed: which column types make a row's text the same under
// any setting, through domains and arrays.
func TestRowTextFixed(t *testing.T) {
	_, conn := installedDB(t)
	for _, c := range []struct {
		columns string
		fixed   bool
	}{
		{"a int, b bigint, c smallint, d text, e varchar(8), f char(3), g numeric(10, 2), h boolean, i uuid, j name, k \"char\", l oid", true},
		{"a int[], b text[][]", true},
		{"a positive_int, b positive_int[]", true},
		{"", true},
		{"a int, b float8", false},
		{"a real", false},
		{"a timestamptz", false},
		{"a date", false},
		{"a interval", false},
		{"a bytea", false},
		{"a money", false},
		{"a float8[]", false},
		{"a stamp", false},
		{"a jsonb", false},
	} {
		if _, err := conn.Exec(context.Background(), `DROP TABLE IF EXISTS rt; DROP DOMAIN IF EXISTS positive_int; DROP DOMAIN IF EXISTS stamp;
			CREATE DOMAIN positive_int AS int CHECK (VALUE > 0); CREATE DOMAIN stamp AS timestamptz;
			CREATE TABLE rt (`+c.columns+`)`); err != nil {
			t.Fatal(err)
		}
		if got := queryInt(t, conn, "SELECT "+Schema+".row_text_fixed('rt'::regclass)::int"); got != map[bool]int64{false: 0, true: 1}[c.fixed] {
			t.Errorf("row_text_fixed of (%s) = %d, want %v", c.columns, got, c.fixed)
		}
	}
	// A dropped column counts no more.
	if _, err := conn.Exec(context.Background(), "ALTER TABLE rt DROP COLUMN a"); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT "+Schema+".row_text_fixed('rt'::regclass)::int"); got != 1 {
		t.Errorf("row_text_fixed after the only column was dropped = %d", got)
	}
}

// A keyless table whose text no setting changes gets history triggers
// without the six output settings; one with a timestamptz keeps them, and
// a column added or dropped makes them again when the flag flips. A row
// written under one TimeZone and DateStyle and retracted under another
// keeps history exact either way.
func TestKeylessTriggerSettings(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE n (id int, v text)", "CREATE TABLE z (id int, at timestamptz)",
		"INSERT INTO n VALUES (1, 'a')", "INSERT INTO z VALUES (1, '2026-12-04 12:00:00+00')")
	if got := triggerTimeZones(t, conn, "n"); got != 0 {
		t.Errorf("n (int, text): %d trigger functions set the output settings, want 0", got)
	}
	if got := triggerTimeZones(t, conn, "z"); got != 3 {
		t.Errorf("z (int, timestamptz): %d trigger functions set the output settings, want 3", got)
	}
	other := connect(t, cs)
	settings := func(zone, style string) {
		if _, err := other.Exec(ctx, "SET TimeZone = '"+zone+"'; SET DateStyle = '"+style+"'; SET extra_float_digits = 0"); err != nil {
			t.Fatal(err)
		}
	}
	// The flag flips: a timestamptz column added, written under one zone,
	// retracted under another.
	inWrite(t, conn, "ALTER TABLE n ADD COLUMN at timestamptz")
	if got := triggerTimeZones(t, conn, "n"); got != 3 {
		t.Errorf("n after a timestamptz column was added: %d trigger functions set the output settings, want 3", got)
	}
	settings("America/New_York", "SQL, DMY")
	inWrite(t, other, "INSERT INTO n VALUES (2, 'b', '2026-12-04 12:00:00+00')", "INSERT INTO z VALUES (2, '2026-12-04 13:00:00+00')")
	settings("Asia/Tokyo", "German")
	inWrite(t, other, "DELETE FROM n WHERE id = 2", "UPDATE z SET id = 3 WHERE id = 2", "UPDATE n SET v = 'c' WHERE id = 1")
	historyMatches(t, conn, "n", uint64(queryInt(t, conn, ReadTSSQL)), "n with a timestamptz column")
	historyMatches(t, conn, "z", uint64(queryInt(t, conn, ReadTSSQL)), "z")
	// And back: the column dropped, the settings go.
	inWrite(t, conn, "ALTER TABLE n DROP COLUMN at")
	if got := triggerTimeZones(t, conn, "n"); got != 0 {
		t.Errorf("n after its timestamptz column was dropped: %d trigger functions set the output settings, want 0", got)
	}
	settings("America/New_York", "SQL, DMY")
	inWrite(t, other, "INSERT INTO n VALUES (4, 'd')", "UPDATE n SET v = 'e' WHERE id = 1")
	settings("Asia/Tokyo", "German")
	inWrite(t, other, "DELETE FROM n WHERE id = 4", "UPDATE n SET v = 'f' WHERE id = 1")
	historyMatches(t, conn, "n", uint64(queryInt(t, conn, ReadTSSQL)), "n after the column was dropped")
	// A column's type changed to one that needs them.
	inWrite(t, conn, "ALTER TABLE n ALTER COLUMN v TYPE float8 USING 1.5")
	if got := triggerTimeZones(t, conn, "n"); got != 3 {
		t.Errorf("n after v became float8: %d trigger functions set the output settings, want 3", got)
	}
	settings("UTC", "ISO, MDY")
	inWrite(t, other, "INSERT INTO n VALUES (5, 0.1)")
	if _, err := other.Exec(ctx, "SET extra_float_digits = -3"); err != nil {
		t.Fatal(err)
	}
	inWrite(t, other, "DELETE FROM n WHERE id = 5")
	historyMatches(t, conn, "n", uint64(queryInt(t, conn, ReadTSSQL)), "n with a float8 column")
}

// The upgrade from 58 makes the history triggers of a keyless table whose
// text no setting changes again without the six output settings, and
// leaves them on one that needs them and off a keyed one; writes after it
// keep history exact. Fails on version 57 (every keyless table's trigger
// functions set them).
func TestUpgradeToVersion59(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 58)
	inWrite(t, conn, "CREATE TABLE n (id int, v text)", "CREATE TABLE z (id int, at timestamptz)", "CREATE TABLE k (id int PRIMARY KEY, v int)",
		"INSERT INTO n VALUES (1, 'a'), (2, 'b')", "INSERT INTO z VALUES (1, now())", "INSERT INTO k VALUES (1, 1)")
	for table, want := range map[string]int64{"n": 3, "z": 3, "k": 0} {
		if got := triggerTimeZones(t, conn, table); got != want {
			t.Fatalf("%s at version 58: %d trigger functions set the output settings, want %d", table, got, want)
		}
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	for table, want := range map[string]int64{"n": 0, "z": 3, "k": 0} {
		if got := triggerTimeZones(t, conn, table); got != want {
			t.Errorf("%s after the upgrade: %d trigger functions set the output settings, want %d", table, got, want)
		}
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM information_schema.routine_privileges WHERE grantee = 'PUBLIC'
		AND routine_schema = '`+Schema+`' AND routine_name = 'row_text_fixed'`); n != 0 {
		t.Errorf("PUBLIC may run row_text_fixed")
	}
	// Versions written before the upgrade (hashed with the settings) are
	// retracted by the triggers without them.
	inWrite(t, conn, "DELETE FROM n WHERE id = 1", "UPDATE n SET v = 'c' WHERE id = 2", "UPDATE z SET id = 2", "UPDATE k SET v = 2")
	for _, table := range []string{"n", "z", "k"} {
		historyMatches(t, conn, table, uint64(queryInt(t, conn, ReadTSSQL)), "writes after the upgrade")
	}
}
