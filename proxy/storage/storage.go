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
const SchemaVersion = 59

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
	// BeginWriteSQL takes the write slot of the current backend
	// transaction with its T chosen at once (the writers' gate in shared
	// mode until the transaction ends) and returns T. Idempotent within a
	// transaction.
	BeginWriteSQL = "SELECT " + Schema + ".begin_write()"
	// BeginWriteAtSQL ($1 = T) takes the write slot at exactly T: it fails
	// with CodeUpperConflict (see UpperConflict) when T is below the
	// upper, and with 22008 when T is ahead of the clock.
	BeginWriteAtSQL = "SELECT " + Schema + ".begin_write_at($1)"
	// ReadTSSQL pins a read of the present: it returns a timestamp at or
	// above every commit, below every write to come, and moves the upper
	// just past it (in a transaction that writes: its own T).
	ReadTSSQL = "SELECT " + Schema + ".pin()"
	// CatalogRevisionSQL returns the catalog revision, bumped by every DDL
	// through the proxy.
	CatalogRevisionSQL = "SELECT revision FROM " + Schema + ".catalog_revision"
	// PinSQL pins a read of the present, with the gate held (see
	// PinSnapshotSQL), and returns its timestamp t (the upper is t+1).
	PinSQL = "SELECT " + Schema + ".pin_held()"
	// UpperSQL returns the shared transaction-log upper.
	UpperSQL = "SELECT upper FROM " + Schema + ".txns"
	// PinPeekSQL, run outside a transaction block before the BEGIN of a
	// read-only transaction, returns what PinCheckSQL checks in its
	// snapshot (NULL when the writes in progress rule the gate-less pin
	// out). It reads the view settled_writes, which asks what the
	// function pin_peek() asks without calling any (pin_views.sql).
	PinPeekSQL = "SELECT w FROM " + Schema + ".settled_writes"
	// PinPeekFunctionSQL is PinPeekSQL for a session that restricts
	// non-system views (restrict_nonsystem_relation_kind), which cannot
	// read settled_writes: it calls pin_peek().
	PinPeekFunctionSQL = "SELECT " + Schema + ".pin_peek()"
)

// PinCheckSQL is the gate-less pin of a read-only transaction (see
// pin_trim.sql), the first statement of its snapshot, for the value that
// PinPeekSQL answered before its BEGIN (peek: a literal or a parameter): the timestamp t (the upper is
// t+1), or NULL when no write slot may be taken since and the transaction
// must pin again with PinSnapshotSQL in a new backend transaction.
//
// It answers what the function pin_check(peek) answers from the view
// pin_state (pin_views.sql), without calling any function, as one scalar
// subquery after the SELECT, so a caller may use what follows the SELECT
// as an expression. The view's w is named once: each mention would read
// the sequence writes again.
func PinCheckSQL(peek string) string {
	return "SELECT (SELECT CASE WHEN s.w = " + peek + " THEN s.t END FROM " + Schema + ".pin_state s)"
}

// PinCheckFunctionSQL is PinCheckSQL for a session that restricts
// non-system views (see PinPeekFunctionSQL): it calls pin_check(peek).
// What follows its SELECT is an expression too.
func PinCheckFunctionSQL(peek string) string {
	return "SELECT " + Schema + ".pin_check(" + peek + ")"
}

// PinGuardFrom and PinGuardCheck are the gate-less pin read as cheaply as
// the backend allows (version 32, pin_seq.sql), for a statement of the
// proxy's own whose FROM is PinGuardFrom: PinGuardCheck(peek) holds, in
// the statement that takes the snapshot, when pin_check(peek) would answer
// P, and PinGuardTS is then P, the transaction's timestamp. It asks what
// pin_state asks, in its order: P (the sequence pinned) is set and less
// than a second behind the clock (PinFresh), then, read after P (the last
// branch of an AND the scan's row comes before, evaluated left to right),
// the writes counted are peek (WritesCounted). The operators are named
// with their schema: a role's search_path cannot put its own in their
// place (OPERATOR() binds as any operator not built into the grammar, left
// to right: hence the parentheses).
const (
	PinGuardFrom = " FROM " + Schema + ".pinned p"
	PinGuardTS   = "p.last_value"
)

// WritesCounted is the count of writes (the sequence writes' last value, 0
// before its first) as an expression: pg_sequence_last_value reads it
// without a relation in the statement's range table, which would cost the
// backend a lock, a rights check and a scan's start at every run of the
// statement (docs/read-cost.md "Session 21"). It needs what the scan
// needed: SELECT on writes, which PUBLIC has.
const WritesCounted = "coalesce(pg_catalog.pg_sequence_last_value('" + Schema + ".writes'::pg_catalog.regclass), 0)"

