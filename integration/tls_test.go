package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// selfSignedCert writes a self-signed certificate for 127.0.0.1 and
// localhost and its key, and returns their paths.
func selfSignedCert(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "mzproxy integration test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestTLS: with a certificate the proxy offers TLS; without one it refuses
// SSLRequest and clients that require TLS fail.
func TestTLS(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	certFile, keyFile := selfSignedCert(t)
	withTLS := startProxy(t, "--tls-cert", certFile, "--tls-key", keyFile)
	without := startProxy(t)

	url := func(p *proxyProc, sslmode string) string {
		return strings.Replace(p.URL("postgres", "postgres"), "sslmode=disable", sslmode, 1)
	}
	tests := []struct {
		name    string
		url     string
		wantTLS bool
		fails   bool
	}{
		{"require", url(withTLS, "sslmode=require"), true, false},
		{"verify-full", url(withTLS, "sslmode=verify-full&sslrootcert="+certFile), true, false},
		{"prefer", url(withTLS, "sslmode=prefer"), true, false},
		{"disable on a TLS proxy", url(withTLS, "sslmode=disable"), false, false},
		{"require without TLS", url(without, "sslmode=require"), false, true},
		{"prefer without TLS", url(without, "sslmode=prefer"), false, false},
		{"disable without TLS", url(without, "sslmode=disable"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, tt.url)
			if tt.fails {
				if err == nil {
					conn.Close(ctx)
					t.Fatal("connected")
				}
				if !strings.Contains(err.Error(), "server refused TLS connection") {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			_, isTLS := conn.PgConn().Conn().(*tls.Conn)
			if isTLS != tt.wantTLS {
				t.Fatalf("TLS connection: %v, want %v", isTLS, tt.wantTLS)
			}
			// A big result over TLS, so that records span reads.
			var n int
			var l int
			if err := conn.QueryRow(ctx, "SELECT count(*), sum(length(repeat('x', g))) FROM generate_series(1, 3000) g").Scan(&n, &l); err != nil {
				t.Fatal(err)
			}
			if n != 3000 || l != 3000*3001/2 {
				t.Fatalf("got %d %d", n, l)
			}
			rows, err := conn.Query(ctx, "SELECT repeat('y', 100000) FROM generate_series(1, 20)")
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				total += len(s)
			}
			if rows.Err() != nil || total != 2000000 {
				t.Fatalf("large rows over TLS: %d bytes, %v", total, rows.Err())
			}
		})
	}

	t.Run("GSSENC refused, then TLS", func(t *testing.T) {
		// libpq built with GSSAPI asks for GSS encryption first.
		nc, err := net.DialTimeout("tcp", withTLS.addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
		var answer [1]byte
		for _, req := range []struct {
			code uint32
			want byte
		}{{80877104, 'N'}, {80877103, 'S'}} {
			if _, err := nc.Write(be32(8, req.code)); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(nc, answer[:]); err != nil || answer[0] != req.want {
				t.Fatalf("request %d: got %q %v, want %q", req.code, answer, err, req.want)
			}
		}
		tc := tls.Client(nc, &tls.Config{InsecureSkipVerify: true})
		c := &rawClient{t: t, nc: tc, fe: pgproto3.NewFrontend(tc, tc)}
		c.startup()
		q, _ := (&pgproto3.Query{String: "SELECT 1"}).Encode(nil)
		c.write(q)
		for {
			if _, ok := c.receive().(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
	})

	t.Run("data after SSLRequest is refused", func(t *testing.T) {
		// CVE-2021-23214: bytes sent before the server's answer could be
		// injected by a man in the middle; PostgreSQL refuses them.
		c := withTLS.dialRaw(t)
		c.write(append(be32(8, 80877103), startupBytes()...))
		var answer [1]byte
		if _, err := io.ReadFull(c.nc, answer[:]); err != nil {
			t.Fatal(err)
		}
		if answer[0] != 'E' {
			t.Fatalf("got %q, want an ErrorResponse", answer)
		}
	})

	t.Run("cancel over TLS", func(t *testing.T) {
		// The CancelRequest goes over a new connection; pgx sends it
		// without TLS, and the proxy matches its key to the TLS session.
		conn, err := connectCancelable(t, ctx, url(withTLS, "sslmode=require"))
		if err != nil {
			t.Fatal(err)
		}
		qctx, cancel := context.WithTimeout(ctx, cancelAfter)
		defer cancel()
		_, err = conn.Exec(qctx, "SELECT pg_sleep(30)")
		wantCode(t, err, "57014")
		var n int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("psql sslmode=require", func(t *testing.T) {
		out := withTLS.psqlTarget().mustRun(t, "", []string{"PGSSLMODE=require"}, "-c", `\conninfo`)
		if !strings.Contains(out, "SSL connection") {
			t.Fatalf("\\conninfo: %q", out)
		}
	})
}
