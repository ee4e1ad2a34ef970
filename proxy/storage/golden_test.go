package storage

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/jackc/pgx/v5"
)

// TestGeneratedSQL records what the event triggers generate for a few table
// shapes (history table, indexes, trigger functions) as golden files, so a
// change to the generator shows up as a reviewable diff. Regenerate with
//
//	go test ./proxy/storage/ -run GeneratedSQL -rewrite
//
// Commands:
//
//	ddl            run the input through a proxy write transaction, then build every history
//	history <t>    the history table of public.<t>: columns and indexes
//	functions <t>  the trigger functions of public.<t>
func TestGeneratedSQL(t *testing.T) {
	datadriven.Walk(t, "testdata/generated", func(t *testing.T, path string) {
		_, conn := installedDB(t)
		ctx := context.Background()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			hist := func() (string, int64) {
				if len(d.CmdArgs) != 1 {
					d.Fatalf(t, "%s needs a table name", d.Cmd)
				}
				cat, err := LoadCatalog(ctx, conn)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				o := cat.ByName("public", d.CmdArgs[0].Key)
				if o == nil {
					d.Fatalf(t, "%s is not managed", d.CmdArgs[0].Key)
				}
				return o.History, o.ID
			}
			switch d.Cmd {
			case "ddl":
				tx, err := conn.Begin(ctx)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				defer tx.Rollback(ctx)
				if _, err := tx.Exec(ctx, BeginWriteSQL); err != nil {
					d.Fatalf(t, "%v", err)
				}
				if _, err := tx.Exec(ctx, d.Input); err != nil {
					return "error: " + err.Error() + "\n"
				}
				// The history a table gets at its first write.
				buildAll(t, tx, true)
				if err := tx.Commit(ctx); err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			case "history":
				h, _ := hist()
				var b strings.Builder
				rows := collectOrdered(t, d, conn, `SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
					FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, h)
				fmt.Fprintf(&b, "%s (%s)\n", h, strings.Join(rows, ", "))
				var ixs []string
				for _, ix := range collect(t, d, conn, `SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = $1::regclass`, h) {
					// Mirrors are named after the user index's oid, which varies.
					ixs = append(ixs, userIndexOID.ReplaceAllString(ix, "_k<oid>"))
				}
				slices.Sort(ixs)
				for _, ix := range ixs {
					fmt.Fprintln(&b, ix)
				}
				return b.String()
			case "functions":
				_, id := hist()
				var b strings.Builder
				for _, suffix := range []string{"ins", "upd", "del", "trunc"} {
					for _, def := range collect(t, d, conn, `SELECT pg_get_functiondef(p.oid) FROM pg_proc p
						WHERE p.pronamespace = $1::regnamespace AND p.proname = $2`, Schema, fmt.Sprintf("h%d_%s", id, suffix)) {
						fmt.Fprintln(&b, strings.TrimSpace(def))
					}
				}
				return b.String()
			default:
				d.Fatalf(t, "unknown command %s", d.Cmd)
				return ""
			}
		})
	})
}

var userIndexOID = regexp.MustCompile(`_k[0-9]+`)

// collectOrdered is collect in the query's own order.
func collectOrdered(t *testing.T, d *datadriven.TestData, q Querier, sql string, args ...any) []string {
	rows, err := q.Query(context.Background(), sql, args...)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return out
}

// collect returns the rows of sql as sorted text.
func collect(t *testing.T, d *datadriven.TestData, q Querier, sql string, args ...any) []string {
	rows, err := collectText(context.Background(), q, sql, args...)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return rows
}
