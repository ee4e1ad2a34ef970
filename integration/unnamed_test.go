package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"
)

// The client's unnamed statement and portal live as PostgreSQL says (until
// the next Parse of it or simple Query; portals until the transaction
// ends or Close), whatever the proxy runs of its own around the client's
// messages: the optimistic write's BEGIN, begin_write_occ, commit_write
// and COMMIT, and the timestamp the proxy adds to a mz_now() statement.

// patientWrites: these tests are about the client's statements, not the
// retry budget, which the parallel tests' writes to the same upper could
// exhaust (40001) on a loaded machine.
var patientWrites = []string{"--occ-max-retries", "1000"}

// TestUnnamedLibPQ: database/sql's most common calls through lib/pq, which
// parses every statement with arguments as the unnamed statement and binds
// it in a second round trip. One connection, so that a session left
// broken would be handed out again.
func TestUnnamedLibPQ(t *testing.T) {
	t.Parallel()
	p := startProxy(t, patientWrites...)
	ctx := testContext(t)
	db, err := sql.Open("postgres", p.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tbl := tableName(t)
	exec := func(query string, args ...any) int64 {
		t.Helper()
		res, err := db.ExecContext(ctx, query, args...)
		if err != nil {
			t.Fatalf("%s %v: %v", query, args, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	value := func(query string, args ...any) int64 {
		t.Helper()
		var v int64
		if err := db.QueryRowContext(ctx, query, args...).Scan(&v); err != nil {
			t.Fatalf("%s %v: %v", query, args, err)
		}
		return v
	}

	exec("CREATE TABLE " + tbl + " (k int PRIMARY KEY, v int)")
	exec("CREATE TEMPORARY TABLE tmp_unnamed (k int)")
	for k := 1; k <= 3; k++ {
		exec("INSERT INTO "+tbl+" VALUES ($1, $2)", k, 10*k)
		exec("INSERT INTO tmp_unnamed VALUES ($1)", k)
	}
	if n := exec("UPDATE "+tbl+" SET v = v + $1 WHERE k = $2", 5, 2); n != 1 {
		t.Fatalf("UPDATE affected %d rows, want 1", n)
	}
	if n := exec("DELETE FROM "+tbl+" WHERE k = $1", 3); n != 1 {
		t.Fatalf("DELETE affected %d rows, want 1", n)
	}
	if n := exec("DELETE FROM tmp_unnamed WHERE k > $1", 1); n != 2 {
		t.Fatalf("DELETE from the temporary table affected %d rows, want 2", n)
	}
	if v := value("SELECT v FROM "+tbl+" WHERE k = $1", 2); v != 25 {
		t.Fatalf("k=2 has v=%d, want 25", v)
	}
	if n := value("SELECT count(*) FROM tmp_unnamed WHERE k <= $1", 10); n != 1 {
		t.Fatalf("temporary table has %d rows, want 1", n)
	}

	// A write that fails gets its own error; the session goes on.
	_, err = db.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES ($1, $2)", 1, 0)
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) || pqErr.Code != "23505" {
		t.Fatalf("duplicate key: %v, want SQLSTATE 23505", err)
	}

	// A timestamped read with a parameter, then statements without the
	// proxy's timestamp parameter, with and without parameters of their own.
	var v, now int64
	if err := db.QueryRowContext(ctx, "SELECT v, mz_now() FROM "+tbl+" WHERE k = $1", 1).Scan(&v, &now); err != nil {
		t.Fatalf("mz_now() read: %v", err)
	}
	if v != 10 || now <= 0 {
		t.Fatalf("mz_now() read: v=%d mz_now()=%d, want 10 and a timestamp", v, now)
	}
	if n := value("SELECT count(*) FROM " + tbl); n != 2 {
		t.Fatalf("count %d after the mz_now() read, want 2", n)
	}
	if v := value("SELECT v FROM "+tbl+" WHERE k = $1", 2); v != 25 {
		t.Fatalf("k=2 has v=%d after the mz_now() read, want 25", v)
	}
	exec("INSERT INTO "+tbl+" VALUES ($1, $2)", 4, 40)

	// In a transaction block. Its COMMIT fails with 40001 when another
	// write (the parallel tests') committed since its first write: then it
	// is run again, as clients do.
	for attempt := 1; ; attempt++ {
		err := libpqTransaction(ctx, db, tbl)
		if errors.As(err, &pqErr) && pqErr.Code == "40001" && attempt < 50 {
			continue
		}
		if err != nil {
			t.Fatalf("in a transaction: %v", err)
		}
		break
	}
	if n := value("SELECT count(*) FROM "+tbl+" WHERE v > $1", 0); n != 3 {
		t.Fatalf("after the transaction: %d rows, want 3", n)
	}

	// A prepared statement (named), executed several times.
	stmt, err := db.PrepareContext(ctx, "UPDATE "+tbl+" SET v = v + $1 WHERE k = $2")
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	for range 5 {
		if _, err := stmt.ExecContext(ctx, 2, 1); err != nil {
			t.Fatalf("prepared UPDATE: %v", err)
		}
	}
	if v := value("SELECT v FROM "+tbl+" WHERE k = $1", 1); v != 20 {
		t.Fatalf("k=1 has v=%d after five prepared updates, want 20", v)
	}
}

// libpqTransaction writes with arguments in a transaction block and reads
// its own writes.
func libpqTransaction(ctx context.Context, db *sql.DB, tbl string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"INSERT INTO " + tbl + " VALUES ($1, $2)", []any{5, 50}},
		{"UPDATE " + tbl + " SET v = v + $1 WHERE k = $2", []any{1, 5}},
		{"DELETE FROM " + tbl + " WHERE k = $1", []any{4}},
		{"INSERT INTO tmp_unnamed VALUES ($1)", []any{7}},
	} {
		if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil {
			return fmt.Errorf("%s: %w", q.sql, err)
		}
	}
	var v int64
	if err := tx.QueryRowContext(ctx, "SELECT v FROM "+tbl+" WHERE k = $1", 5).Scan(&v); err != nil {
		return err
	}
	if v != 51 {
		return fmt.Errorf("k=5 has v=%d, want 51", v)
	}
	return tx.Commit()
}

// TestUnnamedLibPQConflicts: lib/pq's unnamed-statement writes from
// several sessions to one row conflict, and the proxy retries each by
// binding the client's statement again.
func TestUnnamedLibPQConflicts(t *testing.T) {
	t.Parallel()
	p := startProxy(t, patientWrites...)
	ctx := testContext(t)
	db, err := sql.Open("postgres", p.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const sessions, increments = 4, 15
	db.SetMaxOpenConns(sessions)
	tbl := tableName(t)
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+tbl+" (k int PRIMARY KEY, n int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES ($1, $2)", 1, 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range increments {
				if _, err := db.ExecContext(ctx, "UPDATE "+tbl+" SET n = n + $1 WHERE k = $2", 1, 1); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent UPDATE: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT n FROM "+tbl+" WHERE k = $1", 1).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != sessions*increments {
		t.Fatalf("counter %d, want %d", n, sessions*increments)
	}
}

// TestUnnamedPgxModes: pgx v5 in each exec mode writes with parameters,
// reads with mz_now() and a parameter, and then runs statements of its own
// on the same connection.
func TestUnnamedPgxModes(t *testing.T) {
	t.Parallel()
	p := startProxy(t, patientWrites...)
	for _, mode := range pgxModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			conn := connectMode(t, ctx, p.URL("postgres", "postgres"), mode)
			pgxWritesAndTimestampedReads(t, ctx, conn, tableName(t))
		})
	}
}

