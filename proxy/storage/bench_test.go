package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkWrite compares single-row writes to a plain table with the same
// writes to a managed table through begin_write (history trigger included).
// Each op is one transaction: BEGIN; [begin_write;] stmt; COMMIT, sent as one
// pipelined batch so round trips do not dominate.
//
//	go test ./proxy/storage/ -run '^$' -bench Write -benchtime 3000x
func BenchmarkWrite(b *testing.B) {
	_, conn := installedDB(b)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE plain_k (id int PRIMARY KEY, v text, n int);
		CREATE TABLE plain_nk (id int, v text, n int)`); err != nil {
		b.Fatal(err)
	}
	inWrite(b, conn, `CREATE TABLE man_k (id int PRIMARY KEY, v text, n int)`, `CREATE TABLE man_nk (id int, v text, n int)`)

	run := func(b *testing.B, managed bool, stmt func(i int) (string, []any)) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			batch := &pgx.Batch{}
			batch.Queue("BEGIN")
			if managed {
				batch.Queue(BeginWriteSQL)
			}
			sql, args := stmt(i)
			batch.Queue(sql, args...)
			batch.Queue("COMMIT")
			if err := conn.SendBatch(ctx, batch).Close(); err != nil {
				conn.Exec(ctx, "ROLLBACK")
				b.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		managed bool
		table   string
	}{
		{"plain/pk", false, "plain_k"}, {"managed/pk", true, "man_k"},
		{"plain/nokey", false, "plain_nk"}, {"managed/nokey", true, "man_nk"},
	} {
		next := 0 // ids stay distinct over the benchmark's repeated runs
		b.Run("insert/"+tc.name, func(b *testing.B) {
			run(b, tc.managed, func(int) (string, []any) {
				next++
				return "INSERT INTO " + tc.table + " VALUES ($1, 'value', $1)", []any{next}
			})
		})
	}
	// Updates by key of rows that exist (the inserts above made them).
	for _, tc := range []struct {
		name    string
		managed bool
		table   string
	}{
		{"plain/pk", false, "plain_k"}, {"managed/pk", true, "man_k"},
	} {
		b.Run("update/"+tc.name, func(b *testing.B) {
			if _, err := conn.Exec(ctx, "ANALYZE "+tc.table); err != nil {
				b.Fatal(err)
			}
			var lo int
			conn.QueryRow(ctx, "SELECT min(id) FROM "+tc.table).Scan(&lo)
			run(b, tc.managed, func(i int) (string, []any) {
				return "UPDATE " + tc.table + " SET n = n + 1 WHERE id = $1", []any{lo + i%1000}
			})
		})
	}
	b.Run("begin_write_only", func(b *testing.B) {
		run(b, true, func(int) (string, []any) { return "SELECT 1", nil })
	})
}

// BenchmarkWriteRatio interleaves plain and managed single-row write
// transactions (so load from elsewhere on the machine hits both alike) and
// reports median latencies and their ratio.
//
//	go test ./proxy/storage/ -run '^$' -bench WriteRatio -benchtime 2000x
func BenchmarkWriteRatio(b *testing.B) {
	_, conn := installedDB(b)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE plain_k (id int PRIMARY KEY, v text, n int)`); err != nil {
		b.Fatal(err)
	}
	inWrite(b, conn, `CREATE TABLE man_k (id int PRIMARY KEY, v text, n int)`)
	exec := func(managed bool, sql string, args ...any) time.Duration {
		start := time.Now()
		batch := &pgx.Batch{}
		batch.Queue("BEGIN")
		if managed {
			batch.Queue(BeginWriteSQL)
		}
		batch.Queue(sql, args...)
		batch.Queue("COMMIT")
		if err := conn.SendBatch(ctx, batch).Close(); err != nil {
			conn.Exec(ctx, "ROLLBACK")
			b.Fatal(err)
		}
		return time.Since(start)
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	next := 0
	for _, op := range []string{"insert", "update"} {
		b.Run(op, func(b *testing.B) {
			// bw: the plain table, but inside a begin_write transaction:
			// separates the commit-slot cost from the trigger cost.
			var plain, bw, managed []time.Duration
			for i := 0; i < b.N; i++ {
				next++
				if op == "insert" {
					plain = append(plain, exec(false, "INSERT INTO plain_k VALUES ($1, 'value', 0)", next))
					bw = append(bw, exec(true, "INSERT INTO plain_k VALUES ($1, 'value', 0)", -next))
					managed = append(managed, exec(true, "INSERT INTO man_k VALUES ($1, 'value', 0)", next))
				} else {
					plain = append(plain, exec(false, "UPDATE plain_k SET n = n + 1 WHERE id = $1", 1+next%500))
					bw = append(bw, exec(true, "UPDATE plain_k SET n = n + 1 WHERE id = $1", -(1+next%500)))
					managed = append(managed, exec(true, "UPDATE man_k SET n = n + 1 WHERE id = $1", 1+next%500))
				}
			}
			p, w, m := median(plain), median(bw), median(managed)
			b.ReportMetric(p, "plain-ns/tx")
			b.ReportMetric(w, "begin_write-ns/tx")
			b.ReportMetric(m, "managed-ns/tx")
			b.ReportMetric(m/p, "ratio")
		})
	}
}

