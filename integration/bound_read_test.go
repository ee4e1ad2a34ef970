package integration

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestPreparedTimestampedReadShape (issue 15): a prepared read AS OF an old
// time, or of the present with mz_now(), bound by the Bind that begins its
// batch, costs the session's backend connection one round trip, as the
// read directly does: the read guard rides in front of the client's Bind
// (proxy/bound_read.go) instead of a round trip of its own before it. A
// tap between mzproxy and PostgreSQL counts mzproxy's writes on the
// session's connection. Neither these reads nor a session alternating them
// with simple Queries' reads of the present prepares a guard again: the
// backend sees no Parse (but a guard shape's first, see below).
func TestPreparedTimestampedReadShape(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	tap := startBackendTap(t)
	p := startProxy(t, "--backend", tap.url())
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE bs (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO bs SELECT g, g * 10 FROM generate_series(1, 100) g",
		"ALTER TABLE bs SET (RETAIN HISTORY FOR '1h')")
	old := readTS(t, ctx, conn)
	mustExec(t, ctx, conn, "UPDATE bs SET v = v + 1")
	reads := map[string]struct {
		sql   string
		delta int // what the read sees over id * 10
	}{
		"asof": {"SELECT v FROM bs WHERE id = $1 AS OF " + strconv.FormatUint(old, 10), 0},
		"now":  {"SELECT v, mz_now() FROM bs WHERE id = $1", 1},
	}
	for name, r := range reads {
		if _, err := conn.PgConn().Prepare(ctx, name, r.sql, nil); err != nil {
			t.Fatalf("%s: %v", r.sql, err)
		}
	}
	read := func(name string, id int) {
		t.Helper()
		got, err := firstOfOneRow(conn.PgConn().ExecPrepared(ctx, name, [][]byte{[]byte(strconv.Itoa(id))}, nil, nil).Read())
		if want := strconv.Itoa(id*10 + reads[name].delta); err != nil || got != want {
			t.Fatalf("prepared %s read of %d: %q, %v; want %s", name, id, got, err, want)
		}
	}
	// The first reads prepare the guard and publish the AS OF's hold. A
	// guard of the present has two shapes, each prepared at its first
	// use: the reads that learn the settled count of writes (two), and
	// the rest, which read through it (proxy's guardShape).
	for name := range reads {
		for id := 1; id <= 5; id++ {
			read(name, id)
		}
	}
	readSimple := func(id int) {
		t.Helper()
		var v, ts int64
		sql := fmt.Sprintf("SELECT v, mz_now() FROM bs WHERE id = %d", id)
		if err := conn.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&v, &ts); err != nil || v != int64(id*10+1) {
			t.Fatalf("%s: %d, %v; want %d", sql, v, err, id*10+1)
		}
	}
	// Its text's second use prepares its statement (read_statements.go);
	// its guard's shapes as above.
	for id := 1; id <= 5; id++ {
		readSimple(id)
	}
	const n = 10
	// mixed: a simple Query's read of the present, then a prepared one,
	// alternately: each keeps its guard prepared.
	for _, name := range []string{"asof", "now", "mixed"} {
		start, end := "shape-start-"+name, "shape-end-"+name
		if _, err := execSimple(ctx, conn, "SELECT '"+start+"'"); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if name != "mixed" {
				read(name, 10+i)
			} else if i%2 == 0 {
				readSimple(10 + i)
			} else {
				read("now", 10+i)
			}
		}
		if _, err := execSimple(ctx, conn, "SELECT '"+end+"'"); err != nil {
			t.Fatal(err)
		}
		var writes, parses int
		for _, e := range tap.between(start, end) {
			switch {
			case e == "W":
				writes++
			case strings.HasPrefix(e, "P "):
				parses++
			}
		}
		// The window's last write is the Query of shape-end.
		roundTrips := writes - 1
		t.Logf("%s: %.1f round trips, %.1f Parses per read", name, float64(roundTrips)/n, float64(parses)/n)
		if roundTrips > n {
			t.Errorf("%s: %d round trips on the session's backend connection for %d reads, want one each", name, roundTrips, n)
		}
		// A guard of the present whose P was more than a second old in
		// the warm-up (a late tick) may meet one of its later shapes in
		// the window: at most once each (two shapes per guard, the mixed
		// window has two guards), never once per read.
		if allowed := map[string]int{"asof": 0, "now": 2, "mixed": 4}[name]; parses > allowed {
			t.Errorf("%s: %d Parses for %d reads, want at most %d (each guard is prepared once)", name, parses, n, allowed)
		}
	}
}

