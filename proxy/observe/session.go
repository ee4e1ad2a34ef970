package observe

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// SessionInfo identifies a session; it is fixed at start.
type SessionInfo struct {
	ID              uint32 // the frontend's, as in its log lines
	User            string
	Database        string
	ApplicationName string
	BackendPID      uint32
}

// maxLoggedSQL bounds the statement text in a slow-statement line.
const maxLoggedSQL = 1024

// Session follows one client session's statements. Its methods other than
// state run on the session's goroutine.
type Session struct {
	o    *Observer
	info SessionInfo
	log  *logrus.Entry

	// Read by other goroutines (Observer.Sessions). The times are
	// clock()'s.
	activeNow  atomic.Bool
	txStatus   atomic.Uint32 // the last ReadyForQuery's status byte
	phaseNow   atomic.Uint32
	sinceNano  atomic.Int64
	phaseNano  atomic.Int64
	kindNow    atomic.Pointer[string]
	stateSince atomic.Int64 // when the session went idle (or idle in transaction)

	// The statement, owned by the session's goroutine.
	active    bool
	start     time.Duration // clock()'s
	cur       Phase
	curStart  time.Duration
	durations [numPhases]time.Duration
	visited   [numPhases]bool
	kind      string
	sql       string
	code      string // SQLSTATE of the first error the client saw
	ts        uint64
	hasTS     bool
	span      trace.Span // nil without a tracer
	phaseSpan trace.Span
	ctx       context.Context

	// prepared are the session's prepared statements, so that a
	// Bind/Execute cycle has its statement's kind and text.
	prepared map[string]preparedStatement

	// The measurement options of the last kind recorded: a session mostly
	// runs statements of one kind, which then cost no lookup.
	// Slices, so that passing them to the variadic Add and Record does not
	// allocate.
	optKind     string
	kindPtr     *string // interned optKind
	optDuration []metric.RecordOption
	optOK       []metric.AddOption
}

// OpenSession starts following a session; log is its logger, whose lines
// get the session's identity. Close it when the session ends.
func (o *Observer) OpenSession(info SessionInfo, log *logrus.Entry) *Session {
	s := &Session{o: o, info: info, log: log.WithFields(logrus.Fields{
		"session":          info.ID,
		"user":             info.User,
		"database":         info.Database,
		"application_name": info.ApplicationName,
	})}
	s.txStatus.Store('I')
	s.stateSince.Store(int64(clock()))
	o.mu.Lock()
	o.sessions[info.ID] = s
	o.mu.Unlock()
	return s
}

// Log is the session's logger: its lines carry the session id, user,
// database and application_name.
func (s *Session) Log() *logrus.Entry { return s.log }

// Close stops following the session; a statement still open ends as
// failed (its client or backend went away).
func (s *Session) Close() {
	if s.active {
		if s.code == "" {
			s.code = "08006"
		}
		s.End(byte(s.txStatus.Load()))
	}
	s.o.mu.Lock()
	delete(s.o.sessions, s.info.ID)
	s.o.mu.Unlock()
}

// Active reports whether a statement is open.
func (s *Session) Active() bool { return s.active }

// Begin opens a statement of the given kind (a planner kind, a fixed set);
// sql is its text, logged only if the statement turns out slow.
func (s *Session) Begin(kind, sql string) {
	now := clock()
	s.active = true
	s.start, s.curStart, s.cur = now, now, PhasePlan
	s.durations = [numPhases]time.Duration{}
	s.visited = [numPhases]bool{}
	s.kind, s.sql, s.code, s.hasTS = kind, sql, "", false
	if s.o.tracer != nil {
		at := wallOf(now)
		s.ctx, s.span = s.o.tracer.Start(context.Background(), "statement",
			trace.WithTimestamp(at), trace.WithAttributes(attribute.String("mzproxy.statement.kind", kind)))
		_, s.phaseSpan = s.o.tracer.Start(s.ctx, PhasePlan.String(), trace.WithTimestamp(at))
	}
	s.kindNow.Store(s.internKind(kind))
	s.phaseNow.Store(uint32(PhasePlan))
	s.sinceNano.Store(int64(now))
	s.phaseNano.Store(int64(now))
	s.activeNow.Store(true)
}

// SetKind corrects the open statement's kind, once the proxy knows it.
func (s *Session) SetKind(kind string) {
	if !s.active || kind == s.kind {
		return
	}
	s.kind = kind
	s.kindNow.Store(s.internKind(kind))
	if s.span != nil {
		s.span.SetAttributes(attribute.String("mzproxy.statement.kind", kind))
	}
}

// Phase enters phase p, ending the one before. Outside a statement it does
// nothing.
func (s *Session) Phase(p Phase) {
	if !s.active || p == s.cur {
		return
	}
	s.phaseAt(p, clock())
}

