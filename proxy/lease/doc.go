// Package lease is a proxy incarnation's standing in one backend database:
// its registration and heartbeat, the read protection it publishes for its
// read holds, fencing, and the database's compaction. The backend side
// (tables and functions) is proxy/storage's schema versions 2, 4 and 5
// (lease.sql, lease_holds.sql, ddl.sql).
//
// # Incarnations
//
// A proxy registers once per database, when it first uses it (Register,
// after which the loop heartbeats every Interval, default 5 s). An
// incarnation whose heartbeat is older than its grace (default 25 s, by
// the backend's clock) is retired by the next compaction round: its floor
// and holds stop counting, and begin_write, heartbeat and acquire_hold
// refuse it from then on (XX000 "mzproxy incarnation N lost its lease
// ..."). Locally the lease counts as lost a tenth of the grace earlier
// (Err, Done), so a read whose backend snapshot was taken while Err() was
// nil can never see compacted data. A lost lease stays lost: the proxy
// must Register again (a new incarnation) before serving that database.
// A lease whose database was dropped is lost at its next dial, which the
// server refuses with 3D000 (its loop then stops dialing). Register
// installs or upgrades mzproxy's backend schema first, on the lease's
// own connection (InstallError when that fails), and registers in the
// install's last round trip (storage.InstallAndRegister): in a new
// database (a fresh install, or a copy of the template database) inside
// the install's transaction, one commit for both.
//
// # Read holds without a round trip
//
// Each incarnation publishes a floor: while it is live, every collection's
// history at times >= floor is protected. Acquire(ts) at or above Floor()
// is therefore an in-memory count. The next floor is the oracle's read_ts
// seen at the previous heartbeat (so strict-serializable reads, which read
// at >= read_ts, are always above it) lowered to the oldest hold still out;
// the local floor is raised before the oldest hold is looked up, so a hold
// granted concurrently is always above what gets published. A hold below
// the floor (AS OF an older time) takes one round trip: acquire_hold
// checks ts against the inputs' sinces and publishes a per-collection row
// in read_holds, under the same transaction lock as compaction's since
// advance, so no hold is ever granted below a since. Only the first hold
// at an older point pays it: a hold at ts >= what this incarnation's rows
// on every input are known to stay at or below (Lease.covered: lowered by
// acquire_hold, raised or dropped by each heartbeat when it snapshots the
// holds out, which it publishes later) is granted in memory; concurrent
// acquirers at one ts share one round trip. A reader that chooses its
// timestamp first and holds it later (a read-only transaction: its pin,
// then its timedomain at its first read of a managed table) takes
// HoldFloor before it chooses: a count at the floor, which keeps every
// since at or below it, so the later Acquire is never refused however far
// the floor moved meanwhile. Each heartbeat
// publishes the oldest hold out per collection, those above the floor
// included (only so that mz_read_holds shows them); releases are published
// by the next heartbeat.
//
// # Compaction and retention
//
// Whichever proxy holds the compaction lock (claim('compaction'): the right
// of one live incarnation, kept while its lease lives and taken over by
// the next proxy once it is retired, fenced or expired; not an advisory
// lock, which any role could take and keep) runs a round every CompactInterval
// (default 1 s): compact() retires expired and fenced incarnations and sets
// each since to GREATEST(since, LEAST(upper - 1 - retain_ms, oldest live
// floor, oldest live hold on it)) and says which tables hold versions with
// mz_to <= since (visible at no time >= since): one index probe per table,
// inside the function, for at most 128 tables and 20 ms per round, those
// whose since moved since they were last found clean, the longest
// unchecked first (so a round's cost does not grow with the number of
// tables, and with more written tables than a round checks each is
// checked every few rounds); then
// compact_batch deletes those versions in the tables found holding some,
// BatchSize versions per statement and at most MaxBatches statements per
// table per round, and marks a table clean at its since once it deleted
// all there was.
// A dropped table's history table and catalog rows are removed once its
// since reaches its dropped_ts. Retention: DefaultRetention (1 s, like
// Materialize's tables; the compacting proxy's setting applies), per table
// collections.retain_ms set by storage.SetRetentionQuery (RETAIN HISTORY
// FOR ...; NULL after RESET). Because floors trail read_ts by one
// heartbeat, the history actually kept is at least about one Interval,
// whatever the retention. Raising a retention does not bring back history
// already compacted. Deleted versions leave dead tuples for (auto)vacuum.
//
// # The tick
//
// Materialize advances its tables' uppers with the clock; here the upper
// moves with pins (reads of the present, see package storage). So
// whichever proxy holds a database's tick claim (claim('tick'), a claim of
// its own, not compaction's) pins there (storage's tick(20), one round
// trip) every nine tenths of a TickInterval (default 1 s): EXPLAIN
// TIMESTAMP's upper, the sinces and AS OF reads of recent times trail the
// clock by at most about a TickInterval whatever is written or read. A
// pin waits for the writes in progress, and writes that begin meanwhile
// queue behind it, so the tick gives up after 20 ms and looks again a
// quarter interval later. It also records the upper durably
// (txns_durable), the floor of the oracle after a crash. Each database the
// proxy has a lease in is ticked (those no session used are not); only the
// claim holder's Config.TickInterval counts. Because the upper moves, so
// does every since (upper - 1 - retention): idle history is compacted as it
// is in Materialize.
//
// # Fencing
//
// Register with a Generation above the newest fences every incarnation of
// a lower generation at once (it takes the writers' gate exclusively, so
// the fence is ordered with commits); a lower one fails to register. Write
// transactions say which incarnation they write for with
// storage.BeginWriteFor(id) or OpenWriteFor(id) (a literal argument: no
// extra round trip); the slot checks the incarnation with the gate held (a
// deferred slot again when its T is chosen) and fails with XX000 "mzproxy
// incarnation N (generation G) fenced by new generation H ...", aborting
// the transaction before anything was written. begin_write() without an
// argument stays unfenced, for callers that do not register.
//
// # Using it from the proxy
//
//   - One Set per proxy (NewSet with the flags' Config and a dial to a
//     named database as the administrative user); Set.Get(ctx, db) when a
//     session first uses db (it installs or upgrades the backend schema
//     and registers), and Set.Close at shutdown.
//   - Writes: begin with Lease.BeginWriteSQL() (or storage.BeginWriteAtFor
//     with Lease.ID()) instead of storage.BeginWriteSQL.
//   - Reads at a chosen timestamp: after checking the inputs' sinces,
//     Lease.Acquire(ctx, ts, inputs) and Hold.Release when the result was
//     delivered; a *BelowSinceError becomes "Timestamp (t) is not valid
//     for all inputs". A read-only transaction holding its timestamp
//     checks Lease.Err() before each statement; Lease.Done() closing means
//     in-flight held reads must be canceled. Reads of the present need no
//     hold (their snapshot is their timestamp).
//   - RETAIN HISTORY (planner Statement.Retention): run
//     storage.SetRetentionQuery in the DDL's write transaction, after the
//     DDL.
//
// # Introspection
//
// Views in schema mz_internal, readable by anyone through any proxy (plain
// views, forwarded unchanged):
//
//   - mz_incarnations: id, generation, host, pid, started_at, heartbeat_at,
//     heartbeat_age, grace_ms, read_floor, status (live, expired, fenced,
//     lease expired, shutdown), retired_at, fenced_by.
//   - mz_read_holds: incarnation, object_id ('u' || catalog id),
//     schema_name, name, kind ('floor' per live incarnation and collection,
//     'hold' for the oldest hold out, published when granted below the
//     floor, else at the next heartbeat), ts.
//   - mz_frontiers: object_id, schema_name, name, read_frontier (since),
//     write_frontier (the shared upper), retain_ms (the effective one once
//     a round ran), dropped_ts.
//   - mz_compactions: object_id, schema_name, name, since, compacted_at,
//     last_compacted_rows, total_compacted_rows, last_round_at,
//     last_round_by.
package lease
