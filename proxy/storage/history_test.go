package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// snapshotRows returns the rows of sql as sorted whole-row text (a multiset).
func snapshotRows(t *testing.T, q Querier, sql string, args ...any) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	slices.Sort(out)
	return out
}

type histTable struct {
	name string
	cols string // column list, also the row text: ROW(cols)::text
	hist string
}

// TestHistoryRandom runs random write transactions through begin_write and
// checks that, for every commit timestamp T, the history query at T returns
// exactly (as a multiset) what the table held right after T's commit.
func TestHistoryRandom(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))

	inWrite(t, conn,
		`CREATE TABLE k (id int PRIMARY KEY, v text, n float8, at timestamptz)`,
		`CREATE TABLE nk (a int, b text, p point, f float8)`,
		`CREATE TABLE ck (x int, y text, z interval, PRIMARY KEY (y, x) DEFERRABLE)`,
	)
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	tables := []histTable{
		{name: "k", cols: "id, v, n, at"},
		{name: "nk", cols: "a, b, p, f"},
		{name: "ck", cols: "x, y, z"},
	}
	for i := range tables {
		tables[i].hist = cat.ByName("public", tables[i].name).History
	}

	vals := []string{"'x'", "'y'", "NULL", "'with space'", "'q\"uote'"}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	nextID := 1000
	floats := []string{"0.1", "1e-300", "3.141592653589793", "NULL", "-0", "'NaN'", "1.0000000000000002"}
	nkRow := func() string {
		a := []string{"1", "2", "NULL"}
		return fmt.Sprintf("(%s, %s, %s, %s)", pick(a), pick(vals), pick([]string{"'(1,2)'", "NULL", "'(0.1,0.2)'"}), pick(floats))
	}
	kRow := func() string {
		return fmt.Sprintf("(%d, %s, %s, %s)", rng.IntN(20), pick(vals), pick(floats),
			pick([]string{"NULL", "'2024-03-01 12:00:00+05'", "'2024-03-01 12:00:00.123456+00'"}))
	}
	ckRow := func() string {
		return fmt.Sprintf("(%d, %s, %s)", rng.IntN(4), pick([]string{"'a'", "'b'", "'c'"}), pick([]string{"interval '1 day'", "NULL::interval", "interval '1 mon 2 days 00:00:01.5'"}))
	}
	ops := []func() []string{
		// k: keyed
		func() []string {
			return []string{fmt.Sprintf("INSERT INTO k VALUES %s ON CONFLICT (id) DO UPDATE SET v = excluded.v, n = excluded.n", kRow())}
		},
		func() []string {
			return []string{fmt.Sprintf("INSERT INTO k SELECT g, 'g', g / 3.0 FROM generate_series(%d, %d) g ON CONFLICT DO NOTHING", rng.IntN(20), rng.IntN(25))}
		},
		func() []string {
			return []string{fmt.Sprintf("UPDATE k SET v = %s, n = n + 1 WHERE id %% 3 = %d", pick(vals), rng.IntN(3))}
		},
		func() []string {
			id := rng.IntN(20)
			return []string{fmt.Sprintf("UPDATE k SET id = id + 100 WHERE id = %d AND NOT EXISTS (SELECT FROM k WHERE id = %d)", id, id+100)}
		},
		func() []string { return []string{fmt.Sprintf("DELETE FROM k WHERE id < %d", rng.IntN(8))} },
		func() []string {
			return []string{fmt.Sprintf(`MERGE INTO k USING (VALUES (%d, %s), (%d, NULL)) s(id, v) ON k.id = s.id
				WHEN MATCHED AND s.v IS NULL THEN DELETE
				WHEN MATCHED THEN UPDATE SET v = s.v
				WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v, 0)`, rng.IntN(20), pick(vals), 20+rng.IntN(20))}
		},
		func() []string {
			if rng.IntN(4) == 0 {
				return []string{"TRUNCATE k"}
			}
			return []string{fmt.Sprintf("INSERT INTO k VALUES %s ON CONFLICT DO NOTHING", kRow())}
		},
		// k: insert and delete in the same transaction
		func() []string {
			nextID++
			return []string{fmt.Sprintf("INSERT INTO k VALUES (%d, 'tmp')", nextID), fmt.Sprintf("UPDATE k SET v = 'tmp2' WHERE id = %d", nextID), fmt.Sprintf("DELETE FROM k WHERE id = %d", nextID)}
		},
		// k: writable CTEs delete and re-insert keys in one query (the
		// INSERT and DELETE triggers of one query fire in either order).
		func() []string {
			id := rng.IntN(20)
			return []string{fmt.Sprintf(`WITH d AS (DELETE FROM k WHERE id = %d RETURNING *) INSERT INTO k SELECT id, %s, n, at FROM d`, id, pick([]string{"v", "'cte'"}))}
		},
		func() []string {
			return []string{`WITH d AS (DELETE FROM nk WHERE ctid IN (SELECT ctid FROM nk LIMIT 2) RETURNING *) INSERT INTO nk SELECT * FROM d UNION ALL SELECT 7, 'cte', NULL, NULL`}
		},
		// nk: keyless, duplicates and NULLs
		func() []string {
			r := nkRow()
			return []string{fmt.Sprintf("INSERT INTO nk VALUES %s, %s, %s, %s", r, r, nkRow(), r)}
		},
		func() []string {
			return []string{fmt.Sprintf("DELETE FROM nk WHERE ctid IN (SELECT ctid FROM nk WHERE a IS NOT DISTINCT FROM %s LIMIT %d)", pick([]string{"1", "2", "NULL"}), 1+rng.IntN(3))}
		},
		func() []string {
			return []string{fmt.Sprintf("DELETE FROM nk WHERE b IS NOT DISTINCT FROM %s", pick(vals))}
		},
		func() []string {
			return []string{fmt.Sprintf("UPDATE nk SET b = %s, f = f * 2 WHERE ctid IN (SELECT ctid FROM nk ORDER BY random() LIMIT %d)", pick(vals), 1+rng.IntN(4))}
		},
		func() []string {
			if rng.IntN(4) == 0 {
				return []string{"TRUNCATE nk"}
			}
			return []string{"INSERT INTO nk VALUES " + nkRow()}
		},
		func() []string {
			r := nkRow()
			return []string{"INSERT INTO nk VALUES " + r, "DELETE FROM nk WHERE ctid = (SELECT max(ctid) FROM nk)", "INSERT INTO nk VALUES " + r}
		},
		// Session settings that change text output must not matter.
		func() []string {
			return []string{"SET LOCAL TimeZone = 'America/New_York'", "SET LOCAL extra_float_digits = -3", "SET LOCAL DateStyle = 'SQL, DMY'",
				"SET LOCAL IntervalStyle = 'iso_8601'",
				fmt.Sprintf("UPDATE k SET at = at + interval '1 hour' WHERE id %% 2 = %d", rng.IntN(2)),
				"DELETE FROM nk WHERE ctid IN (SELECT ctid FROM nk LIMIT 2)",
				"UPDATE ck SET z = z * 2 WHERE x = 1"}
		},
		// ck: composite key
		func() []string {
			return []string{fmt.Sprintf("INSERT INTO ck SELECT * FROM (VALUES %s) v(x, y, z) WHERE NOT EXISTS (SELECT FROM ck WHERE ck.x = v.x AND ck.y = v.y)", ckRow())}
		},
		func() []string { return []string{fmt.Sprintf("DELETE FROM ck WHERE x = %d", rng.IntN(4))} },
		func() []string { return []string{"UPDATE ck SET x = x + 10 WHERE y = 'a'"} },
		// ck: a deferred key briefly has two current versions of one key.
		func() []string {
			x := rng.IntN(4)
			nextID++
			return []string{"SET CONSTRAINTS ALL DEFERRED",
				fmt.Sprintf("INSERT INTO ck VALUES (%d, 'a', interval '%d seconds')", x, nextID),
				fmt.Sprintf("DELETE FROM ck WHERE x = %d AND y = 'a' AND z IS DISTINCT FROM interval '%d seconds'", x, nextID)}
		},
	}

	type snap struct {
		ts   uint64
		rows map[string][]string
	}
	var snaps []snap
	record := func(ts uint64) {
		s := snap{ts: ts, rows: map[string][]string{}}
		for _, tb := range tables {
			s.rows[tb.name] = snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s", tb.cols, tb.name))
		}
		if n := len(snaps); n > 0 && snaps[n-1].ts == ts {
			// Commits one after another may share a timestamp (nothing
			// read between them): history at it is the last one's state.
			snaps[n-1] = s
			return
		}
		if n := len(snaps); n > 0 && snaps[n-1].ts > ts {
			t.Fatalf("commit at %d after one at %d", ts, snaps[n-1].ts)
		}
		snaps = append(snaps, s)
	}
	copyRows := func(ts *uint64) {
		// COPY through begin_write.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		*ts = uint64(queryInt(t, tx, BeginWriteSQL))
		var rows [][]any
		for i := 0; i < 1+rng.IntN(4); i++ {
			rows = append(rows, []any{int32(rng.IntN(3)), "copied", nil, float64(i) / 3})
		}
		rows = append(rows, rows[0])
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"nk"}, []string{"a", "b", "p", "f"}, pgx.CopyFromRows(rows)); err != nil {
			t.Fatal(err)
		}
		nextID++
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"k"}, []string{"id", "v"}, pgx.CopyFromRows([][]any{{int32(nextID), "c"}})); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}

	const steps = 150
	for i := 0; i < steps; i++ {
		var ts uint64
		if rng.IntN(12) == 0 {
			copyRows(&ts)
		} else {
			var stmts []string
			for j := 0; j < 1+rng.IntN(3); j++ {
				stmts = append(stmts, ops[rng.IntN(len(ops))]()...)
			}
			// Half the transactions take their slot as an autocommit
			// write does, T pending until the first history write:
			// its trigger retracts without searching for versions
			// written at T (write_trim.sql), later ones with.
			if rng.IntN(2) == 0 {
				ts = lazyWrite(t, conn, stmts...)
			} else {
				ts = inWrite(t, conn, stmts...)
			}
		}
		record(ts)
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
		t.Logf("%s: %d versions, %d current", tb.name, queryInt(t, conn, "SELECT count(*) FROM "+tb.hist),
			queryInt(t, conn, fmt.Sprintf("SELECT count(*) FROM %s WHERE mz_to = $1", tb.hist), Infinity))
	}
}

