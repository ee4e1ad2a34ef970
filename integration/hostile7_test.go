package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Session 7's surfaces played by an attacker from the outside: literal
// splicing of cached timestamped-read plans (planner/literals.go), the
// lock-free pin's functions (proxy/storage/pin_trim.sql, pin_fast.sql),
// and the event loop's frame reader (frontend/evloop).

// hostileLiteral is a string literal as a client spells it, and the value
// it stands for under standard_conforming_strings on (scsOn) and off.
type hostileLiteral struct {
	sql           string
	scsOn, scsOff string
}

// hostileLiterals are literals whose spelling the splicer must reproduce
// as the deparser would, and none of which may become SQL.
func hostileLiterals() []hostileLiteral {
	long := strings.Repeat("L'\\", 3000) + "end"
	lits := []hostileLiteral{
		{`'plain'`, "plain", "plain"},
		{`'it''s'`, "it's", "it's"},
		{`'x'' OR true --'`, "x' OR true --", "x' OR true --"},
		{`'*/ OR true /*'`, "*/ OR true /*", "*/ OR true /*"},
		{`'/* c */'`, "/* c */", "/* c */"},
		{`'-- c'`, "-- c", "-- c"},
		{`E'esc\'aped'`, "esc'aped", "esc'aped"},
		{`E'tab\there\\'`, "tab\there\\", "tab\there\\"},
		{`E'\\'' OR true --'`, `\' OR true --`, `\' OR true --`},
		{`$$dollar ' " \ $$`, `dollar ' " \ `, `dollar ' " \ `},
		{`$q$ $$ ' $q$`, ` $$ ' `, ` $$ ' `},
		{`U&'\00e9t\00e9'`, "été", "(an error)"},
		{`'été € 😀'`, "été € 😀", "été € 😀"},
		// The splicer's own string marker, and a number marker as text.
		{"'\x010\x01'", "\x010\x01", "\x010\x01"},
		{"'\x011\x01'", "\x011\x01", "\x011\x01"},
		{`'2000000000'`, "2000000000", "2000000000"},
		{`'::boolean'`, "::boolean", "::boolean"},
		{"'" + strings.ReplaceAll(long, "'", "''") + "'", long, strings.ReplaceAll(long, "\\", "")},
	}
	// A backslash in a plain literal: two characters with
	// standard_conforming_strings on, an escape with it off.
	lits = append(lits,
		hostileLiteral{`'back\\slash'`, `back\\slash`, `back\slash`},
		hostileLiteral{`'a\nb'`, `a\nb`, "a\nb"},
	)
	return lits
}

// hostileNumbers are integer expressions in the same place: a format
// with one number, the number, and two others of its literal class (a
// long one is numeric) for the texts that come first.
var hostileNumbers = []struct {
	format       string
	n            int64
	warm1, warm2 int64
}{
	{"%s", 3, 5, 6}, {"-%s", 3, 5, 6}, {"- -%s", 3, 5, 6}, {"-(-%s)", 3, 5, 6}, {"- - -%s", 3, 5, 6},
	{"00%s", 7, 5, 6}, {"-%s", 0, 5, 6}, {"%s", 2000000000, 5, 6}, {"%s", 2000000001, 5, 6},
	{"-%s", 2147483648, 2147483649, 2147483650}, {"%s", 65535, 5, 6}, {"%s-1", 3, 5, 6},
	{"3 - -%s", 1, 5, 6}, {"%s", 2147483647, 5, 6}, {"%s.5", 3, 5, 6}, {"-%s.0", 3, 5, 6},
}