// TestPreparedReadGuardRefusedReplays: when the read guard sent in front
// of a prepared read's Bind refuses (another proxy changed the catalog
// since this one saw it), the backend has skipped the client's messages
// behind it; mzproxy binds again and sends them again. The read runs
// exactly once (a sequence it advances counts), with the right answer, and
// the client sees the answers of the second attempt only: whether the
// client's Sync came right after the read or another message came first
// (a Parse, which makes mzproxy read the guard's answer before it), and
// whether the read is of the present or AS OF.
func TestPreparedReadGuardRefusedReplays(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p, q := startProxy(t, "--metrics-listen", "127.0.0.1:0"), startProxy(t)
	a := connectTo(t, ctx, p.URL("postgres", db))
	b := connectTo(t, ctx, q.URL("postgres", db))
	mustExec(t, ctx, b, "CREATE TABLE gr (k int, v text)", "INSERT INTO gr VALUES (1, 'one')",
		"ALTER TABLE gr SET (RETAIN HISTORY FOR '1h')", "CREATE SEQUENCE public.grs")
	old := readTS(t, ctx, b)
	mustExec(t, ctx, b, "UPDATE gr SET v = 'uno' WHERE k = 1")
	reads := map[string]struct{ sql, want string }{
		"now":  {"SELECT v, nextval('public.grs'), mz_now() FROM gr WHERE k = $1", "uno"},
		"asof": {"SELECT v, nextval('public.grs') FROM gr WHERE k = $1 AS OF " + strconv.FormatUint(old, 10), "one"},
	}
	for name, r := range reads {
		if _, err := a.PgConn().Prepare(ctx, name, r.sql, nil); err != nil {
			t.Fatalf("%s: %v", r.sql, err)
		}
	}
	seq := 0
	check := func(what, name string, res *pgconn.Result) {
		t.Helper()
		seq++
		if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != reads[name].want ||
			string(res.Rows[0][1]) != strconv.Itoa(seq) {
			t.Fatalf("%s: prepared %s read %v, %v; want one row of %q and the sequence's next value %d (the read ran once)",
				what, name, rowsText(res), res.Err, reads[name].want, seq)
		}
	}
	changes := 0
	changeCatalog := func() {
		t.Helper()
		changes++
		mustExec(t, ctx, b, fmt.Sprintf("CREATE TABLE gr_other_%d (x int)", changes))
	}
	for _, name := range []string{"now", "asof"} {
		check("before", name, a.PgConn().ExecPrepared(ctx, name, [][]byte{[]byte("1")}, nil, nil).Read())

		changeCatalog()
		check("the Sync right after", name, a.PgConn().ExecPrepared(ctx, name, [][]byte{[]byte("1")}, nil, nil).Read())

		// A Parse after the read, before the Sync: its answer comes after
		// the read's.
		changeCatalog()
		pl := a.PgConn().StartPipeline(ctx)
		pl.SendQueryPrepared(name, [][]byte{[]byte("1")}, nil, nil)
		pl.SendPrepare("after_"+name, "SELECT 1", nil)
		if err := pl.Sync(); err != nil {
			t.Fatal(err)
		}
		res, err := pl.GetResults()
		if err != nil {
			t.Fatalf("pipeline: %v", err)
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			t.Fatalf("pipeline: first result %T, want the read's rows", res)
		}
		check("a Parse before the Sync", name, rr.Read())
		if res, err = pl.GetResults(); err != nil {
			t.Fatalf("pipeline: the Parse after the read: %v", err)
		} else if _, ok := res.(*pgconn.StatementDescription); !ok {
			t.Fatalf("pipeline: second result %T, want the Parse's", res)
		}
		if res, err = pl.GetResults(); err != nil {
			t.Fatalf("pipeline: %v", err)
		} else if _, ok := res.(*pgconn.PipelineSync); !ok {
			t.Fatalf("pipeline: third result %T, want the Sync's", res)
		}
		if err := pl.Close(); err != nil {
			t.Fatal(err)
		}
		check("after the pipeline", name, a.PgConn().ExecPrepared(ctx, name, [][]byte{[]byte("1")}, nil, nil).Read())
	}
	var v string
	if err := a.QueryRow(ctx, "SELECT v FROM gr WHERE k = 1", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != "uno" {
		t.Fatalf("the session after the replayed reads: %q, %v", v, err)
	}
	p.awaitHolds(t, 0, "after the replayed reads")
}

// rowsText is a result's rows as text, for messages.
func rowsText(res *pgconn.Result) [][]string {
	var out [][]string
	for _, row := range res.Rows {
		var r []string
		for _, v := range row {
			r = append(r, string(v))
		}
		out = append(out, r)
	}
	return out
}

// TestPlanCacheTwoDatabases: one mzproxy in front of two databases whose
// catalogs are at the same revision, each with a table t of its own (under
// another id, so another history table). A timestamped read of t planned
// in one database is not reused unchecked in the other: each reads its own
// t (the cache once returned the first database's plan, which read the
// other table's history there).
func TestPlanCacheTwoDatabases(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	one := connectTo(t, ctx, p.URL("postgres", freshDatabase(t, ctx)))
	two := connectTo(t, ctx, p.URL("postgres", freshDatabase(t, ctx)))
	mustExec(t, ctx, one, "CREATE TABLE first_one (x text)", "CREATE TABLE t (v text)",
		"INSERT INTO first_one VALUES ('not t in one')", "INSERT INTO t VALUES ('t in one')")
	mustExec(t, ctx, two, "CREATE TABLE t (v text)", "CREATE TABLE then_two (x text)",
		"INSERT INTO t VALUES ('t in two')", "INSERT INTO then_two VALUES ('not t in two')")
	revision := func(conn *pgx.Conn) int64 {
		t.Helper()
		var rev int64
		if err := conn.QueryRow(ctx, "SELECT revision FROM mzproxy.catalog_revision").Scan(&rev); err != nil {
			t.Fatal(err)
		}
		return rev
	}
	if r1, r2 := revision(one), revision(two); r1 != r2 {
		t.Skipf("the catalogs are at revisions %d and %d: the test needs them alike", r1, r2)
	}
	// After both databases' writes.
	asOf := strconv.FormatUint(max(readTS(t, ctx, one), readTS(t, ctx, two)), 10)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for i, sql := range []string{"SELECT v, mz_now() FROM t WHERE v <> 'x%d'", "SELECT v FROM t WHERE v <> 'x%d' AS OF " + asOf} {
			for j, c := range []struct {
				conn *pgx.Conn
				want string
			}{{one, "t in one"}, {two, "t in two"}, {one, "t in one"}, {two, "t in two"}} {
				// New literals each time, as a client's reads have: the
				// plan comes from the skeleton's.
				q := fmt.Sprintf(sql, i*10+j)
				rows, err := c.conn.Query(ctx, q, mode)
				if err != nil {
					t.Fatalf("%v %s: %v", mode, q, err)
				}
				var got []string
				for rows.Next() {
					got = append(got, string(rows.RawValues()[0]))
				}
				if err := rows.Err(); err != nil || len(got) != 1 || got[0] != c.want {
					t.Fatalf("%v %s: %q, %v; want %q", mode, q, got, err, c.want)
				}
			}
		}
	}
}

