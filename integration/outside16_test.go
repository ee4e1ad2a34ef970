package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Session 16's attacks from outside, and the known gaps it closed. Each
// test here failed on the code before its fix (d31f8c1), or is skipped as
// a known bug.

// protocol is how a test sends a statement without parameters: pgx's
// Exec of one sends it as a simple Query whatever its mode.
type protocol int

const (
	simpleQuery protocol = iota
	unnamedStmt          // Parse, Bind, Describe, Execute, Sync
	namedStmt            // Parse, Describe, Sync; then Bind, Execute, Sync
)

func (p protocol) String() string {
	return [...]string{"simple", "unnamed statement", "named statement"}[p]
}

var protocols = []protocol{simpleQuery, unnamedStmt, namedStmt}

// sendIn runs sql on conn in protocol p.
func sendIn(ctx context.Context, conn *pgx.Conn, p protocol, sql string) (pgconn.CommandTag, error) {
	pc := conn.PgConn()
	switch p {
	case unnamedStmt:
		return pc.ExecParams(ctx, sql, nil, nil, nil, nil).Close()
	case namedStmt:
		name := fmt.Sprintf("o16_%d", nameSeq.Add(1))
		if _, err := pc.Prepare(ctx, name, sql, nil); err != nil {
			return pgconn.CommandTag{}, err
		}
		return pc.ExecPrepared(ctx, name, nil, nil, nil).Close()
	}
	return conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
}

// TestOutside16DropDatabaseExtended: a DROP DATABASE sent in the extended
// protocol (pgx's exec modes, as JDBC and node-postgres send it) of a
// database the proxy still has its own connections in succeeds at once,
// as the same statement in the simple protocol does: plain, IF EXISTS,
// WITH (FORCE), through an unnamed and a named statement. In a transaction
// block it gets PostgreSQL's 25001. Before, it met the proxy's own
// connections (55006) until --idle-release.
func TestOutside16DropDatabaseExtended(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pg := newPrivateCluster(t, ctx)
	direct := connectTo(t, ctx, pg.url())
	mustExec(t, ctx, direct, "CREATE ROLE maker LOGIN CREATEDB")
	p := startProxy(t, "--backend", pg.url(), "--idle-release", "0")
	maker := connectTo(t, ctx, p.URL("maker", "postgres"))
	for i, c := range []struct {
		sql  string
		mode protocol
	}{
		{"DROP DATABASE ext", unnamedStmt},
		{"DROP DATABASE IF EXISTS ext", namedStmt},
		{"DROP DATABASE ext WITH (FORCE)", unnamedStmt},
		{"DROP DATABASE IF EXISTS ext WITH (FORCE)", namedStmt},
	} {
		mustExec(t, ctx, maker, "CREATE DATABASE ext")
		used := connectTo(t, ctx, p.URL("maker", "ext"))
		useDB(t, ctx, used)
		used.Close(ctx)
		if n := count(t, ctx, direct, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'ext' AND application_name = 'mzproxy internal'", pgx.QueryExecModeSimpleProtocol); n == 0 {
			t.Fatalf("round %d: the proxy has no connection of its own to the database: the test tests nothing", i)
		}
		if i == 0 {
			tx, err := maker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = sendIn(ctx, tx.Conn(), c.mode, c.sql)
			wantCode(t, err, "25001")
			_ = tx.Rollback(ctx)
		}
		if _, err := sendIn(ctx, maker, c.mode, c.sql); err != nil {
			t.Fatalf("%s (%v) of a database the proxy served: %v", c.sql, c.mode, err)
		}
		if n := count(t, ctx, direct, "SELECT count(*) FROM pg_database WHERE datname = 'ext'", pgx.QueryExecModeSimpleProtocol); n != 0 {
			t.Fatalf("%s (%v) answered, but the database is still there", c.sql, c.mode)
		}
	}
	_, err := sendIn(ctx, maker, unnamedStmt, "DROP DATABASE ext")
	wantCode(t, err, "3D000")
	// The session goes on, and a database made again is served afresh.
	mustExec(t, ctx, maker, "CREATE DATABASE ext")
	again := connectTo(t, ctx, p.URL("maker", "ext"))
	useDB(t, ctx, again)
	p.mustAlive(t, ctx)
}