// PinGuardCheck: see PinGuardFrom.
func PinGuardCheck(peek string) string {
	return PinFresh("pg_catalog.clock_timestamp()") + " AND " + WritesCounted + " OPERATOR(pg_catalog.=) " + peek
}

// PinFresh holds when P (the row p of PinGuardFrom) is set and less than a
// second behind clock: what pin_state and settled_pin ask with
// "p.last_value >= now_ms() - 1000", whose now_ms() is
// floor(extract(epoch FROM clock_timestamp()) * 1000) in numeric
// arithmetic, without it. For U, the clock in microseconds since 1970, and
// P an integer, floor(U / 1000) - 1000 <= P exactly when U < (P + 1001) *
// 1000, which is clock < 'epoch' + (P + 1001) ms: the product is exact in
// float8 (below 2^53 until the year 287,000) and the sum an integer one
// (interval '1 ms' has no day or month part, so no time zone enters).
// TestPeekGuardAnswers (proxy) checks the two against each other at the
// bounds.
func PinFresh(clock string) string {
	return "p.is_called AND " + clock + " OPERATOR(pg_catalog.<) ('epoch'::pg_catalog.timestamptz OPERATOR(pg_catalog.+) " +
		"((" + PinGuardTS + " OPERATOR(pg_catalog.+) 1001)::pg_catalog.float8 OPERATOR(pg_catalog.*) '1 ms'::pg_catalog.interval))"
}

// PinSnapshotSQL, run in order as the first statements of a REPEATABLE READ
// transaction, pins it: the gate is locked before the snapshot is taken (by
// PinSQL), so the snapshot holds exactly the commits at or below the pinned
// t, and rolling back to the savepoint releases the gate while the
// snapshot stays.
var PinSnapshotSQL = []string{
	"SAVEPOINT mzproxy_pin",
	"LOCK TABLE " + Schema + ".gate IN EXCLUSIVE MODE",
	PinSQL,
	"ROLLBACK TO SAVEPOINT mzproxy_pin",
	"RELEASE SAVEPOINT mzproxy_pin",
}

