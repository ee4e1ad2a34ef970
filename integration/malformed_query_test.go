package integration

import (
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestMalformedQueryLikePostgreSQL: a Query or Parse whose query string
// has a NUL before its end (or no terminator) gets the same answers through
// the proxy as from PostgreSQL itself: an ERROR 08P01 with PostgreSQL's
// message, and the session goes on.
func TestMalformedQueryLikePostgreSQL(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	steps := []struct{ name, send string }{
		{"NUL inside a Query", frameOf('Q', "SELECT 1\x00; SELECT 2\x00")},
		{"NUL first in a Query", frameOf('Q', "\x00SELECT 1\x00")},
		{"Query without terminator", frameOf('Q', "SELECT 1")},
		{"NUL inside a Parse", frameOf('P', "\x00SELECT 1\x00x\x00\x00\x00") + frameOf('B', "skipped") + frameOf('S', "")},
		{"NUL inside a Parse, rest read as fields", frameOf('P', "\x00SELECT 1\x00\x00\x00\x00") + frameOf('S', "")},
		{"the session goes on", frameOf('Q', "SELECT 3\x00")},
		{"failed transaction", frameOf('Q', "BEGIN\x00") + frameOf('Q', "SELECT 1/0\x00")},
		{"NUL in a failed transaction", frameOf('Q', "SELECT 1\x00x\x00")},
		{"end it", frameOf('Q', "ROLLBACK\x00")},
	}
	direct, proxied := dialDirectRaw(t), p.dialRaw(t)
	direct.startup()
	proxied.startup()
	for _, step := range steps {
		want := direct.answers([]byte(step.send))
		got := proxied.answers([]byte(step.send))
		if !slices.Equal(got, want) {
			t.Fatalf("%s: through the proxy %q, PostgreSQL %q", step.name, got, want)
		}
	}
	if !slices.Contains(proxied.answers([]byte(frameOf('Q', "SELECT 1\x00x\x00"))), "E ERROR 08P01 invalid message format") {
		t.Fatal("the malformed Query was not answered with PostgreSQL's error")
	}

	// In an open transaction block PostgreSQL's error aborts the
	// transaction; the proxy cannot make its backend do that, so it ends
	// the session instead (the backend rolls the transaction back).
	proxied.answers([]byte(frameOf('Q', "BEGIN\x00")))
	proxied.write([]byte(frameOf('Q', "SELECT 1\x00x\x00")))
	proxied.expectFatal("08P01")
}

// frameOf is a typed protocol message with body as given.
func frameOf(typ byte, body string) string {
	b := []byte{typ}
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)+4))
	return string(append(b, body...))
}

// dialDirectRaw is a bare connection to the test PostgreSQL itself.
func dialDirectRaw(t testing.TB) *rawClient {
	t.Helper()
	socket := filepath.Join(env.pg.SocketDir(), fmt.Sprintf(".s.PGSQL.%d", env.pg.Port()))
	nc, err := net.DialTimeout("unix", socket, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawClient{t: t, nc: nc, fe: pgproto3.NewFrontend(nc, nc)}
}

// answers writes the messages b and returns the answers up to the
// ReadyForQuery that ends the last of them, one line each: errors with
// severity, code and message, ReadyForQuery with its status, others by type.
func (c *rawClient) answers(b []byte) []string {
	c.t.Helper()
	c.write(b)
	readies := 0 // each Query and Sync is answered with one ReadyForQuery
	for rest := b; len(rest) >= 5; rest = rest[1+binary.BigEndian.Uint32(rest[1:5]):] {
		if rest[0] == 'Q' || rest[0] == 'S' {
			readies++
		}
	}
	var out []string
	for readies > 0 {
		switch m := c.receive().(type) {
		case *pgproto3.ErrorResponse:
			out = append(out, fmt.Sprintf("E %s %s %s", m.Severity, m.Code, m.Message))
		case *pgproto3.ReadyForQuery:
			out = append(out, fmt.Sprintf("Z %c", m.TxStatus))
			readies--
		default:
			out = append(out, fmt.Sprintf("%T", m))
		}
	}
	return out
}
