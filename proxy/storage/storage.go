package storage

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mzproxy/mzproxy/pgerr"
)

// Schema is the proxy's private schema in the backend database. Every
// relation and function named in this package lives in it.
const Schema = "mzproxy"

// SchemaVersion is the version of the backend layout this package installs.
const SchemaVersion = 7

// Infinity is mz_to of a current version: a version is visible at ts when
// mz_from <= ts AND mz_to > ts.
const Infinity int64 = math.MaxInt64

// WriteTSSetting is the transaction-local setting that holds the commit
// timestamp of a proxy write transaction (set by begin_write). The history
// triggers and the event triggers read it; when it is unset a write or DDL
// on a managed relation did not come through the proxy.
const WriteTSSetting = "mzproxy.write_ts"

// SQL the proxy runs per statement. Each returns one bigint (or nothing).
const (
	// BeginWriteSQL takes the commit slot of the current backend
	// transaction: it locks the txns row, picks T, sets upper = T+1 and
	// read_ts = T, and returns T. Idempotent within a transaction.
	BeginWriteSQL = "SELECT " + Schema + ".begin_write()"
	// BeginWriteAtSQL ($1 = T) is the compare-and-append of the optimistic
	// loop: it succeeds only if upper <= T, else fails with
	// CodeUpperConflict (see UpperConflict).
	BeginWriteAtSQL = "SELECT " + Schema + ".begin_write_at($1)"
	// ReadTSSQL returns the oracle's read timestamp (in any snapshot: the
	// timestamp of the newest committed write).
	ReadTSSQL = "SELECT " + Schema + ".read_ts()"
	// WriteTSSQL allocates a write timestamp: GREATEST(write_ts+1, now_ms,
	// upper, read_ts+1).
	WriteTSSQL = "SELECT " + Schema + ".write_ts()"
	// ApplyWriteSQL ($1 = T) raises read_ts and write_ts to at least T.
	ApplyWriteSQL = "SELECT " + Schema + ".apply_write($1)"
	// CatalogRevisionSQL returns the catalog revision, bumped by every DDL
	// through the proxy.
	CatalogRevisionSQL = "SELECT revision FROM " + Schema + ".catalog_revision"
	// AwaitSlotSQL returns once no transaction holds the commit slot; run
	// it in a transaction holding no other lock.
	AwaitSlotSQL = "SELECT " + Schema + ".await_slot()"
	// UpperSQL returns the shared transaction-log upper.
	UpperSQL = "SELECT upper FROM " + Schema + ".txns"
)

// SQLSTATEs raised by the backend functions and triggers. Class MZ is not
// used by PostgreSQL (classes starting with I-Z are implementation-defined
// and PostgreSQL only uses XX there).
const (
	// CodeUpperConflict: begin_write_at(T) found upper > T (or read_ts >= T).
	// The error's DETAIL is the actual upper, a decimal number.
	CodeUpperConflict pgerr.Code = "MZ001"
	// CodeWriteOutsideProxy: INSERT/UPDATE/DELETE/TRUNCATE/COPY on a managed
	// table in a transaction that did not call begin_write.
	CodeWriteOutsideProxy pgerr.Code = "MZ002"
	// CodeDDLOutsideProxy: ALTER/DROP/... of a managed relation outside a
	// proxy write transaction, or dropping a history trigger.
	CodeDDLOutsideProxy pgerr.Code = "MZ003"
	// CodeSlotBusy: commit_write found the commit slot held by another
	// transaction; DETAIL is T+1. Roll back, AwaitSlotSQL, try again.
	CodeSlotBusy pgerr.Code = "MZ004"
)

// UpperConflict reports whether err is begin_write_at's conflict, and if so
// the actual upper it carried.
func UpperConflict(err error) (upper uint64, ok bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != string(CodeUpperConflict) {
		return 0, false
	}
	u, perr := strconv.ParseUint(pe.Detail, 10, 64)
	if perr != nil {
		return 0, false
	}
	return u, true
}

