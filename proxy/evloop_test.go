package proxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"

	"github.com/mzproxy/mzproxy/frontend/evloop"
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
	_, admitted := s.Admit(batch)
	s.stmtMu.Unlock()
	if admitted {
		t.Fatal("a batch was admitted while a Cancel held stmtMu")
	}
	if s.loopFlight.Load() {
		t.Fatal("loopFlight set by a refused batch")
	}
	if _, ok := s.Admit(batch); !ok || !s.loopFlight.Load() {
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
	if _, ok := s.Admit(batch); !ok {
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
	for _, c := range loopTransactionCases(b) {
		b.Run(c.name, func(b *testing.B) {
			next := c.start(b)
			b.ReportAllocs()
			for b.Loop() {
				next()
			}
		})
	}
}

// TestLoopTransactionAllocations: a prepared or extended point read
// served by the event loop costs the session no allocation per
// transaction (its Bind reuses the portal record, its Parse the
// statement's, its Bind begins the observed statement with its kind);
// a simple one costs one, its new text. Each used to cost two, in a loop
// whose own CPU is otherwise the system calls PgBouncer makes too.
func TestLoopTransactionAllocations(t *testing.T) {
	want := map[string]float64{"simple": 1, "extended": 0, "prepared": 0, "prepared-pgx": 0}
	for _, c := range loopTransactionCases(t) {
		next := c.start(t)
		next() // the first transaction's records are new
		if got := testing.AllocsPerRun(200, next); got > want[c.name] {
			t.Errorf("%s: %.1f allocations per transaction, want at most %.0f", c.name, got, want[c.name])
		}
	}
}

// loopTransactionCase is pgbench -S's transaction in one protocol; start
// makes a session, prepares it, and returns one transaction in the loop.
type loopTransactionCase struct {
	name  string
	start func(tb testing.TB) func()
}

func loopTransactionCases(tb testing.TB) []loopTransactionCase {
	const sql = "SELECT abalance FROM pgbench_accounts WHERE aid = $1;"
	const pgxName = "stmtcache_5f1e9a7c0b3d2e4f6a8b9c0d1e2f3a4b5c6d7e8f"
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
				tb.Fatal(err)
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
				tb.Fatal(err)
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
		{
			// pgx's statement cache names its statements stmtcache_ and a
			// digest: longer than a string conversion's stack buffer.
			name:    "prepared-pgx",
			prepare: encode(&pgproto3.Parse{Name: pgxName, Query: sql}, &pgproto3.Sync{}),
			batch: encode(&pgproto3.Bind{PreparedStatement: pgxName, Parameters: param},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}),
			answer: answer('2', 'T', 'C', 'Z'),
		},
	}
	var out []loopTransactionCase
	for _, c := range cases {
		out = append(out, loopTransactionCase{name: c.name, start: func(tb testing.TB) func() {
			obs, err := observe.New(observe.Config{})
			if err != nil {
				tb.Fatal(err)
			}
			s := &Session{obs: obs.OpenSession(observe.SessionInfo{ID: 1}, logrus.NewEntry(logrus.New()))}
			transaction := func(batch []byte, answer [][]byte) {
				if _, ok := s.Admit(batch); !ok {
					tb.Fatal("batch not admitted")
				}
				// As the loop: a quiet answer's ParseComplete,
				// BindComplete and RowDescription are only relayed.
				quiet := s.QuietAnswer()
				for _, frame := range answer {
					if quiet && evloop.QuietFrame(frame[0]) {
						continue
					}
					if s.Answer(frame[0], frame) != evloop.Relay {
						tb.Fatalf("answer %c ends the loop's turn", frame[0])
					}
				}
			}
			if c.prepare != nil {
				transaction(c.prepare, answer('1', 'Z'))
			}
			i := 0
			return func() {
				batch := c.batch
				if c.batches != nil {
					batch = c.batches[i%len(c.batches)]
				}
				i++
				transaction(batch, c.answer)
			}
		}})
	}
	return out
}

