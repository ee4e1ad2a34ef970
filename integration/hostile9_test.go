package integration

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Session 9's surfaces played by an attacker from the outside: the
// statements the proxy prepares for repeated simple reads
// (proxy/read_statements.go) and their names (own_names.go), prepared
// timestamped reads whose guard rides in front of the client's Bind and
// whose batch is kept and replayed on refusal (bound_read.go), raw I/O of
// the sessions the event loop does not drive (frontend/evloop/rawio.go),
// and a block's state in deferred_slots (storage slot_state.sql).

// wire is a bare protocol connection, to the proxy or to PostgreSQL
// itself, for exchanges no driver sends and answers compared message by
// message.
type wire struct {
	t   *testing.T
	nc  net.Conn
	fe  *pgproto3.Frontend
	key pgproto3.BackendKeyData // for a CancelRequest
}

// dialWire connects to the proxy at addr, or to the test PostgreSQL when
// addr is "", as user to database, with application_name app, and reads
// up to the first ReadyForQuery.
func dialWire(t *testing.T, addr, user, database, app string) *wire {
	t.Helper()
	var nc net.Conn
	var err error
	if addr == "" {
		nc, err = net.DialTimeout("unix", filepath.Join(env.pg.SocketDir(), fmt.Sprintf(".s.PGSQL.%d", env.pg.Port())), 10*time.Second)
	} else {
		nc, err = net.DialTimeout("tcp", addr, 10*time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(90 * time.Second))
	w := &wire{t: t, nc: nc, fe: pgproto3.NewFrontend(nc, nc)}
	w.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": user, "database": database, "application_name": app}})
	for {
		switch m := w.receive().(type) {
		case *pgproto3.ErrorResponse:
			t.Fatalf("startup as %s: %s %s", user, m.Code, m.Message)
		case *pgproto3.BackendKeyData:
			w.key = *m
		case *pgproto3.ReadyForQuery:
			return w
		}
	}
}

func (w *wire) send(msgs ...pgproto3.FrontendMessage) {
	w.t.Helper()
	var buf []byte
	for _, m := range msgs {
		var err error
		if buf, err = m.Encode(buf); err != nil {
			w.t.Fatal(err)
		}
	}
	if _, err := w.nc.Write(buf); err != nil {
		w.t.Fatalf("writing: %v", err)
	}
}

func (w *wire) receive() pgproto3.BackendMessage {
	w.t.Helper()
	m, err := w.fe.Receive()
	if err != nil {
		w.t.Fatalf("reading: %v", err)
	}
	return m
}

// answers reads the answers up to the syncs-th ReadyForQuery, spelled one
// message a line: what a client can tell apart (notices and parameter
// changes left out, an error by its SQLSTATE and message).
func (w *wire) answers(syncs int) []string {
	w.t.Helper()
	var out []string
	for syncs > 0 {
		switch m := w.receive().(type) {
		case *pgproto3.ParseComplete:
			out = append(out, "ParseComplete")
		case *pgproto3.BindComplete:
			out = append(out, "BindComplete")
		case *pgproto3.CloseComplete:
			out = append(out, "CloseComplete")
		case *pgproto3.NoData:
			out = append(out, "NoData")
		case *pgproto3.ParameterDescription:
			out = append(out, fmt.Sprintf("ParameterDescription %v", m.ParameterOIDs))
		case *pgproto3.RowDescription:
			var cols []string
			for _, f := range m.Fields {
				cols = append(cols, fmt.Sprintf("%s:%d:%d", f.Name, f.DataTypeOID, f.Format))
			}
			out = append(out, "RowDescription "+strings.Join(cols, ","))
		case *pgproto3.DataRow:
			var vals []string
			for _, v := range m.Values {
				vals = append(vals, string(v))
			}
			out = append(out, "DataRow "+strings.Join(vals, "|"))
		case *pgproto3.CommandComplete:
			out = append(out, "CommandComplete "+string(m.CommandTag))
		case *pgproto3.EmptyQueryResponse:
			out = append(out, "EmptyQueryResponse")
		case *pgproto3.PortalSuspended:
			out = append(out, "PortalSuspended")
		case *pgproto3.ErrorResponse:
			out = append(out, fmt.Sprintf("Error %s %s %s", m.Severity, m.Code, m.Message))
		case *pgproto3.ReadyForQuery:
			out = append(out, fmt.Sprintf("ReadyForQuery %c", m.TxStatus))
			syncs--
		}
	}
	return out
}

// directText is sql as PostgreSQL runs it: a read of the present without
// mzproxy's AS OF mz_now().
func directText(sql string, direct bool) string {
	if direct {
		return strings.ReplaceAll(sql, " AS OF mz_now()", "")
	}
	return sql
}

// exchange is one step of a wire script: messages sent in one write, and
// how many ReadyForQuery end their answers. before runs first (another
// session's DDL, say).
type exchange struct {
	msgs   func(direct bool) []pgproto3.FrontendMessage
	syncs  int
	before func()
}

// sameOnWire runs script on a new wire session to PostgreSQL and then to
// each proxy, and fails the test unless every proxy's answers are
// PostgreSQL's, message by message.
func sameOnWire(t *testing.T, user, database string, script []exchange, proxies ...*proxyProc) {
	t.Helper()
	run := func(addr string) string {
		w := dialWire(t, addr, user, database, "hostile9")
		defer w.nc.Close()
		var out []string
		for i, x := range script {
			if x.before != nil {
				x.before()
			}
			w.send(x.msgs(addr == "")...)
			out = append(out, fmt.Sprintf("-- step %d", i))
			out = append(out, w.answers(x.syncs)...)
		}
		return strings.Join(out, "\n")
	}
	want := run("")
	for _, p := range proxies {
		if got := run(p.addr); got != want {
			t.Errorf("directly:\n%s\nthrough the proxy:\n%s", want, got)
		}
	}
}

// pointTable creates g (k, v) with rows 1..n, v = 'v<k>', through the proxy
// url as postgres, readable by role.
func pointTable(t *testing.T, ctx context.Context, url, role string, n int) {
	t.Helper()
	owner := connectTo(t, ctx, url)
	mustExec(t, ctx, owner, "CREATE TABLE g (k int PRIMARY KEY, v text)",
		fmt.Sprintf("INSERT INTO g SELECT i, 'v' || i FROM generate_series(1, %d) i", n),
		"GRANT SELECT ON g TO "+role)
	owner.Close(ctx)
}

// TestHostile9ReadStatementNames: an ordinary role reads the name of the
// statement the proxy prepared for its repeated read from
// pg_prepared_statements and drops it every way it can: DEALLOCATE, a
// protocol Close, DEALLOCATE ALL, DISCARD ALL, and a function's DEALLOCATE
// the proxy cannot see. The next reads of the same text answer right
// (the statement is prepared again), never "prepared statement does not
// exist"; with and without the event loop.
func TestHostile9ReadStatementNames(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 20, proxies: [][]string{{"--event-loop=false"}, nil}})
	ctx, role, db, p, loop := st.ctx, st.role, st.db, st.proxies[0], st.proxies[1]
	admin := connectTo(t, ctx, directURL("postgres", db))
	mustExec(t, ctx, admin, `CREATE FUNCTION drop_statement(name text) RETURNS void LANGUAGE plpgsql
		AS $$ BEGIN EXECUTE 'DEALLOCATE ' || quote_ident(name); END $$`)
	drops := map[string]func(conn *pgx.Conn, name string) error{
		"DEALLOCATE": func(conn *pgx.Conn, name string) error {
			_, err := conn.Exec(ctx, "DEALLOCATE "+name, pgx.QueryExecModeSimpleProtocol)
			return err
		},
		"protocol Close": func(conn *pgx.Conn, name string) error { return conn.PgConn().Deallocate(ctx, name) },
		"DEALLOCATE ALL": func(conn *pgx.Conn, _ string) error { return execFn(conn, "DEALLOCATE ALL")(ctx) },
		"DISCARD ALL":    func(conn *pgx.Conn, _ string) error { return execFn(conn, "DISCARD ALL")(ctx) },
		"a function's DEALLOCATE": func(conn *pgx.Conn, name string) error {
			return execFn(conn, "SELECT drop_statement('"+name+"')")(ctx)
		},
		"a function's DEALLOCATE in a block": func(conn *pgx.Conn, name string) error {
			return execFn(conn, "BEGIN; SELECT drop_statement('"+name+"'); COMMIT")(ctx)
		},
		// The pin's and the guards' too.
		"protocol Close of every statement of the proxy's": func(conn *pgx.Conn, _ string) error {
			rows, _ := conn.Query(ctx, "SELECT name FROM pg_prepared_statements WHERE name ~ '_[0-9a-f]{12}$'", pgx.QueryExecModeSimpleProtocol)
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			for _, n := range names {
				if err == nil {
					err = conn.PgConn().Deallocate(ctx, n)
				}
			}
			return err
		},
	}
	read := func(conn *pgx.Conn, k int) error {
		var v string
		// (mz_now(): a timestamp hole, so a statement of the proxy's.)
		sql := fmt.Sprintf("SELECT v, mz_now() > 0 FROM g WHERE k = %d", k)
		if err := conn.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&v, new(bool)); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		if v != fmt.Sprintf("v%d", k) {
			return fmt.Errorf("%s: %q", sql, v)
		}
		// A read-only transaction: the pin's statements.
		res, err := conn.PgConn().Exec(ctx, fmt.Sprintf("BEGIN; SELECT v FROM g WHERE k = %d; COMMIT", k)).ReadAll()
		if err != nil || len(res) != 3 || len(res[1].Rows) != 1 || string(res[1].Rows[0][0]) != v {
			return fmt.Errorf("a read-only transaction reading k = %d: %v", k, err)
		}
		return nil
	}
	for _, proxy := range []*proxyProc{p, loop} {
		for what, drop := range drops {
			conn := connectTo(t, ctx, proxy.URL(role, db))
			for k := 1; k <= 3; k++ {
				if err := read(conn, k); err != nil {
					t.Fatal(err)
				}
			}
			name := ownStatementName(t, ctx, conn, "mzproxy_read_0")
			if err := drop(conn, name); err != nil {
				t.Fatalf("%s of %s: %v", what, name, err)
			}
			for k := 4; k <= 8; k++ {
				if err := read(conn, k); err != nil {
					t.Errorf("after %s of the proxy's %s: %v", what, name, err)
				}
			}
			conn.Close(ctx)
		}
		proxy.mustAlive(t, ctx)
	}
}

