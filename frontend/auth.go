package frontend

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"

	"github.com/mzproxy/mzproxy/frontend/wire"
	"github.com/mzproxy/mzproxy/pgerr"
)

// scramIterations is PostgreSQL's default scram_iterations.
const scramIterations = 4096

// scramSaltLen is PostgreSQL's SCRAM_DEFAULT_SALT_LEN.
const scramSaltLen = 16

// User is one entry of the users file.
type User struct {
	Name string
	// Password is the plaintext password when the file gave one; the
	// proxy may use it to log in to a backend that wants a password.
	Password string
	creds    scram.StoredCredentials
}

// Users is the set of users SCRAM authentication accepts. It is safe for
// concurrent use and can be replaced whole (on reload).
type Users struct {
	mu    sync.RWMutex
	users map[string]*User
}

// LoadUsers reads a users file. Each line is `"name" "secret"` (PgBouncer's
// userlist.txt format; "" inside quotes is a quote), where the secret is a
// plaintext password or a SCRAM verifier as PostgreSQL stores it
// (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, e.g. from
// pg_authid.rolpassword). Blank lines and lines starting with # or ; are
// ignored.
func LoadUsers(path string) (*Users, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	u := &Users{users: make(map[string]*User)}
	sc := bufio.NewScanner(f)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		fields, err := quotedFields(line)
		if err != nil || len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"name\" \"secret\"", path, lineNo)
		}
		user, err := newUser(fields[0], fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, lineNo, err)
		}
		u.users[user.Name] = user
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return u, nil
}

// Lookup returns a user by name.
func (u *Users) Lookup(name string) (*User, bool) {
	if u == nil {
		return nil, false
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	user, ok := u.users[name]
	return user, ok
}

// Replace swaps in the users of other (a reloaded file).
func (u *Users) Replace(other *Users) {
	other.mu.RLock()
	users := other.users
	other.mu.RUnlock()
	u.mu.Lock()
	u.users = users
	u.mu.Unlock()
}

func newUser(name, secret string) (*User, error) {
	if strings.HasPrefix(secret, "SCRAM-SHA-256$") {
		creds, err := parseSCRAMVerifier(secret)
		if err != nil {
			return nil, err
		}
		return &User{Name: name, creds: creds}, nil
	}
	var salt [scramSaltLen]byte
	_, _ = rand.Read(salt[:])
	client, err := scram.SHA256.NewClient(name, secret, "")
	if err != nil {
		return nil, fmt.Errorf("password of %q: %v", name, err)
	}
	kf := scram.KeyFactors{Salt: string(salt[:]), Iters: scramIterations}
	return &User{Name: name, Password: secret, creds: client.GetStoredCredentials(kf)}, nil
}

func parseSCRAMVerifier(v string) (scram.StoredCredentials, error) {
	bad := fmt.Errorf("malformed SCRAM-SHA-256 verifier")
	parts := strings.Split(strings.TrimPrefix(v, "SCRAM-SHA-256$"), "$")
	if len(parts) != 2 {
		return scram.StoredCredentials{}, bad
	}
	iterSalt := strings.SplitN(parts[0], ":", 2)
	keys := strings.SplitN(parts[1], ":", 2)
	if len(iterSalt) != 2 || len(keys) != 2 {
		return scram.StoredCredentials{}, bad
	}
	iters, err := strconv.Atoi(iterSalt[0])
	if err != nil || iters <= 0 {
		return scram.StoredCredentials{}, bad
	}
	var dec [3][]byte
	for i, s := range []string{iterSalt[1], keys[0], keys[1]} {
		if dec[i], err = base64.StdEncoding.DecodeString(s); err != nil {
			return scram.StoredCredentials{}, bad
		}
	}
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(dec[0]), Iters: iters},
		StoredKey:  dec[1],
		ServerKey:  dec[2],
	}, nil
}

// quotedFields splits `"a" "b"` into its fields.
func quotedFields(line string) ([]string, error) {
	var out []string
	for i := 0; i < len(line); {
		switch line[i] {
		case ' ', '\t':
			i++
			continue
		case '"':
		default:
			return nil, fmt.Errorf("expected a quote")
		}
		var b strings.Builder
		i++
		for {
			if i >= len(line) {
				return nil, fmt.Errorf("unterminated quote")
			}
			if line[i] == '"' {
				if i+1 < len(line) && line[i+1] == '"' {
					b.WriteByte('"')
					i += 2
					continue
				}
				i++
				break
			}
			b.WriteByte(line[i])
			i++
		}
		out = append(out, b.String())
	}
	return out, nil
}

// mockCredentials is the SCRAM verifier of a user the users file does not
// have, as PostgreSQL's mock_scram_secret: the exchange runs to the client's
// proof and fails there as a wrong password does, so that the answers do not
// tell which users exist. The salt is derived from the user name and a
// secret of this server, so that it is the same at every attempt for the
// same name, as a real user's is; the keys are of no password.
func (s *Server) mockCredentials(userName string) scram.StoredCredentials {
	derive := func(purpose string, size int) []byte {
		mac := hmac.New(sha256.New, s.mockSecret[:])
		mac.Write([]byte(purpose + "\x00" + userName))
		return mac.Sum(nil)[:size]
	}
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(derive("salt", scramSaltLen)), Iters: scramIterations},
		StoredKey:  derive("stored key", sha256.Size),
		ServerKey:  derive("server key", sha256.Size),
	}
}

// authSCRAM runs SCRAM-SHA-256 with the client for the user it named.
func (c *conn) authSCRAM(userName string) error {
	failed := pgerr.Fatal(pgerr.InvalidPassword, "password authentication failed for user %q", userName)
	user, known := c.srv.cfg.Users.Lookup(userName)
	creds := c.srv.mockCredentials(userName)
	if known {
		creds = user.creds
	}
	// The client's own user name in the SCRAM message is ignored, as
	// PostgreSQL does: the startup packet names the user.
	srv, err := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) {
		return creds, nil
	})
	if err != nil {
		return err
	}
	conv := srv.NewConversation()
	if err := (authRelay{c}).SendAuth(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}}); err != nil {
		return err
	}
	frame, err := (authRelay{c}).ReceiveAuth()
	if err != nil {
		return err
	}
	var first pgproto3.SASLInitialResponse
	if err := first.Decode(wire.Body(frame)); err != nil || first.AuthMechanism != "SCRAM-SHA-256" {
		return pgerr.Fatal(pgerr.ProtocolViolation, "client selected an invalid SASL authentication mechanism")
	}
	challenge, err := conv.Step(string(first.Data))
	if err != nil {
		return failed
	}
	if err := (authRelay{c}).SendAuth(&pgproto3.AuthenticationSASLContinue{Data: []byte(challenge)}); err != nil {
		return err
	}
	if frame, err = (authRelay{c}).ReceiveAuth(); err != nil {
		return err
	}
	var final pgproto3.SASLResponse
	if err := final.Decode(wire.Body(frame)); err != nil {
		return pgerr.Fatal(pgerr.ProtocolViolation, "malformed SCRAM message")
	}
	outcome, err := conv.Step(string(final.Data))
	if err != nil || !conv.Valid() || !known {
		return failed
	}
	// AuthenticationOk follows in openSession.
	return c.w.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte(outcome)})
}