// FuzzReadPlain: the event loop's reader of a batch's frames is never more
// lenient than the decoders of the session's own path (pgproto3's, and
// PostgreSQL's rule that nothing follows a message's last field): a frame
// it accepts decodes there too, to the same names and text. One it
// refuses goes to the session's goroutine, which answers it as always.
func FuzzReadPlain(f *testing.F) {
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Query{String: "SELECT 1"},
		&pgproto3.Parse{Name: "s", Query: "SELECT $1", ParameterOIDs: []uint32{23}},
		&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s", ParameterFormatCodes: []int16{1},
			Parameters: [][]byte{[]byte("1"), nil}, ResultFormatCodes: []int16{0, 1}},
		&pgproto3.Describe{ObjectType: 'S', Name: "s"},
		&pgproto3.Execute{Portal: "p", MaxRows: 5},
		&pgproto3.Sync{},
		&pgproto3.Close{ObjectType: 'S', Name: "s"},
	} {
		frame, err := m.Encode(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[0], frame[5:])
		f.Add(frame[0], append(frame[5:], 0))
		if len(frame) > 5 {
			f.Add(frame[0], frame[5:len(frame)-1])
		}
	}
	f.Fuzz(func(t *testing.T, typ byte, body []byte) {
		frame := append([]byte{typ, 0, 0, 0, 0}, body...)
		binary.BigEndian.PutUint32(frame[1:], uint32(4+len(body)))
		m, ok := readPlain(frame)
		if !ok {
			return
		}
		var want pgproto3.FrontendMessage
		switch typ {
		case 'Q':
			want = &pgproto3.Query{String: string(m.name)}
		case 'P':
			want = &pgproto3.Parse{Name: string(m.name), Query: string(m.stmt)}
		case 'B':
			want = &pgproto3.Bind{DestinationPortal: string(m.name), PreparedStatement: string(m.stmt)}
		case 'D':
			want = &pgproto3.Describe{ObjectType: m.objType, Name: string(m.name)}
		case 'E':
			want = &pgproto3.Execute{Portal: string(m.name)}
		case 'S':
			want = &pgproto3.Sync{}
		default:
			t.Fatalf("type %q read as plain", typ)
		}
		got := reflect.New(reflect.TypeOf(want).Elem()).Interface().(pgproto3.FrontendMessage)
		if err := got.Decode(body); err != nil {
			t.Fatalf("%q %x: read as plain, refused by pgproto3: %v", typ, body, err)
		}
		// Only the fields the session follows are compared.
		switch g := got.(type) {
		case *pgproto3.Parse:
			g.ParameterOIDs = nil
			if count := int(binary.BigEndian.Uint16(body[len(m.name)+len(m.stmt)+2:])); 2+count*4 != len(body)-len(m.name)-len(m.stmt)-2 {
				t.Fatalf("%x: a Parse with bytes after its parameter types read as plain", body)
			}
		case *pgproto3.Bind:
			g.ParameterFormatCodes, g.Parameters, g.ResultFormatCodes = nil, nil, nil
		case *pgproto3.Execute:
			g.MaxRows = 0
			if len(body) != len(m.name)+5 {
				t.Fatalf("%x: an Execute with bytes after its row limit read as plain", body)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q %x: read as %+v, pgproto3 reads %+v", typ, body, want, got)
		}
	})
}

// FuzzReadBind: readBind (a prepared read's Bind, read by the event
// loop's Admit into reused storage) reads what pgproto3's decoder, the
// session's own path, reads from any frame it accepts, whatever it read
// before, and accepts no frame that decoder refuses.
func FuzzReadBind(f *testing.F) {
	for _, m := range []*pgproto3.Bind{
		{PreparedStatement: "s", Parameters: [][]byte{[]byte("42")}},
		{DestinationPortal: "p", PreparedStatement: "stmtcache_0123", ParameterFormatCodes: []int16{1, 0},
			Parameters: [][]byte{{0, 0, 0, 7}, nil, {}}, ResultFormatCodes: []int16{1}},
	} {
		frame, err := m.Encode(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[5:])
		f.Add(append(frame[5:], 0))
		f.Add(frame[5 : len(frame)-1])
	}
	var m pgproto3.Bind // reused, as Admit's is
	f.Fuzz(func(t *testing.T, body []byte) {
		frame := append([]byte{'B', 0, 0, 0, 0}, body...)
		binary.BigEndian.PutUint32(frame[1:], uint32(4+len(body)))
		if !readBind(frame, &m) {
			return
		}
		var want pgproto3.Bind
		if err := want.Decode(body); err != nil {
			t.Fatalf("%x: read, refused by pgproto3: %v", body, err)
		}
		same := m.DestinationPortal == want.DestinationPortal && m.PreparedStatement == want.PreparedStatement &&
			slices.Equal(m.ParameterFormatCodes, want.ParameterFormatCodes) &&
			slices.Equal(m.ResultFormatCodes, want.ResultFormatCodes) && len(m.Parameters) == len(want.Parameters)
		for i := 0; same && i < len(m.Parameters); i++ {
			same = (m.Parameters[i] == nil) == (want.Parameters[i] == nil) && bytes.Equal(m.Parameters[i], want.Parameters[i])
		}
		if !same {
			t.Fatalf("%x: read as %+v, pgproto3 reads %+v", body, m, want)
		}
	})
}

