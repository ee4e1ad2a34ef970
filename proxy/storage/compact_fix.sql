-- mzproxy backend state, version 52 to 53 (session 22): compaction drops a
-- removed table's h<id>_fix with its history, as it drops the history's
-- trigger functions.
--
-- Since version 49 a table's first write makes h<id>_fix(p, t) beside the
-- four trigger functions; compact() drops the history table and those four
-- once no read can reach a dropped table, and left _fix behind: one
-- function per dropped table, for good, that nothing could call any more
-- (its table is gone, and fix_write only restamps tables a block wrote).
--
-- Edited (in place, one statement of compact()'s loop over removed
-- tables): after the trigger functions, _fix too, when it exists (a table
-- dropped before its first write has none; DROP FUNCTION IF EXISTS would
-- send a NOTICE for it).
DO $edit$
DECLARE
    anchor constant text := $$        PERFORM set_config('mzproxy.in_ddl', '', true);
        DELETE FROM @SCHEMA@.read_holds h WHERE h.collection = d.id;$$;
    def text;
BEGIN
    def := pg_get_functiondef('@SCHEMA@.compact(bigint, bigint)'::regprocedure);
    IF (length(def) - length(replace(def, anchor, ''))) / length(anchor) <> 1 THEN
        RAISE EXCEPTION 'compact_fix.sql: the edit of compact() does not apply once';
    END IF;
    EXECUTE replace(def, anchor, $$        -- (Version 53) The restamp function made at the first write.
        IF to_regprocedure(format('@SCHEMA@.%I(bigint, bigint)', 'h' || d.id || '_fix')) IS NOT NULL THEN
            EXECUTE format('DROP FUNCTION @SCHEMA@.%I(bigint, bigint)', 'h' || d.id || '_fix');
        END IF;
$$ || anchor);
END
$edit$;

-- The _fix functions of tables compaction removed before this version:
-- those whose id has no catalog row.
DO $drop$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = '@SCHEMA@'::regnamespace
                AND p.proname ~ '^h[0-9]+_fix$' AND p.proargtypes = '20 20'::oidvector
                AND NOT EXISTS (SELECT FROM @SCHEMA@.catalog k WHERE 'h' || k.id || '_fix' = p.proname)
              ORDER BY p.oid LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$drop$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (53);