func pgxWritesAndTimestampedReads(t *testing.T, ctx context.Context, conn *pgx.Conn, tbl string) {
	exec := func(query string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, query, args...); err != nil {
			t.Fatalf("%s %v: %v", query, args, err)
		}
	}
	exec("CREATE TABLE " + tbl + " (k int PRIMARY KEY, v int)")
	for k := 1; k <= 3; k++ {
		exec("INSERT INTO "+tbl+" VALUES ($1, $2)", k, 10*k)
	}
	exec("UPDATE "+tbl+" SET v = v + $1 WHERE k = $2", 5, 2)
	for range 2 { // the cached modes describe once, then reuse
		var v, now int64
		if err := conn.QueryRow(ctx, "SELECT v, mz_now() FROM "+tbl+" WHERE k = $1", 2).Scan(&v, &now); err != nil {
			t.Fatalf("mz_now() read: %v", err)
		}
		if v != 25 || now <= 0 {
			t.Fatalf("mz_now() read: v=%d mz_now()=%d, want 25 and a timestamp", v, now)
		}
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 3 {
			t.Fatalf("count after the mz_now() read: %d, %v; want 3", n, err)
		}
		var v3 int64
		if err := conn.QueryRow(ctx, "SELECT v FROM "+tbl+" WHERE k = $1", 3).Scan(&v3); err != nil || v3 != 30 {
			t.Fatalf("k=3 after the mz_now() read: %d, %v; want 30", v3, err)
		}
	}
	exec("UPDATE "+tbl+" SET v = $1 WHERE k = $2", 11, 1)
	var v int64
	if err := conn.QueryRow(ctx, "SELECT v FROM "+tbl+" WHERE k = $1", 1).Scan(&v); err != nil || v != 11 {
		t.Fatalf("k=1 after the last UPDATE: %d, %v; want 11", v, err)
	}
}

