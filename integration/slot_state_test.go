package integration

import (
	"context"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A transaction block's write slot, and the count of writes its
// read-then-write check compares against, live in mzproxy's own table
// (storage: slot_state.sql), not in settings the client can reset.

// roleSessions starts a proxy and returns an admin connection (direct, a
// superuser) to a fresh database holding the table acc, and n sessions of
// an ordinary role through the proxy, which owns acc.
func roleSessions(t *testing.T, ctx context.Context, n int) (*pgx.Conn, []*pgx.Conn) {
	t.Helper()
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	admin := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, admin, "GRANT CREATE ON SCHEMA public TO "+role)
	var sessions []*pgx.Conn
	for i := 0; i < n; i++ {
		sessions = append(sessions, connectTo(t, ctx, p.URL(role, db)))
	}
	accTable(t, ctx, sessions[0], admin)
	return admin, sessions
}

// TestTrustResetReadCheck: a role that read acc in a block and then wrote
// cannot take its transaction out of the read-then-write check by
// resetting settings after its write: the write skew still fails with
// 40001 (it committed with RESET mzproxy.read_writes or SET LOCAL
// mzproxy.read_writes to an empty value before storage
// version 23).
func TestTrustResetReadCheck(t *testing.T) {
	ctx := testContext(t)
	_, s := roleSessions(t, ctx, 2)
	for _, reset := range []string{
		"RESET mzproxy.read_writes",
		"SET LOCAL mzproxy.read_writes = ''",
		"SELECT set_config('mzproxy.read_writes', '', true)",
		"RESET ALL",
	} {
		t.Run(reset, func(t *testing.T) {
			writeSkewAfter(t, ctx, s[0], s[1], reset)
		})
	}
}

// writeSkewAfter is writeSkew (hostile8_test.go) with b running reset after
// its write.
func writeSkewAfter(t *testing.T, ctx context.Context, a, b *pgx.Conn, reset string) {
	t.Helper()
	before := count(t, ctx, a, "SELECT sum(bal) FROM acc", pgx.QueryExecModeSimpleProtocol)
	for _, c := range []*pgx.Conn{a, b} {
		mustExec(t, ctx, c, "BEGIN")
		if sum := count(t, ctx, c, "SELECT sum(bal) FROM acc", pgx.QueryExecModeSimpleProtocol); sum != before {
			t.Fatalf("the read in the block: %d, want %d", sum, before)
		}
	}
	mustExec(t, ctx, a, "UPDATE acc SET bal = bal - 10 WHERE id = 1")
	mustExec(t, ctx, b, "UPDATE acc SET bal = bal - 10 WHERE id = 2", reset)
	if _, err := a.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("the first COMMIT: %v", err)
	}
	_, err := b.Exec(ctx, "COMMIT")
	wantCode(t, err, "40001")
	if after := count(t, ctx, a, "SELECT sum(bal) FROM acc", pgx.QueryExecModeSimpleProtocol); after != before-10 {
		t.Fatalf("sum %d after the write skew with %s, want %d", after, reset, before-10)
	}
}

