package storage

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed install.sql
var installSQL string

// leaseSQL upgrades version 1 to 2: incarnations, leases, fencing,
// compaction, introspection views.
//
//go:embed lease.sql
var leaseSQL string

// occSQL upgrades version 2 to 3: optimistic writes (begin_write_occ,
// commit_write).
//
//go:embed occ.sql
var occSQL string

// leaseHoldsSQL upgrades version 3 to 4: heartbeats publish every read
// hold, for introspection.
//
//go:embed lease_holds.sql
var leaseHoldsSQL string

// ddlSQL upgrades version 4 to 5: DDL and compaction without work per
// managed object the statement does not touch.
//
//go:embed ddl.sql
var ddlSQL string

// trustSQL upgrades version 5 to 6: the trust model (tagged write slots,
// nothing executable by PUBLIC but what a client's connection needs,
// RETAIN HISTORY for owners only).
//
//go:embed trust.sql
var trustSQL string

// frontierSQL upgrades version 6 to 7: the upper as a frontier (writers
// share a gate and choose T when first needed; reads of the present pin).
//
//go:embed frontier.sql
var frontierSQL string

// ddlSpeedSQL upgrades version 7 to 8: DDL with no work per table present
// and no trigger functions made again when unchanged.
//
//go:embed ddl_speed.sql
var ddlSpeedSQL string

// writeCostSQL upgrades version 8 to 9: a managed write's backend cost (the
// slot taken and stamped with one query each, one retraction statement
// for tables with a primary key).
//
//go:embed write_cost.sql
var writeCostSQL string

// ddlCostSQL upgrades version 9 to 10: DDL's cost beyond PostgreSQL's own
// (ALTER TABLE without repeated catalog reads or a resync that cannot
// change anything, CREATE INDEX without a full reconcile).
//
//go:embed ddl_cost.sql
var ddlCostSQL string

// blockCostSQL upgrades version 10 to 11: a transaction block's write cost
// (written tables kept where no tag is needed, restamped by static SQL).
//
//go:embed block_cost.sql
var blockCostSQL string

// writeTrimSQL upgrades version 11 to 12: an autocommit write's backend
// cost (no search for a version written at T when the trigger chose T,
// the slot set and stamped with one query each).
//
//go:embed write_trim.sql
var writeTrimSQL string

// ddlTrimSQL upgrades version 12 to 13: managed DDL closer to PostgreSQL's
// own cost (trigger functions of new history tables independent of the
// columns, one history index fewer).
//
//go:embed ddl_trim.sql
var ddlTrimSQL string

// pinTrimSQL upgrades version 13 to 14: a read-only transaction's pin
// without the gate (pin_peek before its BEGIN, pin_check in its snapshot).
//
//go:embed pin_trim.sql
var pinTrimSQL string

// pinFastSQL upgrades version 14 to 15: a read of the present pins without
// the gate when no write began since the last pin.
//
//go:embed pin_fast.sql
var pinFastSQL string

// ddlFastSQL upgrades version 15 to 16: DDL flat in the number of tables
// (the primary key's constraint found through an index) and a new table's
// trigger signature kept from its CREATE.
//
//go:embed ddl_fast.sql
var ddlFastSQL string

// rwCheckSQL upgrades version 16 to 17: a transaction that reads at its
// timestamp and then writes is checked against the tables it read, not
// against every write in the database.
//
//go:embed rw_check.sql
var rwCheckSQL string

// pinCheapSQL upgrades version 17 to 18: a read of the present's lock-free
// pin without PL/pgSQL (the view settled_pin, which the read guard reads
// before it calls pin()).
//
//go:embed pin_cheap.sql
var pinCheapSQL string

// ddlLeanSQL upgrades version 18 to 19: a dropped table's markers are kept
// for the next CREATE TABLE, which then creates no unlogged sequence (each
// creation flushed WAL).
//
//go:embed ddl_lean.sql
var ddlLeanSQL string

// ddlMarksSQL upgrades version 19 to 20: a new table's marker and check
// mark are logged sequences (creating an unlogged one flushed WAL), and
// the check skips a marker set before the count of writes started over.
//
//go:embed ddl_marks.sql
var ddlMarksSQL string

