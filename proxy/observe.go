package proxy

import (
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
	"github.com/mzproxy/mzproxy/planner"
	"github.com/mzproxy/mzproxy/proxy/observe"
	"github.com/mzproxy/mzproxy/timeouts"
)

// The session's side of package observe: where a statement begins and
// ends in the message flow (see observe's doc for the statement model).

// observeMessage opens a statement when msg asks for work and none is
// open, and follows the kinds of prepared statements.
func (s *Session) observeMessage(msg pgproto3.FrontendMessage) {
	switch m := msg.(type) {
	case *pgproto3.Query:
		s.observeQuery(m.String)
	case *pgproto3.Parse:
		s.observeParse(m.Name, m.Query)
	case *pgproto3.Bind:
		s.observeBind(m.PreparedStatement)
	case *pgproto3.Describe, *pgproto3.Execute:
		s.observeStep()
	case *pgproto3.FunctionCall:
		if !s.obs.Active() {
			s.obs.Begin("function-call", "")
		}
	case *pgproto3.Close:
		if m.ObjectType == 'S' {
			s.obs.Unprepared(m.Name)
		}
	}
}

// observeQuery, observeParse, observeBind and observeStep are
// observeMessage's parts for a Query, a Parse, a Bind, and a Describe or
// Execute (the event loop's Admit follows its batches with them).
func (s *Session) observeQuery(sql string) {
	if !s.obs.Active() {
		s.obs.Begin(s.statementKind(sql), sql)
	}
}

func (s *Session) observeParse(name, sql string) {
	kind := s.statementKind(sql)
	s.obs.Prepared(name, kind, sql)
	if !s.obs.Active() {
		s.obs.Begin(kind, sql)
	}
}

func (s *Session) observeBind(stmt string) {
	s.obs.BeginBound(stmt, kindUnknown)
}

func (s *Session) observeStep() {
	if !s.obs.Active() {
		s.obs.Begin(kindUnknown, "")
	}
}

// observedPhase is the observer's phase for a phase of the statement's
// deadline budget (the one place phases are entered: Session.enter).
var observedPhase = [...]observe.Phase{
	timeouts.PhaseNone:          observe.PhasePlan,
	timeouts.PhasePlan:          observe.PhasePlan,
	timeouts.PhaseSemaphoreWait: observe.PhaseOCCWait,
	timeouts.PhaseTimestamp:     observe.PhaseTimestamp,
	timeouts.PhaseUpperWait:     observe.PhaseUpperWait,
	timeouts.PhaseHold:          observe.PhaseHolds,
	timeouts.PhaseOCCAttempt:    observe.PhaseOCCAttempt,
	timeouts.PhaseExecute:       observe.PhaseBackend,
	timeouts.PhaseStream:        observe.PhaseBackend,
}

// kindUnknown is the kind of an extended-protocol cycle whose statement
// was prepared before the proxy followed it.
const kindUnknown = "unknown"

// observeHandled ends the open statement when the client now has its
// ReadyForQuery: after a Query, FunctionCall or Sync (unless a COPY is
// now waiting for the client's data), or after the data of a COPY that a
// Query started. err is what handling the message returned.
func (s *Session) observeHandled(msg pgproto3.FrontendMessage, copyQuery bool, err error) {
	if !s.obs.Active() {
		return
	}
	if err != nil && !errors.Is(err, wire.ErrSessionOver) {
		s.obs.Failed(string(pgerr.As(err).Code))
	}
	switch msg.(type) {
	case *pgproto3.Query, *pgproto3.FunctionCall, *pgproto3.Sync:
		if s.copy != copyNone {
			return
		}
	case *pgproto3.CopyDone, *pgproto3.CopyFail:
		if !copyQuery || s.copy != copyNone {
			return
		}
	default:
		return
	}
	s.obs.End(byte(s.tx))
}

// statementKind is a statement's kind as a metric label: the planner's
// kind of its (first) statement. Plain reads are not parsed.
func (s *Session) statementKind(sql string) string {
	if s.plainRead(sql) {
		return planner.KindRead.String()
	}
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	switch {
	case err != nil:
		return "invalid"
	case len(stmts) == 0:
		return "empty"
	case len(stmts) > 1:
		return "multiple"
	}
	return stmts[0].Kind.String()
}

// noteBackendError counts an ErrorResponse from the backend by its
// SQLSTATE class and makes it the statement's outcome; one saying the
// session's incarnation was fenced loses its lease.
func (s *Session) noteBackendError(frame []byte) {
	code := errorCode(wire.Body(frame))
	s.obs.BackendError(code)
	s.noteFenced(frame, code)
	if pgerr.Code(code) == pgerr.SerializationFailure {
		if oid := pendingOID(frame); oid != "" {
			// A hidden writer met a table without history: the
			// session's next statement builds it (lazy_history.go).
			s.hiddenBuilds = append(s.hiddenBuilds, oid)
		}
	}
}

