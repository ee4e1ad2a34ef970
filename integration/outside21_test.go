package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestOutside21SlotCallKeepsSkewCheck: an ordinary role's two blocks
// each read the sum of two rows (100 each) at their timestamp, then each
// takes 150 from a different row and commits: write skew, which
// mzproxy's read-then-write check refuses (one COMMIT gets 40001). A call
// PUBLIC may make in the block between the read and the write (the
// pending write slot begin_write_occ(NULL, NULL) takes, the same request
// set by hand, begin_write(), which chooses T at once) no longer skips
// the check: never do both blocks commit, the errors are 40001 (the
// pending slot, checked at COMMIT) or 25000 (a T chosen before the
// check), and the sessions go on. In every pgx mode. On bb2708d the
// blocks with a call both committed (the sum -100).
func TestOutside21SlotCallKeepsSkewCheck(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t)
	role := ordinaryRole(t, ctx)
	admin := connectTo(t, ctx, p.URL("postgres", db))
	tb := tableName(t)
	mustExec(t, ctx, admin, "CREATE TABLE "+tb+" (k int PRIMARY KEY, v int)",
		"INSERT INTO "+tb+" VALUES (1, 100), (2, 100)",
		"GRANT SELECT, UPDATE ON "+tb+" TO "+role)
	calls := []string{
		"", // no call: the check as mzproxy makes it
		"SELECT mzproxy.begin_write_occ(NULL, NULL)",
		"SELECT pg_catalog.set_config('mzproxy.write_ts', '0 - pending', true)",
		"SELECT mzproxy.begin_write()",
	}
	for _, mode := range pgxModes {
		a := connectMode(t, ctx, p.URL(role, db), mode)
		b := connectMode(t, ctx, p.URL(role, db), mode)
		for _, call := range calls {
			what := fmt.Sprintf("%v, call %q", mode, call)
			mustExec(t, ctx, admin, "UPDATE "+tb+" SET v = 100")
			committed, errs := skewRound(ctx, []*pgx.Conn{a, b}, tb, call)
			for _, err := range errs {
				if c := sqlState(err); c != "40001" && c != "25000" {
					t.Errorf("%s: %v, want 40001 or 25000", what, err)
				}
			}
			if committed > 1 {
				t.Errorf("%s: both blocks committed (write skew)", what)
			}
			sum := count(t, ctx, admin, "SELECT sum(v)::int FROM "+tb, pgx.QueryExecModeSimpleProtocol)
			if sum != 200-150*committed {
				t.Errorf("%s: sum %d with %d blocks committed", what, sum, committed)
			}
			for _, c := range []*pgx.Conn{a, b} {
				if n := count(t, ctx, c, "SELECT count(*)::int FROM "+tb, mode); n != 2 {
					t.Fatalf("%s: the session's next read: %d rows", what, n)
				}
			}
		}
	}
}

// skewRound runs the two blocks of TestOutside21SlotCallKeepsSkewCheck,
// their statements interleaved (both read before either writes), and
// returns how many committed and the errors of those that did not.
func skewRound(ctx context.Context, conns []*pgx.Conn, tb, call string) (int, []error) {
	txs := make([]pgx.Tx, len(conns))
	failed := make([]error, len(conns))
	step := func(i int, f func(tx pgx.Tx) error) {
		if failed[i] == nil {
			failed[i] = f(txs[i])
		}
	}
	for i, c := range conns {
		tx, err := c.Begin(ctx)
		txs[i], failed[i] = tx, err
	}
	for i := range conns {
		step(i, func(tx pgx.Tx) error {
			var sum int
			return tx.QueryRow(ctx, "SELECT sum(v)::int FROM "+tb).Scan(&sum)
		})
	}
	if call != "" {
		for i := range conns {
			step(i, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, call); return err })
		}
	}
	for i := range conns {
		step(i, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET v = v - 150 WHERE k = %d", tb, i+1))
			return err
		})
	}
	committed := 0
	var errs []error
	for i := range conns {
		step(i, func(tx pgx.Tx) error { return tx.Commit(ctx) })
		if failed[i] == nil {
			committed++
			continue
		}
		if txs[i] != nil {
			txs[i].Rollback(ctx) //nolint:errcheck // the block failed
		}
		errs = append(errs, failed[i])
	}
	return committed, errs
}
