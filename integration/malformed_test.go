package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestMaxConnections: the client beyond --max-connections is refused as
// PostgreSQL refuses it, and a slot freed is usable again.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--max-connections", "2")
	c1, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	c2 := p.connect(t, ctx)
	_, err = pgx.Connect(ctx, p.URL("postgres", "postgres"))
	wantCode(t, err, "53300")
	if !strings.Contains(err.Error(), "sorry, too many clients already") {
		t.Fatalf("message: %v", err)
	}
	// The two admitted sessions work.
	for _, c := range []*pgx.Conn{c1, c2} {
		var n int
		if err := c.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	c1.Close(ctx)
	eventually(t, 15*time.Second, "a slot is free again", func() bool {
		c, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
		if err != nil {
			if sqlState(err) != "53300" {
				t.Fatalf("unexpected error: %v", err)
			}
			return false
		}
		c.Close(ctx)
		return true
	})
}

// startupBytes is a StartupMessage for postgres/postgres.
func startupBytes() []byte {
	b, _ := (&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters:      map[string]string{"user": "postgres", "database": "postgres"},
	}).Encode(nil)
	return b
}

func be32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// TestMalformedInput sends bytes no driver would to the real proxy
// process: each connection gets an ErrorResponse with 08P01 where the
// protocol allows one and is closed, and the process goes on serving.
func TestMalformedInput(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "--max-message-size", "1024")

	tests := []struct {
		name string
		// afterStartup sends bytes once a session is established.
		afterStartup bool
		send         []byte
		// code is the SQLSTATE of the expected ErrorResponse; "" means the
		// proxy just closes (PostgreSQL does so for an incomplete packet).
		code string
	}{
		{name: "HTTP request", send: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), code: "08P01"},
		{name: "startup length too small", send: be32(4, 196608), code: "08P01"},
		{name: "startup length huge", send: be32(0x7fffffff, 196608), code: "08P01"},
		// PostgreSQL answers an unsupported protocol version with 0A000;
		// mzproxy (and its unit tests) say 08P01. Either is accepted here.
		{name: "protocol 2.0", send: append(be32(8+8, 2<<16), "user\x00x\x00\x00"...), code: "08P01|0A000"},
		{name: "protocol 4.0", send: append(be32(8+8, 4<<16), "user\x00x\x00\x00"...), code: "08P01|0A000"},
		{name: "startup parameters not terminated", send: append(be32(8+6, 196608), "user\x00x"...), code: "08P01"},
		{name: "startup cut short", send: be32(100, 196608)[:6], code: ""},
		{name: "unknown message type", afterStartup: true, send: []byte{'y', 0, 0, 0, 4}, code: "08P01"},
		{name: "length below 4", afterStartup: true, send: []byte{'Q', 0, 0, 0, 2}, code: "08P01"},
		{name: "negative length", afterStartup: true, send: []byte{'Q', 0xff, 0xff, 0xff, 0xff}, code: "08P01"},
		{name: "oversized query", afterStartup: true, send: func() []byte {
			b, _ := (&pgproto3.Query{String: "SELECT '" + strings.Repeat("x", 2000) + "'"}).Encode(nil)
			return b
		}(), code: "08P01"},
		{name: "malformed Bind", afterStartup: true, send: []byte{'B', 0, 0, 0, 6, 'x', 0}, code: "08P01"},
		{name: "second StartupMessage", afterStartup: true, send: startupBytes(), code: "08P01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := p.dialRaw(t)
			if tt.afterStartup {
				c.startup()
			}
			c.write(tt.send)
			if tt.name == "startup cut short" {
				// The client gives up mid-packet.
				_ = c.nc.(interface{ CloseWrite() error }).CloseWrite()
			}
			if tt.code == "" {
				c.expectClosed()
				return
			}
			c.expectFatal(tt.code)
		})
	}
	t.Cleanup(func() {
		// Not ctx: the parallel subtests may have waited out its time.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.mustAlive(t, ctx)
	})

	t.Run("message just under the limit", func(t *testing.T) {
		t.Parallel()
		// Its own context: a parallel subtest may wait out its parent's.
		ctx := testContext(t)
		conn := p.connect(t, ctx)
		var s string
		q := "SELECT '" + strings.Repeat("x", 900) + "'"
		if err := conn.QueryRow(ctx, q).Scan(&s); err != nil || len(s) != 900 {
			t.Fatalf("%d %v", len(s), err)
		}
		// Results are not bounded by the client message limit.
		if err := conn.QueryRow(ctx, "SELECT repeat('y', 100000)").Scan(&s); err != nil || len(s) != 100000 {
			t.Fatalf("%d %v", len(s), err)
		}
	})
}

// TestMaxConnectionsBurst: fifty clients connecting at the same moment to a
// proxy with --max-connections 5 get exactly five sessions; the others are
// refused with 53300, and once the five close, the places are free again.
func TestMaxConnectionsBurst(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	const limit, clients = 5, 50
	p := startProxy(t, "--max-connections", fmt.Sprint(limit))

	start := make(chan struct{})
	var (
		mu       sync.Mutex
		admitted []*pgx.Conn
		refused  int
		others   []error
		wg       sync.WaitGroup
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			conn, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted = append(admitted, conn) // held open until all have tried
			case sqlState(err) == "53300" && strings.Contains(err.Error(), "sorry, too many clients already"):
				refused++
			default:
				others = append(others, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, c := range admitted {
		var n int
		if err := c.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
			t.Errorf("an admitted session does not work: %v", err)
		}
		c.Close(ctx)
	}
	if len(others) > 0 {
		t.Fatalf("unexpected errors: %v", others)
	}
	if len(admitted) != limit || refused != clients-limit {
		t.Fatalf("admitted %d, refused %d; want %d and %d", len(admitted), refused, limit, clients-limit)
	}

	// Every place comes back: limit new sessions at once are admitted.
	eventually(t, 15*time.Second, "the places are free again", func() bool {
		var conns []*pgx.Conn
		defer func() {
			for _, c := range conns {
				c.Close(ctx)
			}
		}()
		for range limit {
			c, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
			if err != nil {
				if sqlState(err) != "53300" {
					t.Fatalf("unexpected error: %v", err)
				}
				return false
			}
			conns = append(conns, c)
		}
		return true
	})
}