// rwCheckGateSQL upgrades version 20 to 21: the per-table check counts a table as
// being written only by a transaction holding the gate as writers do, not
// by locks a role takes with PREPARE alone; CREATE TABLE does not wait for
// such a lock on a spare pair of marks.
//
//go:embed rw_check_gate.sql
var rwCheckGateSQL string

// insGapSQL upgrades version 21 to 22: an INSERT of a key whose deletion
// committed at a later T than the inserting transaction's, or an UPDATE
// that moves a row to such a key, fails with 40001.
//
//go:embed ins_gap.sql
var insGapSQL string

// slotStateSQL upgrades version 22 to 23: a
// transaction block's deferred slot and the count its read-then-write check
// needs live in its row of deferred_slots, which no role can change, not in
// settings a client can reset.
//
//go:embed slot_state.sql
var slotStateSQL string

// ddlAlterSQL upgrades version 23 to 24: a column change
// that leaves the table's indexes and triggers as they were skips
// sync_indexes and sync_triggers (catalog.shape, table_shape).
//
//go:embed ddl_alter.sql
var ddlAlterSQL string

// viewSafeSQL upgrades version 24 to 25: the functions that read a view
// of mzproxy's (pin(), compact(), register()) lift
// restrict_nonsystem_relation_kind for their own duration, so they answer
// in a session that restricts non-system views.
//
//go:embed view_safe.sql
var viewSafeSQL string

// pinViewsSQL upgrades version 25 to 26: a read-only transaction's pin
// reads the views settled_writes and pin_state instead of calling the
// PL/pgSQL functions pin_peek and pin_check (which a session that
// restricts non-system views still calls).
//
//go:embed pin_views.sql
var pinViewsSQL string

// writeLeanSQL upgrades version 26 to 27: an autocommit write's history
// trigger chooses T in its own query, not through stamp_ts, and then
// retracts by key alone.
//
//go:embed write_lean.sql
var writeLeanSQL string

// ddlSmallSQL upgrades version 27 to 28: CREATE/DROP INDEX, views
// and DROP TABLE without event-trigger work that cannot change their
// result (sync_indexes for an index that is not unique, the timestamp in
// on_sql_drop for an index, a guard's hash when no mark is set, the
// trigger functions of a dropped table, left to compaction).
//
//go:embed ddl_small.sql
var ddlSmallSQL string

// ddlColumnSQL upgrades version 28 to 29: ALTER TABLE ADD COLUMN (nullable,
// no default) and DROP COLUMN with one catalog read and one ALTER of the
// history table (plain_column_change), and the event triggers' timestamp
// in one statement (ddl_ts).
//
//go:embed ddl_column.sql
var ddlColumnSQL string

// bypassCodeSQL upgrades version 29 to 30: an UPDATE or DELETE past
// mzproxy, in a session that never set mzproxy.write_ts, fails with MZ002
// (it failed with 23502 on the history table since version 27).
//
//go:embed bypass_code.sql
var bypassCodeSQL string

// histWriteSQL upgrades version 30 to 31: an autocommit UPDATE's history
// trigger closes and inserts versions with two plain statements compared by
// their row counts, and the triggers of a table without a usable key choose
// T in their own query, not through stamp_ts.
//
//go:embed hist_write.sql
var histWriteSQL string

// pinSeqSQL upgrades version 31 to 32: ordinary roles may read the
// sequences pinned and writes, which the read-only transaction's guard
// reads itself rather than through the view pin_state.
//
//go:embed pin_seq.sql
var pinSeqSQL string

// ddlScansSQL upgrades version 32 to 33: table_shape and
// plain_column_change, which an ALTER TABLE ADD/DROP COLUMN runs, read the
// catalogs through their indexes (enable_seqscan = off), and table_shape
// finds the key's column names by attnum.
//
//go:embed ddl_scans.sql
var ddlScansSQL string

// restampSQL upgrades version 33 to 34: a block's
// COMMIT finds the versions it wrote through the (mz_to, mz_from) index
// again (version 17 had made its restamp read the whole index); the text
// of a table's restamp functions is made in one place (restamp_functions).
//
//go:embed restamp.sql
var restampSQL string

// blockLeanSQL upgrades version 34 to 35: a block's history trigger
// records its table in the block's row itself, takes the by-key path at
// the table's first write in the block, and COMMIT's fix_write runs fewer
// statements.
//
//go:embed block_lean.sql
var blockLeanSQL string