// refusal is a statement mzproxy refuses itself, and its SQLSTATE.
type refusal struct {
	name string
	sql  string
	code string
	// simpleOnly, extendedOnly: the refusal exists in one protocol only.
	simpleOnly, extendedOnly bool
	// before runs in the block before the refused statement.
	before string
}

// TestOutside16RefusalAbortsBlock: a statement mzproxy refuses itself
// (not the backend) inside a transaction block aborts the block as an
// error from PostgreSQL would: ReadyForQuery says 'E', the next statement
// gets 25P02, COMMIT rolls back, and ROLLBACK TO SAVEPOINT takes the block
// back to where it was; in both protocols. An extended-protocol batch
// outside a block whose later statement mzproxy refuses rolls back the
// batch's earlier writes, as PostgreSQL rolls back the batch's implicit
// transaction. Before, the block went on as if nothing had happened
// (and COMMIT committed it).
func TestOutside16RefusalAbortsBlock(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true})
	ctx := st.ctx
	conn := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, conn, "CREATE TABLE ab (k int PRIMARY KEY, v text)")
	refusals := []refusal{
		{"mz_now() in a write", "INSERT INTO ab VALUES (1000, mz_now()::text)", "0A000", false, false, ""},
		{"AS OF with another statement", "SELECT 1; SELECT v FROM ab AS OF AT LEAST 1", "0A000", true, false, ""},
		{"RETAIN HISTORY over the extended protocol", "ALTER TABLE ab SET (RETAIN HISTORY FOR '1h')", "0A000", false, true, ""},
		{"a backslash with standard_conforming_strings off", `INSERT INTO ab VALUES (1001, 'a\b')`, "0A000", false, false, "SET LOCAL standard_conforming_strings = off"},
		{"AS OF below the since", "SELECT v FROM ab AS OF 1", "XX000", false, false, ""},
	}
	k := 0
	for _, r := range refusals {
		for _, mode := range protocols {
			if r.simpleOnly && mode != simpleQuery || r.extendedOnly && mode == simpleQuery {
				continue
			}
			for i, end := range []string{"COMMIT", "ROLLBACK TO SAVEPOINT s", "COMMIT", "ROLLBACK TO SAVEPOINT s"} {
				k++
				// A block that wrote first, and a read-only transaction
				// (its reads at its timestamp, served by the event loop).
				first, kind := fmt.Sprintf("INSERT INTO ab VALUES (%d, 'before')", k), "a write block"
				if i >= 2 {
					first, kind = "SELECT count(*) FROM ab", "a read-only transaction"
				}
				what := fmt.Sprintf("%s (%v) in %s, then %s", r.name, mode, kind, end)
				mustExec(t, ctx, conn, "BEGIN", first, "SAVEPOINT s")
				if r.before != "" {
					mustExec(t, ctx, conn, r.before)
				}
				_, err := sendIn(ctx, conn, mode, r.sql)
				if sqlState(err) != r.code {
					t.Fatalf("%s: %v, want SQLSTATE %s", what, err, r.code)
				}
				if s := conn.PgConn().TxStatus(); s != 'E' {
					t.Errorf("%s: ReadyForQuery says %q after the refusal, want 'E'", what, s)
				}
				_, err = sendIn(ctx, conn, mode, "SELECT 1")
				if sqlState(err) != "25P02" {
					t.Errorf("%s: the next statement: %v, want 25P02", what, err)
				}
				want := 0
				if end == "COMMIT" {
					tag, err := conn.Exec(ctx, "COMMIT", pgx.QueryExecModeSimpleProtocol)
					if err != nil || tag.String() != "ROLLBACK" {
						t.Errorf("%s: COMMIT of the failed block: %q, %v; want ROLLBACK", what, tag, err)
					}
				} else {
					mustExec(t, ctx, conn, end)
					if _, err := sendIn(ctx, conn, mode, "SELECT 1"); err != nil {
						t.Errorf("%s: a statement after it: %v", what, err)
					}
					mustExec(t, ctx, conn, "COMMIT")
					if i < 2 {
						want = 1
					}
				}
				if n := count(t, ctx, conn, fmt.Sprintf("SELECT count(*) FROM ab WHERE k = %d", k), pgx.QueryExecModeSimpleProtocol); n != want {
					t.Errorf("%s: %d rows of the block's INSERT, want %d", what, n, want)
				}
			}
		}
	}
	// An extended-protocol batch outside a block: its INSERT is rolled
	// back with the batch's implicit transaction.
	var b pgconn.Batch
	b.ExecParams("INSERT INTO ab VALUES (-1, 'batch')", nil, nil, nil, nil)
	b.ExecParams(refusals[0].sql, nil, nil, nil, nil)
	_, err := conn.PgConn().ExecBatch(ctx, &b).ReadAll()
	if sqlState(err) != "0A000" {
		t.Errorf("a batch with a refused statement: %v, want 0A000", err)
	}
	if n := count(t, ctx, conn, "SELECT count(*) FROM ab WHERE k = -1", pgx.QueryExecModeSimpleProtocol); n != 0 {
		t.Errorf("the INSERT of a batch that failed was committed")
	}
	st.proxies[0].mustAlive(t, ctx)
}

