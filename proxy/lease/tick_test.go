package lease

import (
	"context"
	"testing"
	"time"
)

// lag is how far the oracle's read_ts trails the backend's clock.
func (d *db) lag() time.Duration {
	d.t.Helper()
	return time.Duration(d.int("SELECT mzproxy.now_ms() - mzproxy.read_ts()")) * time.Millisecond
}

// tick runs one tick of l and fails the test on an error.
func tick(t *testing.T, l *Lease) time.Duration {
	t.Helper()
	next, err := l.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// TestTickFollowsClock: the loop of the proxy holding the tick lock keeps
// read_ts and the upper within about a TickInterval of the clock while
// nothing is written; without it they stay at the last write.
func TestTickFollowsClock(t *testing.T) {
	const every = 200 * time.Millisecond
	d := newDB(t)
	l := d.register(Config{TickInterval: every})
	d.mustWrite(l.BeginWriteSQL(), "CREATE TABLE t (k int)")
	var worst time.Duration
	for i := 0; i < 15; i++ {
		time.Sleep(every / 2)
		worst = max(worst, d.lag())
	}
	// Generous: the machine is loaded; the old behaviour is a lag of the
	// whole 1.5 s.
	if worst > every+500*time.Millisecond {
		t.Errorf("read_ts trailed the clock by up to %v with a tick every %v", worst, every)
	}
	if upper, read := d.int("SELECT upper FROM mzproxy.txns"), d.int("SELECT mzproxy.read_ts()"); upper != read+1 {
		t.Errorf("upper %d, read_ts %d: an empty write moves both", upper, read)
	}
	if n := l.cfg.Ticks.Commits.Load(); n < 3 {
		t.Errorf("%d empty writes in 1.5 s of ticks every %v", n, every)
	}
	t.Logf("worst lag %v; %d checks, %d empty writes, %d conflicts", worst,
		l.cfg.Ticks.Checks.Load(), l.cfg.Ticks.Commits.Load(), l.cfg.Ticks.Conflicts.Load())
}

// TestTickSkipsRecentWrites: a tick right after a write writes nothing and
// comes back when that write will be a TickInterval old; once no write has
// committed for half an interval it commits an empty write at the clock.
func TestTickSkipsRecentWrites(t *testing.T) {
	d := newDB(t)
	l := d.register(Config{TickInterval: -1}) // the test ticks
	d.mustWrite(l.BeginWriteSQL(), "CREATE TABLE t (k int)")
	before := d.int("SELECT upper FROM mzproxy.txns")
	next := tick(t, l)
	if got := d.int("SELECT upper FROM mzproxy.txns"); got != before {
		t.Fatalf("a tick just after a write moved the upper from %d to %d", before, got)
	}
	due := DefaultTickInterval * 9 / 10
	if next < DefaultTickInterval/4 || next > due {
		t.Errorf("next tick in %v after a fresh write, want about %v", next, due)
	}
	time.Sleep(DefaultTickInterval/2 + 50*time.Millisecond)
	if next := tick(t, l); next != due {
		t.Errorf("next tick in %v after an empty write, want %v", next, due)
	}
	if lag := d.lag(); lag > 200*time.Millisecond || d.int("SELECT upper FROM mzproxy.txns") <= before {
		t.Errorf("after the empty write read_ts trails the clock by %v", lag)
	}
	if l.cfg.Ticks.Commits.Load() != 1 || l.cfg.Ticks.Checks.Load() != 2 {
		t.Errorf("%d checks, %d empty writes; want 2 and 1", l.cfg.Ticks.Checks.Load(), l.cfg.Ticks.Commits.Load())
	}
}

// TestTickNeverWaits: while a writer holds the commit slot the tick does
// not queue behind it (it would hold the lease's connection, and so its
// heartbeats, for as long): it stands aside and comes back soon.
func TestTickNeverWaits(t *testing.T) {
	d := newDB(t)
	l := d.register(Config{TickInterval: -1})
	time.Sleep(DefaultTickInterval/2 + 50*time.Millisecond)
	ctx := context.Background()
	holder := connect(t, d.cs)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT mzproxy.begin_write()"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next, err := l.Tick(tctx)
	if err != nil {
		t.Fatalf("tick while the slot is held: %v (after %v)", err, time.Since(start))
	}
	stoodAside := l.cfg.Ticks.Deferred.Load() + l.cfg.Ticks.Conflicts.Load()
	if next != DefaultTickInterval/4 || stoodAside != 1 || l.cfg.Ticks.Commits.Load() != 0 {
		t.Errorf("next %v, %d deferred or conflicting, %d empty writes; want %v, 1, 0", next,
			stoodAside, l.cfg.Ticks.Commits.Load(), DefaultTickInterval/4)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(DefaultTickInterval/2 + 50*time.Millisecond)
	tick(t, l)
	if l.cfg.Ticks.Commits.Load() != 1 {
		t.Errorf("no empty write once the slot was free")
	}
}

// TestOneTickerPerDatabase: only the proxy holding the tick lock ticks;
// when its lease is gone another takes over.
func TestOneTickerPerDatabase(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{TickInterval: -1})
	b := d.register(Config{TickInterval: -1})
	time.Sleep(DefaultTickInterval/2 + 50*time.Millisecond)
	tick(t, a)
	tick(t, b)
	if a.cfg.Ticks.Commits.Load() != 1 || b.cfg.Ticks.Checks.Load() != 0 {
		t.Fatalf("a: %d empty writes, b: %d checks; want 1 and 0", a.cfg.Ticks.Commits.Load(), b.cfg.Ticks.Checks.Load())
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(DefaultTickInterval/2 + 50*time.Millisecond)
	tick(t, b)
	if b.cfg.Ticks.Commits.Load() != 1 {
		t.Fatalf("b: %d empty writes after a closed, want 1", b.cfg.Ticks.Commits.Load())
	}
}

// TestTickSparesWriteInProgress: an optimistic write transaction that
// lasts many tick intervals (a bulk load, a client's transaction block)
// still commits: the ticks stand aside while it is open, since an empty
// write would move the upper past its expected one and fail its append.
// They resume after it.
func TestTickSparesWriteInProgress(t *testing.T) {
	const every = 100 * time.Millisecond
	d := newDB(t)
	l := d.register(Config{TickInterval: every})
	d.mustWrite(l.BeginWriteSQL(), "CREATE TABLE t (k int)")
	ctx := context.Background()
	writer := connect(t, d.cs)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT mzproxy.begin_write_occ(NULL, NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t SELECT generate_series(1, 1000)"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * every)
	if _, err := tx.Exec(ctx, "SELECT mzproxy.commit_write(NULL)"); err != nil {
		t.Fatalf("a write open for %v while ticking every %v: %v", 10*every, every, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if l.cfg.Ticks.Deferred.Load() == 0 {
		t.Errorf("no tick stood aside")
	}
	commits := l.cfg.Ticks.Commits.Load()
	deadline := time.Now().Add(10 * time.Second)
	for l.cfg.Ticks.Commits.Load() == commits {
		if time.Now().After(deadline) {
			t.Fatal("no empty write after the write committed")
		}
		time.Sleep(every)
	}
}