// ddlCreateSQL upgrades version 35 to 36: CREATE TABLE signs its trigger
// functions with gen_triggers' row version instead of md5 of its text; the
// event triggers set their mark in an assignment, reset it only when they
// set it, and check no view against pg_inherits.
//
//go:embed ddl_create.sql
var ddlCreateSQL string

// histPlansSQL upgrades version 36 to 37: the close by key is an index
// probe per old row whatever the plan was made for, and _closed and
// _restamp are planned at each call, so a plan made while a history was
// small does not scan it whole once it has grown; every function that
// plans with enable_seqscan = off runs with jit = off.
//
//go:embed hist_plans.sql
var histPlansSQL string

// lazyHistorySQL upgrades version 37 to 38: a table's history is built at
// its first write through mzproxy (ensure_history), not at its CREATE; until
// then one shared trigger refuses every write to it (40001).
//
//go:embed lazy_history.sql
var lazyHistorySQL string

// ddlColsSQL upgrades version 38 to 39: ALTER TABLE ADD/DROP COLUMN with
// fewer statements in the event triggers (the dependent views' lookup
// reads only the altered relation's references; reconcile reads and
// renames its row in one statement; on_sql_drop leaves a column its own
// ALTER TABLE drops to on_ddl_command_end).
//
//go:embed ddl_cols.sql
var ddlColsSQL string

// ddlViewSQL upgrades version 39 to 40: DROP TABLE, CREATE/DROP VIEW and
// ADD/DROP COLUMN with fewer and cheaper statements in the event triggers
// (index probes of mzproxy's catalogs, not scans, while they are small; a
// DROP moves the catalog revision once; a view's row in one statement; a
// table without history reconciled in fewer).
//
//go:embed ddl_view.sql
var ddlViewSQL string

// ddlLazyColsSQL upgrades version 40 to 41:
// mzproxy.columns kept for tables with history only, and
// on_ddl_command_end with fewer statements (the revision moved where the
// commands are read; the relation, its row and a table without history's
// reconcile in one statement).
//
//go:embed ddl_lazy_cols.sql
var ddlLazyColsSQL string

// slotPendingSQL upgrades version 41 to 42: the write slot's pending
// state is the constant request '0 - pending', no keyed tag; what chooses
// T takes the gate (held already after begin_write_occ) and counts the
// write itself, so neither the slot nor the history trigger computes or
// checks a tag for it.
//
//go:embed slot_pending.sql
var slotPendingSQL string

// quoteIdentsSQL upgrades version 42 to 43 (session 19): the functions
// that make mzproxy's names run with quote_all_identifiers off, and a
// catalog row recorded under it gets its history name back.
//
//go:embed quote_idents.sql
var quoteIdentsSQL string

// trigFoldSQL upgrades version 43 to 44 (session 20): SELECT on the gate
// for PUBLIC, so that the proxy's flat write slot (OpenWriteFor) can lock
// it FOR SHARE.
//
//go:embed trig_fold.sql
var trigFoldSQL string

// readPeekSQL upgrades version 44 to 45 (session 20): PUBLIC may read the
// sequence writes_seen, which the read guard reads itself (readGuardSQL in
// package proxy).
//
//go:embed read_peek.sql
var readPeekSQL string

// ddlLazyTsSQL upgrades version 45 to 46 (session 20, ddlview): under a
// pending slot a view's DDL and an ALTER of a table without history
// choose no T (a view records view_ts, the oracle's read frontier).
//
//go:embed ddl_lazy_ts.sql
var ddlLazyTsSQL string

// slotCheckedSQL upgrades version 46 to 47 (session 21, outside21): a
// block that read at its pin keeps its read-then-write check when a
// function PUBLIC may call took a slot first (open_write_deferred makes a
// pending slot the block's deferred one, and refuses a T chosen outside
// fix_write).
//
//go:embed slot_checked.sql
var slotCheckedSQL string

// ddlNoChecksSQL upgrades version 47 to 48 (session 21, colddl): the
// catalog's and catalog_revision's CHECK constraints go (PostgreSQL
// reads their text again at every statement that writes a row; only
// mzproxy's SECURITY DEFINER functions write these tables), and
// on_sql_drop returns at once for an ALTER TABLE that drops only its own
// columns.
//
//go:embed ddl_no_checks.sql
var ddlNoChecksSQL string

