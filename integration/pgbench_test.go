package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPgbench runs pgbench's initialization and a short select-only run in
// both query modes through the proxy.
func TestPgbench(t *testing.T) {
	if testing.Short() {
		t.Skip("pgbench runs for about 10s; skipped with -short")
	}
	if _, err := exec.LookPath("pgbench"); err != nil {
		t.Skip("pgbench is not installed (apt-get install -y postgresql-contrib or postgresql-15)")
	}
	t.Parallel()
	p := startProxy(t)
	host, port := p.hostPort()
	ctx := testContext(t)
	// A database of its own: pgbench -i drops and makes pgbench_* tables.
	db := tableName(t)
	execDirect(t, ctx, "CREATE DATABASE "+db)

	pgbench := pgbenchRunner(t, ctx, host, port, db, 90*time.Second)
	out := pgbench("-i", "-s", "1", "-q")
	if !strings.Contains(out, "done") {
		t.Fatalf("pgbench -i:\n%s", out)
	}
	for _, mode := range []string{"simple", "prepared"} {
		out := pgbench("-S", "-T", "3", "-c", "4", "-j", "2", "-M", mode)
		if !strings.Contains(out, "number of failed transactions: 0") {
			t.Fatalf("pgbench -M %s:\n%s", mode, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "number of transactions actually processed") || strings.HasPrefix(line, "tps") {
				t.Logf("-M %s: %s", mode, line)
			}
		}
	}
	// A read-write run exercises transactions (BEGIN ... END) too. They
	// are validated at COMMIT (optimistic writes): a conflict is 40001,
	// which pgbench retries.
	out = pgbench("-T", "3", "-c", "2", "-j", "2", "-M", "prepared", "--max-tries", "1000")
	if !strings.Contains(out, "number of failed transactions: 0") {
		t.Fatalf("pgbench tpcb-like:\n%s", out)
	}
}

// pgbenchRunner returns a function that runs pgbench with the given
// arguments against database db at host:port and returns its output,
// failing the test if pgbench fails.
func pgbenchRunner(t *testing.T, ctx context.Context, host, port, db string, limit time.Duration) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		cmd := exec.CommandContext(cctx, "pgbench", append(args, "-h", host, "-p", port, "-U", "postgres", db)...)
		cmd.Env = append(os.Environ(), "PGSSLMODE=disable", "PGOPTIONS=")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("pgbench %q: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
}