// TestHistoryAlter checks that ALTER TABLE keeps history usable: dropped
// columns leave history, added ones are NULL in old versions, renames follow,
// and writes after the ALTER still retract the right versions.
func TestHistoryAlter(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	t1 := inWrite(t, conn, `CREATE TABLE a (id int, s text, gone int)`, `INSERT INTO a VALUES (1, 'one', 10), (2, 'two', 20), (2, 'two', 20)`)
	hist := func() string {
		cat, err := LoadCatalog(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		return cat.ByName("public", "a").History
	}()
	at := func(cols string, ts uint64) []string {
		return snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM %s WHERE mz_from <= $1 AND mz_to > $1", cols, hist), int64(ts))
	}
	now := func(cols string) []string {
		return snapshotRows(t, conn, fmt.Sprintf("SELECT ROW(%s)::text FROM a", cols))
	}
	t2 := inWrite(t, conn, `ALTER TABLE a DROP COLUMN gone`, `ALTER TABLE a ADD COLUMN extra int`, `ALTER TABLE a RENAME COLUMN s TO label`)
	if got, want := at("id, label, extra", t1), []string{"(1,one,)", "(2,two,)", "(2,two,)"}; !slices.Equal(got, want) {
		t.Errorf("at %d: %v, want %v", t1, got, want)
	}
	if got, want := at("id, label, extra", t2), now("id, label, extra"); !slices.Equal(got, want) {
		t.Errorf("at %d: %v, want %v", t2, got, want)
	}
	t3 := inWrite(t, conn, `DELETE FROM a WHERE id = 2 AND ctid = (SELECT min(ctid) FROM a WHERE id = 2)`, `UPDATE a SET extra = 5 WHERE id = 1`, `INSERT INTO a VALUES (3, 'three', 30)`)
	if got, want := at("id, label, extra", t3), now("id, label, extra"); !slices.Equal(got, want) {
		t.Errorf("at %d: %v, want %v", t3, got, want)
	}
	// ADD COLUMN with a default and a type change with USING: the new values
	// appear at the ALTER's timestamp; before it, the old ones.
	t4 := inWrite(t, conn, `ALTER TABLE a ADD COLUMN d int DEFAULT 7`, `ALTER TABLE a ALTER COLUMN label TYPE int USING length(label)`)
	if got, want := at("id, label, extra, d", t4), now("id, label, extra, d"); !slices.Equal(got, want) {
		t.Errorf("at %d: %v, want %v", t4, got, want)
	}
	if got, want := at("id, extra, d", t3), []string{"(1,5,)", "(2,,)", "(3,30,)"}; !slices.Equal(got, want) {
		t.Errorf("at %d after ALTERs: %v, want %v", t3, got, want)
	}
	// Adding a primary key switches retraction to key lookups.
	t5 := inWrite(t, conn, `DELETE FROM a WHERE id = 2`, `ALTER TABLE a ADD PRIMARY KEY (id)`)
	t6 := inWrite(t, conn, `UPDATE a SET d = d + 1`, `DELETE FROM a WHERE id = 3`)
	for _, ts := range []uint64{t5, t6} {
		if got, want := at("id, label, extra, d", ts), now("id, label, extra, d"); ts == t6 && !slices.Equal(got, want) {
			t.Errorf("at %d: %v, want %v", ts, got, want)
		}
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_indexes WHERE schemaname = 'mzproxy' AND tablename = $1 AND indexname ~ '_k[0-9]+$'", strings.TrimPrefix(hist, "mzproxy.")); n != 1 {
		t.Errorf("history lookup indexes: %d, want 1", n)
	}
	// Dropping the key switches back to hash lookups (hashes of the current
	// versions are computed then).
	t7 := inWrite(t, conn, `ALTER TABLE a DROP CONSTRAINT a_pkey`, `INSERT INTO a SELECT * FROM a`)
	t8 := inWrite(t, conn, `DELETE FROM a WHERE ctid IN (SELECT min(ctid) FROM a GROUP BY id)`, `UPDATE a SET d = 0`)
	for _, ts := range []uint64{t7, t8} {
		if got, want := at("id, label, extra, d", ts), now("id, label, extra, d"); ts == t8 && !slices.Equal(got, want) {
			t.Errorf("at %d: %v, want %v", ts, got, want)
		}
	}
	// A column dropped by a cascade from another object leaves history
	// through the proxy, and is refused outside it.
	inWrite(t, conn, `CREATE TYPE tag AS ENUM ('x', 'y')`, `ALTER TABLE a ADD COLUMN tg tag`)
	_, err := conn.Exec(ctx, `DROP TYPE tag CASCADE`)
	wantCode(t, err, string(CodeDDLOutsideProxy), "DROP TYPE CASCADE outside the proxy")
	t9 := inWrite(t, conn, `DROP TYPE tag CASCADE`, `UPDATE a SET d = d + 1`)
	if got, want := at("id, label, extra, d", t9), now("id, label, extra, d"); !slices.Equal(got, want) {
		t.Errorf("at %d after DROP TYPE CASCADE: %v, want %v", t9, got, want)
	}
	// Writes outside the proxy are still refused after all that.
	if _, err := conn.Exec(ctx, `DELETE FROM a`); err == nil {
		t.Error("direct DELETE after ALTERs succeeded")
	}
}

// Foreign-key cascades fire the child's statement triggers too, and a
// version written and retracted at the same timestamp leaves nothing behind.
func TestHistoryCascadeAndSameTimestamp(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn,
		`CREATE TABLE parent (id int PRIMARY KEY)`,
		`CREATE TABLE child (pid int REFERENCES parent ON DELETE CASCADE ON UPDATE CASCADE, note text)`,
		`INSERT INTO parent VALUES (1), (2)`,
		`INSERT INTO child VALUES (1, 'a'), (1, 'a'), (2, 'b')`)
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	child := cat.ByName("public", "child").History
	t2 := inWrite(t, conn, `UPDATE parent SET id = 10 WHERE id = 1`, `DELETE FROM parent WHERE id = 2`)
	got := snapshotRows(t, conn, "SELECT ROW(pid, note)::text FROM "+child+" WHERE mz_from <= $1 AND mz_to > $1", int64(t2))
	if want := snapshotRows(t, conn, "SELECT ROW(pid, note)::text FROM child"); !slices.Equal(got, want) || len(want) != 2 {
		t.Fatalf("child history after cascades %v, table %v", got, want)
	}
	before := queryInt(t, conn, "SELECT count(*) FROM "+child)
	inWrite(t, conn, `INSERT INTO child VALUES (10, 'tmp')`, `UPDATE child SET note = 'tmp2' WHERE note = 'tmp'`, `DELETE FROM child WHERE note = 'tmp2'`)
	if after := queryInt(t, conn, "SELECT count(*) FROM "+child); after != before {
		t.Fatalf("insert+update+delete at one timestamp left %d versions", after-before)
	}
}