// restampFoldSQL upgrades version 48 to 49 (session 21, tpcb): a
// block's COMMIT restamps each table with h<id>_fix, which returns what
// _closed returned, in one statement instead of two, each planned per
// table at every call.
//
//go:embed restamp_fold.sql
var restampFoldSQL string

// restampLeanSQL upgrades version 49 to 50 (session 22): a table's
// first write makes its h<id>_fix alone, and the upgrade drops every
// table's _closed and _restamp, which nothing has called since version
// 49.
//
//go:embed restamp_lean.sql
var restampLeanSQL string

// pinLastValueSQL upgrades version 50 to 51 (session 22): the views
// settled_pin and settled_writes read every sequence after their first
// by pg_sequence_last_value, not as a relation to lock and scan.
//
//go:embed pin_last_value.sql
var pinLastValueSQL string

// ddlProbeSQL upgrades version 51 to 52 (session 22): on_ddl_command_end
// reads an altered table's catalog row and its checks' probes with a
// SELECT and writes the row only for a rename, and on_sql_drop marks a view that a
// DROP VIEW drops without reading its row first.
//
//go:embed ddl_probe.sql
var ddlProbeSQL string

// compactFixSQL upgrades version 52 to 53 (session 22): compaction drops
// a removed table's h<id>_fix with its history, and the upgrade drops the
// _fix of every table removed before.
//
//go:embed compact_fix.sql
var compactFixSQL string

// restampGenericSQL upgrades version 53 to 54 (session 23): a table's
// h<id>_fix finds the block's versions by the placeholder they carry,
// through a partial index on it (made with _fix), and keeps its plan for
// the session instead of planning at every COMMIT.
//
//go:embed restamp_generic.sql
var restampGenericSQL string

// alterIndexGuardSQL upgrades version 54 to 55 (session 23): ALTER INDEX
// that renames a managed table or view outside mzproxy is refused (MZ003).
//
//go:embed alter_index_guard.sql
var alterIndexGuardSQL string

// histTrimSQL upgrades version 55 to 56 (session 24): the predicate of
// a history's _pending index is least(mz_to, mz_from) < 0, cheaper to
// compile in every statement that writes the history (the upgrade builds
// every such index again), and the history triggers evaluate fewer
// PL/pgSQL conditions per call (every table's made again).
//
//go:embed hist_trim.sql
var histTrimSQL string

// ddlAlterProbeSQL upgrades version 56 to 57 (session 24): an ALTER TABLE
// of a managed table sees a rename in the command's object identity (no
// pg_class join) and looks for dependent views only after a rename, a
// move or a column's rename.
//
//go:embed ddl_alter_probe.sql
var ddlAlterProbeSQL string

// histRecordSQL upgrades version 57 to 58 (session 25): a keyed table's
// UPDATE and DELETE triggers test the pending slot and the block's
// deferred slot as one IF and its ELSIF, two PL/pgSQL conditions fewer
// per call in a transaction block and one in autocommit.
//
//go:embed hist_record.sql
var histRecordSQL string

// ddlViewDropSQL upgrades version 58 to 59 (session 26): a view's CREATE
// records its row from the command alone (no pg_class or pg_namespace
// lookup), and a DROP's catalog revision moves in on_sql_drop alone
// (on_ddl_command_end returns at once for a DROP, which stashes no
// command).
//
//go:embed ddl_view_drop.sql
var ddlViewDropSQL string

// migrations[v] upgrades a database at version v to v+1.
var migrations = []string{0: installSQL, 1: leaseSQL, 2: occSQL, 3: leaseHoldsSQL, 4: ddlSQL, 5: trustSQL, 6: frontierSQL, 7: ddlSpeedSQL, 8: writeCostSQL, 9: ddlCostSQL, 10: blockCostSQL, 11: writeTrimSQL, 12: ddlTrimSQL, 13: pinTrimSQL, 14: pinFastSQL, 15: ddlFastSQL, 16: rwCheckSQL, 17: pinCheapSQL, 18: ddlLeanSQL, 19: ddlMarksSQL, 20: rwCheckGateSQL, 21: insGapSQL, 22: slotStateSQL, 23: ddlAlterSQL, 24: viewSafeSQL, 25: pinViewsSQL, 26: writeLeanSQL, 27: ddlSmallSQL, 28: ddlColumnSQL, 29: bypassCodeSQL, 30: histWriteSQL, 31: pinSeqSQL, 32: ddlScansSQL, 33: restampSQL, 34: blockLeanSQL, 35: ddlCreateSQL, 36: histPlansSQL, 37: lazyHistorySQL, 38: ddlColsSQL, 39: ddlViewSQL, 40: ddlLazyColsSQL, 41: slotPendingSQL, 42: quoteIdentsSQL, 43: trigFoldSQL, 44: readPeekSQL, 45: ddlLazyTsSQL, 46: slotCheckedSQL, 47: ddlNoChecksSQL, 48: restampFoldSQL, 49: restampLeanSQL, 50: pinLastValueSQL, 51: ddlProbeSQL, 52: compactFixSQL, 53: restampGenericSQL, 54: alterIndexGuardSQL, 55: histTrimSQL, 56: ddlAlterProbeSQL, 57: histRecordSQL, 58: ddlViewDropSQL}

