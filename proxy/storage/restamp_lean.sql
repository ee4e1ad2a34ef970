-- mzproxy backend state, version 49 to 50 (session 22, tpcb22): a
-- table's restamp is h<id>_fix alone (issue 14). docs/write-cost.md has
-- the figures.
--
-- Since version 49 fix_write restamps every table a block wrote with
-- h<id>_fix; nothing calls h<id>_closed or h<id>_restamp (restamp_dynamic,
-- for a table without _fix, runs its own statements). restamp_functions
-- still made all three at each table's first write (the history's build),
-- two functions parsed, stored and dropped again with the table for
-- nothing. Now it makes _fix only, and the upgrade drops the other two of
-- every table, also those left behind by tables whose history compaction
-- removed (their catalog rows are gone; the functions are found by name).
--
-- Replaced: restamp_functions. gen_restamp (version 49) already makes a
-- table's functions when its _fix is missing, and fix_write calls _fix
-- only; neither changes.

-- As restamp_fold.sql made it, without _closed and _restamp.
CREATE OR REPLACE FUNCTION @SCHEMA@.restamp_functions(h text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $fn$
SELECT format($f$
CREATE OR REPLACE FUNCTION %1$s_fix(p bigint, t bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    closed bigint;
    f bigint;
BEGIN
    -- One statement (two index conditions OR-ed): the versions the block
    -- closed, and those it wrote, which are current (one it closed again
    -- was deleted by the trigger); restamp.sql says why mz_to is named.
    -- It returns the newest start of a version the block closed (now
    -- ending at t; a version it wrote is current), which fix_write
    -- raises T to when it is above t.
    FOR f IN UPDATE %1$s h SET mz_to = CASE WHEN h.mz_to = p THEN t ELSE h.mz_to END,
                               mz_from = CASE WHEN h.mz_from = p THEN t ELSE h.mz_from END
              WHERE (h.mz_to = p AND h.mz_to < 0)
                 OR (h.mz_to = 9223372036854775807 AND h.mz_from = p AND h.mz_from < 0)
             RETURNING CASE WHEN h.mz_to < 9223372036854775807 THEN h.mz_from END LOOP
        closed := GREATEST(closed, f);
    END LOOP;
    RETURN closed;
END
$$;
REVOKE ALL ON FUNCTION %1$s_fix(bigint, bigint) FROM PUBLIC;$f$, h)
$fn$;
REVOKE ALL ON FUNCTION @SCHEMA@.restamp_functions(text) FROM PUBLIC;

-- Every table's _closed and _restamp, by name and argument types in this
-- schema only (a table's functions are h<id>_<suffix>).
DO $drop$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = '@SCHEMA@'::regnamespace
                AND ((p.proname ~ '^h[0-9]+_closed$' AND p.proargtypes = '20'::oidvector)
                     OR (p.proname ~ '^h[0-9]+_restamp$' AND p.proargtypes = '20 20'::oidvector))
              ORDER BY p.oid LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$drop$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (50);