// Odd names and types: quoted identifiers, a table without columns, enum,
// domain, array, jsonb, a type in another schema, generated and identity
// columns; reserved column names are refused.
func TestHistoryOddTables(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn,
		`CREATE SCHEMA "My Schema"`,
		`CREATE TYPE "My Schema".mood AS ENUM ('sad', 'ok', 'happy')`,
		`CREATE DOMAIN posint AS int CHECK (VALUE > 0)`,
		`CREATE TABLE "My Schema"."Odd Table" ("Col A" int GENERATED ALWAYS AS IDENTITY, "b""q" "My Schema".mood, c posint, d jsonb, e text[], f int GENERATED ALWAYS AS (c * 2) STORED)`,
		`CREATE TABLE empty ()`,
		`INSERT INTO "My Schema"."Odd Table" ("b""q", c, d, e) VALUES ('ok', 1, '{"a": [1, 2]}', '{x,"y z"}'), ('sad', 2, NULL, NULL), ('sad', 2, NULL, NULL)`,
		`INSERT INTO empty DEFAULT VALUES`, `INSERT INTO empty DEFAULT VALUES`)
	t2 := inWrite(t, conn,
		`UPDATE "My Schema"."Odd Table" SET "b""q" = 'happy', d = d || '{"b": 1}' WHERE c = 1`,
		`DELETE FROM "My Schema"."Odd Table" WHERE ctid = (SELECT min(ctid) FROM "My Schema"."Odd Table" WHERE c = 2)`,
		`DELETE FROM empty WHERE ctid = (SELECT min(ctid) FROM empty)`)
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	odd := cat.ByName("My Schema", "Odd Table")
	if odd == nil || len(odd.Columns) != 6 || odd.Columns[1].Type != `"My Schema".mood` || odd.Columns[2].Type != "public.posint" {
		t.Fatalf("odd table: %+v", odd)
	}
	cols := `"Col A", "b""q", c, d, e, f`
	got := snapshotRows(t, conn, "SELECT ROW("+cols+")::text FROM "+odd.History+" WHERE mz_from <= $1 AND mz_to > $1", int64(t2))
	want := snapshotRows(t, conn, `SELECT ROW(`+cols+`)::text FROM "My Schema"."Odd Table"`)
	if !slices.Equal(got, want) {
		t.Errorf("odd table at %d: %v, want %v", t2, got, want)
	}
	empty := cat.ByName("public", "empty")
	if n := queryInt(t, conn, "SELECT count(*) FROM "+empty.History+" WHERE mz_from <= $1 AND mz_to > $1", int64(t2)); n != 1 || len(empty.Columns) != 0 {
		t.Errorf("empty table history at %d: %d rows, want 1", t2, n)
	}
	tx, _ := conn.Begin(ctx)
	defer tx.Rollback(ctx)
	queryInt(t, tx, BeginWriteSQL)
	_, err = tx.Exec(ctx, `CREATE TABLE bad (mz_from int)`)
	wantCode(t, err, "42939", "reserved column name")
}

