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
// to 3, lease_holds.sql 3 to 4, ddl.sql 4 to 5, trust.sql 5 to 6,
// ddl_speed.sql to the newest (a database at an older
// version gets only the upgrades; a function a later version replaces is
// defined again in full there); a database already
// at the version is left alone. It needs a superuser because it creates
// event triggers. The schema holds:
//
//   - oracle(timeline, read_ts) and oracle_write(timeline, write_ts): the
//     timestamp oracle on the EpochMilliseconds timeline. Separate tables:
//     every commit holds the read_ts row lock until it commits, and
//     allocating a write timestamp must not queue behind that.
//   - txns(upper): the shared transaction-log upper (one row).
//   - catalog: one row per managed table or view (id, kind, oid, schema and
//     name kept in sync on RENAME/SET SCHEMA, history relation, view SQL,
//     created_ts, dropped_ts, revision); catalog_revision, bumped by every
//     DDL through the proxy; columns, the attnum -> history column map.
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
//   - h<id>: the history relation of managed table <id>: the user's columns
//     (same names, types and collations, no constraints) plus mz_from,
//     mz_to (Infinity while current) and mz_hash. A version is visible at
//     ts when mz_from <= ts AND mz_to > ts. Indexes: mz_to (compaction),
//     (key columns, mz_to) per primary key / unique index of the user table
//     (lookups; named h<id>_k<index oid> and recorded in index_mirrors by
//     the index's oid, so DROP INDEX finds its mirror without a scan of
//     pg_class), and for tables without a primary key mz_hash over the
//     current versions (retraction).
//
// # Functions
//
//   - begin_write() / begin_write_at(T): the commit slot of the current
//     backend transaction (BeginWriteSQL, BeginWriteAtSQL). They lock the
//     txns row, choose T (GREATEST(write_ts+1, read_ts+1, now_ms, upper),
//     or exactly T when upper <= T — else SQLSTATE MZ001 with the actual
//     upper as DETAIL, see UpperConflict), set upper = T+1 and read_ts = T,
//     and record T in the transaction-local setting mzproxy.write_ts. A
//     second call in the same transaction returns the same T. An abort
//     undoes all of it.
//   - begin_write(incarnation) / begin_write_at(T, incarnation)
//     (BeginWriteFor, BeginWriteAtFor): the same, for a transaction that
//     writes for a registered incarnation; after taking the txns row lock
//     they fail with XX000 "mzproxy incarnation N ... fenced by new
//     generation G" or "... lost its lease ..." (IsFenced) when it may no
//     longer serve, aborting the transaction before anything is written.
//     The forms without an incarnation are not fenced.
//   - register, heartbeat, deregister, acquire_hold, compact,
//     compact_batch: the backend half of package proxy/lease.
//     set_retention(regclass, ms) (SetRetentionQuery): RETAIN HISTORY, in
//     the DDL's write transaction.
//   - read_ts(), write_ts(), apply_write(T): the oracle. write_ts() never
//     returns less than the committed upper, so it stays ahead of every
//     applied write without begin_write touching the write_ts row.
//   - History triggers, generated per table as static SQL (no dynamic SQL
//     on the hot path): AFTER INSERT/UPDATE/DELETE/TRUNCATE FOR EACH
//     STATEMENT with transition tables, so COPY and multi-row statements
//     cost one call. INSERT adds versions at T; DELETE retracts one current
//     version per deleted row (by key when the table has a non-deferrable
//     primary key, otherwise as a multiset by whole-row text found through
//     mz_hash); UPDATE retracts and inserts; TRUNCATE retracts everything;
//     a version both written and retracted at T is deleted outright. ON
//     CONFLICT DO UPDATE and MERGE fire the same triggers. Without
//     mzproxy.write_ts (a write that bypassed the proxy) they raise MZ002.
//   - Event triggers. Through the proxy (mzproxy.write_ts set): a new
//     ordinary permanent table outside system schemas (CREATE TABLE, CREATE
//     TABLE AS, SELECT INTO, LIKE) becomes managed at T (rows it already
//     has are copied into history at T); CREATE VIEW is recorded with its
//     pg_get_viewdef text; ALTER TABLE reconciles the history table (see
//     reconcile in install.sql); DROP marks dropped_ts = T and keeps the
//     history; every DDL bumps the revision. Outside the proxy: DDL that
//     changes or drops a managed relation fails with MZ003 (index DDL,
//     COMMENT, GRANT and REVOKE are allowed), other DDL passes untouched and
//     what it creates stays unmanaged.
//   - Views mz_internal.mz_incarnations, mz_read_holds, mz_frontiers and
//     mz_compactions (introspection, readable by everyone; see package
//     proxy/lease).
//
// # Why read_ts is applied inside the commit transaction
//
// The proxy forwards a read of the present unchanged: its backend snapshot
// is its timestamp. That is only correct if, in every snapshot, the
// oracle's read_ts equals the timestamp of the newest write the snapshot
// contains. begin_write sets read_ts := T in the same transaction as the
// write's data, so both become visible atomically at COMMIT: no snapshot
// can see the data without the timestamp or the timestamp without the data,
// and a read that asks the oracle after a write was acknowledged gets at
// least its T. Writes serialize on the txns row, so T order is commit order.
// The tick that keeps an idle database's upper with the clock (package
// lease) is such a commit with no data: begin_write_occ and commit_write in
// one transaction, so it keeps the invariant like any write.
//
// # Go API
//
// LoadCatalog and CatalogRevision read the catalog; Frontiers reads the
// upper and each collection's since; Oracle wraps a dedicated connection and
// batches ReadTS calls (a caller joins the next round trip, never one in
// flight). The SQL the proxy runs per statement is exported as constants.
//
// # Using begin_write
//
//   - It is idempotent within a transaction and cheap once taken (a setting
//     lookup), but ROLLBACK TO SAVEPOINT undoes it when it was taken inside
//     the savepoint (the setting, the upper and read_ts all roll back): call
//     it again before the next write rather than remembering it was taken.
//   - The txns row lock it takes is held until COMMIT, so all writes
//     serialize on it: a client transaction that wrote and then sits idle
//     blocks every other writer of the database. Taking it before the
//     write's own row locks avoids lock-order deadlocks (40P01) with other
//     writers.
//   - Write transactions should be READ COMMITTED: under REPEATABLE READ or
//     SERIALIZABLE, begin_write fails with 40001 when another write
//     committed after the transaction's snapshot was taken.
//   - apply_write(T) beyond the newest commit leaves read_ts > upper-1; the
//     tables still show the state at read_ts (nothing was written since).
//
// # Using begin_write_occ and commit_write (optimistic writes)
//
//   - begin_write_occ(inc, floor) takes no lock: it picks T (>= floor, the
//     upper, read_ts+1, write_ts+1 and the clock in its snapshot) and
//     records the snapshot's upper as the expected upper. commit_write(inc)
//     is the compare-and-append: upper := T+1 only where upper = expected,
//     read_ts := T, fencing checked, all in the write's transaction; else
//     MZ001 with the actual upper in DETAIL (UpperConflict), and the
//     transaction must roll back. The txns row lock is held from
//     commit_write to COMMIT only.
//   - Anything that committed after the expected upper was read fails the
//     append, so T order stays commit order and a write's reads are those
//     of the state just below T. Under REPEATABLE READ the expected upper
//     is the transaction's first snapshot's and PostgreSQL itself raises
//     40001 at commit_write when anything committed since.
//   - Both are idempotent; commit_write with no slot returns NULL, and
//     after begin_write (pessimistic) returns T at once. A transaction may
//     call commit_write early and go on writing at T: it then holds the
//     slot like begin_write (the proxy does so before statements it cannot
//     replay or validate otherwise). commit_write_tx raises 40001 instead of
//     MZ001, for a client's COMMIT.
//
// # Cost
//
// Measured with BenchmarkWriteRatio (single-row write transactions sent as
// one pipelined batch, interleaved with the plain ones, medians, on a
// loaded 2-core machine): a managed INSERT or UPDATE by key costs about
// 1.4-1.8x the same transaction on a plain table; most of it is
// begin_write (two row updates), the trigger itself adds roughly 10-25%.
// Bulk statements pay per row: about 3x for a 20k-row INSERT and 5-8x for
// a 20k-row UPDATE (each updated row closes one version and writes another,
// neither a HOT update).
//
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
package storage