// PhaseFromStart enters phase p as of the statement's start: the phase
// before took no time worth a clock read (the event loop's admission of a
// plain read, which it forwards as it is; a clock read costs as much).
func (s *Session) PhaseFromStart(p Phase) {
	if !s.active || p == s.cur {
		return
	}
	s.phaseAt(p, s.curStart)
}

func (s *Session) phaseAt(p Phase, now time.Duration) {
	s.closePhase(now)
	s.cur, s.curStart = p, now
	if s.span != nil {
		_, s.phaseSpan = s.o.tracer.Start(s.ctx, p.String(), trace.WithTimestamp(wallOf(now)))
	}
	s.phaseNow.Store(uint32(p))
	s.phaseNano.Store(int64(now))
}

func (s *Session) closePhase(now time.Duration) {
	s.durations[s.cur] += now - s.curStart
	s.visited[s.cur] = true
	if s.phaseSpan != nil {
		s.phaseSpan.End(trace.WithTimestamp(wallOf(now)))
		s.phaseSpan = nil
	}
}

// Timestamp records the timestamp the statement reads or writes at.
func (s *Session) Timestamp(ts uint64) {
	if !s.active {
		return
	}
	s.ts, s.hasTS = ts, true
	if s.span != nil {
		s.span.SetAttributes(attribute.Int64("mzproxy.timestamp", int64(ts)))
	}
}

// Failed records an error the client saw for the statement (the first
// one decides the outcome).
func (s *Session) Failed(code string) {
	if s.active && s.code == "" {
		s.code = code
	}
}

// BackendError counts an error the backend sent for a client's request,
// by class, and records it as the statement's.
func (s *Session) BackendError(code string) {
	class := code
	if len(class) > 2 {
		class = class[:2]
	}
	s.o.backendErrs.Add(context.Background(), 1, s.o.attrSet("class", class))
	s.Failed(code)
}

type preparedStatement struct{ kind, sql string }

// Prepared remembers the kind and text of a prepared statement (Parse);
// Unprepared forgets it (Close); Bound makes them the open statement's
// (Bind).
func (s *Session) Prepared(name, kind, sql string) {
	if s.prepared == nil {
		s.prepared = map[string]preparedStatement{}
	}
	p := preparedStatement{kind: kind, sql: sql}
	if old, ok := s.prepared[name]; ok && old == p {
		// An extended client's Parse of its unnamed statement, again: a
		// look-up costs less than storing it anew, at every point read.
		return
	}
	s.prepared[name] = p
}

func (s *Session) Unprepared(name string) { delete(s.prepared, name) }

func (s *Session) Bound(name string) {
	if p, ok := s.prepared[name]; ok && s.active {
		s.SetKind(p.kind)
		s.sql = p.sql
	}
}

// BeginBound is a Bind of the prepared statement name: it begins a
// statement when none is open, of that statement's kind and text when
// they are remembered (else of kind unknown), and makes them the open
// statement's as Bound does. A prepared statement's Bind begins with its
// own kind, not unknown then corrected: a kind other than the session's
// last is looked up in the observer's shared table, which costs an
// allocation (a prepared read's Bind, Describe, Execute, Sync would pay
// it each time).
func (s *Session) BeginBound(name, unknownKind string) {
	p, ok := s.prepared[name]
	s.beginBound(p, ok, unknownKind)
}

// BeginBoundBytes is BeginBound of a name still in the client's bytes
// (the event loop's Bind): looked up without a copy of it.
func (s *Session) BeginBoundBytes(name []byte, unknownKind string) {
	p, ok := s.prepared[string(name)]
	s.beginBound(p, ok, unknownKind)
}

func (s *Session) beginBound(p preparedStatement, known bool, unknownKind string) {
	switch {
	case !s.active && known:
		s.Begin(p.kind, p.sql)
	case !s.active:
		s.Begin(unknownKind, "")
	case known:
		s.SetKind(p.kind)
		s.sql = p.sql
	}
}

