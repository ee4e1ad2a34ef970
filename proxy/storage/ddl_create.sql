-- mzproxy backend state, version 36 to 37: less event-trigger work per
-- CREATE/DROP TABLE and CREATE/DROP VIEW (issue 16).
--
-- Measured in backend instructions per CREATE+DROP pair (bench/ddlcost.sh,
-- docs/ddl-cost.md). What went:
--
--  * sync_triggers, which CREATE TABLE runs once, signed the trigger
--    functions it made with md5 of gen_triggers' text: a long text, kept
--    compressed out of line, so read from pg_proc's TOAST table,
--    decompressed and hashed at every CREATE TABLE (0.37M instructions of
--    27.6M). The signature now names gen_triggers' row version in pg_proc
--    instead, as table_shape does since version 24: any CREATE OR REPLACE
--    of it makes a new one. A table signed by an older version differs
--    once; its next sync regenerates nothing (gen_triggers finds the
--    functions' text unchanged) and signs it again.
--  * The event triggers set and reset the mark mzproxy.in_ddl with
--    PERFORM, a query run through the executor each time, and
--    on_ddl_command_end reset it at the end of every DDL statement through
--    the proxy, set or not. They now set it in a PL/pgSQL assignment (an
--    expression evaluated without the executor), and reset it only when
--    they set it: a CREATE VIEW, DROP VIEW or DROP of anything without
--    DDL of mzproxy's own runs one statement fewer.
--  * on_ddl_command_end checked a new view against pg_inherits (joined
--    with the catalog): a view takes no part in inheritance. The relation's
--    kind comes with the lookup the check already made.
--
-- This version edits on_ddl_command_end, on_sql_drop and sync_triggers in
-- place (each edit must apply as often as said, or the upgrade fails).

DO $edit$
DECLARE
    -- function, text, replacement, occurrences
    edits text[][] := ARRAY[
        ['on_ddl_command_end()', $$    dependents oid[];
BEGIN$$, $$    dependents oid[];
    rel_kind "char";
    marked bool := false;  -- (version 37) mzproxy.in_ddl set below
BEGIN$$, '1'],
        ['on_ddl_command_end()', $$                PERFORM set_config('mzproxy.in_ddl', '', true);$$,
         $$                marked := set_config('mzproxy.in_ddl', '', true) <> '';$$, '1'],
        ['on_ddl_command_end()', $$PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);$$,
         $$marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';$$, '5'],
        ['on_ddl_command_end()', $$                    ELSE c.oid END
          INTO rel_oid FROM pg_class c WHERE c.oid = r.objid;$$, $$                    ELSE c.oid END, c.relkind
          INTO rel_oid, rel_kind FROM pg_class c WHERE c.oid = r.objid;$$, '1'],
        ['on_ddl_command_end()', $$        -- which the parent's history triggers cannot account for.
        IF EXISTS ($$, $$        -- which the parent's history triggers cannot account for.
        -- (Version 37: a view takes no part in inheritance.)
        IF rel_kind <> 'v' AND EXISTS ($$, '1'],
        ['on_ddl_command_end()', $$    PERFORM set_config('mzproxy.in_ddl', '', true);
END$$, $$    IF marked THEN
        marked := set_config('mzproxy.in_ddl', '', true) <> '';
    END IF;
END$$, '1'],
        ['on_sql_drop()', $$    mirror name;
BEGIN$$, $$    mirror name;
    marked bool;  -- (version 37) set_config in an assignment, not a query
BEGIN$$, '1'],
        ['on_sql_drop()', $$PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);$$,
         $$marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';$$, '3'],
        ['on_sql_drop()', $$PERFORM set_config('mzproxy.in_ddl', '', true);$$,
         $$marked := set_config('mzproxy.in_ddl', '', true) <> '';$$, '3'],
        ['sync_triggers(bigint)', $$        SELECT md5(g.prosrc) || ' ' ||$$,
         $$        -- (Version 37: gen_triggers' row version, as in table_shape,
        -- not md5 of its text, which is read out of line and decompressed.)
        SELECT g.xmin || ' ' || g.ctid || ' ' ||$$, '1']];
    i int;
    def text;
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regprocedure);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> edits[i][4]::int THEN
            RAISE EXCEPTION 'ddl_create.sql: edit % of % does not apply % times', i, edits[i][1], edits[i][4];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (37);
