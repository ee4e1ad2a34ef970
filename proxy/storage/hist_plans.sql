-- mzproxy backend state, version 36 to 37: a write's history statements
-- whose plan cannot go wrong with the history's size (issue 14).
-- docs/write-cost.md has the figures.
--
-- PL/pgSQL keeps a statement's generic plan for the session after five
-- custom ones. Planned while a history table had a page or two, the
-- triggers' close, _closed and _restamp were sequential scans, kept until
-- an ANALYZE or VACUUM of the table; with statistics taken at one row
-- every path costs the same to the planner, and full scans of an index on
-- its second column were picked as readily. Every write in between read
-- the whole history.
--
--  * The close of an old row's current version by key (an autocommit
--    UPDATE or DELETE of a table with a non-deferrable primary key, and a
--    block's first write of such a table): a LATERAL probe per old row
--    (OFFSET 0: the old rows drive it) whose condition is two row
--    comparisons, (key, mz_to) >= and <= (old key, Infinity), which only
--    the key's mirror (key, mz_to) can take as index conditions and which
--    start and end its scan at that entry; the versions are closed by
--    ctid (a TID scan). The tables' trigger functions get
--    SET enable_seqscan = off, so the probe is the planner's only path.
--  * _closed and _restamp: SET plan_cache_mode = force_custom_plan (and
--    enable_seqscan = off): planned at each call for the history's size
--    then, where (mz_to, mz_from) wins.
--  * Every function with enable_seqscan = off also has jit = off, these
--    and ddl_scans.sql's table_shape and plain_column_change. The setting
--    adds disable_cost (1e10) to each plan that still has a sequential
--    scan (the trigger's read of the one-row write_key, a catalog); past
--    jit_above_cost PostgreSQL JIT-compiles such a plan at every
--    execution, about 100 ms (an autocommit UPDATE through mzproxy took
--    105 ms, all of it the JIT of that read).
--  * The general path's search for a version written at _t: a probe per
--    old row (no hashed subplan of every current version at _t).
--  * Keyless tables' triggers are unchanged (no setting: their close uses
--    the partial (mz_hash) index, which (mz_to, mz_from) competes with on
--    the same condition; with the setting and one-row statistics the
--    planner chose the latter).
--  * Every table's trigger and restamp functions made again.

