package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/mzproxy/mzproxy/frontend"
	"github.com/mzproxy/mzproxy/proxy"
	"github.com/mzproxy/mzproxy/proxy/metrics"
)

// registerInstruments is the list of mzproxy's metrics that are read at
// each scrape from counts the process keeps anyway: to export another such
// value, add one line here (package proxy/metrics says how names become
// Prometheus names and which labels are allowed). Instruments recorded on
// a hot path are made from m.Meter() and handed to their package instead.
func registerInstruments(m *metrics.Provider, srv *frontend.Server, px *proxy.Proxy) error {
	m.Gauge("mzproxy.connections.active", "{connection}", "Client sessions past startup now.", func() int64 { return srv.Stats().Active })
	m.Counter("mzproxy.connections.accepted", "{connection}", "Client connections accepted since start.", func() int64 { return srv.Stats().Accepted })
	m.Counter("mzproxy.connections.refused", "{connection}", "Client connections refused since start (too many, or while draining).", func() int64 { return srv.Stats().Refused })
	m.Gauge("mzproxy.draining", "", "1 while the proxy drains its sessions to stop, else 0.", func() int64 { return b2i(srv.Draining()) })
	m.Counter("mzproxy.plan_cache.hits", "{lookup}", "Statements whose plan was found in the plan cache.", func() int64 { return int64(px.PlanCacheStats().Hits) })
	m.Counter("mzproxy.plan_cache.misses", "{lookup}", "Statements planned because the plan cache lacked them.", func() int64 { return int64(px.PlanCacheStats().Misses) })
	m.Gauge("mzproxy.plan_cache.entries", "{plan}", "Plans in the plan cache now.", func() int64 { return int64(px.PlanCacheStats().Len) })
	m.Gauge("mzproxy.read_holds", "{hold}", "Read holds granted by this proxy and not yet released.", func() int64 { return int64(len(px.Holds())) })
	m.Counter("mzproxy.read_holds.granted", "{hold}", "Read holds granted by this proxy since start.", func() int64 { return int64(px.HoldsGranted()) })
	m.FloatGauge("mzproxy.read_holds.oldest_age", "s", "Age of the oldest read hold of this proxy (0 without holds); a growing age holds back compaction.", func() float64 { return oldestHoldAge(px) })
	m.FloatGaugeSet("mzproxy.since_lag", "s", "How far each managed collection's since trails the upper, as of the proxy's last catalog snapshot of its database (taken by AS OF / mz_now() reads).", func(observe func(float64, ...attribute.KeyValue)) {
		for _, l := range px.SinceLags() {
			observe(l.Lag.Seconds(), attribute.String("database", l.Database), attribute.String("collection", l.Collection))
		}
	})
	_, err := m.Meter().Int64ObservableCounter("mzproxy.statement.interruptions", metric.WithUnit("{statement}"),
		metric.WithDescription("Statements a statement timeout (cause=timeout) or a client's cancel (cause=cancel) interrupted since start, by the phase they were in."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for _, i := range px.Interruptions() {
				o.Observe(i.Count, metric.WithAttributes(attribute.String("cause", i.Cause), attribute.String("phase", i.Phase)))
			}
			return nil
		}))
	if err != nil {
		return err
	}
	occ := px.OCCStats()
	m.Counter("mzproxy.occ.writes", "{statement}", "Autocommit writes that took the optimistic loop.", func() int64 { return occ.Writes.Load() })
	m.Counter("mzproxy.occ.commits", "{statement}", "Optimistic writes that committed.", func() int64 { return occ.Commits.Load() })
	m.Counter("mzproxy.occ.conflicts", "{append}", "Compare-and-appends of optimistic writes that lost to a concurrent commit.", func() int64 { return occ.Conflicts.Load() })
	m.Counter("mzproxy.occ.retries", "{attempt}", "Optimistic write attempts after the first.", func() int64 { return occ.Retries.Load() })
	m.Counter("mzproxy.occ.exhausted", "{statement}", "Optimistic writes that failed with 40001 after their last retry.", func() int64 { return occ.Exhausted.Load() })
	m.Counter("mzproxy.occ.waits", "{statement}", "Optimistic writes that queued for a loop slot (occ-max-concurrent).", func() int64 { return occ.Waits.Load() })
	m.Counter("mzproxy.occ.polled", "{statement}", "Optimistic writes that waited for the backend's answer in poll(2), being the only write in flight.", func() int64 { return px.PolledWrites() })
	ticks := px.TickStats()
	m.Counter("mzproxy.ticks.checks", "{round_trip}", "Tick round trips in the databases whose tick lock this proxy holds (tick-interval).", func() int64 { return ticks.Checks.Load() })
	m.Counter("mzproxy.ticks.commits", "{pin}", "Ticks that moved a database's upper with the clock.", func() int64 { return ticks.Commits.Load() })
	m.Counter("mzproxy.ticks.deferred", "{round_trip}", "Ticks that gave up waiting for the writes in progress in the database.", func() int64 { return ticks.Deferred.Load() })
	return m.Err()
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func oldestHoldAge(px *proxy.Proxy) float64 {
	holds := px.Holds()
	if len(holds) == 0 {
		return 0
	}
	oldest := holds[0].Since
	for _, h := range holds[1:] {
		if h.Since.Before(oldest) {
			oldest = h.Since
		}
	}
	return time.Since(oldest).Seconds()
}
