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

// psqlCmd runs psql against host:port (the proxy, or PostgreSQL's socket
// directory), without reading ~/.psqlrc.
type psqlTarget struct{ host, port string }

func (p *proxyProc) psqlTarget() psqlTarget {
	h, port := p.hostPort()
	return psqlTarget{h, port}
}

func directPsqlTarget() psqlTarget {
	return psqlTarget{env.pg.SocketDir(), fmt.Sprint(env.pg.Port())}
}

// run runs psql with args and stdin, returning stdout, stderr and the exit
// error.
func (pt psqlTarget) run(t testing.TB, stdin string, extraEnv []string, args ...string) (string, string, error) {
	t.Helper()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql is not installed (apt-get install -y postgresql-client)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := pt.command(ctx, extraEnv, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("psql %q did not finish within 60s; stdout:\n%s\nstderr:\n%s", args, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// command is psql with args against the target, killed when ctx ends, as user postgres in
// database postgres unless extraEnv says otherwise (PGDATABASE=...).
func (pt psqlTarget) command(ctx context.Context, extraEnv []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "psql", append([]string{"-X", "--no-password"}, args...)...)
	cmd.Env = append(os.Environ(),
		"PGHOST="+pt.host, "PGPORT="+pt.port, "PGUSER=postgres", "PGDATABASE=postgres",
		"PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10", "PGOPTIONS=", "PSQLRC=/dev/null")
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd
}

// mustRun is run that fails the test on a non-zero exit.
func (pt psqlTarget) mustRun(t testing.TB, stdin string, extraEnv []string, args ...string) string {
	t.Helper()
	out, errOut, err := pt.run(t, stdin, extraEnv, args...)
	if err != nil {
		t.Fatalf("psql %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, errOut)
	}
	return out
}

// TestPsql runs psql through the proxy.
func TestPsql(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	pt := p.psqlTarget()

	t.Run("several statements with -c", func(t *testing.T) {
		t.Parallel()
		out := pt.mustRun(t, "", nil, "-At", "-v", "ON_ERROR_STOP=1",
			"-c", "SELECT 1; SELECT 'two'; SELECT 3",
			"-c", "SELECT current_user, current_database()")
		// psql prints only the last result of a multi-statement -c string
		// before version 15, every result from 15 on.
		if !strings.HasSuffix(out, "3\npostgres|postgres\n") {
			t.Fatalf("output:\n%s", out)
		}
	})

	t.Run("script file", func(t *testing.T) {
		t.Parallel()
		tbl := tableName(t)
		script := fmt.Sprintf(`
\set ON_ERROR_STOP 1
CREATE TABLE %[1]s (id int PRIMARY KEY, s text);
INSERT INTO %[1]s SELECT g, 'row ' || g FROM generate_series(1, 100) g;
BEGIN;
UPDATE %[1]s SET s = upper(s) WHERE id %% 2 = 0;
COMMIT;
SELECT count(*) FILTER (WHERE s LIKE 'ROW%%') || '/' || count(*) FROM %[1]s;
\echo done
`, tbl)
		f := filepath.Join(t.TempDir(), "script.sql")
		if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		out := pt.mustRun(t, "", nil, "-At", "-f", f)
		if !strings.Contains(out, "50/100\ndone\n") {
			t.Fatalf("output:\n%s", out)
		}
	})

	t.Run("describe table like PostgreSQL", func(t *testing.T) {
		t.Parallel()
		tbl := tableName(t)
		pt.mustRun(t, "", nil, "-v", "ON_ERROR_STOP=1", "-c", fmt.Sprintf(`
CREATE TABLE %[1]s (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL DEFAULT 'x', at timestamptz, UNIQUE (name, at));
CREATE INDEX ON %[1]s (lower(name));
COMMENT ON TABLE %[1]s IS 'described';`, tbl))
		for _, cmd := range []string{`\d ` + tbl, `\d+ ` + tbl, `\dt+ ` + tbl, `\di ` + tbl + `*`, `\df pg_sleep`, `\l postgres`} {
			via := pt.mustRun(t, "", nil, "-c", cmd)
			direct := directPsqlTarget().mustRun(t, "", nil, "-c", cmd)
			if via != direct {
				t.Errorf("%s through the proxy:\n%s\ndirectly:\n%s", cmd, via, direct)
			}
			if !strings.Contains(via, "(") && cmd == `\d `+tbl {
				t.Errorf("%s: unexpected output %q", cmd, via)
			}
		}
	})

	t.Run("copy from stdin and to stdout", func(t *testing.T) {
		t.Parallel()
		tbl := tableName(t)
		var in strings.Builder
		for i := range 1000 {
			fmt.Fprintf(&in, "%d,\"name, %d\"\n", i, i)
		}
		in.WriteString("\\.\n")
		script := fmt.Sprintf("CREATE TABLE %[1]s (id int, name text);\n\\copy %[1]s from stdin with (format csv)\n", tbl)
		out := pt.mustRun(t, script+in.String(), nil, "-v", "ON_ERROR_STOP=1")
		if !strings.Contains(out, "COPY 1000") {
			t.Fatalf("copy in:\n%s", out)
		}
		out = pt.mustRun(t, "", nil, "-v", "ON_ERROR_STOP=1", "-c",
			fmt.Sprintf(`\copy (SELECT * FROM %s WHERE id < 3 ORDER BY id) to stdout with (format csv)`, tbl))
		if want := "0,\"name, 0\"\n1,\"name, 1\"\n2,\"name, 2\"\n"; out != want {
			t.Fatalf("copy out: %q, want %q", out, want)
		}
		// A failing \copy reports the error and the session goes on.
		_, errOut, err := pt.run(t, fmt.Sprintf("\\copy %s from stdin with (format csv)\nnot-a-number,x\n\\.\nSELECT 'still here';\n", tbl), nil, "-At")
		if err != nil || !strings.Contains(errOut, "invalid input syntax for type integer") {
			t.Fatalf("failed copy: %v\n%s", err, errOut)
		}
	})

	t.Run("error with SQLSTATE", func(t *testing.T) {
		t.Parallel()
		_, errOut, err := pt.run(t, "", nil, "-v", "VERBOSITY=verbose", "-v", "ON_ERROR_STOP=1", "-c", "SELECT 1/0")
		if err == nil {
			t.Fatalf("psql exited 0")
		}
		if !strings.Contains(errOut, "ERROR:  22012: division by zero") {
			t.Fatalf("stderr:\n%s", errOut)
		}
		_, errOut, _ = pt.run(t, "", nil, "-v", "VERBOSITY=verbose", "-c", "SELECT * FROM no_such_table_psql")
		if !strings.Contains(errOut, "42P01") {
			t.Fatalf("stderr:\n%s", errOut)
		}
	})

	t.Run("PGOPTIONS reach the session", func(t *testing.T) {
		t.Parallel()
		opts := []string{"PGOPTIONS=-c statement_timeout=4321 -c search_path=foo,public"}
		args := []string{"-At", "-c", "SHOW statement_timeout", "-c", "SHOW search_path"}
		out := pt.mustRun(t, "", opts, args...)
		if direct := directPsqlTarget().mustRun(t, "", opts, args...); out != "4321ms\nfoo,public\n" || out != direct {
			t.Fatalf("got %q, directly %q", out, direct)
		}
		// And the timeout is enforced.
		_, errOut, err := pt.run(t, "", []string{"PGOPTIONS=-c statement_timeout=200"},
			"-v", "VERBOSITY=verbose", "-c", "SELECT pg_sleep(10)")
		if err == nil || !strings.Contains(errOut, "57014") {
			t.Fatalf("statement_timeout: %v\n%s", err, errOut)
		}
	})

	t.Run("backend FATAL while idle", func(t *testing.T) {
		t.Parallel()
		// PostgreSQL ends an idle transaction's session; psql, at its next
		// statement, prints PostgreSQL's FATAL 25P03 (libpq reads it after
		// its write fails).
		script := "SET idle_in_transaction_session_timeout = 300;\nBEGIN;\nSELECT 1;\n\\! sleep 1.5\nSELECT 2;\n"
		_, direct, _ := directPsqlTarget().run(t, script, nil, "-v", "VERBOSITY=verbose")
		if !strings.Contains(direct, "25P03") {
			t.Fatalf("directly: %s", direct)
		}
		_, via, _ := pt.run(t, script, nil, "-v", "VERBOSITY=verbose")
		if !strings.Contains(via, "25P03") {
			t.Fatalf("through the proxy:\n%s\ndirectly:\n%s", via, direct)
		}
	})

	t.Run("application_name", func(t *testing.T) {
		t.Parallel()
		out := pt.mustRun(t, "", []string{"PGAPPNAME=psql-through-mzproxy"}, "-At", "-c", "SHOW application_name")
		if out != "psql-through-mzproxy\n" {
			t.Fatalf("got %q", out)
		}
	})
}
