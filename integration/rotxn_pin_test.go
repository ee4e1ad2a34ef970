package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// A read-only transaction's pin (proxy/txn.go, storage pin_trim.sql): when
// no write slot was taken since pin_peek, which rides in front of its
// BEGIN, the transaction reads at the oracle's P without the writers'
// gate; otherwise it is begun anew and pinned with the gate.

// rotxnBegin begins a transaction block through the proxy: a simple Query,
// or the extended protocol with BEGIN prepared earlier (Bind, Describe,
// Execute, Sync, as pgbench -M prepared and drivers with a statement cache
// send it).
func rotxnBegin(t *testing.T, ctx context.Context, conn *pgx.Conn, mode pgx.QueryExecMode) {
	t.Helper()
	if mode == pgx.QueryExecModeSimpleProtocol {
		if _, err := execSimple(ctx, conn, "BEGIN"); err != nil {
			t.Fatalf("BEGIN: %v", err)
		}
		return
	}
	if err := conn.PgConn().ExecPrepared(ctx, "rotxn_begin", nil, nil, nil).Read().Err; err != nil {
		t.Fatalf("BEGIN (prepared): %v", err)
	}
}

// rotxnRead reads the row and mz_now() in the transaction.
func rotxnRead(t *testing.T, ctx context.Context, conn *pgx.Conn, mode pgx.QueryExecMode, table string) (v int, ts uint64) {
	t.Helper()
	var now string
	if err := conn.QueryRow(ctx, "SELECT v, mz_now()::text FROM "+table+" WHERE id = 1", mode).Scan(&v, &now); err != nil {
		t.Fatalf("read in the transaction: %v", err)
	}
	ts, err := strconv.ParseUint(now, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v, ts
}

// TestReadOnlyTxnPinWithoutGate: with the writers' gate held by another
// session (as a stalled pin or a queue of writers would hold it), a
// read-only transaction through mzproxy still pins, reads and commits, in
// both protocols; the backend is never asked to lock the gate for it.
func TestReadOnlyTxnPinWithoutGate(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	tap := startBackendTap(t)
	p := startProxy(t, "--backend", tap.url())
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE rp (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO rp VALUES (1, 7)")
	if _, err := conn.PgConn().Prepare(ctx, "rotxn_begin", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement}
	for _, mode := range modes {
		// The first transaction learns the session's defaults.
		rotxnBegin(t, ctx, conn, mode)
		rotxnRead(t, ctx, conn, mode, "rp")
		mustExec(t, ctx, conn, "COMMIT")
	}

	gate := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, gate, "BEGIN", "LOCK TABLE mzproxy.gate IN EXCLUSIVE MODE")
	// Before, the pin waited for the gate: the statement timeout ends that.
	mustExec(t, ctx, conn, "SET statement_timeout = '5s'")
	if _, err := execSimple(ctx, conn, "SELECT 'rotxn-start'"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		rotxnBegin(t, ctx, conn, mode)
		if v, _ := rotxnRead(t, ctx, conn, mode, "rp"); v != 7 {
			t.Fatalf("%v: read %d, want 7", mode, v)
		}
		mustExec(t, ctx, conn, "COMMIT")
	}
	if _, err := execSimple(ctx, conn, "SELECT 'rotxn-end'"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, gate, "ROLLBACK")
	for _, e := range tap.between("rotxn-start", "rotxn-end") {
		if strings.Contains(e, "mzproxy.gate") || strings.Contains(e, "pin_held") {
			t.Errorf("a read-only transaction took the gate: the backend was sent %q", e)
		}
	}
}

// TestReadOnlyTxnPinAfterWrite: a write acknowledged after a read-only
// transaction's BEGIN, before its first read (the gate-less pin's check
// fails: a slot was taken since pin_peek), is seen by that read; and its
// timestamp is at or after a read of the present that finished before it
// (real-time order), in both protocols.
func TestReadOnlyTxnPinAfterWrite(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	reader := connectTo(t, ctx, p.URL("postgres", db))
	writer := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, writer, "CREATE TABLE rw (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO rw VALUES (1, 0)")
	if _, err := reader.PgConn().Prepare(ctx, "rotxn_begin", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	presentTS := func() uint64 {
		var now string
		if err := writer.QueryRow(ctx, "SELECT mz_now()::text", pgx.QueryExecModeSimpleProtocol).Scan(&now); err != nil {
			t.Fatal(err)
		}
		ts, _ := strconv.ParseUint(now, 10, 64)
		return ts
	}
	want := 0
	for round := 0; round < 3; round++ {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			// No write since the last pin: the next BEGIN's peek succeeds.
			presentTS()
			rotxnBegin(t, ctx, reader, mode)
			mustExec(t, ctx, writer, "UPDATE rw SET v = v + 1 WHERE id = 1")
			want++
			before := presentTS()
			v, ts := rotxnRead(t, ctx, reader, mode, "rw")
			if v != want || ts < before {
				t.Errorf("%v round %d: read %d at %d; want %d, at or after %d (a read that finished before)", mode, round, v, ts, want, before)
			}
			if v2, ts2 := rotxnRead(t, ctx, reader, mode, "rw"); v2 != v || ts2 != ts {
				t.Errorf("%v: a second read in the transaction: %d at %d, the first %d at %d", mode, v2, ts2, v, ts)
			}
			mustExec(t, ctx, reader, "COMMIT")

			// Without a write in between, the gate-less pin's timestamp
			// is also at or after the reads that finished before.
			rotxnBegin(t, ctx, reader, mode)
			before = presentTS()
			if v, ts := rotxnRead(t, ctx, reader, mode, "rw"); v != want || ts < before {
				t.Errorf("%v round %d, no write: read %d at %d; want %d, at or after %d", mode, round, v, ts, want, before)
			}
			mustExec(t, ctx, reader, "COMMIT")
		}
	}

	// The pin's prepared statements, deallocated by the client, are
	// prepared again: the next transaction does not fail for it.
	for _, base := range []string{"mzproxy_pin_peek", "mzproxy_pin_check", "mzproxy_pin_raise"} {
		mustExec(t, ctx, reader, "DEALLOCATE "+ownStatementName(t, ctx, reader, base))
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		rotxnBegin(t, ctx, reader, mode)
		if v, _ := rotxnRead(t, ctx, reader, mode, "rw"); v != want {
			t.Errorf("%v after DEALLOCATE: read %d, want %d", mode, v, want)
		}
		mustExec(t, ctx, reader, "COMMIT")
	}
}

