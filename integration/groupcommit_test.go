package integration

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestGroupCommit: with --group-commit, 32 sessions insert concurrently;
// every acknowledged row is there, statements were appended in batches of
// more than one (by the metrics and by the history: rows of one batch
// share their mz_from), a PRIMARY KEY violation fails only its own
// statement, and a session's search_path decides which table it writes.
func TestGroupCommit(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--group-commit", "--metrics-listen", "127.0.0.1:0")
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup,
		"CREATE TABLE g (id int PRIMARY KEY, who int NOT NULL)",
		"INSERT INTO g VALUES (0, -1)",
		"CREATE SCHEMA other",
		"CREATE TABLE other.g (id int PRIMARY KEY, who int NOT NULL)")
	const sessions, each = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	dupFailed := make(chan error, 1)
	for c := 0; c < sessions; c++ {
		conn := connectTo(t, ctx, p.URL("postgres", db))
		if c == 1 {
			if _, err := execSimple(ctx, conn, "SET search_path = other, public"); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if c == 0 && i == each/2 {
					// Among the others' inserts: id 0 exists.
					_, err := execSimple(ctx, conn, "INSERT INTO g VALUES (0, 0)")
					dupFailed <- err
				}
				id := 1 + c*each + i
				tag, err := execSimple(ctx, conn, fmt.Sprintf("INSERT INTO g VALUES (%d, %d)", id, c))
				if err != nil {
					errs <- fmt.Errorf("session %d insert %d: %w", c, id, err)
					return
				}
				if tag.String() != "INSERT 0 1" {
					errs <- fmt.Errorf("session %d: tag %q", c, tag)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var pe *pgconn.PgError
	if err := <-dupFailed; !errors.As(err, &pe) || pe.Code != "23505" || pe.ConstraintName != "g_pkey" {
		t.Errorf("duplicate key insert: %v, want 23505 on g_pkey", err)
	}
	var public, other int
	if err := setup.QueryRow(ctx, "SELECT (SELECT count(*) FROM public.g), (SELECT count(*) FROM other.g)").Scan(&public, &other); err != nil {
		t.Fatal(err)
	}
	if public != 1+(sessions-1)*each || other != each {
		t.Fatalf("public.g has %d rows, other.g %d; want %d and %d", public, other, 1+(sessions-1)*each, each)
	}
	var who int
	if err := setup.QueryRow(ctx, "SELECT who FROM g WHERE id = 0").Scan(&who); err != nil || who != -1 {
		t.Fatalf("row 0: who = %d (%v), the failed insert must not have changed it", who, err)
	}
	var versions, stamps int
	q := fmt.Sprintf("SELECT count(*), count(DISTINCT mz_from) FROM %s", historyOf(t, ctx, setup, "g"))
	if err := setup.QueryRow(ctx, q).Scan(&versions, &stamps); err != nil {
		t.Fatal(err)
	}
	if versions != public || stamps >= versions {
		t.Errorf("history of g: %d versions at %d timestamps; want %d versions sharing timestamps", versions, stamps, public)
	}
	// Failing members among succeeding ones, in the same batches: each
	// gets its own outcome; an error's position is in its own statement.
	// A backend transaction holds the commit slot (as a pessimistic writer
	// does) meanwhile, so the statements queue up and the committer
	// appends them together once it is released.
	release := holdCommitSlot(t, ctx, db)
	go func() {
		time.Sleep(time.Second)
		release()
	}()
	const bad = "INSERT INTO g VALUES ('x', 1)"
	wantPos := int32(strings.Index(bad, "'x'") + 1)
	errs2 := make(chan error, sessions*5)
	for c := 0; c < sessions; c++ {
		conn := connectTo(t, ctx, p.URL("postgres", db))
		if c%8 == 3 {
			// Settings differing within a batch, next to failing members.
			if _, err := execSimple(ctx, conn, "SET search_path = other, public"); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				var pe *pgconn.PgError
				switch c % 4 {
				case 0:
					_, err := execSimple(ctx, conn, "INSERT INTO g VALUES (0, 0)")
					if !errors.As(err, &pe) || pe.Code != "23505" {
						errs2 <- fmt.Errorf("duplicate: %v, want 23505", err)
					}
				case 1:
					_, err := execSimple(ctx, conn, bad)
					if !errors.As(err, &pe) || pe.Code != "22P02" || pe.Position != wantPos {
						errs2 <- fmt.Errorf("bad integer: %v (position %v), want 22P02 at %d", err, pe, wantPos)
					}
				default:
					id := 10000 + c*5 + i
					if _, err := execSimple(ctx, conn, fmt.Sprintf("INSERT INTO g VALUES (%d, %d) -- trailing comment", id, c)); err != nil {
						errs2 <- fmt.Errorf("insert %d: %w", id, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs2)
	for err := range errs2 {
		t.Error(err)
	}
	var late, lateOther int
	if err := setup.QueryRow(ctx, "SELECT (SELECT count(*) FROM public.g WHERE id >= 10000), (SELECT count(*) FROM other.g WHERE id >= 10000)").Scan(&late, &lateOther); err != nil ||
		late != sessions*3/8*5 || lateOther != sessions/8*5 {
		t.Errorf("rows inserted among failing statements: %d in public.g, %d in other.g (%v), want %d and %d", late, lateOther, err, sessions*3/8*5, sessions/8*5)
	}

	var together int
	q = fmt.Sprintf("SELECT max(n) FROM (SELECT count(*) n FROM %s WHERE id >= 10000 GROUP BY mz_from) b", historyOf(t, ctx, setup, "g"))
	if err := setup.QueryRow(ctx, q).Scan(&together); err != nil || together < 4 {
		t.Errorf("at most %d (%v) of the inserts among failing statements committed together, want at least 4", together, err)
	}

	_, m := get(t, p.metricsAddr(t), "/metrics")
	batches := metricValue(t, m, "mzproxy_occ_group_batches_total")
	batched := metricValue(t, m, "mzproxy_occ_group_batched_total")
	if batches < 1 || batched < sessions*each+sessions*5 || batched <= batches {
		t.Errorf("group commit: %v statements in %v batches, want more statements than batches (and at least %d)", batched, batches, sessions*each+sessions*5)
	}
	t.Logf("%v statements in %v batches (mean %.1f); %d rows at %d timestamps; %d committed together among failing statements",
		batched, batches, batched/batches, versions, stamps, together)

	// The settings a session's inserts run with are read once and kept
	// while it sends nothing else: any other statement may change them.
	conn := connectTo(t, ctx, p.URL("postgres", db))
	for i, step := range []struct{ before, want string }{
		{"", "public"},
		{"", "public"},
		{"SET search_path = other, public", "other"},
		{"", "other"},
		{"RESET search_path", "public"},
		{"SELECT set_config('search_path', 'other', false)", "other"},
		{"SELECT set_config('search_path', 'public', false)", "public"},
	} {
		if step.before != "" {
			if _, err := execSimple(ctx, conn, step.before); err != nil {
				t.Fatalf("%s: %v", step.before, err)
			}
		}
		id := 20000 + i
		if _, err := execSimple(ctx, conn, fmt.Sprintf("INSERT INTO g VALUES (%d, 0)", id)); err != nil {
			t.Fatalf("insert %d: %v", id, err)
		}
		var in string
		q := fmt.Sprintf("SELECT CASE WHEN EXISTS (SELECT FROM public.g WHERE id = %d) THEN 'public' ELSE 'other' END", id)
		if err := setup.QueryRow(ctx, q).Scan(&in); err != nil || in != step.want {
			t.Fatalf("after %q, the insert went to %s.g (%v), want %s.g", step.before, in, err, step.want)
		}
	}
}

// TestGroupCommitReadWrite: with --group-commit, read-then-write
// statements of concurrent sessions run one after the other in shared
// batches, through two proxies whose batches conflict: 8 sessions
// incrementing one counter lose no update, and concurrent DELETEs of five
// identical rows delete each row once.
func TestGroupCommitReadWrite(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p1 := startProxy(t, "--group-commit", "--metrics-listen", "127.0.0.1:0")
	p2 := startProxy(t, "--group-commit", "--metrics-listen", "127.0.0.1:0")
	setup := connectTo(t, ctx, p1.URL("postgres", db))
	mustExec(t, ctx, setup,
		"CREATE TABLE counter (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO counter VALUES (1, 0)",
		"CREATE TABLE dup (x int)",
		"INSERT INTO dup VALUES (1), (1), (1), (1), (1), (2)")
	const clients, each = 8, 50
	conns := make([]*pgx.Conn, clients)
	for c := range conns {
		conns[c] = connectTo(t, ctx, []*proxyProc{p1, p2}[c%2].URL("postgres", db))
	}
	exhausted, versions, distinct := incrementCounter(t, ctx, conns, each)
	// Increments committed together leave one version per timestamp.
	if distinct != versions || versions > clients*each {
		t.Fatalf("history of counter: %d versions at %d timestamps, want one per timestamp and fewer than %d", versions, distinct, clients*each+1)
	}
	var conflicts float64
	for _, p := range []*proxyProc{p1, p2} {
		_, m := get(t, p.metricsAddr(t), "/metrics")
		conflicts += metricValue(t, m, "mzproxy_occ_conflicts_total")
	}
	t.Logf("%d increments in %d versions; %v conflicts between the proxies' batches; %d statements exhausted their retries",
		clients*each, versions-1, conflicts, exhausted)

	// Five DELETEs of x = 1, together: the row counts add up to five.
	var wg sync.WaitGroup
	counts := make(chan int64, 5)
	for c := 0; c < 5; c++ {
		p := []*proxyProc{p1, p2}[c%2]
		conn := connectTo(t, ctx, p.URL("postgres", db))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				tag, err := execSimple(ctx, conn, "DELETE FROM dup WHERE x = 1")
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "40001" {
					continue
				}
				if err != nil {
					t.Error(err)
				}
				counts <- tag.RowsAffected()
				return
			}
		}()
	}
	wg.Wait()
	close(counts)
	var deleted int64
	for n := range counts {
		deleted += n
	}
	var left, ones int
	if err := setup.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE x = 1) FROM dup").Scan(&left, &ones); err != nil {
		t.Fatal(err)
	}
	if deleted != 5 || left != 1 || ones != 0 {
		t.Fatalf("DELETEs reported %d rows; %d rows left (%d with x = 1), want 5 deleted and the x = 2 row left", deleted, left, ones)
	}
}

// TestGroupCommitStatementTimeout: a statement in a batch runs under what
// is left of its session's statement_timeout: stuck on a row lock, it
// fails alone with 57014 and writes nothing, while a statement of another
// session in the same batches commits.
func TestGroupCommitStatementTimeout(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--group-commit", "--metrics-listen", "127.0.0.1:0")
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO t VALUES (1, 0), (2, 0)")
	locker := connectTo(t, ctx, directURL("postgres", db))
	if _, err := execSimple(ctx, locker, "BEGIN; SELECT FROM t WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	a := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := execSimple(ctx, a, "SET statement_timeout = '500ms'"); err != nil {
		t.Fatal(err)
	}
	b := connectTo(t, ctx, p.URL("postgres", db))
	failed := make(chan error, 1)
	go func() {
		_, err := execSimple(ctx, a, "UPDATE t SET v = 1 WHERE id = 1")
		failed <- err
	}()
	if _, err := execSimple(ctx, b, "UPDATE t SET v = 2 WHERE id = 2"); err != nil {
		t.Fatalf("the other session's update: %v", err)
	}
	select {
	case err := <-failed:
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "57014" {
			t.Fatalf("update stuck on a lock under statement_timeout: %v, want 57014", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the update stuck on a lock outlived its statement_timeout")
	}
	if _, err := execSimple(ctx, locker, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	var v1, v2 int
	if err := setup.QueryRow(ctx, "SELECT (SELECT v FROM t WHERE id = 1), (SELECT v FROM t WHERE id = 2)").Scan(&v1, &v2); err != nil || v1 != 0 || v2 != 2 {
		t.Fatalf("rows: id 1 v = %d, id 2 v = %d (%v); want 0 (timed out) and 2", v1, v2, err)
	}
	_, m := get(t, p.metricsAddr(t), "/metrics")
	if n := metricValue(t, m, "mzproxy_occ_group_batched_total"); n < 2 {
		t.Fatalf("%v statements went through group commit, want both updates", n)
	}

	// In one batch, a statement with a timeout and after it one without:
	// the second does not inherit the first's. A transaction holding the
	// commit slot makes both queue; the second then waits 3 s for a row
	// lock, longer than what is left of the first's 2 s.
	release := holdCommitSlot(t, ctx, db)
	mustExec(t, ctx, locker, "BEGIN", "SELECT FROM t WHERE id = 1 FOR UPDATE")
	if _, err := execSimple(ctx, a, "SET statement_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := execSimple(ctx, a, "UPDATE t SET v = 3 WHERE id = 2")
		first <- err
	}()
	time.Sleep(200 * time.Millisecond)
	second := make(chan error, 1)
	go func() {
		_, err := execSimple(ctx, b, "UPDATE t SET v = 4 WHERE id = 1")
		second <- err
	}()
	time.Sleep(200 * time.Millisecond)
	release()
	time.Sleep(3 * time.Second)
	mustExec(t, ctx, locker, "COMMIT")
	if err := <-first; err != nil {
		t.Fatalf("the statement with a timeout: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the statement without a timeout after it in the batch: %v", err)
	}
}

// TestGroupCommitSessionState: a write whose meaning depends on the
// session's own backend connection stays there: an insert into a table
// with a serial column (the session's currval must see it) or with a
// trigger of its own (its notice reaches the client); a plain table's
// insert is group-committed.
func TestGroupCommitSessionState(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--group-commit", "--metrics-listen", "127.0.0.1:0")
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup,
		"CREATE TABLE s (id serial, x int)",
		"CREATE TABLE tr (x int)",
		"CREATE FUNCTION tell() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE NOTICE 'inserted %', NEW.x; RETURN NEW; END$$",
		"CREATE TRIGGER tell BEFORE INSERT ON tr FOR EACH ROW EXECUTE FUNCTION tell()",
		"CREATE TABLE plain (x int)")
	cfg, err := pgx.ParseConfig(p.URL("postgres", db))
	if err != nil {
		t.Fatal(err)
	}
	notices := make(chan string, 1)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices <- n.Message }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	batched := func() float64 {
		_, m := get(t, p.metricsAddr(t), "/metrics")
		return metricValue(t, m, "mzproxy_occ_group_batched_total")
	}
	if _, err := execSimple(ctx, conn, "INSERT INTO s (x) VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	var id int
	if err := conn.QueryRow(ctx, "SELECT currval('s_id_seq')", pgx.QueryExecModeSimpleProtocol).Scan(&id); err != nil || id != 1 {
		t.Fatalf("currval after the insert: %d (%v), want 1", id, err)
	}
	if _, err := execSimple(ctx, conn, "INSERT INTO tr VALUES (5)"); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-notices:
		if n != "inserted 5" {
			t.Fatalf("notice %q", n)
		}
	default:
		t.Fatal("the trigger's notice did not reach the client")
	}
	if n := batched(); n != 0 {
		t.Fatalf("%v of the inserts were group-committed, want none", n)
	}
	if _, err := execSimple(ctx, conn, "INSERT INTO plain VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if n := batched(); n != 1 {
		t.Fatalf("%v inserts group-committed, want the plain table's", n)
	}
	// Reading the settings before that insert left the session's own
	// connection outside any transaction: a read-only transaction begins
	// fresh.
	mustExec(t, ctx, conn, "BEGIN", "SELECT count(*) FROM plain", "COMMIT")
}
