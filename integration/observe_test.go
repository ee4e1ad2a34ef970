package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statement observation: traces, statement metrics, the slow-statement
// log and SHOW mzproxy_sessions.

// exportedSpan is what the test reads of a span stdouttrace wrote.
type exportedSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

// spans are the spans in the proxy's output (standard output, which the
// harness logs with standard error: spans are the lines that are JSON
// objects).
func spans(t *testing.T, out string) []exportedSpan {
	t.Helper()
	var list []exportedSpan
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var s exportedSpan
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("span %q: %v", line, err)
		}
		list = append(list, s)
	}
	return list
}

// TestOpsTraceStdout: with --trace-exporter stdout, a SELECT AS OF of a
// managed table is a "statement" span with the chosen timestamp whose
// children are its phases, and the slow-statement log line carries the
// trace id.
func TestOpsTraceStdout(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--trace-exporter", "stdout", "--slow-statement-threshold", "1ns")
	conn := connectTo(t, ctx, p.URL("postgres", db)+"&application_name=trace_test")
	for _, sql := range []string{"CREATE TABLE traced (x int)", "INSERT INTO traced VALUES (1)"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM traced WHERE mz_now() > 0", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil || n != 1 {
		t.Fatalf("AS OF read: %d, %v", n, err)
	}
	// The span is written as the statement ends, just after the client
	// has its answer.
	var (
		all   []exportedSpan
		stmt  exportedSpan
		attrs map[string]any
	)
	eventually(t, 10*time.Second, "the read's span is written", func() bool {
		all = spans(t, p.log.String())
		for _, s := range all {
			attrs = map[string]any{}
			for _, a := range s.Attributes {
				attrs[a.Key] = a.Value.Value
			}
			if s.Name == "statement" && attrs["mzproxy.statement.kind"] == "read" {
				stmt = s
				return true
			}
		}
		return false
	})
	if ts, ok := attrs["mzproxy.timestamp"].(float64); !ok || ts <= 0 {
		t.Errorf("statement span has no timestamp: %v", attrs)
	}
	children := map[string]bool{}
	for _, s := range all {
		if s.Parent.SpanID == stmt.SpanContext.SpanID && s.SpanContext.TraceID == stmt.SpanContext.TraceID {
			children[s.Name] = true
		}
	}
	for _, phase := range []string{"plan", "timestamp", "upper_wait", "holds", "backend"} {
		if !children[phase] {
			t.Errorf("no %s span under the statement; children: %v", phase, children)
		}
	}
	// The slow-statement line follows the span (both come after the
	// client's answer; the log is read from the process asynchronously).
	var slow string
	eventually(t, 10*time.Second, "a slow-statement line with trace_id="+stmt.SpanContext.TraceID, func() bool {
		for _, line := range strings.Split(p.log.String(), "\n") {
			if strings.Contains(line, "slow statement") && strings.Contains(line, "trace_id="+stmt.SpanContext.TraceID) {
				slow = line
			}
		}
		return slow != ""
	})
	for _, want := range []string{"session=", "application_name=trace_test", "database=" + db, "user=postgres", "phases=\"plan=", "backend=", "kind=read", "outcome=ok", "timestamp="} {
		if !strings.Contains(slow, want) {
			t.Errorf("slow-statement line lacks %q: %s", want, slow)
		}
	}
}