// TestOutside16ReadOnlyWriteMessage: with default_transaction_read_only
// on, a write to a managed table (autocommit or in a block, either
// protocol) fails as it does directly on a plain table: 25006, "cannot
// execute INSERT in a read-only transaction"; an autocommit write of a
// temporary table runs, as directly (a simple Query, a prepared
// statement's batch). Before, mzproxy's write slot failed
// first: "cannot execute nextval() in a read-only transaction", also for
// the temporary table.
func TestOutside16ReadOnlyWriteMessage(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true})
	ctx := st.ctx
	conn := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, conn, "CREATE TABLE rom (k int PRIMARY KEY, v text)", "INSERT INTO rom VALUES (1, 'a')")
	// PostgreSQL's own answer, on a plain table in a database mzproxy
	// never served.
	direct := connectTo(t, ctx, directURL("postgres", freshDatabase(t, ctx)))
	mustExec(t, ctx, direct, "CREATE TABLE rom (k int PRIMARY KEY, v text)", "INSERT INTO rom VALUES (1, 'a')")
	for _, c := range []*pgx.Conn{conn, direct} {
		mustExec(t, ctx, c, "CREATE TEMP TABLE rot (k int)", "SET default_transaction_read_only = on")
	}
	// A temporary table is written in a read-only transaction, as
	// directly (mzproxy's write slot, which the backend refuses there,
	// is for tables that a read-only transaction cannot write anyway),
	// also an unnamed statement's parsed in the same batch (which failed
	// with 25006 before session 17).
	temps := []protocol{simpleQuery, unnamedStmt, namedStmt}
	for _, mode := range temps {
		for i, c := range []*pgx.Conn{direct, conn} {
			if _, err := sendIn(ctx, c, mode, "INSERT INTO rot VALUES (1)"); err != nil {
				t.Errorf("an INSERT into a temporary table (%v), %d: %v", mode, i, err)
			}
		}
	}
	if n := count(t, ctx, conn, "SELECT count(*) FROM rot", pgx.QueryExecModeSimpleProtocol); n != len(temps) {
		t.Errorf("%d rows in the temporary table, want %d", n, len(temps))
	}
	for _, sql := range []string{"INSERT INTO rom VALUES (2, 'b')", "UPDATE rom SET v = 'c' WHERE k = 1", "DELETE FROM rom", "TRUNCATE rom", "CREATE TABLE rom2 (k int)", "ALTER TABLE rom ADD COLUMN w int"} {
		for _, mode := range protocols {
			for _, block := range []bool{false, true} {
				var msgs [2]string
				for i, c := range []*pgx.Conn{direct, conn} {
					if block {
						mustExec(t, ctx, c, "BEGIN")
					}
					_, err := sendIn(ctx, c, mode, sql)
					var pe *pgconn.PgError
					if !errors.As(err, &pe) || pe.Code != "25006" {
						t.Errorf("%s (%v, block %v), %d: %v, want 25006", sql, mode, block, i, err)
					} else {
						msgs[i] = pe.Message
					}
					if block {
						mustExec(t, ctx, c, "ROLLBACK")
					}
				}
				if msgs[0] != msgs[1] {
					t.Errorf("%s (%v, block %v): mzproxy says %q, PostgreSQL %q", sql, mode, block, msgs[1], msgs[0])
				}
			}
		}
	}
	st.proxies[0].mustAlive(t, ctx)
}