// TestReadOnlyTxnShape (issue 15): what a read-only transaction (BEGIN,
// two point reads with new literals, COMMIT) costs once the session knows
// its defaults, in both protocols. The backend parses nothing for it (a
// tap between mzproxy and PostgreSQL sees no Parse: the pin's statements,
// the raise to REPEATABLE READ among them, are prepared once per
// session), mzproxy plans no statement of it anew (its plan cache misses
// a few times at most, not once per read), and the backend's requests
// (Sync or Query) per transaction are four, as directly: BEGIN, the two
// reads and COMMIT. No pin_peek rides with BEGIN (it would add a Sync and
// an implicit transaction): the session's last pins counted the same
// writes, and the last one's count stands in for it (proxy/txn.go,
// settledWrites). The pin ends with a Flush. No portal is closed: the
// raise and the guard run in the unnamed portal, which the read replaces.
// Its round trips (mzproxy's writes to the backend, each sent once the
// last was answered) are four, as many as directly, in both protocols: the
// pin rides with the first read.
func TestReadOnlyTxnShape(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	tap := startBackendTap(t)
	p := startProxy(t, "--backend", tap.url(), "--metrics-listen", "127.0.0.1:0")
	addr := p.metricsAddr(t)
	awaitReady(t, addr)
	misses := func() float64 {
		_, m := get(t, addr, "/metrics")
		return metricValue(t, m, "mzproxy_plan_cache_misses_total")
	}
	conn := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, conn, "CREATE TABLE rs (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO rs SELECT g, g * 10 FROM generate_series(1, 100) g")
	if _, err := conn.PgConn().Prepare(ctx, "rotxn_begin", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	const read = "SELECT v FROM rs WHERE id = $1"
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement}
	txn := func(mode pgx.QueryExecMode, id int) {
		t.Helper()
		rotxnBegin(t, ctx, conn, mode)
		for _, k := range []int{id, id + 1} {
			var v int
			if err := conn.QueryRow(ctx, read, mode, k).Scan(&v); err != nil || v != k*10 {
				t.Fatalf("%v: read %d: %d, %v; want %d", mode, k, v, err, k*10)
			}
		}
		mustExec(t, ctx, conn, "COMMIT")
	}
	// The first transactions learn the defaults and prepare what the
	// session prepares once (the BEGIN the event loop sends with a first
	// read, once the session's pins agree).
	for _, mode := range modes {
		txn(mode, 1)
		txn(mode, 2)
		txn(mode, 3)
	}

	const n = 10
	for _, mode := range modes {
		before := misses()
		// Marks of the mode's own: between finds a mark's first use.
		start, end := fmt.Sprintf("shape-start-%d", mode), fmt.Sprintf("shape-end-%d", mode)
		if _, err := execSimple(ctx, conn, "SELECT '"+start+"'"); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			txn(mode, 10+i*3)
		}
		if _, err := execSimple(ctx, conn, "SELECT '"+end+"'"); err != nil {
			t.Fatal(err)
		}
		window := tap.between(start, end)
		var requests, writes int
		for _, e := range window {
			switch {
			case strings.HasPrefix(e, "P "):
				t.Errorf("%v: the backend was sent a Parse in a read-only transaction: %q", mode, e)
			case strings.HasPrefix(e, "C "):
				t.Errorf("%v: the backend was sent a Close in a read-only transaction: %q", mode, e)
			case e == "S" || strings.HasPrefix(e, "Q "):
				requests++
			case e == "W":
				writes++
			}
		}
		// The window's last write is the Query of shape-end.
		roundTrips := writes - 1
		t.Logf("%v: %.1f backend requests (Sync or Query), %.1f round trips per read-only transaction",
			mode, float64(requests)/n, float64(roundTrips)/n)
		if requests > 3*n {
			t.Errorf("%v: %d backend requests for %d read-only transactions, want at most 3 each", mode, requests, n)
		}
		// One fewer than directly (BEGIN, two reads, COMMIT): the pin
		// rides with the first read, and so does the BEGIN, which the
		// event loop answers itself (loop_txn.go, replyBegin).
		if roundTrips > 3*n {
			t.Errorf("%v: %d backend round trips for %d read-only transactions, want at most 3 each", mode, roundTrips, n)
		}
		if d := misses() - before; d >= n/2 {
			t.Errorf("%v: %v plan cache misses for %d read-only transactions (%d reads), want a few", mode, d, n, 2*n)
		}
	}
}