// The storage model's central claim: a snapshot taken with the gate held
// and pinned at t sees every commit at or below t and none above, so the
// table equals its history at t, and upper = t+1. Checked with concurrent
// writers (which may share a T) and readers.
func TestSnapshotInvariantConcurrent(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, `CREATE TABLE c (w int, i int, v text)`)
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	hist := cat.ByName("public", "c").History

	const writers, perWriter, readers = 4, 25, 2
	errs := make(chan error, writers+readers)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < writers; w++ {
		wc := connect(t, cs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				tx, err := wc.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				var ts int64
				err = tx.QueryRow(ctx, BeginWriteSQL).Scan(&ts)
				if err == nil {
					_, err = tx.Exec(ctx, `INSERT INTO c VALUES ($1, $2, 'v'), ($1, $2, 'v')`, w, i)
				}
				if err == nil && i%3 == 2 {
					_, err = tx.Exec(ctx, `UPDATE c SET v = v || 'x' WHERE w = $1 AND i = $2 - 1`, w, i)
				}
				if err == nil && i%5 == 4 {
					_, err = tx.Exec(ctx, `DELETE FROM c WHERE w = $1 AND i = $2 - 2 AND ctid = (SELECT min(ctid) FROM c WHERE w = $1 AND i = $2 - 2)`, w, i)
				}
				if err == nil {
					err = tx.Commit(ctx)
				}
				if err != nil {
					tx.Rollback(ctx)
					errs <- err
					return
				}
				if ts == 0 {
					errs <- fmt.Errorf("writer %d committed at timestamp 0", w)
					return
				}
			}
		}()
	}
	var checks atomic.Int64
	var rwg sync.WaitGroup
	for r := 0; r < readers; r++ {
		rc := connect(t, cs)
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := checkSnapshot(ctx, rc, hist); err != nil {
					errs <- err
					return
				}
				checks.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := checkSnapshot(ctx, conn, hist); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d snapshot checks during %d commits", checks.Load(), writers*perWriter)
}

