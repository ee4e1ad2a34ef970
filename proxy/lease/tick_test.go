package lease

import (
	"context"
	"testing"
	"time"
)

// lag is how far the upper trails the backend's clock.
func (d *db) lag() time.Duration {
	d.t.Helper()
	return time.Duration(d.int("SELECT mzproxy.now_ms() - (upper - 1) FROM mzproxy.txns")) * time.Millisecond
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

// TestTickFollowsClock: the loop of the proxy holding the tick claim keeps
// the upper within about a TickInterval of the clock while nothing is
// written (commits do not move it), and records it durably.
func TestTickFollowsClock(t *testing.T) {
	const every = 200 * time.Millisecond
	d := newDB(t)
	l := d.register(Config{TickInterval: every})
	d.mustWrite(l.BeginWriteSQL(), "CREATE TABLE t (k int)")
	var worst time.Duration
	for i := 0; i < 20; i++ {
		time.Sleep(every / 2)
		worst = max(worst, d.lag())
	}
	// Generous: the machine is loaded; without ticks the lag grows to the
	// whole 2 s.
	if worst > every+800*time.Millisecond {
		t.Errorf("the upper trailed the clock by up to %v with a tick every %v", worst, every)
	}
	if n := l.cfg.Ticks.Commits.Load(); n < 3 {
		t.Errorf("%d ticks in 2 s of ticks every %v", n, every)
	}
	// The ticks stop before the two uppers are read: read while they went
	// on, a loaded machine's pause between the two reads let two ticks
	// move the upper past the durable one read first.
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if durable, upper := d.int("SELECT upper FROM mzproxy.txns_durable"), d.int("SELECT upper FROM mzproxy.txns"); durable+int64(2*every/time.Millisecond) < upper {
		t.Errorf("durable upper %d trails the upper %d by more than two ticks", durable, upper)
	}
	t.Logf("worst lag %v; %d checks, %d ticks", worst, l.cfg.Ticks.Checks.Load(), l.cfg.Ticks.Commits.Load())
}

// TestTickGivesUpOnWrites: a tick waits only briefly for the writes in
// progress (new writes queue behind it meanwhile), then stands aside and
// comes back a quarter interval later; a write open across many ticks
// still commits.
func TestTickGivesUpOnWrites(t *testing.T) {
	d := newDB(t)
	l := d.register(Config{TickInterval: -1}) // the test ticks
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
	for i := 0; i < 3; i++ {
		start := time.Now()
		if next := tick(t, l); next != DefaultTickInterval/4 {
			t.Errorf("next tick in %v while a write is open, want %v", next, DefaultTickInterval/4)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("a tick waited %v for an open write", took)
		}
	}
	if l.cfg.Ticks.Deferred.Load() != 3 || l.cfg.Ticks.Commits.Load() != 0 {
		t.Errorf("%d deferred, %d ticks; want 3 and 0", l.cfg.Ticks.Deferred.Load(), l.cfg.Ticks.Commits.Load())
	}
	if _, err := tx.Exec(ctx, "SELECT mzproxy.commit_write(NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	before := d.int("SELECT upper FROM mzproxy.txns")
	if next := tick(t, l); next != DefaultTickInterval*9/10 {
		t.Errorf("next tick in %v, want %v", next, DefaultTickInterval*9/10)
	}
	if got := d.int("SELECT upper FROM mzproxy.txns"); got <= before || l.cfg.Ticks.Commits.Load() != 1 {
		t.Errorf("after the write the tick moved the upper from %d to %d (%d ticks)", before, got, l.cfg.Ticks.Commits.Load())
	}
}

// TestOneTickerPerDatabase: only the proxy holding the tick claim ticks;
// when its lease is gone another takes over.
func TestOneTickerPerDatabase(t *testing.T) {
	d := newDB(t)
	a := d.register(Config{TickInterval: -1})
	b := d.register(Config{TickInterval: -1})
	tick(t, a)
	tick(t, b)
	if a.cfg.Ticks.Commits.Load() != 1 || b.cfg.Ticks.Checks.Load() != 0 {
		t.Fatalf("a: %d ticks, b: %d checks; want 1 and 0", a.cfg.Ticks.Commits.Load(), b.cfg.Ticks.Checks.Load())
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	tick(t, b)
	if b.cfg.Ticks.Commits.Load() != 1 {
		t.Fatalf("b: %d ticks after a closed, want 1", b.cfg.Ticks.Commits.Load())
	}
}
