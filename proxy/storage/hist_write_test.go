package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// pinAhead sets P ten minutes ahead of the backend's clock, so that writes
// with no pin between them share T = P + 1 (a pin leaves P up to a second
// ahead; ten minutes keep the clock from catching up during a test on a
// loaded machine). A pin would then wait for the clock: movePin stands for
// one.
func pinAhead(t *testing.T, q Querier) int64 {
	t.Helper()
	return queryInt(t, q, "SELECT setval('"+Schema+".pinned', "+Schema+".now_ms() + 600000)")
}

// movePin moves P on by steps, as pins between writes would.
func movePin(t *testing.T, q Querier, steps int) {
	t.Helper()
	queryInt(t, q, fmt.Sprintf("SELECT setval('%[1]s.pinned', pg_sequence_last_value('%[1]s.pinned') + %d)", Schema, steps))
}

// Random autocommit-style writes (each its own transaction, T chosen by its
// first trigger) of a keyed and a keyless table, most sharing T with the
// write before them: an UPDATE then finds the key's current version written
// at its own T by another transaction, the case the UPDATE of a trigger that
// chose T (version 31) handles only when its two row counts differ; P moved
// on between some writes moves T on. History read at every commit's T is
// the table as that commit left it; no version is empty; no two versions of
// a key overlap.
func TestSharedTimestampHistoryRandom(t *testing.T) {
	_, conn := installedDB(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 31))
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v text)", "CREATE TABLE nk (a int, b text)",
		"INSERT INTO k SELECT g, 'v' FROM generate_series(0, 5) g", "INSERT INTO nk VALUES (1, 'x'), (1, 'x'), (2, NULL)")
	tables := []histTable{{name: "k", cols: "k, v"}, {name: "nk", cols: "a, b"}}
	for i := range tables {
		tables[i].hist = queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = $1::regclass", tables[i].name)
	}
	pinAhead(t, conn)

	vals := []string{"'a'", "'b'", "NULL", "v || 'm'"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	ops := []func() string{
		func() string { return fmt.Sprintf("UPDATE k SET v = %s WHERE k = %d", pick(vals), rng.IntN(6)) },
		func() string { return fmt.Sprintf("UPDATE k SET v = %s WHERE k %% 2 = %d", pick(vals), rng.IntN(2)) },
		func() string { return "UPDATE k SET v = v WHERE k < 3" },
		func() string {
			r := rng.IntN(6)
			return fmt.Sprintf("UPDATE k SET k = k + 10 WHERE k = %d AND NOT EXISTS (SELECT FROM k WHERE k = %d)", r, r+10)
		},
		func() string {
			r := rng.IntN(6)
			return fmt.Sprintf("UPDATE k SET k = k - 10 WHERE k = %d AND NOT EXISTS (SELECT FROM k WHERE k = %d)", r+10, r)
		},
		func() string {
			return fmt.Sprintf("INSERT INTO k VALUES (%d, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v", rng.IntN(6), pick(vals[:3]))
		},
		func() string { return fmt.Sprintf("DELETE FROM k WHERE k = %d", rng.IntN(6)) },
		func() string {
			return fmt.Sprintf("INSERT INTO nk VALUES (%d, %s), (1, 'x')", rng.IntN(3), pick(vals[:3]))
		},
		func() string { return fmt.Sprintf("UPDATE nk SET b = %s WHERE a = %d", pick(vals[:3]), rng.IntN(3)) },
		func() string {
			return fmt.Sprintf("DELETE FROM nk WHERE ctid IN (SELECT ctid FROM nk WHERE a = %d LIMIT 1)", rng.IntN(3))
		},
	}

	type snap struct {
		ts   uint64
		rows map[string][]string
	}
	var snaps []snap
	shared := 0
	for i := 0; i < 200; i++ {
		if rng.IntN(8) == 0 {
			movePin(t, conn, 1+rng.IntN(3))
		}
		ts := lazyWrite(t, conn, ops[rng.IntN(len(ops))]())
		s := snap{ts: ts, rows: map[string][]string{}}
		for _, tb := range tables {
			s.rows[tb.name] = snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s", tb.cols, tb.name))
		}
		switch n := len(snaps); {
		case n > 0 && snaps[n-1].ts == ts:
			shared++
			snaps[n-1] = s
		case n > 0 && snaps[n-1].ts > ts:
			t.Fatalf("commit at %d after one at %d", ts, snaps[n-1].ts)
		default:
			snaps = append(snaps, s)
		}
	}
	if shared < 100 {
		t.Fatalf("%d of 200 writes shared T with the one before, want most", shared)
	}
	for _, s := range snaps {
		for _, tb := range tables {
			got := snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s WHERE mz_from <= $1 AND mz_to > $1", tb.cols, tb.hist), int64(s.ts))
			if !slices.Equal(got, s.rows[tb.name]) {
				t.Fatalf("table %s at %d:\nhistory: %s\ntable:   %s", tb.name, s.ts, strings.Join(got, " "), strings.Join(s.rows[tb.name], " "))
			}
		}
	}
	for _, tb := range tables {
		if n := queryInt(t, conn, fmt.Sprintf("SELECT count(*) FROM %s WHERE mz_from >= mz_to", tb.hist)); n != 0 {
			t.Errorf("%s: %d empty versions (mz_from >= mz_to)", tb.name, n)
		}
	}
	if n := overlappingVersions(t, conn, "k"); n != 0 {
		t.Errorf("%d pairs of versions of one key overlap", n)
	}
}