// flatInstallSQL is what the migration chain installs on an empty
// database, as one script without the chain's superseded definitions and
// upgrade steps (285 statements instead of 409). It is generated from
// the chain, never edited: TestFlatInstall fails when it is stale, and
// `go test ./proxy/storage -run TestFlatInstall -rewrite` writes it again
// (flat_test.go).
//
//go:embed install_flat.sql
var flatInstallSQL string

// InstallScript returns the SQL that Install runs on an empty database for
// SchemaVersion. Exposed for inspection and manual installs.
func InstallScript() string { return flatInstallSQL }

// migrationScript is the SQL that takes a database from version v to
// SchemaVersion.
func migrationScript(v int) string {
	// Schema is a plain lower-case identifier, so it needs no quoting, and
	// the script may also use it inside string literals.
	return strings.ReplaceAll(strings.Join(migrations[v:], "\n"), "@SCHEMA@", Schema)
}

// ErrNotSuperuser is returned (wrapped) by Install when the connected role
// cannot create event triggers.
var ErrNotSuperuser = errors.New("storage: installing mzproxy's backend schema needs a superuser (it creates event triggers)")

// ErrUntrustedSchema is returned (wrapped) by Install when mzproxy's
// schema or mz_internal exists in the database and is not a superuser's
// (installedVersionSQL).
var ErrUntrustedSchema = errors.New("storage: a schema of mzproxy's name is not a superuser's: mzproxy neither reads nor installs into it")

// Install creates or upgrades the private schema, its state tables, functions
// and event triggers. It is idempotent (a database already at SchemaVersion
// is left alone) and safe when several proxies start at once: the work runs
// in one transaction under a lock only superusers can take. conn must be a superuser
// connection; it must not be inside a transaction.
func Install(ctx context.Context, conn *pgx.Conn) error {
	_, err := install(ctx, conn, "")
	return err
}

// Registration is what register() records of a new incarnation.
type Registration struct {
	// Generation to register with: 0 joins the newest; a lower one than
	// the newest is fenced (IsFenced); a higher one fences every
	// incarnation of a lower generation.
	Generation int64
	GraceMS    int64
	Host       string
	PID        int
}

// Incarnation is register()'s answer: the new incarnation's id, its
// generation and its first floor.
type Incarnation struct{ ID, Generation, Floor int64 }

// RegisterError is InstallAndRegister's error when the install committed
// (or had nothing to do) and the registration after it failed.
type RegisterError struct{ Err error }

func (e *RegisterError) Error() string { return e.Err.Error() }
func (e *RegisterError) Unwrap() error { return e.Err }

// InstallAndRegister is Install, then register(r) (the lease's
// registration, package lease), with no round trip of its own: it rides
// with the install's last statement string. Where no proxy can have
// registered yet (a fresh install, or a copy of a template database whose
// install-time values this install computes), it runs inside the
// install's transaction, so that a new database's first registration pays
// one commit, not two; a failure there rolls the install back too and is
// an install error. Elsewhere (an installed or upgraded database, where
// writers may hold the gate that a fencing registration waits for, and an
// upgrade holds locks those writers may need) it runs after the COMMIT, as
// a transaction of its own, and its failure is a *RegisterError. A fenced
// registration fails with an error IsFenced recognizes either way.
func InstallAndRegister(ctx context.Context, conn *pgx.Conn, r Registration) (Incarnation, error) {
	var inc Incarnation
	row, err := install(ctx, conn, fmt.Sprintf("SELECT r_id, r_generation, r_floor FROM %s.register(%d, %d, %s, %d)",
		Schema, r.Generation, r.GraceMS, quoteLiteral(r.Host), r.PID))
	if err != nil {
		return inc, err
	}
	if len(row) != 3 {
		return inc, &RegisterError{fmt.Errorf("storage: register answered %d columns, want 3", len(row))}
	}
	for i, dst := range []*int64{&inc.ID, &inc.Generation, &inc.Floor} {
		if _, err := fmt.Sscan(string(row[i]), dst); err != nil {
			return inc, &RegisterError{fmt.Errorf("storage: register: %q: %w", row[i], err)}
		}
	}
	return inc, nil
}