// errorCode is the SQLSTATE field of an ErrorResponse body, without
// decoding the rest.
func errorCode(body []byte) string {
	if code, ok := errorField(body, 'C'); ok {
		return code
	}
	return string(pgerr.InternalError)
}

// errorField is the field of type field of an ErrorResponse body.
func errorField(body []byte, field byte) (string, bool) {
	for len(body) > 1 {
		end := 1
		for end < len(body) && body[end] != 0 {
			end++
		}
		if body[0] == field {
			return string(body[1:end]), true
		}
		if end >= len(body) {
			break
		}
		body = body[end+1:]
	}
	return "", false
}

// showSessions answers SHOW mzproxy_sessions: the proxy's sessions, what
// each does and since when.
func (s *Session) showSessions() error {
	text := func(name string) pgproto3.FieldDescription {
		return pgproto3.FieldDescription{Name: []byte(name), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}
	}
	typed := func(name string, oid uint32, size int16) pgproto3.FieldDescription {
		return pgproto3.FieldDescription{Name: []byte(name), DataTypeOID: oid, DataTypeSize: size, TypeModifier: -1}
	}
	const int8OID, int4OID, timestamptzOID, float8OID = 20, 23, 1184, 701
	msgs := []pgproto3.BackendMessage{&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
		typed("session_id", int8OID, 8), text("user"), text("database"), text("application_name"),
		typed("backend_pid", int4OID, 4), text("state"), typed("state_since", timestamptzOID, 8),
		text("statement_kind"), text("phase"), typed("phase_since", timestamptzOID, 8),
		typed("duration_ms", float8OID, 8),
	}}}
	now := time.Now()
	sessions := s.proxy.obs.Sessions()
	for _, st := range sessions {
		var phase, phaseSince []byte
		if st.State == "active" {
			phase = []byte(st.Phase.String())
			phaseSince = []byte(timestamptz(st.PhaseSince))
		}
		var kind []byte
		if st.Kind != "" {
			kind = []byte(st.Kind)
		}
		msgs = append(msgs, &pgproto3.DataRow{Values: [][]byte{
			[]byte(strconv.FormatUint(uint64(st.ID), 10)),
			[]byte(st.User),
			[]byte(st.Database),
			[]byte(st.ApplicationName),
			[]byte(strconv.FormatUint(uint64(st.BackendPID), 10)),
			[]byte(st.State),
			[]byte(timestamptz(st.Since)),
			kind,
			phase,
			phaseSince,
			[]byte(strconv.FormatFloat(float64(now.Sub(st.Since))/float64(time.Millisecond), 'f', 3, 64)),
		}})
	}
	msgs = append(msgs, &pgproto3.CommandComplete{CommandTag: []byte("SHOW")})
	return s.answer(msgs...)
}

// timestamptz formats t as PostgreSQL's text output of a timestamptz in
// UTC.
func timestamptz(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.999999") + "+00"
}

// isShowSessions reports whether a query string is SHOW mzproxy_sessions.
func (s *Session) isShowSessions(sql string) bool {
	if !containsWordFold(sql, "mzproxy_sessions") {
		return false
	}
	stmts, err := s.proxy.planner.Shape(sql, emptyCatalog{}, planner.Options{})
	return err == nil && len(stmts) == 1 && stmts[0].Kind == planner.KindShow &&
		stmts[0].Var != nil && stmts[0].Var.Name == "mzproxy_sessions"
}

// SinceLag is how far a managed collection's since trails the upper, as
// of the last catalog snapshot the proxy took of its database.
type SinceLag struct {
	Database   string
	Collection string // schema.name
	Lag        time.Duration
}

// SinceLags returns the since lag of every collection the proxy has seen.
// Snapshots are taken by reads on the explicit-timestamp path, so a
// database without such reads has none.
func (p *Proxy) SinceLags() []SinceLag {
	p.dbMu.Lock()
	dbs := make([]*database, 0, len(p.dbs))
	for _, db := range p.dbs {
		dbs = append(dbs, db)
	}
	p.dbMu.Unlock()
	var out []SinceLag
	for _, db := range dbs {
		seen := db.seen.Load()
		if seen == nil {
			continue
		}
		for id, since := range seen.frontiers.Since {
			o := seen.catalog.objects[id]
			if o == nil {
				continue // created after the catalog was read
			}
			lag := time.Duration(0)
			if upper := seen.frontiers.Upper; upper > since {
				lag = time.Duration(upper-since) * time.Millisecond
			}
			out = append(out, SinceLag{Database: db.name, Collection: o.Schema + "." + o.Name, Lag: lag})
		}
	}
	return out
}
