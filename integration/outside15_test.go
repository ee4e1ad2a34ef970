package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Session 15's attacks from outside, and the known gaps of session 14.
// Each test here failed on the code before its fix (4d0ab04), or is
// skipped as a known bug.

// TestOutside15TempTablePlans: a temporary table that shadows a managed
// one is read by its own session's timestamped reads (AS OF, mz_now(), a
// read-only transaction) in both protocols, and only there: another
// session reading the same texts at the same search_path reads the managed
// table (the plan cache is keyed by text and search_path, and must not
// serve one session's plan to the other), as does the temporary table's
// session once pg_temp comes after the managed table's schema or the
// temporary table is dropped (with a text that does not say it is
// temporary).
func TestOutside15TempTablePlans(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{})
	ctx, role, p := st.ctx, st.role, st.proxies[0]
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, "CREATE TABLE shade (v text)", "INSERT INTO shade VALUES ('managed')", "GRANT SELECT ON shade TO "+role)
	withTemp := connectTo(t, ctx, p.URL(role, st.db))
	without := connectTo(t, ctx, p.URL(role, st.db))
	mustExec(t, ctx, withTemp, "CREATE TEMPORARY TABLE shade (v text)", "INSERT INTO shade VALUES ('temp')")
	var now int64
	if err := owner.QueryRow(ctx, "SELECT mz_now()::text::int8").Scan(&now); err != nil {
		t.Fatal(err)
	}
	reads := []string{fmt.Sprintf("SELECT v FROM shade AS OF AT LEAST %d", now), "SELECT v FROM shade WHERE mz_now() > 0"}
	check := func(c *pgx.Conn, who, want string) {
		t.Helper()
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
			for _, sql := range reads {
				var v string
				if err := c.QueryRow(ctx, sql, mode).Scan(&v); err != nil || v != want {
					t.Errorf("%s, %v: %s: %q (%v), want %q", who, mode, sql, v, err, want)
				}
			}
		}
	}
	for range 2 {
		check(withTemp, "the temporary table's session", "temp")
		check(without, "another session", "managed")
	}
	// A read-only transaction: its plain reads are PostgreSQL's, its
	// timestamped ones must agree with them.
	for _, c := range []struct {
		conn *pgx.Conn
		want string
	}{{withTemp, "temp"}, {without, "managed"}} {
		mustExec(t, ctx, c.conn, "BEGIN")
		for _, sql := range []string{"SELECT v FROM shade", reads[1]} {
			var v string
			if err := c.conn.QueryRow(ctx, sql, pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != c.want {
				t.Errorf("in a read-only transaction: %s: %q (%v), want %q", sql, v, err, c.want)
			}
		}
		mustExec(t, ctx, c.conn, "COMMIT")
	}
	mustExec(t, ctx, withTemp, "SET search_path = public, pg_temp")
	check(withTemp, "pg_temp last", "managed")
	mustExec(t, ctx, withTemp, "RESET search_path")
	check(withTemp, "pg_temp first again", "temp")
	mustExec(t, ctx, withTemp, "DROP TABLE shade")
	check(withTemp, "the temporary table dropped", "managed")
	p.mustAlive(t, ctx)
}

// TestOutside15StrayStartup: bytes that cannot begin a message of a
// session (a second StartupMessage or an SSLRequest mid-session, whose
// first byte is 0; a Sync or Execute whose length is beyond what
// PostgreSQL accepts for its type) end the session at once with FATAL
// 08P01, as PostgreSQL does, with mzproxy's default message limit. mzproxy
// used to take their length words at their word and wait for the rest of
// a "message" that never comes, holding the session and its backend.
// Other sessions go on.
func TestOutside15StrayStartup(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	other := p.connect(t, ctx)
	tests := []struct {
		name string
		send []byte
	}{
		{"second StartupMessage", startupBytes()},
		{"SSLRequest", be32(8, 80877103)},
		{"GSSENCRequest", be32(8, 80877104)},
		{"Sync of 1 MB", []byte{'S', 0, 0x10, 0, 0}},
		{"Execute of 64 kB", []byte{'E', 0, 1, 0, 0}},
		{"Sync after a Parse", func() []byte {
			b, _ := (&pgproto3.Parse{Query: "SELECT 1"}).Encode(nil)
			return append(b, 'S', 0, 0x10, 0, 0)
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := p.dialRaw(t)
			c.startup()
			c.write(tt.send)
			c.expectFatal("08P01")
		})
	}
	t.Cleanup(func() {
		var n int
		if err := other.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
			t.Errorf("another session after the stray messages: %v", err)
		}
		p.mustAlive(t, ctx)
	})
}

