package integration

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestLoopTimestampedReadCancelAndGone: a timestamped read of a session
// that has seen the catalog and its search_path (the event loop serves it
// in one round trip, proxy/loop_read.go), with the loop on and off, as a
// simple Query, as the Bind, Describe, Execute and Sync of a statement
// the client prepared, and as those of the unnamed statement with its
// Parse in front (proxy/loop_parse.go): a cancel reaches it (57014 on the same connection;
// the session goes on, its next reads answer, no hold is left), and a
// client that goes away while it runs gets the backend's work stopped and
// its hold released.
func TestLoopTimestampedReadCancelAndGone(t *testing.T) {
	for _, loop := range []string{"--event-loop=true", "--event-loop=false"} {
		for _, protocol := range []string{"simple", "prepared", "unnamed"} {
			t.Run(loop+" "+protocol, func(t *testing.T) {
				loopReadCancelAndGone(t, loop, protocol)
			})
		}
	}
}

func loopReadCancelAndGone(t *testing.T, loop, protocol string) {
	ctx := testContext(t)
	p := startProxy(t, loop, "--metrics-listen", "127.0.0.1:0")
	direct := connectDirect(t, ctx)
	table := fmt.Sprintf("ltr_%d", time.Now().UnixNano())
	c := p.dialRaw(t)
	key := c.startup()
	for _, sql := range []string{
		"CREATE TABLE " + table + " (v int)",
		"INSERT INTO " + table + " VALUES (7)",
	} {
		if got := strings.Join(c.answers(queryFrame(sql)), "; "); strings.Contains(got, "E ") {
			t.Fatalf("%s: %s", sql, got)
		}
	}
	read := "SELECT v FROM " + table + " WHERE mz_now() > 0"
	// slowText is a timestamped read that sleeps once the backend runs it;
	// marker is a column alias, which the history rewrite keeps (a comment
	// it does not; literals may become parameters).
	slowText := func(marker string) string {
		return "SELECT v AS " + marker + " FROM " + table + " WHERE mz_now() > 0 AND pg_sleep(120) IS NOT NULL"
	}
	// send sends the read sql: a Query, the batch that runs the
	// statement prepared for it (below), or the unnamed statement's.
	send := func(sql string) { c.write(queryFrame(sql)) }
	switch protocol {
	case "unnamed":
		send = func(sql string) { c.write(unnamedFrames(sql)) }
	case "prepared":
		names := map[string]string{}
		var parses []byte
		for i, sql := range []string{read, slowText("loop_read_cancel"), slowText("loop_read_gone")} {
			names[sql] = fmt.Sprintf("s%d", i)
			parses, _ = (&pgproto3.Parse{Name: names[sql], Query: sql}).Encode(parses)
		}
		parses, _ = (&pgproto3.Sync{}).Encode(parses)
		if got := strings.Join(c.answers(parses), "; "); strings.Contains(got, "E ") {
			t.Fatalf("Parse: %s", got)
		}
		send = func(sql string) {
			var b []byte
			for _, m := range []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: names[sql]},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}} {
				b, _ = m.Encode(b)
			}
			c.write(b)
		}
	}
	for range 3 {
		send(read)
		expectRow(t, c, "7")
	}
	slowRead := func(marker string) {
		t.Helper()
		send(slowText(marker))
		// In its sleep: the text shows as active from its Parse on, and
		// the session's goroutine holds the read before it sends it, not
		// before its first round trip with it (a loaded machine showed
		// 0 holds while the text was active, --event-loop=false,
		// unnamed).
		eventually(t, 15*time.Second, "the read running", func() bool {
			return sleepingQueries(t, ctx, direct, marker) == 1
		})
	}
	slowRead("loop_read_cancel")
	if n := p.readHolds(t); n != 1 {
		t.Fatalf("%v read holds while the read runs, want 1", n)
	}
	start := time.Now()
	p.sendCancel(t, key.ProcessID, key.SecretKey)
	var got []string
	for {
		m := c.receive()
		if er, ok := m.(*pgproto3.ErrorResponse); ok {
			got = append(got, er.Code)
		}
		if z, ok := m.(*pgproto3.ReadyForQuery); ok {
			if z.TxStatus != 'I' {
				t.Fatalf("ReadyForQuery %c after the cancel", z.TxStatus)
			}
			break
		}
	}
	if len(got) != 1 || got[0] != "57014" {
		t.Fatalf("errors %q after the cancel, want [57014]", got)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the cancel took %v", took)
	}
	p.awaitHolds(t, 0, "after the canceled read")
	send(read)
	expectRow(t, c, "7")

	slowRead("loop_read_gone")
	c.nc.Close()
	eventually(t, 20*time.Second, "the read stopped", func() bool {
		return activeQueries(t, ctx, direct, "loop_read_gone") == 0
	})
	p.awaitHolds(t, 0, "after the client went away")
	p.mustAlive(t, ctx)
}

