-- mzproxy backend state, version 39 to 40: DROP TABLE, CREATE/DROP VIEW
-- and ALTER TABLE ADD/DROP COLUMN with fewer and cheaper statements in
-- the event triggers (issue 16).
--
-- Measured with bench/ddlcost.sh (backend instructions per pair, 100
-- tables, docs/ddl-cost.md "Session 17"):
--
--  * The event triggers' lookups of mzproxy.catalog and mzproxy.columns
--    by id or oid were sequential scans in their generic plans while the
--    tables are small (101 catalog rows at 100 tables: every row read
--    and tested, where an index probe reads one); on_ddl_command_end and
--    on_sql_drop, and what they call, now plan with enable_seqscan = off
--    (and jit = off, as every function that plans so since version 37:
--    a plan costed at disable_cost is over jit_above_cost).
--  * A DROP of a managed table or view took the timestamp and moved the
--    catalog revision in on_sql_drop, then checked the slot and moved the
--    revision again in on_ddl_command_end. on_sql_drop now leaves the
--    revision it set in mzproxy.drop_rev, and on_ddl_command_end of a
--    DROP statement returns at once when that is still the revision and
--    this transaction wrote it (the row's xmin), which a client cannot
--    forge: a transaction that did not move the revision is never let
--    off (inside a client's savepoint the xmin is the subtransaction's
--    and the check fails: the revision moves twice, as before).
--  * on_sql_drop skips the TOAST table and index that go with a table
--    (never managed, never mirrored): no catalog lookup and no
--    index_mirrors delete for them.
--  * CREATE [OR REPLACE] VIEW: the view's catalog row is inserted, or a
--    replaced view's updated, by one INSERT ... ON CONFLICT on the live
--    oids' unique index, with the conditions of a managed view in it,
--    instead of the relation lookup, the catalog lookup, the new-relation
--    check and the INSERT; the view's text is pg_get_viewdef inline (as
--    view_definition, whose SET clause made it a SQL function call planned
--    at every use), under the trigger's own search_path.
--  * reconcile of a table without history reads its row and updates the
--    name in one statement, and checks the reserved column names on the
--    rows it inserts (RETURNING), not with a query of mzproxy.columns;
--    on_ddl_command_end sets no mark (a hash) before it, as it runs no
--    DDL of mzproxy's own.
--
-- This version edits on_ddl_command_end and on_sql_drop in place (the
-- edits below, each applied exactly once) and their settings, and
-- replaces reconcile (the wrapper of version 38).

DO $edit$
DECLARE
    edits text[][] := ARRAY[
        ['on_sql_drop()', $$            UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
$$, $$            UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
            -- (Version 40) For on_ddl_command_end of this DROP.
            marked := set_config('mzproxy.drop_rev', rev::text, true) <> '';
$$],
        ['on_sql_drop()', $$        IF r.object_type = 'index' THEN
$$, $$        -- (Version 40) A table's TOAST table and index: never managed.
        IF r.schema_name = 'pg_toast' THEN
            CONTINUE;
        END IF;
        IF r.object_type = 'index' THEN
$$],
        ['on_ddl_command_end()', $$    ts := @SCHEMA@.ddl_ts();  -- (version 29)
$$, $$    -- (Version 40) A DROP whose sql_drop event took the timestamp and
    -- moved the revision, in this transaction (xmin), to the revision that
    -- is still there: nothing is left to do. (The setting is reset in an
    -- assignment to renames, false either way before the loop.)
    IF current_setting('mzproxy.drop_rev', true) <> '' THEN
        IF TG_TAG LIKE 'DROP %' AND EXISTS (SELECT 1 FROM @SCHEMA@.catalog_revision v
                     WHERE v.revision::text = current_setting('mzproxy.drop_rev', true)
                       AND v.xmin = pg_current_xact_id()::xid) THEN
            renames := set_config('mzproxy.drop_rev', '', true) <> '';
            RETURN;
        END IF;
        renames := set_config('mzproxy.drop_rev', '', true) <> '';
    END IF;
    ts := @SCHEMA@.ddl_ts();  -- (version 29)
$$],
        ['on_ddl_command_end()', $$        IF r.classid IS DISTINCT FROM 'pg_class'::regclass OR r.schema_name = 'mzproxy' THEN
            CONTINUE;
        END IF;
$$, $$        IF r.classid IS DISTINCT FROM 'pg_class'::regclass OR r.schema_name = 'mzproxy' THEN
            CONTINUE;
        END IF;
        -- (Version 40) A view created or replaced, in one statement: the
        -- conditions of a managed view below, and its row new or updated.
        IF r.command_tag = 'CREATE VIEW' AND r.object_type = 'view' THEN
            INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, view_sql, created_ts, revision)
            SELECT nextval('@SCHEMA@.catalog_id_seq'), 'view', c.oid, n.nspname, c.relname,
                   rtrim(btrim(pg_get_viewdef(c.oid)), ';'), ts, rev
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = r.objid AND c.relkind = 'v' AND c.relpersistence <> 't'
               AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', '@SCHEMA@')
               AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
            ON CONFLICT (oid) WHERE dropped_ts IS NULL DO UPDATE
               SET schema_name = excluded.schema_name, name = excluded.name,
                   view_sql = excluded.view_sql, revision = excluded.revision;
            CONTINUE;
        END IF;
$$],
        ['on_ddl_command_end()', $$            ELSIF k.kind = 'table' THEN
                marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
$$, $$            ELSIF k.kind = 'table' THEN
                -- (Version 40: a table without history runs no DDL of
                -- mzproxy's own, so needs no mark.)
                IF k.history_built THEN
                    marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                END IF;
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
$$]];
    i int;
    def text;
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regprocedure);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
            RAISE EXCEPTION 'ddl_view.sql: edit % of % does not apply once', i, edits[i][1];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

ALTER FUNCTION @SCHEMA@.on_ddl_command_end() SET enable_seqscan = off;
ALTER FUNCTION @SCHEMA@.on_ddl_command_end() SET jit = off;
ALTER FUNCTION @SCHEMA@.on_sql_drop() SET enable_seqscan = off;
ALTER FUNCTION @SCHEMA@.on_sql_drop() SET jit = off;

CREATE OR REPLACE FUNCTION @SCHEMA@.reconcile(p_id bigint, p_ts bigint, p_new boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    rel oid;
    reserved name;
BEGIN
    -- (Version 40: the row and the name's update in one statement.)
    WITH renamed AS (
        UPDATE @SCHEMA@.catalog k SET schema_name = n.nspname, name = r.relname
          FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
         WHERE k.id = p_id AND NOT k.history_built AND r.oid = k.oid
           AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname))
    SELECT k.oid INTO rel FROM @SCHEMA@.catalog k WHERE k.id = p_id AND NOT k.history_built;
    IF NOT FOUND THEN
        PERFORM @SCHEMA@.reconcile_built(p_id, p_ts, p_new);
        RETURN;
    END IF;
    -- No history: the name and the columns are all there is to follow.
    DELETE FROM @SCHEMA@.columns WHERE id = p_id;
    WITH added AS (
        INSERT INTO @SCHEMA@.columns (id, attnum, name, type)
        SELECT p_id, uc.attnum, uc.name, uc.type FROM @SCHEMA@.user_columns(rel) uc
        RETURNING name)
    SELECT a.name INTO reserved FROM added a WHERE a.name IN ('mz_from', 'mz_to', 'mz_hash') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (40);
