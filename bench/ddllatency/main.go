// Command ddllatency measures the latency of a CREATE TABLE + DROP TABLE
// pair through mzproxy, where both are catalog-managed DDL, against the same
// pair run directly on PostgreSQL, at several numbers of tables already
// present; with --shapes, each of CREATE/DROP TABLE, INDEX and VIEW and
// ALTER TABLE ADD/DROP COLUMN on its own (issue 16). The pairs alternate between the two endpoints so that both see
// the same machine load; only the ratio between them means anything on a
// shared machine.
//
// usage: go run ./bench/ddllatency --proxy URL --direct URL [--counts 100,1000] [--pairs 40]
//
//	go run ./bench/ddllatency --proxy URL --direct URL --shapes
//	    [--counts 100,1000,10000] [--samples 30,30,10] [--fill-batch 250]
//
// Each URL should name a database of its own: the tables it creates
// (fill_<n>) stay there, so that the next count starts from the previous.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	proxyURL := flag.String("proxy", "", "URL of a database through mzproxy")
	directURL := flag.String("direct", "", "URL of a database directly on PostgreSQL")
	counts := flag.String("counts", "100,1000", "numbers of existing tables to measure at, ascending")
	pairs := flag.Int("pairs", 40, "CREATE+DROP pairs per endpoint and count")
	shapes := flag.Bool("shapes", false, "time each DDL shape on its own instead of the CREATE+DROP pair")
	samples := flag.String("samples", "", "with --shapes: cycles per count, one per count (default 30 each)")
	fillBatch := flag.Int("fill-batch", 250, "with --shapes: CREATE TABLEs per transaction when filling")
	flag.Parse()
	if *proxyURL == "" || *directURL == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*proxyURL, *directURL, *counts, *pairs, *shapes, *samples, *fillBatch); err != nil {
		fmt.Fprintln(os.Stderr, "ddllatency:", err)
		os.Exit(1)
	}
}

type endpoint struct {
	name   string
	conn   *pgx.Conn
	tables int
}

func run(proxyURL, directURL, countList string, pairs int, shapes bool, sampleList string, fillBatch int) error {
	ctx := context.Background()
	var eps []*endpoint
	for _, e := range []struct{ name, url string }{{"mzproxy", proxyURL}, {"direct", directURL}} {
		conn, err := pgx.Connect(ctx, e.url)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'fill\_%'`).Scan(&n); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		eps = append(eps, &endpoint{name: e.name, conn: conn, tables: n})
	}
	if shapes {
		counts, err := intList(countList)
		if err != nil {
			return err
		}
		samples := make([]int, len(counts))
		for i := range samples {
			samples[i] = 30
		}
		if sampleList != "" {
			if samples, err = intList(sampleList); err != nil || len(samples) != len(counts) {
				return fmt.Errorf("--samples needs one number per count")
			}
		}
		return runShapes(ctx, eps, counts, samples, fillBatch)
	}
	fmt.Printf("| existing tables | mzproxy p50 | mzproxy p95 | direct p50 | direct p95 | p50 ratio | p95 ratio |\n")
	fmt.Printf("|---|---|---|---|---|---|---|\n")
	for _, f := range strings.Split(countList, ",") {
		count, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("bad count %q", f)
		}
		for _, ep := range eps {
			start := time.Now()
			from := ep.tables
			for ; ep.tables < count; ep.tables++ {
				if _, err := ep.conn.Exec(ctx, fmt.Sprintf("CREATE TABLE fill_%d (a int PRIMARY KEY, b text)", ep.tables)); err != nil {
					return fmt.Errorf("%s: filling: %w", ep.name, err)
				}
			}
			fmt.Fprintf(os.Stderr, "%s: %d tables created in %s\n", ep.name, ep.tables-from, time.Since(start).Round(time.Millisecond))
		}
		lat := map[string][]time.Duration{}
		for i := 0; i < pairs; i++ {
			// Alternate which endpoint goes first.
			order := eps
			if i%2 == 1 {
				order = []*endpoint{eps[1], eps[0]}
			}
			for _, ep := range order {
				start := time.Now()
				if _, err := ep.conn.Exec(ctx, "CREATE TABLE ddl_probe (a int PRIMARY KEY, b text)"); err != nil {
					return fmt.Errorf("%s: %w", ep.name, err)
				}
				if _, err := ep.conn.Exec(ctx, "DROP TABLE ddl_probe"); err != nil {
					return fmt.Errorf("%s: %w", ep.name, err)
				}
				lat[ep.name] = append(lat[ep.name], time.Since(start))
			}
		}
		mp50, mp95 := quantiles(lat["mzproxy"])
		dp50, dp95 := quantiles(lat["direct"])
		fmt.Printf("| %d | %s | %s | %s | %s | %.1fx | %.1fx |\n", count, ms(mp50), ms(mp95), ms(dp50), ms(dp95),
			mp50.Seconds()/dp50.Seconds(), mp95.Seconds()/dp95.Seconds())
	}
	return nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// quantiles returns the median and the 95th percentile (nearest rank).
func quantiles(d []time.Duration) (p50, p95 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.5) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.95)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
