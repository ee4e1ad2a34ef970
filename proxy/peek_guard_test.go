package proxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// TestPeekGuardAnswers: the steady read guard of the present (shapePeek),
// run by an ordinary role in the test server's database, sets and answers
// P when the writes are the learned count and P is less than a second old,
// pins with pin() and answers "t/" when the writes moved or P is a second
// old (the bound to the microsecond), and refuses with the marker for
// another catalog revision and under REPEATABLE READ and SERIALIZABLE (not
// under READ UNCOMMITTED, which is READ COMMITTED). It scans no relation
// but pinned and catalog_revision, the latter a relation of its FROM, not
// a subquery (the writes are read by
// pg_sequence_last_value: each relation a statement names costs a lock,
// a rights check and a scan's start at every read; docs/read-cost.md
// "Session 21"), and its test of P's age (storage.PinFresh) agrees with the one
// settled_pin makes through now_ms() at the millisecond's bounds. The
// learning guard (shapeLearn) answers P and the settled count when P is
// fresh, pin()'s t when it is a second old, and refuses for another
// catalog revision; so does an AS OF read's guard (the view shape), which
// reads the revision as a relation of its FROM too.
func TestPeekGuardAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	openSession(t, ctx, Config{}) // installs mzproxy's schema
	conn, err := pgconn.Connect(ctx, server.ConnString("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exec := func(sql string, params ...string) ([]string, error) {
		t.Helper()
		args := make([][]byte, len(params))
		for i, p := range params {
			args[i] = []byte(p)
		}
		res := conn.ExecParams(ctx, sql, args, nil, nil, nil).Read()
		var out []string
		for _, row := range res.Rows {
			out = append(out, string(row[0]))
		}
		return out, res.Err
	}
	must := func(sql string, params ...string) []string {
		t.Helper()
		out, err := exec(sql, params...)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return out
	}
	role := fmt.Sprintf("peek_guard_%d", time.Now().UnixNano())
	must("CREATE ROLE " + role)
	defer func() {
		_, _ = exec("RESET ROLE")
		_, _ = exec("DROP ROLE " + role)
	}()
	must("SET ROLE " + role)
	rev, err := strconv.ParseInt(must("SELECT revision FROM " + storage.Schema + ".catalog_revision")[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	writes := must("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM " + storage.Schema + ".writes")[0]
	key := guardKey{rev: rev, pin: true, shape: shapePeek}

	// guard runs the guard of key with P's age set by clock, an expression
	// of P (p.last_value), in a transaction of its own at level, and
	// returns its answer and the mzproxy.read_ts it left.
	guard := func(key guardKey, clock, count, level string) (answer, readTS string, err error) {
		t.Helper()
		must("BEGIN ISOLATION LEVEL " + level)
		defer must("COMMIT")
		out, err := exec(peekGuardAt(key, clock), count)
		if err != nil {
			return "", "", err
		}
		return out[0], must("SELECT pg_catalog.current_setting('mzproxy.read_ts')")[0], nil
	}
	pAged := func(ms string) string {
		return "('epoch'::pg_catalog.timestamptz + (p.last_value * 1000 + " + ms + ")::float8 * '1 microsecond'::pg_catalog.interval)"
	}
	for _, c := range []struct {
		name, age, count string
		pins             bool
	}{
		{"fresh", "500000", writes, false},
		{"just under a second", "1000999", writes, false},
		{"a second old", "1001000", writes, true},
		{"two seconds old", "2000000", writes, true},
		{"writes moved", "0", writes + "1", true},
	} {
		answer, readTS, err := guard(key, pAged(c.age), c.count, "READ COMMITTED")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ts, slash := strings.CutSuffix(answer, "/")
		if slash != c.pins || ts != readTS {
			t.Errorf("%s: answer %q with mzproxy.read_ts %q, want a pin() answer (\"t/\"): %v", c.name, answer, readTS, c.pins)
		}
		if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
			t.Errorf("%s: answer %q: %v", c.name, answer, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || !refusedBy(&pgerr.Error{Code: pgerr.Code(pe.Code), Message: pe.Message}, staleMarker) {
			t.Errorf("%s: %v, want the guard's refusal", what, err)
		}
	}
	stale := key
	stale.rev--
	_, _, err = guard(stale, pAged("0"), writes, "READ COMMITTED")
	refused("another catalog revision", err)
	for _, level := range []string{"REPEATABLE READ", "SERIALIZABLE"} {
		_, _, err = guard(key, pAged("0"), writes, level)
		refused(level, err)
	}
	if _, _, err := guard(key, pAged("500000"), writes, "READ UNCOMMITTED"); err != nil {
		t.Errorf("READ UNCOMMITTED: %v, want P", err)
	}

	// The learning guard (shapeLearn), once a pin settled every write
	// counted: P and the count when P is fresh, pin()'s t ("t/") when not.
	learn := key
	learn.shape = shapeLearn
	must(storage.ReadTSSQL)
	for _, c := range []struct {
		name, age string
		pins      bool
	}{{"learning, fresh", "500000", false}, {"learning, a second old", "1001000", true}} {
		must("BEGIN")
		answer := must(learnGuardAt(learn, pAged(c.age)))[0]
		readTS := must("SELECT pg_catalog.current_setting('mzproxy.read_ts')")[0]
		must("COMMIT")
		ts, count, _ := strings.Cut(answer, "/")
		if want := map[bool]string{false: writes, true: ""}[c.pins]; ts != readTS || count != want {
			t.Errorf("%s: answer %q with mzproxy.read_ts %q, want t/%s", c.name, answer, readTS, want)
		}
	}
	stale.shape = shapeLearn
	_, err = exec(learnGuardAt(stale, pAged("0")))
	refused("learning, another catalog revision", err)

	// An AS OF read's guard (the view shape, pinning nothing): "0" at the
	// revision, refused at another, the revision a relation of its FROM.
	asOf := guardKey{rev: rev}
	if got := must(readGuardSQL(asOf)); len(got) != 1 || got[0] != "0" {
		t.Errorf("the AS OF guard answers %q, want one row \"0\"", got)
	}
	asOf.rev--
	_, err = exec(readGuardSQL(asOf))
	refused("AS OF, another catalog revision", err)
	if plan := strings.Join(must("EXPLAIN "+readGuardSQL(asOf)), "\n"); strings.Contains(plan, "InitPlan") || strings.Contains(plan, "SubPlan") {
		t.Errorf("the AS OF guard has a subplan:\n%s", plan)
	}

	// The relations it scans.
	plan := strings.Join(must("EXPLAIN (VERBOSE, COSTS OFF) "+peekGuardSQL(key), writes), "\n")
	var scanned []string
	for _, line := range strings.Split(plan, "\n") {
		if _, rel, ok := strings.Cut(line, "Scan on "); ok {
			scanned = append(scanned, strings.Fields(rel)[0])
		}
	}
	if want := []string{storage.Schema + ".pinned", storage.Schema + ".catalog_revision"}; len(scanned) != 2 ||
		!strings.Contains(strings.Join(scanned, " "), want[0]) || !strings.Contains(strings.Join(scanned, " "), want[1]) {
		t.Errorf("the guard scans %v, want %v:\n%s", scanned, want, plan)
	}
	// The revision is a relation of its FROM, not a subquery: no subplan
	// to start and run at every guard (docs/read-cost.md "Session 24").
	if strings.Contains(plan, "InitPlan") || strings.Contains(plan, "SubPlan") {
		t.Errorf("the guard has a subplan:\n%s", plan)
	}

	// storage.PinFresh against now_ms()'s own text, its clock replaced by a
	// fixed time: P fresh when it is at least now_ms() - 1000.
	nowMS := must("SELECT prosrc FROM pg_catalog.pg_proc WHERE oid = '" + storage.Schema + ".now_ms()'::pg_catalog.regprocedure")[0]
	if !strings.Contains(nowMS, "clock_timestamp()") {
		t.Fatalf("now_ms() is %q", nowMS)
	}
	clock := "('epoch'::pg_catalog.timestamptz + ($2::int8)::float8 * '1 microsecond'::pg_catalog.interval)"
	msAt := strings.TrimSpace(strings.Replace(nowMS, "clock_timestamp()", clock, 1))
	check := "SELECT ((" + msAt + ") - 1000 <= p.last_value)::text || '/' || (" + storage.PinFresh(clock) + ")::text" +
		" FROM (SELECT $1::int8 AS last_value, true AS is_called) p"
	const p = 1796341011307
	for _, off := range []int64{-1000000, -1, 0, 1, 999, 1000, 999999, 1000000, 1000999, 1001000, 1001001, 1002000, 5000000} {
		got := must(check, strconv.FormatInt(p, 10), strconv.FormatInt(p*1000+off, 10))[0]
		if a, b, _ := strings.Cut(got, "/"); a != b {
			t.Errorf("P %d at %d us past P: now_ms() says fresh %s, PinFresh %s", p, off, a, b)
		}
		if fresh := off < 1001000; got != strconv.FormatBool(fresh)+"/"+strconv.FormatBool(fresh) {
			t.Errorf("P %d at %d us past P: %s, want fresh %v", p, off, got, fresh)
		}
	}
}
