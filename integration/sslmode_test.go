package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPassthroughBackendSSLMode: with --auth passthrough the proxy dials
// the backend itself, and does so as libpq does for the backend URL's
// sslmode. The test cluster has no TLS, so prefer (also when the URL names
// no sslmode) and disable work in plaintext, prefer also when the server
// agrees to TLS and then fails the handshake, and require fails with a
// clear error. The backend is reached over loopback TCP (a relay to the
// cluster's socket), since TLS settings do not apply to Unix sockets.
func TestPassthroughBackendSSLMode(t *testing.T) {
	t.Parallel()
	plain := tcpRelay(t, false)
	brokenTLS := tcpRelay(t, true)
	tests := []struct {
		name, relay, sslmode string
		wantErr              string // "": the session works
	}{
		{name: "prefer", relay: plain, sslmode: "prefer"},
		{name: "no sslmode", relay: plain},
		{name: "disable", relay: plain, sslmode: "disable"},
		{name: "prefer, TLS handshake fails", relay: brokenTLS, sslmode: "prefer"},
		{name: "require", relay: plain, sslmode: "require", wantErr: "server does not support SSL, but SSL was required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Its own context: a parallel subtest may wait long for its
			// turn on a loaded machine.
			ctx := testContext(t)
			backend := "postgres://postgres@" + tt.relay + "/postgres"
			if tt.sslmode != "" {
				backend += "?sslmode=" + tt.sslmode
			}
			// The last --backend wins over startProxy's own.
			p := startProxy(t, "--auth", "passthrough", "--backend", backend)
			conn, err := connectCancelable(t, ctx, p.URL("postgres", "postgres"))
			if tt.wantErr != "" {
				wantCode(t, err, "08006")
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want it to say %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ssl bool
			if err := conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || ssl {
				t.Fatalf("backend connection ssl=%v (%v), want plaintext", ssl, err)
			}
			// A cancel reaches the backend over the same fallback.
			qctx, cancel := context.WithTimeout(ctx, cancelAfter)
			defer cancel()
			_, err = conn.Exec(qctx, "SELECT pg_sleep(20)")
			wantCode(t, err, "57014")
		})
	}
}

// tcpRelay serves the test cluster's Unix socket on a loopback TCP port
// and returns its address. With brokenTLS it answers an SSLRequest with
// 'S' itself and then closes the connection: a server that agrees to TLS
// and fails the handshake. Everything it started ends with the test.
func tcpRelay(t *testing.T, brokenTLS bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(env.pg.SocketDir(), fmt.Sprintf(".s.PGSQL.%d", env.pg.Port()))
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	serve := func(client net.Conn) {
		defer client.Close()
		first := make([]byte, 8)
		if _, err := io.ReadFull(client, first); err != nil {
			return
		}
		isSSLRequest := binary.BigEndian.Uint32(first[4:]) == 80877103
		if brokenTLS && isSSLRequest {
			_, _ = client.Write([]byte{'S'})
			return
		}
		server, err := net.DialTimeout("unix", socket, 10*time.Second)
		if err != nil {
			return
		}
		track(server)
		defer server.Close()
		if _, err := server.Write(first); err != nil {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.Copy(client, server)
			client.Close()
		}()
		_, _ = io.Copy(server, client)
		server.Close()
		<-done
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}