// An autocommit UPDATE whose trigger chose T below the T of the key's
// current version (written while P was ahead, P then set back) fails with
// 40001 naming that version's T, and leaves the table and its history as
// they were; so does a DELETE.
func TestFreshUpdateOvertaken(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, "CREATE TABLE k (k int PRIMARY KEY, v int)", "INSERT INTO k VALUES (1, 0), (2, 0)")
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'k'::regclass")
	ahead := pinAhead(t, conn) + 1
	if ts := lazyWrite(t, conn, "UPDATE k SET v = 1 WHERE k = 1"); ts != uint64(ahead) {
		t.Fatalf("write at %d, want %d (P + 1)", ts, ahead)
	}
	queryInt(t, conn, "SELECT setval('"+Schema+".pinned', "+Schema+".now_ms())")
	before := snapshotRows(t, conn, "SELECT ROW(h.*)::text FROM "+hist+" h")
	for _, stmt := range []string{"UPDATE k SET v = 2 WHERE k IN (1, 2)", "DELETE FROM k WHERE k IN (1, 2)"} {
		_, err := conn.Exec(ctx, OpenWriteFor(-1)+"; "+stmt)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40001" || !strings.Contains(pe.Detail, fmt.Sprint(ahead)) {
			t.Fatalf("%s: %v, want 40001 naming timestamp %d", stmt, err, ahead)
		}
	}
	if got := snapshotRows(t, conn, "SELECT ROW(k, v)::text FROM k"); !slices.Equal(got, []string{"(1,1)", "(2,0)"}) {
		t.Fatalf("table is %v after the failed writes", got)
	}
	if got := snapshotRows(t, conn, "SELECT ROW(h.*)::text FROM "+hist+" h"); !slices.Equal(got, before) {
		t.Fatalf("history changed:\n%v\nwas\n%v", got, before)
	}
}

// Tables made at version 30 get version 31's trigger functions on upgrade:
// a keyless table's autocommit INSERT, UPDATE and DELETE call no stamp_ts,
// a keyed table's UPDATE still none, and the history of writes after the
// upgrade is the tables' rows.
func TestUpgradeToVersion31(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	installVersion(t, conn, 30)
	inWrite(t, conn, "CREATE TABLE old (k int PRIMARY KEY, v text)", "CREATE TABLE log (a int, b text)",
		"INSERT INTO old VALUES (1, 'a'), (2, 'b')", "INSERT INTO log VALUES (1, 'a'), (1, 'a')")
	if got := writeCalls(t, cs, -1, "INSERT INTO log VALUES (2, 'b')"); callCount(got, "stamp_ts") != 1 {
		t.Fatalf("before the upgrade a keyless INSERT ran %v, want stamp_ts once", got)
	}
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT max(version) FROM "+Schema+".schema_version"); got != SchemaVersion {
		t.Fatalf("version %d after the upgrade, want %d", got, SchemaVersion)
	}
	for _, stmt := range []string{"INSERT INTO log VALUES (3, 'c')", "UPDATE log SET b = 'z' WHERE a = 1", "DELETE FROM log WHERE a = 2",
		"UPDATE old SET v = 'a1' WHERE k = 1", "UPDATE old SET k = 3 WHERE k = 2"} {
		if got := writeCalls(t, cs, -1, stmt); callCount(got, "stamp_ts") != 0 || len(got) != 1 {
			t.Errorf("%s after the upgrade ran %v, want the table's trigger only (the slot is a flat statement since version 44)", stmt, got)
		}
	}
	ts := inWrite(t, conn, "UPDATE old SET v = 'a2' WHERE k = 1", "INSERT INTO log VALUES (4, 'd')")
	historyMatches(t, conn, "old", ts, "keyed writes after the upgrade")
	historyMatches(t, conn, "log", ts, "keyless writes after the upgrade")
	if n := overlappingVersions(t, conn, "old"); n != 0 {
		t.Fatalf("%d pairs of versions of one key overlap", n)
	}
}