// TestHostile7LiteralSplicing: reads AS OF a timestamp, whose plans are
// cached by skeleton with new literals spliced into the cached rewritten
// SQL, with hostile literals, in both protocols and with
// standard_conforming_strings on and off, each text twice (the second
// hits the cache): every answer equals a fresh proxy's (each text a
// skeleton of its own there, so planned from scratch) and the history's,
// read directly with the same settings. A literal never becomes SQL.
func TestHostile7LiteralSplicing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	cached, fresh := startProxy(t), startProxy(t)
	setup := connectTo(t, ctx, cached.URL("postgres", db))
	mustExec(t, ctx, setup, "CREATE TABLE lits (k bigint PRIMARY KEY, v text) WITH (RETAIN HISTORY FOR '1h')")
	// Every value any literal stands for is a row, and a few rows whose
	// text an injected condition would add.
	values := map[string]bool{"other": true, "": true}
	for _, l := range hostileLiterals() {
		values[l.scsOn], values[l.scsOff] = true, true
	}
	k := int64(100)
	for v := range values {
		k++
		if _, err := setup.Exec(ctx, "INSERT INTO lits VALUES ($1, $2)", k, v); err != nil {
			t.Fatal(err)
		}
	}
	var ts int64
	if err := setup.QueryRow(ctx, "SELECT mz_now()", pgx.QueryExecModeSimpleProtocol).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	// A later write: a read at ts must not see it.
	mustExec(t, ctx, setup, "INSERT INTO lits VALUES (1, 'plain')")
	direct := connectTo(t, ctx, directURL("postgres", db))
	var history string
	if err := direct.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE name = 'lits' AND dropped_ts IS NULL").Scan(&history); err != nil {
		t.Fatal(err)
	}

	for _, scs := range []string{"on", "off"} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			t.Run(fmt.Sprintf("scs_%s/%s", scs, mode), func(t *testing.T) {
				c := splicingClients{t: t, ctx: ctx, mode: mode, history: history, ts: ts}
				c.cached = c.connect(cached.URL("postgres", db), scs)
				c.fresh = c.connect(fresh.URL("postgres", db), scs)
				c.direct = c.connect(directURL("postgres", db), scs)
				for _, l := range hostileLiterals() {
					// With the setting off, the proxy cannot read a
					// backslash in a plain string as PostgreSQL does: it
					// refuses the text (the Unicode string is PostgreSQL's
					// own 0A000 then).
					c.refused = scs == "off" && l.scsOn != l.scsOff
					c.check("v = %s", l.sql, "'zz'", "'yy'")
				}
				c.refused = false
				for _, n := range hostileNumbers {
					f := "k = " + n.format + " + 100"
					c.check(f, fmt.Sprint(n.n), fmt.Sprint(n.warm1), fmt.Sprint(n.warm2))
				}
			})
		}
	}
}

// splicingClients are the three sessions TestHostile7LiteralSplicing
// compares.
type splicingClients struct {
	t                     *testing.T
	ctx                   context.Context
	mode                  pgx.QueryExecMode
	cached, fresh, direct *pgx.Conn
	history               string
	ts                    int64
	unique                int
	// refused: the proxies must refuse the text with 0A000.
	refused bool
}

func (c *splicingClients) connect(url, scs string) *pgx.Conn {
	conn := connectTo(c.t, c.ctx, url)
	// escape_string_warning off: the warnings are notices, not answers.
	mustExec(c.t, c.ctx, conn, "SET standard_conforming_strings = "+scs, "SET escape_string_warning = off")
	return conn
}

// check reads the rows matching cond (format with lit) AS OF the
// timestamp through the cached proxy (first with warm1 and warm2, so that
// the skeleton's literal plan is made, then with lit twice), through the
// fresh one (a skeleton of its own) and from the history directly: the
// answers must agree.
func (c *splicingClients) check(format, lit, warm1, warm2 string) {
	c.t.Helper()
	query := func(conn *pgx.Conn, alias, where string) string {
		return c.answer(conn, fmt.Sprintf("SELECT coalesce(string_agg(k::text || '=' || md5(v), ',' ORDER BY k), '') AS %s FROM lits WHERE %s AS OF %d",
			alias, where, c.ts))
	}
	cond := fmt.Sprintf(format, lit)
	query(c.cached, "a", fmt.Sprintf(format, warm1))
	query(c.cached, "a", fmt.Sprintf(format, warm2))
	first := query(c.cached, "a", cond)
	second := query(c.cached, "a", cond)
	c.unique++
	fresh := query(c.fresh, fmt.Sprintf("fresh%d", c.unique), cond)
	direct := c.answer(c.direct, fmt.Sprintf("SELECT coalesce(string_agg(k::text || '=' || md5(v), ',' ORDER BY k), '') FROM %s WHERE mz_from <= %d AND mz_to > %d AND (%s)",
		c.history, c.ts, c.ts, cond))
	if c.refused {
		direct = "ERROR 0A000"
	}
	if first != direct || second != direct || fresh != direct {
		c.t.Errorf("WHERE %s AS OF %d: cached proxy %q then %q, fresh proxy %q, history directly %q",
			short(cond), c.ts, short(first), short(second), short(fresh), short(direct))
	}
}

