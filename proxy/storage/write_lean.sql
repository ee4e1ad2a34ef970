-- mzproxy backend state, version 26 to 27: an autocommit write's history
-- trigger without the nested stamp_ts call and, when it chose T itself,
-- without the whole-row text (issue 14). docs/write-cost.md has the
-- measured breakdown.
--
-- Counted with callgrind in a single-user backend (plan_cache_mode =
-- force_generic_plan, as the nested statements run through the proxy
-- after their sixth call: pg_stat_statements counted 6 plans in 500
-- calls), per autocommit single-row UPDATE of pgbench_accounts (scale 1):
-- the plain UPDATE 166k instructions, the managed one 794k. Of the 628k
-- more: the slot statement (begin_write_occ) about 159k, the trigger's
-- call 42k (17k of it the SECURITY DEFINER call with its three SET
-- clauses), stamp_ts 120k (two SHA-256 tags 44k, the marker's setval 15k),
-- the retraction-and-insert statement 287k (the new version's INSERT 66k,
-- the whole-row text comparison 47k), the checks after it 17k.
--
--  * A table with a non-deferrable primary key: the trigger that finds
--    the slot pending chooses T in a query of its own body (the query
--    stamp_ts runs for a pending slot: the tag checked, T chosen and
--    tagged, the table's marker set), not through a nested PL/pgSQL call
--    of stamp_ts (-12k). A value that only looks pending finds no row
--    there and takes the general path, whose stamp_ts fails with 42501 as
--    before.
--  * On that path (T chosen by the trigger itself, the transaction having
--    written no version yet) the retraction of an UPDATE or DELETE finds
--    the key's current version by key alone: with a primary key there is
--    exactly one (the two that writable CTEs deleting and re-inserting a
--    key leave exist only after a first trigger of the statement chose
--    T, so the second one is not on this path). The whole-row text
--    comparison that chose between two, two record_out calls per row, is
--    kept on the general path (-47k). If the history ever held a second
--    current version of the key on this path, both would be closed and
--    the count check fails the statement with XX000 ("out of step"),
--    which the comparison would have raised too for a version whose text
--    differs.
--
-- Together: 794k -> 734k per UPDATE (-7.5%). Not changed, and why:
--
--  * The three SHA-256 tags (67k): the pending slot's proves that
--    begin_write_occ (the gate, the count, the fencing check) ran in this
--    transaction, and T's tag that the oracle chose T; a setting is the
--    transaction's only memory a role cannot write, and a keyed hash its
--    only proof. Most of each tag is OpenSSL's context set-up (20k).
--  * One statement choosing T, retracting and inserting (a CTE of the T
--    query joined into the UPDATE and INSERT) ran 11k more than two.
--  * The retraction and the insert are PostgreSQL's own work: executor
--    start-up of a plan with two ModifyTable nodes (about 60k), a
--    non-HOT update of the old version (mz_to is in both history
--    indexes) and the new version, four index insertions.

-- Edits to gen_triggers as version 24 left it; each must apply exactly
-- once.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        [$$    ins_src text;
$$, $$    ins_src text;
    fresh_stamp text;
$$],
        [$$        fresh_cte := format($r$
    WITH u AS (
        UPDATE %1$s h SET mz_to = _t FROM mz_old d
         WHERE %2$s h.mz_to = 9223372036854775807 AND %3$s = %4$s
        RETURNING h.mz_from
    )$r$, h, kjoin, htext, otext);
$$, $$        -- (Version 27, see write_lean.sql.) By key alone: with T chosen
        -- by this trigger the key has one current version.
        fresh_cte := format($r$
    WITH u AS (
        UPDATE %1$s h SET mz_to = _t FROM mz_old d
         WHERE %2$s h.mz_to = 9223372036854775807
        RETURNING h.mz_from
    )$r$, h, kjoin);
$$],
        [$$        retract_sql := E'\n    IF _fresh THEN' || fresh_cte || retract_select
$$, $$        retract_sql := E'\n    END IF;\n    IF _fresh THEN' || fresh_cte || retract_select
$$],
        [$$        upd_sql := E'\n    IF _fresh THEN' || fresh_cte || upd_insert || retract_select
$$, $$        upd_sql := E'\n    END IF;\n    IF _fresh THEN' || fresh_cte || upd_insert || retract_select
$$],
        [$$        fresh_sql := $r$
    _fresh := left(current_setting('mzproxy.write_ts', true), 4) = '0 - ';$r$;
$$, $$        -- (Version 27, see write_lean.sql.) stamp_ts' query for a
        -- pending slot, in the trigger's own body: the tag checked, T
        -- chosen and tagged, the table's marker set. No row (a value that
        -- only looks pending): _t stays NULL, and the general path's
        -- stamp_ts fails with 42501.
        fresh_stamp := $r$
        SELECT x.t INTO _t
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       setval(to_regclass('@SCHEMA@.w' || TG_RELID), pg_sequence_last_value('@SCHEMA@.writes'))
                  FROM @SCHEMA@.write_key k
                 WHERE current_setting('mzproxy.write_ts', true) = '0 - ' || @SCHEMA@.key_tag(k.k, '0 -')
                OFFSET 0) x
         WHERE set_config('mzproxy.write_ts', x.t::text || ' - ' || @SCHEMA@.key_tag(x.k, x.t::text || ' -'), true) IS NOT NULL;$r$;
        fresh_sql := $r$
    _fresh := left(current_setting('mzproxy.write_ts', true), 4) = '0 - ';
    IF _fresh THEN$r$ || fresh_stamp || $r$
        _fresh := _t IS NOT NULL;
    END IF;
    IF NOT _fresh THEN$r$;
$$],
        [$$    IF current_setting('mzproxy.write_ts', true) ^@ '0 - ' THEN
        _t := @SCHEMA@.stamp_ts(TG_RELID);
    ELSE%s
$$, $$    IF current_setting('mzproxy.write_ts', true) ^@ '0 - ' THEN%s
    END IF;
    IF _t IS NULL THEN%s
$$],
        [$$    END IF;$r$, check_sql, h,
$$, $$    END IF;$r$, fresh_stamp, check_sql, h,
$$]];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'storage version 27: edit % of gen_triggers does not apply once', i;
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

-- The trigger functions of every managed table made again (the triggers,
-- which name them by oid, stay), as mzproxy's own DDL, through
-- sync_triggers: gen_triggers' text changed, so every kept signature is
-- stale, and sync_triggers records the new one.
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (27);