// TestOpsStatementMetrics: after a workload of reads, an error, a statement
// timeout, a cancel and an optimistic write that conflicts, the statement,
// phase, interruption, OCC, backend error and oracle series have moved.
func TestOpsStatementMetrics(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	pause := filepath.Join(t.TempDir(), "pause")
	p := launchProxy(t, append(os.Environ(), "MZPROXY_TEST_OCC_PAUSE_FILE="+pause), []string{
		"--listen", "127.0.0.1:0", "--backend", directURL("postgres", "postgres"), "--metrics-listen", "127.0.0.1:0",
		"--occ-max-concurrent", "2", "--statement-timeout", "3s",
	})
	addr := p.metricsAddr(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE m (x int)", "INSERT INTO m VALUES (1)", "SELECT 1", "SELECT count(*) FROM m WHERE mz_now() > 0"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := conn.Exec(ctx, "SELEC 1"); err == nil {
		t.Fatal("a syntax error succeeded")
	}
	// A statement timeout: --statement-timeout, which only the proxy
	// knows (a SET statement_timeout also reaches the backend, whose own
	// timer may fire first: then it is not the proxy's interruption).
	var pe *pgconn.PgError
	if _, err := conn.Exec(ctx, "SELECT pg_sleep(10)"); !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("statement timeout: %v", err)
	}
	// A cancel: pgx sends a CancelRequest when the context ends, here once
	// the backend runs the statement. (A timer could end it before the
	// statement reached the backend on a loaded machine: PostgreSQL
	// ignores a cancel that finds its backend waiting for a command.)
	direct := connectTo(t, ctx, directURL("postgres", db))
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			var n int
			err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep(5) /*to cancel*/%'").Scan(&n)
			if err == nil && n == 1 {
				return
			}
		}
	}()
	_, err := conn.Exec(cctx, "SELECT pg_sleep(5) /*to cancel*/")
	cancel()
	if err == nil {
		t.Fatal("the canceled statement succeeded")
	}
	if conn.IsClosed() {
		conn = connectTo(t, ctx, p.URL("postgres", db))
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("after the cancel: %v", err)
	}
	// An autocommit write paused between its statement and its COMMIT
	// while another write commits: both commit, nothing is retried.
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	writer := connectTo(t, ctx, p.URL("postgres", db))
	done := make(chan error, 1)
	go func() {
		_, err := execSimple(ctx, writer, "UPDATE m SET x = x + 1 /*mzproxy:occ-pause*/")
		done <- err
	}()
	eventually(t, 10*time.Second, "the write reaches the failpoint", func() bool {
		_, err := os.Stat(pause + ".paused")
		return err == nil
	})
	if _, err := execSimple(ctx, conn, "INSERT INTO m VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(pause); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the paused write: %v", err)
	}

	// The paused write's answer reaches its client before the proxy
	// records the statement's metrics: scrape until they are in.
	var m string
	eventually(t, 10*time.Second, "the paused write's metrics", func() bool {
		_, m = get(t, addr, "/metrics")
		return strings.Contains(m, `mzproxy_statement_phase_duration_milliseconds_count{phase="commit"}`) &&
			metricValue(t, m, `mzproxy_occ_commits_total`) >= 3
	})
	atLeast := func(series string, min float64) {
		t.Helper()
		if got := metricValue(t, m, series); got < min {
			t.Errorf("%s = %v, want at least %v", series, got, min)
		}
	}
	atLeast(`mzproxy_statements_total{kind="read",outcome="ok"}`, 3)
	atLeast(`mzproxy_statements_total{kind="write",outcome="ok"}`, 1)
	atLeast(`mzproxy_statements_total{kind="ddl",outcome="ok"}`, 1)
	atLeast(`mzproxy_statements_total{kind="invalid",outcome="error"}`, 1)
	atLeast(`mzproxy_statements_total{kind="read",outcome="canceled"}`, 1)
	atLeast(`mzproxy_backend_errors_total{class="42"}`, 1)
	atLeast(`mzproxy_backend_errors_total{class="57"}`, 1)
	atLeast(`mzproxy_oracle_round_trips_total{op="read_ts"}`, 1)
	atLeast(`mzproxy_read_holds_granted_total`, 1) // the mz_now() read
	atLeast(`mzproxy_occ_commits_total`, 3)
	if got := metricValue(t, m, `mzproxy_occ_retries_total`); got != 0 {
		t.Errorf("mzproxy_occ_retries_total = %v, want 0: no write conflicted", got)
	}
	// By cause, whatever phase the machine's load let the statement reach.
	for _, cause := range []string{"timeout", "cancel"} {
		if got := sumSeries(m, `mzproxy_statement_interruptions_total{cause="`+cause+`"`); got < 1 {
			t.Errorf("interruptions with cause %s: %v, want at least 1", cause, got)
		}
	}
	// Three autocommit writes (the INSERTs and the UPDATE), each attempt
	// committed in its own round trip; only the paused one has a COMMIT
	// of its own.
	atLeast(`mzproxy_statement_phase_duration_milliseconds_count{phase="occ_attempt"}`, 3)
	atLeast(`mzproxy_statement_phase_duration_milliseconds_count{phase="commit"}`, 1)
	for _, phase := range []string{"plan", "timestamp", "upper_wait", "holds", "backend"} {
		atLeast(`mzproxy_statement_phase_duration_milliseconds_count{phase="`+phase+`"}`, 1)
	}
	atLeast(`mzproxy_statement_phase_duration_milliseconds_bucket{phase="backend",le="+Inf"}`, 5)
	atLeast(`mzproxy_statement_duration_milliseconds_count{kind="read"}`, 4)
	if !strings.Contains(m, `mzproxy_since_lag_seconds{collection="public.m",database="`+db+`"}`) {
		t.Errorf("no since lag for public.m:\n%s", m)
	}
	for _, unwanted := range []string{"pg_sleep", `user="`, "SELEC "} {
		if strings.Contains(m, unwanted) {
			t.Errorf("the scrape contains %q", unwanted)
		}
	}
}

