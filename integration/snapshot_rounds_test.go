package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// frontiersMarker is a piece of the proxy's frontiers query (proxy/
// database.go, frontiersSQL), by which the test finds it in
// pg_stat_activity.
const frontiersMarker = "x.upper, c.id, c.since"

// TestPreparedAsOfSharesSnapshots (issue 15): requests for the catalog
// and frontiers on many sessions at once share the proxy's round trips on
// the database's admin connection instead of queueing one each. The
// requests are the Parses of one-shot AS OF reads (Parse, Bind, Execute,
// Sync in one batch): a Parse in a batch plans with the current catalog
// (database.snapshot, the same rounds a Bind in a block or after another
// Bind of its batch reads); their Binds are sent behind the read guard,
// reading no round (TestPreparedReadGuardedBind, TestHistoryReadExtendedShape).
// The test plays a slow backend: it holds a lock on the catalog revision,
// which every frontiers read and every read guard waits for, counts the
// distinct frontiers reads that wait, and hands the lock over after each
// waiter (a guard's too, uncounted), so that what comes later waits again.
func TestPreparedAsOfSharesSnapshots(t *testing.T) {
	const clients = 12
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	setup := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{"CREATE TABLE shared (k int, v text)", "INSERT INTO shared VALUES (1, 'one')"} {
		if _, err := setup.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ts := readTS(t, ctx, setup)
	if _, err := setup.Exec(ctx, "UPDATE shared SET v = 'uno' WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	query := fmt.Sprintf("SELECT v FROM shared WHERE k = $1 AS OF %d", ts)
	conns := make([]*pgx.Conn, clients)
	for i := range conns {
		conns[i] = connectTo(t, ctx, p.URL("postgres", db))
		if v, err := readOneShot(ctx, conns[i], query); err != nil || v != "one" {
			t.Fatalf("prepared AS OF before the update: %q, %v", v, err)
		}
	}

	lockers := []*pgx.Conn{connectTo(t, ctx, directURL("postgres", db)), connectTo(t, ctx, directURL("postgres", db))}
	watcher := connectTo(t, ctx, directURL("postgres", db))
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	done := make(chan struct{})
	// The first wait is for the read that the first Bind starts.
	holder := 0
	lockCatalogRevision(t, ctx, lockers[holder])
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := readOneShot(ctx, c, query); err != nil || v != "one" {
				errs <- fmt.Errorf("prepared AS OF: %q, %v", v, err)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	waited := map[string]bool{} // pid and query_start of each frontiers read seen waiting
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		case <-time.After(20 * time.Millisecond):
		}
		if key := waitingFrontiersRead(t, ctx, watcher); key != "" && !waited[key] {
			waited[key] = true
			// Let the other Parses arrive behind it, then let it through
			// and hold up the next read.
			time.Sleep(300 * time.Millisecond)
			holder = handOverLock(t, ctx, watcher, lockers, holder)
		} else if key == "" && lockWaiters(t, ctx, watcher, lockers) > 0 {
			// Read guards, behind Parses that have their catalog.
			holder = handOverLock(t, ctx, watcher, lockers, holder)
		}
	}
	unlock(t, ctx, lockers[holder])
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(waited) == 0 || len(waited) > clients/2 {
		t.Fatalf("%d frontiers round trips for %d concurrent Parses of an AS OF read; want them shared (at most %d)",
			len(waited), clients, clients/2)
	}
	t.Logf("%d frontiers round trips for %d concurrent Parses", len(waited), clients)

	// A Parse waiting for a round ends at its statement_timeout, with
	// 57014, and its session reads again once the backend answers.
	c := conns[0]
	if _, err := c.Exec(ctx, "SET statement_timeout = '300ms'"); err != nil {
		t.Fatal(err)
	}
	lockCatalogRevision(t, ctx, lockers[0])
	_, err := readOneShot(ctx, c, query)
	unlock(t, ctx, lockers[0])
	wantCode(t, err, "57014")
	if v, err := readOneShot(ctx, c, query); err != nil || v != "one" {
		t.Fatalf("prepared AS OF after a timed out Parse: %q, %v", v, err)
	}
}

// readOneShot runs query, with $1 = 1, as one batch of the extended
// protocol (Parse of the unnamed statement, Bind, Describe, Execute, Sync)
// and returns its one row's first value.
func readOneShot(ctx context.Context, conn *pgx.Conn, query string) (string, error) {
	return firstOfOneRow(conn.PgConn().ExecParams(ctx, query, [][]byte{[]byte("1")}, nil, nil, nil).Read())
}

// readPrepared executes the connection's prepared statement name, with
// $1 = 1, and returns its one row's first value.
func readPrepared(ctx context.Context, conn *pgx.Conn, name string) (string, error) {
	return firstOfOneRow(conn.PgConn().ExecPrepared(ctx, name, [][]byte{[]byte("1")}, nil, nil).Read())
}

// firstOfOneRow is the first value of a result of one row.
func firstOfOneRow(res *pgconn.Result) (string, error) {
	if res.Err != nil {
		return "", res.Err
	}
	if len(res.Rows) != 1 {
		return "", fmt.Errorf("%d rows, want 1", len(res.Rows))
	}
	return string(res.Rows[0][0]), nil
}

// lockCatalogRevision makes every frontiers read wait until unlock.
func lockCatalogRevision(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	for _, sql := range []string{"BEGIN", "LOCK TABLE mzproxy.catalog_revision IN ACCESS EXCLUSIVE MODE"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// handOverLock lets the waiting frontiers read through and holds up the
// next one: the other locker's request is queued before the holder's lock
// is released, so it is granted right after the read that waited (and
// before any read that comes later, which queues behind it). It returns
// the new holder.
func handOverLock(t *testing.T, ctx context.Context, watcher *pgx.Conn, lockers []*pgx.Conn, holder int) int {
	t.Helper()
	next := lockers[1-holder]
	if _, err := next.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() {
		_, err := next.Exec(ctx, "LOCK TABLE mzproxy.catalog_revision IN ACCESS EXCLUSIVE MODE")
		locked <- err
	}()
	eventually(t, 30*time.Second, "the next lock is queued", func() bool {
		var waiting bool
		err := watcher.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`,
			int(next.PgConn().PID())).Scan(&waiting)
		return err == nil && waiting
	})
	unlock(t, ctx, lockers[holder])
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	return 1 - holder
}

func unlock(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
}

// waitingFrontiersRead names a frontiers read waiting for a lock (its
// backend's pid and the query's start), or is "" when none is.
func waitingFrontiersRead(t *testing.T, ctx context.Context, conn *pgx.Conn) string {
	t.Helper()
	var key string
	err := conn.QueryRow(ctx, `SELECT coalesce(max(pid::text || '@' || query_start::text), '') FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, frontiersMarker).Scan(&key)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return key
}

// lockWaiters counts the backends, other than the lockers, waiting for a
// lock on the catalog revision.
func lockWaiters(t *testing.T, ctx context.Context, conn *pgx.Conn, lockers []*pgx.Conn) int {
	t.Helper()
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks l
		WHERE NOT l.granted AND l.relation = 'mzproxy.catalog_revision'::regclass AND l.pid <> ALL ($1)`,
		[]int32{int32(lockers[0].PgConn().PID()), int32(lockers[1].PgConn().PID())}).Scan(&n)
	if err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	return n
}
