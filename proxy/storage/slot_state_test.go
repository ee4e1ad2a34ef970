package storage

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A transaction that read a table at its timestamp and then wrote cannot
// take itself out of the check by changing its settings after its first
// write (before version 23, slot_state.sql, the count of writes at its pin
// was the setting mzproxy.read_writes, and without it fix_write did not
// check: the write skew committed), nor by taking its slot again without
// the count.
func TestReadThenWriteSettingReset(t *testing.T) {
	cs, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "CREATE TABLE b (k int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)")
	other := connect(t, cs)
	for _, reset := range []string{
		"RESET mzproxy.read_writes",
		"SET LOCAL mzproxy.read_writes = ''",
		"RESET ALL",
		"SELECT set_config('mzproxy.read_writes', '', true)",
		OpenWriteDeferredFor(-1),
		OpenWriteAfterReadFor(-1, 1<<40),
	} {
		t.Run(reset, func(t *testing.T) {
			ctx := context.Background()
			tx, writes := pinnedReader(t, conn)
			queryInt(t, tx, "SELECT count(*) FROM a")
			autocommitWrite(t, other, "UPDATE a SET v = v + 1")
			queryInt(t, tx, OpenWriteAfterReadFor(-1, writes))
			for _, q := range []string{"UPDATE b SET v = v + 1", reset} {
				if _, err := tx.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := tx.Commit(ctx); !isSerializationFailure(err) {
				t.Fatalf("read a, wrote b, %s, another session wrote a: COMMIT %v, want 40001", reset, err)
			}
		})
	}
}

// A block's COMMIT and its later writes work after its settings were reset
// (RESET ALL failed its COMMIT with 42501 before version 23, and its later
// writes with MZ002), at one T with no placeholder left, also when its T
// was chosen before the reset (commit_write_tx, as a read of its own writes
// or DDL choose it); a setting replaced by one mzproxy did not make still
// fails the COMMIT with 42501. No row of deferred_slots outlives its block.
func TestDeferredSlotAfterReset(t *testing.T) {
	_, conn := installedDB(t)
	inWrite(t, conn, "CREATE TABLE a (k int PRIMARY KEY, v int)", "INSERT INTO a VALUES (1, 0)")
	ctx := context.Background()
	hist := queryText(t, conn, "SELECT history FROM "+Schema+".catalog WHERE oid = 'a'::regclass")
	id := 1
	for _, early := range []string{"SELECT 1", CommitWriteTxFor(-1)} {
		for _, reset := range []string{"RESET ALL", "RESET mzproxy.write_ts", "SET LOCAL mzproxy.write_ts = ''"} {
			id++
			t.Run(early+", "+reset, func(t *testing.T) {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				for _, q := range []string{OpenWriteDeferredFor(-1), "UPDATE a SET v = v + 1 WHERE k = 1", early, reset,
					"INSERT INTO a VALUES (" + strconv.Itoa(id) + ", 0)", "UPDATE a SET v = v + 1 WHERE k = 1", CommitWriteTxFor(-1)} {
					if _, err := tx.Exec(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatalf("COMMIT after %s: %v", reset, err)
				}
				ts := uint64(queryInt(t, conn, "SELECT max(mz_from) FROM "+hist))
				historyMatches(t, conn, "a", ts, reset)
				if n := queryInt(t, conn, "SELECT count(*) FROM "+hist+" WHERE mz_from = $1", int64(ts)); n != 2 {
					t.Errorf("%d versions written at the block's T %d, want 2 (row 1 and the insert)", n, ts)
				}
				if n := queryInt(t, conn, "SELECT count(*) FROM "+Schema+".deferred_slots"); n != 0 {
					t.Errorf("%d rows of deferred_slots left after the COMMIT", n)
				}
			})
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{OpenWriteDeferredFor(-1), "UPDATE a SET v = v + 1", "SET LOCAL mzproxy.write_ts = '-1 - forged'"} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var pe *pgconn.PgError
	if err := tx.Commit(ctx); !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("COMMIT with a forged slot: %v, want 42501", err)
	}
}