// TestReadOnlyTxnPinWithFirstRead: the pin that rides in front of a
// transaction's first read (proxy/pin_read.go) lets the read run only in
// the snapshot the proxy expected. A write acknowledged between BEGIN and
// the read, or a search_path changed where the proxy cannot see it (a
// function that runs SET), makes the pin's guard refuse before the read
// runs: the transaction is pinned anew and the read runs once, sees the
// write, resolves its names in the backend's search_path and chooses its
// timedomain there.
func TestReadOnlyTxnPinWithFirstRead(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	reader := connectTo(t, ctx, p.URL("postgres", db))
	writer := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, writer, "CREATE SCHEMA s1", "CREATE SCHEMA s2",
		"CREATE TABLE s1.sp (v text)", "INSERT INTO s1.sp VALUES ('s1')",
		"CREATE TABLE s2.sp (v text)", "INSERT INTO s2.sp VALUES ('s2')",
		"CREATE SEQUENCE public.sq",
		// Its call names no setting: the proxy cannot tell what it changes.
		`CREATE FUNCTION public.quietly_s2() RETURNS void LANGUAGE plpgsql
		 AS $$BEGIN SET search_path = s2, public; END$$`)
	mustExec(t, ctx, reader, "SET search_path = s1, public")
	settle := func() {
		t.Helper()
		// A read of the present: the next BEGIN's peek answers.
		if _, err := execSimple(ctx, reader, "SELECT mz_now()"); err != nil {
			t.Fatal(err)
		}
	}
	readIn := func(sql string) (string, error) {
		var v string
		err := reader.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&v)
		return v, err
	}
	// The first transactions learn the defaults and the search_path.
	for i := 0; i < 2; i++ {
		settle()
		mustExec(t, ctx, reader, "BEGIN")
		if v, err := readIn("SELECT v FROM sp"); err != nil || v != "s1" {
			t.Fatalf("read %q, %v; want s1", v, err)
		}
		mustExec(t, ctx, reader, "COMMIT")
	}

	// A write since the peek: the read that would have taken the
	// sequence's next value twice takes it once, in both protocols (the
	// statement prepared before, so that its Bind is the first read).
	const nextRead = "SELECT nextval('public.sq')::text || ' ' || (SELECT v FROM sp)"
	if _, err := reader.Prepare(ctx, "next_read", nextRead); err != nil {
		t.Fatal(err)
	}
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		settle()
		mustExec(t, ctx, reader, "BEGIN")
		mustExec(t, ctx, writer, fmt.Sprintf("UPDATE s1.sp SET v = 's1 %d'", i))
		var v string
		var err error
		if mode == pgx.QueryExecModeSimpleProtocol {
			err = reader.QueryRow(ctx, nextRead, mode).Scan(&v)
		} else {
			err = reader.QueryRow(ctx, "next_read").Scan(&v)
		}
		if want := fmt.Sprintf("%d s1 %d", i+1, i); err != nil || v != want {
			t.Errorf("%v: first read after a write since BEGIN: %q, %v; want %q", mode, v, err, want)
		}
		mustExec(t, ctx, reader, "COMMIT")
		var last int
		if err := writer.QueryRow(ctx, "SELECT last_value FROM public.sq").Scan(&last); err != nil || last != i+1 {
			t.Errorf("%v: the sequence after %d reads: %d, %v (a read ran twice)", mode, i+1, last, err)
		}
	}

	// The search_path changed unseen: names resolve, and the timedomain
	// is chosen, in the backend's.
	// (After settle: its own read of the present would learn the new
	// search_path.)
	settle()
	if _, err := execSimple(ctx, reader, "SELECT public.quietly_s2()"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, reader, "BEGIN")
	if v, err := readIn("SELECT v FROM sp"); err != nil || v != "s2" {
		t.Errorf("read after the unseen SET: %q, %v; want s2", v, err)
	}
	if v, err := readIn("SELECT v FROM s2.sp"); err != nil || v != "s2" {
		t.Errorf("read of s2.sp in the transaction: %q, %v; want s2 (the timedomain is s2's)", v, err)
	}
	_, err := readIn("SELECT v FROM s1.sp")
	wantCode(t, err, "25000")
	mustExec(t, ctx, reader, "ROLLBACK")
}