// BenchmarkBeginWriteIncarnation compares begin_write() with the fenced
// begin_write(incarnation) (one more lookup of the incarnation's row), each
// in an otherwise empty pipelined transaction, interleaved (the oracle rows
// bloat over a run) and reported as two medians.
//
//	go test ./proxy/storage/ -run '^$' -bench BeginWriteIncarnation -benchtime 3000x
func BenchmarkBeginWriteIncarnation(b *testing.B) {
	_, conn := installedDB(b)
	ctx := context.Background()
	var id int64
	if err := conn.QueryRow(ctx, "SELECT r_id FROM "+Schema+".register(0, 60000, 'bench', 0)").Scan(&id); err != nil {
		b.Fatal(err)
	}
	sqls := []string{BeginWriteSQL, BeginWriteFor(id)}
	times := [2][]time.Duration{}
	for i := 0; i < b.N; i++ {
		for k, sql := range sqls {
			start := time.Now()
			batch := &pgx.Batch{}
			batch.Queue("BEGIN")
			batch.Queue(sql)
			batch.Queue("COMMIT")
			if err := conn.SendBatch(ctx, batch).Close(); err != nil {
				b.Fatal(err)
			}
			times[k] = append(times[k], time.Since(start))
		}
	}
	for k, name := range []string{"unfenced-µs", "incarnation-µs"} {
		slices.Sort(times[k])
		b.ReportMetric(float64(times[k][len(times[k])/2].Microseconds()), name)
	}
}

// BenchmarkAutocommitWriteRatio times the transaction mzproxy sends for an
// autocommit write, OpenWriteFor(inc) and the client's statement as one
// implicit transaction (one pipelined batch, one Sync, no BEGIN or COMMIT),
// against the same statement on a plain table of the same shape,
// interleaved so load from elsewhere on the machine hits both alike.
// Reports median latencies and their ratio for an UPDATE of a random row
// of 1,000, an INSERT of a new row, and an UPDATE of a one-row counter.
//
//	go test ./proxy/storage/ -run '^$' -bench AutocommitWriteRatio -benchtime 3000x
func BenchmarkAutocommitWriteRatio(b *testing.B) {
	_, conn := installedDB(b)
	ctx := context.Background()
	var inc int64
	if err := conn.QueryRow(ctx, "SELECT r_id FROM "+Schema+".register(0, 3600000, 'bench', 0)").Scan(&inc); err != nil {
		b.Fatal(err)
	}
	for _, prefix := range []string{"plain", "managed"} {
		sql := fmt.Sprintf(`CREATE TABLE %[1]s_rows (id int PRIMARY KEY, v int);
			INSERT INTO %[1]s_rows SELECT g, 0 FROM generate_series(1, 1000) g;
			CREATE TABLE %[1]s_new (id int PRIMARY KEY, v int);
			CREATE TABLE %[1]s_counter (id int PRIMARY KEY, v int);
			INSERT INTO %[1]s_counter VALUES (1, 0)`, prefix)
		if prefix == "plain" {
			if _, err := conn.Exec(ctx, sql); err != nil {
				b.Fatal(err)
			}
		} else {
			inWrite(b, conn, sql)
		}
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		b.Fatal(err)
	}
	exec := func(managed bool, sql string, args ...any) time.Duration {
		start := time.Now()
		batch := &pgx.Batch{}
		if managed {
			batch.Queue(OpenWriteFor(inc))
		}
		batch.Queue(sql, args...)
		if err := conn.SendBatch(ctx, batch).Close(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	ops := []struct {
		name string
		sql  func(table string, i int) (string, []any)
	}{
		{"update", func(p string, i int) (string, []any) {
			return "UPDATE " + p + "_rows SET v = v + 1 WHERE id = $1", []any{1 + rand.IntN(1000)}
		}},
		{"insert", func(p string, i int) (string, []any) { return "INSERT INTO " + p + "_new VALUES ($1, 0)", []any{i} }},
		{"counter", func(p string, i int) (string, []any) {
			return "UPDATE " + p + "_counter SET v = v + 1 WHERE id = 1", nil
		}},
	}
	next := 0 // new ids stay distinct over the benchmark's repeated runs
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			var plain, managed []time.Duration
			for i := 0; i < b.N; i++ {
				next++
				sql, args := op.sql("plain", next)
				plain = append(plain, exec(false, sql, args...))
				sql, args = op.sql("managed", next)
				managed = append(managed, exec(true, sql, args...))
			}
			p, m := medianNs(plain), medianNs(managed)
			b.ReportMetric(p/1000, "plain-µs")
			b.ReportMetric(m/1000, "managed-µs")
			b.ReportMetric(m/p, "ratio")
		})
	}
}

