package lease

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mzproxy/mzproxy/proxy/internalconn"
	"github.com/mzproxy/mzproxy/proxy/storage"
)

// The tick: Materialize advances its tables' uppers with the clock (every
// second), so mz_now() and a read of the present follow the wall clock
// even when nothing is written. Here the upper moves with pins (reads of
// the present, storage/frontier.sql), so the proxy holding a database's
// tick claim pins (storage: tick) every nine tenths of a TickInterval: the
// upper then trails the clock by less than a TickInterval, whatever is or
// is not written. The pin waits for the writes in progress, and new
// writes queue behind it meanwhile, so the tick gives up after tickWait
// and looks again a quarter interval later (a long write, a bulk load or
// a client's open transaction block, must not stall the others). It also
// records the upper durably, as the floor after a crash.

// tickWait bounds how long a tick waits for the writes in progress.
const tickWait = 20 * time.Millisecond

// DefaultTickInterval is Config.TickInterval's default: Materialize's.
const DefaultTickInterval = time.Second

// TickCounters counts a Set's ticks, over all its databases and leases.
type TickCounters struct {
	// Checks are tick round trips made while holding the tick claim.
	Checks atomic.Int64
	// Commits are ticks that moved the upper.
	Commits atomic.Int64
	// Deferred are ticks that gave up waiting for writes in progress.
	Deferred atomic.Int64
}

// tickResult is what one tick found.
type tickResult struct {
	ticker   bool // this proxy holds the tick claim
	deferred bool // writes in progress: the tick gave up
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
	r, err := l.tickOnce(ctx)
	switch {
	case storage.IsFenced(err):
		l.lose(lost(err))
		return every, l.Err()
	case err != nil:
		return every, fmt.Errorf("lease: tick: %w", err)
	case r.deferred:
		l.cfg.Ticks.Deferred.Add(1)
		return every / 4, nil
	}
	return target, nil
}

// tickOnce takes the tick claim if needed and makes the tick's round trip.
func (l *Lease) tickOnce(ctx context.Context) (tickResult, error) {
	var r tickResult
	l.connMu.Lock()
	defer l.connMu.Unlock()
	err := l.withConn(ctx, internalconn.Idempotent, func(conn *pgx.Conn) error {
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
		var pinned *int64
		if err := conn.QueryRow(ctx, "SELECT "+storage.Schema+".tick($1)", tickWait.Milliseconds()).Scan(&pinned); err != nil {
			return err
		}
		r.deferred = pinned == nil
		if !r.deferred {
			l.cfg.Ticks.Commits.Add(1)
		}
		return nil
	})
	return r, err
}
