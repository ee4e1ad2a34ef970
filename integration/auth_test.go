package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"
)

// hbaMu serializes edits of the shared cluster's pg_hba.conf.
var hbaMu sync.Mutex

// passwordRole creates a login role with a password on the test
// PostgreSQL and, when method is not "", makes the cluster require that
// method for it on the Unix socket (the cluster otherwise trusts local
// connections). It waits until the new rule is in force.
func passwordRole(t testing.TB, ctx context.Context, role, password, method string) {
	t.Helper()
	direct := connectDirect(t, ctx)
	if _, err := direct.Exec(ctx, fmt.Sprintf("DROP ROLE IF EXISTS %s", role)); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, strings.ReplaceAll(password, "'", "''"))); err != nil {
		t.Fatal(err)
	}
	if method == "" {
		return
	}
	hbaMu.Lock()
	defer hbaMu.Unlock()
	hba := filepath.Join(env.pg.PGData(), "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	// First match wins: the rule goes before the initdb's trust lines.
	rule := fmt.Sprintf("local all %s %s\n", role, method)
	if err := os.WriteFile(hba, append([]byte(rule), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := direct.QueryRow(ctx, "SELECT pg_reload_conf()").Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_reload_conf: %v", err)
	}
	// The postmaster rereads the file asynchronously: wait until a
	// connection without the password is refused.
	eventually(t, 20*time.Second, "pg_hba.conf reload", func() bool {
		c, err := pgx.Connect(ctx, directURL(role, "postgres"))
		if err == nil {
			c.Close(ctx)
			return false
		}
		return true
	})
}

// withPassword returns url with the password set.
func withPassword(rawURL, password string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// TestAuthTrust: the default on a loopback listener lets any user in as the
// user it names; the backend then decides (here: a role that does not
// exist is refused by PostgreSQL itself, with its SQLSTATE).
func TestAuthTrust(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := startProxy(t, "--auth", "trust")
	p.mustAlive(t, ctx)
	_, err := pgx.Connect(ctx, p.URL("no_such_role_trust", "postgres"))
	wantCode(t, err, "28000")
	_, err = pgx.Connect(ctx, p.URL("postgres", "no_such_database"))
	wantCode(t, err, "3D000")
}

// TestAuthSCRAM: the proxy authenticates clients itself with SCRAM-SHA-256
// against a users file holding a plaintext password and a verifier copied
// from PostgreSQL's pg_authid.
func TestAuthSCRAM(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	// The roles exist on the backend, which trusts the proxy's local
	// connections for them.
	passwordRole(t, ctx, "scram_alice", "unused-on-backend", "")
	passwordRole(t, ctx, "scram_bob", "bob's pw", "")
	// carol's backend login needs her password: the proxy knows it from
	// the users file (plaintext) and logs in with it. dave's backend login
	// needs one too, but the users file has only his verifier.
	passwordRole(t, ctx, "scram_carol", "carol pw", "scram-sha-256")
	passwordRole(t, ctx, "scram_dave", "dave pw", "scram-sha-256")
	direct := connectDirect(t, ctx)
	var verifier, daveVerifier string
	if err := direct.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'scram_bob'").Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	if err := direct.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'scram_dave'").Scan(&daveVerifier); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Fatalf("pg_authid has %q; want a SCRAM verifier (password_encryption)", verifier)
	}
	users := filepath.Join(t.TempDir(), "users.txt")
	content := fmt.Sprintf("# test users\n\"scram_alice\" \"secret\"\n\"scram_bob\" \"%s\"\n\"scram_carol\" \"carol pw\"\n\"scram_dave\" \"%s\"\n", verifier, daveVerifier)
	if err := os.WriteFile(users, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--auth", "scram-sha-256", "--users-file", users)

	tests := []struct {
		user, password string
		code           string // "" for success
	}{
		{"scram_alice", "secret", ""},
		{"scram_alice", "wrong", "28P01"},
		{"scram_alice", "", "28P01"},
		{"scram_bob", "bob's pw", ""},
		{"scram_bob", "secret", "28P01"},
		{"scram_nobody", "secret", "28P01"},
		{"scram_carol", "carol pw", ""},
		{"scram_carol", "wrong", "28P01"},
		// The proxy accepts dave, but cannot log in to the backend for
		// him: PostgreSQL's refusal reaches the client.
		{"scram_dave", "dave pw", "28P01"},
	}
	for _, tt := range tests {
		t.Run(tt.user+"/"+tt.password, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, withPassword(p.URL(tt.user, "postgres"), tt.password))
			if tt.code != "" {
				if err == nil {
					conn.Close(ctx)
				}
				wantCode(t, err, tt.code)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var who string
			if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != tt.user {
				t.Fatalf("current_user %q %v", who, err)
			}
		})
	}

	// SCRAM inside TLS (without channel binding: the proxy offers only
	// SCRAM-SHA-256, not -PLUS).
	t.Run("over TLS", func(t *testing.T) {
		cert, key := selfSignedCert(t)
		pt := startProxy(t, "--auth", "scram-sha-256", "--users-file", users, "--tls-cert", cert, "--tls-key", key)
		u := strings.Replace(withPassword(pt.URL("scram_alice", "postgres"), "secret"), "sslmode=disable", "sslmode=require", 1)
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, ok := conn.PgConn().Conn().(*tls.Conn); !ok {
			t.Fatal("not a TLS connection")
		}
		_, err = pgx.Connect(ctx, strings.Replace(u, "secret", "wrong", 1))
		wantCode(t, err, "28P01")
	})

	// psql with a password from PGPASSWORD, as a user would.
	if _, err := os.Stat("/usr/bin/psql"); err == nil {
		out := p.psqlTarget().mustRun(t, "", []string{"PGUSER=scram_alice", "PGPASSWORD=secret"}, "-At", "-U", "scram_alice", "-c", "SELECT current_user")
		if out != "scram_alice\n" {
			t.Fatalf("psql: %q", out)
		}
	}
}