// TestHostile9ReadStatementCollision: a client that read the proxy's
// suffix from pg_prepared_statements prepares statements of its own under
// the names the proxy gives its next read statements, and then uses new
// read shapes. The reads answer right (the proxy closes a statement of
// that name before it prepares its own); the client's statement is gone,
// as README's Security section says of a client that names them.
func TestHostile9ReadStatementCollision(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 10})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	conn := connectTo(t, ctx, p.URL(role, db))
	read := func(shape, k int) {
		t.Helper()
		var v string
		var s int
		sql := fmt.Sprintf("SELECT v, %d, mz_now() > 0 FROM g WHERE k = %d", shape, k)
		if err := conn.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&v, &s, new(bool)); err != nil || v != fmt.Sprintf("v%d", k) || s != shape {
			t.Fatalf("%s: %q %d, %v", sql, v, s, err)
		}
	}
	for k := 1; k <= 3; k++ {
		read(0, k)
	}
	first := ownStatementName(t, ctx, conn, "mzproxy_read_0")
	for n := 1; n <= 3; n++ {
		next := strings.Replace(first, "_read_0_", fmt.Sprintf("_read_%d_", n), 1)
		mustExec(t, ctx, conn, fmt.Sprintf("PREPARE %s(int) AS SELECT 'mine', $1, false", next))
		for k := 1; k <= 4; k++ {
			read(n, k)
		}
	}
	for k := 5; k <= 7; k++ {
		read(0, k)
	}
	p.mustAlive(t, ctx)
}

