package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// ownNameSuffix ends the names of the statements and portals the proxy
// prepares on a client's backend connection (the pin's guard and raise,
// the read guard, the write slots...), random per process. They share the
// connection's namespace with the client's own: under a name a client may
// use, the client's PREPARE of it failed with 42P05, its EXECUTE ran the
// proxy's statement, its DEALLOCATE dropped the proxy's, and the proxy
// closed a statement the client had prepared under it, none of which
// PostgreSQL does (TestHostile8GuardNames). Only a client that reads them
// from pg_prepared_statements can name them, and then only in its own
// session, whose statements the proxy prepares again when they are gone.
var ownNameSuffix = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}()

// ownName is the name of one of the proxy's prepared statements on a
// client's backend connection: base, which says what it is, and the
// process's suffix.
func ownName(base string) string { return base + "_" + ownNameSuffix }

// isOwnName reports whether name is one ownName made in this process.
func isOwnName(name string) bool {
	n := len(name) - len(ownNameSuffix)
	return n > 0 && name[n-1] == '_' && strings.HasSuffix(name, ownNameSuffix)
}