-- Edits to gen_triggers as version 35 left it; each must apply exactly
-- once.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- A table with a non-deferrable primary key: its functions plan no
        -- sequential scan (the close is a probe of the key's mirror, below).
        [$$
    IF pk IS NOT NULL AND NOT pk_deferrable THEN
$$, $$
    IF pk IS NOT NULL AND NOT pk_deferrable THEN
        settings := settings || ' SET enable_seqscan = off SET jit = off';
$$],
        -- The general path's search for a version written at _t stays a
        -- probe per old row (OFFSET 0: no hashed subplan of every current
        -- version at _t, which scans the key's mirror on mz_to).
        [$$ AND x.mz_from = _t AND %6$s = %4$s))$$,
         $$ AND x.mz_from = _t AND %6$s = %4$s OFFSET 0))$$],
        -- The close of an old row's current version, at a write whose
        -- trigger chose T (or a block's first write of the table): a probe
        -- of the key's mirror per old row, by ctid (see the header).
        [$$    fresh_upd text;
$$, $$    fresh_upd text;
    probe text;
$$],
        [$$
        fresh_cte := format($r$$, $$
        -- (Version 37, see hist_plans.sql.) The key's current version of
        -- an old row d, as a condition on x: (key, mz_to) >= and <= (d's
        -- key, Infinity), two row comparisons, which only the mirror
        -- (key, mz_to) can take as index conditions, and which start and
        -- end its scan at that one entry. Keys whose operators are not
        -- all pg_catalog's: the key's equalities and mz_to.
        SELECT CASE WHEN bool_and(kop[i] ^@ 'OPERATOR(pg_catalog.')
                    THEN format('ROW(%1$s, x.mz_to) OPERATOR(pg_catalog.>=) ROW(%2$s, 9223372036854775807)'
                                ' AND ROW(%1$s, x.mz_to) OPERATOR(pg_catalog.<=) ROW(%2$s, 9223372036854775807)',
                                string_agg(format('x.%I', k), ', ' ORDER BY i),
                                string_agg(format('d.%I', k), ', ' ORDER BY i))
                    ELSE string_agg(format('x.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i)
                         || 'x.mz_to = 9223372036854775807' END
          INTO probe FROM unnest(pk) WITH ORDINALITY AS u(k, i);
        fresh_cte := format($r$$],
        [$$
        UPDATE %1$s h SET mz_to = _t FROM mz_old d
         WHERE %2$s h.mz_to = 9223372036854775807
        RETURNING h.mz_from
    )$r$, h, kjoin);$$, $$
        UPDATE %1$s h SET mz_to = _t
         WHERE h.ctid = ANY (ARRAY(SELECT s.tid FROM mz_old d, LATERAL (
                   SELECT x.ctid AS tid FROM %1$s x WHERE %2$s OFFSET 0) s))
        RETURNING h.mz_from
    )$r$, h, probe);$$],
        [$$
    UPDATE %1$s h SET mz_to = _t FROM mz_old d
     WHERE %2$s h.mz_to = 9223372036854775807 AND (h.mz_from < _t OR _t < 0);
    GET DIAGNOSTICS _k = ROW_COUNT;%3$s$$, $$
    UPDATE %1$s h SET mz_to = _t
     WHERE h.ctid = ANY (ARRAY(SELECT s.tid FROM mz_old d, LATERAL (
               SELECT x.ctid AS tid FROM %1$s x WHERE %6$s AND (x.mz_from < _t OR _t < 0) OFFSET 0) s));
    GET DIAGNOSTICS _k = ROW_COUNT;%3$s$$],
        [$$
            (SELECT string_agg(format('n.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)));
        upd_sql := E'$$, $$
            (SELECT string_agg(format('n.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)),
            probe);
        upd_sql := E'$$],
        -- Functions whose text is unchanged are kept only when they have
        -- the setting where they should (an INSERT trigger's text did not
        -- change).
        [$$ AND p.prosrc = ins_src) AND EXISTS ($$,
         $$ AND p.prosrc = ins_src
               AND coalesce(p.proconfig @> '{enable_seqscan=off,jit=off}', false)
                   = coalesce(pk IS NOT NULL AND NOT pk_deferrable, false)) AND EXISTS ($$]
    ];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'storage version 37: edit % of gen_triggers does not apply once', i;
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

-- ddl_scans.sql's functions with enable_seqscan = off, without JIT (see
-- the header).
ALTER FUNCTION @SCHEMA@.table_shape(bigint) SET jit = off;
ALTER FUNCTION @SCHEMA@.plain_column_change(bigint, oid, text) SET jit = off;

-- As restamp.sql made it, with the settings (see the header).
CREATE OR REPLACE FUNCTION @SCHEMA@.restamp_functions(h text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $gen$
SELECT format($f$
CREATE OR REPLACE FUNCTION %1$s_closed(p bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_custom_plan
AS $$ BEGIN RETURN (SELECT max(h.mz_from) FROM %1$s h WHERE h.mz_to = p AND h.mz_to < 0); END $$;
CREATE OR REPLACE FUNCTION %1$s_restamp(p bigint, t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    -- One statement (two index conditions OR-ed): the versions the block
    -- closed, and those it wrote, which are current (one it closed again
    -- was deleted by the trigger). restamp.sql says why mz_to is named.
    UPDATE %1$s h SET mz_to = CASE WHEN h.mz_to = p THEN t ELSE h.mz_to END,
                      mz_from = CASE WHEN h.mz_from = p THEN t ELSE h.mz_from END
     WHERE (h.mz_to = p AND h.mz_to < 0)
        OR (h.mz_to = 9223372036854775807 AND h.mz_from = p AND h.mz_from < 0);
END
$$;
REVOKE ALL ON FUNCTION %1$s_closed(bigint), %1$s_restamp(bigint, bigint) FROM PUBLIC;$f$, h)
$gen$;

-- Every table's restamp functions made again (dropped tables' too, while
-- their history is kept), as restamp.sql did.
DO $regen$
DECLARE
    h text;
BEGIN
    FOR h IN SELECT k.history FROM @SCHEMA@.catalog k
              WHERE k.history IS NOT NULL AND to_regprocedure(k.history || '_restamp(bigint, bigint)') IS NOT NULL
              ORDER BY k.id LOOP
        EXECUTE @SCHEMA@.restamp_functions(h);
    END LOOP;
END
$regen$;

-- The trigger functions of every managed table made again, as mzproxy's
-- own DDL, through sync_triggers (as block_lean.sql did): gen_triggers'
-- text changed, so every kept signature is stale.
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (37);