// TestAdmitBoundsBatchNames: a batch defining more statements than the
// loop looks up one by one goes to the session's goroutine (which serves
// it as any pipeline); one within the bound is admitted, each Bind
// judged by the last Parse of its statement before it.
func TestAdmitBoundsBatchNames(t *testing.T) {
	obs, err := observe.New(observe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	batchOf := func(parses int, last string) []byte {
		var batch []byte
		for i := range parses {
			sql := "SELECT 1"
			if i == parses-1 {
				sql = last
			}
			batch, _ = (&pgproto3.Parse{Name: "s", Query: sql}).Encode(batch)
		}
		batch, _ = (&pgproto3.Bind{PreparedStatement: "s"}).Encode(batch)
		batch, _ = (&pgproto3.Execute{}).Encode(batch)
		batch, _ = (&pgproto3.Sync{}).Encode(batch)
		return batch
	}
	for _, c := range []struct {
		parses int
		last   string
		want   bool
	}{
		{maxBatchNames, "SELECT 2", true},
		{maxBatchNames + 1, "SELECT 2", false},
		// The Bind is of the last Parse, a write: not plain.
		{2, "INSERT INTO t VALUES (1)", false},
	} {
		s := &Session{obs: obs.OpenSession(observe.SessionInfo{}, logrus.NewEntry(logrus.New()))}
		if _, got := s.Admit(batchOf(c.parses, c.last)); got != c.want {
			t.Errorf("%d Parses, the last of %q: admitted %v, want %v", c.parses, c.last, got, c.want)
		}
		if st := s.stmts["s"]; c.want && (st == nil || st.sql != c.last) {
			t.Errorf("%d Parses: statement s recorded as %+v, want the last Parse's", c.parses, st)
		}
	}
}

// TestAdmitReusesOnlyEqualRecords: the loop's Parse and Bind reuse a
// statement's or portal's record only when a new one would be equal: a
// Parse of another text under the same name gets its own record, and a
// Bind of it a portal of that record, not of the one bound before.
func TestAdmitReusesOnlyEqualRecords(t *testing.T) {
	obs, err := observe.New(observe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{obs: obs.OpenSession(observe.SessionInfo{ID: 1}, logrus.NewEntry(logrus.New()))}
	ready, _ := (&pgproto3.ReadyForQuery{TxStatus: 'I'}).Encode(nil)
	run := func(sql string) (*preparedStmt, *portal) {
		t.Helper()
		var batch []byte
		for _, m := range []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{},
			&pgproto3.Execute{}, &pgproto3.Sync{}} {
			batch, _ = m.Encode(batch)
		}
		if _, ok := s.Admit(batch); !ok {
			t.Fatalf("%s: not admitted", sql)
		}
		st, p := s.stmts[""], s.portals[""]
		if st == nil || st.sql != sql || p == nil || p.stmt != st {
			t.Fatalf("%s: statement %+v, portal %+v", sql, st, p)
		}
		s.Answer('Z', ready)
		return st, p
	}
	st1, p1 := run("SELECT 1")
	st2, p2 := run("SELECT 1")
	if st2 != st1 || p2 != p1 {
		t.Error("the same text parsed and bound again: new records")
	}
	st3, p3 := run("SELECT 2")
	if st3 == st1 || p3 == p1 || st1.sql != "SELECT 1" {
		t.Errorf("another text: statement %p (was %p), portal %p (was %p), first still %q", st3, st1, p3, p1, st1.sql)
	}
	// A record the session's own path made for the name, different from
	// the loop's (a write's route): never reused for a plain read.
	s.stmts[""] = &preparedStmt{sql: "SELECT 2", route: route{write: true}}
	if st4, _ := run("SELECT 2"); st4.route.write {
		t.Error("a plain read's Parse reused a write's record")
	}
}

// TestQuietAnswerOnlyWhenPlainAnswerFollows: the loop relays an answer's
// ParseComplete, BindComplete and RowDescription without Answer only when
// plainAnswer follows the answer, which relays them unlooked at: not
// while a guarded read's own statements are answered first (loopAnswer
// drops those frames) nor at a read-only transaction's pin
// (loopTxnAnswer).
func TestQuietAnswerOnlyWhenPlainAnswerFollows(t *testing.T) {
	obs, err := observe.New(observe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{obs: obs.OpenSession(observe.SessionInfo{ID: 1}, logrus.NewEntry(logrus.New()))}
	batch, err := (&pgproto3.Query{String: "SELECT 1"}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Admit(batch); !ok || !s.QuietAnswer() {
		t.Fatalf("a plain read: admitted %v, quiet %v; want both", ok, s.QuietAnswer())
	}
	s.loopRead.active, s.loopRead.own = true, []byte{'1'}
	if s.QuietAnswer() {
		t.Error("quiet while a guarded read's own statements are answered first")
	}
	s.loopRead.active, s.loopRead.own = false, nil
	s.loopTxn.g = &pinGuard{}
	if s.QuietAnswer() {
		t.Error("quiet at a read-only transaction's pin")
	}
}
