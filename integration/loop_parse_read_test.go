package integration

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// parsedFrames is a driver's batch for a query with parameters whose
// types it declares (oids, nil for none): the unnamed statement's Parse,
// its Bind with the text parameters params (a nil one NULL), a Describe
// of the portal unless !describe, Execute, Sync.
func parsedFrames(sql string, oids []uint32, describe bool, params ...[]byte) []byte {
	msgs := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql, ParameterOIDs: oids}, &pgproto3.Bind{Parameters: params}}
	if describe {
		msgs = append(msgs, &pgproto3.Describe{ObjectType: 'P'})
	}
	var b []byte
	for _, m := range append(msgs, &pgproto3.Execute{}, &pgproto3.Sync{}) {
		b, _ = m.Encode(b)
	}
	return b
}

// frames encodes msgs.
func frames(msgs ...pgproto3.FrontendMessage) []byte {
	var b []byte
	for _, m := range msgs {
		b, _ = m.Encode(b)
	}
	return b
}

// timestampValue is a value of a DataRow that is a timestamp (mz_now()):
// it differs from one read to the next.
var timestampValue = regexp.MustCompile(`^1[0-9]{12}$`)

// transcript is everything the client gets for batch, up to its
// ReadyForQuery, spelled out: errors with their SQLSTATE, message and
// position, descriptions with names and types, rows with their values
// (a timestamp as T).
func (c *rawClient) transcript(batch []byte) string {
	c.t.Helper()
	c.write(batch)
	var out []string
	for {
		switch m := c.receive().(type) {
		case *pgproto3.ErrorResponse:
			out = append(out, fmt.Sprintf("E %s %s %q position %d", m.Severity, m.Code, m.Message, m.Position))
		case *pgproto3.RowDescription:
			var f []string
			for _, d := range m.Fields {
				f = append(f, fmt.Sprintf("%s:%d:%d", d.Name, d.DataTypeOID, d.Format))
			}
			out = append(out, "T "+strings.Join(f, ","))
		case *pgproto3.ParameterDescription:
			out = append(out, fmt.Sprintf("t %v", m.ParameterOIDs))
		case *pgproto3.DataRow:
			var v []string
			for _, b := range m.Values {
				if timestampValue.Match(b) {
					b = []byte("T")
				}
				v = append(v, string(b))
			}
			out = append(out, "D "+strings.Join(v, ","))
		case *pgproto3.CommandComplete:
			out = append(out, "C "+string(m.CommandTag))
		case *pgproto3.ReadyForQuery:
			return strings.Join(append(out, "Z "+string(m.TxStatus)), "; ")
		default:
			out = append(out, strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3."))
		}
	}
}

// TestLoopUnnamedTimestampedReads: one-shot timestamped reads sent as the
// unnamed statement's Parse with its Bind (pgx's exec modes, psycopg,
// node-postgres, pgbench -M extended; the event loop serves them,
// proxy/loop_parse.go) answer exactly as the session's goroutine answers
// them: the same batches through a proxy with the loop and one without
// get the same frames, rows (their timestamps aside), descriptions, and
// errors with their SQLSTATE and position, whether they fail at the Bind,
// at the rewrite's Parse, at execution or in the proxy. Each batch is
// sent four times (the second a plan-cache hit, the third and fourth bind
// the statement the proxy prepared for it), and a Parse and Describe of
// the statement (pgx's describe_exec, which only the goroutine serves)
// describes the client's parameters only. No hold is left.
func TestLoopUnnamedTimestampedReads(t *testing.T) {
	ctx := testContext(t)
	on := startProxy(t, "--event-loop=true", "--metrics-listen", "127.0.0.1:0")
	off := startProxy(t, "--event-loop=false", "--metrics-listen", "127.0.0.1:0")
	table := fmt.Sprintf("lupr_%d", time.Now().UnixNano())
	setup := on.connect(t, ctx)
	mustExec(t, ctx, setup, "CREATE TABLE "+table+" (k int PRIMARY KEY, v text NOT NULL)",
		"INSERT INTO "+table+" VALUES (1, 'one'), (2, 'two')", "ALTER TABLE "+table+" SET (RETAIN HISTORY FOR '1h')")
	var ts string
	if err := setup.QueryRow(ctx, "SELECT mz_now()::text").Scan(&ts); err != nil {
		t.Fatal(err)
	}
	// Not updated after ts: AS OF ts reads what the table has now.
	time.Sleep(10 * time.Millisecond)
	b := func(s string) []byte { return []byte(s) }
	stamped := "SELECT v, mz_now() FROM " + table + " WHERE k = $1"
	batches := []struct {
		name  string
		batch []byte
	}{
		{"mz_now described", parsedFrames(stamped, nil, true, b("1"))},
		{"mz_now", parsedFrames(stamped, nil, false, b("2"))},
		{"mz_now typed", parsedFrames(stamped, []uint32{23}, true, b("1"))},
		// The unnamed statement the batch before parsed, bound and
		// described again without a Parse: the loop bound a statement of
		// the proxy's in its place, and the client's is parsed again.
		{"bound again", frames(&pgproto3.Bind{Parameters: [][]byte{b("2")}}, &pgproto3.Describe{ObjectType: 'P'},
			&pgproto3.Execute{}, &pgproto3.Sync{})},
		{"described again", frames(&pgproto3.Describe{ObjectType: 'S'}, &pgproto3.Sync{})},
		{"mz_now in WHERE", parsedFrames("SELECT k, v FROM "+table+" WHERE k = $1 AND mz_now() > 0", nil, true, b("2"))},
		{"AS OF literal", parsedFrames("SELECT v FROM "+table+" WHERE k = $1 AS OF "+ts, nil, true, b("1"))},
		{"AS OF $2", parsedFrames("SELECT v FROM "+table+" WHERE k = $1 AS OF $2", nil, true, b("2"), b(ts))},
		{"AS OF $2 bigint", parsedFrames("SELECT v FROM "+table+" WHERE k = $1 AS OF $2", []uint32{23, 20}, true, b("1"), b(ts))},
		{"AS OF AT LEAST $2", parsedFrames("SELECT v FROM "+table+" WHERE k = $1 AS OF AT LEAST $2", nil, true, b("1"), b(ts))},
		{"AS OF $2 NULL", parsedFrames("SELECT v FROM "+table+" WHERE k = $1 AS OF $2", nil, true, b("1"), nil)},
		{"bad key", parsedFrames(stamped, nil, true, b("x"))},
		{"too many values", parsedFrames(stamped, nil, true, b("1"), b("2"))},
		{"too few values", parsedFrames(stamped, nil, true)},
		{"unknown column", parsedFrames("SELECT nope, mz_now() FROM "+table+" WHERE k = $1", nil, true, b("1"))},
		{"unknown table", parsedFrames("SELECT v, mz_now() FROM "+table+"_nope WHERE k = $1", nil, true, b("1"))},
		{"division by zero", parsedFrames("SELECT 1 / (k - k), mz_now() FROM "+table+" WHERE k = $1", nil, true, b("1"))},
		{"two statements", parsedFrames("SELECT mz_now(); SELECT 1", nil, true)},
		{"describe_exec", frames(&pgproto3.Parse{Query: stamped}, &pgproto3.Describe{ObjectType: 'S'},
			&pgproto3.Sync{}, &pgproto3.Bind{Parameters: [][]byte{b("2")}}, &pgproto3.Describe{ObjectType: 'P'},
			&pgproto3.Execute{}, &pgproto3.Sync{})},
	}
	clients := map[string]*rawClient{}
	for name, p := range map[string]*proxyProc{"loop": on, "goroutine": off} {
		c := p.dialRaw(t)
		c.startup()
		// The session sees the catalog and its search_path.
		for range 3 {
			c.transcript(queryFrame("SELECT v, mz_now() FROM " + table + " WHERE k = 1"))
		}
		clients[name] = c
	}
	for _, bt := range batches {
		want := clients["goroutine"].transcript(bt.batch)
		if bt.name == "describe_exec" {
			// Two batches: two ReadyForQuery.
			want += " / " + clients["goroutine"].transcript(nil)
		}
		// The loop sends a text's first read as the unnamed statement's
		// Parse, prepares a statement of the proxy's at its second (a
		// failed one is forgotten) and binds it from the third on.
		for round := range 4 {
			got := clients["loop"].transcript(bt.batch)
			if bt.name == "describe_exec" {
				got += " / " + clients["loop"].transcript(nil)
			}
			if got != want {
				t.Errorf("%s (round %d): with the event loop\n%s\nwithout\n%s", bt.name, round, got, want)
			}
		}
		t.Logf("%s: %s", bt.name, want)
	}
	for _, p := range []*proxyProc{on, off} {
		p.awaitHolds(t, 0, "after the reads")
		p.mustAlive(t, ctx)
	}
}

// TestLoopUnnamedTimestampedReadTimeout: a timestamped read sent as the
// unnamed statement's Parse ends at the session's statement_timeout
// (57014), with the loop on and off, and the next reads answer.
func TestLoopUnnamedTimestampedReadTimeout(t *testing.T) {
	for _, loop := range []string{"--event-loop=true", "--event-loop=false"} {
		t.Run(loop, func(t *testing.T) {
			ctx := testContext(t)
			p := startProxy(t, loop, "--metrics-listen", "127.0.0.1:0")
			table := fmt.Sprintf("lupt_%d", time.Now().UnixNano())
			mustExec(t, ctx, p.connect(t, ctx), "CREATE TABLE "+table+" (k int PRIMARY KEY, v text NOT NULL)",
				"INSERT INTO "+table+" VALUES (1, 'one')")
			c := p.dialRaw(t)
			c.startup()
			read := parsedFrames("SELECT v, mz_now() FROM "+table+" WHERE k = $1", nil, true, []byte("1"))
			want := "ParseComplete; BindComplete; T v:25:0,mz_now:20:0; D one,T; C SELECT 1; Z I"
			for range 3 {
				if got := c.transcript(read); got != want {
					t.Fatalf("read: %s, want %s", got, want)
				}
			}
			c.transcript(queryFrame("SET statement_timeout = '300ms'"))
			slow := parsedFrames("SELECT v, mz_now() FROM "+table+" WHERE k = $1 AND pg_sleep(30) IS NOT NULL", nil, true, []byte("1"))
			if got := c.transcript(slow); !strings.Contains(got, "E ERROR 57014") || !strings.HasSuffix(got, "Z I") {
				t.Fatalf("slow read: %s, want 57014", got)
			}
			c.transcript(queryFrame("RESET statement_timeout"))
			if got := c.transcript(read); got != want {
				t.Fatalf("read after the timeout: %s, want %s", got, want)
			}
			p.awaitHolds(t, 0, "after the reads")
		})
	}
}

// TestLoopUnnamedTimestampedReadsRepeated: the same one-shot timestamped
// reads, repeated on one connection (the event loop binds a statement of
// the proxy's for each text from its third read on, proxy/loop_parse.go),
// in every pgx exec mode, psycopg 3 (normal and pipeline), asyncpg and
// node-postgres, with the loop on and off: each read answers its own key,
// mz_now() never goes back, AS OF $2 reads the past, an error of the
// rewrite's Parse (42703) comes each time, a column added by another
// connection shows in the next read of SELECT * (no statement prepared
// before it is bound; a driver's own prepared statement or description
// gets PostgreSQL's error), and a search_path that names another table
// of the same name reads that one.
func TestLoopUnnamedTimestampedReadsRepeated(t *testing.T) {
	for _, loop := range []string{"--event-loop=true", "--event-loop=false"} {
		t.Run(loop, func(t *testing.T) {
			ctx := testContext(t)
			p := startProxy(t, loop, "--metrics-listen", "127.0.0.1:0")
			writer := p.connect(t, ctx)
			// A table per driver: each one adds a column.
			table := func(t *testing.T, name string) string {
				t.Helper()
				tb := fmt.Sprintf("lurr_%s_%d", name, time.Now().UnixNano())
				mustExec(t, ctx, writer, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v text NOT NULL)",
					"INSERT INTO "+tb+" VALUES (1, 'one'), (2, 'two')",
					"CREATE SCHEMA "+tb+"_s", "CREATE TABLE "+tb+"_s."+tb+" (k int PRIMARY KEY, v text NOT NULL)",
					"INSERT INTO "+tb+"_s."+tb+" VALUES (1, 'uno'), (2, 'dos')")
				return tb
			}
			for i, mode := range pgxModes {
				t.Run("pgx "+mode.String(), func(t *testing.T) {
					tb := table(t, fmt.Sprint("pgx", i))
					conn := connectMode(t, ctx, p.URL("postgres", "postgres"), mode)
					stamped := "SELECT v, mz_now()::text FROM " + tb + " WHERE k = $1"
					var last int64
					readAll := func(want ...string) {
						t.Helper()
						for i := range 8 {
							k := 1 + i%2
							var v, ts string
							if err := conn.QueryRow(ctx, stamped, k).Scan(&v, &ts); err != nil || v != want[k-1] {
								t.Fatalf("read %d of k = %d: %q, %v; want %q", i, k, v, err, want[k-1])
							}
							n, err := strconv.ParseInt(ts, 10, 64)
							if err != nil || n < last {
								t.Fatalf("mz_now() %q after %d", ts, last)
							}
							last = n
						}
					}
					readAll("one", "two")
					var past int64
					if err := conn.QueryRow(ctx, "SELECT mz_now()::bigint").Scan(&past); err != nil {
						t.Fatal(err)
					}
					mustExec(t, ctx, writer, "UPDATE "+tb+" SET v = 'eins' WHERE k = 1")
					for i := range 6 {
						var v string
						if err := conn.QueryRow(ctx, "SELECT v FROM "+tb+" WHERE k = $1 AS OF $2", 1, past).Scan(&v); err != nil || v != "one" {
							t.Fatalf("AS OF read %d: %q, %v; want one", i, v, err)
						}
					}
					for range 4 {
						var v string
						wantCode(t, conn.QueryRow(ctx, "SELECT nope, mz_now() FROM "+tb+" WHERE k = $1", 1).Scan(&v), "42703")
					}
					star := "SELECT *, mz_now()::text FROM " + tb + " WHERE k = $1"
					for range 4 {
						var k int
						var v, ts string
						if err := conn.QueryRow(ctx, star, 2).Scan(&k, &v, &ts); err != nil || v != "two" {
							t.Fatalf("SELECT *: %q, %v; want two", v, err)
						}
					}
					if _, err := conn.Exec(ctx, "SET search_path = "+tb+"_s, public"); err != nil {
						t.Fatal(err)
					}
					readAll("uno", "dos")
					if _, err := conn.Exec(ctx, "RESET search_path"); err != nil {
						t.Fatal(err)
					}
					readAll("eins", "two")
					p.awaitHolds(t, 0, "after the reads")
					mustExec(t, ctx, writer, "ALTER TABLE "+tb+" ADD COLUMN w int NOT NULL DEFAULT 7")
					switch mode {
					case pgx.QueryExecModeCacheStatement:
						// pgx's prepared statement: PostgreSQL's error.
						wantCode(t, conn.QueryRow(ctx, star, 2).Scan(new(int), new(string), new(int), new(string)), "0A000")
					case pgx.QueryExecModeCacheDescribe:
						// pgx's description of 3 columns: PostgreSQL's error.
						wantCode(t, conn.QueryRow(ctx, star, 2).Scan(new(int), new(string), new(int), new(string)), "08P01")
					}
					for range 4 {
						if mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeCacheDescribe {
							break
						}
						var k, w int
						var v, ts string
						if err := conn.QueryRow(ctx, star, 2).Scan(&k, &v, &w, &ts); err != nil || v != "two" || w != 7 {
							t.Fatalf("SELECT * after ADD COLUMN: %q, %d, %v; want two, 7", v, w, err)
						}
					}
					if mode != pgx.QueryExecModeCacheStatement {
						// (After the 0A000 of pgx's prepared statement a
						// read hold stays until the session ends, on b63d217
						// too, the loop on or off: not looked into here.)
						p.awaitHolds(t, 0, "after the reads of SELECT *")
					}
				})
			}
			host, port := p.hostPort()
			url := libpqURL(host, port, "postgres")
			t.Run("python", func(t *testing.T) {
				for _, m := range []string{"psycopg", "asyncpg"} {
					_, err := pythonModule(m)()
					requireDriver(t, err, "apt-get install -y python3-psycopg python3-asyncpg")
				}
				results := runDriverProgram(t, filepath.Join("testdata", "python"), nil, systemPython,
					"tsread_repeated.py", url, table(t, "py"), table(t, "pypipe"), table(t, "asyncpg"))
				reportCases(t, results, "psycopg", "psycopg_pipeline", "asyncpg")
				p.awaitHolds(t, 0, "after python's reads")
			})
			t.Run("node-postgres", func(t *testing.T) {
				command, err := nodeModule("pg", "pg_tsread.js")()
				requireDriver(t, err, "apt-get install -y nodejs npm, then (cd integration/testdata/node && npm ci)")
				results := runDriverProgram(t, filepath.Join("testdata", "node"), nil, command[0], command[1], url, table(t, "node"))
				reportCases(t, results, "reads")
				p.awaitHolds(t, 0, "after node-postgres's reads")
			})
			p.mustAlive(t, ctx)
		})
	}
}