// TestHostile9ReadStatementsFlood: a client makes 1000 shapes of a
// repeated read (each used twice, so each is prepared), then reads the
// first shapes again, with a DEALLOCATE ALL in the middle. Every answer is
// right, the statements on the connection never exceed the LRU's 64, and
// another session of the proxy is unaffected.
func TestHostile9ReadStatementsFlood(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 10})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	conn := connectTo(t, ctx, p.URL(role, db))
	other := connectTo(t, ctx, p.URL(role, db))
	read := func(c *pgx.Conn, shape, k int) {
		t.Helper()
		var v string
		var s int
		sql := fmt.Sprintf("SELECT v, %d AS shape, mz_now() > 0 FROM g WHERE k = %d", shape, k)
		if err := c.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&v, &s, new(bool)); err != nil || v != fmt.Sprintf("v%d", k) || s != shape {
			t.Fatalf("%s: %q %d, %v", sql, v, s, err)
		}
	}
	const shapes = 1000
	for shape := range shapes {
		read(conn, shape, 1+shape%10)
		read(conn, shape, 1+(shape+1)%10)
		if shape == shapes/2 {
			mustExec(t, ctx, conn, "DEALLOCATE ALL")
		}
		if shape%100 == 0 {
			read(other, 0, 1+shape%10)
			if n, _, _ := preparedReads(t, ctx, conn); n > readStatementsLimit {
				t.Fatalf("%d prepared reads after %d shapes, want at most %d", n, shape+1, readStatementsLimit)
			}
		}
	}
	for shape := range 100 {
		read(conn, shape, 1+(shape+5)%10)
	}
	if n, _, _ := preparedReads(t, ctx, conn); n > readStatementsLimit {
		t.Fatalf("%d prepared reads, want at most %d", n, readStatementsLimit)
	}
	p.mustAlive(t, ctx)
}

// readStatementsLimit is the proxy's LRU of prepared reads per connection.
const readStatementsLimit = 64

// prepared is a Parse of sql (a read of the present through the proxy,
// AS OF mz_now() left out directly) as name.
func prepared(name, sql string, direct bool) *pgproto3.Parse {
	return &pgproto3.Parse{Name: name, Query: directText(sql, direct)}
}

// run is the Bind, Describe and Execute of statement name with text
// parameters.
func run(name string, params ...string) []pgproto3.FrontendMessage {
	var values [][]byte
	for _, p := range params {
		values = append(values, []byte(p))
	}
	return []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: name, Parameters: values},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}}
}

// msgs joins messages and groups of them.
func msgs(parts ...any) []pgproto3.FrontendMessage {
	var out []pgproto3.FrontendMessage
	for _, p := range parts {
		switch p := p.(type) {
		case pgproto3.FrontendMessage:
			out = append(out, p)
		case []pgproto3.FrontendMessage:
			out = append(out, p...)
		}
	}
	return out
}