// answer is the one value q answers, or its SQLSTATE as "ERROR code".
// The simple protocol goes through pgconn: pgx refuses it with
// standard_conforming_strings off.
func (c *splicingClients) answer(conn *pgx.Conn, q string) string {
	c.t.Helper()
	var v string
	var err error
	if c.mode == pgx.QueryExecModeSimpleProtocol {
		var results []*pgconn.Result
		results, err = conn.PgConn().Exec(c.ctx, q).ReadAll()
		if err == nil {
			if len(results) != 1 || len(results[0].Rows) != 1 {
				c.t.Fatalf("%s: %d results", short(q), len(results))
			}
			v = string(results[0].Rows[0][0])
		}
	} else {
		err = conn.QueryRow(c.ctx, q, c.mode).Scan(&v)
	}
	if err != nil {
		if sqlState(err) == "" {
			c.t.Fatalf("%s: %v", short(q), err)
		}
		return "ERROR " + sqlState(err)
	}
	return v
}

// short is s cut to a length a failure message can show.
func short(s string) string {
	if len(s) > 200 {
		return s[:200] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

// TestHostile7StringSmuggling: with standard_conforming_strings off, a
// text the proxy reads as one harmless read (a plain string with a
// backslash) is more statements at the backend: the proxy refuses it with
// 0A000, whichever way the setting was turned off (SET, or set_config in
// a read the event loop forwards), in both protocols; nothing it hid runs,
// the session goes on, and E'...' strings still work.
func TestHostile7StringSmuggling(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--event-loop")
	smuggle := `SELECT 'a\' || '; CREATE TABLE smuggled (x int); --'`
	for _, how := range []string{"SET standard_conforming_strings = off", "SELECT set_config('standard_conforming_strings', 'off', false)"} {
		conn := connectTo(t, ctx, p.URL("postgres", db))
		if _, err := conn.PgConn().Exec(ctx, how).ReadAll(); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		_, err := conn.PgConn().Exec(ctx, smuggle).ReadAll()
		wantCode(t, err, "0A000")
		_, err = conn.Exec(ctx, smuggle, pgx.QueryExecModeExec)
		wantCode(t, err, "0A000")
		var v string
		if err := conn.QueryRow(ctx, `SELECT E'a\\b'`, pgx.QueryExecModeExec).Scan(&v); err != nil || v != `a\b` {
			t.Fatalf(`E'a\\b' with standard_conforming_strings off: %q, %v`, v, err)
		}
		// On again: the same text is one read of one string.
		if _, err := conn.PgConn().Exec(ctx, "SET standard_conforming_strings = on").ReadAll(); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, smuggle, pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != `a\; CREATE TABLE smuggled (x int); --` {
			t.Fatalf("%s with standard_conforming_strings on: %q, %v", smuggle, v, err)
		}
	}
	var exists bool
	if err := connectTo(t, ctx, directURL("postgres", db)).QueryRow(ctx, "SELECT to_regclass('smuggled') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("the smuggled CREATE TABLE ran (%v, %v)", exists, err)
	}
}

// pinAttacks are what an ordinary role runs against the lock-free pin's
// functions: hostile arguments, loops, its own transactions (some left
// open while others work), and the settings the functions read.
var pinAttacks = []struct {
	sql      string
	leftOpen bool // a transaction block others must not wait for
}{
	{sql: "SELECT mzproxy.pin_peek()"},
	{sql: "SELECT mzproxy.pin_check(-1)"},
	{sql: "SELECT mzproxy.pin_check(-9223372036854775808)"},
	{sql: "SELECT mzproxy.pin_check(9223372036854775807)"},
	{sql: "SELECT mzproxy.pin_check(NULL)"},
	{sql: "SELECT mzproxy.pin_check(0)"},
	{sql: "SELECT mzproxy.pin_check(x) FROM generate_series(-3, 3) x"},
	{sql: "SELECT mzproxy.pin_check(mzproxy.pin_peek())"},
	{sql: "SELECT mzproxy.pin_check(mzproxy.pin_peek() + 1)"},
	{sql: "SELECT mzproxy.pin_check(mzproxy.now_ms() + 86400000)"},
	{sql: "SELECT mzproxy.pin_check(last_value) FROM mzproxy.writes"},
	{sql: "SELECT max(mzproxy.pin()) FROM generate_series(1, 200)"},
	{sql: "SELECT max(mzproxy.pin_check(mzproxy.pin_peek())) FROM generate_series(1, 200)"},
	{sql: "SET search_path = public, pg_catalog; SELECT mzproxy.pin(); RESET search_path"},
	{sql: "SET statement_timeout = 1; SELECT max(mzproxy.pin()) FROM generate_series(1, 100000)"},
	{sql: "RESET statement_timeout"},
	{sql: "SET mzproxy.write_ts = '1 - 0'; SELECT mzproxy.pin()"},
	{sql: "RESET mzproxy.write_ts"},
	{sql: "SET mzproxy.read_writes = '0 x'; SELECT mzproxy.pin(); RESET mzproxy.read_writes"},
	{sql: "SET mzproxy.peek = '9223372036854775807'; SELECT mzproxy.pin_check(mzproxy.pin_peek())"},
	{sql: "SET default_transaction_isolation = 'serializable'; SELECT mzproxy.pin(); RESET default_transaction_isolation"},
	{sql: "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY; SELECT mzproxy.pin(); SELECT mzproxy.pin_check(mzproxy.pin_peek()); COMMIT"},
	{sql: "BEGIN; SET LOCAL transaction_isolation = 'repeatable read'; SELECT mzproxy.pin(); SELECT mzproxy.pin(); ROLLBACK"},
	{sql: "BEGIN; SET LOCAL mzproxy.write_ts = ''; SELECT mzproxy.pin(); COMMIT"},
	{sql: "BEGIN; SET LOCAL statement_timeout = 1; SELECT mzproxy.pin(); COMMIT"},
	{sql: "ROLLBACK"},
	{sql: "PREPARE h7(bigint) AS SELECT mzproxy.pin_check($1); EXECUTE h7(-1); EXECUTE h7(NULL); DEALLOCATE h7"},
	{sql: "BEGIN; SELECT mzproxy.pin(); SELECT mzproxy.pin_check(mzproxy.pin_peek())", leftOpen: true},
	{sql: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT mzproxy.pin_peek(); SELECT mzproxy.pin()", leftOpen: true},
	{sql: "BEGIN; SELECT mzproxy.pin_check(mzproxy.pin_peek()) FROM generate_series(1, 50); SAVEPOINT s; SELECT mzproxy.pin(); ROLLBACK TO s", leftOpen: true},
}

// TestHostile7PinFunctions: an ordinary role, through the proxy and
// directly, runs pinAttacks. After each, and while each left-open block
// is open: the oracle never went backwards nor far ahead of the clock,
// what the functions answered is neither below an earlier pin nor in
// the future, an acknowledged write is seen by another session's read of
// the present (plain, mz_now(), a read-only transaction) within a bounded
// wait, and the role gained nothing.
func TestHostile7PinFunctions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	role := ordinaryRole(t, ctx)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	admin := connectTo(t, ctx, directURL("postgres", db))
	if _, err := admin.Exec(ctx, "GRANT CREATE ON SCHEMA public TO "+role); err != nil {
		t.Fatal(err)
	}
	owner := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, owner, "CREATE TABLE acct (k int PRIMARY KEY, v bigint)", "INSERT INTO acct VALUES (1, 0)")
	executable := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'mzproxy'::regnamespace
			AND has_function_privilege($1, p.oid, 'EXECUTE')`, role).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	grantsBefore := executable()
	w := &presentWitness{t: t, ctx: ctx, admin: admin,
		writer: connectTo(t, ctx, p.URL(role, db)), reader: connectTo(t, ctx, p.URL(role, db))}
	w.check("before the attacks")
	for _, via := range []struct{ name, url string }{{"proxy", p.URL(role, db)}, {"direct", directURL(role, db)}} {
		attacker := connectTo(t, ctx, via.url)
		for _, a := range pinAttacks {
			floor := w.upper
			results, err := attacker.PgConn().Exec(ctx, a.sql).ReadAll()
			if code := sqlState(err); err != nil && (code == "" || code == "XX000" || strings.HasPrefix(code, "08")) {
				t.Fatalf("%s: %s: %v", via.name, a.sql, err)
			}
			w.answersInRange(via.name+": "+a.sql, results, floor)
			w.check(via.name + ": " + a.sql)
			if a.leftOpen {
				if _, err := attacker.Exec(ctx, "ROLLBACK"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// The proxy's own pin statements run in the role's session: with an
	// operator and a function of the role's ahead of pg_catalog in its
	// search_path they may answer what the role chose. That may fail the
	// role's own read-only transactions (XX000 today), but nothing of
	// anyone else's.
	hijacker := connectTo(t, ctx, p.URL(role, db))
	mustExec(t, ctx, hijacker,
		`CREATE FUNCTION public.forged(a text, b text) RETURNS text LANGUAGE sql AS $$ SELECT '9223372036854775000 0 0' $$`,
		`CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = public.forged)`,
		`CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE sql AS $$ SELECT 'read committed' $$`,
		"SET search_path = public, pg_catalog")
	for range 3 {
		err := pgx.BeginTxFunc(ctx, hijacker, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT v, mz_now() FROM acct WHERE k = 1")
			return err
		})
		if code := sqlState(err); err != nil && code == "" {
			t.Fatalf("a read-only transaction with a hijacked search_path: %v", err)
		}
		w.check("a read-only transaction with a hijacked search_path")
	}
	mustExec(t, ctx, hijacker, "DROP OPERATOR public.|| (text, text)", "DROP FUNCTION public.forged(text, text)", "DROP FUNCTION public.current_setting(text)")
	noHoldsOn(t, ctx, admin, "acct")

	if n := executable(); n != grantsBefore {
		t.Errorf("the role may execute %d of mzproxy's functions, %d before", n, grantsBefore)
	}
	var super bool
	if err := admin.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = $1", role).Scan(&super); err != nil || super {
		t.Fatalf("rolsuper %v, %v", super, err)
	}
}

// presentWitness checks the oracle and the reads of the present from
// sessions of their own.
type presentWitness struct {
	t              *testing.T
	ctx            context.Context
	admin          *pgx.Conn // direct, the oracle's state
	writer, reader *pgx.Conn // through the proxy
	upper          int64     // the last upper seen
	v              int64     // the last value written
}

// check writes the next value through the writer, then reads it through
// the reader three ways, each within a minute; and checks the upper.
func (w *presentWitness) check(after string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
	defer cancel()
	if err := w.writer.QueryRow(ctx, "UPDATE acct SET v = v + 1 WHERE k = 1 RETURNING v").Scan(&w.v); err != nil {
		w.t.Fatalf("after %s: the write: %v", after, err)
	}
	var plain, now, ts int64
	if err := w.reader.QueryRow(ctx, "SELECT v FROM acct WHERE k = 1").Scan(&plain); err != nil || plain != w.v {
		w.t.Fatalf("after %s: a read of the present: %d, %v; want %d", after, plain, err, w.v)
	}
	if err := w.reader.QueryRow(ctx, "SELECT v, mz_now() FROM acct WHERE k = 1").Scan(&now, &ts); err != nil || now != w.v {
		w.t.Fatalf("after %s: a read with mz_now(): %d, %v; want %d", after, now, err, w.v)
	}
	var inTxn int64
	err := pgx.BeginTxFunc(ctx, w.reader, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT v FROM acct WHERE k = 1").Scan(&inTxn)
	})
	if err != nil || inTxn != w.v {
		w.t.Fatalf("after %s: a read-only transaction: %d, %v; want %d", after, inTxn, err, w.v)
	}
	var upper, clock int64
	if err := w.admin.QueryRow(ctx, "SELECT mzproxy.upper(), mzproxy.now_ms()").Scan(&upper, &clock); err != nil {
		w.t.Fatal(err)
	}
	if upper < w.upper || upper < ts+1 {
		w.t.Fatalf("after %s: the upper went back to %d from %d (mz_now() read %d)", after, upper, w.upper, ts)
	}
	if upper > clock+60_000 {
		w.t.Fatalf("after %s: the upper %d is %d ms past the clock", after, upper, upper-clock)
	}
	w.upper = upper
}

// answersInRange checks that every number the pin functions answered is
// a timestamp at or past floor-1 (the upper before the statement) and
// not in the future, or the count of writes (small).
func (w *presentWitness) answersInRange(what string, results []*pgconn.Result, floor int64) {
	w.t.Helper()
	var clock int64
	if err := w.admin.QueryRow(w.ctx, "SELECT mzproxy.now_ms()").Scan(&clock); err != nil {
		w.t.Fatal(err)
	}
	for _, r := range results {
		if len(r.FieldDescriptions) != 1 || !strings.HasPrefix(r.FieldDescriptions[0].Name, "pin") && r.FieldDescriptions[0].Name != "max" {
			continue
		}
		for _, row := range r.Rows {
			if row[0] == nil {
				continue
			}
			v, err := strconv.ParseInt(string(row[0]), 10, 64)
			if err != nil {
				w.t.Fatalf("%s: answered %q", what, row[0])
			}
			if r.FieldDescriptions[0].Name == "pin_peek" && v < 1_000_000_000 {
				continue // the count of writes
			}
			if v < floor-1 || v > clock+60_000 {
				w.t.Errorf("%s: answered %d; the upper was %d before, the clock is %d", what, v, floor, clock)
			}
		}
	}
}

// TestHostile7EventLoopFrames: malformed and hostile frames on sessions the
// event loop drives (each first has a read forwarded by the loop): a
// truncated frame, an oversized or zero length, a flood of tiny frames in
// pieces, junk pipelined after a valid Query or inside an extended batch.
// Each gets 08P01 for its own connection only (a cut-short frame just
// ends it, as in PostgreSQL), a flood is answered frame by frame, and a
// session with a read at the backend meanwhile gets its answer.
func TestHostile7EventLoopFrames(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--event-loop", "--max-message-size", "4096")
	bystander := p.dialRaw(t)
	bystander.startup()
	bystander.write(queryFrame("SELECT 1"))
	expectRow(t, bystander, "1")
	bystander.write(queryFrame("SELECT 8 FROM pg_sleep(3)"))

	parse, _ := (&pgproto3.Parse{Query: "SELECT 5"}).Encode(nil)
	extended := func(tail ...byte) []byte {
		b := slices.Clone(parse)
		b, _ = (&pgproto3.Bind{}).Encode(b)
		b, _ = (&pgproto3.Execute{}).Encode(b)
		return append(b, tail...)
	}
	junk := []byte{'y', 0, 0, 0, 4}
	sync := []byte{'S', 0, 0, 0, 4}
	// A Bind whose one parameter's length is -2.
	badBind := []byte{'B', 0, 0, 0, 16, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 0, 0}
	tests := []struct {
		name string
		send []byte
		rows []string // the answers expected before the error
		code string   // "" when the proxy just closes
		cut  bool     // the client stops writing after send
		// goesOn: PostgreSQL's ERROR (not FATAL), then ReadyForQuery, and
		// the session goes on.
		goesOn bool
	}{
		{name: "truncated header", send: queryFrame("SELECT 1")[:3], cut: true},
		{name: "truncated Query", send: queryFrame("SELECT 1")[:7], cut: true},
		{name: "truncated after a whole Query", send: append(queryFrame("SELECT 6"), queryFrame("SELECT 1")[:9]...), rows: []string{"6"}, cut: true},
		{name: "truncated extended batch", send: extended()[:20], cut: true},
		{name: "oversized length", send: []byte{'Q', 0x40, 0, 0, 0, 'S'}, code: "08P01"},
		{name: "length over the limit", send: []byte{'P', 0, 0, 0x10, 1, 0}, code: "08P01"},
		{name: "zero length", send: []byte{'Q', 0, 0, 0, 0}, code: "08P01"},
		{name: "zero length Sync", send: []byte{'S', 0, 0, 0, 0}, code: "08P01"},
		{name: "junk after a Query", send: append(queryFrame("SELECT 6"), junk...), rows: []string{"6"}, code: "08P01"},
		{name: "bad length after a Query", send: append(queryFrame("SELECT 6"), 'Q', 0, 0, 0, 2), rows: []string{"6"}, code: "08P01"},
		{name: "junk in an extended batch", send: extended(append(junk, sync...)...), code: "08P01"},
		{name: "Bind with a negative length", send: append(append(slices.Clone(parse), badBind...), sync...), code: "08P01"},
		{name: "Query without its NUL", send: []byte{'Q', 0, 0, 0, 8, 'S', 'E', 'L', 'x'}, code: "08P01", goesOn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := p.dialRaw(t)
			c.startup()
			c.write(queryFrame("SELECT 1")) // forwarded by the loop
			expectRow(t, c, "1")
			c.write(tt.send)
			for _, r := range tt.rows {
				expectRow(t, c, r)
			}
			if tt.cut {
				_ = c.nc.(interface{ CloseWrite() error }).CloseWrite()
			}
			switch {
			case tt.code == "":
				c.expectClosed()
			case tt.goesOn:
				er, ok := c.receive().(*pgproto3.ErrorResponse)
				if !ok || er.Code != tt.code || er.Severity != "ERROR" {
					t.Fatalf("got %#v, want ERROR %s", er, tt.code)
				}
				if _, ok := c.receive().(*pgproto3.ReadyForQuery); !ok {
					t.Fatal("no ReadyForQuery after the error")
				}
				c.write(queryFrame("SELECT 2"))
				expectRow(t, c, "2")
			default:
				c.expectFatal(tt.code)
			}
		})
	}

	t.Run("flood of tiny frames", func(t *testing.T) {
		c := p.dialRaw(t)
		c.startup()
		c.write(queryFrame("SELECT 1"))
		expectRow(t, c, "1")
		const syncs = 3000
		flood := bytes.Repeat([]byte{'S', 0, 0, 0, 4}, syncs)
		flood = append(flood, queryFrame("SELECT 9")...)
		for i := 0; i < len(flood); i += 7 {
			c.write(flood[i:min(i+7, len(flood))])
		}
		for i := range syncs {
			if z, ok := c.receive().(*pgproto3.ReadyForQuery); !ok || z.TxStatus != 'I' {
				t.Fatalf("answer %d to a Sync: %#v", i, z)
			}
		}
		expectRow(t, c, "9")
	})

	expectRow(t, bystander, "8")
	bystander.write(queryFrame("SELECT 2"))
	expectRow(t, bystander, "2")
	p.mustAlive(t, ctx)
}
