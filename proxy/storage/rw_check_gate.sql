-- mzproxy backend state, version 20 to 21:
-- the per-table check (rw_check.sql) counts a table as "being written"
-- only by a transaction that holds the writers' gate in the mode writers
-- take it, ROW SHARE; its raise of the check marks locks checking in a
-- mode no role takes without a right; and CREATE TABLE takes a spare pair
-- of marks only when no one holds a lock on them.
--
-- check_reads took any lock on the gate, with ROW EXCLUSIVE or stronger on
-- a table read, for a write whose T is chosen or being chosen. Parse
-- analysis takes both without any right: a role that may not write the
-- table, nor select from the gate, ran
--   BEGIN; PREPARE a AS INSERT INTO t VALUES (...); PREPARE g AS SELECT FROM mzproxy.gate;
-- and idled, and every transaction that read t and then wrote failed with
-- 40001 until it ended. Its ACCESS SHARE lock on the gate stalls nothing
-- (pins take EXCLUSIVE), so nothing showed it either
-- (TestHostile8ForgedWriteInProgress). Every writer takes the gate in
-- ROW SHARE mode (begin_write, begin_write_occ, fix_write); a role that
-- takes that mode too holds off every gated pin, the documented stall that
-- idle_in_transaction_session_timeout bounds (README, Security). A
-- transaction that pinned with the gate (EXCLUSIVE) and then writes in a
-- block has not chosen its T until its COMMIT's ROW SHARE, and no longer
-- counts before it, as the header of rw_check.sql says it should.
DO $edit$
DECLARE
    old text := $$WHERE g.relation = '@SCHEMA@.gate'::regclass AND g.virtualtransaction = l.virtualtransaction$$;
    def text := pg_get_functiondef('@SCHEMA@.check_reads(bigint, bigint)'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'rw_check_gate.sql: the edit of check_reads does not apply once';
    END IF;
    EXECUTE replace(def, old, $$WHERE g.mode = 'RowShareLock' AND g.relation = '@SCHEMA@.gate'::regclass$$
                           || $$ AND g.virtualtransaction = l.virtualtransaction$$);
END
$edit$;

-- check_reads locked checking IN EXCLUSIVE MODE to make its raise of the
-- check marks atomic among checked transactions. That mode conflicts with
-- ROW SHARE and ROW EXCLUSIVE, which parse analysis takes without a right
-- (PREPARE x AS SELECT FROM mzproxy.checking FOR UPDATE, or INSERT INTO
-- it): a role that held one and idled made every checked COMMIT wait for
-- it, with the writers' gate held (TestHostile8CheckingLocked). SHARE
-- UPDATE EXCLUSIVE conflicts with itself, so the raise stays atomic, and
-- with none of the modes a statement takes by parse analysis; LOCK TABLE
-- needs a right the roles do not have, and the commands that take it
-- check ownership first or fail (releasing it). (VACUUM's lock,
-- autovacuum's included, is that mode; autovacuum gives way to a waiting
-- lock.)
DO $edit$
DECLARE
    old text := $$LOCK TABLE @SCHEMA@.checking IN EXCLUSIVE MODE;$$;
    def text := pg_get_functiondef('@SCHEMA@.check_reads(bigint, bigint)'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'rw_check_gate.sql: the edit of check_reads'' lock does not apply once';
    END IF;
    EXECUTE replace(def, old, $$LOCK TABLE @SCHEMA@.checking IN SHARE UPDATE EXCLUSIVE MODE;  -- (version 21)$$);
END
$edit$;

-- take_spare_marker (ddl_lean.sql) renames a spare pair, which takes
-- ACCESS EXCLUSIVE locks on the two sequences. Any role may hold a lock on
-- them without a right (PREPARE x AS SELECT * FROM mzproxy.sw<oid>: parse
-- analysis locks, only execution checks rights), and every CREATE TABLE
-- through mzproxy waited for it, as long as the role's transaction lasted
-- (TestHostile8SpareMarkerLocks). No one else locks a spare, so a wait is
-- never worth it: a pair locked for 10 ms stays a spare (the block's
-- DELETE is undone) and the table gets new sequences, as before version
-- 19.
CREATE OR REPLACE FUNCTION @SCHEMA@.take_spare_marker(p_oid oid) RETURNS bool
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '10ms'
AS $$
DECLARE
    spare record;
BEGIN
    BEGIN
        DELETE FROM @SCHEMA@.spare_markers s
         WHERE s.w = (SELECT x.w FROM @SCHEMA@.spare_markers x
                       -- Both still there (a lookup in the relation cache
                       -- each: a join with pg_class is planned as a scan of
                       -- it while the list is empty, its size unknown).
                       WHERE pg_relation_filenode(x.w) IS NOT NULL AND pg_relation_filenode(x.c) IS NOT NULL
                       LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING s.w, s.c INTO spare;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', spare.w::regclass, 'w' || p_oid);
        EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', spare.c::regclass, 'c' || p_oid);
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    PERFORM setval(spare.w::regclass, 0, false), setval(spare.c::regclass, 0, false);
    RETURN true;
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (21);
