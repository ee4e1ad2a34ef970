package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Drivers read the isolation level back (SHOW transaction_isolation,
// current_setting, SHOW default_transaction_isolation) and set what they
// read again later, in PostgreSQL's syntax or checked against PostgreSQL's
// four names. mzproxy answers SHOW transaction_isolation with serializable
// at both of its levels; what it answers must be settable back in every
// form, and leave mzproxy's own level (strict serializable by default) as
// it was.

// TestIsolationDrivers runs SQLAlchemy's isolation levels, AUTOCOMMIT among
// them, with pooled connections reset to the level read back, and psycopg
// 3 doing what SQLAlchemy's psycopg dialect does.
func TestIsolationDrivers(t *testing.T) {
	if testing.Short() {
		t.Skip("driver programs (Python imports) are slow; skipped with -short")
	}
	t.Parallel()
	p := startProxy(t)
	host, port := p.hostPort()

	t.Run("sqlalchemy", func(t *testing.T) {
		t.Parallel()
		requireDriver(t, exec.Command(systemPython, "-c", "import sqlalchemy, psycopg2").Run(),
			"apt-get install -y python3-sqlalchemy python3-psycopg2")
		url := fmt.Sprintf("postgres@%s:%s/%s?sslmode=disable", host, port, freshDatabase(t, testContext(t)))
		runOKProgram(t, filepath.Join("testdata", "python"), []string{"MZ_URL=" + url, "MZ_TABLE=" + tableName(t), "PGOPTIONS="},
			systemPython, "sqlalchemy_isolation.py")
	})

	t.Run("psycopg", func(t *testing.T) {
		t.Parallel()
		requireDriver(t, exec.Command(systemPython, "-c", "import psycopg").Run(), "apt-get install -y python3-psycopg")
		dsn := fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable", host, port, freshDatabase(t, testContext(t)))
		runOKProgram(t, filepath.Join("testdata", "python"), []string{"MZ_DSN=" + dsn, "MZ_TABLE=" + tableName(t), "PGOPTIONS="},
			systemPython, "psycopg_isolation.py")
	})
}

// runOKProgram runs a program that prints OK when all its checks passed.
func runOKProgram(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || strings.TrimSpace(stdout.String()) != "OK" {
		t.Fatalf("%s %q: %v\nstdout:\n%s\nstderr:\n%s", name, args, err, &stdout, &stderr)
	}
}

// TestIsolationReadBack reads the level through pgx in the simple and the
// extended protocol, sets what it read again in each form a driver uses
// (each statement in the mode's own messages: execAs),
// and checks that mzproxy's level stays strict serializable until
// SET transaction_isolation changes it.
func TestIsolationReadBack(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	conn := connectURL(t, ctx, p.URL("postgres", freshDatabase(t, ctx)))
	mustExec(t, ctx, conn, "CREATE TABLE iso (id int)", "INSERT INTO iso VALUES (1)")
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec}

	show := func(sql string, mode pgx.QueryExecMode) string {
		t.Helper()
		var v string
		if err := conn.QueryRow(ctx, sql, mode).Scan(&v); err != nil {
			t.Fatalf("%s (%v): %v", sql, mode, err)
		}
		return v
	}
	for _, mode := range modes {
		for _, sql := range []string{"SHOW transaction_isolation", "show transaction isolation level"} {
			if got := show(sql, mode); got != "serializable" {
				t.Errorf("%s (%v) = %q, want serializable", sql, mode, got)
			}
		}
	}

	// Each value read, set back in each form, and a transaction run.
	read := map[string]bool{show("SHOW transaction_isolation", simple(conn)): true}
	for _, mode := range modes {
		read[show("SELECT current_setting('transaction_isolation')", mode)] = true
		read[show("SHOW default_transaction_isolation", mode)] = true
	}
	for level := range read {
		for _, sql := range []string{
			"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL " + level,
			"SET default_transaction_isolation TO '" + level + "'",
			"SET default_transaction_isolation = '" + strings.ToUpper(level) + "'",
		} {
			for _, mode := range modes {
				if _, err := execAs(ctx, conn, mode, sql); err != nil {
					t.Errorf("%s (%v): %v", sql, mode, err)
				}
				checkInTransaction(t, conn, "BEGIN", mode)
			}
		}
		for _, mode := range modes {
			checkInTransaction(t, conn, "BEGIN ISOLATION LEVEL "+level, mode)
			checkInTransaction(t, conn, "START TRANSACTION ISOLATION LEVEL "+strings.ToUpper(level)+", READ WRITE", mode)
		}
	}
	mustExec(t, ctx, conn, "RESET default_transaction_isolation")
	checkIsolationLevel(t, conn)

	// Described as PostgreSQL describes it; refused in a failed
	// transaction as PostgreSQL refuses it, prepared or not.
	sd, err := conn.Prepare(ctx, "show_isolation", "SHOW TRANSACTION ISOLATION LEVEL")
	if err != nil {
		t.Fatal(err)
	}
	if len(sd.Fields) != 1 || sd.Fields[0].Name != "transaction_isolation" || sd.Fields[0].DataTypeOID != 25 {
		t.Errorf("SHOW transaction_isolation described as %+v", sd.Fields)
	}
	for _, mode := range modes {
		mustExec(t, ctx, conn, "BEGIN")
		if _, err := execAs(ctx, conn, mode, "SELECT 1/0"); sqlState(err) != "22012" {
			t.Fatalf("1/0: %v", err)
		}
		for _, sql := range []string{"SHOW transaction_isolation", "show_isolation"} {
			var v string
			wantCode(t, conn.QueryRow(ctx, sql, mode).Scan(&v), "25P02")
		}
		mustExec(t, ctx, conn, "ROLLBACK")
	}
	if got := show("show_isolation", pgx.QueryExecModeCacheStatement); got != "serializable" {
		t.Errorf("prepared SHOW transaction_isolation = %q", got)
	}
}

