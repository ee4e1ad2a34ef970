// Package storage is the durable, PostgreSQL-side half of mzproxy's model:
// the private schema (Schema, "mzproxy") with its state tables, PL/pgSQL
// functions and triggers, installed by Install, plus the small Go API the
// proxy core uses to read it.
//
// # Layout
//
// Install brings a database to schema version SchemaVersion in one
// transaction under a lock on pg_event_trigger (superusers only), so proxies starting together do
// not race: install.sql creates version 1, lease.sql upgrades 1 to 2, occ.sql 2
// to 3, lease_holds.sql 3 to 4, ddl.sql 4 to 5, trust.sql 5 to 6, frontier.sql
// 6 to 7, ddl_speed.sql 7 to 8, write_cost.sql 8 to 9, ddl_cost.sql 9 to
// 10, block_cost.sql 10 to 11, write_trim.sql 11 to 12,
// ddl_trim.sql 12 to 13, pin_trim.sql 13 to 14,
// pin_fast.sql 14 to 15, ddl_fast.sql 15 to 16, rw_check.sql 16 to 17,
// pin_cheap.sql 17 to 18, ddl_lean.sql 18 to 19, ddl_marks.sql 19 to 20,
// rw_check_gate.sql 20 to 21, ins_gap.sql 21 to 22, slot_state.sql 22 to 23,
// ddl_alter.sql 23 to 24, view_safe.sql 24 to 25, pin_views.sql 25 to 26,
// write_lean.sql 26 to 27, ddl_small.sql 27 to 28, ddl_column.sql 28 to 29,
// bypass_code.sql 29 to 30, hist_write.sql 30 to 31, pin_seq.sql 31 to 32,
// ddl_scans.sql 32 to 33, restamp.sql 33 to 34, block_lean.sql 34 to 35,
// ddl_create.sql 35 to 36, hist_plans.sql 36 to 37,
// lazy_history.sql 37 to 38, ddl_cols.sql 38 to 39,
// ddl_view.sql 39 to 40, ddl_lazy_cols.sql 40 to 41, slot_pending.sql 41
// to 42, quote_idents.sql 42 to 43, trig_fold.sql 43 to 44, read_peek.sql
// 44 to 45, ddl_lazy_ts.sql 45 to 46, slot_checked.sql 46 to 47,
// ddl_no_checks.sql 47 to 48,
// restamp_fold.sql 48 to 49, restamp_lean.sql 49 to 50,
// pin_last_value.sql 50 to 51, ddl_probe.sql 51 to 52, compact_fix.sql 52
// to 53, restamp_generic.sql 53 to 54, alter_index_guard.sql 54 to 55,
// hist_trim.sql 55 to 56,
// ddl_alter_probe.sql 56 to 57, hist_record.sql 57 to 58,
// ddl_view_drop.sql 58 to 59 (a database at an older version gets only the upgrades; a function
// a later version replaces is defined again in full there, or edited in
// place); a database already at the version is left alone. It needs a superuser because it creates
// event triggers.
//
// A fresh install (no schema yet) does not run the chain but
// install_flat.sql: what the chain leaves on an empty database, each
// object made once in its final form (no function made again version
// after version, no upgrade loop over rows that are not there), generated
// from the chain and never edited by hand. TestFlatInstall installs the
// chain in a scratch database, reads it back with pg_dump (objects and
// privileges, no owner: the installing role owns them, as it owns the
// chain's), adds the chain's rows and sequence values, and fails when
// install_flat.sql is not that text or when a database installed through
// it differs from the chain's (every function's definition, attributes
// and ACL, every relation, column, index, constraint, trigger, event
// trigger, sequence, comment and row; the flat one installed by another
// superuser into a database it owns). After a new migration,
//
//	go test ./proxy/storage -run TestFlatInstall -rewrite
//
// writes it again (TestFlatInstall needs a server of the major version
// recorded in its first line to compare the text; on another it compares
// only the catalogs). What the chain computes when it runs is computed
// again by the flat script, not copied: the clock (the oracle, the upper,
// P, installed_at) and the write key (installTimeValues in template.go,
// which the generator checks against two installs of the chain), and
// view_safe.sql's setting, which the flat script also sets only on a
// server that has it. A fresh install takes 0.12 s of backend CPU instead
// of the chain's 0.19 s (docs/install-cost.md). It runs with
// session_replication_role = replica, so the event triggers it makes do
// not fire at the DDL statements that follow.
//
// A copy of a template database (proxy/template.go: a client's CREATE
// DATABASE through mzproxy copies one that InstallTemplate installed)
// holds the schema at SchemaVersion and the table template_copy
// (TemplateMarker), which nothing else has: the next Install, the first
// registration there, computes every install-time value again with the
// flat script's expressions (reseedSQL, from installTimeValues: the write
// key, the clock, the upper, P, installed_at) and drops the table, so no
// two databases share them. No storage version is involved: the marker is
// not part of the schema. The schema holds:
//
//   - gate: no rows; writers lock it in ROW SHARE mode (they do not conflict
//     with each other), reads of the present in EXCLUSIVE mode (a pin: see
//     below).
//   - pinned, writes, writes_seen: unlogged sequences. pinned is P, the
//     largest timestamp handed out for reading; writes counts write slots
//     taken, writes_seen its value at the last pin.
//   - w<oid>: a sequence per managed table (rw_check.sql), the writes
//     counted at its latest write: set by every write to the table
//     (stamp_ts; a block's at fix_write), read by the check of a
//     transaction that read at its timestamp and then wrote, which skips
//     a marker above the count (set before a crash restarted the count);
//     c<oid>, its check mark. Logged since version 20 (ddl_marks.sql:
//     creating an unlogged sequence flushes WAL), unlogged for tables
//     made at 17 to 19. spare_markers (ddl_lean.sql): the pairs of
//     dropped tables, renamed sw<n>/sc<n>, which the next CREATE TABLE
//     takes and resets instead of creating two sequences.
//   - txns: a view of the upper, P + 1. txns_durable(upper) is the floor a
//     crash restarts P from, recorded by the tick.
//   - oracle and oracle_write: the timestamp oracle of versions 1 to 6,
//     read once by the upgrade to 7.
//   - catalog: one row per managed table or view (id, kind, oid, schema and
//     name kept in sync on RENAME/SET SCHEMA, history relation, view SQL,
//     created_ts, dropped_ts, revision, and since version 23 shape: what
//     sync_indexes and sync_triggers last read, table_shape); catalog_revision, bumped by every
//     DDL through the proxy; columns, the attnum -> history column map
//     (since version 41 only of a table with history: build_history
//     records them when it makes the history).
//   - collections(id, since, retain_ms, compacted_at, compacted_rows,
//     last_compacted_rows, clean_since): compaction state per managed
//     table; retain_ms NULL means the compacting proxy's default;
//     clean_since is the since at which compaction last found no version
//     to delete (compact probes only tables whose since moved past it).
//   - incarnations(id, generation, heartbeat_at, grace_ms, floor_ts,
//     retired_at, retired_reason, fenced_by, ...): proxy incarnations and
//     their published read floors; read_holds(incarnation, collection, ts):
//     the oldest read hold per incarnation and collection (those below a
//     floor published when granted, the others at the next heartbeat); fence(generation): the newest generation ever
//     registered; compactor: the last compaction round. Package
//     proxy/lease is their client; its doc has the model.
//   - h<id>: the history relation of managed table <id>: mz_from, mz_to
//     (Infinity while current) and mz_hash, then the user's columns (same
//     names, types and collations, no constraints) in the user's order
//     (made before version 13: the user's columns first). A version is
//     visible at ts when mz_from <= ts AND mz_to > ts. Indexes: (mz_to,
//     mz_from) (compaction, reads at a timestamp, a block's restamp; made
//     before version 13: mz_to, and mz_from of pending versions),
//     (key columns, mz_to) per primary key / unique index of the user table
//     (lookups; named h<id>_k<index oid> and recorded in index_mirrors by
//     the index's oid, so DROP INDEX finds its mirror without a scan of
//     pg_class), and for tables without a primary key mz_hash over the
//     current versions (retraction).
//
// # Functions
//
//   - begin_write_occ(inc, floor) (BeginWriteOCCFor; OpenWriteFor until
//     version 43): the write slot mzproxy takes for a client's writes. It locks the gate in ROW SHARE mode
//     until the transaction ends, checks the incarnation (XX000 "mzproxy
//     incarnation N ... fenced by new generation G" or "... lost its lease
//     ...", IsFenced) and leaves T pending (returns 0; the setting is the
//     request '0 - pending', version 42): T is chosen when first asked for
//     (current_write_ts: the first history row, a DDL, a read of the
//     transaction's own writes, commit_write), as GREATEST(clock, P + 1),
//     by code that first locks the gate itself (held already: the slot
//     took it before the statement's row locks) and counts the write.
//     floor is ignored. An autocommit write needs
//     nothing else: the slot and the statement in one implicit
//     transaction (proxy/write.go; since version 44 the slot is
//     OpenWriteFor's flat statement, which does begin_write_occ's work
//     without calling it, below; the history trigger's own query counts
//     the write, marks the table, chooses T, tags and sets it).
//   - begin_write(inc) / begin_write_at(T, inc) (BeginWriteFor,
//     BeginWriteAtFor, BeginWriteSQL, BeginWriteAtSQL without an
//     incarnation): the same slot with T chosen at once, or exactly T when
//     P < T <= GREATEST(clock, P + 1) (below: MZ001 with the least possible
//     T as DETAIL, see UpperConflict; ahead of the clock: 22008).
//   - commit_write(inc) returns the transaction's T (choosing it if still
//     pending), NULL without a slot; commit_write_tx is the same.
//   - pin() (ReadTSSQL, also read_ts()): the timestamp of a read of the
//     present. When every write slot taken so far was settled by a pin it
//     answers P without any lock (pin_fast.sql), as the view settled_pin
//     does without any function call (pin_cheap.sql: the read guard reads
//     it and calls pin() only when it is NULL). Otherwise it locks the
//     gate in EXCLUSIVE mode, in a subtransaction it
//     rolls back (so the lock is held only while it runs), which waits for
//     the writes in progress; hands out t = GREATEST(clock, P, P + 1 when a
//     write slot was taken since the last pin), capped at a second ahead of
//     the clock; and records P = t. In a transaction that holds a slot it
//     is that transaction's T. pin_held() is the pin of a transaction that
//     locked the gate itself, before its snapshot (PinSnapshotSQL). Since
//     version 25 (view_safe.sql) pin(), compact() and register(), which
//     read or name a view of mzproxy's, set restrict_nonsystem_relation_kind
//     = '' in their SET clause: they answer in a session that restricts
//     non-system views (pg_dump's), where a direct read of settled_pin
//     fails; the proxy then guards with pin() (proxy/seen_read.go).
//   - pin_peek() / pin_check(peek) (PinPeekSQL, PinCheckSQL):
//     a read-only transaction's pin without the gate (pin_trim.sql).
//     pin_peek, outside any block before the BEGIN, answers the writes
//     counted when a pin has settled them all, else NULL; pin_check in the transaction's first
//     statement answers P when no write slot was taken since, so the
//     snapshot holds exactly the writes at or below P; NULL otherwise
//     (the transaction is begun again and pinned with the gate). Since
//     version 26 (pin_views.sql) PinPeekSQL and PinCheckSQL ask the same
//     of the views settled_writes and pin_state, without any function
//     call; a session that restricts non-system views calls the
//     functions (PinPeekFunctionSQL, PinCheckFunctionSQL), as do the
//     proxies of older versions. Since version 32 (pin_seq.sql) the check
//     that rides with a read-only transaction's first read reads the
//     sequences pinned and writes itself (PinGuardFrom, PinGuardCheck:
//     pin_state's question, in its order, in one flat statement), which
//     PUBLIC may read (not advance or set); a sequence is no view, so
//     a session that restricts views reads them too. Since version 45
//     (read_peek.sql) the read guard of a timestamped read of the present
//     asks settled_pin's question itself, reading writes_seen too (PUBLIC
//     may read it: it tells no more than settled_writes), and answers the
//     settled count of writes with its pin, so that the session's next
//     guards read only P and the writes (readGuardSQL in package proxy).
//     Since version 51 (pin_last_value.sql) settled_pin and settled_writes
//     read every sequence after their first (the count of writes, the
//     row they scan) by pg_sequence_last_value, as the guards do, not as
//     a relation to lock and scan (P stays settled_pin's subquery's scan),
//     and settled_pin compares P's age as a time (PinFresh).
//   - tick(wait_ms): a pin that gives up (NULL) after wait_ms of waiting for
//     writers, and records the upper in txns_durable.
//   - register, heartbeat, deregister, acquire_hold, compact,
//     compact_batch: the backend half of package proxy/lease.
//     set_retention(regclass, ms) (SetRetentionQuery): RETAIN HISTORY, in
//     the DDL's write transaction.
//   - History triggers, generated per table as static SQL (no dynamic SQL
//     on the hot path; naming no user column while the history table's
//     columns after the first three are the user's in order, so ADD/DROP
//     COLUMN keeps them): AFTER INSERT/UPDATE/DELETE/TRUNCATE FOR EACH
//     STATEMENT with transition tables, so COPY and multi-row statements
//     cost one call. INSERT adds versions at T; DELETE retracts one current
//     version per deleted row (by key when the table has a non-deferrable
//     primary key, in one statement that UPDATE's trigger also inserts
//     with; it prefers a version of the key written at T, checked by
//     whole-row text, a search it skips when it chose T itself, the
//     transaction having written none yet: such a trigger finds a pending
//     slot and chooses T in its own query (stamp_ts' query for it, version
//     27), then closes the key's one current version found by key alone;
//     otherwise as a multiset by whole-row text found through mz_hash); UPDATE retracts and inserts; TRUNCATE retracts everything;
//     the INSERT, UPDATE and DELETE triggers of every table choose T in
//     that same query of their own when the slot is pending (a table
//     without a usable key since version 31, hist_write.sql), and an
//     UPDATE's that did so closes and inserts with two plain statements
//     whose row counts it compares, looking for versions written at or
//     after T only when they differ (version 31);
//     a version both written and retracted at T is deleted outright. A
//     statement that would close a version written at a later T (a write
//     that committed after this transaction's T was chosen) fails with
//     40001 (raise_overtaken); so does an INSERT (or an UPDATE that moves
//     a row), into a table with a non-deferrable primary key, of a key
//     whose version another
//     transaction retracted at a later T (raise_deleted_later), or after
//     this transaction's REPEATABLE READ snapshot (PostgreSQL's own, at the
//     lock the search takes): ins_gap.sql, searched only when T was chosen
//     before the statement. ON CONFLICT DO UPDATE and MERGE fire the
//     same triggers. Without a write slot (a write that bypassed the
//     proxy) they raise MZ002.
//   - Event triggers. Through the proxy (mzproxy.write_ts set): a new
//     ordinary permanent table outside system schemas (CREATE TABLE, CREATE
//     TABLE AS, SELECT INTO, LIKE) becomes managed at T (rows it already
//     has are copied into history at T); CREATE VIEW is recorded with its
//     pg_get_viewdef text; ALTER TABLE reconciles the history table (see
//     reconcile in ddl_cost.sql: current versions are compared with the
//     rows only when a value can have changed), CREATE UNIQUE INDEX syncs
//     its lookup mirrors (since version 28 no other index does: it has
//     none); DROP marks dropped_ts = T and keeps the history, and since
//     version 28 the table's trigger functions too, which compaction drops
//     with the history table; every DDL bumps the revision. Outside the proxy: DDL that
//     changes or drops a managed relation fails with MZ003 (index DDL,
//     COMMENT, GRANT and REVOKE are allowed), other DDL passes untouched and
//     what it creates stays unmanaged.
//   - Views mz_internal.mz_incarnations, mz_read_holds, mz_frontiers and
//     mz_compactions (introspection, readable by everyone; see package
//     proxy/lease).
//
// # Why the timestamps are consistent
//
// Conflicting writes are ordered by PostgreSQL's row locks, and a write's T
// is chosen only once its first statement holds them: every write it
// waited for has committed by then, at a T chosen earlier from the same
// clock and P, so no greater. T order therefore agrees with the order of
// conflicting writes; writes that do not conflict may share a T (the
// history at T is then their combined effect, which no read observed in
// between, because a read between them pins and moves P past the first).
// A later statement of the same transaction may meet a version committed
// after T was chosen: it fails with 40001, as PostgreSQL's REPEATABLE READ
// fails a statement that meets a row updated after its snapshot.
//
// A pin holds the gate exclusively, so no write is between its slot and
// its commit: every committed write has T <= GREATEST(clock, P + 1), which
// the pin hands out when any slot was taken since the last pin (else
// GREATEST(clock, P)), and every write after it chooses T > P = t. So at
// t every write at or below t has committed and is visible to any later
// snapshot, and none will ever commit there: t is a valid read of the
// present, and the upper is t + 1. A read-only transaction that reads the
// tables themselves (not their history) at t takes its snapshot with the
// gate still held (PinSnapshotSQL), so its snapshot holds exactly the
// writes at or below t.
//
// P lives in an unlogged sequence, so pins and writers write no WAL for
// it. After a crash it restarts from GREATEST(clock + 1 s, txns_durable):
// a pin never hands out more than a second past the clock, and the tick
// records the upper durably.
//
// # Go API
//
// LoadCatalog and CatalogRevision read the catalog; Frontiers reads the
// upper and each collection's since. The SQL the proxy runs per statement
// is exported as constants.
//
// # Using the write slot
//
//   - It is idempotent within a transaction, but ROLLBACK TO SAVEPOINT
//     undoes it when it was taken inside the savepoint: take it again
//     before the next write rather than remembering it was taken.
//   - The gate lock is held until the transaction ends: a transaction that
//     took a slot and then sits idle makes every pin (a read of the
//     present, the tick gives up instead) wait for it, and writes that
//     begin meanwhile wait behind the pin.
//   - Any isolation level works: nothing is validated at COMMIT.
//   - In a transaction block the slot is deferred (open_write_deferred,
//     OpenWriteDeferredFor): history is written with the placeholder
//     -(xid), the tables written are kept in the transaction's row of
//     deferred_slots (which only the schema's functions can write), and
//     fix_write (at COMMIT through a deferred constraint trigger, or when
//     T is first needed) chooses T and restamps each table through its
//     functions <history>_closed and <history>_restamp (static SQL, made
//     by gen_restamp from gen_triggers; since version 34 the restamp finds
//     the versions the block wrote by (mz_to, mz_from), restamp.sql;
//     since version 49 one <history>_fix per table, and since version 50
//     only that one, below).
//     Since version 35 (block_lean.sql) each history trigger records its
//     table in the row itself (one UPDATE that matches only at the
//     table's first write in the block; stamp_ts only when that and a
//     read of the row find no open slot), and at that first write closes
//     by key alone, as a trigger that chose T does: no version of the
//     table is at the placeholder yet. fix_write chooses T, checks the
//     incarnation and makes the restamp statements' lists in one query.
//     A slot replaced fails COMMIT with
//     42501; one taken away (RESET ALL) is still the row (version 23,
//     slot_state.sql: write_slot, stamp_ts and fix_write read the row when
//     the setting is empty; fix_write keeps it with its T, fixed_t, until
//     COMMIT), so the block writes on and commits.
//   - A block pinned for its reads before it wrote
//     (OpenWriteAfterReadFor) is checked at fix_write, once T is chosen
//     (check_reads, against the count of writes at its pin that
//     open_write_deferred recorded in the row, read_writes: no setting
//     skips the check): of the managed tables it holds a lock on (what it
//     read, directly, through views or their history, and what it
//     wrote), one that another transaction holds a write lock on
//     (pg_locks), or whose marker w<oid> is above the writes counted at
//     its pin, was or is being written since: 40001, at once. Writes to
//     other tables do not matter. Before those reads it raises the check
//     mark c<oid> of each table it read to its T; a write whose T was
//     chosen before its statement locked the table (a later statement of
//     the transaction, a block whose T was fixed early) reads the mark
//     after setting the marker and fails with 40001 when it is above its
//     T: a transaction at a later T read the table without its write.
//     Since version 47 (slot_checked.sql) no slot taken before skips
//     the check: a pending slot (begin_write_occ, the request set by
//     hand, which PUBLIC may both do in a block) becomes the block's
//     deferred slot at open_write_deferred, checked as any; a T chosen
//     before (begin_write(), begin_write_at, commit_write) fails
//     open_write_deferred with 25000 when reads are to be checked,
//     unless fix_write fixed it (the row's fixed_t: checked then).