// install is Install running then (a query of one row, "" for none) in its
// last round trip, as InstallAndRegister describes, and returns then's
// row.
func install(ctx context.Context, conn *pgx.Conn, then string) ([][]byte, error) {
	// One round trip (the simple protocol's multi-statement string) for
	// the role, the lock and what is installed, and one for the script
	// and its commit (and then): a new database's first session waits for
	// them (a copy of the template's registration runs beside the
	// session's start, and was the longer of the two). Under load a round
	// trip of the proxy's costs a wake-up on each side: 15-40 ms each at
	// load 22, ten of them before (docs/corpus-cost.md, session 17).
	pc := conn.PgConn()
	open := true
	defer func() {
		if open {
			_, _ = pc.Exec(context.Background(), "ROLLBACK").ReadAll()
		}
	}()
	// A lock only a superuser can take (an advisory lock is anyone's: a role
	// holding its key would stall every proxy's install). It conflicts with
	// itself and with CREATE EVENT TRIGGER, nothing a client does.
	results, err := pc.Exec(ctx, "BEGIN;\n"+
		"SELECT rolsuper, rolname FROM pg_catalog.pg_roles WHERE rolname = current_user;\n"+
		"LOCK TABLE pg_catalog.pg_event_trigger IN SHARE ROW EXCLUSIVE MODE;\n"+
		installedVersionSQL).ReadAll()
	if len(results) >= 2 && results[1].Err == nil && len(results[1].Rows) == 1 && string(results[1].Rows[0][0]) != "t" {
		return nil, fmt.Errorf("%w; role %q is not one: connect the proxy's backend as a superuser, or have one install it once", ErrNotSuperuser, results[1].Rows[0][1])
	}
	if err != nil {
		return nil, fmt.Errorf("storage: install: %w", err)
	}
	if len(results) != 4 || len(results[1].Rows) != 1 || len(results[3].Rows) != 1 {
		return nil, fmt.Errorf("storage: install: unexpected answer to the version check (%d results)", len(results))
	}
	row := results[3].Rows[0]
	var v int
	if _, err := fmt.Sscan(string(row[0]), &v); err != nil {
		return nil, fmt.Errorf("storage: install: version %q: %w", row[0], err)
	}
	copied := string(row[1]) == "t"
	switch {
	case v > SchemaVersion:
		return nil, fmt.Errorf("storage: backend schema %q is at version %d, newer than this proxy's %d: upgrade the proxy", Schema, v, SchemaVersion)
	case v == -1:
		return nil, fmt.Errorf("%w: %s (drop it, or have a superuser own it)", ErrUntrustedSchema, row[2])
	case v < 0:
		return nil, fmt.Errorf("storage: backend schema %q is at unknown version %d", Schema, v)
	}
	// The simple protocol runs the multi-statement script in the transaction.
	// PL/pgSQL's validator would compile each of the script's hundred-odd
	// functions as it is made (15% of a fresh install's backend CPU); the
	// tests call them all.
	var script string
	if v < SchemaVersion || copied {
		script = "SET LOCAL check_function_bodies = off;\n"
	}
	switch {
	case v == 0:
		script += freshInstallSettings + flatInstallSQL
	case v < SchemaVersion:
		script += migrationScript(v)
	}
	if copied {
		// A copy of a template database: its clock and key are the
		// template's until now.
		script += freshInstallSettings + reseedSQL
	}
	// then runs in the install's transaction only where nobody can have
	// registered before it: nothing writes there yet, so a fencing
	// registration's wait for the gate cannot hold up the lock every
	// other proxy's install waits for. It runs as registrations always
	// did, in origin mode (freshInstallSettings is on only for the
	// script's own statements).
	inside := then != "" && (v == 0 || copied)
	if inside {
		script += "\n;SET LOCAL session_replication_role = DEFAULT;\n" + then
	}
	// The commit rides with the script; after an error PostgreSQL skips
	// it, and the deferred ROLLBACK ends the failed transaction. A then
	// after the COMMIT runs in a transaction of its own, which PostgreSQL
	// ends before it answers.
	script += "\n;COMMIT"
	if then != "" && !inside {
		script += ";\n" + then
	}
	results, err = pc.Exec(ctx, script).ReadAll()
	committed := -1
	for i, r := range results {
		if r.Err == nil && r.CommandTag.String() == "COMMIT" {
			committed = i
		}
	}
	open = committed < 0 && err != nil
	switch {
	case err != nil && committed < 0:
		return nil, fmt.Errorf("storage: install version %d: %w", SchemaVersion, err)
	case err != nil:
		return nil, &RegisterError{err}
	case committed < 0:
		// A COMMIT of a transaction that failed unseen would answer ROLLBACK.
		return nil, fmt.Errorf("storage: install version %d: the transaction did not commit", SchemaVersion)
	case then == "":
		return nil, nil
	}
	// then's result: just before the COMMIT inside, just after it
	// otherwise.
	at := committed + 1
	if inside {
		at = committed - 1
	}
	if at < 0 || at >= len(results) || len(results[at].Rows) != 1 {
		return nil, &RegisterError{fmt.Errorf("storage: no row from %q", then)}
	}
	return results[at].Rows[0], nil
}