// TestHostile9DropBetweenParseAndBind: a client prepares a timestamped read
// and drops it (DISCARD ALL, DEALLOCATE ALL, DEALLOCATE s, a protocol
// Close) before its Bind: in another exchange, or in the same batch. The
// Bind fails as PostgreSQL's does (26000, its message), the next batch
// works, the statement can be prepared again: message for message what
// PostgreSQL answers. DISCARD ALL in the batch is the batch's first
// statement, which PostgreSQL runs there (not "within a pipeline", 25001:
// the proxy's SHOW search_path for the Parse before it is a batch of its
// own).
func TestHostile9DropBetweenParseAndBind(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 10, proxies: [][]string{{"--event-loop=false"}, nil}})
	ctx, role, db, p, loop := st.ctx, st.role, st.db, st.proxies[0], st.proxies[1]
	const read = "SELECT v FROM g WHERE k = $1 AS OF mz_now()"
	sync := &pgproto3.Sync{}
	for _, drop := range []string{"DISCARD ALL", "DEALLOCATE ALL", "DEALLOCATE s"} {
		t.Run(drop, func(t *testing.T) {
			script := []exchange{
				{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage {
					return msgs(prepared("s", read, d), run("s", "1"), sync)
				}},
				{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage { return msgs(&pgproto3.Query{String: drop}) }},
				{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage { return msgs(run("s", "2"), sync) }},
				// Dropped in the batch, between the Parse and the Bind.
				{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage {
					return msgs(prepared("s", read, d), prepared("", drop, d), run(""), run("s", "3"), sync)
				}},
				{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage {
					return msgs(prepared("s", read, d), run("s", "4"), sync)
				}},
				// A protocol Close between the Parse and the Bind.
				{syncs: 2, msgs: func(d bool) []pgproto3.FrontendMessage {
					return msgs(&pgproto3.Close{ObjectType: 'S', Name: "s"}, run("s", "5"), sync, run("s", "6"), sync)
				}},
				{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage {
					return msgs(prepared("s", read, d), &pgproto3.Close{ObjectType: 'S', Name: "s"}, prepared("s", read, d), run("s", "7"), sync)
				}},
				{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage {
					return msgs(&pgproto3.Query{String: directText("SELECT v FROM g WHERE k = 8 AS OF mz_now()", d)})
				}},
			}
			sameOnWire(t, role, db, script, p, loop)
		})
	}
	p.mustAlive(t, ctx)
	loop.mustAlive(t, ctx)
}

// TestHostile9BadBind: Binds of a prepared timestamped read that PostgreSQL
// refuses: too many or too few parameters, parameter and result format
// counts that do not match, a format code that does not exist, binary
// data of the wrong length, and a portal described that the failed Bind
// never made. Each fails as PostgreSQL's does (SQLSTATE and message: the
// proxy's timestamp parameter never shows), the batch's later messages are
// skipped to its Sync, and the session goes on.
func TestHostile9BadBind(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 10, proxies: [][]string{{"--event-loop=false"}, nil}})
	ctx, role, db, p, loop := st.ctx, st.role, st.db, st.proxies[0], st.proxies[1]
	const read = "SELECT v FROM g WHERE k = $1 AS OF mz_now()"
	binds := []*pgproto3.Bind{
		{PreparedStatement: "s", Parameters: [][]byte{[]byte("1"), []byte("2")}},
		{PreparedStatement: "s"},
		{PreparedStatement: "s", ParameterFormatCodes: []int16{0, 0, 0}, Parameters: [][]byte{[]byte("1")}},
		{PreparedStatement: "s", ParameterFormatCodes: []int16{7}, Parameters: [][]byte{[]byte("1")}},
		{PreparedStatement: "s", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{{0, 1}}},
		{PreparedStatement: "s", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{{0, 0, 0, 0, 1}}},
		{PreparedStatement: "s", ResultFormatCodes: []int16{0, 1, 0}, Parameters: [][]byte{[]byte("1")}},
		{PreparedStatement: "s", ResultFormatCodes: []int16{9}, Parameters: [][]byte{[]byte("1")}},
		{PreparedStatement: "s", Parameters: [][]byte{[]byte("x")}},
		{PreparedStatement: "s", Parameters: [][]byte{[]byte("99999999999")}},
		{PreparedStatement: "nope", Parameters: [][]byte{[]byte("1")}},
	}
	sync := &pgproto3.Sync{}
	script := []exchange{{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage {
		return msgs(prepared("s", read, d), &pgproto3.Describe{ObjectType: 'S', Name: "s"}, sync)
	}}}
	for i, b := range binds {
		script = append(script, exchange{syncs: 2, msgs: func(d bool) []pgproto3.FrontendMessage {
			return msgs(b, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, sync,
				run("s", fmt.Sprint(1+i%10)), sync)
		}})
	}
	// A Parse that declares more parameter types than its text uses: the
	// Bind supplies as many values as it declared.
	for _, oids := range [][]uint32{{23, 23}, {23, 23, 25}} {
		script = append(script, exchange{syncs: 4, msgs: func(d bool) []pgproto3.FrontendMessage {
			declared := &pgproto3.Parse{Name: "t", Query: directText(read, d), ParameterOIDs: oids}
			values := []string{"2", "5", "x"}[:len(oids)]
			return msgs(&pgproto3.Close{ObjectType: 'S', Name: "t"}, declared, &pgproto3.Describe{ObjectType: 'S', Name: "t"}, sync,
				run("t", values...), sync, run("t", "3"), sync, run("t", "4", "5", "6", "7"), sync)
		}})
	}
	sameOnWire(t, role, db, script, p, loop)
	p.mustAlive(t, ctx)
	loop.mustAlive(t, ctx)
}

