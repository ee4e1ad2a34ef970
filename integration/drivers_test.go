package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Drivers other than Go's run as small programs under testdata/, one per
// driver, each taking a connection URL and a table name as arguments and
// reporting the matrix cases (driver_matrix_test.go) and its own extra ones
// line by line.

const (
	systemPython = "/usr/bin/python3"
	jdbcJar      = "/usr/share/java/postgresql.jar"
)

// driverProgram is one driver's program and what it needs installed.
type driverProgram struct {
	name    string
	dir     string                   // under testdata/
	command func() ([]string, error) // the command line before the URL and table; an error when the driver is missing
	url     func(host, port, db string) string
	install string   // how to install what is missing
	extra   []string // cases beyond matrixCases the program reports
	env     []string
}

func pythonModule(module string) func() ([]string, error) {
	return func() ([]string, error) {
		if out, err := exec.Command(systemPython, "-c", "import "+module).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s cannot import %s: %v: %s", systemPython, module, err, bytes.TrimSpace(out))
		}
		return []string{systemPython, module + "_check.py"}, nil
	}
}

func nodeModule(module, program string) func() ([]string, error) {
	return func() ([]string, error) {
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join("testdata", "node", "node_modules", module)); err != nil {
			return nil, err
		}
		return []string{node, program}, nil
	}
}

func jdbcCommand() ([]string, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(jdbcJar); err != nil {
		return nil, err
	}
	// Java 11+ runs a single source file directly, so no javac step.
	return []string{java, "-cp", jdbcJar, "JdbcCheck.java"}, nil
}

func libpqURL(host, port, db string) string {
	return fmt.Sprintf("postgresql://postgres@%s:%s/%s?sslmode=disable", host, port, db)
}

var driverPrograms = []driverProgram{
	{name: "psycopg2", dir: "python", command: pythonModule("psycopg2"), url: libpqURL,
		install: "apt-get install -y python3-psycopg2", extra: []string{"server_cursor", "copy", "notice"}},
	{name: "psycopg", dir: "python", command: pythonModule("psycopg"), url: libpqURL,
		install: "apt-get install -y python3-psycopg", extra: []string{"pipeline", "server_cursor", "prepared", "binary", "copy"}},
	{name: "asyncpg", dir: "python", command: pythonModule("asyncpg"), url: libpqURL,
		install: "apt-get install -y python3-asyncpg", extra: []string{"prepared", "cursor"}},
	{name: "node-postgres", dir: "node", command: nodeModule("pg", "pg_check.js"), url: libpqURL,
		install: "apt-get install -y nodejs npm, then (cd integration/testdata/node && npm ci)",
		extra:   []string{"named_statement", "notice", "queued"}},
	{name: "postgres.js", dir: "node", command: nodeModule("postgres", "postgresjs_check.js"), url: libpqURL,
		install: "apt-get install -y nodejs npm, then (cd integration/testdata/node && npm ci)",
		extra:   []string{"unprepared", "pipelined", "repeated_ts_reads"}},
	{name: "jdbc", dir: "java", command: jdbcCommand,
		url: func(host, port, db string) string {
			return fmt.Sprintf("jdbc:postgresql://%s:%s/%s?user=postgres&sslmode=disable", host, port, db)
		},
		install: "apt-get install -y default-jre-headless libpostgresql-jdbc-java",
		extra:   []string{"prepare_threshold", "batch", "fetch_size", "repeated_ts_reads"},
		env:     []string{"JAVA_TOOL_OPTIONS=-Xshare:auto -XX:TieredStopAtLevel=1"}},
}

// runDriverPrograms runs each driver's program through p, as a subtest of
// its own, in a database of its own: a transaction that reads and then
// writes fails with 40001 when another write committed in its database
// since its first read.
func runDriverPrograms(t *testing.T, p *proxyProc) {
	host, port := p.hostPort()
	for _, d := range driverPrograms {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			command, err := d.command()
			requireDriver(t, err, d.install)
			ctx := testContext(t)
			args := append(command[1:], d.url(host, port, freshDatabase(t, ctx)), tableName(t))
			runDriverProgram(t, filepath.Join("testdata", d.dir), d.env, command[0], args...).report(t, d.extra...)
		})
	}
}

// runDriverProgram runs a driver program and reads its case lines; its
// exit status must agree with them.
func runDriverProgram(t *testing.T, dir string, env []string, name string, args ...string) caseResults {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "PGOPTIONS="), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s ran %v", filepath.Base(args[len(args)-3]), time.Since(start).Round(time.Millisecond))
	results := parseCaseLines(stdout.String())
	failed := false
	for _, failure := range results {
		failed = failed || failure != ""
	}
	var exitErr *exec.ExitError
	if (err != nil) != failed || (err != nil && !errors.As(err, &exitErr)) {
		t.Errorf("%s %q: %v, but its cases say failed=%v\nstdout:\n%s\nstderr:\n%s", name, args, err, failed, &stdout, &stderr)
	} else if failed {
		t.Logf("stderr:\n%s", &stderr)
	}
	return results
}