// # Cost
//
// Measured with BenchmarkWriteRatio (single-row write transactions sent as
// one pipelined batch, interleaved with the plain ones, medians, on a
// loaded 2-core machine) and BenchmarkAutocommitWriteRatio (the implicit
// transaction of an autocommit write: update, insert, one-row counter):
// see docs/BENCHMARKS.md for the figures of each version.
// TestAutocommitWriteCalls pins which of the schema's functions such a
// write runs. BenchmarkBlockWriteRatio times a TPC-B-like block with a
// deferred slot (against plain tables and the previous schema version);
// TestBlockWriteCalls pins that its history writes cost no tag and its
// COMMIT no dynamic statement per table. Bulk statements pay per row (each updated row closes one
// version and writes another, neither a HOT update).

// # pg_dump
//
// A pg_dump session through the proxy does not see the schemas in
// DumpHiddenSchemas, nor the event triggers and history triggers calling
// into them (planner.HideFromDump), and reads a managed table's
// RETAIN HISTORY as the relation option retain_history (DumpReloptions):
// its dump is the user's objects, and restored through a proxy they are
// managed again (history starts at the restore). A dump taken directly
// from PostgreSQL has all of this schema and does not restore through the
// proxy.
//
// # Known limits
//
// Partitioned tables and partitions are not managed. Inheritance involving
// a managed table is refused through the proxy (0A000), and children of
// unmanaged parents stay unmanaged. CREATE INDEX CONCURRENTLY cannot run
// in a transaction, so it only works directly in PostgreSQL (index DDL is
// allowed there). The bypass check trusts mzproxy.write_ts:
// it stops accidents, it is not a security boundary. A unique index that
// goes as a side effect of dropping something else (DROP OPERATOR CLASS
// ... CASCADE) leaves its lookup mirror on the history table until the
// table is next altered through the proxy: an unused index, nothing worse.
// A history table made before version 13 keeps its layout (the user's
// columns first) and its indexes (mz_to; mz_from of pending versions): the
// upgrade does not rewrite history, so its trigger functions still spell
// out the columns and are made again by each column change.
//
// Managed DDL still costs a multiple of the same statement directly
// (bench/ddl.sh): CREATE TABLE builds three btrees more than PostgreSQL
// alone (the history table's TOAST index, (mz_to, mz_from) and the key's
// lookup mirror), each fsynced when built (about 3.5 ms each of a 20 ms
// CREATE TABLE on a loaded machine; its markers' two WAL flushes are gone
// when a dropped table left a spare pair, version 19), and every DDL on a managed
// table runs the event triggers' catalog work (some two dozen catalog
// queries for an ALTER TABLE, each through a catalog index, so none grows
// with the tables present (version 16: sync_triggers scanned pg_constraint
// before); the trigger functions' text is made again only when
// sync_triggers' signature of what it depends on changed, and CREATE TABLE
// records that signature (version 16), so a table's first ALTER does not
// make it again). Since version 23 (ddl_alter.sql) a column change that
// leaves the table's shape (its indexes, key and mzproxy's triggers) as
// sync_triggers recorded it runs neither sync_indexes nor sync_triggers.
// Since version 28 (ddl_small.sql) a plain CREATE INDEX runs no
// sync_indexes, DDL that makes mzproxy run none of its own computes no
// guard mark, and DROP TABLE leaves the trigger functions to compaction;
// docs/ddl-cost.md breaks down what CREATE/DROP VIEW, CREATE/DROP INDEX and
// DROP TABLE still cost (mostly the timestamp's PL/pgSQL chain and
// begin_write_occ). Since version 29 (ddl_column.sql) an ALTER TABLE that
// only adds plain nullable columns without a default or drops columns, on
// a table with a primary key, reads the table's columns in one statement
// and changes history with one ALTER (plain_column_change; anything else
// takes reconcile's full path), and the event triggers take the DDL's
// timestamp in one statement (ddl_ts). TestDDLScansNoCatalog checks that bench/ddl.sh's
// statements scan no growing catalog. Since version 33 (ddl_scans.sql)
// table_shape and plain_column_change, which an ALTER TABLE ADD/DROP
// COLUMN runs, plan with enable_seqscan = off: on a database with few
// tables the planner scanned small catalogs whole, which cost the backend
// far more instructions than index probes
// (TestColumnChangeScansNoCatalogFewTables; bench/ddlcost.sh counts
// them). Both read only catalogs and call nothing that reads more: the
// setting holds for everything a function calls (on sync_triggers it
// reached take_spare_marker, whose join with pg_class then took 1.5 s).
// Since version 36 (ddl_create.sql) sync_triggers' signature names
// gen_triggers' row version in pg_proc, as table_shape does, not md5 of
// its text (read out of line, decompressed and hashed at every CREATE
// TABLE), and the event triggers set the mark mzproxy.in_ddl in PL/pgSQL
// assignments (no query each) and reset it only when they set it; ddl_ts
// splits the slot's text in PL/pgSQL expressions and queries only the key
// (and the pin for a pending slot), not one query of three subquery levels.
// Since version 40 (ddl_view.sql) on_ddl_command_end and on_sql_drop plan
// with enable_seqscan = off (their lookups of mzproxy.catalog and
// mzproxy.columns were scans while those are small), a DROP of a managed
// table or view moves the catalog revision once (on_sql_drop hands it to
// on_ddl_command_end in mzproxy.drop_rev, trusted only while the revision
// row is this transaction's), CREATE [OR REPLACE] VIEW records its row in
// one INSERT ... ON CONFLICT, and a table without history is reconciled
// in fewer statements, with no mark.
// Since version 41 (ddl_lazy_cols.sql) a table without history has no
// rows in mzproxy.columns (build_history records them from user_columns
// when it makes the history; the upgrade deletes those such tables had),
// and on_ddl_command_end takes an ALTER TABLE of a managed table in one
// UPDATE of its catalog row (name, schema, revision) whose RETURNING
// reports a reserved column name (42939), inheritance (0A000) and
// whether a view's rule depends on it (else no dependent views' lookup);
// that is all for a table without history, and a table with history then
// goes to reconcile_built directly. manage_table
// inserts the catalog row and the collection and checks the column names
// in one statement, and looks for rows (CREATE TABLE AS) only in a
// relation with blocks.
//
// # The pending slot is a request (version 42)
//
// Since version 42 (slot_pending.sql) a slot whose T is pending is the
// constant '0 - pending', with no tag. Until then it carried a SHA-256 tag
// (over the write key, the xid and the text), which begin_write_occ made
// and the code that chose T checked, so that a value copied into another
// transaction could not let a write choose T without holding the gate and
// without being counted. Now that code makes both true itself, in the
// transaction that chooses T: it locks the gate in ROW SHARE mode (a
// look-up in the lock manager's local table when the slot took it),
// counts the write (nextval of writes moved from the slot to here; the
// table's marker takes that count in the same query, so it is never
// below the write's own count), and only then reads P and chooses T,
// whose tag is unchanged. A role that sets the request by hand therefore
// gets what begin_write_occ(NULL, 0), which PUBLIC may call, gives it: a
// slot, its gate held from its first write on instead of from before its
// statement (only the incarnation check is skipped, which fences proxies,
// not roles). Any other value that starts as a pending one fails with
// 42501 where a slot is checked. A slot taken and never written counts
// nothing, which only spares a pin a move of P. An honest write still
// takes the gate before its statement: a writer taking it after its row
// locks can wait, with a pin queued for the gate and a writer waiting for
// one of those rows, until the deadlock detector reorders the queue; a
// role can stall pins as long by locking the gate itself (UPDATE on it is
// PUBLIC's). What this saves per write is in docs/write-cost.md
// ("Session 19"): the slot's tag and its read of write_key, and the
// trigger's (or ddl_ts') check of the pending tag.
//
// # Names made with quote_all_identifiers off (version 43)
//
// Since version 43 (quote_idents.sql, session 19) the functions that make
// or compare mzproxy's names with quote_ident or format's %I (manage_table,
// build_history, sync_triggers (and so gen_triggers), gen_restamp, reconcile_built and
// its helpers, the marks') run with quote_all_identifiers off, a
// setting any role may change: under it CREATE TABLE recorded the history
// as mzproxy."h5", to which gen_restamp and fix_write append suffixes, and
// every write of the table failed with 42602 for good. The upgrade gives
// such a catalog row its name back.
//
// # The write slot as a flat statement (version 44)
//
// Since version 44 (trig_fold.sql, session 20) an autocommit write's slot
// is not a call of begin_write_occ but OpenWriteFor's one plain statement,
// run as the client's role: SELECT FOR SHARE of a clause over the gate
// that reads nothing (WHERE false) takes the gate in ROW SHARE mode when
// the statement starts, as LOCK TABLE did, and holds it to the
// transaction's end; then the incarnation's check (raise_fenced when it
// fails) and set_config of the request '0 - pending'; begin_write_occ
// only when the transaction already has a setting, so a slot it holds is
// kept (and a forged one refused, 42501). Since version 42 nothing in that
// work needs a right the caller lacks or proves anything (the request is
// anyone's to set, and what chooses T locks the gate and counts the write
// itself), so the SECURITY DEFINER frame, its SET search_path and the
// PL/pgSQL statements were cost only: 43k backend instructions per write
// (docs/write-cost.md, "Session 20"). Every function, operator and type
// the statement names is schema-qualified, so a role's search_path does
// not change what it runs (TestFlatSlotByHostileRole). FOR SHARE needs
// SELECT on the gate as well as UPDATE: version 44 grants it to PUBLIC
// (the gate has no rows and no columns). In a READ ONLY transaction the
// statement fails with 25006, and the proxy runs the client's statement
// without a slot (proxy/write.go). The history triggers still take the
// gate with a LOCK statement: naming the gate FOR SHARE in their T query
// instead cost 1.5k instructions more (its LockRows node).
//
// # DDL that records no T (version 46)
//
// Since version 46 (ddl_lazy_ts.sql, session 20) the event triggers
// choose a DDL's T (ddl_ts) only where it is recorded: CREATE TABLE
// (manage_table), an ALTER of a table with history (reconcile_built), a
// DROP TABLE (dropped_ts, which compaction compares with the since). Under
// the pending slot of the proxy's autocommit DDL, a view's CREATE, DROP
// and replacement, an ALTER TABLE of a table without history and DDL
// that records nothing of mzproxy's (an index, a function) take
// none: no gate, no write counted (so the next pin need not move P), no
// SHA-256 tag. A view records view_ts(), GREATEST(clock, P), at or above
// every timestamp handed out to a read before it, as created_ts or
// dropped_ts: a view has no contents, no
// history and no collection, nothing reads those columns but dropped_ts'
// NULL (live), and an AS OF read of a view reads its tables' history at
// its own time with the view's present text. The catalog revision moves
// as before (stale plans), and any other slot value is ddl_ts' to check
// (a block's deferred slot, a T chosen already, which a view then
// records; a forged value, 42501; none, NULL: outside mzproxy). Only a
// DROP VIEW drops views without a T: a view that goes with a table
// (DROP TABLE ... CASCADE) records the table's. docs/ddl-cost.md
// ("Session 20") has the figures.
//
// # The catalog without CHECK constraints (version 48)
//
// Version 48 (ddl_no_checks.sql, session 21) drops the catalog's two
// CHECK constraints (kind 'table' or 'view'; a history name for a table
// only) and catalog_revision's (one): PostgreSQL reads a constraint's
// text again and plans it at every statement that writes the row, about
// 58k backend instructions per catalog write of a DDL statement. What
// they checked is what the writers do: PUBLIC may only SELECT both
// tables, and only mzproxy's SECURITY DEFINER functions write them
// (manage_table inserts a table with its history name, on_ddl_command_end
// a view without one; nothing changes a row's kind or history or inserts
// a revision row: the install's one row keeps its primary key). It also
// has on_sql_drop return after one query for an ALTER TABLE that drops
// only its own columns, which its loop passed over (on_ddl_command_end
// reconciles or refuses them); a cascade from the ALTER (a view, an
// index, another column) still takes the loop (TestDropColumnCascade).
// Together about 6% of an ADD+DROP COLUMN pair's backend instructions
// and 3% of a CREATE+DROP VIEW pair's (docs/ddl-cost.md, "Session 21").
// # A block's restamp in one call per table (version 49)
//
// Since version 49 (restamp_fold.sql, session 21) fix_write restamps each
// table a block wrote with <history>_fix(p, T), _restamp's one UPDATE
// that also returns the newest mz_from among the versions it closed, in
// one statement for all tables, instead of GREATEST(<history>_closed(p),
// ...) and then the _restamp calls: since version 37 both are planned at
// every call (plan_cache_mode = force_custom_plan), and _closed's max()
// cost a TPC-B block about 1.1M of its 4.2M backend instructions. When a
// closed version starts after T (a clock that stepped back; a version
// written by hand), restamp_raise moves the block's versions from T to
// that start: those closed at T and the current ones at T whose xmin is
// that of the version closed below its own start, which only this
// transaction's uncommitted restamp makes; other transactions' versions
// at T stay. T is then as _closed made it before: the newest closed
// version's start when that is above the oracle's choice. _fix and
// restamp_raise are the owner's alone. docs/write-cost.md ("Session 21")
// has the figures.
//
// # Only _fix (version 50)
//
// Version 50 (restamp_lean.sql, session 22) has a table's first write
// (the history's build, gen_restamp) make its <history>_fix alone: no
// <history>_closed or <history>_restamp, which nothing has called since
// version 49. The upgrade drops them for every table, also those of
// tables whose history compaction removed. docs/write-cost.md ("Session
// 22") has the figures.
//
// # A column change and a DROP VIEW without a catalog read or write they need not (version 52)
//
// Since version 52 (ddl_probe.sql, session 22) on_ddl_command_end reads an
// altered managed table's catalog row, and the probes of its checks
// (reserved column names, inheritance, dependent views), with a SELECT,
// and updates the row (name, schema, revision) only when the table was
// renamed or moved; the catalog revision moves at every DDL as before. A
// row's revision is then that of its last rename, text change or drop,
// not of every column change (nothing reads it but LoadCatalog's
// Object.Revision). The reserved-name probe is one range of pg_attribute's
// (attrelid, attname) index, filtered by the three names. on_sql_drop
// marks a view that a DROP VIEW drops under a pending slot dropped in one
// UPDATE by its oid, without reading its row first, and moves the
// revision there even for a view mzproxy does not manage (which
// on_ddl_command_end moved before). About 5.6% of an ADD+DROP COLUMN
// pair's backend instructions and 1.6% of a CREATE+DROP VIEW pair's
// (docs/ddl-cost.md, "Session 22").
//
// # A removed table's _fix (version 53)
//
// Since version 53 (compact_fix.sql) compaction drops a removed table's
// h<id>_fix with its history table and trigger functions; before, each
// dropped table left its _fix behind for good. The upgrade drops the _fix
// of every table removed before it (no catalog row of its id).
//
// # A restamp planned once per session (version 54)
//
// Since version 54 (restamp_generic.sql, session 23) a table's h<id>_fix
// finds the versions a block stamped with its placeholder p by one
// expression, CASE WHEN mz_to = Infinity THEN mz_from ELSE mz_to END = p
// (the same versions as the two conditions before), through a partial
// index on it, h<id>_pending (the expression below 0: only versions not
// yet restamped), which restamp_functions makes with _fix. No column
// index can take that condition, so the plan made at any statistics is
// that index, and _fix runs with plan_cache_mode = force_generic_plan:
// planned once per session, not at every COMMIT (version 37 had forced a
// custom plan, because a generic one made at one-row statistics scanned
// the key's mirror). The upgrade makes the index and _fix again for every
// table that has a _fix. docs/write-cost.md ("Session 23") has the
// figures.
//
// # ALTER INDEX of a managed table or view outside mzproxy (version 55)
//
// PostgreSQL's ALTER INDEX ... RENAME TO renames a table or a view too,
// with the command tag ALTER INDEX. Since version 55
// (alter_index_guard.sql, session 23) on_ddl_command_end no longer exempts
// that tag outside mzproxy: such a rename of a managed relation is refused
// (MZ003) as ALTER TABLE's is; before, it renamed the relation behind the
// catalog's back. An ALTER INDEX of an index names the index, never a
// catalog row, and is allowed as before.
//
// # The _pending index's predicate, the triggers' conditions (version 56)
//
// Since version 56 (hist_trim.sql, session 24) a history's h<id>_pending
// index is partial on least(mz_to, mz_from) < 0 instead of the placeholder
// expression below 0: every statement that writes a history compiles the
// predicate, and the smaller expression costs less there. The key stays
// the placeholder, and _fix's UPDATE carries the predicate as a condition
// (implied by its others, so the same rows), for the planner to prove the
// index usable. The upgrade builds every such index again and makes its
// _fix again. The history triggers evaluate fewer conditions per call
// (PL/pgSQL compiles each again in every transaction): the MZ002 check
// only after stamp_ts was asked for T, and an UPDATE whose trigger chose
// T checks the history's step and an overtaken version only when its two
// row counts differ, the only case where they can fail; the upgrade makes
// every table's trigger functions again. docs/write-cost.md ("Session
// 24") has the figures.
//
// # An ALTER TABLE's rename and dependent views (version 57)
//
// Since version 57 (ddl_alter_probe.sql, session 24) on_ddl_command_end
// reads an altered managed table's catalog row without pg_class: the
// command's object_identity (the table's quoted, schema-qualified name
// as it is now) against format('%I.%I') of the row's names tells a rename
// or move. It looks for views over the table (pg_depend, at the loop's
// end) only after a rename, a move or a command that reports a column
// (objsubid <> 0: RENAME COLUMN), the ALTERs that can change a view's
// text; before, every ALTER probed pg_depend. docs/ddl-cost.md
// ("Session 24") has the figures.
//
// # The two slots as one IF in a keyed table's triggers (version 58)
//
// Since version 58 (hist_record.sql, session 25) a keyed table's _upd and
// _del test the pending slot (autocommit: T chosen here) and the block's
// deferred slot ('-1 ': the table recorded in the block's row of
// deferred_slots, _fresh from that UPDATE's result) as one IF and its
// ELSIF, with no _fresh branch around the record and stamp_ts: six
// PL/pgSQL conditions and assignments before the history's first
// statement in a block instead of eight, five in autocommit instead of
// six (each compiled again in every transaction). The record is
// unchanged. docs/write-cost.md ("Session 25") has the figures, and the
// cheaper records of the written tables that were measured and not kept.
//
// # A view's row from its command, a DROP's revision in on_sql_drop (version 59)
//
// Since version 59 (ddl_view_drop.sql, session 26) on_ddl_command_end
// records a CREATE VIEW's row from the command alone: its schema_name
// (PostgreSQL reports any temporary schema as 'pg_temp', which is not
// recorded), the last part of its object_identity as the name, no
// pg_class or pg_namespace lookup. A DROP stashes no command, so
// on_ddl_command_end returns at once for one (not for DROP OWNED, whose
// revocations it syncs as a REVOKE); on_sql_drop moves the revision of
// every DROP through mzproxy once, at its first managed object as before
// or after its loop, without the mzproxy.drop_rev hand-over. A DROP that
// drops nothing fires no sql_drop and moves no revision. docs/ddl-cost.md
// ("Session 26") has the figures.
package storage