// TestAuthPassthrough: the proxy relays the backend's own authentication.
// It runs against the test cluster for a role that needs no password (the
// exchange is empty) and for roles that pg_hba.conf makes authenticate with
// scram-sha-256 and with a cleartext password.
func TestAuthPassthrough(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	passwordRole(t, ctx, "pt_scram", "scram pw", "scram-sha-256")
	passwordRole(t, ctx, "pt_clear", "clear pw", "password")
	p := startProxy(t, "--auth", "passthrough")

	tests := []struct {
		user, password string
		code           string
	}{
		{"postgres", "", ""}, // trusted by the backend: no exchange
		{"pt_scram", "scram pw", ""},
		{"pt_scram", "wrong", "28P01"},
		{"pt_scram", "", "28P01"},
		{"pt_clear", "clear pw", ""},
		{"pt_clear", "wrong", "28P01"},
	}
	for _, tt := range tests {
		t.Run(tt.user+"/"+tt.password, func(t *testing.T) {
			u := p.URL(tt.user, "postgres")
			if tt.password != "" {
				u = withPassword(u, tt.password)
			}
			conn, err := connectCancelable(t, ctx, u)
			if tt.code != "" {
				if tt.password == "" && err != nil && sqlState(err) == "" {
					// pgx refuses to answer a password request without a
					// password before it reaches the server.
					return
				}
				wantCode(t, err, tt.code)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var who string
			if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != tt.user {
				t.Fatalf("current_user %q %v", who, err)
			}
			// Cancel works for a passthrough session too (the backend key
			// came from the relayed startup).
			qctx, cancel := context.WithTimeout(ctx, cancelAfter)
			defer cancel()
			_, err = conn.Exec(qctx, "SELECT pg_sleep(20)")
			wantCode(t, err, "57014")
		})
	}
}

// TestSCRAMUnknownUserLooksLikeWrongPassword: with scram-sha-256, a user the
// users file does not have goes through the same exchange as a known user
// with a wrong password (PostgreSQL's mock verifier): a server-first message
// of the same shape, with a salt that is stable for the same name, and the
// same FATAL 28P01 only after the client's proof.
func TestSCRAMUnknownUserLooksLikeWrongPassword(t *testing.T) {
	t.Parallel()
	users := filepath.Join(t.TempDir(), "users.txt")
	if err := os.WriteFile(users, []byte("\"scram_known\" \"right pw\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, "--auth", "scram-sha-256", "--users-file", users)

	known := scramAttempt(t, p, "scram_known", "wrong pw")
	unknown := scramAttempt(t, p, "scram_nobody", "wrong pw")
	again := scramAttempt(t, p, "scram_nobody", "other pw")
	other := scramAttempt(t, p, "scram_nobody_else", "wrong pw")

	for _, a := range []scramOutcome{known, unknown} {
		want := fmt.Sprintf("FATAL 28P01 password authentication failed for user %q", a.user)
		if a.failure != want {
			t.Errorf("%s: failed with %q, want %q", a.user, a.failure, want)
		}
	}
	if known.iterations != unknown.iterations || len(known.salt) != len(unknown.salt) {
		t.Errorf("server-first differs in shape: known i=%s salt %q, unknown i=%s salt %q",
			known.iterations, known.salt, unknown.iterations, unknown.salt)
	}
	if unknown.salt != again.salt {
		t.Errorf("an unknown user's salt changes between attempts: %q, %q", unknown.salt, again.salt)
	}
	if unknown.salt == other.salt {
		t.Errorf("two unknown users have the same salt %q", unknown.salt)
	}
}

// scramOutcome is what one SCRAM attempt saw.
type scramOutcome struct {
	user             string
	salt, iterations string // from the server-first message
	failure          string // "SEVERITY CODE message" of the final error
}

// scramAttempt runs a SCRAM-SHA-256 login for user with password over the
// raw protocol and expects it to fail after the client's proof.
func scramAttempt(t *testing.T, p *proxyProc, user, password string) scramOutcome {
	t.Helper()
	out := scramOutcome{user: user}
	c := p.dialRaw(t)
	start, _ := (&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters:      map[string]string{"user": user, "database": "postgres"},
	}).Encode(nil)
	c.write(start)
	if m, ok := c.receive().(*pgproto3.AuthenticationSASL); !ok || !slices.Contains(m.AuthMechanisms, "SCRAM-SHA-256") {
		t.Fatalf("%s: want AuthenticationSASL, got %#v", user, m)
	}
	client, err := scram.SHA256.NewClient(user, password, "")
	if err != nil {
		t.Fatal(err)
	}
	conv := client.NewConversation()
	first, _ := conv.Step("")
	msg, _ := (&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte(first)}).Encode(nil)
	c.write(msg)
	m := c.receive()
	cont, ok := m.(*pgproto3.AuthenticationSASLContinue)
	if !ok {
		t.Fatalf("%s: after client-first, want AuthenticationSASLContinue, got %#v", user, m)
	}
	for _, attr := range strings.Split(string(cont.Data), ",") {
		switch {
		case strings.HasPrefix(attr, "s="):
			out.salt = attr[2:]
		case strings.HasPrefix(attr, "i="):
			out.iterations = attr[2:]
		}
	}
	final, err := conv.Step(string(cont.Data))
	if err != nil {
		t.Fatalf("%s: client-final: %v", user, err)
	}
	msg, _ = (&pgproto3.SASLResponse{Data: []byte(final)}).Encode(nil)
	c.write(msg)
	m = c.receive()
	er, ok := m.(*pgproto3.ErrorResponse)
	if !ok {
		t.Fatalf("%s: after the proof, want ErrorResponse, got %#v", user, m)
	}
	out.failure = er.Severity + " " + er.Code + " " + er.Message
	c.expectClosed()
	return out
}