// TestHostile9PipelineRefused: pipelined batches of prepared timestamped
// reads (each counting its runs in a temporary sequence) mixed with
// errors and Syncs, while another proxy changes the catalog before each
// pipeline: the guard in front of a batch's first Bind is refused, at the
// first batch or one in the middle, and the kept batch is sent again.
// Message for message the answers are PostgreSQL's: each read ran once,
// none after an error in its batch.
func TestHostile9PipelineRefused(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 10, proxies: [][]string{nil, nil}})
	ctx, role, db, p, q := st.ctx, st.role, st.db, st.proxies[0], st.proxies[1]
	other := connectTo(t, ctx, q.URL("postgres", db))
	changes := 0
	changeCatalog := func() {
		changes++
		mustExec(t, ctx, other, fmt.Sprintf("CREATE TABLE changed_%d (x int)", changes))
	}
	const read = "SELECT nextval('runs'), v FROM g WHERE k = $1 AS OF mz_now()"
	sync := &pgproto3.Sync{}
	fail := func(d bool) []pgproto3.FrontendMessage { return msgs(prepared("", "SELECT 1/0", d), run("")) }
	script := []exchange{
		{syncs: 2, msgs: func(d bool) []pgproto3.FrontendMessage {
			return msgs(&pgproto3.Query{String: "CREATE TEMPORARY SEQUENCE runs"},
				prepared("s", read, d), prepared("c", "SELECT count(*) FROM g AS OF mz_now()", d), sync)
		}},
		{syncs: 3, before: changeCatalog, msgs: func(d bool) []pgproto3.FrontendMessage {
			return msgs(run("s", "1"), fail(d), run("s", "2"), sync,
				run("c"), run("s", "3"), sync,
				prepared("", read, d), run("", "4"), sync)
		}},
		// Refused in the second batch: the first has no timestamped read.
		{syncs: 3, before: changeCatalog, msgs: func(d bool) []pgproto3.FrontendMessage {
			return msgs(fail(d), sync, run("s", "5"), run("s", "6"), sync, run("c"), fail(d), run("s", "7"), sync)
		}},
		// A Parse, a Flush and a Describe after the read, before the Sync.
		{syncs: 2, before: changeCatalog, msgs: func(d bool) []pgproto3.FrontendMessage {
			return msgs(run("s", "8"), prepared("p", "SELECT 2", d), &pgproto3.Flush{}, &pgproto3.Describe{ObjectType: 'S', Name: "s"},
				run("p"), sync, run("s", "9"), &pgproto3.Close{ObjectType: 'P'}, sync)
		}},
		// A bad Bind first, then the read in the next batch.
		{syncs: 2, before: changeCatalog, msgs: func(d bool) []pgproto3.FrontendMessage {
			return msgs(&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, sync, run("s", "10"), sync)
		}},
		{syncs: 1, msgs: func(d bool) []pgproto3.FrontendMessage {
			return msgs(&pgproto3.Query{String: "SELECT currval('runs')"})
		}},
	}
	sameOnWire(t, role, db, script, p)
	p.mustAlive(t, ctx)
}