// TestUnnamedStatementSurvivesWrites: the client parses the unnamed
// statement once and binds it again and again, as the protocol allows;
// each Bind is an autocommit write that takes the optimistic path.
func TestUnnamedStatementSurvivesWrites(t *testing.T) {
	t.Parallel()
	p := startProxy(t, patientWrites...)
	ctx := testContext(t)
	conn := p.connect(t, ctx)
	tbl := tableName(t)
	mustExec(t, ctx, conn, "CREATE TABLE "+tbl+" (k int PRIMARY KEY)")
	pc := conn.PgConn()
	if _, err := pc.Prepare(ctx, "", "INSERT INTO "+tbl+" VALUES ($1)", nil); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		res := pc.ExecPrepared(ctx, "", [][]byte{[]byte(fmt.Sprint(k))}, nil, nil).Read()
		if res.Err != nil {
			t.Fatalf("Bind %d of the unnamed statement: %v", k, res.Err)
		}
	}
	// A failed write leaves it too.
	res := pc.ExecPrepared(ctx, "", [][]byte{[]byte("0")}, nil, nil).Read()
	wantCode(t, res.Err, "23505")
	res = pc.ExecPrepared(ctx, "", [][]byte{[]byte("3")}, nil, nil).Read()
	if res.Err != nil {
		t.Fatalf("Bind of the unnamed statement after a failed write: %v", res.Err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 4 {
		t.Fatalf("count %d, %v; want 4", n, err)
	}
}

// TestUnnamedWriteWaitsForRowLock: lib/pq's write with arguments waits for
// another session's uncommitted insert of the same key; once that rolls
// back, the client's unnamed statement runs and commits.
func TestUnnamedWriteWaitsForRowLock(t *testing.T) {
	t.Parallel()
	p := startProxy(t, patientWrites...)
	ctx := testContext(t)
	holder := p.connect(t, ctx)
	tbl := tableName(t)
	mustExec(t, ctx, holder, "CREATE TABLE "+tbl+" (k int PRIMARY KEY)")
	db, err := sql.Open("postgres", p.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// Connected before the key is taken, so only the write waits.
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}

	mustExec(t, ctx, holder, "BEGIN", "INSERT INTO "+tbl+" VALUES (1)")
	done := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES ($1)", 1)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the write finished (%v) while another transaction held its key", err)
	case <-time.After(500 * time.Millisecond):
	}
	mustExec(t, ctx, holder, "ROLLBACK")
	if err := <-done; err != nil {
		t.Fatalf("the write after the key was released: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+tbl+" WHERE k = $1", 1).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count %d, %v; want 1", n, err)
	}
}
