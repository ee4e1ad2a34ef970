package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// tracer watches the statements a lease sends on its connection: it
// counts the acquire_hold round trips and runs onHeartbeat (once) when a
// heartbeat's statement starts, that is after the heartbeat took its
// snapshot of the holds out and before the backend has it.
type tracer struct {
	holdTrips   atomic.Int64
	onHeartbeat atomic.Pointer[func()]
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	switch {
	case strings.Contains(data.SQL, ".acquire_hold("):
		tr.holdTrips.Add(1)
	case strings.Contains(data.SQL, ".heartbeat("):
		if f := tr.onHeartbeat.Swap(nil); f != nil {
			(*f)()
		}
	}
	return ctx
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// registerTraced registers an incarnation (as register) whose connection
// tr watches.
func (d *db) registerTraced(tr *tracer) *Lease {
	cs := d.cs
	return d.register(Config{Dial: func(ctx context.Context) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(cs)
		if err != nil {
			return nil, err
		}
		cfg.Tracer = tr
		return pgx.ConnectConfig(ctx, cfg)
	}})
}

// oldHistory creates table t with n versions under a and heartbeats until
// a's floor is above all of them: holds at those times are below it. It
// returns t's catalog id, history relation, the versions' times and t's
// contents at each.
func oldHistory(t *testing.T, d *db, a *Lease, n int) (int64, string, []uint64, []string) {
	t.Helper()
	d.mustWrite(a.BeginWriteSQL(), "CREATE TABLE t (k text PRIMARY KEY, v text)")
	id, h := d.table("t")
	var stamps []uint64
	var want []string
	for i := 0; i < n; i++ {
		ts := d.mustWrite(a.BeginWriteSQL(), "INSERT INTO t VALUES ('a', '"+itoa(int64(i))+"') ON CONFLICT (k) DO UPDATE SET v = excluded.v")
		stamps = append(stamps, ts)
		want = append(want, d.at(h, ts))
	}
	// A later write: the floor (a read_ts) then passes the last version.
	d.mustWrite(a.BeginWriteSQL(), "UPDATE t SET v = v || '+'")
	beat(t, a)
	if f := a.Floor(); f <= stamps[n-1] {
		t.Fatalf("floor %d not above %d", f, stamps[n-1])
	}
	return id, h, stamps, want
}