// TestHostile9CutDuringReplay: a client closes its socket while the proxy
// replays its refused batch (or before it sent the batch's end, or during
// the read). The proxy lives on, the client's backend session ends, no
// read hold is left, and another session of the proxy reads right.
func TestHostile9CutDuringReplay(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 10, proxies: [][]string{{"--metrics-listen", "127.0.0.1:0"}, nil}})
	ctx, role, db, p, q := st.ctx, st.role, st.db, st.proxies[0], st.proxies[1]
	other := connectTo(t, ctx, q.URL("postgres", db))
	admin := connectTo(t, ctx, directURL("postgres", db))
	bystander := connectTo(t, ctx, p.URL(role, db))
	const read = "SELECT v, pg_sleep($2) FROM g WHERE k = $1 AS OF mz_now()"
	bind := func(k, sleep string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte(k), []byte(sleep)}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}}
	}
	cuts := map[string][]pgproto3.FrontendMessage{
		"after the Sync":        msgs(bind("1", "0"), &pgproto3.Sync{}),
		"before the Sync":       msgs(bind("2", "0")),
		"after a Flush":         msgs(bind("3", "0"), &pgproto3.Flush{}),
		"during the read":       msgs(bind("4", "1"), &pgproto3.Sync{}),
		"behind a second read":  msgs(bind("5", "0"), bind("6", "0.5"), &pgproto3.Sync{}, bind("7", "0"), &pgproto3.Sync{}),
		"half of the next Bind": msgs(bind("8", "0")),
	}
	for what, batch := range cuts {
		for i := range 3 {
			app := fmt.Sprintf("cut%d", i)
			w := dialWire(t, p.addr, role, db, app)
			w.send(&pgproto3.Parse{Name: "s", Query: read}, &pgproto3.Sync{})
			w.answers(1)
			mustExec(t, ctx, other, fmt.Sprintf("CREATE TABLE IF NOT EXISTS changed_%d (x int)", i), fmt.Sprintf("DROP TABLE changed_%d", i))
			w.send(batch...)
			if what == "half of the next Bind" {
				b, _ := (&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("9"), []byte("0")}}).Encode(nil)
				_, _ = w.nc.Write(b[:len(b)/2])
			}
			if i > 0 {
				time.Sleep(time.Duration(i) * 150 * time.Millisecond)
			}
			w.nc.Close()
			eventually(t, 30*time.Second, what+": the cut session's backend ended", func() bool {
				var n int
				if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n == 0
			})
			var v string
			if err := bystander.QueryRow(ctx, "SELECT v FROM g WHERE k = $1 AS OF mz_now()", i+1).Scan(&v); err != nil || v != fmt.Sprintf("v%d", i+1) {
				t.Fatalf("%s: another session's read: %q, %v", what, v, err)
			}
		}
	}
	bystander.Close(ctx)
	p.awaitHolds(t, 0, "after the cut sessions")
	p.mustAlive(t, ctx)
}

