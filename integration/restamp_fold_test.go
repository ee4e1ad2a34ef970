package integration

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mzproxy/mzproxy/proxy/storage"
)

// TestHostileBlockRestamp: since storage 49 a block's COMMIT restamps each
// table it wrote with the table's h<id>_fix, which also returns what
// decides whether T is raised (restamp_raise). An ordinary role writes
// TPC-B-shaped blocks through mzproxy in both protocols: each commits at a
// T above the read before it, with AS OF just before T unchanged and no
// placeholder left. It cannot run _fix or restamp_raise itself, through
// mzproxy or directly, outside a block or inside its own (where it would
// restamp its placeholders at a T of its choosing), nor skip the restamp
// by taking its block's row away.
func TestHostileBlockRestamp(t *testing.T) {
	ctx := testContext(t)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	acc, hist := tableName(t), tableName(t)+"_h"
	viaProxy := connectAs(t, ctx, p.URL(role, "postgres"))
	direct := connectAs(t, ctx, directURL(role, "postgres"))
	admin := connectDirect(t, ctx)
	mustExec(t, ctx, viaProxy, "CREATE TABLE public."+acc+" (k int PRIMARY KEY, v int)", "CREATE TABLE public."+hist+" (k int, d int)",
		"INSERT INTO public."+acc+" VALUES (1, 0), (2, 0)", "INSERT INTO public."+hist+" VALUES (0, 0)")
	histOf := func(table string) string {
		t.Helper()
		var h string
		if err := admin.QueryRow(ctx, "SELECT history FROM mzproxy.catalog WHERE oid = $1::regclass AND dropped_ts IS NULL", table).Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	ha, hh := histOf(acc), histOf(hist)
	asOf := func(ts int64) string {
		t.Helper()
		var s string
		if err := admin.QueryRow(ctx, "SELECT coalesce(string_agg(k || '=' || v, ',' ORDER BY k), '') FROM "+ha+" WHERE mz_from <= $1 AND mz_to > $1", ts).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		read := oracleReadTS(t, ctx, admin)
		tx, err := viaProxy.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"UPDATE " + acc + " SET v = v + $1 WHERE k = 1", "UPDATE " + acc + " SET v = v - $1 WHERE k = 2",
			"INSERT INTO " + hist + " VALUES (1, $1)"} {
			if _, err := tx.Exec(ctx, s, mode, 10); err != nil {
				t.Fatalf("%s (%v): %v", s, mode, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("COMMIT (%v): %v", mode, err)
		}
		var T int64
		if err := admin.QueryRow(ctx, "SELECT max(mz_from) FROM "+hh).Scan(&T); err != nil {
			t.Fatal(err)
		}
		if T <= read {
			t.Errorf("block %d committed at %d, not above the read before it at %d", i, T, read)
		}
		if got, want := asOf(T), fmt.Sprintf("1=%d,2=%d", 10*(i+1), -10*(i+1)); got != want {
			t.Errorf("AS OF the block's T %d: %q, want %q", T, got, want)
		}
		if got, want := asOf(T-1), fmt.Sprintf("1=%d,2=%d", 10*i, -10*i); got != want {
			t.Errorf("AS OF just before the block's T %d: %q, want %q", T, got, want)
		}
	}
	var placeholders int
	if err := admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+ha+" WHERE mz_from < 0 OR mz_to < 0) + (SELECT count(*) FROM "+hh+" WHERE mz_from < 0 OR mz_to < 0)").Scan(&placeholders); err != nil {
		t.Fatal(err)
	}
	if placeholders != 0 {
		t.Errorf("%d placeholder versions committed", placeholders)
	}

	before := asOf(oracleReadTS(t, ctx, admin))
	calls := []string{
		"SELECT " + ha + "_fix(-1, 1)",
		"SELECT mzproxy.restamp_raise(ARRAY['" + ha + "'], 1, 2)",
		"DELETE FROM mzproxy.deferred_slots",
	}
	for _, c := range []*pgx.Conn{viaProxy, direct} {
		for _, s := range calls {
			_, err := c.Exec(ctx, s)
			if sqlState(err) != "42501" {
				t.Errorf("%s by an ordinary role: %v, want 42501", s, err)
			}
		}
	}
	// Inside its own block, after a write: its own placeholders at T = 1.
	tx, err := viaProxy.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE "+acc+" SET v = 99 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT "+ha+"_fix(-pg_current_xact_id()::text::bigint, 1)")
	wantCode(t, err, "42501")
	tx.Rollback(ctx) //nolint:errcheck // failed
	tx, err = direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{storage.OpenWriteDeferredFor(-1), "UPDATE public." + acc + " SET v = 98 WHERE k = 1"} {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s directly: %v", s, err)
		}
	}
	_, err = tx.Exec(ctx, "SELECT "+ha+"_fix(-pg_current_xact_id()::text::bigint, 1)")
	wantCode(t, err, "42501")
	tx.Rollback(ctx) //nolint:errcheck // failed
	if after := asOf(oracleReadTS(t, ctx, admin)); after != before {
		t.Errorf("after the refused calls: %q, was %q", after, before)
	}
}