// TestOutside15AsOfParamUnknownType: a Parse that declares a type that does
// not exist for the AS OF parameter gets PostgreSQL's error for a
// parameter of that type that a statement uses (XX000, its catalog
// lookup's message), as the same Parse of SELECT $1 gets directly, and the
// session goes on. mzproxy took the value as text.
func TestOutside15AsOfParamUnknownType(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{})
	ctx := st.ctx
	owner := connectTo(t, ctx, st.url(0, "postgres"))
	mustExec(t, ctx, owner, "CREATE TABLE typed (v int)", "INSERT INTO typed VALUES (1)", "GRANT SELECT ON typed TO "+st.role)
	c := connectTo(t, ctx, st.url(0, st.role))
	direct := connectTo(t, ctx, directURL(st.role, st.db))
	_, want := direct.PgConn().Prepare(ctx, "", "SELECT $1", []uint32{999999})
	_, err := c.PgConn().Prepare(ctx, "", "SELECT v FROM typed AS OF $1", []uint32{999999})
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("Parse of AS OF $1 declared with type OID 999999: %v; want PostgreSQL's %v", err, want)
	}
	var now int64
	if err := c.QueryRow(ctx, "SELECT mz_now()::text::int8").Scan(&now); err != nil {
		t.Fatalf("the session after the refused Parse: %v", err)
	}
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM typed AS OF $1", now).Scan(&v); err != nil || v != 1 {
		t.Errorf("AS OF $1 bound as bigint: %d, %v", v, err)
	}
	st.proxies[0].mustAlive(t, ctx)
}

// TestOutside15TimestampedReadMaxParams: a timestamped read with 65535
// parameters, the most a Parse holds, is refused (54000) and the session
// goes on: mzproxy binds the read's timestamp as one more parameter, and
// its Parse of 65536 used to fail to encode, which ended the session
// (08006). The same read of the present runs, as in PostgreSQL.
func TestOutside15TimestampedReadMaxParams(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t)
	c := p.connect(t, ctx)
	const n = 65535
	var in strings.Builder
	args := make([]any, n)
	for i := range n {
		if i > 0 {
			in.WriteByte(',')
		}
		fmt.Fprintf(&in, "$%d::int", i+1)
		args[i] = i
	}
	read := "SELECT count(*) FROM generate_series(1, 10) g WHERE g IN (" + in.String() + ")"
	var got int
	if err := c.QueryRow(ctx, read, args...).Scan(&got); err != nil || got != 10 {
		t.Fatalf("a read of the present with %d parameters: %d, %v", n, got, err)
	}
	err := c.QueryRow(ctx, read+" AND mz_now() > 0", args...).Scan(&got)
	wantCode(t, err, "54000")
	if err := c.QueryRow(ctx, "SELECT count(*) FROM generate_series(1, 10) WHERE mz_now() > 0").Scan(&got); err != nil || got != 10 {
		t.Errorf("the session after the refused read: %d, %v", got, err)
	}
	p.mustAlive(t, ctx)
}

// TestOutside15ClientEncoding: a session in client_encoding LATIN1 whose
// statement text is not UTF-8 (an é is one byte) gets 0A000 for what
// mzproxy must parse (DDL, writes, timestamped reads), and its plain reads
// and its ASCII statements run. mzproxy's parser failed on such a text
// and forwarded it unplanned: CREATE TABLE made a table mzproxy did not
// manage (no history, no AS OF), an INSERT into a managed table failed
// with MZ002, and a read with mz_now() with 42883.
func TestOutside15ClientEncoding(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true})
	ctx, p := st.ctx, st.proxies[0]
	c := p.dialRaw(t)
	start, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": st.db, "client_encoding": "LATIN1"}}).Encode(nil)
	c.write(start)
	query := func(sql string) (code string, rows []string) {
		t.Helper()
		q, _ := (&pgproto3.Query{String: sql}).Encode(nil)
		c.write(q)
		for {
			switch m := c.receive().(type) {
			case *pgproto3.ErrorResponse:
				code = m.Code
			case *pgproto3.DataRow:
				rows = append(rows, string(m.Values[0]))
			case *pgproto3.ReadyForQuery:
				return code, rows
			}
		}
	}
	for {
		if _, ok := c.receive().(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	for _, tt := range []struct{ sql, code, row string }{
		{"CREATE TABLE latin (v text)", "", ""},
		{"INSERT INTO latin VALUES ('cafe')", "", ""},
		{"SELECT v || 'caf\xe9' FROM latin", "", "cafecaf\xe9"},
		{"CREATE TABLE latin_default (v text DEFAULT 'caf\xe9')", "0A000", ""},
		{"INSERT INTO latin VALUES ('caf\xe9')", "0A000", ""},
		{"SELECT v FROM latin WHERE v <> 'caf\xe9' AND mz_now() > 0", "0A000", ""},
		{"SELECT count(*)::text FROM latin WHERE mz_now() > 0", "", "1"},
		{"SELECT count(*)::text FROM pg_class WHERE relname = 'latin_default'", "", "0"},
	} {
		code, rows := query(tt.sql)
		if code != tt.code || tt.row != "" && (len(rows) != 1 || rows[0] != tt.row) {
			t.Errorf("%q: error %q, rows %q; want error %q, row %q", tt.sql, code, rows, tt.code, tt.row)
		}
	}
	p.mustAlive(t, ctx)
}