// End closes the statement: the client has its ReadyForQuery, whose
// transaction status is tx.
func (s *Session) End(tx byte) {
	s.txStatus.Store(uint32(tx))
	if !s.active {
		return
	}
	now := clock()
	s.closePhase(now)
	s.active = false
	s.activeNow.Store(false)
	s.phaseNow.Store(uint32(PhaseNone))
	s.stateSince.Store(int64(now))

	total := now - s.start
	outcome := outcomeOf(s.code)
	ctx := context.Background()
	s.cacheKind()
	if outcome == OutcomeOK {
		s.o.statements.Add(ctx, 1, s.optOK...)
	} else {
		s.o.statements.Add(ctx, 1, s.o.kindOutcome(s.kind, outcome))
	}
	s.o.duration.Record(ctx, ms(total), s.optDuration...)
	for p, d := range s.durations {
		if s.visited[p] {
			s.o.phase.Record(ctx, ms(d), s.o.phaseAttrs[p]...)
		}
	}
	var traceID string
	if s.span != nil {
		if s.code != "" {
			s.span.SetStatus(codes.Error, "SQLSTATE "+s.code)
			s.span.SetAttributes(attribute.String("db.response.status_code", s.code))
		}
		traceID = s.span.SpanContext().TraceID().String()
		s.span.End(trace.WithTimestamp(wallOf(now)))
		s.span, s.ctx = nil, nil
	}
	if slow := s.o.slow.Load(); slow > 0 && total >= time.Duration(slow) {
		s.logSlow(total, outcome, traceID)
	}
}

// cacheKind makes the options of the statement's kind the cached ones.
func (s *Session) cacheKind() {
	if s.optDuration != nil && s.optKind == s.kind {
		return
	}
	s.optKind = s.kind
	s.kindPtr = s.o.intern(s.kind)
	s.optDuration = []metric.RecordOption{s.o.attrSet("kind", s.kind)}
	s.optOK = []metric.AddOption{s.o.kindOutcome(s.kind, OutcomeOK)}
}

// internKind is the statement kind shared for readers of kindNow.
func (s *Session) internKind(kind string) *string {
	if s.kindPtr != nil && s.optKind == kind {
		return s.kindPtr
	}
	return s.o.intern(kind)
}

func (s *Session) logSlow(total time.Duration, outcome, traceID string) {
	fields := logrus.Fields{
		"duration_ms": round3(ms(total)),
		"kind":        s.kind,
		"outcome":     outcome,
		"phases":      s.phaseBreakdown(),
	}
	if s.code != "" {
		fields["sqlstate"] = s.code
	}
	if s.hasTS {
		fields["timestamp"] = s.ts
	}
	if traceID != "" {
		fields["trace_id"] = traceID
	}
	if s.sql != "" {
		sql := s.sql
		if len(sql) > maxLoggedSQL {
			sql = sql[:maxLoggedSQL] + "..."
		}
		fields["statement"] = sql
	}
	s.log.WithFields(fields).Warn("slow statement")
}

// phaseBreakdown is "plan=0.012ms backend=3.400ms", in phase order.
func (s *Session) phaseBreakdown() string {
	var b strings.Builder
	for p, d := range s.durations {
		if !s.visited[p] {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Phase(p).String())
		b.WriteByte('=')
		b.WriteString(strconv.FormatFloat(ms(d), 'f', 3, 64))
		b.WriteString("ms")
	}
	return b.String()
}

func (s *Session) state() SessionState {
	st := SessionState{
		ID:              s.info.ID,
		User:            s.info.User,
		Database:        s.info.Database,
		ApplicationName: s.info.ApplicationName,
		BackendPID:      s.info.BackendPID,
		Phase:           Phase(s.phaseNow.Load()),
	}
	if k := s.kindNow.Load(); k != nil {
		st.Kind = *k
	}
	if s.activeNow.Load() {
		st.State = "active"
		st.Since = wallOf(time.Duration(s.sinceNano.Load()))
		st.PhaseSince = wallOf(time.Duration(s.phaseNano.Load()))
		return st
	}
	st.Since = wallOf(time.Duration(s.stateSince.Load()))
	switch s.txStatus.Load() {
	case 'T':
		st.State = "idle in transaction"
	case 'E':
		st.State = "idle in transaction (aborted)"
	default:
		st.State = "idle"
	}
	return st
}

func outcomeOf(code string) string {
	switch code {
	case "":
		return OutcomeOK
	case "57014":
		return OutcomeCanceled
	case "40001":
		return OutcomeConflict
	}
	return OutcomeError
}

// clockBase is the process's start on the monotonic clock: clock() is the
// time since it.
var clockBase = time.Now()

// clock is the monotonic time now, as an offset from clockBase. A
// statement reads it at its start and end (and at each phase): one read of
// the monotonic clock each, where time.Now reads the wall clock too, which
// costs as much again on a forwarded point read's path.
func clock() time.Duration { return time.Since(clockBase) }

// wallOf is the time.Time of a clock() reading: clockBase's wall time moved
// on by the monotonic clock (so a step of the wall clock since the start
// does not show), and with its monotonic reading, so that durations to
// time.Now are measured on the monotonic clock, as before.
func wallOf(t time.Duration) time.Time { return clockBase.Add(t) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round3(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 3, 64), 64)
	return v
}
