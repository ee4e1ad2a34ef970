package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mzproxy/mzproxy/proxy/internalconn"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// The tick: Materialize advances its tables' uppers with the clock (every
// second), so mz_now() and a read of the present follow the wall clock
// even when nothing is written. Here the upper and read_ts move only with
// commits, so the proxy holding a database's tick lock commits an empty
// write (begin_write_occ and commit_write with no data: upper := T+1 and
// read_ts := T in one transaction, T from the backend's clock) whenever no
// write has committed for half a TickInterval when it looks. It looks again
// when the newest commit will be nine tenths of a TickInterval old (the
// rest is for the round trip and a late timer), so while nothing is written
// read_ts trails the clock by less than a TickInterval, a database written
// more often than every half interval gets no empty write at all, and the
// check costs one round trip per interval while idle, at most about two
// while writes come. An empty write is an ordinary optimistic one: it
// never waits (commit_write skips a held commit slot, MZ004) and loses to
// any commit since its snapshot (MZ001).
//
// A write transaction in progress has its T and expected upper already
// (begin_write_occ, which also gives it a transaction id): an empty write
// would move the upper past it and fail its append, always, when it lasts
// longer than a tick (a bulk load, a client's transaction block). So the
// tick stands aside while a client backend of the database has a
// transaction id: that transaction's commit moves the upper anyway (the
// tick looks again every quarter interval meanwhile, in case it rolls
// back). What is left is a write whose snapshot falls in the tick's own
// short transaction: it fails its append once (an autocommit write
// retries, a transaction block's COMMIT gets 40001), at most once per
// empty write.

// DefaultTickInterval is Config.TickInterval's default: Materialize's.
const DefaultTickInterval = time.Second

// TickCounters counts a Set's ticks, over all its databases and leases.
type TickCounters struct {
	// Checks are tick round trips made while holding the tick lock.
	Checks atomic.Int64
	// Commits are empty writes committed.
	Commits atomic.Int64
	// Conflicts are empty writes that lost to a concurrent commit or found
	// the commit slot held (nothing to do: the upper moved or is moving).
	Conflicts atomic.Int64
	// Deferred are ticks that were due but stood aside for a write
	// transaction in progress.
	Deferred atomic.Int64
}

// tickSQL is one tick of incarnation inc, one simple-protocol query string
// and so one implicit transaction: the lag of the newest commit behind the
// backend's clock (ms), whether another client backend of the database is
// in a transaction that has written (it has a transaction id) and, when
// the lag is at least minLag and none is, an empty write whose
// commit_write returns its T (NULL when there was none). The subquery is
// evaluated once (one with a volatile function is not flattened).
func tickSQL(inc int64, minLag time.Duration) string {
	id := strconv.FormatInt(inc, 10)
	return `SELECT s.lag, s.writing, CASE WHEN s.lag >= ` + strconv.FormatInt(minLag.Milliseconds(), 10) +
		` AND NOT s.writing THEN ` + storage.Schema + `.begin_write_occ(` + id + `, NULL) END
  FROM (SELECT ` + storage.Schema + `.now_ms() - GREATEST(x.upper - 1, o.read_ts) AS lag,
               EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                        WHERE a.datname = current_database() AND a.backend_type = 'client backend'
                          AND a.pid <> pg_backend_pid() AND a.backend_xid IS NOT NULL) AS writing
          FROM ` + storage.Schema + `.txns x, ` + storage.Schema + `.oracle o
         WHERE o.timeline = 'EpochMilliseconds') s;
SELECT ` + storage.Schema + `.commit_write(` + id + `)`
}

// tickResult is what one tick found.
type tickResult struct {
	ticker   bool          // this proxy holds the tick lock
	wrote    bool          // an empty write committed
	deferred bool          // one was due, but a write transaction is in progress
	lag      time.Duration // of the newest commit before the tick
}

// Tick runs one tick now (the loop does so on its own schedule) and
// returns when to run the next: when the newest commit (the empty write,
// if it made one) will be nine tenths of a TickInterval old.
func (l *Lease) Tick(ctx context.Context) (time.Duration, error) {
	every := l.cfg.TickInterval
	if every <= 0 {
		every = DefaultTickInterval
	}
	target := every - every/10 // the lag at which the next tick is due
	if err := l.Err(); err != nil {
		return every, err
	}
	r, err := l.tickOnce(ctx, every)
	switch {
	case storage.IsFenced(err):
		l.lose(lost(err))
		return every, l.Err()
	case isTickConflict(err):
		// The upper moved or is about to: look again soon rather than a
		// whole interval after a commit that may not happen.
		l.cfg.Ticks.Conflicts.Add(1)
		return every / 4, nil
	case err != nil:
		return every, fmt.Errorf("lease: tick: %w", err)
	case !r.ticker:
		return every, nil
	case r.wrote:
		return target, nil
	case r.deferred:
		// Its commit will move the upper; look again soon in case it
		// rolls back.
		l.cfg.Ticks.Deferred.Add(1)
		return every / 4, nil
	}
	return min(max(target-r.lag, every/4), target), nil
}

// tickOnce takes the tick lock if needed and makes the tick's round trip.
func (l *Lease) tickOnce(ctx context.Context, every time.Duration) (tickResult, error) {
	var r tickResult
	l.connMu.Lock()
	defer l.connMu.Unlock()
	// An empty write is a write: run once (the next tick follows anyway).
	err := l.withConn(ctx, internalconn.Once, func(conn *pgx.Conn) error {
		ctx, cancel := context.WithTimeout(ctx, l.cfg.Grace/4)
		defer cancel()
		// The right to tick is a claim of one live incarnation, as the
		// right to compact is (storage: claim), not an advisory lock any
		// role could take and keep. Its own claim, not compaction's: a
		// proxy that never compacts may tick, and the other way round.
		if err := conn.QueryRow(ctx, "SELECT "+storage.Schema+".claim('tick', $1)", l.id).Scan(&r.ticker); err != nil || !r.ticker {
			return err
		}
		l.cfg.Ticks.Checks.Add(1)
		results, err := conn.PgConn().Exec(ctx, tickSQL(l.id, every/2)).ReadAll()
		if err != nil {
			return err
		}
		if len(results) != 2 || len(results[0].Rows) != 1 || len(results[1].Rows) != 1 {
			return fmt.Errorf("unexpected answer to the tick: %d results", len(results))
		}
		lagMs, err := strconv.ParseInt(string(results[0].Rows[0][0]), 10, 64)
		if err != nil {
			return fmt.Errorf("tick lag %q: %w", results[0].Rows[0][0], err)
		}
		r.lag = time.Duration(lagMs) * time.Millisecond
		r.wrote = results[1].Rows[0][0] != nil
		r.deferred = string(results[0].Rows[0][1]) == "t" && r.lag >= every/2
		return nil
	})
	if r.wrote {
		l.cfg.Ticks.Commits.Add(1)
	}
	return r, err
}

// isTickConflict reports whether err is an empty write losing to a commit
// since its snapshot (MZ001) or finding the commit slot held (MZ004).
func isTickConflict(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == string(storage.CodeUpperConflict) || pe.Code == string(storage.CodeSlotBusy))
}