// TestPreparedReadBehindGuardTimesOut: statement_timeout ends a prepared
// read bound behind the read guard whether the guard waits (a lock on the
// catalog revision) or the read does, with 57014 for the client's batch;
// the session reads on, and nothing stays held.
func TestPreparedReadBehindGuardTimesOut(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	a := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, a, "CREATE TABLE gt (k int, v text)", "INSERT INTO gt VALUES (1, 'one')")
	for name, sql := range map[string]string{
		"now":  "SELECT v, mz_now() FROM gt WHERE k = $1",
		"slow": "SELECT v, mz_now(), pg_sleep(30) FROM gt WHERE k = $1",
	} {
		if _, err := a.PgConn().Prepare(ctx, name, sql, nil); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if v, err := readPrepared(ctx, a, "now"); err != nil || v != "one" {
		t.Fatalf("prepared read: %q, %v", v, err)
	}
	mustExec(t, ctx, a, "SET statement_timeout = '300ms'")

	locker := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, locker, "BEGIN", "LOCK TABLE mzproxy.catalog_revision IN ACCESS EXCLUSIVE MODE")
	_, err := readPrepared(ctx, a, "now")
	wantCode(t, err, "57014")
	mustExec(t, ctx, locker, "COMMIT")

	_, err = readPrepared(ctx, a, "slow")
	wantCode(t, err, "57014")

	if v, err := readPrepared(ctx, a, "now"); err != nil || v != "one" {
		t.Fatalf("prepared read after the timeouts: %q, %v", v, err)
	}
	p.awaitHolds(t, 0, "after the timed-out reads")
}

