package proxy

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/proxy/observe"
)

// TestAdmitWaitsForCancel: while a Cancel is under way (it holds stmtMu
// until its CancelRequest has reached the backend), the loop forwards no
// new batch: the cancel, meant for the batch just answered, would have
// met the new one at the backend (a stray 57014, PgBouncer #38's bug).
// The batch goes to the session's goroutine instead, which waits.
func TestAdmitWaitsForCancel(t *testing.T) {
	batch, err := (&pgproto3.Query{String: "SELECT 1"}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := observe.New(observe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{obs: obs.OpenSession(observe.SessionInfo{}, logrus.NewEntry(logrus.New()))}
	s.stmtMu.Lock()
	admitted := s.Admit(batch)
	s.stmtMu.Unlock()
	if admitted {
		t.Fatal("a batch was admitted while a Cancel held stmtMu")
	}
	if s.loopFlight.Load() {
		t.Fatal("loopFlight set by a refused batch")
	}
	if !s.Admit(batch) || !s.loopFlight.Load() {
		t.Fatal("a plain read was not admitted once the Cancel was done")
	}
}

// TestAdmitShowsBackendPhase: a batch the loop forwards is at the backend
// for SHOW mzproxy_sessions, as on the session's own path, and idle once
// its ReadyForQuery has been followed.
func TestAdmitShowsBackendPhase(t *testing.T) {
	obs, err := observe.New(observe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{obs: obs.OpenSession(observe.SessionInfo{ID: 1}, logrus.NewEntry(logrus.New()))}
	batch, _ := (&pgproto3.Query{String: "SELECT pg_sleep(1)"}).Encode(nil)
	if !s.Admit(batch) {
		t.Fatal("a plain read was not admitted")
	}
	if st := obs.Sessions()[0]; st.State != "active" || st.Phase != observe.PhaseBackend || st.Kind != "read" {
		t.Fatalf("forwarded read: %+v, want active at the backend", st)
	}
}