// checkInTransaction runs a read and a write in a transaction begun with
// begin, and commits it.
func checkInTransaction(t *testing.T, conn *pgx.Conn, begin string, mode pgx.QueryExecMode) {
	t.Helper()
	ctx := testContext(t)
	for _, sql := range []string{begin, "SELECT count(*) FROM iso", "INSERT INTO iso VALUES (2)", "COMMIT"} {
		if _, err := execAs(ctx, conn, mode, sql); err != nil {
			t.Fatalf("%s (%v): %v", sql, mode, err)
		}
	}
}

// checkIsolationLevel checks mzproxy's level through EXPLAIN TIMESTAMP,
// which shows the oracle's read timestamp only at strict serializable:
// the default, SET transaction_isolation = 'serializable' leaves it, and
// 'strict serializable' is settable again, while SHOW answers serializable
// throughout.
func checkIsolationLevel(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := testContext(t)
	oracle := func() bool {
		var text string
		if err := conn.QueryRow(ctx, "EXPLAIN TIMESTAMP FOR SELECT * FROM iso", simple(conn)).Scan(&text); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(text, "oracle read timestamp")
	}
	if !oracle() {
		t.Error("after the read-back forms, mzproxy's level is no longer strict serializable")
	}
	mustExec(t, ctx, conn, "SET transaction_isolation = 'serializable'")
	if oracle() {
		t.Error("SET transaction_isolation = 'serializable' did not leave strict serializable")
	}
	mustExec(t, ctx, conn, "SET transaction_isolation = 'strict serializable'")
	if !oracle() {
		t.Error("SET transaction_isolation = 'strict serializable' did not take")
	}
	var v string
	if err := conn.QueryRow(ctx, "SHOW transaction_isolation").Scan(&v); err != nil || v != "serializable" {
		t.Errorf("SHOW transaction_isolation at strict serializable = %q, %v", v, err)
	}
}
