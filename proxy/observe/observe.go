package observe

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// Phase is a part of a statement's way through the proxy.
type Phase uint8

const (
	PhaseNone Phase = iota // between statements
	PhasePlan
	PhaseTimestamp
	PhaseUpperWait
	PhaseHolds
	PhaseBackend
	PhaseOCCWait
	PhaseOCCAttempt
	PhaseCommit
	numPhases
)

var phaseNames = [numPhases]string{
	PhaseNone: "none", PhasePlan: "plan", PhaseTimestamp: "timestamp", PhaseUpperWait: "upper_wait",
	PhaseHolds: "holds", PhaseBackend: "backend", PhaseOCCWait: "occ_wait", PhaseOCCAttempt: "occ_attempt",
	PhaseCommit: "commit",
}

func (p Phase) String() string { return phaseNames[p] }

// Outcomes of a statement, a metric label.
const (
	OutcomeOK       = "ok"
	OutcomeError    = "error"
	OutcomeCanceled = "canceled" // 57014: a cancel or a statement timeout
	OutcomeConflict = "conflict" // 40001: a serialization failure
)

// msBuckets are the histogram boundaries in milliseconds: from a forwarded
// read on loopback (tens of microseconds) to waits bounded by timeouts.
var msBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000}

// Config configures an Observer.
type Config struct {
	// Meter makes the observer's instruments; nil records no metrics.
	Meter metric.Meter
	// Tracer makes a span per statement with a child per phase; nil makes
	// none (and costs nothing).
	Tracer trace.Tracer
	// SlowThreshold: statements that take at least this long are logged
	// (0: none). SetSlowThreshold changes it later.
	SlowThreshold time.Duration
}

// Observer records the statements of every session of a proxy. It is safe
// for concurrent use.
type Observer struct {
	tracer trace.Tracer
	slow   atomic.Int64 // nanoseconds; 0: no slow-statement log

	statements  metric.Int64Counter
	duration    metric.Float64Histogram
	phase       metric.Float64Histogram
	backendErrs metric.Int64Counter
	oracle      metric.Int64Counter

	phaseAttrs [numPhases][]metric.RecordOption
	attrs      sync.Map // attribute sets by label values (kind + outcome, class, op)
	kinds      sync.Map // interned statement kinds

	mu       sync.Mutex
	sessions map[uint32]*Session
}

// New returns an Observer.
func New(cfg Config) (*Observer, error) {
	o := &Observer{tracer: cfg.Tracer, sessions: map[uint32]*Session{}}
	o.slow.Store(int64(cfg.SlowThreshold))
	m := cfg.Meter
	if m == nil {
		m = noop.NewMeterProvider().Meter("")
	}
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	o.statements, err = m.Int64Counter("mzproxy.statements", metric.WithUnit("{statement}"),
		metric.WithDescription("Statements (request cycles ending in ReadyForQuery) by kind and outcome."))
	keep(err)
	o.duration, err = m.Float64Histogram("mzproxy.statement.duration", metric.WithUnit("ms"),
		metric.WithDescription("Statement latency in the proxy, first message to ReadyForQuery, by kind."),
		metric.WithExplicitBucketBoundaries(msBuckets...))
	keep(err)
	o.phase, err = m.Float64Histogram("mzproxy.statement.phase.duration", metric.WithUnit("ms"),
		metric.WithDescription("Time statements spent in each phase (plan, timestamp, upper_wait, holds, backend, occ_wait, occ_attempt, commit)."),
		metric.WithExplicitBucketBoundaries(msBuckets...))
	keep(err)
	o.backendErrs, err = m.Int64Counter("mzproxy.backend.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Errors the backend answered client statements with, by SQLSTATE class (first two characters)."))
	keep(err)
	o.oracle, err = m.Int64Counter("mzproxy.oracle.round_trips", metric.WithUnit("{round_trip}"),
		metric.WithDescription("Queries of the timestamp oracle and upper made for statements, by operation."))
	keep(err)
	if len(errs) > 0 {
		return nil, fmt.Errorf("observe: instruments: %v", errs)
	}
	for p := range numPhases {
		o.phaseAttrs[p] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("phase", p.String())))}
	}
	return o, nil
}

// SetSlowThreshold changes the slow-statement threshold (0: off).
func (o *Observer) SetSlowThreshold(d time.Duration) { o.slow.Store(int64(d)) }

// SlowThreshold is the slow-statement threshold now.
func (o *Observer) SlowThreshold() time.Duration { return time.Duration(o.slow.Load()) }

// Tracing reports whether statements are traced.
func (o *Observer) Tracing() bool { return o.tracer != nil }

// OracleRoundTrip counts one query of the oracle or upper; op names it
// (read_ts: a pin of a read of the present).
func (o *Observer) OracleRoundTrip(ctx context.Context, op string) {
	o.oracle.Add(ctx, 1, o.attrSet("op", op))
}

// attrSet returns the measurement option for one label, made once.
func (o *Observer) attrSet(key, value string) metric.MeasurementOption {
	k := key + "\x00" + value
	if v, ok := o.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attribute.String(key, value)))
	o.attrs.Store(k, opt)
	return opt
}

// intern returns a shared copy of a kind, so that other goroutines can
// read a session's kind through a pointer without a lock.
func (o *Observer) intern(kind string) *string {
	if v, ok := o.kinds.Load(kind); ok {
		return v.(*string)
	}
	v, _ := o.kinds.LoadOrStore(kind, &kind)
	return v.(*string)
}

// kindOutcome is attrSet for a statement's kind and outcome.
func (o *Observer) kindOutcome(kind, outcome string) metric.MeasurementOption {
	k := kind + "\x00" + outcome + "\x00ko"
	if v, ok := o.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", kind), attribute.String("outcome", outcome)))
	o.attrs.Store(k, opt)
	return opt
}

// SessionState is a session as SHOW mzproxy_sessions shows it.
type SessionState struct {
	ID              uint32
	User            string
	Database        string
	ApplicationName string
	BackendPID      uint32
	// State is PostgreSQL's pg_stat_activity state: active, idle, idle in
	// transaction, idle in transaction (aborted).
	State string
	// Since is when State (for an active session: the statement) began.
	Since time.Time
	// Kind is the statement's kind while active, else the last one's.
	Kind string
	// Phase is the active statement's phase, and PhaseSince when it began.
	Phase      Phase
	PhaseSince time.Time
}

// Sessions returns the proxy's sessions now, in session id order.
func (o *Observer) Sessions() []SessionState {
	o.mu.Lock()
	list := make([]*Session, 0, len(o.sessions))
	for _, s := range o.sessions {
		list = append(list, s)
	}
	o.mu.Unlock()
	out := make([]SessionState, 0, len(list))
	for _, s := range list {
		out = append(out, s.state())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