// TestOutside16TempTableInReadOnlyTxn: a temporary table made inside a
// read-only transaction after its first read, with a managed table's
// name, is read by the transaction's timestamped reads exactly when its
// plain reads (PostgreSQL's own) read it, in each protocol: in a simple
// Query and an unnamed statement, and in a named statement prepared
// before the table was made (PostgreSQL keeps such a statement's plan on
// the table it first resolved: a new relation that shadows it does not
// invalidate the plan).
func TestOutside16TempTableInReadOnlyTxn(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true})
	ctx := st.ctx
	conn := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, conn, "CREATE TABLE shade16 (v text)", "INSERT INTO shade16 VALUES ('managed')")
	modes := map[protocol]pgx.QueryExecMode{simpleQuery: pgx.QueryExecModeSimpleProtocol, unnamedStmt: pgx.QueryExecModeExec, namedStmt: pgx.QueryExecModeCacheStatement}
	for _, mode := range protocols {
		read := func(sql string) string {
			t.Helper()
			var v string
			if err := conn.QueryRow(ctx, sql, modes[mode]).Scan(&v); err != nil {
				t.Fatalf("%v: %s: %v", mode, sql, err)
			}
			return v
		}
		plain, stamped := "SELECT v FROM shade16", "SELECT v FROM shade16 WHERE mz_now() > 0"
		// Two transactions before, so that the event loop serves the
		// third whole (its last two pins agree).
		for range 2 {
			mustExec(t, ctx, conn, "BEGIN")
			read(stamped)
			mustExec(t, ctx, conn, "COMMIT")
		}
		mustExec(t, ctx, conn, "BEGIN")
		if v := read(stamped); v != "managed" {
			t.Errorf("%v: the first read: %q", mode, v)
		}
		read(plain)
		mustExec(t, ctx, conn, "CREATE TEMP TABLE shade16 (v text) ON COMMIT DROP", "INSERT INTO shade16 VALUES ('temp')")
		p, s := read(plain), read(stamped)
		t.Logf("%v: plain %q, timestamped %q", mode, p, s)
		if s != p {
			t.Errorf("%v: after CREATE TEMP TABLE in the transaction: the timestamped read reads %q, the plain read %q", mode, s, p)
		}
		if mode != namedStmt && p != "temp" {
			t.Errorf("%v: the plain read reads %q, want temp", mode, p)
		}
		mustExec(t, ctx, conn, "COMMIT")
	}
	st.proxies[0].mustAlive(t, ctx)
}

