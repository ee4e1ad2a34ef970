package proxy

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/mzproxy/mzproxy/frontend/wire"
)

// messageTypes are the type bytes of the messages in buf, in order.
func messageTypes(t *testing.T, buf []byte) string {
	t.Helper()
	var types []byte
	for len(buf) > 0 {
		if len(buf) < 5 {
			t.Fatalf("truncated message: %q", buf)
		}
		types = append(types, buf[0])
		buf = buf[1+binary.BigEndian.Uint32(buf[1:5]):]
	}
	return string(types)
}

// TestReadGuardSendsNoClose: a read guard prepared on the connection is
// sent as its Bind and Execute only, and its value is read at its
// Execute's CommandComplete: its portal is not closed (issue 15: one
// message each way per timestamped read), since the implicit transaction
// it begins drops it. A guard prepared for another key is closed and
// parsed again first.
func TestReadGuardSendsNoClose(t *testing.T) {
	var sent, answers bytes.Buffer
	b := &backend{w: wire.NewWriter(&sent, 4096), r: wire.NewReader(&answers, 4096, 1<<20)}
	key := guardKey{rev: 7, pin: true}
	for _, c := range []struct {
		key        guardKey
		want       string
		answerFrom []pgproto3.BackendMessage
	}{
		{key, "CPBE", []pgproto3.BackendMessage{&pgproto3.CloseComplete{}, &pgproto3.ParseComplete{}}},
		{key, "BE", nil},
		{guardKey{rev: 8, pin: true}, "CPBE", []pgproto3.BackendMessage{&pgproto3.CloseComplete{}, &pgproto3.ParseComplete{}}},
	} {
		sent.Reset()
		if err := b.sendGuard(c.key, &pinMessages{}); err != nil {
			t.Fatal(err)
		}
		if err := b.w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := messageTypes(t, sent.Bytes()); got != c.want {
			t.Errorf("guard of %+v sent %q, want %q", c.key, got, c.want)
		}
		var out []byte
		for _, m := range append(c.answerFrom, &pgproto3.BindComplete{},
			&pgproto3.DataRow{Values: [][]byte{[]byte("1234")}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}) {
			out, _ = m.Encode(out)
		}
		answers.Write(out)
		value, err := b.readGuard()
		if err != nil || value != "1234" {
			t.Fatalf("guard of %+v: %q, %v", c.key, value, err)
		}
	}
}
