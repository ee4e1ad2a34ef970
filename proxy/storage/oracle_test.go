package storage

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestOracleMonotonicAndBatched(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	oconn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	o := NewOracle(oconn)
	defer o.Close()

	// Sequential: read_ts never goes back; write_ts strictly increases and
	// stays ahead of read_ts.
	var lastR, lastW uint64
	for i := 0; i < 20; i++ {
		r, err := o.ReadTS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := o.WriteTS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r < lastR || w <= lastW || w <= r {
			t.Fatalf("step %d: read %d (last %d), write %d (last %d)", i, r, lastR, w, lastW)
		}
		lastR, lastW = r, w
		if i%5 == 0 {
			inWrite(t, conn) // a commit moves read_ts
		}
	}

	// A commit is visible to the next ReadTS.
	ts := inWrite(t, conn)
	if r, _ := o.ReadTS(ctx); r != ts {
		t.Fatalf("ReadTS after commit at %d = %d", ts, r)
	}
	// ApplyWrite raises both.
	if err := o.ApplyWrite(ctx, ts+1000); err != nil {
		t.Fatal(err)
	}
	if r, _ := o.ReadTS(ctx); r != ts+1000 {
		t.Fatalf("ReadTS after ApplyWrite(%d) = %d", ts+1000, r)
	}
	if w, _ := o.WriteTS(ctx); w <= ts+1000 {
		t.Fatalf("WriteTS after ApplyWrite(%d) = %d", ts+1000, w)
	}

	// Concurrent: N callers share round trips.
	const n = 64
	before := o.RoundTrips()
	var wg sync.WaitGroup
	start := make(chan struct{})
	res := make([]uint64, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i], errs[i] = o.ReadTS(ctx)
		}()
	}
	close(start)
	wg.Wait()
	trips := o.RoundTrips() - before
	for i := range errs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if res[i] < ts+1000 {
			t.Fatalf("concurrent ReadTS %d went back below %d", res[i], ts+1000)
		}
	}
	t.Logf("%d concurrent ReadTS calls took %d round trips", n, trips)
	if trips >= n {
		t.Errorf("%d concurrent ReadTS calls took %d round trips: not batched", n, trips)
	}
}