func checkSnapshot(ctx context.Context, conn *pgx.Conn, hist string) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var readTS, upper, maxFrom int64
	for _, sql := range PinSnapshotSQL {
		if sql == PinSQL {
			err = tx.QueryRow(ctx, "SELECT "+Schema+".pin_held(), (SELECT upper FROM "+Schema+".txns), (SELECT coalesce(max(mz_from), 0) FROM "+hist+")").Scan(&readTS, &upper, &maxFrom)
		} else {
			_, err = tx.Exec(ctx, sql)
		}
		if err != nil {
			return err
		}
	}
	if upper != readTS+1 || maxFrom > readTS {
		return fmt.Errorf("snapshot: read_ts %d, upper %d, newest version %d", readTS, upper, maxFrom)
	}
	table, err := collectText(ctx, tx, "SELECT ROW(w, i, v)::text FROM c")
	if err != nil {
		return err
	}
	h, err := collectText(ctx, tx, "SELECT ROW(w, i, v)::text FROM "+hist+" WHERE mz_from <= $1 AND mz_to > $1", readTS)
	if err != nil {
		return err
	}
	if !slices.Equal(table, h) {
		return fmt.Errorf("snapshot at read_ts %d: table has %d rows, history %d", readTS, len(table), len(h))
	}
	return nil
}