// untilReady reads c's answers up to a ReadyForQuery, which must report
// status; it returns the first column of the rows.
func untilReady(t *testing.T, c *rawClient, status byte) []string {
	t.Helper()
	var rows []string
	for {
		switch m := c.receive().(type) {
		case *pgproto3.DataRow:
			rows = append(rows, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			t.Fatalf("error %s: %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			if m.TxStatus != status {
				t.Fatalf("status %c, want %c", m.TxStatus, status)
			}
			return rows
		}
	}
}

// TestHostile9RawIOFrames: malformed frames on sessions the event loop
// does not drive, which its goroutine serves with raw system calls (a
// transaction block that read a managed table, or one in the middle of a
// refused prepared read's replay): a truncated frame, lengths too large,
// over the limit or zero, junk after a Query. Each gets 08P01 for its own
// connection only (a cut-short frame just ends it), its backend session
// ends, and a bystander's block, with a read at the backend meanwhile,
// reads on and commits.
func TestHostile9RawIOFrames(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--event-loop", "--max-message-size", "4096")
	table := tableName(t)
	setup := p.connect(t, ctx)
	mustExec(t, ctx, setup, "CREATE TABLE "+table+" (k int PRIMARY KEY, v text)", "INSERT INTO "+table+" VALUES (1, 'one')")
	admin := connectDirect(t, ctx)
	read := "SELECT v FROM " + table + " WHERE k = 1"
	bystander := p.dialRaw(t)
	bystander.startup()
	bystander.write(queryFrame("BEGIN; " + read))
	untilReady(t, bystander, 'T')
	bystander.write(queryFrame("SELECT v || pg_sleep(2) FROM " + table))

	junk := []byte{'y', 0, 0, 0, 4}
	tests := []struct {
		name string
		send []byte
		code string // "" when the proxy just closes
	}{
		{name: "truncated header", send: queryFrame(read)[:3]},
		{name: "truncated Query", send: queryFrame(read)[:9]},
		{name: "huge length", send: []byte{'Q', 0x7f, 0xff, 0xff, 0xff, 'S'}, code: "08P01"},
		{name: "negative length", send: []byte{'Q', 0x80, 0, 0, 0, 'S'}, code: "08P01"},
		{name: "length over the limit", send: []byte{'P', 0, 0, 0x10, 1, 0}, code: "08P01"},
		{name: "zero length", send: []byte{'B', 0, 0, 0, 0}, code: "08P01"},
		{name: "junk after a Query", send: append(queryFrame(read), junk...), code: "08P01"},
	}
	for _, tt := range tests {
		for _, replaying := range []bool{false, true} {
			name := tt.name
			if replaying {
				name += " (in a replay)"
			}
			t.Run(name, func(t *testing.T) {
				c := p.dialRaw(t)
				c.startup()
				var pid int
				c.write(queryFrame("SELECT pg_backend_pid()"))
				fmt.Sscan(untilReady(t, c, 'I')[0], &pid)
				if replaying {
					// Another session's DDL makes the guard refuse; the
					// frame follows the batch at once.
					c.write(mustEncodeAll(t, &pgproto3.Parse{Name: "s", Query: read + " AS OF mz_now()"}, &pgproto3.Sync{}))
					untilReady(t, c, 'I')
					mustExec(t, ctx, setup, "CREATE TABLE "+table+"_x (x int)", "DROP TABLE "+table+"_x")
					c.write(append(mustEncodeAll(t, &pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Sync{}), tt.send...))
				} else {
					c.write(queryFrame("BEGIN; " + read))
					if rows := untilReady(t, c, 'T'); len(rows) != 1 || rows[0] != "one" {
						t.Fatalf("the block's read: %q", rows)
					}
					c.write(tt.send)
				}
				if tt.code == "" {
					_ = c.nc.(interface{ CloseWrite() error }).CloseWrite()
					if replaying {
						if rows := untilReady(t, c, 'I'); len(rows) != 1 || rows[0] != "one" {
							t.Fatalf("the replayed read: %q", rows)
						}
					}
				}
				for tt.code != "" {
					m := c.receive()
					if er, ok := m.(*pgproto3.ErrorResponse); ok {
						if er.Code != tt.code {
							t.Fatalf("got %s %s, want %s", er.Code, er.Message, tt.code)
						}
						break
					}
				}
				c.expectClosed()
				eventually(t, 30*time.Second, "the session's backend ended", func() bool {
					var n int
					if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n == 0
				})
			})
		}
	}
	if rows := untilReady(t, bystander, 'T'); len(rows) != 1 || rows[0] != "one" {
		t.Fatalf("the bystander's read: %q", rows)
	}
	bystander.write(queryFrame("COMMIT"))
	untilReady(t, bystander, 'I')
	p.mustAlive(t, ctx)
}

// mustEncodeAll encodes messages into one buffer.
func mustEncodeAll(t *testing.T, msgs ...pgproto3.FrontendMessage) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// slotAttacks are what an ordinary role runs against the deferred slots
// of other roles' blocks (deferred_slots rows, storage slot_state.sql) and
// the functions that keep them: each is refused.
var slotAttacks = []string{
	"SELECT * FROM mzproxy.deferred_slots",
	"INSERT INTO mzproxy.deferred_slots (xid, inc) VALUES (pg_current_xact_id(), 1)",
	"UPDATE mzproxy.deferred_slots SET read_writes = NULL, fixed_t = 0",
	"DELETE FROM mzproxy.deferred_slots",
	"TRUNCATE mzproxy.deferred_slots",
	"LOCK TABLE mzproxy.deferred_slots",
	"ALTER TABLE mzproxy.deferred_slots DISABLE TRIGGER ALL",
	"DROP TABLE mzproxy.deferred_slots",
	"SELECT mzproxy.fix_write(true)",
	"SELECT mzproxy.fix_write(false)",
	"SELECT mzproxy.fix_at_commit()",
	"SELECT mzproxy.stamp_ts('acc'::regclass)",
	"SELECT mzproxy.stamp_ts(0)",
	"SELECT mzproxy.check_reads(0, 0)",
	"SELECT mzproxy.mark_written(NULL)",
	"SELECT mzproxy.set_slot(0, 0)",
	"CREATE OR REPLACE FUNCTION mzproxy.write_slot(OUT t bigint, OUT e bigint) LANGUAGE sql AS $$ SELECT 0::bigint, 0::bigint $$",
}

// slotSettings are set inside a block, after its read and again after its
// write: mzproxy's transaction-local settings, forged, reset or emptied,
// and its functions any role may call, with forged arguments.
var slotSettings = []string{
	"SET LOCAL mzproxy.write_ts = ''",
	"RESET ALL",
	"SET LOCAL mzproxy.read_writes = '0 0'",
	"SET LOCAL mzproxy.read_writes = ''",
	"SET LOCAL mzproxy.read_ts = '0'",
	"SET LOCAL mzproxy.in_ddl = 'on'",
	"SET LOCAL mzproxy.touched = ''",
	"SET LOCAL mzproxy.expected_upper = '0'",
	"SELECT pg_catalog.set_config('mzproxy.write_ts', '-1 1 forged', true)",
	"SELECT mzproxy.open_write_deferred(0)",
	"SELECT mzproxy.open_write_deferred(-1, 9223372036854775807)",
	"SELECT mzproxy.begin_write_occ(0, 0)",
	"SELECT mzproxy.commit_write_tx(0)",
}

// TestHostile9SlotForgery: an ordinary role runs slotAttacks, directly and
// through the proxy, each in a block left open while another role's write
// skew runs: none succeeds and the write skew still fails its second
// COMMIT. Then in its own table's write skews, the role's second block
// runs each of slotSettings after its read and after its write: the two
// blocks never both commit, the sum is what the committed one left, and
// lone read-then-write transactions still commit.
func TestHostile9SlotForgery(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{create: true})
	ctx, role, db, p := st.ctx, st.role, st.db, st.proxies[0]
	admin := connectTo(t, ctx, directURL("postgres", db))
	owner := connectTo(t, ctx, p.URL("postgres", db))
	accTable(t, ctx, owner, admin)
	victimA, victimB := connectTo(t, ctx, p.URL("postgres", db)), connectTo(t, ctx, p.URL("postgres", db))
	for _, via := range []struct{ name, url string }{{"direct", directURL(role, db)}, {"proxy", p.URL(role, db)}} {
		attacker := connectTo(t, ctx, via.url)
		for _, sql := range slotAttacks {
			mustExec(t, ctx, attacker, "BEGIN")
			if _, err := attacker.Exec(ctx, sql); sqlState(err) == "" || sqlState(err) == "XX000" {
				t.Errorf("%s: %s: %v, want it refused", via.name, sql, err)
			}
			writeSkew(t, ctx, victimA, victimB, via.name+": "+sql)
			mustExec(t, ctx, attacker, "ROLLBACK")
		}
	}

	// The role's own table, written through the proxy.
	a, b := connectTo(t, ctx, p.URL(role, db)), connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, a, "CREATE TABLE mine (id int PRIMARY KEY, bal int)", "INSERT INTO mine VALUES (1, 100), (2, 100)")
	sum := func() int {
		var s int
		if err := a.QueryRow(ctx, "SELECT sum(bal) FROM mine").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, forged := range slotSettings {
		before := sum()
		var s int
		mustExec(t, ctx, a, "BEGIN")
		if err := a.QueryRow(ctx, "SELECT sum(bal) FROM mine").Scan(&s); err != nil {
			t.Fatal(err)
		}
		// b's block, forged after its read and after its write: the two
		// must not both commit (b's write in progress fails a's COMMIT, or
		// a's commit fails b's).
		_, errB := b.PgConn().Exec(ctx, "BEGIN; SELECT sum(bal) FROM mine; "+forged+"; UPDATE mine SET bal = bal - 10 WHERE id = 2; "+forged).ReadAll()
		mustExec(t, ctx, a, "UPDATE mine SET bal = bal - 10 WHERE id = 1")
		_, errA := a.Exec(ctx, "COMMIT")
		tag, errCommit := b.Exec(ctx, "COMMIT")
		commits := 0
		if errA == nil {
			commits++
		}
		if errB == nil && errCommit == nil && tag.String() == "COMMIT" {
			commits++
		}
		if commits == 2 {
			t.Errorf("%s: both blocks of a write skew committed", forged)
		}
		if after := sum(); after != before-10*commits {
			t.Errorf("%s: sum %d after %d commits, want %d (errors %v, %v, %v)", forged, after, commits, before-10*commits, errA, errB, errCommit)
		}
		if err := pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT sum(bal) FROM mine").Scan(&s); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE mine SET bal = bal + 10 WHERE id = 2")
			return err
		}); err != nil {
			t.Errorf("%s: a lone read-then-write transaction after it: %v", forged, err)
		}
	}
	p.mustAlive(t, ctx)
}

