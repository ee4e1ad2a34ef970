-- mzproxy backend state, version 58 to 59 (session 25, corpus25): the
-- history triggers of a table without a primary key run without the six
-- output settings when no column's text can depend on them (issue 16:
-- the sqllogictest corpus's tables, issue 14: single-row writes).
-- docs/corpus-cost.md ("Session 25") has the figures.
--
-- A table without a primary key finds the versions a DELETE or UPDATE
-- retracts by the hash of the whole row's text (mz_hash = hashtext of
-- (n.*)::text or its column-by-column form). That text must not depend on
-- the session that writes: a row inserted under one TimeZone and deleted
-- under another must hash the same. So gen_triggers gave such a table's
-- _ins, _upd and _del functions six SET clauses besides search_path
-- (DateStyle, IntervalStyle, TimeZone, extra_float_digits, bytea_output,
-- lc_monetary), which PostgreSQL sets and restores at every call: every
-- INSERT, UPDATE or DELETE of such a table paid for them.
--
-- They are needed only for a column whose output function reads one of
-- them. row_text_fixed(table) says that none does: every user column's
-- type, through domains and array elements, is one of the built-in types
-- whose text is the same under any setting (bool, "char", name, int2,
-- int4, int8, oid, text, varchar, bpchar, numeric, uuid). Such a table's
-- functions keep only search_path. Their text is the same either way, so
-- a hash made with the settings (resync, an older trigger) equals one
-- made without them, and a table whose flag changes (a column added,
-- dropped or changed in type) mixes none: the flag is part of the
-- trigger functions' signature (sync_triggers) and of the table's shape
-- (table_shape, which a plain column change compares before it syncs the
-- triggers), and gen_triggers makes the functions again when their SET
-- clauses do not match it.

-- (PL/pgSQL, not SQL: a SQL function's query is planned again at every
-- call, a PL/pgSQL one's once per session. The types by their oids,
-- fixed in PostgreSQL's catalog: a regtype literal would be parsed at
-- every call.)
CREATE FUNCTION @SCHEMA@.row_text_fixed(p_oid oid) RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN NOT EXISTS (
        WITH RECURSIVE t(typ) AS (
            SELECT a.atttypid FROM pg_attribute a
             WHERE a.attrelid = p_oid AND a.attnum > 0 AND NOT a.attisdropped
            UNION
            -- A domain's base type, an array's element type.
            SELECT CASE WHEN y.typtype = 'd' THEN y.typbasetype ELSE y.typelem END
              FROM t JOIN pg_type y ON y.oid = t.typ
             WHERE y.typtype = 'd' OR (y.typcategory = 'A' AND y.typelem <> 0)
        )
        SELECT 1 FROM t JOIN pg_type y ON y.oid = t.typ
         WHERE NOT (y.typtype = 'd' OR (y.typcategory = 'A' AND y.typelem <> 0))
           -- bool, "char", name, int8, int2, int4, text, oid, bpchar,
           -- varchar, numeric, uuid
           AND NOT t.typ = ANY ('{16,18,19,20,21,23,25,26,1042,1043,1700,2950}'::oid[]));
END
$$;
REVOKE ALL ON FUNCTION @SCHEMA@.row_text_fixed(oid) FROM PUBLIC;

-- Edits of gen_triggers, sync_triggers and table_shape as version 57 left
-- them; each must apply exactly once. The signature and the shape record
-- 'key' for a table with a primary key (whose triggers never set the
-- output settings), else the flag: a keyed table's DDL pays a probe of
-- pg_index, not a call of row_text_fixed.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- gen_triggers: the six settings only where a column needs them.
        ['gen_triggers(bigint)', $$
    IF pk IS NULL THEN
        settings := settings || $s$
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 1 SET bytea_output = 'hex' SET lc_monetary = 'C'$s$;
$$, $$
    IF pk IS NULL AND NOT @SCHEMA@.row_text_fixed(c.oid) THEN
        settings := settings || $s$
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 1 SET bytea_output = 'hex' SET lc_monetary = 'C'$s$;
    END IF;
    IF pk IS NULL THEN
$$],
        -- gen_triggers: functions whose settings differ are made again.
        ['gen_triggers(bigint)', $$
                   = coalesce(pk IS NOT NULL AND NOT pk_deferrable, false)) AND EXISTS ($$, $$
                   = coalesce(pk IS NOT NULL AND NOT pk_deferrable, false)
               AND coalesce(p.proconfig @> '{TimeZone=UTC}', false) = (strpos(settings, 'TimeZone') > 0)) AND EXISTS ($$],
        -- sync_triggers: the flag in the functions' signature.
        ['sync_triggers(bigint)', $$
        SELECT g.xmin || ' ' || g.ctid || ' ' || EXISTS (SELECT 1 FROM @SCHEMA@.columns cc WHERE cc.id = p_id) || ' ' ||$$, $$
        SELECT g.xmin || ' ' || g.ctid || ' ' || EXISTS (SELECT 1 FROM @SCHEMA@.columns cc WHERE cc.id = p_id) || ' ' ||
               CASE WHEN EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = rel AND x.indisprimary)
                    THEN 'key' ELSE @SCHEMA@.row_text_fixed(rel)::text END || ' ' ||$$],
        -- table_shape: the flag in the table's shape.
        ['table_shape(bigint)', $$
        || ' ' || EXISTS (SELECT 1 FROM @SCHEMA@.columns cc WHERE cc.id = p_id)$$, $$
        || ' ' || EXISTS (SELECT 1 FROM @SCHEMA@.columns cc WHERE cc.id = p_id)
        || ' ' || CASE WHEN EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = rel AND x.indisprimary)
                       THEN 'key' ELSE @SCHEMA@.row_text_fixed(rel)::text END$$]
    ];
    i int;
    fn text;
    def text;
BEGIN
    FOREACH fn IN ARRAY ARRAY['gen_triggers(bigint)', 'sync_triggers(bigint)', 'table_shape(bigint)'] LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || fn)::regprocedure);
        FOR i IN 1 .. array_length(edits, 1) LOOP
            CONTINUE WHEN edits[i][1] <> fn;
            IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
                RAISE EXCEPTION 'storage version 59: edit % of % does not apply once', i, fn;
            END IF;
            def := replace(def, edits[i][2], edits[i][3]);
        END LOOP;
        EXECUTE def;
    END LOOP;
END
$edit$;

-- The trigger functions of every managed table made again where their
-- settings change (as hist_trim.sql does): gen_triggers' text changed, so
-- every kept signature is stale, and the kept shapes are too.
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (59);
