-- mzproxy backend state, version 53 to 54 (session 23, fixplan23): a
-- table's restamp is planned once per session, on an index no other plan
-- can stand in for (issue 14). docs/write-cost.md ("Session 23") has the
-- figures.
--
-- A block's COMMIT runs each written table's h<id>_fix, whose UPDATE finds
-- the versions the block stamped with its placeholder p: those it closed
-- (mz_to = p) and those it wrote (mz_to = Infinity AND mz_from = p). Since
-- version 37 (hist_plans.sql) that UPDATE is planned at every call
-- (plan_cache_mode = force_custom_plan), about 222k backend instructions
-- a table, a fifth of a TPC-B block's: a generic plan made while the
-- history had one row kept the key's mirror (key, mz_to), which takes
-- mz_to conditions as its second column, as cheap as the (mz_to, mz_from)
-- range at that size, and scanned the whole mirror once the history grew
-- (TestHistoryPlansStayFlat/c: 513 buffers at 40,000 versions, 40 at 2).
--
-- Now the UPDATE finds its versions by one expression, the placeholder a
-- version carries:
--
--     CASE WHEN mz_to = Infinity THEN mz_from ELSE mz_to END = p
--
-- which holds exactly for the two kinds above (p < 0: a version with
-- mz_to = p is not current; one with mz_to = Infinity is a version the
-- block wrote when its mz_from = p). No column index can take it as an
-- index condition, so the planner's only index path, at any statistics,
-- is an index on that expression: h<id>_pending, partial (the expression
-- below 0), which holds only the versions of blocks not yet restamped (a
-- restamped version's new row is not in it, and autocommit writes, whose
-- T is known, never put one there). With sequential scans disabled (as
-- before), the generic plan is that index, so _fix runs with
-- plan_cache_mode = force_generic_plan: planned at its first call in a
-- session, kept (until the table's plans are invalidated, when it is
-- planned again to the same index).
--
-- Replaced: restamp_functions, which now makes the index (when missing)
-- with _fix, so that no _fix of this form exists without it. gen_restamp
-- (version 49) runs it when a table's _fix is missing, as before. The
-- upgrade runs it for every table that has a _fix (each history is read
-- once, to build its index, under the upgrade's lock).

-- As restamp_lean.sql made it, with the index and the restamp by it.
CREATE OR REPLACE FUNCTION @SCHEMA@.restamp_functions(h text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $fn$
SELECT CASE WHEN to_regclass(h || '_pending') IS NULL
            THEN format($i$
CREATE INDEX %2$I ON %1$s ((CASE WHEN mz_to = 9223372036854775807 THEN mz_from ELSE mz_to END))
 WHERE (CASE WHEN mz_to = 9223372036854775807 THEN mz_from ELSE mz_to END) < 0;$i$,
                        h, (parse_ident(h))[2] || '_pending')
            ELSE '' END
    || format($f$
CREATE OR REPLACE FUNCTION %1$s_fix(p bigint, t bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    closed bigint;
    f bigint;
BEGIN
    -- The versions the block closed (mz_to = p) and those it wrote, which
    -- are current (one it closed again was deleted by the trigger), found
    -- by the placeholder they carry, through the partial index on it
    -- (restamp_generic.sql: the only index path, so the plan kept for the
    -- session is that one, whatever the statistics were when it was made).
    -- It returns the newest start of a version the block closed (now
    -- ending at t; a version it wrote is current), which fix_write
    -- raises T to when it is above t.
    FOR f IN UPDATE %1$s h SET mz_to = CASE WHEN h.mz_to = p THEN t ELSE h.mz_to END,
                               mz_from = CASE WHEN h.mz_from = p THEN t ELSE h.mz_from END
              WHERE (CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) = p
                AND (CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) < 0
             RETURNING CASE WHEN h.mz_to < 9223372036854775807 THEN h.mz_from END LOOP
        closed := GREATEST(closed, f);
    END LOOP;
    RETURN closed;
END
$$;
REVOKE ALL ON FUNCTION %1$s_fix(bigint, bigint) FROM PUBLIC;$f$, h)
$fn$;
REVOKE ALL ON FUNCTION @SCHEMA@.restamp_functions(text) FROM PUBLIC;

-- Every table that has a _fix (a dropped table's too, while compaction
-- keeps its history) gets the index and the new _fix; a table without one
-- gets both at its first write, as before.
DO $regen$
DECLARE
    h text;
BEGIN
    FOR h IN SELECT k.history FROM @SCHEMA@.catalog k
              WHERE k.history IS NOT NULL AND to_regprocedure(k.history || '_fix(bigint, bigint)') IS NOT NULL
              ORDER BY k.id LOOP
        EXECUTE @SCHEMA@.restamp_functions(h);
    END LOOP;
END
$regen$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (54);
