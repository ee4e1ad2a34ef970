package integration

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestPgx drives the proxy with pgx v5 the way applications do: both query
// protocols, prepared statements, pipelines, COPY, types, errors, notices,
// notifications, cancel and transactions.
func TestPgx(t *testing.T) {
	t.Parallel()
	p := startProxy(t)

	t.Run("exec modes", func(t *testing.T) {
		t.Parallel()
		for _, mode := range pgxModes {
			t.Run(mode.String(), func(t *testing.T) {
				ctx := testContext(t)
				conn := connectMode(t, ctx, p.URL("postgres", "postgres"), mode)
				for i := range 3 { // the cached modes prepare once, then reuse
					var sum int64
					var s string
					err := conn.QueryRow(ctx, "SELECT $1::int8 + $2::int8, $3::text || 'x'", i, 40, "it's").Scan(&sum, &s)
					if err != nil {
						t.Fatal(err)
					}
					if sum != int64(i+40) || s != "it'sx" {
						t.Fatalf("got %d %q", sum, s)
					}
				}
				rows, _ := conn.Query(ctx, "SELECT g, g::text FROM generate_series(1, 5) g")
				got, err := pgx.CollectRows(rows, pgx.RowTo[int32]) // errors: two columns
				if err == nil {
					t.Fatalf("scanning two columns into one: got %v and no error", got)
				}
				// The connection is still usable after a client-side scan error.
				var one int
				if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
					t.Fatal(err)
				}
			})
		}
	})

	t.Run("prepared statement by name", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		sd, err := conn.Prepare(ctx, "sq", "SELECT $1::int * $1::int AS sq")
		if err != nil {
			t.Fatal(err)
		}
		if len(sd.ParamOIDs) != 1 || len(sd.Fields) != 1 || sd.Fields[0].Name != "sq" {
			t.Fatalf("description: %+v", sd)
		}
		for i := range 5 {
			var n int
			if err := conn.QueryRow(ctx, "sq", i).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != i*i {
				t.Fatalf("sq(%d) = %d", i, n)
			}
		}
		if err := conn.Deallocate(ctx, "sq"); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, "EXECUTE sq(3)")
		wantCode(t, err, "26000") // invalid_sql_statement_name: it is gone
	})

	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		tbl := tableName(t)
		// pgx prepares every statement of a batch first, so the table
		// must exist before.
		if _, err := conn.Exec(ctx, "CREATE TABLE "+tbl+" (id int PRIMARY KEY, v text)"); err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		for i := range 50 {
			b.Queue("INSERT INTO "+tbl+" VALUES ($1, $2)", i, fmt.Sprint("v", i))
		}
		b.Queue("SELECT count(*), sum(id) FROM " + tbl)
		br := conn.SendBatch(ctx, b)
		for i := range 50 {
			if _, err := br.Exec(); err != nil {
				t.Fatalf("batch statement %d: %v", i, err)
			}
		}
		var count, sum int64
		if err := br.QueryRow().Scan(&count, &sum); err != nil {
			t.Fatal(err)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		if count != 50 || sum != 49*50/2 {
			t.Fatalf("count %d sum %d", count, sum)
		}

		// An error in the middle of a batch: statements before it ran, the
		// failing one reports its SQLSTATE, and the connection goes on.
		b = &pgx.Batch{}
		b.Queue("SELECT 1")
		b.Queue("INSERT INTO "+tbl+" VALUES ($1, 'dup')", 1)
		b.Queue("SELECT 2")
		br = conn.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			t.Fatal(err)
		}
		_, err := br.Exec()
		wantCode(t, err, "23505")
		br.Close()
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 50 {
			t.Fatalf("after failed batch: %d %v", n, err)
		}
	})

	t.Run("large pipeline", func(t *testing.T) {
		// More queued statements than the proxy forwards before reading
		// answers (its pipeline bound), each with a sizable result, so
		// that both directions fill their buffers.
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		b := &pgx.Batch{}
		const n = 600
		for i := range n {
			b.Queue("SELECT $1::int, repeat('x', 2000)", i)
		}
		br := conn.SendBatch(ctx, b)
		for i := range n {
			var got int
			var s string
			if err := br.QueryRow().Scan(&got, &s); err != nil {
				t.Fatalf("statement %d: %v", i, err)
			}
			if got != i || len(s) != 2000 {
				t.Fatalf("statement %d: got %d, %d bytes", i, got, len(s))
			}
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("copy", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		tbl := tableName(t)
		if _, err := conn.Exec(ctx, "CREATE TABLE "+tbl+" (id int, name text, at timestamptz)"); err != nil {
			t.Fatal(err)
		}
		at := time.Date(2024, 2, 29, 12, 0, 0, 0, time.UTC)
		var rows [][]any
		for i := range 10000 {
			var name any = fmt.Sprintf("name %d\twith tab", i)
			if i%7 == 0 {
				name = nil
			}
			rows = append(rows, []any{i, name, at})
		}
		n, err := conn.CopyFrom(ctx, pgx.Identifier{tbl}, []string{"id", "name", "at"}, pgx.CopyFromRows(rows))
		if err != nil {
			t.Fatal(err)
		}
		if n != 10000 {
			t.Fatalf("CopyFrom: %d rows", n)
		}
		var count, nulls int
		if err := conn.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE name IS NULL) FROM "+tbl).Scan(&count, &nulls); err != nil {
			t.Fatal(err)
		}
		if count != 10000 || nulls != 1429 {
			t.Fatalf("count %d nulls %d", count, nulls)
		}

		var out strings.Builder
		tag, err := conn.PgConn().CopyTo(ctx, &out, "COPY (SELECT id, name FROM "+tbl+" WHERE id < 3 ORDER BY id) TO STDOUT")
		if err != nil {
			t.Fatal(err)
		}
		want := "0\t\\N\n1\tname 1\\twith tab\n2\tname 2\\twith tab\n"
		if out.String() != want || tag.RowsAffected() != 3 {
			t.Fatalf("COPY TO: %q (%s), want %q", out.String(), tag, want)
		}

		// COPY FROM with bad data fails with the backend's SQLSTATE and the
		// connection stays usable.
		_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader("1\tx\tnot a time\n"), "COPY "+tbl+" FROM STDIN")
		wantCode(t, err, "22007")
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&count); err != nil || count != 10000 {
			t.Fatalf("after failed COPY: %d %v", count, err)
		}
	})

	t.Run("large result", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		direct := connectDirect(t, ctx)
		const q = "SELECT g, md5(g::text) FROM generate_series(1, 200000) g"
		sum := func(c *pgx.Conn) (int, string) {
			rows, err := c.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			acc := new(big.Int)
			for rows.Next() {
				var g int64
				var h string
				if err := rows.Scan(&g, &h); err != nil {
					t.Fatal(err)
				}
				n++
				x, _ := new(big.Int).SetString(h, 16)
				acc.Add(acc, x.Mul(x, big.NewInt(g)))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return n, acc.Text(16)
		}
		n, h := sum(conn)
		dn, dh := sum(direct)
		if n != 200000 || n != dn || h != dh {
			t.Fatalf("through the proxy %d rows checksum %s; direct %d rows checksum %s", n, h, dn, dh)
		}
	})

	t.Run("large values", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		// A 20 MB field in one DataRow, larger than any buffer on the way.
		var s string
		if err := conn.QueryRow(ctx, "SELECT repeat('ab', 10000000)").Scan(&s); err != nil {
			t.Fatal(err)
		}
		if len(s) != 20000000 || s[:4] != "abab" || s[len(s)-2:] != "ab" {
			t.Fatalf("got %d bytes", len(s))
		}
		// A 10 MB parameter in one Bind, and in one simple Query.
		blob := make([]byte, 10<<20)
		for i := range blob {
			blob[i] = byte(i * 7)
		}
		want := fmt.Sprintf("%x", md5.Sum(blob))
		var got string
		if err := conn.QueryRow(ctx, "SELECT md5($1::bytea)", blob).Scan(&got); err != nil || got != want {
			t.Fatalf("bytea parameter: md5 %s %v, want %s", got, err, want)
		}
		if err := conn.QueryRow(ctx, "SELECT md5($1::text)", pgx.QueryExecModeSimpleProtocol, s[:8<<20]).Scan(&got); err != nil ||
			got != fmt.Sprintf("%x", md5.Sum([]byte(s[:8<<20]))) {
			t.Fatalf("text in a simple query: md5 %s %v", got, err)
		}
	})

	t.Run("types", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
			t.Run(mode.String(), func(t *testing.T) {
				conn := connectMode(t, ctx, p.URL("postgres", "postgres"), mode)
				ts := time.Date(2001, 9, 9, 1, 46, 40, 123456000, time.UTC)
				bytea := []byte{0, 1, 2, 0xff, '\\', 'x'}
				num := pgtype.Numeric{}
				if err := num.Scan("12345678901234567890.0123456789"); err != nil {
					t.Fatal(err)
				}
				arr := []int32{1, -2, 3}
				texts := []string{"a", "b c", `"q"`, ""}
				// JSON goes as text: the simple protocol cannot encode a Go
				// map for a parameter of unknown type.
				js := `{"k": [1, "two", null], "n": {"x": true}}`
				wantJS := map[string]any{"k": []any{1.0, "two", nil}, "n": map[string]any{"x": true}}

				var (
					gotBytea []byte
					gotNum   pgtype.Numeric
					gotTS    time.Time
					gotArr   []int32
					gotTexts []string
					gotJS    map[string]any
					gotNull  *string
					gotNullI *int64
				)
				err := conn.QueryRow(ctx,
					"SELECT $1::bytea, $2::numeric, $3::timestamptz, $4::int4[], $5::text[], $6::jsonb, $7::text, NULL::int8",
					bytea, num, ts, arr, texts, js, nil,
				).Scan(&gotBytea, &gotNum, &gotTS, &gotArr, &gotTexts, &gotJS, &gotNull, &gotNullI)
				if err != nil {
					t.Fatal(err)
				}
				gotNumV, _ := gotNum.Value()
				if !reflect.DeepEqual(gotBytea, bytea) ||
					gotNumV != "12345678901234567890.0123456789" ||
					!gotTS.Equal(ts) ||
					!reflect.DeepEqual(gotArr, arr) ||
					!reflect.DeepEqual(gotTexts, texts) ||
					!reflect.DeepEqual(gotJS, wantJS) ||
					gotNull != nil || gotNullI != nil {
					t.Fatalf("round trip: %v %v %v %v %q %v %v %v", gotBytea, gotNumV, gotTS, gotArr, gotTexts, gotJS, gotNull, gotNullI)
				}
			})
		}
	})

	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		tbl := tableName(t)
		if _, err := conn.Exec(ctx, "CREATE TABLE "+tbl+" (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO "+tbl+" VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			sql  string
			args []any
			code string
		}{
			{"SELECT 1/0", nil, "22012"},
			{"SELECT 1/$1::int", []any{0}, "22012"},
			{"INSERT INTO " + tbl + " VALUES (1)", nil, "23505"},
			{"INSERT INTO " + tbl + " VALUES ($1)", []any{1}, "23505"},
			{"SELECT * FROM no_such_table_at_all", nil, "42P01"},
			{"SELEC 1", nil, "42601"},
			{"SELECT no_such_column FROM " + tbl, nil, "42703"},
		}
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
			for _, tt := range tests {
				if mode == pgx.QueryExecModeSimpleProtocol && len(tt.args) > 0 {
					continue
				}
				_, err := conn.Exec(ctx, tt.sql, append([]any{mode}, tt.args...)...)
				if sqlState(err) != tt.code {
					t.Errorf("%s %q: got %v, want SQLSTATE %s", mode, tt.sql, err, tt.code)
				}
				var pe *pgconn.PgError
				if errors.As(err, &pe) && (pe.Severity != "ERROR" || pe.Message == "") {
					t.Errorf("%q: severity %q message %q", tt.sql, pe.Severity, pe.Message)
				}
			}
		}
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("connection after errors: %v", err)
		}
	})

	t.Run("notice", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		var mu sync.Mutex
		var notices []*pgconn.Notice
		cfg, _ := pgx.ParseConfig(p.URL("postgres", "postgres"))
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			notices = append(notices, n)
			mu.Unlock()
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DO $$ BEGIN RAISE NOTICE 'hello %', 42; RAISE WARNING 'careful'; END $$`); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(notices) != 2 || notices[0].Message != "hello 42" || notices[0].Severity != "NOTICE" ||
			notices[1].Message != "careful" || notices[1].Severity != "WARNING" {
			t.Fatalf("notices: %+v", notices)
		}
	})

	t.Run("listen notify", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		listener := p.connect(t, ctx)
		notifier := p.connect(t, ctx)
		direct := connectDirect(t, ctx)
		channel := tableName(t)
		if _, err := listener.Exec(ctx, "LISTEN "+channel); err != nil {
			t.Fatal(err)
		}
		wait := func(want string) {
			t.Helper()
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			n, err := listener.WaitForNotification(wctx)
			if err != nil {
				t.Fatalf("waiting for %q: %v", want, err)
			}
			if n.Channel != channel || n.Payload != want {
				t.Fatalf("got %+v, want payload %q", n, want)
			}
		}
		// The listener is idle, waiting, when each notification is sent.
		if _, err := notifier.Exec(ctx, "SELECT pg_notify($1, 'through the proxy')", channel); err != nil {
			t.Fatal(err)
		}
		wait("through the proxy")
		if _, err := direct.Exec(ctx, "NOTIFY "+channel+", 'direct'"); err != nil {
			t.Fatal(err)
		}
		wait("direct")
		// The listener still runs queries, and notifications sent while it
		// does one still arrive.
		var one int
		if err := listener.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := direct.Exec(ctx, "NOTIFY "+channel+", 'third'"); err != nil {
			t.Fatal(err)
		}
		wait("third")
	})

	t.Run("empty query", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		for _, sql := range []string{";", "", " ; "} {
			results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
			if err != nil {
				t.Fatalf("%q: %v", sql, err)
			}
			// pgconn reports EmptyQueryResponse as a result with an empty
			// command tag.
			for _, r := range results {
				if r.CommandTag.String() != "" || r.Err != nil {
					t.Fatalf("%q: %+v", sql, r)
				}
			}
		}
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("cancel by context", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		cfg, _ := pgx.ParseConfig(p.URL("postgres", "postgres"))
		// pgconn's default on a done context is to close the socket; a
		// CancelRequest (through the proxy, with the key the proxy issued)
		// is what this test is about.
		cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 20 * time.Second}
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		qctx, cancel := context.WithTimeout(ctx, cancelAfter)
		defer cancel()
		start := time.Now()
		_, err = conn.Exec(qctx, "SELECT pg_sleep(30)")
		wantCode(t, err, "57014")
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("cancel took %v", d)
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT 7").Scan(&n); err != nil || n != 7 {
			t.Fatalf("same connection after cancel: %d %v", n, err)
		}
	})

	t.Run("transactions", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		other := p.connect(t, ctx)
		tbl := tableName(t)
		if _, err := conn.Exec(ctx, "CREATE TABLE "+tbl+" (v int)"); err != nil {
			t.Fatal(err)
		}
		count := func(c *pgx.Conn) int {
			var n int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		status := func(want byte) {
			t.Helper()
			if got := conn.PgConn().TxStatus(); got != want {
				t.Fatalf("TxStatus %c, want %c", got, want)
			}
		}
		status('I')
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		status('T')
		if _, err := tx.Exec(ctx, "INSERT INTO "+tbl+" VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		if n := count(other); n != 0 {
			t.Fatalf("uncommitted row visible to another session: %d", n)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		status('I')
		if n := count(other); n != 1 {
			t.Fatalf("after commit: %d", n)
		}

		tx, _ = conn.Begin(ctx)
		_, _ = tx.Exec(ctx, "INSERT INTO "+tbl+" VALUES (2)")
		_, err = tx.Exec(ctx, "SELECT 1/0")
		wantCode(t, err, "22012")
		status('E')
		_, err = tx.Exec(ctx, "SELECT 1")
		wantCode(t, err, "25P02")
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		status('I')
		if n := count(conn); n != 1 {
			t.Fatalf("after rollback: %d", n)
		}

		// Savepoints.
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+tbl+" VALUES (3)"); err != nil {
				return err
			}
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := sp.Exec(ctx, "INSERT INTO "+tbl+" VALUES (4)"); err != nil {
				return err
			}
			return sp.Rollback(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(other); n != 2 {
			t.Fatalf("after savepoint rollback and commit: %d", n)
		}
	})
}
