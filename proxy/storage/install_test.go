package storage

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestInstallIdempotentAndConcurrent(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		conn := connect(t, cs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Install(ctx, conn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("install %d: %v", i, err)
		}
	}
	conn := connect(t, cs)
	upper := queryInt(t, conn, UpperSQL)
	// Again: a no-op that keeps the state.
	if err := Install(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM mzproxy.schema_version"); got != SchemaVersion {
		t.Errorf("schema_version rows = %d, want %d", got, SchemaVersion)
	}
	if got := queryInt(t, conn, UpperSQL); got != upper {
		t.Errorf("upper changed by re-install: %d -> %d", upper, got)
	}
	if got := queryInt(t, conn, "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'mzproxy%'"); got != 2 {
		t.Errorf("event triggers = %d, want 2", got)
	}
	if r := queryInt(t, conn, ReadTSSQL); r != upper-1 {
		t.Errorf("fresh read_ts %d, upper %d: want read_ts = upper-1", r, upper)
	}
}

func TestInstallNeedsSuperuser(t *testing.T) {
	cs := newDB(t)
	ctx := context.Background()
	conn := connect(t, cs)
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS mzweak; CREATE ROLE mzweak LOGIN"); err != nil {
		t.Fatal(err)
	}
	weak := connect(t, server.ConnString("mzweak", conn.Config().Database))
	err := Install(ctx, weak)
	if !errors.Is(err, ErrNotSuperuser) {
		t.Fatalf("Install as non-superuser: %v, want ErrNotSuperuser", err)
	}
	t.Log(err)
}