// TestTxnResetAllInWriteBlock: RESET ALL (or RESET mzproxy.write_ts) in a
// block that wrote changes nothing about its writes, as in PostgreSQL,
// before or after DDL in the block chose its timestamp: it writes
// again, reads its writes and commits, all of it at one timestamp, with
// its history exact (the COMMIT failed with 42501 and the later write with MZ002 before
// storage version 23). DISCARD ALL is refused in a block, as by PostgreSQL.
func TestTxnResetAllInWriteBlock(t *testing.T) {
	ctx := testContext(t)
	admin, s := roleSessions(t, ctx, 1)
	c := s[0]
	var hist string
	if err := admin.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE oid = 'acc'::regclass").Scan(&hist); err != nil {
		t.Fatal(err)
	}
	id := 2
	// DDL chooses the block's T before the reset.
	for _, early := range []string{"SELECT 1", "CREATE TABLE ddl_in_block (k int)"} {
		for _, reset := range []string{"RESET ALL", "RESET mzproxy.write_ts", "SET LOCAL mzproxy.write_ts = ''"} {
			id++
			t.Run(early+", "+reset, func(t *testing.T) {
				defer c.Exec(ctx, "ROLLBACK") // a failure leaves the next subtest a session outside a block
				mustExec(t, ctx, c, "BEGIN", "UPDATE acc SET bal = bal + 1 WHERE id = 1", early, reset)
				mustExec(t, ctx, c, "INSERT INTO acc VALUES ("+strconv.Itoa(id)+", 7)", "UPDATE acc SET bal = bal + 1 WHERE id = 1")
				if n := count(t, ctx, c, "SELECT count(*) FROM acc", pgx.QueryExecModeSimpleProtocol); n != id {
					t.Fatalf("the block reads %d rows of its own, want %d", n, id)
				}
				if _, err := c.Exec(ctx, "COMMIT"); err != nil {
					t.Fatalf("COMMIT after %s: %v", reset, err)
				}
				exactHistory(t, ctx, admin, hist, 2)
				mustExec(t, ctx, c, "DROP TABLE IF EXISTS ddl_in_block")
			})
		}
	}
	mustExec(t, ctx, c, "BEGIN", "UPDATE acc SET bal = bal + 1 WHERE id = 1")
	_, err := c.Exec(ctx, "DISCARD ALL")
	wantCode(t, err, "25001")
	mustExec(t, ctx, c, "ROLLBACK")
}

// exactHistory fails t unless history table hist holds no placeholder and
// its versions current at its newest timestamp are the rows of acc, of
// which written were written at that timestamp.
func exactHistory(t *testing.T, ctx context.Context, admin *pgx.Conn, hist string, written int) {
	t.Helper()
	var bad, atT, diff int
	err := admin.QueryRow(ctx, `WITH t AS (SELECT max(mz_from) AS t FROM `+hist+`),
		v AS (SELECT h.id, h.bal FROM `+hist+` h, t WHERE h.mz_from <= t.t AND h.mz_to > t.t)
		SELECT (SELECT count(*) FROM `+hist+` WHERE mz_from < 0 OR mz_to < 0 OR mz_from >= mz_to),
		       (SELECT count(*) FROM `+hist+` h, t WHERE h.mz_from = t.t),
		       (SELECT count(*) FROM ((SELECT * FROM v EXCEPT SELECT id, bal FROM acc) UNION ALL (SELECT id, bal FROM acc EXCEPT SELECT * FROM v)) d)`).
		Scan(&bad, &atT, &diff)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 0 || atT != written || diff != 0 {
		t.Fatalf("history: %d versions with a placeholder or empty, %d written at the newest timestamp (want %d), %d rows differ from acc",
			bad, atT, written, diff)
	}
}

// TestWritesResetAllAutocommit: RESET ALL between the writes of an
// autocommit query string does not make the later ones fail (MZ002: the
// slot of the string's transaction was the setting RESET ALL takes away);
// the string commits at one timestamp, as in PostgreSQL.
func TestWritesResetAllAutocommit(t *testing.T) {
	ctx := testContext(t)
	admin, s := roleSessions(t, ctx, 1)
	var hist string
	if err := admin.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE oid = 'acc'::regclass").Scan(&hist); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, s[0], "UPDATE acc SET bal = bal + 1 WHERE id = 1; RESET ALL; INSERT INTO acc VALUES (3, 7); SET statement_timeout = '1min'")
	exactHistory(t, ctx, admin, hist, 2)
	if n := count(t, ctx, s[0], "SELECT count(*) FROM acc", pgx.QueryExecModeSimpleProtocol); n != 3 {
		t.Fatalf("%d rows after the string, want 3", n)
	}
}