// TestHostile9PgxBatchRefused: pgx batches (one Sync for the batch) of
// prepared timestamped reads, in each of pgx's modes that prepare or
// describe, with an error among them, while another proxy changes the
// catalog before each batch: each answers as PostgreSQL's own (the
// reads before the error, then the error), and the session goes on.
func TestHostile9PgxBatchRefused(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{rows: 10, proxies: [][]string{nil, nil}})
	ctx, role, db, p, q := st.ctx, st.role, st.db, st.proxies[0], st.proxies[1]
	other := connectTo(t, ctx, q.URL("postgres", db))
	changes := 0
	batchAnswers := func(conn *pgx.Conn, direct bool, withError bool) string {
		changes++
		mustExec(t, ctx, other, fmt.Sprintf("CREATE TABLE batch_%d (x int)", changes))
		b := &pgx.Batch{}
		var out []string
		for k := 1; k <= 4; k++ {
			sql := "SELECT v FROM g WHERE k = $1 AS OF mz_now()"
			if withError && k == 3 {
				sql = "SELECT (1 / ($1 - 3))::text"
			}
			b.Queue(directText(sql, direct), k).QueryRow(func(row pgx.Row) error {
				var v string
				err := row.Scan(&v)
				out = append(out, fmt.Sprintf("%s %s", v, sqlState(err)))
				return nil
			})
		}
		err := conn.SendBatch(ctx, b).Close()
		return strings.Join(out, ",") + " / " + sqlState(err)
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		var answers [2][]string
		for i, url := range []string{directURL(role, db), p.URL(role, db)} {
			conn := connectMode(t, ctx, url, mode)
			for _, withError := range []bool{false, true, false, true} {
				answers[i] = append(answers[i], batchAnswers(conn, i == 0, withError))
			}
		}
		if d, px := strings.Join(answers[0], "\n"), strings.Join(answers[1], "\n"); d != px {
			t.Errorf("mode %v: directly:\n%s\nthrough the proxy:\n%s", mode, d, px)
		}
	}
	p.mustAlive(t, ctx)
}