func collectText(ctx context.Context, q Querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	slices.Sort(out)
	return out, err
}

// Primary keys of types outside pg_catalog (citext in public) and keys that
// are deferrable, under a session search_path that does not list public.
func TestHistoryKeyOperators(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS citext`); err != nil {
		t.Skip("citext not available:", err)
	}
	inWrite(t, conn,
		`CREATE TABLE ci (name citext PRIMARY KEY, n int)`,
		`CREATE TABLE dk (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, n int)`,
		`INSERT INTO ci VALUES ('Alice', 1), ('bob', 2)`,
		`INSERT INTO dk VALUES (1, 1), (2, 2)`)
	ts := inWrite(t, conn,
		`SET LOCAL search_path = pg_catalog`,
		`UPDATE public.ci SET n = n + 10 WHERE name = 'ALICE'::public.citext`,
		`DELETE FROM public.ci WHERE n = 2`,
		`INSERT INTO public.dk VALUES (1, 100)`, // duplicate key until the DELETE below
		`DELETE FROM public.dk WHERE id = 1 AND n = 1`,
		`UPDATE public.dk SET id = id + 1`)
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ table, cols string }{{"ci", "name, n"}, {"dk", "id, n"}} {
		got := snapshotRows(t, conn, "SELECT ROW("+tc.cols+")::text FROM "+cat.ByName("public", tc.table).History+" WHERE mz_from <= $1 AND mz_to > $1", int64(ts))
		want := snapshotRows(t, conn, "SELECT ROW("+tc.cols+")::text FROM "+tc.table)
		if !slices.Equal(got, want) {
			t.Errorf("%s at %d: %v, want %v", tc.table, ts, got, want)
		}
	}
}

// After bulk statements (whose plans the session caches), a single-row
// UPDATE or DELETE must still find its versions through the lookup index,
// not by scanning every current version. Checked on the plans auto_explain
// reports for the trigger's statements.
func TestRetractionPlansAfterBulk(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn, `CREATE TABLE big (id int PRIMARY KEY, n int)`, `INSERT INTO big SELECT g, 0 FROM generate_series(1, 5000) g`,
		`CREATE TABLE bag (id int, n int)`, `INSERT INTO bag SELECT g % 2500, 0 FROM generate_series(1, 5000) g`)
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE "+cat.ByName("public", "big").History+", "+cat.ByName("public", "bag").History); err != nil {
		t.Fatal(err)
	}
	var notices []string
	cfg, err := pgx.ParseConfig(cs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	sess, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	for i := 0; i < 7; i++ { // past plpgsql's five custom plans
		inWrite(t, sess, `UPDATE big SET n = n + 1`, `UPDATE bag SET n = n + 1`)
	}
	if _, err := sess.Exec(ctx, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;
		SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice`); err != nil {
		t.Skip("auto_explain not available:", err)
	}
	notices = nil
	inWrite(t, sess, `UPDATE big SET n = n + 1 WHERE id = 7`, `DELETE FROM big WHERE id = 8`,
		`UPDATE bag SET n = n + 1 WHERE id = 7`, `DELETE FROM bag WHERE id = 8`)
	var checked int
	for _, n := range notices {
		if !strings.Contains(n, "FROM mz_old d") {
			continue
		}
		checked++
		// (An index scan of (mz_to, mz_from) for versions written at _t
		// reads only those; one of mz_to = Infinity alone reads them all.)
		if strings.Contains(n, "Seq Scan on h") || strings.Contains(n, "Index Cond: (mz_to = '9223372036854775807'::bigint)") || strings.Contains(n, "Hash Join") {
			t.Errorf("retraction plan scans current versions:\n%s", n)
		}
	}
	if checked != 4 {
		t.Errorf("saw %d retraction plans, want 4", checked)
	}
}