// installedVersionSQL reads the highest installed schema version (0 if
// none) and whether the database is a copy of a template database whose
// install-time values are still the template's (TemplateMarker), in one
// statement that also runs where the schema is missing: the version
// table is read (by query_to_xml) only when it exists. And only when
// mzproxy's schemas, where they exist, belong to a superuser: a role that
// owns a database (CREATEDB) may make a schema of that name there before
// any proxy did, whose "schema_version" is a view of a function of its
// own, run by this superuser's read (TestHostile18PlantedSchema). Then
// the version is -1, and the last column names the schemas and owners.
var installedVersionSQL = `WITH untrusted AS (
    SELECT pg_catalog.string_agg(pg_catalog.format('%I (owned by %I)', n.nspname, r.rolname), ', ') AS names
      FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) ANY (ARRAY['` + Schema + `', 'mz_internal']::pg_catalog.name[]) AND NOT r.rolsuper)
SELECT CASE WHEN (SELECT names FROM untrusted) IS NOT NULL THEN -1
            WHEN pg_catalog.to_regclass('` + Schema + `.schema_version') IS NULL THEN 0
       ELSE (pg_catalog.xpath('/row/v/text()', pg_catalog.query_to_xml(
             'SELECT coalesce(max(version), 0) AS v FROM ` + Schema + `.schema_version', false, true, '')))[1]::text::int END,
       pg_catalog.to_regclass('` + TemplateMarker + `') IS NOT NULL,
       (SELECT names FROM untrusted)`

// freshInstallSettings keep mzproxy's event triggers, once the script has
// made them, from firing at the DDL statements that follow (when the chain
// was the fresh install: 201 calls, 299 ms instead of 474, medians of 12
// interleaved installs each way on a loaded machine). Outside the proxy
// they only refuse DDL on managed relations and copy grants to history
// tables, and a database without the schema has neither. Replica mode also
// keeps ordinary triggers and foreign key checks from firing: the script
// makes no such trigger and inserts only its own consistent rows into its
// own new tables. Only a superuser can set it (Install needs one anyway),
// and only for this transaction. An upgrade keeps them firing: its
// database may have managed tables.
const freshInstallSettings = "SET LOCAL session_replication_role = replica;\n"

// InstallTemplate installs SchemaVersion in conn's database, a new copy of
// template1 that is to become a template database, and marks it
// (TemplateMarker): each copy of it computes its own install-time values
// at its first Install. conn must be a superuser connection.
func InstallTemplate(ctx context.Context, conn *pgx.Conn) error {
	if err := Install(ctx, conn); err != nil {
		return err
	}
	if _, err := conn.PgConn().Exec(ctx, markTemplateSQL).ReadAll(); err != nil {
		return fmt.Errorf("storage: mark template: %w", err)
	}
	return nil
}