// TestOpsShowSessions: SHOW mzproxy_sessions lists every session with what
// it does: a session running a long statement is active in the backend
// phase, one in a transaction block is idle in transaction.
func TestOpsShowSessions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	busy := p.connectApp(t, ctx, "show_busy")
	inTx := p.connectApp(t, ctx, "show_in_tx")
	operator := p.connectApp(t, ctx, "show_operator")
	if _, err := inTx.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := busy.Exec(ctx, "SELECT pg_sleep(2)")
		done <- err
	}()
	type row struct {
		user, db, app, state, kind, phase string
		pid                               int32
		phaseSince                        *time.Time
	}
	read := func() map[string]row {
		rows, err := operator.Query(ctx, "SHOW mzproxy_sessions", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]row{}
		for rows.Next() {
			var (
				r           row
				id          int64
				since       time.Time
				kind, phase *string
				durationMS  float64
			)
			if err := rows.Scan(&id, &r.user, &r.db, &r.app, &r.pid, &r.state, &since, &kind, &phase, &r.phaseSince, &durationMS); err != nil {
				t.Fatal(err)
			}
			if kind != nil {
				r.kind = *kind
			}
			if phase != nil {
				r.phase = *phase
			}
			if id <= 0 || r.pid <= 0 || time.Since(since) < 0 || durationMS < 0 {
				t.Errorf("bad row: id %d pid %d since %v duration %v", id, r.pid, since, durationMS)
			}
			out[r.app] = r
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// A session's statement ends in SHOW mzproxy_sessions just after its
	// client has the answer: the BEGIN may still show as running for a
	// moment on a busy machine.
	eventually(t, 10*time.Second, "the busy session is active in the backend, the other idle in its block", func() bool {
		rows := read()
		r := rows["show_busy"]
		return r.state == "active" && r.phase == "backend" && rows["show_in_tx"].state == "idle in transaction"
	})
	got := read()
	if r := got["show_busy"]; r.kind != "read" || r.user != "postgres" || r.db != "postgres" || r.phaseSince == nil {
		t.Errorf("busy session: %+v", r)
	}
	if r := got["show_in_tx"]; r.state != "idle in transaction" || r.phase != "" {
		t.Errorf("session in a transaction block: %+v", r)
	}
	if r := got["show_operator"]; r.state != "active" || r.kind != "show" {
		t.Errorf("the session asking: %+v", r)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r := read()["show_busy"]; r.state != "idle" || r.kind != "read" {
		t.Errorf("busy session after its statement: %+v", r)
	}
}

// sumSeries adds the values of the series whose line starts with prefix.
func sumSeries(scrape, prefix string) float64 {
	var sum float64
	for _, line := range strings.Split(scrape, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}
