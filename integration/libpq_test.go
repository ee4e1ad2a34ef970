package integration

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/lib/pq"
)

// TestLibPQ uses lib/pq through database/sql: queries, prepared
// statements, transactions, error codes and COPY.
func TestLibPQ(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	ctx := testContext(t)
	db, err := sql.Open("postgres", p.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(3)
	tbl := tableName(t)

	if _, err := db.ExecContext(ctx, "CREATE TABLE "+tbl+" (id int PRIMARY KEY, name text)"); err != nil {
		t.Fatal(err)
	}

	// Parameters go through the extended protocol (lib/pq's unnamed
	// statement).
	var s string
	var n int
	if err := db.QueryRowContext(ctx, "SELECT $1::text || '!', $2::int * 2", "hi", 21).Scan(&s, &n); err != nil {
		t.Fatal(err)
	}
	if s != "hi!" || n != 42 {
		t.Fatalf("got %q %d", s, n)
	}

	stmt, err := db.PrepareContext(ctx, "INSERT INTO "+tbl+" VALUES ($1, $2)")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := stmt.ExecContext(ctx, i, fmt.Sprint("n", i)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = stmt.ExecContext(ctx, 1, "dup")
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) || pqErr.Code != "23505" {
		t.Fatalf("duplicate key: %v", err)
	}
	stmt.Close()

	_, err = db.ExecContext(ctx, "SELECT * FROM no_such_table_libpq")
	if !errors.As(err, &pqErr) || pqErr.Code != "42P01" {
		t.Fatalf("undefined table: %v", err)
	}

	// A rolled-back transaction leaves nothing; a committed one stays.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+tbl); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+tbl+" WHERE id >= 10"); err != nil {
		t.Fatal(err)
	}
	var iso string
	// PostgreSQL says serializable; so does mzproxy at its default level,
	// strict serializable, for drivers that set what they read back.
	if err := tx.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "serializable" {
		t.Fatalf("isolation %q %v", iso, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// COPY FROM STDIN with pq.CopyIn.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := tx.PrepareContext(ctx, pq.CopyIn(tbl, "id", "name"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 600; i++ {
		var name any = fmt.Sprintf("copied %d", i)
		if i%10 == 0 {
			name = nil
		}
		if _, err := cp.ExecContext(ctx, i, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cp.ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	rows, err := db.QueryContext(ctx, "SELECT count(*), count(name), sum(id) FROM "+tbl)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var count, named, sum int
	for rows.Next() {
		if err := rows.Scan(&count, &named, &sum); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// 10 rows left from the inserts (0..9), 500 copied (100..599), 50 of
	// them NULL.
	if count != 510 || named != 460 || sum != 45+(100+599)*500/2 {
		t.Fatalf("count %d named %d sum %d", count, named, sum)
	}
}
