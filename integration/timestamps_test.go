package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// freshDatabase creates a database for one test (through the direct
// connection) and returns its name; each database has its own oracle and
// catalog.
func freshDatabase(t *testing.T, ctx context.Context) string {
	t.Helper()
	name := fmt.Sprintf("ts_%s_%d", strings.ToLower(regexp.MustCompile(`\W`).ReplaceAllString(t.Name(), "_")), rand.Int31())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	admin := connectDirect(t, ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return name
}

func connectTo(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func simple(conn *pgx.Conn) pgx.QueryExecMode { return pgx.QueryExecModeSimpleProtocol }

// readTS is the oracle's read timestamp, read through a connection.
func readTS(t *testing.T, ctx context.Context, conn *pgx.Conn) uint64 {
	t.Helper()
	var ts int64
	if err := conn.QueryRow(ctx, "SELECT mzproxy.read_ts()").Scan(&ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts)
}

// TestManagedTable: a table created through the proxy is managed: its
// writes are versioned, writes that bypass the proxy are refused, and
// PostgreSQL's catalog shows only the user's columns.
func TestManagedTable(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	for _, sql := range []string{
		"CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL DEFAULT 'x', qty int CHECK (qty >= 0))",
		"INSERT INTO items VALUES (1, 'a', 1), (2, 'b', 2)",
		"UPDATE items SET qty = qty + 10 WHERE id = 1",
		"DELETE FROM items WHERE id = 2",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var managed int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM mzproxy.catalog WHERE name = 'items' AND dropped_ts IS NULL").Scan(&managed); err != nil {
		t.Fatal(err)
	}
	if managed != 1 {
		t.Fatalf("items is not in mzproxy's catalog (%d rows)", managed)
	}
	var cols []string
	rows, _ := conn.Query(ctx, "SELECT column_name FROM information_schema.columns WHERE table_name = 'items' ORDER BY ordinal_position")
	for rows.Next() {
		var c string
		_ = rows.Scan(&c)
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cols, []string{"id", "name", "qty"}) {
		t.Fatalf("columns %v, want only the user's", cols)
	}
	// A duplicate key is PostgreSQL's own error, and writes nothing.
	_, err := conn.Exec(ctx, "INSERT INTO items VALUES (1, 'dup', 0)")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" || !strings.Contains(pe.Message, `"items_pkey"`) {
		t.Fatalf("duplicate insert: %v", err)
	}
	// Bypassing the proxy is refused.
	direct := connectTo(t, ctx, directURL("postgres", db))
	_, err = direct.Exec(ctx, "INSERT INTO items VALUES (9, 'bypass', 0)")
	if !errors.As(err, &pe) || pe.Code != "MZ002" {
		t.Fatalf("direct insert into a managed table: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT qty FROM items WHERE id = 1").Scan(&n); err != nil || n != 11 {
		t.Fatalf("qty %d, %v", n, err)
	}
}

// TestTimeTravel: with history retained, AS OF each recorded timestamp
// returns exactly the table as it was then, against a model the test keeps
// of random inserts, updates and deletes (duplicate rows included).
func TestTimeTravel(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE tt (k int, v int)"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	var model []int // values of v; k is v % 5
	type snapshot struct {
		ts   uint64
		rows []string
	}
	render := func(vals []int) []string {
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = fmt.Sprintf("%d:%d", v%5, v)
		}
		slices.Sort(out)
		return out
	}
	var history []snapshot
	for i := 0; i < 60; i++ {
		var sql string
		switch op := rng.Intn(4); {
		case op <= 1 || len(model) == 0:
			v := rng.Intn(20)
			sql = fmt.Sprintf("INSERT INTO tt VALUES (%d, %d), (%d, %d)", v%5, v, v%5, v)
			model = append(model, v, v)
		case op == 2:
			k := rng.Intn(5)
			sql = fmt.Sprintf("UPDATE tt SET v = v + 5 WHERE k = %d", k)
			for j, v := range model {
				if v%5 == k {
					model[j] = v + 5
				}
			}
		default:
			k := rng.Intn(5)
			sql = fmt.Sprintf("DELETE FROM tt WHERE k = %d", k)
			model = slices.DeleteFunc(model, func(v int) bool { return v%5 == k })
		}
		if _, err := conn.Exec(ctx, sql, simple(conn)); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		history = append(history, snapshot{readTS(t, ctx, conn), render(model)})
	}
	for _, h := range history {
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT k, v FROM tt AS OF %d", h.ts), simple(conn))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var k, v int
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%d:%d", k, v))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("AS OF %d: %v", h.ts, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, h.rows) {
			t.Fatalf("AS OF %d:\n got %v\nwant %v", h.ts, got, h.rows)
		}
	}
}

