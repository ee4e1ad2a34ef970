-- mzproxy backend state, version 38 to 39: ALTER TABLE ADD/DROP COLUMN
-- with fewer statements in the event triggers (issue 16).
--
-- Measured with bench/ddlcost.sh (PostgreSQL under callgrind, backend
-- instructions per ADD COLUMN + DROP COLUMN pair in a proxy write, 100
-- tables; docs/ddl-cost.md): 6.51M at version 37 against 0.62M directly,
-- and by stubbing parts: table_shape 0.87M of it, the history's ALTERs
-- (with the guards they fire) 0.90M, the lookup of dependent views 0.55M,
-- the five ddl_mark() calls 0.22M; reconcile as a whole 3.30M.
--
--  * on_ddl_command_end's lookup of the views that depend on an altered
--    relation: the generic plan ANDed two bitmaps of pg_depend, the
--    relation's references (a few rows) and every row whose depender is a
--    rewrite rule (759 on a new database, and more with every view), for
--    the few rows the first gives alone. The rule condition is now a
--    filter (IS TRUE is no index condition), so the plan reads the
--    relation's references only, whatever the number of views.
--  * reconcile reads its catalog row and updates the name in one
--    statement (a writable CTE): c is the row as it was before the name's
--    update, and nothing reconcile does reads c's name.
--  * on_sql_drop leaves a column that an ALTER TABLE drops itself
--    (original, TG_TAG 'ALTER TABLE') to on_ddl_command_end, which
--    reconciles the table or, outside mzproxy, refuses the ALTER (MZ003),
--    as on_sql_drop did: no catalog lookup, no timestamp taken twice.
--    Every other column of a managed table dropped is reconciled in
--    on_sql_drop: a cascade's (DROP TYPE ... CASCADE), as before, and now
--    also ALTER TYPE ... DROP ATTRIBUTE ... CASCADE's on a typed table
--    (original, but not an ALTER TABLE: on_ddl_command_end skips an ALTER
--    TYPE, and the column stayed in history and mzproxy.columns).
--
-- This version edits on_ddl_command_end, on_sql_drop and reconcile_built
-- (reconcile of a table with history; version 38 renamed it).

DO $edit$
DECLARE
    edits text[][] := ARRAY[
        ['on_ddl_command_end()', $$           AND d.classid = 'pg_rewrite'::regclass;$$,
         $$           -- (Version 39: a filter, not an index condition: the
           -- relation's references only, not every rule's.)
           AND (d.classid = 'pg_rewrite'::regclass) IS TRUE;$$],
        ['reconcile_built(bigint,bigint,boolean)', $$    SELECT * INTO c FROM @SCHEMA@.catalog WHERE id = p_id;
    UPDATE @SCHEMA@.catalog k SET schema_name = n.nspname, name = r.relname
      FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
     WHERE k.id = p_id AND r.oid = k.oid AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname);
$$, $$    -- (Version 39: one statement; c is the row before the name's update.)
    WITH renamed AS (
        UPDATE @SCHEMA@.catalog k SET schema_name = n.nspname, name = r.relname
          FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
         WHERE k.id = p_id AND r.oid = k.oid AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname))
    SELECT * INTO c FROM @SCHEMA@.catalog WHERE id = p_id;
$$],
        ['on_sql_drop()', $$        IF r.classid = 'pg_class'::regclass AND r.objsubid <> 0 THEN
$$, $$        -- (Version 39) A column its own ALTER TABLE drops: reconciled,
        -- or refused outside mzproxy, by on_ddl_command_end.
        IF r.classid = 'pg_class'::regclass AND r.objsubid <> 0 AND r.original AND TG_TAG = 'ALTER TABLE' THEN
            CONTINUE;
        END IF;
        IF r.classid = 'pg_class'::regclass AND r.objsubid <> 0 THEN
$$],
        -- Any other column dropped (a cascade, or ALTER TYPE ... DROP
        -- ATTRIBUTE of a typed table, whose ALTER TYPE on_ddl_command_end
        -- does not reconcile) is reconciled here.
        ['on_sql_drop()', $$                -- (ALTER TABLE DROP COLUMN, which drops the column
                -- itself, reconciles the table at ddl_command_end.)
                IF NOT r.original THEN
                    marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                    PERFORM @SCHEMA@.reconcile(k.id, ts, false);
                    marked := set_config('mzproxy.in_ddl', '', true) <> '';
                END IF;
$$, $$                -- (Version 39: every column but an ALTER TABLE's own.)
                marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
                marked := set_config('mzproxy.in_ddl', '', true) <> '';
$$]];
    i int;
    def text;
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regprocedure);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
            RAISE EXCEPTION 'ddl_cols.sql: edit % of % does not apply once', i, edits[i][1];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (39);
