package frontend

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/sirupsen/logrus"
)

func encode(msgs ...pgproto3.Message) []byte {
	var out []byte
	for _, m := range msgs {
		var err error
		if out, err = m.Encode(out); err != nil {
			panic(err)
		}
	}
	return out
}

var fuzzStartup = encode(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u"}})

// FuzzServeConn feeds arbitrary client bytes to one connection, either from
// the first byte or after a valid startup. Whatever arrives, the connection
// must end (the client closes its side) without a panic escaping or a
// goroutine left behind. The seed corpus is under testdata/fuzz.
func FuzzServeConn(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(fuzzStartup, false)
	f.Add(encode(&pgproto3.Query{String: "SELECT 1"}, &pgproto3.Terminate{}), true)
	f.Add(encode(&pgproto3.Parse{Query: "x"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{MaxRows: 1}, &pgproto3.Sync{}), true)
	f.Add(encode(&pgproto3.SSLRequest{}, &pgproto3.GSSEncRequest{}), false)
	f.Add(encode(&pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}}), false)
	f.Add([]byte{'Q', 0xff, 0xff, 0xff, 0xff}, true)
	f.Add([]byte{'B', 0, 0, 0, 10, 0, 0, 0xff, 0xff, 0, 0}, true)
	f.Add(encode(&pgproto3.Query{String: "fail"}, &pgproto3.Parse{Query: "fail"}, &pgproto3.Sync{}), true)
	f.Add(encode(&pgproto3.CopyData{Data: []byte("x")}, &pgproto3.CopyDone{}, &pgproto3.CopyFail{Message: "no"}), true)

	f.Fuzz(func(t *testing.T, data []byte, afterStartup bool) {
		l := logrus.New()
		l.SetOutput(io.Discard)
		h := &scriptedHandler{block: make(chan struct{})}
		close(h.block)
		srv := NewServer(Config{Handler: h, Logger: logrus.NewEntry(l), AuthTimeout: 2 * time.Second, MaxMessageSize: 1 << 16})
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.serveConn(server)
		}()
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, client)
		}()
		if afterStartup {
			_, _ = client.Write(fuzzStartup)
		}
		_, _ = client.Write(data)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("connection did not end after the client closed")
		}
		<-drained
	})
}