// TestReadBelowSince: a read before a table's since fails with
// Materialize's message; AS OF AT LEAST reads at the since instead.
func TestReadBelowSince(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE s (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO s VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, "SELECT * FROM s AS OF 1", simple(conn))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "XX000" || !strings.HasPrefix(pe.Message, "Timestamp (1) is not valid for all inputs: [Antichain { elements: [") {
		t.Fatalf("read below since: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM s AS OF AT LEAST 1", simple(conn)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		// The since is the table's creation, before the insert.
		t.Fatalf("AS OF AT LEAST 1 saw %d rows, want the table at its since (empty)", n)
	}
}

var queryTimestamp = regexp.MustCompile(`(?m)^\s+query timestamp:\s*(\d+)`)

// TestLinearizability: a row inserted through one proxy and acknowledged is
// seen by the next read through another proxy process, every time; EXPLAIN
// TIMESTAMP through the second proxy reports a query timestamp at least the
// write's.
func TestLinearizability(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	a, b := startProxy(t), startProxy(t)
	writer := connectTo(t, ctx, a.URL("postgres", db))
	reader := connectTo(t, ctx, b.URL("postgres", db))
	if _, err := writer.Exec(ctx, "CREATE TABLE lin (i int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	rounds := 1000
	if testing.Short() {
		rounds = 100
	}
	for i := 1; i <= rounds; i++ {
		if _, err := writer.Exec(ctx, "INSERT INTO lin VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := reader.QueryRow(ctx, "SELECT count(*) FROM lin").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != i {
			t.Fatalf("round %d: the reader saw %d rows", i, n)
		}
		if i%100 == 0 {
			writeTS := readTS(t, ctx, writer)
			var text string
			if err := reader.QueryRow(ctx, "EXPLAIN TIMESTAMP FOR SELECT count(*) FROM lin", simple(reader)).Scan(&text); err != nil {
				t.Fatal(err)
			}
			m := queryTimestamp.FindStringSubmatch(text)
			if m == nil {
				t.Fatalf("EXPLAIN TIMESTAMP output does not match %s:\n%s", queryTimestamp, text)
			}
			qts, _ := strconv.ParseUint(m[1], 10, 64)
			if qts < writeTS {
				t.Fatalf("query timestamp %d is before the write at %d", qts, writeTS)
			}
		}
	}
}

// TestDDLSeenByAnotherProxy: a table created through one proxy is read,
// written and time-travelled through another on its next statement.
func TestDDLSeenByAnotherProxy(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	a, b := startProxy(t), startProxy(t)
	ca := connectTo(t, ctx, a.URL("postgres", db))
	cb := connectTo(t, ctx, b.URL("postgres", db))
	// b looks at the catalog first, so that it has an old snapshot.
	if _, err := cb.Exec(ctx, "SELECT 1 AS OF AT LEAST 0", simple(cb)); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Exec(ctx, "CREATE TABLE shared_t (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Exec(ctx, "INSERT INTO shared_t VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	var x int
	q := fmt.Sprintf("SELECT x FROM shared_t AS OF %d", readTS(t, ctx, cb))
	if err := cb.QueryRow(ctx, q, simple(cb)).Scan(&x); err != nil || x != 7 {
		t.Fatalf("AS OF through the second proxy: %d, %v", x, err)
	}
}

// TestPreparedAfterAlter: a prepared statement whose table changed shape
// through another proxy is refused as PostgreSQL refuses it (0A000), never
// answered with the old shape; prepared again, it reads the new one.
func TestPreparedAfterAlter(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	a, b := startProxy(t), startProxy(t)
	ca := connectTo(t, ctx, a.URL("postgres", db))
	cb := connectTo(t, ctx, b.URL("postgres", db))
	if _, err := ca.Exec(ctx, "CREATE TABLE pa (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Exec(ctx, "INSERT INTO pa VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	pc := ca.PgConn()
	if _, err := pc.Prepare(ctx, "q", "SELECT * FROM pa", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Exec(ctx, "ALTER TABLE pa ADD COLUMN y int DEFAULT 5"); err != nil {
		t.Fatal(err)
	}
	_, err := pc.ExecPrepared(ctx, "q", nil, nil, nil).Close()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" {
		t.Fatalf("prepared statement after ALTER TABLE: %v, want 0A000", err)
	}
	if _, err := pc.Exec(ctx, "DEALLOCATE q").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Prepare(ctx, "q", "SELECT * FROM pa", nil); err != nil {
		t.Fatal(err)
	}
	res := pc.ExecPrepared(ctx, "q", nil, nil, nil).Read()
	if res.Err != nil || len(res.FieldDescriptions) != 2 || len(res.Rows) != 1 || string(res.Rows[0][1]) != "5" {
		t.Fatalf("after re-preparing: %v, %d columns, rows %q", res.Err, len(res.FieldDescriptions), res.Rows)
	}
	// The history has the new column too, for reads at a timestamp.
	var y int
	q := fmt.Sprintf("SELECT y FROM pa AS OF %d", readTS(t, ctx, ca))
	if err := ca.QueryRow(ctx, q, simple(ca)).Scan(&y); err != nil || y != 5 {
		t.Fatalf("AS OF after ALTER: %d, %v", y, err)
	}
}

// TestAsOfExtendedProtocol: AS OF and mz_now() over the extended protocol
// (pgx's default), with parameters of the client's own; a prepared
// statement reads at a fresh timestamp each time it is executed.
func TestAsOfExtendedProtocol(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	conn := connectTo(t, ctx, p.URL("postgres", db))
	if _, err := conn.Exec(ctx, "CREATE TABLE ex (k int, v text)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO ex VALUES (1, 'one'), (2, 'two')"); err != nil {
		t.Fatal(err)
	}
	before := readTS(t, ctx, conn)
	if _, err := conn.Exec(ctx, "UPDATE ex SET v = 'uno' WHERE k = $1", 1); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT v FROM ex WHERE k = $1 AS OF %d", before), 1).Scan(&v); err != nil || v != "one" {
		t.Fatalf("AS OF before the update: %q, %v", v, err)
	}
	// A prepared statement with mz_now(): each execution reads the present.
	pc := conn.PgConn()
	sd, err := pc.Prepare(ctx, "now", "SELECT count(*) FROM ex WHERE k >= $1 AND mz_now() > 0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sd.ParamOIDs) != 1 {
		t.Fatalf("the client sees %d parameters, want its own 1", len(sd.ParamOIDs))
	}
	count := func() string {
		res := pc.ExecPrepared(ctx, "now", [][]byte{[]byte("0")}, nil, nil).Read()
		if res.Err != nil || len(res.Rows) != 1 {
			t.Fatalf("executing: %v", res.Err)
		}
		return string(res.Rows[0][0])
	}
	if got := count(); got != "2" {
		t.Fatalf("count %s, want 2", got)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO ex VALUES (3, 'three')"); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != "3" {
		t.Fatalf("count after an insert %s, want 3 (a fresh timestamp per execution)", got)
	}
	if got := strings.Count(p.log.String(), "panic"); got != 0 {
		t.Fatalf("%d panics in the log", got)
	}
}

// TestDatabaseRecreated: a database dropped and made again under the same
// name gets mzproxy's schema again on the next session.
func TestDatabaseRecreated(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	write := func() error {
		conn, err := pgx.Connect(ctx, p.URL("postgres", db))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE again (x int); INSERT INTO again VALUES (1)")
		return err
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	admin := connectDirect(t, ctx)
	for _, sql := range []string{"DROP DATABASE " + db + " WITH (FORCE)", "CREATE DATABASE " + db} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := write(); err != nil {
		t.Fatalf("after the database was made again: %v", err)
	}
}