// SQLSTATEs raised by the backend functions and triggers. Class MZ is not
// used by PostgreSQL (classes starting with I-Z are implementation-defined
// and PostgreSQL only uses XX there).
const (
	// CodeUpperConflict: begin_write_at(T) found T below the upper. The
	// error's DETAIL is the least T it would take, a decimal number.
	CodeUpperConflict pgerr.Code = "MZ001"
	// CodeWriteOutsideProxy: INSERT/UPDATE/DELETE/TRUNCATE/COPY on a managed
	// table in a transaction that did not call begin_write.
	CodeWriteOutsideProxy pgerr.Code = "MZ002"
	// CodeDDLOutsideProxy: ALTER/DROP/... of a managed relation outside a
	// proxy write transaction, or dropping a history trigger.
	CodeDDLOutsideProxy pgerr.Code = "MZ003"
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

// OpenWriteDeferredFor is the write slot of a transaction block for
// incarnation inc (< 0: unfenced): the block holds no lock while it runs;
// its history is stamped with a placeholder, and its T is chosen at its
// COMMIT (CommitWriteTxFor), before DDL, or to read its own writes.
func OpenWriteDeferredFor(inc int64) string {
	return "SELECT " + Schema + ".open_write_deferred(" + incLiteral(inc) + ")"
}

// OpenWriteAfterReadFor is OpenWriteDeferredFor in a transaction pinned
// for its reads when pinned_writes was writes: choosing its T fails with
// 40001 when a managed table the transaction read (holds a lock on) was
// written by a transaction its snapshot does not hold, committed or in
// progress; writes to other tables do not matter (rw_check.sql).
func OpenWriteAfterReadFor(inc int64, writes int64) string {
	return "SELECT " + Schema + ".open_write_deferred(" + incLiteral(inc) + ", " + strconv.FormatInt(writes, 10) + ")"
}

// EnsureHistorySQL builds, in the caller's transaction, the history of
// each managed table among relations that has none yet (lazy_history.sql);
// relations are SQL expressions of type regclass or oid, evaluated by the
// caller (to_regclass of a name resolves it with the session's
// search_path). It refuses (42501) before taking any lock unless the
// session's role may read or write every table it would build.
func EnsureHistorySQL(relations []string) string {
	return "SELECT " + Schema + ".ensure_history(ARRAY[" + strings.Join(relations, ", ") + "]::oid[])"
}

// EagerHistorySQL makes the tables the rest of the transaction creates get
// their history at once (lazy_history.sql): for a query string that
// creates a table and writes it, whose build cannot come before it.
const EagerHistorySQL = "SET LOCAL " + Schema + ".eager_history = on"

// OpenWriteFor is the write slot mzproxy takes for a client's autocommit
// writes, for incarnation inc (< 0: unfenced): as BeginWriteFor, but T is
// chosen when the transaction first writes history, once its statement
// holds its row locks (so a statement that waited for another writer's row
// commits after it in T order). It returns 0.
//
// Since version 44 (trig_fold.sql) it is not a call of begin_write_occ but
// the slot's work as one flat statement, run as the client's role: the
// gate in ROW SHARE mode (FOR SHARE of its range-table entry: taken at the
// statement's start, before its incarnation check, and held to the
// transaction's end), the check of the incarnation and the request
// '0 - pending'; begin_write_occ only when the transaction already has a
// setting (it keeps a slot it has). It needs no right the client lacks
// (PUBLIC may select and update the gate) and grants nothing: the request
// is what a role may set by hand, and the history trigger that chooses T
// locks the gate and counts the write itself (slot_pending.sql). Every
// name, operator and type is qualified, so a search_path cannot change
// what it runs. It spares the function call's frame (SECURITY DEFINER and
// SET search_path), its PL/pgSQL statements and its LOCK TABLE
// (docs/write-cost.md, "Session 20"). In a READ ONLY transaction it fails
// with 25006 (SELECT FOR SHARE), as begin_write_occ did before version 42.
func OpenWriteFor(inc int64) string {
	if inc < 0 {
		return openWriteUnfenced
	}
	i := strconv.FormatInt(inc, 10)
	return "SELECT CASE" +
		" WHEN COALESCE(pg_catalog.current_setting('" + Schema + ".write_ts', true), '') OPERATOR(pg_catalog.<>) ''" +
		" THEN " + BeginWriteOCCFor(inc, 0)[len("SELECT "):] +
		" WHEN NOT COALESCE((SELECT i.retired_at IS NULL AND (i.heartbeat_at OPERATOR(pg_catalog.>=)" +
		" (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) (i.grace_ms OPERATOR(pg_catalog.*) '1 ms'::pg_catalog.interval)))" +
		" FROM " + Schema + ".incarnations i WHERE i.id OPERATOR(pg_catalog.=) " + i + "::pg_catalog.int8), false)" +
		" THEN CASE WHEN " + Schema + ".raise_fenced(" + i + ") IS NULL THEN 0::pg_catalog.int8 END" +
		" WHEN pg_catalog.set_config('" + Schema + ".write_ts', '0 - pending', true) IS NOT NULL THEN 0::pg_catalog.int8 END" +
		" WHERE NOT EXISTS (SELECT FROM " + Schema + ".gate WHERE false FOR SHARE)"
}

// openWriteUnfenced is OpenWriteFor without an incarnation.
const openWriteUnfenced = "SELECT CASE" +
	" WHEN COALESCE(pg_catalog.current_setting('" + Schema + ".write_ts', true), '') OPERATOR(pg_catalog.<>) ''" +
	" THEN " + Schema + ".begin_write_occ(NULL, 0)" +
	" WHEN pg_catalog.set_config('" + Schema + ".write_ts', '0 - pending', true) IS NOT NULL THEN 0::pg_catalog.int8 END" +
	" WHERE NOT EXISTS (SELECT FROM " + Schema + ".gate WHERE false FOR SHARE)"

// BeginWriteOCCFor is begin_write_occ(inc, floor), the function behind
// OpenWriteFor (floor is ignored since version 7). inc < 0 means no
// incarnation (unfenced).
func BeginWriteOCCFor(inc int64, floor uint64) string {
	return "SELECT " + Schema + ".begin_write_occ(" + incLiteral(inc) + ", " + strconv.FormatInt(ts(floor), 10) + ")"
}

// CommitWriteFor returns the transaction's T, choosing it now if it is
// still pending (NULL without a slot); run just before COMMIT. inc is
// kept for the function's signature.
func CommitWriteFor(inc int64) string {
	return "SELECT " + Schema + ".commit_write(" + incLiteral(inc) + ")"
}

// CommitWriteTxFor chooses the T of a transaction block's deferred slot
// now (OpenWriteDeferredFor) and stamps its history with it. COMMIT does
// so by itself (a deferred constraint trigger); this is for tests and
// clients that want the T.
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

// quoteLiteral quotes s as an SQL string literal: an escape string (E'...') when s
// holds a backslash, which then means s whatever standard_conforming_strings
// says.
func quoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		return "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
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
