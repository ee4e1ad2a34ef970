package integration

import (
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestHopPolledWrites (session 18): one client's autocommit writes, in
// each of pgx's exec modes, wait for the backend's answer in poll(2)
// (mzproxy_occ_polled_total counts each: the write is the only one in
// flight), and clients writing at once still all land, through the
// optimistic loop, polled or not.
func TestHopPolledWrites(t *testing.T) {
	ctx := testContext(t)
	db := freshDatabase(t, ctx)
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0")
	setup := connectTo(t, ctx, p.URL("postgres", db))
	mustExec(t, ctx, setup, "CREATE TABLE hop (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO hop VALUES (1, 0)")
	metric := func(name string) float64 {
		_, m := get(t, p.metricsAddr(t), "/metrics")
		return metricValue(t, m, name)
	}
	const each = 10
	total := 0
	for _, qm := range pgxModes {
		conn := connectMode(t, ctx, p.URL("postgres", db), qm)
		polled, writes := metric("mzproxy_occ_polled_total"), metric("mzproxy_occ_writes_total")
		for i := 0; i < each; i++ {
			if tag, err := conn.Exec(ctx, "UPDATE hop SET v = v + $1 WHERE id = $2", 1, 1); err != nil || tag.String() != "UPDATE 1" {
				t.Fatalf("%v: %q, %v", qm, tag, err)
			}
		}
		total += each
		if n := metric("mzproxy_occ_writes_total") - writes; n != each {
			t.Errorf("%v: %v of %d writes took the optimistic loop", qm, n, each)
		}
		if n := metric("mzproxy_occ_polled_total") - polled; n != each {
			t.Errorf("%v: %v of %d writes, each alone in flight, waited in poll(2)", qm, n, each)
		}
	}

	const clients, rounds = 8, 25
	writes, polled := metric("mzproxy_occ_writes_total"), metric("mzproxy_occ_polled_total")
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := 0; c < clients; c++ {
		conn := connectMode(t, ctx, p.URL("postgres", db), pgxModes[c%len(pgxModes)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if tag, err := conn.Exec(ctx, "UPDATE hop SET v = v + $1 WHERE id = $2", 1, 1); err != nil || tag.String() != "UPDATE 1" {
					errs <- fmt.Errorf("client %d, write %d: %q, %v", c, i, tag, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total += clients * rounds
	if got := count(t, ctx, setup, "SELECT v FROM hop", pgx.QueryExecModeSimpleProtocol); got != total {
		t.Fatalf("v = %d, want %d", got, total)
	}
	w, pl := metric("mzproxy_occ_writes_total")-writes, metric("mzproxy_occ_polled_total")-polled
	if w != clients*rounds || pl >= w {
		t.Errorf("%d clients at once: %v writes through the loop (want %d), %v of them polled (want fewer)", clients, w, clients*rounds, pl)
	}
	t.Logf("%d clients at once: %v of %v writes polled", clients, pl, w)
}
