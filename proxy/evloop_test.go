package proxy

import (
	"fmt"
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

// BenchmarkLoopTransaction is the session's part of a pgbench -S
// transaction in the event loop, per protocol: Admit of the client's
// batch, then Answer of each frame of the backend's answer the loop keeps
// (DataRows are only counted past). Its allocations and time are what the
// loop adds per transaction to its system calls.
func BenchmarkLoopTransaction(b *testing.B) {
	const sql = "SELECT abalance FROM pgbench_accounts WHERE aid = $1;"
	param := [][]byte{[]byte("12345")}
	answer := func(typs ...byte) [][]byte {
		var frames [][]byte
		for _, typ := range typs {
			var msg pgproto3.BackendMessage
			switch typ {
			case '1':
				msg = &pgproto3.ParseComplete{}
			case '2':
				msg = &pgproto3.BindComplete{}
			case 'T':
				msg = &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("abalance"), DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1}}}
			case 'C':
				msg = &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}
			case 'Z':
				msg = &pgproto3.ReadyForQuery{TxStatus: 'I'}
			}
			frame, err := msg.Encode(nil)
			if err != nil {
				b.Fatal(err)
			}
			frames = append(frames, frame)
		}
		return frames
	}
	encode := func(msgs ...pgproto3.FrontendMessage) []byte {
		var batch []byte
		for _, m := range msgs {
			var err error
			if batch, err = m.Encode(batch); err != nil {
				b.Fatal(err)
			}
		}
		return batch
	}
	// pgbench's simple protocol sends the key in the text: each
	// transaction's text is new to the session.
	var simpleBatches [][]byte
	for aid := range 1000 {
		simpleBatches = append(simpleBatches, encode(&pgproto3.Query{
			String: fmt.Sprintf("SELECT abalance FROM pgbench_accounts WHERE aid = %d;", 1+aid*997)}))
	}
	cases := []struct {
		name    string
		prepare []byte   // sent once, through the loop too
		batch   []byte   // sent each transaction
		batches [][]byte // or one of these in turn: texts that differ
		answer  [][]byte
	}{
		{
			name:    "simple",
			batches: simpleBatches,
			answer:  answer('T', 'C', 'Z'),
		},
		{
			name: "extended",
			batch: encode(&pgproto3.Parse{Query: sql}, &pgproto3.Bind{Parameters: param},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}),
			answer: answer('1', '2', 'T', 'C', 'Z'),
		},
		{
			name:    "prepared",
			prepare: encode(&pgproto3.Parse{Name: "P_0", Query: sql}, &pgproto3.Sync{}),
			batch: encode(&pgproto3.Bind{PreparedStatement: "P_0", Parameters: param},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}),
			answer: answer('2', 'T', 'C', 'Z'),
		},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			obs, err := observe.New(observe.Config{})
			if err != nil {
				b.Fatal(err)
			}
			s := &Session{obs: obs.OpenSession(observe.SessionInfo{ID: 1}, logrus.NewEntry(logrus.New()))}
			transaction := func(batch []byte, answer [][]byte) {
				if !s.Admit(batch) {
					b.Fatal("batch not admitted")
				}
				for _, frame := range answer {
					if !s.Answer(frame[0], frame) {
						b.Fatalf("answer %c ends the loop's turn", frame[0])
					}
				}
			}
			if c.prepare != nil {
				transaction(c.prepare, answer('1', 'Z'))
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				batch := c.batch
				if c.batches != nil {
					batch = c.batches[i%len(c.batches)]
				}
				transaction(batch, c.answer)
			}
		})
	}
}
