-- mzproxy backend state, version 30 to 31: the history triggers of a table
-- without a usable key (none, or a deferrable primary key) choose T in
-- their own query when the slot is pending, as a keyed table's have since
-- version 27 (write_lean.sql), instead of through a nested stamp_ts call
-- (issue 14). docs/write-cost.md has the measured figures.
--
-- A blind autocommit INSERT into such a table (pgbench_history) ran its
-- _ins function, which called stamp_ts (PL/pgSQL) to check the pending
-- slot's tag, choose T, tag it and set the table's marker. That query now
-- runs in the trigger's own body (the text keyed tables run, moved ahead
-- of gen_triggers' branch on the key and otherwise unchanged, so a keyed
-- table's functions keep their text and are not made again). A value that
-- only looks pending finds no row there: _t stays NULL and the general
-- path's stamp_ts fails the write with 42501, as before; a write outside
-- mzproxy (no slot) still fails with MZ002. The same applies to the
-- table's _upd and _del functions (their retraction, by whole-row text
-- through mz_hash, is unchanged: the version written at T it prefers
-- cannot exist when this trigger chose T, and needs no search to say so).
-- TRUNCATE keeps stamp_ts: truncate_ts follows it.
--
-- Counted with callgrind (docs/write-cost.md's method): 503k -> 492k
-- instructions per autocommit INSERT into pgbench_history (112k directly).
-- Measured and left: the six SET clauses that fix the text form of a row
-- for its mz_hash (DateStyle, TimeZone, ...) cost 18.6k of the rest; the
-- hash of the row's text is what the retraction looks up, and a hash of
-- another form (binary, per type) would change every current version's.

-- Edits to gen_triggers as version 29 left it; each must apply exactly
-- once.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- stamp_ts' query for a pending slot, moved ahead of the branch on
        -- the key, unchanged.
        [$$        -- (Version 27, see write_lean.sql.) stamp_ts' query for a
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
$$, ''],
        [$$    IF pk IS NOT NULL AND NOT pk_deferrable THEN
$$, $$    -- (Version 27, see write_lean.sql; every table's since version 31,
    -- see hist_write.sql.) stamp_ts' query for a pending slot, in the
    -- trigger's own body: the tag checked, T chosen and tagged, the
    -- table's marker set. No row (a value that only looks pending): _t
    -- stays NULL, and the general path's stamp_ts fails with 42501.
    fresh_stamp := $r$
        SELECT x.t INTO _t
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       setval(to_regclass('@SCHEMA@.w' || TG_RELID), pg_sequence_last_value('@SCHEMA@.writes'))
                  FROM @SCHEMA@.write_key k
                 WHERE current_setting('mzproxy.write_ts', true) = '0 - ' || @SCHEMA@.key_tag(k.k, '0 -')
                OFFSET 0) x
         WHERE set_config('mzproxy.write_ts', x.t::text || ' - ' || @SCHEMA@.key_tag(x.k, x.t::text || ' -'), true) IS NOT NULL;$r$;

    IF pk IS NOT NULL AND NOT pk_deferrable THEN
$$],
        -- Without a usable key: the pending slot's T chosen in the
        -- trigger's own query, the general path after it when that found
        -- no row; the retraction closes the general path's IF.
        [$$    ELSE
        retract_sql := format($r$
$$, $$    ELSE
        -- (Version 31, see hist_write.sql.)
        fresh_sql := $r$
    IF current_setting('mzproxy.write_ts', true) ^@ '0 - ' THEN$r$ || fresh_stamp || $r$
    END IF;
    IF _t IS NULL THEN$r$;
        ins_check := fresh_sql || check_sql || E'\n    END IF;';
        retract_sql := E'\n    END IF;' || format($r$
$$],
        [$$CASE WHEN ins_check = '' THEN '' ELSE ' _m bigint;' END$$,
         $$CASE WHEN pk IS NOT NULL AND NOT pk_deferrable THEN ' _m bigint;' ELSE '' END$$]];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'storage version 31: edit % of gen_triggers does not apply once', i;
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

-- The trigger functions of every managed table made again where their text
-- changed (gen_triggers leaves a keyed table's, unchanged, alone), as
-- mzproxy's own DDL, through sync_triggers, which records the new
-- signature.
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (31);