// TestLoopPreparedTimestampedReads: timestamped reads the client prepares
// (pgx's five modes, lib/pq's Prepare), with the event loop on (which
// serves a named statement's Bind to Sync, proxy/loop_read.go) and off,
// each after a write acknowledged on another connection through the same
// proxy: each read sees the write (reads are linearizable) and its
// mz_now() never goes back.
func TestLoopPreparedTimestampedReads(t *testing.T) {
	t.Parallel()
	st := newStage(t, stageOpts{postgres: true, proxies: [][]string{
		{"--event-loop=true", "--metrics-listen", "127.0.0.1:0"}, {"--event-loop=false", "--metrics-listen", "127.0.0.1:0"}}})
	ctx, db := st.ctx, st.db
	table := fmt.Sprintf("lpr_%d", time.Now().UnixNano())
	read := "SELECT v, mz_now()::text FROM " + table + " WHERE k = $1"
	for i, p := range st.proxies {
		writer := connectTo(t, ctx, p.URL("postgres", db))
		if i == 0 {
			mustExec(t, ctx, writer, "CREATE TABLE "+table+" (k int PRIMARY KEY, v int NOT NULL)",
				"INSERT INTO "+table+" VALUES (1, 0)")
		}
		// check reads after each of n writes with readOnce.
		check := func(t *testing.T, readOnce func() (int, uint64, error)) {
			last := uint64(0)
			for n := range 8 {
				want := 100*i + n + 1
				if _, err := writer.Exec(ctx, "UPDATE "+table+" SET v = $1 WHERE k = 1", want); err != nil {
					t.Fatal(err)
				}
				v, now, err := readOnce()
				if err != nil || v != want || now < last {
					t.Fatalf("read %d: v %d, mz_now() %d after %d, %v; want v %d", n, v, now, last, err, want)
				}
				last = now
			}
		}
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
			pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
			t.Run(fmt.Sprintf("proxy %d pgx %s", i, mode), func(t *testing.T) {
				conn := connectMode(t, ctx, p.URL("postgres", db), mode)
				check(t, func() (v int, now uint64, err error) {
					var text string
					err = conn.QueryRow(ctx, read, 1).Scan(&v, &text)
					now, _ = strconv.ParseUint(text, 10, 64)
					return v, now, err
				})
			})
		}
		t.Run(fmt.Sprintf("proxy %d lib/pq Prepare", i), func(t *testing.T) {
			pool, err := sql.Open("postgres", p.URL("postgres", db))
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			conn, err := pool.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			stmt, err := conn.PrepareContext(ctx, read)
			if err != nil {
				t.Fatal(err)
			}
			defer stmt.Close()
			check(t, func() (v int, now uint64, err error) {
				var text string
				err = stmt.QueryRowContext(ctx, 1).Scan(&v, &text)
				now, _ = strconv.ParseUint(text, 10, 64)
				return v, now, err
			})
		})
	}
	for _, p := range st.proxies {
		p.mustAlive(t, ctx)
		p.awaitHolds(t, 0, "after the reads")
	}
}