// A ReadTS that starts after a commit finished must see it, even while
// other reads are in flight (it joins the next round trip, not the current).
func TestOracleReadTSLinearizable(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	oconn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	o := NewOracle(oconn)
	defer o.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ { // background readers keep round trips in flight
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := o.ReadTS(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := 0; i < 30; i++ {
		ts := inWrite(t, conn)
		r, err := o.ReadTS(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r < ts {
			t.Fatalf("ReadTS %d after commit at %d", r, ts)
		}
	}
	close(stop)
	wg.Wait()
}

func TestOracleClose(t *testing.T) {
	cs, _ := installedDB(t)
	ctx := context.Background()
	oconn, err := pgx.Connect(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	o := NewOracle(oconn)
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := o.ReadTS(ctx); !errors.Is(err, ErrOracleClosed) {
		t.Fatalf("ReadTS after Close: %v", err)
	}
	if _, err := o.WriteTS(ctx); !errors.Is(err, ErrOracleClosed) {
		t.Fatalf("WriteTS after Close: %v", err)
	}
}

func TestBeginWrite(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	upper0 := queryInt(t, conn, UpperSQL)

	// A snapshot taken before the commit keeps seeing the old state, and in
	// it read_ts is still upper-1.
	oc := connect(t, conn.Config().ConnString())
	old, err := oc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback(ctx)
	if _, err := old.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	oldRead := queryInt(t, old, ReadTSSQL)

	w := connect(t, conn.Config().ConnString())
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t1 := queryInt(t, tx, BeginWriteSQL)
	if t2 := queryInt(t, tx, BeginWriteSQL); t2 != t1 {
		t.Fatalf("second begin_write in one transaction: %d, first %d", t2, t1)
	}
	if t1 < upper0 {
		t.Fatalf("T %d below upper %d", t1, upper0)
	}
	if got := queryInt(t, tx, "SELECT mzproxy.current_write_ts()"); got != t1 {
		t.Fatalf("write_ts setting %d, want %d", got, t1)
	}
	// Not visible before commit.
	if got := queryInt(t, conn, UpperSQL); got != upper0 {
		t.Fatalf("upper moved before commit: %d", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, UpperSQL); got != t1+1 {
		t.Fatalf("upper after commit at %d: %d", t1, got)
	}
	if got := queryInt(t, conn, ReadTSSQL); got != t1 {
		t.Fatalf("read_ts after commit at %d: %d", t1, got)
	}
	if got := queryInt(t, old, ReadTSSQL); got != oldRead || got != upper0-1 {
		t.Fatalf("old snapshot read_ts %d, want %d = upper0-1 (%d)", got, oldRead, upper0-1)
	}
	// The setting does not outlive the transaction.
	if got := queryInt(t, w, "SELECT count(*) WHERE coalesce(current_setting('mzproxy.write_ts', true), '') = ''"); got != 1 {
		t.Fatal("write_ts setting survived the transaction")
	}

	// A rolled back write changes nothing.
	tx, err = w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queryInt(t, tx, BeginWriteSQL)
	tx.Rollback(ctx)
	if got := queryInt(t, conn, UpperSQL); got != t1+1 {
		t.Fatalf("upper after rollback: %d, want %d", got, t1+1)
	}
}

func TestBeginWriteAtConflict(t *testing.T) {
	_, conn := installedDB(t)
	ctx := context.Background()
	inWrite(t, conn)
	upper := uint64(queryInt(t, conn, UpperSQL))

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, BeginWriteAtSQL, int64(upper-1))
	tx.Rollback(ctx)
	got, ok := UpperConflict(err)
	if !ok || got != upper {
		t.Fatalf("begin_write_at(upper-1): err %v, conflict %v upper %d, want %d", err, ok, got, upper)
	}

	target := upper + 5
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, tx, BeginWriteAtSQL, int64(target)); uint64(got) != target {
		t.Fatalf("begin_write_at(%d) = %d", target, got)
	}
	// Asking again for the same T is fine; for another T is not.
	queryInt(t, tx, BeginWriteAtSQL, int64(target))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := uint64(queryInt(t, conn, UpperSQL)); got != target+1 {
		t.Fatalf("upper after begin_write_at(%d): %d", target, got)
	}
	if got := uint64(queryInt(t, conn, ReadTSSQL)); got != target {
		t.Fatalf("read_ts after begin_write_at(%d): %d", target, got)
	}
	// The conflict reports the current upper even to a writer that was
	// waiting on the lock while the upper moved.
	a := connect(t, conn.Config().ConnString())
	txa, _ := a.Begin(ctx)
	defer txa.Rollback(ctx)
	ta := queryInt(t, txa, BeginWriteSQL)
	done := make(chan error, 1)
	go func() {
		txb, err := conn.Begin(ctx)
		if err != nil {
			done <- err
			return
		}
		_, err = txb.Exec(ctx, BeginWriteAtSQL, ta) // waits for txa
		txb.Rollback(ctx)                           // before done: conn is the test's again after that
		done <- err
	}()
	if err := txa.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if got, ok := UpperConflict(err); !ok || got != uint64(ta)+1 {
		t.Fatalf("waiting begin_write_at(%d): %v (upper %d)", ta, err, got)
	}
}

func TestOracleReconnects(t *testing.T) {
	cs, conn := installedDB(t)
	ctx := context.Background()
	o, err := NewOracleDial(ctx, func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, cs) })
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if _, err := o.ReadTS(ctx); err != nil {
		t.Fatal(err)
	}
	// Kill the oracle's backend connection.
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`); err != nil {
		t.Fatal(err)
	}
	ts := inWrite(t, conn)
	// The first call after the connection died redials (the dead
	// connection is found before use, or its read runs again).
	r, err := o.ReadTS(ctx)
	if err != nil || r != ts {
		t.Fatalf("ReadTS after reconnect: %d, %v (want %d)", r, err, ts)
	}
}
