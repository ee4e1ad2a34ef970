-- mzproxy backend state, version 19 to 20: a new managed table's marker
-- w<oid> and check mark c<oid> (rw_check.sql) are logged sequences, so
-- CREATE TABLE flushes WAL once, at its commit, as it does directly
-- (issue 16).
--
-- Creating an unlogged sequence flushes WAL at once (its init fork is
-- written through shared buffers with a log_newpage record, and the
-- buffer's flush flushes WAL up to that record): two flushes per CREATE
-- TABLE at versions 17 and 18, and at 19 whenever no dropped table's pair
-- was spare (bulk CREATE TABLE: 13.0 ms a table against 8.2 ms before 17).
-- A logged sequence's creation writes WAL records only, flushed with the
-- DDL's commit.
--
-- What a logged mark costs, by who sets it:
--
--  * The marker is set by writers (stamp_ts at each history statement,
--    fix_write for a block), the check mark by a transaction that read and
--    then wrote (check_reads, from fix_write). setval on a logged sequence
--    assigns the transaction an xid and writes a WAL record (without a
--    page image), which the transaction's commit flushes. These are
--    transactions that write a table: they flush at their commit anyway.
--    No read-only transaction sets a mark (setval and nextval refuse to
--    run in a READ ONLY transaction, logged or not; a read's pin touches
--    only pinned, writes and writes_seen). The one new flush: a write that
--    changed no row (an UPDATE matching none) and wrote nothing else
--    logged now commits with a flush, as the same statement directly does
--    not.
--  * A mark's WAL record precedes its transaction's commit record, so a
--    committed write's or checked transaction's mark survives a crash; the
--    mark of one that aborted may or may not (either is safe: see below).
--
-- After a crash (or a standby's promotion) the count of writes, the
-- unlogged sequence writes, starts over; a logged marker keeps its value,
-- the count of an earlier epoch. Version 17's rule, "a marker above the
-- writes counted at the pin (W) was written since the pin", would then
-- fail every checked reader of the table until the new count passed the
-- old value. So the check now also requires the marker not to be above
-- the count it reads after the marker (check_reads):
--
--  * A write of this epoch sets its marker to the count at that moment,
--    and the count only grows: such a marker is at most any count read
--    after it. So no write since the pin is missed (the marker is read
--    first, the count second, in two statements).
--  * A marker above the count read after it was set before the count
--    started over: its write ended before the crash, so before the pin
--    of any transaction checked now. Skipping it is exact. Once the new
--    count passes such a value, a checked transaction pinned below it may
--    fail with 40001 once (as if the table had been written then): a
--    spurious failure, never a missed conflict, and gone at the table's
--    next write (which sets the marker to the new count) or pin.
--  * A check mark holds timestamps (the T of checked transactions), which
--    do not start over: after a crash writers and pins take a floor above
--    every timestamp handed out before (pinned_ts), so a check mark kept
--    from before is below every new write's T and fails none. (An aborted
--    transaction's raise kept by the crash is the same: its T was handed
--    out before.)
--  * Tables made before version 20 keep unlogged marks (they reset to
--    "never set" at a crash, as before); the check reads both kinds the
--    same way, and a spare pair (ddl_lean.sql) is reused as it is. No
--    relation is rewritten by the upgrade.

-- The marker (w<oid>) and the check mark (c<oid>) of managed table p_oid,
-- each made unless it exists (as the schema's owner: no other role may
-- read or set them); a spare pair when neither exists (ddl_lean.sql).
-- Logged since version 20 (see the header).
CREATE OR REPLACE FUNCTION @SCHEMA@.make_marker(p_oid oid) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s text;
BEGIN
    IF p_oid IS NULL THEN
        RETURN;
    END IF;
    IF to_regclass('@SCHEMA@.w' || p_oid) IS NULL AND to_regclass('@SCHEMA@.c' || p_oid) IS NULL
       AND @SCHEMA@.take_spare_marker(p_oid) THEN
        RETURN;
    END IF;
    FOREACH s IN ARRAY ARRAY['w' || p_oid, 'c' || p_oid] LOOP
        IF to_regclass('@SCHEMA@.' || s) IS NULL THEN
            EXECUTE format('CREATE SEQUENCE @SCHEMA@.%I MINVALUE 0 START 0', s);
        END IF;
    END LOOP;
END
$$;

-- check_reads as version 17 made it, with a marker above the count read
-- after it skipped: set before the count started over (see the header).
CREATE OR REPLACE FUNCTION @SCHEMA@.check_reads(p_writes bigint, p_t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    read oid[];
    pending oid[];
    marked oid[];
    marks bigint[];
    counted bigint;
    changed text;
BEGIN
    WITH locked AS (
        SELECT DISTINCT l.relation FROM pg_locks l
         WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.relation IS NOT NULL
    )
    SELECT array_agg(k.oid ORDER BY k.oid) INTO read FROM @SCHEMA@.catalog k
     WHERE k.kind = 'table' AND k.dropped_ts IS NULL
       AND (k.oid IN (SELECT x.relation FROM locked x)
            OR k.id IN (SELECT substr(c.relname, 2)::bigint FROM locked x JOIN pg_class c ON c.oid = x.relation
                         WHERE c.relnamespace = '@SCHEMA@'::regnamespace AND c.relname ~ '^h[0-9]+$'))
       AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = k.oid);
    IF read IS NULL THEN
        RETURN;
    END IF;
    -- The check marks first (see rw_check.sql).
    BEGIN
        LOCK TABLE @SCHEMA@.checking IN EXCLUSIVE MODE;
        PERFORM setval(c.s, p_t)
           FROM (SELECT to_regclass('@SCHEMA@.c' || r) AS s FROM unnest(read) r) c
          WHERE c.s IS NOT NULL AND coalesce(pg_sequence_last_value(c.s), 0) < p_t;
        RAISE SQLSTATE 'MZP00';
    EXCEPTION WHEN SQLSTATE 'MZP00' THEN
        NULL;
    END;
    -- Writes in progress next (see rw_check.sql).
    WITH locks AS MATERIALIZED (
        SELECT l.relation, l.mode, l.virtualtransaction FROM pg_locks l
         WHERE l.locktype = 'relation' AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
    )
    SELECT array_agg(DISTINCT l.relation) INTO pending FROM locks l
     WHERE l.relation = ANY (read)
       AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
       AND EXISTS (SELECT 1 FROM locks g
                    WHERE g.relation = '@SCHEMA@.gate'::regclass AND g.virtualtransaction = l.virtualtransaction);
    -- Then the markers above the pin's count, kept as read; then the count
    -- (in this order: a marker of this epoch is at most any count read
    -- after it).
    WITH m AS MATERIALIZED (
        SELECT r, pg_sequence_last_value(to_regclass('@SCHEMA@.w' || r)) AS v FROM unnest(read) r
    )
    SELECT array_agg(m.r), array_agg(m.v) INTO marked, marks FROM m WHERE m.v > p_writes;
    counted := coalesce(pg_sequence_last_value('@SCHEMA@.writes'), 0);
    SELECT string_agg(r::regclass::text, ', ') INTO changed FROM unnest(read) r
     WHERE r = ANY (coalesce(pending, '{}'))
        OR to_regclass('@SCHEMA@.w' || r) IS NULL OR to_regclass('@SCHEMA@.c' || r) IS NULL
        OR r IN (SELECT x.r FROM unnest(marked, marks) x(r, v) WHERE x.v <= counted);
    IF changed IS NOT NULL THEN
        RAISE EXCEPTION 'could not serialize access due to concurrent update'
            USING ERRCODE = '40001',
                  DETAIL = format('mzproxy: %s changed since this transaction read at its timestamp, or is being written.', changed),
                  HINT = 'The transaction might succeed if retried.';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.make_marker(oid), @SCHEMA@.check_reads(bigint, bigint) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (20);
