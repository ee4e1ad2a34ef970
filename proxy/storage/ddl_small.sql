-- mzproxy backend state, version 27 to 28: CREATE INDEX, DROP INDEX,
-- CREATE VIEW, DROP VIEW and DROP TABLE without event-trigger work whose
-- answer they cannot change (issue 16).
--
-- Measured (docs/ddl-cost.md: auto_explain with log_nested_statements,
-- pg_stat_statements with track = all, CPU of the PostgreSQL processes),
-- a client's DDL through mzproxy runs, beyond the statement itself:
-- begin_write_occ (0.13 ms), then each event trigger that fires: the
-- guard (is this mzproxy's own DDL? a SHA-256 mark, computed even when no
-- mark is set), current_write_ts (write_slot, choose_ts, set_slot: two
-- more SHA-256 tags), the catalog revision, and what the statement needs:
--
--  * CREATE INDEX ran sync_indexes (0.4 to 1.1 ms, the largest part):
--    it mirrors the table's unique indexes on its history table and keeps
--    the hash index in step with the primary key's absence. An index that
--    is not unique has no mirror and changes no primary key: sync_indexes
--    has nothing to do after it. Now it runs only for a unique index.
--    (A unique index made outside mzproxy, which the event trigger allows
--    without a sync, gets its mirror at the table's next unique CREATE
--    INDEX or ALTER TABLE through mzproxy, no longer at any CREATE INDEX;
--    the mirror serves the retraction's lookup, not its result.)
--  * DROP INDEX fired on_sql_drop, which chose the DDL's timestamp before
--    finding that a dropped index needs none (it only forgets the index's
--    mirror); on_ddl_command_end then read it again (a second tag check).
--    on_sql_drop now asks for the timestamp only when a managed relation
--    or a managed table's column is dropped; on_ddl_command_end chooses
--    it for every DDL through mzproxy, as before (DDL at an oracle
--    timestamp).
--  * Both guards compute the mark only when mzproxy.in_ddl is set: an
--    empty setting never equals a mark (64 hex digits). A client's DDL
--    pays no hash there; mzproxy's own nested DDL compares as before.
--    on_ddl_command_end set the mark (another hash) for every DDL; it now
--    sets it just before each call that runs DDL of mzproxy's own
--    (sync_grants, sync_indexes, reconcile, manage_table), the only
--    statements the guards must let through.
--  * DROP TABLE dropped the table's four trigger functions in its own
--    transaction (a DROP FUNCTION, which fired both event triggers again).
--    They are now dropped with the history table by compaction, which
--    already drops that table once no read can reach it: the functions
--    are only ever called by the dropped table's triggers, which went
--    with it.
--
-- This version edits on_ddl_command_end, on_sql_drop and compact.

DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- (1) on_ddl_command_end's guard.
        ['on_ddl_command_end()', $$    IF coalesce(current_setting('mzproxy.in_ddl', true), '') = @SCHEMA@.ddl_mark() THEN
        RETURN;  -- DDL that mzproxy itself runs below
    END IF;
$$, $$    -- (Version 28: the mark, a hash, only when a mark is set at all.)
    IF current_setting('mzproxy.in_ddl', true) <> '' THEN
        IF current_setting('mzproxy.in_ddl', true) = @SCHEMA@.ddl_mark() THEN
            RETURN;  -- DDL that mzproxy itself runs below
        END IF;
    END IF;
$$],
        -- (2) CREATE INDEX syncs the mirrors only for a unique index.
        ['on_ddl_command_end()', $$                PERFORM @SCHEMA@.sync_indexes(k.id);
                UPDATE @SCHEMA@.catalog SET revision = rev WHERE id = k.id;
            ELSIF k.kind = 'table' THEN$$, $$                -- (Version 28: an index that is not unique has no
                -- mirror and changes no primary key.)
                IF EXISTS (SELECT 1 FROM pg_index x WHERE x.indexrelid = r.objid AND x.indisunique) THEN
                    PERFORM @SCHEMA@.sync_indexes(k.id);
                END IF;
                UPDATE @SCHEMA@.catalog SET revision = rev WHERE id = k.id;
            ELSIF k.kind = 'table' THEN$$],
        -- (3) on_sql_drop's guard.
        ['on_sql_drop()', $$    IF coalesce(current_setting('mzproxy.in_ddl', true), '') = @SCHEMA@.ddl_mark() THEN
        RETURN;
    END IF;
    ts := @SCHEMA@.current_write_ts();
$$, $$    -- (Version 28: the mark only when one is set; the timestamp only
    -- when a managed relation or column is dropped, below.)
    IF current_setting('mzproxy.in_ddl', true) <> '' THEN
        IF current_setting('mzproxy.in_ddl', true) = @SCHEMA@.ddl_mark() THEN
            RETURN;
        END IF;
    END IF;
$$],
        -- (4) The timestamp of a dropped managed table's column.
        ['on_sql_drop()', $$            IF FOUND AND EXISTS (SELECT 1 FROM pg_class WHERE oid = r.objid) THEN
                IF ts IS NULL THEN$$, $$            IF FOUND AND EXISTS (SELECT 1 FROM pg_class WHERE oid = r.objid) THEN
                ts := coalesce(ts, @SCHEMA@.current_write_ts());
                IF ts IS NULL THEN$$],
        -- (5) The timestamp of a dropped managed relation.
        ['on_sql_drop()', $$            CONTINUE;
        END IF;
        IF ts IS NULL THEN$$, $$            CONTINUE;
        END IF;
        ts := coalesce(ts, @SCHEMA@.current_write_ts());
        IF ts IS NULL THEN$$],
        -- (6) DROP TABLE leaves the trigger functions to compaction.
        ['on_sql_drop()', $$            EXECUTE format('DROP FUNCTION IF EXISTS @SCHEMA@.%I(), @SCHEMA@.%I(), @SCHEMA@.%I(), @SCHEMA@.%I()',
                           'h' || k.id || '_ins', 'h' || k.id || '_upd', 'h' || k.id || '_del', 'h' || k.id || '_trunc');
$$, $$            -- (Version 28: the trigger functions go with the history
            -- table, in compact.)
$$],
        -- (7) compact drops them with the history table.
        ['compact(bigint,bigint)', $$        EXECUTE format('DROP TABLE IF EXISTS %s', d.history);
$$, $$        EXECUTE format('DROP TABLE IF EXISTS %s', d.history);
        -- (Version 28: since then DROP TABLE leaves them here. IF EXISTS
        -- would send a NOTICE for a table dropped before.)
        IF to_regprocedure(format('@SCHEMA@.%I()', 'h' || d.id || '_ins')) IS NOT NULL THEN
            EXECUTE format('DROP FUNCTION IF EXISTS @SCHEMA@.%I(), @SCHEMA@.%I(), @SCHEMA@.%I(), @SCHEMA@.%I()',
                           'h' || d.id || '_ins', 'h' || d.id || '_upd', 'h' || d.id || '_del', 'h' || d.id || '_trunc');
        END IF;
$$],
        -- (8) to (12): mzproxy.in_ddl set only before a call that runs
        -- DDL of mzproxy's own (a view's record, a DROP and a plain
        -- CREATE INDEX run none).
        ['on_ddl_command_end()', $$    PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
    UPDATE @SCHEMA@.catalog_revision$$, $$    -- (Version 28: mzproxy.in_ddl is set before each call below that
    -- runs DDL of mzproxy's own, not for every DDL.)
    UPDATE @SCHEMA@.catalog_revision$$],
        ['on_ddl_command_end()', $$            PERFORM @SCHEMA@.sync_grants(g.id) FROM @SCHEMA@.catalog g WHERE g.kind = 'table' AND g.dropped_ts IS NULL;
            CONTINUE;$$, $$            PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
            PERFORM @SCHEMA@.sync_grants(g.id) FROM @SCHEMA@.catalog g WHERE g.kind = 'table' AND g.dropped_ts IS NULL;
            CONTINUE;$$],
        ['on_ddl_command_end()', $$                    PERFORM @SCHEMA@.sync_indexes(k.id);$$,
         $$                    PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
                    PERFORM @SCHEMA@.sync_indexes(k.id);$$],
        ['on_ddl_command_end()', $$                PERFORM @SCHEMA@.reconcile(k.id, ts, false);$$,
         $$                PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);$$],
        ['on_ddl_command_end()', $$            PERFORM @SCHEMA@.manage_table(rel_oid, ts, rev);$$,
         $$            PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
            PERFORM @SCHEMA@.manage_table(rel_oid, ts, rev);$$]];
    i int;
    def text;
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regprocedure);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
            RAISE EXCEPTION 'ddl_small.sql: edit % of % does not apply once', i, edits[i][1];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (28);