// medianNs is the median of d in nanoseconds (d is sorted in place).
func medianNs(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Nanoseconds())
}

// BenchmarkBlockWriteRatio times a TPC-B-like transaction block as mzproxy
// sends it (BEGIN; OpenWriteDeferredFor(inc); three UPDATEs by key, a read
// and an INSERT over four managed tables, the last without a key; COMMIT,
// whose deferred trigger stamps the history) against the same block on
// plain tables of the same shape, and on managed tables of a database at
// the previous schema version (what the last version changed), interleaved
// so load from elsewhere on the machine hits all alike. Each block is one
// pipelined batch. Reports median latencies and the ratios to plain.
//
//	go test ./proxy/storage/ -run '^$' -bench BlockWriteRatio -benchtime 2000x
func BenchmarkBlockWriteRatio(b *testing.B) {
	_, conn := installedDB(b)
	prev := connect(b, newDB(b))
	ctx := context.Background()
	if _, err := prev.Exec(ctx, strings.ReplaceAll(strings.Join(migrations[:len(migrations)-1], "\n"), "@SCHEMA@", Schema)); err != nil {
		b.Fatal(err)
	}
	const accounts, tellers, branches = 10000, 10, 1
	tables := func(prefix string) string {
		return fmt.Sprintf(`CREATE TABLE %[1]s_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84));
			INSERT INTO %[1]s_accounts SELECT g, 1, 0, '' FROM generate_series(1, %[2]d) g;
			CREATE TABLE %[1]s_tellers (tid int PRIMARY KEY, bid int, tbalance int, filler char(84));
			INSERT INTO %[1]s_tellers SELECT g, 1, 0, '' FROM generate_series(1, %[3]d) g;
			CREATE TABLE %[1]s_branches (bid int PRIMARY KEY, bbalance int, filler char(88));
			INSERT INTO %[1]s_branches SELECT g, 0, '' FROM generate_series(1, %[4]d) g;
			CREATE TABLE %[1]s_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))`,
			prefix, accounts, tellers, branches)
	}
	if _, err := conn.Exec(ctx, tables("plain")); err != nil {
		b.Fatal(err)
	}
	incs := map[*pgx.Conn]int64{}
	for _, c := range []*pgx.Conn{conn, prev} {
		var inc int64
		if err := c.QueryRow(ctx, "SELECT r_id FROM "+Schema+".register(0, 3600000, 'bench', 0)").Scan(&inc); err != nil {
			b.Fatal(err)
		}
		incs[c] = inc
		inWrite(b, c, tables("managed"))
		if _, err := c.Exec(ctx, "VACUUM ANALYZE"); err != nil {
			b.Fatal(err)
		}
	}
	block := func(c *pgx.Conn, p string) time.Duration {
		aid, tid, bid, delta := 1+rand.IntN(accounts), 1+rand.IntN(tellers), 1+rand.IntN(branches), rand.IntN(10001)-5000
		start := time.Now()
		batch := &pgx.Batch{}
		batch.Queue("BEGIN")
		if p == "managed" {
			batch.Queue(OpenWriteDeferredFor(incs[c]))
		}
		batch.Queue("UPDATE "+p+"_accounts SET abalance = abalance + $1 WHERE aid = $2", delta, aid)
		batch.Queue("SELECT abalance FROM "+p+"_accounts WHERE aid = $1", aid)
		batch.Queue("UPDATE "+p+"_tellers SET tbalance = tbalance + $1 WHERE tid = $2", delta, tid)
		batch.Queue("UPDATE "+p+"_branches SET bbalance = bbalance + $1 WHERE bid = $2", delta, bid)
		batch.Queue("INSERT INTO "+p+"_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
			tid, bid, aid, delta)
		batch.Queue("COMMIT")
		if err := c.SendBatch(ctx, batch).Close(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var plain, managed, before []time.Duration
	for i := 0; i < b.N; i++ {
		plain = append(plain, block(conn, "plain"))
		managed = append(managed, block(conn, "managed"))
		before = append(before, block(prev, "managed"))
	}
	p, m, v := medianNs(plain), medianNs(managed), medianNs(before)
	b.ReportMetric(p/1000, "plain-µs")
	b.ReportMetric(m/1000, "managed-µs")
	b.ReportMetric(v/1000, "previous-version-µs")
	b.ReportMetric(m/p, "ratio")
	b.ReportMetric(v/p, "previous-ratio")
}
