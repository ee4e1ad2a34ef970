package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// shapeCycle is one sample of every DDL shape issue 16 names, in an order
// where each statement finds what it needs: each is timed on its own.
var shapeCycle = []struct{ name, sql string }{
	{"CREATE TABLE", "CREATE TABLE ddl_probe (a int PRIMARY KEY, b text)"},
	{"CREATE INDEX", "CREATE INDEX ddl_probe_b ON ddl_probe (b)"},
	{"ALTER TABLE ADD COLUMN", "ALTER TABLE ddl_probe ADD COLUMN c int"},
	{"ALTER TABLE DROP COLUMN", "ALTER TABLE ddl_probe DROP COLUMN c"},
	{"CREATE VIEW", "CREATE VIEW ddl_probe_v AS SELECT a, b FROM ddl_probe"},
	{"DROP VIEW", "DROP VIEW ddl_probe_v"},
	{"DROP INDEX", "DROP INDEX ddl_probe_b"},
	{"DROP TABLE", "DROP TABLE ddl_probe"},
}

// runShapes times each statement of shapeCycle at each count of existing
// tables, samples[i] cycles at counts[i], the two endpoints alternating
// cycle by cycle, and prints one row per count and statement.
func runShapes(ctx context.Context, eps []*endpoint, counts, samples []int, batch int) error {
	for i, count := range counts {
		for _, ep := range eps {
			if err := fillBatched(ctx, ep, count, batch); err != nil {
				return err
			}
		}
		// One table per count, after the filling's lines (on stderr).
		fmt.Printf("\n| existing tables | statement | samples | mzproxy p50 | mzproxy p95 | direct p50 | direct p95 | p50 ratio | p95 ratio |\n")
		fmt.Printf("|---|---|---|---|---|---|---|---|---|\n")
		lat := map[string]map[string][]time.Duration{}
		for _, ep := range eps {
			lat[ep.name] = map[string][]time.Duration{}
		}
		for s := 0; s < samples[i]; s++ {
			order := eps
			if s%2 == 1 {
				order = []*endpoint{eps[1], eps[0]}
			}
			for _, ep := range order {
				for _, st := range shapeCycle {
					start := time.Now()
					if _, err := ep.conn.Exec(ctx, st.sql); err != nil {
						return fmt.Errorf("%s: %s: %w", ep.name, st.sql, err)
					}
					lat[ep.name][st.name] = append(lat[ep.name][st.name], time.Since(start))
				}
			}
		}
		for _, st := range shapeCycle {
			mp50, mp95 := quantiles(lat["mzproxy"][st.name])
			dp50, dp95 := quantiles(lat["direct"][st.name])
			fmt.Printf("| %d | %s | %d | %s | %s | %s | %s | %.1fx | %.1fx |\n", count, st.name, samples[i],
				ms(mp50), ms(mp95), ms(dp50), ms(dp95), mp50.Seconds()/dp50.Seconds(), mp95.Seconds()/dp95.Seconds())
		}
	}
	return nil
}

// fillBatched creates tables fill_<n> until the endpoint has count of
// them, batch CREATE TABLE statements per transaction (one query string,
// BEGIN ... COMMIT, so one round trip and one commit per batch). Batches
// keep each transaction's locks (four relations per table) well under
// PostgreSQL's lock table.
func fillBatched(ctx context.Context, ep *endpoint, count, batch int) error {
	start := time.Now()
	from := ep.tables
	for ep.tables < count {
		n := min(batch, count-ep.tables)
		var sql strings.Builder
		sql.WriteString("BEGIN;")
		for j := ep.tables; j < ep.tables+n; j++ {
			fmt.Fprintf(&sql, "CREATE TABLE fill_%d (a int PRIMARY KEY, b text);", j)
		}
		sql.WriteString("COMMIT;")
		if _, err := ep.conn.Exec(ctx, sql.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("%s: filling: %w", ep.name, err)
		}
		ep.tables += n
	}
	if d := time.Since(start); ep.tables > from {
		fmt.Fprintf(os.Stderr, "%s: %d tables created in %s (%.1f ms each, %d per transaction)\n", ep.name, ep.tables-from,
			d.Round(time.Millisecond), float64(d.Microseconds())/1000/float64(ep.tables-from), batch)
	}
	return nil
}