// ts converts a timestamp for a bigint parameter. Timestamps are uint64
// milliseconds in Go and int8 in the backend; values above MaxInt64 do not
// occur on the EpochMilliseconds timeline.
func ts(t uint64) int64 {
	if t > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(t)
}

// BeginWriteFor is BeginWriteSQL for a transaction that writes for
// incarnation inc (see package lease): the statement fails with a fenced
// error (IsFenced) when inc was fenced by a newer generation or lost its
// lease, and the transaction then writes nothing. A literal, not a
// parameter, so it fits a simple-protocol request the proxy injects.
func BeginWriteFor(inc int64) string {
	return "SELECT " + Schema + ".begin_write(" + strconv.FormatInt(inc, 10) + ")"
}

// BeginWriteOCCFor is the optimistic counterpart of BeginWriteFor: it picks
// the transaction's T, at least floor, and remembers the expected upper
// without taking a lock. inc < 0 means no incarnation (unfenced).
func BeginWriteOCCFor(inc int64, floor uint64) string {
	return "SELECT " + Schema + ".begin_write_occ(" + incLiteral(inc) + ", " + strconv.FormatInt(ts(floor), 10) + ")"
}

// CommitWriteFor is the compare-and-append of an optimistic write
// transaction for incarnation inc (< 0: unfenced): it fails with
// CodeUpperConflict (UpperConflict gives the actual upper), or with the
// fenced error (IsFenced), and the transaction must then roll back.
func CommitWriteFor(inc int64) string {
	return "SELECT " + Schema + ".commit_write(" + incLiteral(inc) + ")"
}

// CommitWriteTxFor is CommitWriteFor for a client's COMMIT: a conflict is
// 40001 "could not serialize access due to concurrent update".
func CommitWriteTxFor(inc int64) string {
	return "SELECT " + Schema + ".commit_write_tx(" + incLiteral(inc) + ")"
}

func incLiteral(inc int64) string {
	if inc < 0 {
		return "NULL"
	}
	return strconv.FormatInt(inc, 10)
}

// BeginWriteAtFor is BeginWriteAtSQL for incarnation inc, with T as a
// literal.
func BeginWriteAtFor(t uint64, inc int64) string {
	return "SELECT " + Schema + ".begin_write_at(" + strconv.FormatInt(ts(t), 10) + ", " + strconv.FormatInt(inc, 10) + ")"
}

// SetRetentionQuery is the statement that sets the retention of the
// managed table named rel (as the user wrote it in the DDL, e.g.
// `s."T"`; resolved by the session's search_path like the DDL itself) to
// d, or back to the default when reset. Run it in the DDL's write
// transaction, after the CREATE/ALTER TABLE. It returns one bool: false
// when rel is not a managed table (temporary or unmanaged: the option is
// then ignored).
func SetRetentionQuery(rel string, d time.Duration, reset bool) string {
	ms := "NULL"
	if !reset {
		ms = strconv.FormatInt(d.Milliseconds(), 10)
	}
	return "SELECT " + Schema + ".set_retention(" + quoteLiteral(rel) + "::regclass, " + ms + ")"
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// CodeFenced is the SQLSTATE of the fenced errors (Materialize reports
// fencing as an internal error).
const CodeFenced pgerr.Code = "XX000"

// fencedPrefix starts every fenced error's message.
const fencedPrefix = "mzproxy "

// IsFenced reports whether err is the backend's refusal to let a fenced or
// expired incarnation register, heartbeat, hold or write: messages
// "mzproxy incarnation N (generation G) fenced by new generation H ...",
// "mzproxy generation G fenced by new generation H" or "mzproxy
// incarnation N lost its lease ...", SQLSTATE XX000, DETAIL "fenced" or
// "expired".
func IsFenced(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == string(CodeFenced) && strings.HasPrefix(pe.Message, fencedPrefix) &&
		(pe.Detail == "fenced" || pe.Detail == "expired")
}