// TestReadOnlyTxnPinPortals: the pin that rides in front of a read-only
// transaction's first read runs in the unnamed portal when the read
// replaces it (a Bind of the unnamed portal, or a simple Query), and in
// portals of its own, closed, when the read binds a named portal (a named
// portal is not replaced). Either way the read answers, and pg_cursors in
// the transaction lists what it lists directly: no portal of mzproxy's.
func TestReadOnlyTxnPinPortals(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	proxied := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, proxied, "CREATE TABLE pc (id int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO pc SELECT g, g * 10 FROM generate_series(1, 10) g")
	direct := connectTo(t, ctx, directURL("postgres", db))
	const cursors = "SELECT coalesce(string_agg(name || ': ' || statement, ', ' ORDER BY name), 'none') FROM pg_cursors"
	// run is a read-only transaction whose first read binds portal; it
	// returns what the read and pg_cursors answered.
	run := func(conn *pgx.Conn, begin pgx.QueryExecMode, portal string) string {
		t.Helper()
		rotxnBegin(t, ctx, conn, begin)
		pc := conn.PgConn()
		pc.Frontend().SendBind(&pgproto3.Bind{DestinationPortal: portal, PreparedStatement: "pc_read",
			Parameters: [][]byte{[]byte("3")}})
		pc.Frontend().SendExecute(&pgproto3.Execute{Portal: portal})
		pc.Frontend().SendSync(&pgproto3.Sync{})
		if err := pc.Frontend().Flush(); err != nil {
			t.Fatal(err)
		}
		var answer []string
		for {
			m, err := pc.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case *pgproto3.DataRow:
				answer = append(answer, "row "+string(m.Values[0]))
			case *pgproto3.ErrorResponse:
				answer = append(answer, "error "+m.Code+" "+m.Message)
			}
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
		var listed string
		if err := conn.QueryRow(ctx, cursors, pgx.QueryExecModeSimpleProtocol).Scan(&listed); err != nil {
			t.Fatal(err)
		}
		mustExec(t, ctx, conn, "COMMIT")
		return strings.Join(answer, "; ") + " | " + listed
	}
	for _, conn := range []*pgx.Conn{proxied, direct} {
		if _, err := conn.PgConn().Prepare(ctx, "rotxn_begin", "BEGIN", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.PgConn().Prepare(ctx, "pc_read", "SELECT v FROM pc WHERE id = $1", nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, begin := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for _, portal := range []string{"", "pc_portal"} {
			want := run(direct, begin, portal)
			// The first transactions learn the defaults; the third pins
			// with its first read.
			for i := 0; i < 3; i++ {
				if got := run(proxied, begin, portal); got != want {
					t.Errorf("%v BEGIN, read in portal %q, transaction %d: through mzproxy %q, directly %q",
						begin, portal, i, got, want)
				}
			}
		}
	}
}

// TestReadOnlyTxnReusedPeek: once a session's pins count the same writes
// twice in a row, its read-only transactions go without pin_peek (the tap
// sees no Sync of it in front of BEGIN) and check the last pin's count
// instead (proxy/txn.go, settledWrites). A write acknowledged since,
// through another proxy, fails that check: the next transaction, in
// either protocol, reads the write, at a timestamp at or after the one a
// read of the present got after it (linearizable across proxies), and the
// one after it asks pin_peek again. A session that sets
// restrict_nonsystem_relation_kind asks it too (the peek tells it that the
// session restricts views), and its transactions still read, also when
// the first read is parsed in the transaction with a search_path changed
// since the pin's statements were planned (PostgreSQL plans them again,
// in a session that cannot read mzproxy's views).
func TestReadOnlyTxnReusedPeek(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	tap := startBackendTap(t)
	p := startProxy(t, "--backend", tap.url())
	other := startProxy(t)
	reader := connectTo(t, ctx, p.URL("postgres", db))
	writer := connectTo(t, ctx, other.URL("postgres", db))
	mustExec(t, ctx, writer, "CREATE TABLE rp (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO rp VALUES (1, 0)")
	if _, err := reader.PgConn().Prepare(ctx, "rotxn_begin", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	want := 0
	// txn runs a read-only transaction and returns what the tap saw of it
	// and the timestamp it read at.
	txn := func(mode pgx.QueryExecMode, mark string) (window []string, ts uint64) {
		t.Helper()
		if _, err := execSimple(ctx, reader, "SELECT 'start-"+mark+"'"); err != nil {
			t.Fatal(err)
		}
		rotxnBegin(t, ctx, reader, mode)
		// A plain read first: the pin rides with it.
		var first int
		if err := reader.QueryRow(ctx, "SELECT v FROM rp WHERE id = $1", mode, 1).Scan(&first); err != nil || first != want {
			t.Errorf("%s (%v): first read %d, %v; want %d", mark, mode, first, err, want)
		}
		v, ts := rotxnRead(t, ctx, reader, mode, "rp")
		if v != want {
			t.Errorf("%s (%v): read %d, want %d", mark, mode, v, want)
		}
		mustExec(t, ctx, reader, "COMMIT")
		if _, err := execSimple(ctx, reader, "SELECT 'end-"+mark+"'"); err != nil {
			t.Fatal(err)
		}
		return tap.between("start-"+mark, "end-"+mark), ts
	}
	peeked := func(window []string) bool {
		// The peek is the only Sync a simple-protocol transaction sends.
		return slices.Contains(window, "S")
	}
	for i := range 3 {
		txn(pgx.QueryExecModeSimpleProtocol, fmt.Sprintf("warm-%d", i))
	}
	for round, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		// Steady: no peek (a simple-protocol window shows it).
		if w, _ := txn(pgx.QueryExecModeSimpleProtocol, fmt.Sprintf("steady-%d", round)); peeked(w) {
			t.Errorf("round %d: a transaction after two pins that agree sent pin_peek: %q", round, w)
		}
		var seen uint64
		if err := writer.QueryRow(ctx, "UPDATE rp SET v = v + 1 WHERE id = 1 RETURNING v", pgx.QueryExecModeSimpleProtocol).Scan(&want); err != nil {
			t.Fatal(err)
		}
		var now string
		if err := writer.QueryRow(ctx, "SELECT mz_now()::text", pgx.QueryExecModeSimpleProtocol).Scan(&now); err != nil {
			t.Fatal(err)
		}
		seen, _ = strconv.ParseUint(now, 10, 64)
		if _, ts := txn(mode, fmt.Sprintf("after-write-%d", round)); ts < seen {
			t.Errorf("round %d (%v): the transaction after a write read at %d, before %d, a read of the present after the write", round, mode, ts, seen)
		}
		if w, _ := txn(pgx.QueryExecModeSimpleProtocol, fmt.Sprintf("again-%d", round)); !peeked(w) {
			t.Errorf("round %d: the transaction after a failed check sent no pin_peek: %q", round, w)
		}
		txn(pgx.QueryExecModeSimpleProtocol, fmt.Sprintf("settle-%d", round))
	}

	mustExec(t, ctx, reader, "SET restrict_nonsystem_relation_kind = 'view'")
	if w, _ := txn(pgx.QueryExecModeSimpleProtocol, "restricted"); !peeked(w) {
		t.Errorf("the transaction after SET restrict_nonsystem_relation_kind sent no pin_peek: %q", w)
	}
	mustExec(t, ctx, reader, "SET search_path = public")
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		for j := range 3 {
			txn(mode, fmt.Sprintf("restricted-%d-%d", i, j))
		}
	}
}

