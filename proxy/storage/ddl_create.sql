-- mzproxy backend state, version 35 to 36: less event-trigger work per
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
--  * ddl_ts, which every DDL through the proxy runs once or twice (a DROP
--    of a managed relation: on_sql_drop and on_ddl_command_end), read the
--    slot in one query of three subquery levels. It now splits the slot's
--    text in PL/pgSQL expressions and queries only the key and, for a
--    pending slot, the pin: the same checks in the same order of meaning
--    (the tag over both numbers, nothing after it, T a positive integer
--    or 0), the same T, the same slot written; anything else still goes
--    to current_write_ts. (0.12M instructions of a CREATE+DROP VIEW pair.)
--
-- This version defines ddl_ts again and edits on_ddl_command_end,
-- on_sql_drop and sync_triggers in place (each edit must apply as often as
-- said, or the upgrade fails).

-- current_write_ts for the event triggers (ddl_column.sql): a tagged slot
-- answered here, pending (T chosen as choose_ts does: after the clock and
-- the pin, and the slot set as set_slot(T, NULL) sets it) or stamped.
CREATE OR REPLACE FUNCTION @SCHEMA@.ddl_ts() RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    vt text := split_part(v, ' ', 1);
    k text;
    t bigint;
BEGIN
    IF split_part(v, ' ', 4) = '' AND (vt = '0' OR vt ~ '^[1-9][0-9]*$') THEN
        k := (SELECT w.k FROM @SCHEMA@.write_key w);
        -- A tag proves set_slot wrote both numbers (write_slot).
        IF split_part(v, ' ', 3) = @SCHEMA@.key_tag(k, vt || ' ' || split_part(v, ' ', 2)) THEN
            IF vt <> '0' THEN
                RETURN vt::bigint;
            END IF;
            t := GREATEST(@SCHEMA@.now_ms(),
                          (SELECT CASE WHEN q.is_called THEN q.last_value
                                       ELSE GREATEST(@SCHEMA@.now_ms() + 1000, (SELECT u.upper FROM @SCHEMA@.txns_durable u)) END
                             FROM @SCHEMA@.pinned q) + 1);
            v := set_config('mzproxy.write_ts', t || ' - ' || @SCHEMA@.key_tag(k, t || ' -'), true);
            RETURN t;
        END IF;
    END IF;
    RETURN @SCHEMA@.current_write_ts();
END
$$;

DO $edit$
DECLARE
    -- function, text, replacement, occurrences
    edits text[][] := ARRAY[
        ['on_ddl_command_end()', $$    dependents oid[];
BEGIN$$, $$    dependents oid[];
    rel_kind "char";
    marked bool := false;  -- (version 36) mzproxy.in_ddl set below
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
        -- (Version 36: a view takes no part in inheritance.)
        IF rel_kind <> 'v' AND EXISTS ($$, '1'],
        ['on_ddl_command_end()', $$    PERFORM set_config('mzproxy.in_ddl', '', true);
END$$, $$    IF marked THEN
        marked := set_config('mzproxy.in_ddl', '', true) <> '';
    END IF;
END$$, '1'],
        ['on_sql_drop()', $$    mirror name;
BEGIN$$, $$    mirror name;
    marked bool;  -- (version 36) set_config in an assignment, not a query
BEGIN$$, '1'],
        ['on_sql_drop()', $$PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);$$,
         $$marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';$$, '3'],
        ['on_sql_drop()', $$PERFORM set_config('mzproxy.in_ddl', '', true);$$,
         $$marked := set_config('mzproxy.in_ddl', '', true) <> '';$$, '3'],
        ['sync_triggers(bigint)', $$        SELECT md5(g.prosrc) || ' ' ||$$,
         $$        -- (Version 36: gen_triggers' row version, as in table_shape,
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (36);