// TestAcquireSharesRoundTrip: readers acquiring holds at the same old time
// at once pay one acquire_hold round trip between them, not one each in a
// queue; the hold protects the history until the last one is released.
func TestAcquireSharesRoundTrip(t *testing.T) {
	d := newDB(t)
	tr := &tracer{}
	a := d.registerTraced(tr)
	id, h, stamps, want := oldHistory(t, d, a, 3)
	old := stamps[1]
	const readers = 8
	holds := make([]*Hold, readers)
	errs := make([]error, readers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range holds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			holds[i], errs[i] = a.Acquire(context.Background(), old, []int64{id})
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := tr.holdTrips.Load(); n != 1 {
		t.Errorf("%d readers at %d: %d acquire_hold round trips, want 1", readers, old, n)
	}
	if got := a.Stats().SlowHolds; got != readers {
		t.Errorf("holds below the floor: %d, want %d", got, readers)
	}
	// All but one released: the last still holds the history.
	for _, hold := range holds[1:] {
		hold.Release()
	}
	d.mustWrite(a.BeginWriteSQL(), "UPDATE t SET v = v || '+'")
	beat(t, a)
	compact(t, a)
	if s := d.since(id); s != old {
		t.Errorf("since %d, want the hold %d", s, old)
	}
	if got := d.at(h, old); got != want[1] {
		t.Errorf("history at %d: %q, want %q", old, got, want[1])
	}
	holds[0].Release()
	beat(t, a)
	compact(t, a)
	if s := d.since(id); s <= old {
		t.Errorf("since %d did not pass the released holds at %d", s, old)
	}
}

// TestAcquireAbovePublishedHold: while a hold below the floor is out, a
// hold at a later time on the same inputs is granted in memory; one at an
// earlier time or on another input takes a round trip. Once the first is
// released and a heartbeat and compaction ran, the since is at the second
// and below it the error is the since's, as without holds; once all are
// released the since passes them and the next hold there is refused.
func TestAcquireAbovePublishedHold(t *testing.T) {
	d := newDB(t)
	tr := &tracer{}
	a := d.registerTraced(tr)
	d.mustWrite(a.BeginWriteSQL(), "CREATE TABLE u (k int)")
	other, _ := d.table("u")
	id, h, stamps, want := oldHistory(t, d, a, 5)
	ctx := context.Background()
	acquire := func(ts uint64, ids ...int64) *Hold {
		t.Helper()
		hold, err := a.Acquire(ctx, ts, ids)
		if err != nil {
			t.Fatalf("Acquire at %d: %v", ts, err)
		}
		return hold
	}
	trips := func(want int64, what string) {
		t.Helper()
		if n := tr.holdTrips.Load(); n != want {
			t.Errorf("after %s: %d acquire_hold round trips, want %d", what, n, want)
		}
	}
	h1 := acquire(stamps[1], id)
	trips(1, "the first hold")
	h3 := acquire(stamps[3], id)
	h1b := acquire(stamps[1], id)
	trips(1, "holds at and after a held time")
	h0 := acquire(stamps[0], id)
	trips(2, "a hold before it")
	h3u := acquire(stamps[3], id, other)
	trips(3, "a hold on another input too")
	for _, hold := range []*Hold{h0, h1, h1b, h3u} {
		hold.Release()
	}

	d.mustWrite(a.BeginWriteSQL(), "UPDATE t SET v = v || '+'")
	beat(t, a)
	compact(t, a)
	if s := d.since(id); s != stamps[3] {
		t.Fatalf("since %d, want the hold left, %d", s, stamps[3])
	}
	if got := d.at(h, stamps[3]); got != want[3] {
		t.Errorf("history at %d: %q, want %q", stamps[3], got, want[3])
	}
	_, err := a.Acquire(ctx, stamps[2], []int64{id})
	var bs *BelowSinceError
	if !errors.As(err, &bs) || bs.Since[id] != stamps[3] || bs.TS != stamps[2] {
		t.Fatalf("Acquire at %d below since %d: %v, want BelowSinceError", stamps[2], stamps[3], err)
	}
	acquire(stamps[4], id).Release()

	h3.Release()
	d.mustWrite(a.BeginWriteSQL(), "UPDATE t SET v = v || '+'")
	beat(t, a)
	compact(t, a)
	since := d.since(id)
	if since <= stamps[4] {
		t.Fatalf("since %d did not pass the released holds at %d", since, stamps[4])
	}
	before := tr.holdTrips.Load()
	if _, err := a.Acquire(ctx, stamps[4], []int64{id}); !errors.As(err, &bs) || bs.Since[id] != since {
		t.Fatalf("Acquire at %d after the release: %v, want BelowSinceError with since %d", stamps[4], err, since)
	}
	if tr.holdTrips.Load() != before+1 {
		t.Errorf("the refused hold did not check the since in a round trip")
	}
}

// TestAcquireDuringHeartbeat: a heartbeat snapshots the holds out, then
// publishes them; a hold acquired in between is not in the snapshot. Here
// the snapshot has only a later hold (the earlier one was released), so
// the heartbeat raises the published row past the new hold's time: the new
// hold must not count on that row, and compaction right after the
// heartbeat must leave its history alone.
func TestAcquireDuringHeartbeat(t *testing.T) {
	d := newDB(t)
	tr := &tracer{}
	a := d.registerTraced(tr)
	id, h, stamps, want := oldHistory(t, d, a, 5)
	ctx := context.Background()
	h1, err := a.Acquire(ctx, stamps[1], []int64{id})
	if err != nil {
		t.Fatal(err)
	}
	h3, err := a.Acquire(ctx, stamps[3], []int64{id})
	if err != nil {
		t.Fatal(err)
	}
	h1.Release()

	type result struct {
		hold *Hold
		err  error
	}
	got := make(chan result, 1)
	var inWindow atomic.Bool
	during := func() {
		go func() {
			hold, err := a.Acquire(ctx, stamps[2], []int64{id})
			got <- result{hold, err}
		}()
		// Granted in memory, it would return at once; give it time.
		time.Sleep(500 * time.Millisecond)
		inWindow.Store(len(got) == 1)
	}
	tr.onHeartbeat.Store(&during)
	if err := a.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("hold at %d granted during the heartbeat: %v", stamps[2], inWindow.Load())

	d.mustWrite(a.BeginWriteSQL(), "UPDATE t SET v = v || '+'")
	beat(t, a)
	compact(t, a)
	if s := d.since(id); s > stamps[2] {
		t.Fatalf("since %d passed the hold at %d acquired during a heartbeat", s, stamps[2])
	}
	if got := d.at(h, stamps[2]); got != want[2] {
		t.Errorf("history at %d: %q, want %q", stamps[2], got, want[2])
	}
	r.hold.Release()
	h3.Release()
	beat(t, a)
	compact(t, a)
	if s := d.since(id); s <= stamps[3] {
		t.Errorf("since %d did not pass the released holds at %d", s, stamps[3])
	}
}