// TestReadOnlyTxnSteadyGuardAfterDDL: the guard of a session whose pins
// agree does not read the catalog revision (it is the last pin's while
// the count of writes is: proxy/pin_read.go, pinGuardSQL). A DDL through
// another proxy takes a write slot, so the next transaction's guard
// refuses, and the transaction is planned with the catalog the DDL made:
// a managed table created in another schema is outside the timedomain its
// first read chose (25000), in either protocol, not an unknown relation
// read unheld.
func TestReadOnlyTxnSteadyGuardAfterDDL(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	other := startProxy(t)
	reader := connectTo(t, ctx, p.URL("postgres", db))
	writer := connectTo(t, ctx, other.URL("postgres", db))
	mustExec(t, ctx, writer, "CREATE TABLE rp (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO rp VALUES (1, 7)")
	if _, err := reader.PgConn().Prepare(ctx, "rotxn_begin", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	// txn reads rp, then table in the same transaction; it returns the
	// second read's error.
	txn := func(mode pgx.QueryExecMode, table string) error {
		t.Helper()
		rotxnBegin(t, ctx, reader, mode)
		defer mustExec(t, ctx, reader, "ROLLBACK")
		var v int
		if err := reader.QueryRow(ctx, "SELECT v FROM rp WHERE id = $1", mode, 1).Scan(&v); err != nil || v != 7 {
			t.Fatalf("%v: first read %d, %v; want 7", mode, v, err)
		}
		_, err := reader.Exec(ctx, "SELECT count(*) FROM "+table, mode)
		return err
	}
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		for range 3 {
			if err := txn(mode, "rp"); err != nil {
				t.Fatal(err)
			}
		}
		table := fmt.Sprintf("ddl%d.t", i)
		mustExec(t, ctx, writer, fmt.Sprintf("CREATE SCHEMA ddl%d", i), "CREATE TABLE "+table+" (x int)")
		if err := txn(mode, table); sqlState(err) != "25000" {
			t.Errorf("%v: a read of %s, created through another proxy since the session's pins agreed, outside the timedomain: %v, want 25000",
				mode, table, err)
		}
	}
}
