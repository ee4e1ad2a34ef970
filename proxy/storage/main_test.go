package storage

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mzproxy/mzproxy/proxy/embedded"
	"github.com/mzproxy/mzproxy/proxy/embedded/embeddedtest"
)

// server is the PostgreSQL the package's tests share; each test gets its own
// database (event triggers and the schema are per database).
var server *embedded.Server

func TestMain(m *testing.M) { os.Exit(embeddedtest.Main(m, "storage", &server)) }

var dbSeq atomic.Int64

// newDB creates a fresh database and returns a connection string for it.
func newDB(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("st%d_%d", os.Getpid(), dbSeq.Add(1))
	admin := connect(t, server.ConnString("postgres", "postgres"))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	return server.ConnString("postgres", name)
}

func connect(t testing.TB, cs string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// installedDB is newDB plus Install, with one open connection.
func installedDB(t testing.TB) (string, *pgx.Conn) {
	t.Helper()
	cs := newDB(t)
	conn := connect(t, cs)
	if err := Install(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	return cs, conn
}

// installVersion installs the migration chain up to version n (as a proxy
// of that version left the database) on conn's database, in one
// transaction with function bodies unchecked, as Install runs the chain:
// the upgrade tests start from it.
func installVersion(t testing.TB, conn *pgx.Conn, n int) {
	t.Helper()
	chain := strings.ReplaceAll(strings.Join(migrations[:n], "\n"), "@SCHEMA@", Schema)
	if _, err := conn.PgConn().Exec(context.Background(), "BEGIN; SET LOCAL check_function_bodies = off; "+chain+"; COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
}

// loginRole creates role, an ordinary role that may log in (dropped first
// if an earlier run left it), and drops it and what it owns when the test
// ends: the hostile-role tests connect as it.
func loginRole(t testing.TB, conn *pgx.Conn, role string) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+role+"; CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Exec(ctx, "DROP OWNED BY "+role+" CASCADE; DROP ROLE "+role) //nolint:errcheck // cleanup
	})
}

// slotSQL is the slot mzproxy takes for an autocommit write (OpenWriteFor)
// in the database q is connected to, at the version installed there:
// before version 44 a call of begin_write_occ (the flat statement's
// request '0 - pending' is refused below version 42, and the gate is
// not PUBLIC's to select below 44).
func slotSQL(t testing.TB, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, inc int64) string {
	t.Helper()
	var v int
	if err := q.QueryRow(context.Background(), "SELECT max(version) FROM "+Schema+".schema_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v < 44 {
		return BeginWriteOCCFor(inc, 0)
	}
	return OpenWriteFor(inc)
}

// inWrite runs stmts in one proxy write transaction and returns its T.
func inWrite(t testing.TB, conn *pgx.Conn, stmts ...string) uint64 {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ts int64
	if err := tx.QueryRow(ctx, BeginWriteSQL).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	var lazy bool
	if err := tx.QueryRow(ctx, "SELECT to_regprocedure($1) IS NOT NULL", Schema+".ensure_history(oid[])").Scan(&lazy); err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		// As the proxy does before a write: the history of every table
		// still without one is built first (lazy_history.sql); and
		// after the last statement, so that a table made here has its
		// history for the test's own writes, as before version 38.
		buildAll(t, tx, lazy)
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	buildAll(t, tx, lazy)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return uint64(ts)
}

// buildAll runs buildAllSQL in tx when the schema has lazy histories.
func buildAll(t testing.TB, tx pgx.Tx, lazy bool) {
	t.Helper()
	if !lazy {
		return
	}
	if _, err := tx.Exec(context.Background(), buildAllSQL); err != nil {
		t.Fatalf("%s: %v", buildAllSQL, err)
	}
}

// buildAllSQL builds the history of every live table that has none yet.
const buildAllSQL = "SELECT " + Schema + ".ensure_history(array_agg(oid)) FROM " + Schema +
	".catalog WHERE kind = 'table' AND dropped_ts IS NULL AND NOT history_built"

func queryInt(t testing.TB, q Querier, sql string, args ...any) int64 {
	t.Helper()
	var v int64
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}
