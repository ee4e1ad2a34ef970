// Command ddlwall times DDL statements, each on its own, against several
// endpoints in one run, the endpoints alternating cycle by cycle so that
// all see the same load: where an autocommit DDL's wall time goes through
// mzproxy (docs/ddl-cost.md, "Session 23"). An endpoint may prefix each
// statement with SQL of its own in the same simple Query (one implicit
// transaction): e.g. the pending write slot set by hand on a managed
// database directly, to time the backend's part of the proxy's DDL
// without the proxy's hop.
//
// usage:
//
//	go run ./bench/ddlwall -eps 'direct@@postgres://...;;proxy@@postgres://...;;byhand@@postgres://...@@SELECT ...; ' \
//	    [-stmts 'ALTER TABLE ddl_probe ADD COLUMN c int|ALTER TABLE ddl_probe DROP COLUMN c'] [-n 600] [-warm 20]
//
// Each endpoint's table ddl_probe is made again (-reset) before the
// first cycle and every -every cycles: a table takes at most 1,600
// columns, dropped ones included. Prints p50, p95 and the mean per
// statement and endpoint.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

type endpoint struct {
	name, prefix string
	conn         *pgx.Conn
	lat          [][]time.Duration
}

func main() {
	eps := flag.String("eps", "", "endpoints, name@@url[@@prefix], separated by ;;")
	n := flag.Int("n", 200, "timed cycles")
	warm := flag.Int("warm", 20, "untimed cycles first")
	stmts := flag.String("stmts", "ALTER TABLE ddl_probe ADD COLUMN c int|ALTER TABLE ddl_probe DROP COLUMN c", "a cycle's statements, separated by |")
	reset := flag.String("reset", "DROP TABLE IF EXISTS ddl_probe; CREATE TABLE ddl_probe (a int PRIMARY KEY, b text)", "statements that make the table again, separated by ;")
	every := flag.Int("every", 500, "cycles between resets")
	flag.Parse()
	if err := run(*eps, strings.Split(*stmts, "|"), strings.Split(*reset, ";"), *n, *warm, *every); err != nil {
		fmt.Fprintln(os.Stderr, "ddlwall:", err)
		os.Exit(1)
	}
}

func run(eps string, stmts, reset []string, n, warm, every int) error {
	ctx := context.Background()
	var es []*endpoint
	for _, spec := range strings.Split(eps, ";;") {
		p := strings.SplitN(spec, "@@", 3)
		if len(p) < 2 {
			return fmt.Errorf("endpoint %q: want name@@url[@@prefix]", spec)
		}
		conn, err := pgx.Connect(ctx, p[1])
		if err != nil {
			return fmt.Errorf("%s: %w", p[0], err)
		}
		defer conn.Close(ctx)
		e := &endpoint{name: p[0], conn: conn, lat: make([][]time.Duration, len(stmts))}
		if len(p) > 2 {
			e.prefix = p[2]
		}
		es = append(es, e)
	}
	for i := 0; i < warm+n; i++ {
		for k := range es {
			e := es[(i+k)%len(es)]
			if i%every == 0 {
				for _, r := range reset {
					if _, err := e.conn.Exec(ctx, e.prefix+r); err != nil {
						return fmt.Errorf("%s: %s: %w", e.name, r, err)
					}
				}
			}
			for j, s := range stmts {
				start := time.Now()
				if _, err := e.conn.Exec(ctx, e.prefix+s); err != nil {
					return fmt.Errorf("%s: %s: %w", e.name, s, err)
				}
				if i >= warm {
					e.lat[j] = append(e.lat[j], time.Since(start))
				}
			}
		}
	}
	for j, s := range stmts {
		for _, e := range es {
			l := e.lat[j]
			sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
			var sum time.Duration
			for _, d := range l {
				sum += d
			}
			fmt.Printf("%-12s %-40s p50 %7.3f ms  p95 %7.3f ms  mean %7.3f ms\n", e.name, s,
				ms(l[len(l)/2]), ms(l[len(l)*95/100]), ms(sum/time.Duration(len(l))))
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
