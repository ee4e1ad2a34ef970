-- mzproxy backend state, version 18 to 19: CREATE TABLE without the two
-- WAL flushes of its markers, and sync_triggers (every CREATE and ALTER
-- TABLE) without obj_description, a SQL function planned at each call
-- (issue 16; the second change at the end).
--
-- Measured (strace -f -y on the backend, pg_stat_statements track = all)
-- on CREATE TABLE (a int PRIMARY KEY, b text) in a proxy write:
--
--  * Directly: 2 fsyncs (the table's primary key and TOAST index, built
--    at PostgreSQL 15's speed) and 1 WAL fdatasync (the commit).
--  * Through mzproxy at version 17: 5 fsyncs (those and the history
--    table's three btrees: TOAST index, (mz_to, mz_from), key mirror) and
--    3 WAL fdatasyncs. The two more are the markers w<oid> and c<oid>
--    (rw_check.sql): creating an unlogged sequence writes its init fork
--    through shared buffers and flushes it at once, and a buffer's flush
--    first flushes WAL up to the page's LSN (its log_newpage record). The
--    init forks themselves are not fsynced at creation. make_marker was a
--    quarter of manage_table's time (2.95 of 13 ms, warm, 20 tables).
--
-- Neither mark can move to a logged sequence (writes, whose count the
-- marker holds, is unlogged: after a crash a logged marker would stay
-- above every new count and fail its table's readers for good) nor share
-- one sequence with the other (two values, each set on its own, without
-- transactions). So a dropped table's pair is kept for the next table
-- instead of being left behind (version 17 never dropped it):
--
--  * DROP of a managed table renames its w<oid> and c<oid> to sw<s> and
--    sc<s> (s: the oid of the w sequence, unique while it exists) and
--    lists them in spare_markers. In the DROP's transaction: a rolled back
--    DROP leaves them as they were. No one else uses them meanwhile: the
--    DROP holds the table's ACCESS EXCLUSIVE lock, and a write or a check
--    touches the markers of tables it holds a lock on only. (A check of a
--    transaction that read only the table's history, whose snapshot still
--    shows the table, finds no marker and fails with 40001, as for a table
--    without one: safe.)
--  * make_marker takes a listed pair (FOR UPDATE SKIP LOCKED: concurrent
--    CREATE TABLEs take different pairs), renames it to the new table's
--    names and resets both to the state of a new sequence (setval(s, 0,
--    false): not called, pg_sequence_last_value NULL, as START 0 leaves
--    it). Renames and the DELETE are catalog and row changes, no flush. A
--    CREATE rolled back returns the pair to the list (reset: a spare's
--    values mean nothing). With no pair listed it creates a pair as
--    before. (Concurrent DDL waits anyway, for the catalog revision's
--    row; a REPEATABLE READ transaction whose snapshot predates another
--    DDL fails with 40001 there, before it picks a pair.)
--  * The upgrade lists the pairs version 17 left behind by dropped tables.
--
-- So a CREATE TABLE after a DROP TABLE costs what a direct one does in
-- WAL flushes; tables created with none dropped still pay the two.

CREATE TABLE @SCHEMA@.spare_markers (
    w oid PRIMARY KEY,  -- the sequence sw<w>, formerly a table's marker
    c oid NOT NULL      -- the sequence sc<w>, formerly its check mark
);
REVOKE ALL ON @SCHEMA@.spare_markers FROM PUBLIC;

-- A spare pair renamed to the marker and check mark of managed table
-- p_oid, reset to new; false when none could be taken.
CREATE FUNCTION @SCHEMA@.take_spare_marker(p_oid oid) RETURNS bool
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spare record;
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
    PERFORM setval(spare.w::regclass, 0, false), setval(spare.c::regclass, 0, false);
    RETURN true;
END
$$;

-- The marker (w<oid>) and the check mark (c<oid>) of managed table p_oid,
-- each made unless it exists (as the schema's owner: no other role may
-- read or set them); a spare pair when neither exists (see the header).
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
            EXECUTE format('CREATE UNLOGGED SEQUENCE @SCHEMA@.%I MINVALUE 0 START 0', s);
        END IF;
    END LOOP;
END
$$;

-- The markers of managed table p_oid, dropped in this transaction, listed
-- as spares under names no table's oid can take.
CREATE FUNCTION @SCHEMA@.retire_marker(p_oid oid) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    w regclass := to_regclass('@SCHEMA@.w' || p_oid);
    c regclass := to_regclass('@SCHEMA@.c' || p_oid);
BEGIN
    IF w IS NULL OR c IS NULL THEN
        RETURN;
    END IF;
    EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', w, 'sw' || w::oid);
    EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', c, 'sc' || w::oid);
    INSERT INTO @SCHEMA@.spare_markers (w, c) VALUES (w, c);
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.take_spare_marker(oid), @SCHEMA@.retire_marker(oid) FROM PUBLIC;

-- DROP of a managed table retires its markers, with its trigger functions
-- (the method of ddl_trim.sql: the edit must apply exactly once).
DO $edit$
DECLARE
    old text := $$'h' || k.id || '_ins', 'h' || k.id || '_upd', 'h' || k.id || '_del', 'h' || k.id || '_trunc');
$$;
    def text := pg_get_functiondef('@SCHEMA@.on_sql_drop()'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'ddl_lean.sql: the edit of on_sql_drop does not apply once';
    END IF;
    EXECUTE replace(def, old, old || $$            PERFORM @SCHEMA@.retire_marker(k.oid);  -- version 19: kept for the next table
$$);
END
$edit$;

-- The pairs of tables dropped at version 17 (their markers stayed).
SELECT @SCHEMA@.retire_marker(substr(s.relname, 2)::oid)
  FROM pg_class s
 WHERE s.relnamespace = '@SCHEMA@'::regnamespace AND s.relkind = 'S' AND s.relname ~ '^w[0-9]+$'
   AND NOT EXISTS (SELECT 1 FROM @SCHEMA@.catalog k
                    WHERE k.kind = 'table' AND k.dropped_ts IS NULL AND k.oid = substr(s.relname, 2)::oid
                      AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = k.oid));

-- sync_triggers reads the signature kept on the _upd function from
-- pg_description itself (version 19). obj_description is a SQL function,
-- planned again at each call: a third of sync_triggers' time (500 calls
-- interleaved, 7 rounds: 0.6 of the time in 6 of them). The same value.
DO $edit$
DECLARE
    old text := $$obj_description(to_regprocedure(fn || '_upd()'), 'pg_proc')$$;
    def text := pg_get_functiondef('@SCHEMA@.sync_triggers(bigint)'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'ddl_lean.sql: the edit of sync_triggers does not apply once';
    END IF;
    EXECUTE replace(def, old, $$(SELECT d.description FROM pg_description d  -- (version 19)
                        WHERE d.objoid = to_regprocedure(fn || '_upd()') AND d.classoid = 'pg_proc'::regclass
                          AND d.objsubid = 0)$$);
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (19);