// TestOutside16BatchOfWrites: a driver's batch of autocommit writes of a
// prepared statement, with a Sync after every 256 (JDBC's executeBatch
// without reWriteBatchedInserts: Bind, Describe, Execute per row, and a
// Sync whenever its estimate of the answers' size fills its buffer), runs
// every write, each group of 256 in one implicit transaction. Before, the
// last write of a group that began right after the proxy drained its
// pipeline (every 128 requests) was held for the optimistic loop, which
// ended the group's transaction itself without the session seeing it
// end: the next group's writes ran without the write slot and failed
// with MZ002 (JDBC: "Batch entry 511 ... was aborted"). A group whose
// last write fails rolls back whole, as in PostgreSQL.
func TestOutside16BatchOfWrites(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true})
	ctx := st.ctx
	conn := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, conn, "CREATE TABLE bw (k int PRIMARY KEY, v text)")
	pc := conn.PgConn()
	if _, err := pc.Prepare(ctx, "ins", "INSERT INTO bw VALUES ($1, 'v')", nil); err != nil {
		t.Fatal(err)
	}
	// run sends keys as one pipeline, a Sync after every 256, and returns
	// the first error.
	run := func(keys []int) error {
		p := pc.StartPipeline(ctx)
		for i, k := range keys {
			p.SendQueryPrepared("ins", [][]byte{[]byte(fmt.Sprint(k))}, nil, nil)
			if (i+1)%256 == 0 || i == len(keys)-1 {
				p.SendPipelineSync()
			}
		}
		if err := p.Flush(); err != nil {
			return err
		}
		var first error
		for {
			r, err := p.GetResults()
			if err != nil {
				if first == nil {
					first = err
				}
				continue
			}
			if r == nil {
				break
			}
			if rr, ok := r.(*pgconn.ResultReader); ok {
				if _, err := rr.Close(); err != nil && first == nil {
					first = err
				}
			}
		}
		if err := p.Close(); err != nil && first == nil {
			first = err
		}
		return first
	}
	keys := make([]int, 900)
	for i := range keys {
		keys[i] = i
	}
	if err := run(keys); err != nil {
		t.Errorf("900 writes in groups of 256: %v", err)
	}
	if n := count(t, ctx, conn, "SELECT count(*) FROM bw", pgx.QueryExecModeSimpleProtocol); n != 900 {
		t.Errorf("%d rows after 900 writes, want 900", n)
	}
	// One group of 256 whose last write fails (a key taken): none of it.
	keys = keys[:256]
	for i := range keys {
		keys[i] = 1000 + i
	}
	keys[255] = 0
	wantCode(t, run(keys), "23505")
	if n := count(t, ctx, conn, "SELECT count(*) FROM bw WHERE k >= 1000", pgx.QueryExecModeSimpleProtocol); n != 0 {
		t.Errorf("%d rows of a group whose last write failed, want 0", n)
	}
	st.proxies[0].mustAlive(t, ctx)
}

// TestOutside16PartitionedAsOf: a partitioned table made through mzproxy
// is not managed (storage/doc.go, Known limits): it has no history, and
// AS OF a time before an UPDATE reads the present rows, with no error.
// Materialize's model wants its past; a known gap (README, Limitations).
func TestOutside16PartitionedAsOf(t *testing.T) {
	t.Skip("known gap: partitioned tables are not managed; AS OF reads their present rows (README, Limitations)")
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true})
	ctx := st.ctx
	conn := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, conn, "CREATE TABLE parted (k int, r text, v int, PRIMARY KEY (k, r)) PARTITION BY LIST (r)",
		"CREATE TABLE parted_a PARTITION OF parted FOR VALUES IN ('a')", "INSERT INTO parted VALUES (1, 'a', 1)")
	var ts int64
	if err := conn.QueryRow(ctx, "SELECT mz_now()::text::int8", pgx.QueryExecModeSimpleProtocol).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, conn, "UPDATE parted SET v = 2")
	var v int
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT v FROM parted AS OF %d", ts), pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != 1 {
		t.Errorf("AS OF before the UPDATE: %d (%v), want 1", v, err)
	}
}
