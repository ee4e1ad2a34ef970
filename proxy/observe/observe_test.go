package observe

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	obs    *Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	log    *bytes.Buffer
}

func newFixture(t *testing.T, slow time.Duration) *fixture {
	t.Helper()
	f := &fixture{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder(), log: &bytes.Buffer{}}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := New(Config{Meter: mp.Meter("test"), Tracer: tp.Tracer("test"), SlowThreshold: slow})
	if err != nil {
		t.Fatal(err)
	}
	f.obs = obs
	return f
}

func (f *fixture) logger() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(f.log)
	l.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	return logrus.NewEntry(l)
}

// sums returns each counter's and histogram's total (count for
// histograms) by instrument name and attribute set.
func (f *fixture) sums(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, set attribute.Set) string {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
		}
		return name + "{" + strings.Join(parts, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Count)
				}
			}
		}
	}
	return out
}

func TestStatementPhasesAndOutcome(t *testing.T) {
	f := newFixture(t, time.Nanosecond)
	s := f.obs.OpenSession(SessionInfo{ID: 7, User: "alice", Database: "db", ApplicationName: "app", BackendPID: 99}, f.logger())

	s.Begin("read", "SELECT * FROM t AS OF 5")
	s.Phase(PhaseTimestamp)
	s.Timestamp(5)
	s.Phase(PhaseBackend)
	if st := f.obs.Sessions()[0]; st.State != "active" || st.Phase != PhaseBackend || st.Kind != "read" {
		t.Errorf("during the statement: %+v", st)
	}
	s.BackendError("57014")
	s.End('I')

	s.Begin("write", "INSERT ...")
	s.Phase(PhaseBackend)
	s.End('T')
	if st := f.obs.Sessions()[0]; st.State != "idle in transaction" || st.Phase != PhaseNone || st.Kind != "write" {
		t.Errorf("after a statement in a transaction: %+v", st)
	}

	got := f.sums(t)
	for name, want := range map[string]float64{
		"mzproxy.statements{kind=read,outcome=canceled}":    1,
		"mzproxy.statements{kind=write,outcome=ok}":         1,
		"mzproxy.backend.errors{class=57}":                  1,
		"mzproxy.statement.phase.duration{phase=plan}":      2,
		"mzproxy.statement.phase.duration{phase=timestamp}": 1,
		"mzproxy.statement.phase.duration{phase=backend}":   2,
		"mzproxy.statement.duration{kind=read}":             1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
	}
	if _, ok := got["mzproxy.statement.phase.duration{phase=holds}"]; ok {
		t.Errorf("a phase no statement entered was recorded")
	}

	ended := f.spans.Ended()
	var names []string
	for _, sp := range ended {
		names = append(names, sp.Name())
	}
	if want := "plan timestamp backend statement plan backend statement"; strings.Join(names, " ") != want {
		t.Errorf("spans %q, want %q", strings.Join(names, " "), want)
	}
	root := ended[3]
	for _, child := range ended[:3] {
		if child.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("span %s is not the statement's child", child.Name())
		}
	}
	var ts int64
	for _, a := range root.Attributes() {
		if a.Key == "mzproxy.timestamp" {
			ts = a.Value.AsInt64()
		}
	}
	if ts != 5 {
		t.Errorf("statement span timestamp %d, want 5", ts)
	}

	log := f.log.String()
	for _, want := range []string{
		`msg="slow statement"`, "session=7", "user=alice", "database=db", "application_name=app",
		"sqlstate=57014", "outcome=canceled", `phases="plan=`, "timestamp=5",
		"trace_id=" + root.SpanContext().TraceID().String(), `statement="SELECT * FROM t AS OF 5"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("slow log lacks %q:\n%s", want, log)
		}
	}
	s.Close()
	if n := len(f.obs.Sessions()); n != 0 {
		t.Errorf("%d sessions after Close", n)
	}
}

func TestSlowThreshold(t *testing.T) {
	f := newFixture(t, 0)
	s := f.obs.OpenSession(SessionInfo{ID: 1}, f.logger())
	s.Begin("read", "SELECT 1")
	s.End('I')
	if f.log.Len() != 0 {
		t.Fatalf("logged with the threshold off: %s", f.log)
	}
	f.obs.SetSlowThreshold(time.Hour)
	s.Begin("read", "SELECT 1")
	s.End('I')
	if f.log.Len() != 0 {
		t.Fatalf("a fast statement was logged: %s", f.log)
	}
	f.obs.SetSlowThreshold(time.Nanosecond)
	s.Begin("read", "SELECT 1")
	time.Sleep(time.Millisecond)
	s.End('I')
	if !strings.Contains(f.log.String(), "slow statement") {
		t.Fatalf("a slow statement was not logged: %q", f.log)
	}
	s.Close()
}

// TestCloseMidStatement: a session that ends during a statement counts
// it as failed.
func TestCloseMidStatement(t *testing.T) {
	f := newFixture(t, 0)
	s := f.obs.OpenSession(SessionInfo{ID: 1}, f.logger())
	s.Begin("read", "SELECT pg_sleep(10)")
	s.Phase(PhaseBackend)
	s.Close()
	if got := f.sums(t)["mzproxy.statements{kind=read,outcome=error}"]; got != 1 {
		t.Fatalf("statement cut by the session's end: %v", f.sums(t))
	}
}

// TestPreparedStatement: a Bind/Execute cycle of a statement prepared
// earlier gets its kind and text.
func TestPreparedStatement(t *testing.T) {
	f := newFixture(t, time.Nanosecond)
	s := f.obs.OpenSession(SessionInfo{ID: 1}, f.logger())
	s.Prepared("s1", "write", "INSERT INTO t VALUES ($1)")
	s.Begin("unknown", "")
	s.Bound("s1")
	s.End('I')
	if got := f.sums(t)["mzproxy.statements{kind=write,outcome=ok}"]; got != 1 {
		t.Errorf("Bind of a prepared write: %v", f.sums(t))
	}
	if !strings.Contains(f.log.String(), `statement="INSERT INTO t VALUES ($1)"`) {
		t.Errorf("slow log lacks the prepared text: %s", f.log)
	}
	s.Unprepared("s1")
	s.Begin("unknown", "")
	s.Bound("s1")
	s.End('I')
	if got := f.sums(t)["mzproxy.statements{kind=unknown,outcome=ok}"]; got != 1 {
		t.Errorf("Bind of a closed statement: %v", f.sums(t))
	}
	s.Close()
}

// TestWithoutTracer: no tracer, no spans, and the rest still works.
func TestWithoutTracer(t *testing.T) {
	obs, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if obs.Tracing() {
		t.Fatal("tracing without a tracer")
	}
	s := obs.OpenSession(SessionInfo{ID: 3}, logrus.NewEntry(logrus.New()))
	s.Begin("read", "SELECT 1")
	s.Phase(PhaseBackend)
	s.End('I')
	if s.span != nil || s.phaseSpan != nil {
		t.Fatal("spans without a tracer")
	}
	s.Close()
}

// BenchmarkStatement is the observer's cost per forwarded read (begin,
// backend phase, end) without a tracer, the default.
func BenchmarkStatement(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	obs, err := New(Config{Meter: mp.Meter("bench"), SlowThreshold: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	s := obs.OpenSession(SessionInfo{ID: 1}, logrus.NewEntry(logrus.New()))
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		s.Begin("read", "SELECT 1")
		s.Phase(PhaseBackend)
		s.End('I')
	}
}