// TestHistoryReadExtendedShape: with --history-reads, a read sent as
// Parse, Bind, Describe, Execute, Sync (pgx's exec mode, the corpus
// runner's extended protocol) is bound behind the read guard like a
// prepared read: the ParseComplete's round trip and the batch's, and no
// pin() of its own on the session's connection (issue 15: it made 3 round
// trips there, and a catalog round more on the proxy's own connection,
// per read). Each read still sees the write before it.
func TestHistoryReadExtendedShape(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	tap := startBackendTap(t)
	p := startProxy(t, "--backend", tap.url(), "--history-reads")
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE hx (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO hx SELECT g, g FROM generate_series(1, 20) g")
	read := func(id, want int) {
		t.Helper()
		var v int
		// Another text each time, as the corpus's queries: a Parse each.
		sql := fmt.Sprintf("SELECT v FROM hx WHERE id = $1 AND %d = %d", id, id)
		if err := conn.QueryRow(ctx, sql, pgx.QueryExecModeExec, id).Scan(&v); err != nil || v != want {
			t.Fatalf("%s: %d, %v; want %d", sql, v, err, want)
		}
	}
	read(1, 1) // prepares the guard
	const n = 10
	if _, err := execSimple(ctx, conn, "SELECT 'hx-start'"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		read(2+i, 2+i)
	}
	if _, err := execSimple(ctx, conn, "SELECT 'hx-end'"); err != nil {
		t.Fatal(err)
	}
	writes := 0
	for _, e := range tap.between("hx-start", "hx-end") {
		if e == "W" {
			writes++
		}
	}
	roundTrips := writes - 1 // the last write is hx-end's Query
	t.Logf("%.1f round trips per read", float64(roundTrips)/n)
	if roundTrips > 2*n {
		t.Errorf("%d round trips on the session's connection for %d reads, want 2 each", roundTrips, n)
	}
	// Still a read of the present: it sees the write before it.
	for i := 0; i < 3; i++ {
		mustExec(t, ctx, conn, fmt.Sprintf("UPDATE hx SET v = v + 100 WHERE id = %d", 2+i))
		read(2+i, 102+i)
	}
}

// TestHistoryReadExtendedErrors: with --history-reads, a read parsed and
// bound in one batch (Parse, Bind, Describe, Execute, Sync) whose Parse,
// Bind or Execute fails gives the client what PostgreSQL gives for the
// same batch directly (SQLSTATE, message, position), and the session goes
// on: its next read of the same shape sees the present (a Sync of the
// proxy's ends the Parse's implicit transaction when the Bind goes behind
// the read guard; it must never run after a failed Parse). A statement
// timeout and a cancel of such a read end it with 57014 and leave no hold.
func TestHistoryReadExtendedErrors(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{proxies: [][]string{{"--history-reads", "--metrics-listen", "127.0.0.1:0"}}})
	ctx, db, role := st.ctx, st.db, st.role
	p := st.proxies[0]
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, "CREATE TABLE he (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO he SELECT g, g FROM generate_series(1, 20) g",
		"CREATE TABLE he_secret (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO he_secret VALUES (1, 1)",
		"CREATE SCHEMA he_nouse", "CREATE TABLE he_nouse.t (id int, v int)",
		"GRANT SELECT ON he TO "+role, "GRANT UPDATE ON he TO "+role)
	conn := connectTo(t, ctx, st.url(0, role))
	direct := connectTo(t, ctx, directURL(role, db))
	oneShot := func(c *pgx.Conn, sql string, params ...string) (string, error) {
		args := make([][]byte, len(params))
		for i, v := range params {
			args[i] = []byte(v)
		}
		return firstOfOneRow(c.PgConn().ExecParams(ctx, sql, args, nil, nil, nil).Read())
	}
	answer := func(c *pgx.Conn, sql string, params ...string) string {
		v, err := oneShot(c, sql, params...)
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			if pe.Position == 0 {
				return pe.Code + " " + pe.Message
			}
			return fmt.Sprintf("%s %s (position %d)", pe.Code, pe.Message, pe.Position)
		}
		if err != nil {
			return err.Error()
		}
		return v
	}
	const read = "SELECT v FROM he WHERE id = $1"
	n := 0
	next := func(what string) {
		// The session reads again, and sees a write made just before.
		t.Helper()
		n++
		mustExec(t, ctx, conn, fmt.Sprintf("UPDATE he SET v = v + 1000 WHERE id = %d", n))
		want := strconv.Itoa(n + 1000)
		for i := 0; i < 2; i++ {
			sql := fmt.Sprintf("%s AND %d = %d", read, i, i) // a Parse each
			if v, err := oneShot(conn, sql, strconv.Itoa(n)); err != nil || v != want {
				t.Fatalf("after %s: %s: %q, %v; want %s", what, sql, v, err, want)
			}
		}
	}
	next("the start") // the guard prepared, the catalog seen
	cases := []struct {
		what   string
		sql    string
		params []string
		code   string
		// The backend's position is in the rewrite's text, not the
		// client's (README, SQL surface): compared without it.
		rewritePosition bool
	}{
		{"syntax error at Parse", "SELEC v FROM he WHERE id = $1", []string{"1"}, "42601", false},
		{"unknown table at Parse", "SELECT v FROM he_missing WHERE id = $1", []string{"1"}, "42P01", false},
		{"unknown column at Parse", "SELECT w FROM he WHERE id = $1", []string{"1"}, "42703", false},
		{"schema without USAGE at Parse", "SELECT v FROM he_nouse.t WHERE id = $1", []string{"1"}, "42501", true},
		{"parameter's text at Bind", read, []string{"one"}, "22P02", false},
		{"parameter count at Bind", read, []string{"1", "2"}, "08P01", false},
		{"division by zero at Execute", "SELECT v / (id - $1) FROM he WHERE id = 3", []string{"3"}, "22012", false},
	}
	for _, c := range cases {
		got, want := answer(conn, c.sql, c.params...), answer(direct, c.sql, c.params...)
		if !strings.HasPrefix(want, c.code+" ") {
			t.Fatalf("%s: directly %q, want SQLSTATE %s", c.what, want, c.code)
		}
		if c.rewritePosition {
			got, want = strings.Split(got, " (position")[0], strings.Split(want, " (position")[0]
		}
		if got != want {
			t.Errorf("%s: %s: mzproxy answered %q, PostgreSQL %q", c.what, c.sql, got, want)
		}
		next(c.what)
	}
	// Without SELECT: 42501 at Execute, naming the history table (README
	// Security).
	if got := answer(conn, "SELECT v FROM he_secret WHERE id = $1", "1"); !strings.HasPrefix(got, "42501 permission denied for table ") {
		t.Errorf("a table without SELECT: %q", got)
	}
	next("a table without SELECT")
	p.awaitHolds(t, 0, "after the failed reads")

	// A statement timeout, and a cancel, of a read in such a batch.
	const slow = "SELECT v FROM he WHERE id = $1 AND pg_sleep(2) IS NOT NULL"
	mustExec(t, ctx, conn, "SET statement_timeout = '300ms'")
	_, err := oneShot(conn, slow, "2")
	wantCode(t, err, "57014")
	mustExec(t, ctx, conn, "SET statement_timeout = 0")
	next("a statement timeout")
	errc := make(chan error, 1)
	go func() { _, err := oneShot(conn, slow, "2"); errc <- err }()
	eventually(t, 20*time.Second, "the slow read runs", func() bool {
		var running bool
		err := owner.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE usename = $1 AND wait_event = 'PgSleep')`, role).Scan(&running)
		return err == nil && running
	})
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		wantCode(t, err, "57014")
	case <-time.After(20 * time.Second):
		t.Fatal("the canceled read did not end")
	}
	next("a cancel")
	p.awaitHolds(t, 0, "after the timed-out and canceled reads")
}
