-- mzproxy backend state, version 55 to 56 (session 24, hist24): the
-- history's per-statement cost trimmed (issue 14): the predicate of a
-- history's _pending index is cheaper to compile, and the history
-- triggers evaluate fewer conditions per call (below).
-- docs/write-cost.md ("Session 24") has the figures.
--
-- Since version 54 (restamp_generic.sql) every statement that writes a
-- history table opens its partial index h<id>_pending and, for the first
-- version it writes, compiles the index's predicate, which was the
-- placeholder expression below 0:
--
--     (CASE WHEN mz_to = Infinity THEN mz_from ELSE mz_to END) < 0
--
-- An autocommit UPDATE has two such statements (the close and the new
-- versions), an INSERT one, a TPC-B block seven. The predicate is now
--
--     least(mz_to, mz_from) < 0
--
-- a smaller expression (one comparison and a LEAST of two columns instead
-- of a CASE of two comparisons) to copy out of the relation cache and to
-- compile in each statement. The index's key stays the placeholder (the
-- CASE), and the restamp's UPDATE in _fix carries the new predicate as a
-- condition of its own, so that the planner proves the index usable:
--
--     WHERE (CASE ... END) = p AND (CASE ... END) < 0 AND least(mz_to, mz_from) < 0
--
-- The rows are the same as before for every state of the table: the CASE
-- is one of mz_to and mz_from, so CASE = p < 0 implies least(...) < 0, and
-- the added condition removes none. The index holds a superset of the
-- old one's versions (also one whose mz_from alone is below 0 after it
-- was closed at a positive T, which no write makes), and the restamp's
-- key condition picks its own. As before, least(...) is an expression no
-- column index can take, so the one index path at any statistics is
-- _pending and the generic plan _fix keeps for its session is that index.
--
-- Replaced: restamp_functions (the index's predicate, _fix's condition).
-- The upgrade drops and builds again the _pending index of every table
-- that has a _fix (each history read once, under the upgrade's lock) and
-- makes its _fix again; a table without one gets both at its first write,
-- as before.

CREATE OR REPLACE FUNCTION @SCHEMA@.restamp_functions(h text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $fn$
SELECT CASE WHEN to_regclass(h || '_pending') IS NULL
            THEN format($i$
CREATE INDEX %2$I ON %1$s ((CASE WHEN mz_to = 9223372036854775807 THEN mz_from ELSE mz_to END))
 WHERE least(mz_to, mz_from) < 0;$i$,
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
    -- session is that one, whatever the statistics were when it was made;
    -- the least(...) condition is the index's predicate, hist_trim.sql,
    -- implied by the first two). It returns the newest start of a version
    -- the block closed (now ending at t; a version it wrote is current),
    -- which fix_write raises T to when it is above t.
    FOR f IN UPDATE %1$s h SET mz_to = CASE WHEN h.mz_to = p THEN t ELSE h.mz_to END,
                               mz_from = CASE WHEN h.mz_from = p THEN t ELSE h.mz_from END
              WHERE (CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) = p
                AND (CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) < 0
                AND least(h.mz_to, h.mz_from) < 0
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
-- keeps its history): its _pending index built again with the new
-- predicate (restamp_functions makes it when missing), and its _fix.
DO $regen$
DECLARE
    h text;
BEGIN
    FOR h IN SELECT k.history FROM @SCHEMA@.catalog k
              WHERE k.history IS NOT NULL AND to_regprocedure(k.history || '_fix(bigint, bigint)') IS NOT NULL
              ORDER BY k.id LOOP
        IF to_regclass(h || '_pending') IS NOT NULL THEN
            EXECUTE format('DROP INDEX %s', h || '_pending');
        END IF;
        EXECUTE @SCHEMA@.restamp_functions(h);
    END LOOP;
END
$regen$;

-- The history triggers evaluate fewer PL/pgSQL conditions per call.
-- PL/pgSQL compiles each simple expression again in every transaction
-- (about 2k backend instructions each here), and a block's or an
-- autocommit statement's trigger is that transaction's only call. Edits
-- to gen_triggers as version 55 left it; each must apply exactly once:
--
-- 1. The MZ002 check (every trigger's slot part) runs only after
--    stamp_ts was asked for T, inside that branch: one condition fewer
--    where T was found before (always, through mzproxy).
-- 2. to 4. An UPDATE whose trigger chose T (its fresh path: autocommit,
--    or a block's first UPDATE of the table) checks the history's step
--    and an overtaken version only when its two row counts differ: only
--    then can they fail (_m is set there, and the deletion of versions
--    closed at T, for _z above 0, is the general path's: _z is 0 or NULL
--    here). The general path keeps its deletion and checks, inside its
--    branch. Three conditions fewer per fresh UPDATE.
-- 5. and 6. retract_check, the step and overtaken checks' text, is made
--    before the branch on the key, where the fresh UPDATE's text takes it.
DO $edit$
DECLARE
    check_old text := $$
    retract_check := $r$
    IF _k <> _n THEN
        RAISE EXCEPTION 'mzproxy: history of %.% is out of step: % rows removed but % versions found', TG_TABLE_SCHEMA, TG_TABLE_NAME, _n, _k
            USING ERRCODE = 'XX000';
    END IF;
    IF _m > _t AND _t > 0 THEN
        PERFORM @SCHEMA@.raise_overtaken(TG_RELID, _m, _t);
    END IF;$r$;$$;
    branch text := $$
    IF pk IS NOT NULL AND NOT pk_deferrable THEN
        settings := settings || ' SET enable_seqscan = off SET jit = off';$$;
    edits text[][] := ARRAY[
        [$$
    IF _t IS NULL THEN
        _t := @SCHEMA@.stamp_ts(TG_RELID);
    END IF;
    IF _t IS NULL THEN
        RAISE EXCEPTION 'cannot write to managed table %.% outside mzproxy', quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME)
            USING ERRCODE = 'MZ002',
                  HINT = 'Connect through mzproxy: it runs every write in a transaction that records the table''s history.';
    END IF;$c$;$$, $$
    IF _t IS NULL THEN
        _t := @SCHEMA@.stamp_ts(TG_RELID);
        IF _t IS NULL THEN
            RAISE EXCEPTION 'cannot write to managed table %.% outside mzproxy', quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME)
                USING ERRCODE = 'MZ002',
                      HINT = 'Connect through mzproxy: it runs every write in a transaction that records the table''s history.';
        END IF;
    END IF;$c$;$$],
        [$$
        _z := 0;
    END IF;$r$, h, kjoin, insert_sql, replace(left(insert_sql, -1), E'\n    ', E'\n        '),
            (SELECT string_agg(format('n.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)),
            probe);$$, $$
        _z := 0;%7$s
    END IF;$r$, h, kjoin, insert_sql, replace(left(insert_sql, -1), E'\n    ', E'\n        '),
            (SELECT string_agg(format('n.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)),
            probe, replace(retract_check, E'\n    ', E'\n        '));$$],
        [$$ || upd_check || E'\n    END IF;' || retract_end;$$,
         $$ || upd_check || retract_end || retract_check || E'\n    END IF;';$$],
        [$$
    upd_sql := coalesce(upd_sql || retract_check, retract_sql || insert_sql);$$, $$
    upd_sql := coalesce(upd_sql, retract_sql || insert_sql);$$],
        [check_old, ''],
        [branch, check_old || branch]
    ];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'storage version 56: edit % of gen_triggers does not apply once', i;
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

-- The trigger functions of every managed table made again (the triggers,
-- which name them by oid, stay), as mzproxy's own DDL, through
-- sync_triggers (as slot_pending.sql did): gen_triggers' text changed, so
-- every kept signature is stale.
DO $regen$
DECLARE
    k record;
BEGIN
    PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
    FOR k IN SELECT c.id FROM @SCHEMA@.catalog c
              WHERE c.kind = 'table' AND c.dropped_ts IS NULL AND to_regclass(c.history) IS NOT NULL
                AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = c.oid) LOOP
        PERFORM @SCHEMA@.sync_triggers(k.id);
    END LOOP;
    PERFORM set_config('mzproxy.in_ddl', '', true);
END
$regen$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (56);
