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
)

// Drivers other than Go's run as small programs under testdata/: each
// connects through the proxy, runs a parameterized query, prepared
// statements, errors with their SQLSTATE and transactions, and prints OK.
// A test skips only when its driver is missing, saying how to install it.

const (
	systemPython = "/usr/bin/python3"
	jdbcJar      = "/usr/share/java/postgresql.jar"
)

// runDriver runs a driver program and expects it to print OK.
func runDriver(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil || strings.TrimSpace(stdout.String()) != "OK" {
		t.Fatalf("%s %q: %v\nstdout:\n%s\nstderr:\n%s", name, args, err, stdout.String(), stderr.String())
	}
}

func testdataDir(t *testing.T, sub string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", sub))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDrivers(t *testing.T) {
	if testing.Short() {
		t.Skip("driver programs (JVM start, Python imports) are slow; skipped with -short")
	}
	t.Parallel()
	p := startProxy(t)
	host, port := p.hostPort()
	// Each driver in a database of its own: a transaction that reads and
	// then writes fails with 40001 when another write committed in its
	// database since its first read (the read pinned its timestamp), and
	// the drivers and other tests run in parallel.

	t.Run("psycopg2", func(t *testing.T) {
		t.Parallel()
		if exec.Command(systemPython, "-c", "import psycopg2").Run() != nil {
			t.Skip("psycopg2 is not installed for " + systemPython + ": apt-get install -y python3-psycopg2")
		}
		dsn := fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable", host, port, freshDatabase(t, testContext(t)))
		runDriver(t, testdataDir(t, "python"), []string{"MZ_DSN=" + dsn, "MZ_TABLE=" + tableName(t), "PGOPTIONS="},
			systemPython, "psycopg2_check.py")
	})

	t.Run("psycopg", func(t *testing.T) {
		t.Parallel()
		if exec.Command(systemPython, "-c", "import psycopg").Run() != nil {
			t.Skip("psycopg 3 is not installed for " + systemPython + ": apt-get install -y python3-psycopg")
		}
		dsn := fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable", host, port, freshDatabase(t, testContext(t)))
		runDriver(t, testdataDir(t, "python"), []string{"MZ_DSN=" + dsn, "MZ_TABLE=" + tableName(t), "PGOPTIONS="},
			systemPython, "psycopg_check.py")
	})

	t.Run("jdbc", func(t *testing.T) {
		t.Parallel()
		java, err := exec.LookPath("java")
		if err != nil {
			t.Skip("java is not installed: apt-get install -y default-jdk-headless libpostgresql-jdbc-java")
		}
		if _, err := os.Stat(jdbcJar); err != nil {
			t.Skip("the PostgreSQL JDBC driver is not installed (" + jdbcJar + "): apt-get install -y libpostgresql-jdbc-java")
		}
		// Java 11+ runs a single source file directly, so no javac step.
		url := fmt.Sprintf("jdbc:postgresql://%s:%s/%s?user=postgres&sslmode=disable", host, port, freshDatabase(t, testContext(t)))
		runDriver(t, testdataDir(t, "java"), []string{"JAVA_TOOL_OPTIONS=-Xshare:auto -XX:TieredStopAtLevel=1"},
			java, "-cp", jdbcJar, "JdbcCheck.java", url, tableName(t))
	})

	t.Run("node-postgres", func(t *testing.T) {
		t.Parallel()
		node, err := exec.LookPath("node")
		if err != nil {
			t.Skip("node is not installed: apt-get install -y nodejs npm, then (cd integration/testdata/node && npm ci)")
		}
		dir := testdataDir(t, "node")
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "pg")); err != nil {
			t.Skip("node-postgres is not installed: (cd integration/testdata/node && npm ci)")
		}
		url := fmt.Sprintf("postgres://postgres@%s:%s/%s?sslmode=disable", host, port, freshDatabase(t, testContext(t)))
		runDriver(t, dir, nil, node, "check.js", url, tableName(t))
	})
}
