-- mzproxy backend state, version 47 to 48 (session 21, colddl): DDL's
-- catalog writes cheaper (issue 16).
--
-- The catalog's two CHECK constraints (kind is 'table' or 'view'; a
-- table has a history name, a view none) and catalog_revision's (one)
-- go: PostgreSQL reads each constraint's text again (stringToNode, then
-- plans it) at every statement that writes the row, about 58k backend
-- instructions per catalog write (an ALTER TABLE's, a view's CREATE or
-- DROP) and 5k per move of the revision. What they checked holds without
-- them: PUBLIC may only SELECT these tables (no role but the installing
-- superuser, who owns them, writes them), and the only writers are
-- mzproxy's SECURITY DEFINER functions, which insert kind 'table' with a
-- history name (manage_table) or 'view' without one (on_ddl_command_end),
-- never change a row's kind or history, and never insert into
-- catalog_revision (its one row, from the install, keeps its primary key
-- on one; TestCatalogWritersOnly).
--
-- on_sql_drop returns at once, after one query of
-- pg_event_trigger_dropped_objects(), for an ALTER TABLE that drops only
-- columns of its own (DROP COLUMN without a cascade), which its loop
-- passed over: on_ddl_command_end reconciles them, or refuses them
-- outside mzproxy, as before. A cascade (a view, an index, another
-- column) still takes the loop.
--
-- Replaced: on_sql_drop (in full, from version 46's text). It depends
-- only on version 46's objects.

ALTER TABLE @SCHEMA@.catalog DROP CONSTRAINT catalog_check, DROP CONSTRAINT catalog_kind_check;
ALTER TABLE @SCHEMA@.catalog_revision DROP CONSTRAINT catalog_revision_one_check;

CREATE OR REPLACE FUNCTION @SCHEMA@.on_sql_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    r record;
    k record;
    ts bigint;
    vts bigint;  -- (version 46) a view's timestamp, when no T was chosen
    rev bigint;
    mirror name;
    marked bool;  -- (version 36) set_config in an assignment, not a query
BEGIN
    -- (Version 28: the mark only when one is set; the timestamp only
    -- when a managed relation or column is dropped, below.)
    IF current_setting('mzproxy.in_ddl', true) <> '' THEN
        IF current_setting('mzproxy.in_ddl', true) = @SCHEMA@.ddl_mark() THEN
            RETURN;
        END IF;
    END IF;
    -- (Version 48) An ALTER TABLE that drops only columns of its own
    -- (DROP COLUMN without a cascade), which the loop below would pass
    -- over: on_ddl_command_end reconciles them, or refuses them outside
    -- mzproxy. One query instead of the loop's cursor, and only for an
    -- ALTER TABLE (in one IF with the tag, the query's plan was set up
    -- for every DROP too).
    IF TG_TAG = 'ALTER TABLE' THEN
        IF NOT EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() o
                        WHERE NOT (o.classid = 'pg_class'::regclass AND o.objsubid <> 0 AND o.original)) THEN
            RETURN;
        END IF;
    END IF;
    FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
        IF r.object_type = 'trigger' AND r.original AND r.object_identity LIKE 'mzproxy\_history\_% on %' THEN
            RAISE EXCEPTION 'cannot drop trigger %: mzproxy records the table''s history with it', r.object_identity
                USING ERRCODE = 'MZ003';
        END IF;
        -- (Version 39) A column its own ALTER TABLE drops: reconciled,
        -- or refused outside mzproxy, by on_ddl_command_end.
        IF r.classid = 'pg_class'::regclass AND r.objsubid <> 0 AND r.original AND TG_TAG = 'ALTER TABLE' THEN
            CONTINUE;
        END IF;
        IF r.classid = 'pg_class'::regclass AND r.objsubid <> 0 THEN
            -- A column of a managed table: ALTER TABLE DROP COLUMN (also
            -- handled at ddl_command_end), or a cascade from another object
            -- (DROP TYPE ... CASCADE) that no ALTER TABLE event reports.
            SELECT * INTO k FROM @SCHEMA@.catalog WHERE oid = r.objid AND kind = 'table' AND dropped_ts IS NULL;
            IF FOUND AND EXISTS (SELECT 1 FROM pg_class WHERE oid = r.objid) THEN
                ts := coalesce(ts, @SCHEMA@.ddl_ts());  -- (version 29)
                IF ts IS NULL THEN
                    RAISE EXCEPTION 'dropping % is not allowed outside mzproxy', r.object_identity
                        USING ERRCODE = 'MZ003',
                              HINT = 'The table is managed by mzproxy: connect through mzproxy to change it.';
                END IF;
                -- (Version 39: every column but an ALTER TABLE's own.)
                marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
                marked := set_config('mzproxy.in_ddl', '', true) <> '';
            END IF;
            CONTINUE;
        END IF;
        IF r.classid <> 'pg_class'::regclass THEN
            CONTINUE;
        END IF;
        -- (Version 40) A table's TOAST table and index: never managed.
        IF r.schema_name = 'pg_toast' THEN
            CONTINUE;
        END IF;
        IF r.object_type = 'index' THEN
            -- Drop the history mirror of a unique index dropped by DROP
            -- INDEX, if any. The table of the index is gone from pg_index
            -- by now, so the mirror is found by name alone: a scan of
            -- pg_class, not paid for the indexes that go with their table
            -- (their mirrors stay with the history table, which compaction
            -- drops) nor for ALTER TABLE (reconcile syncs the table's
            -- mirrors at ddl_command_end, and after a dropped column).
            -- (Version 8: found in index_mirrors by the index's oid.)
            DELETE FROM @SCHEMA@.index_mirrors m WHERE m.index_oid = r.objid RETURNING m.mirror INTO mirror;
            IF r.original AND to_regclass('@SCHEMA@.' || quote_ident(mirror)) IS NOT NULL THEN
                marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                EXECUTE format('DROP INDEX @SCHEMA@.%I', mirror);
                marked := set_config('mzproxy.in_ddl', '', true) <> '';
            END IF;
            CONTINUE;
        END IF;
        SELECT * INTO k FROM @SCHEMA@.catalog WHERE oid = r.objid AND dropped_ts IS NULL;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        -- (Version 46) A DROP VIEW (which drops views alone) under a
        -- pending slot takes no T (view_ts); any other DROP does (ddl_ts),
        -- views it drops with a table included, which then share its T.
        IF TG_TAG = 'DROP VIEW' AND k.kind = 'view' AND current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            vts := coalesce(vts, @SCHEMA@.view_ts());
        ELSE
            ts := coalesce(ts, @SCHEMA@.ddl_ts());  -- (version 29)
        END IF;
        IF coalesce(ts, vts) IS NULL THEN
            RAISE EXCEPTION 'DROP of % is not allowed outside mzproxy', r.object_identity
                USING ERRCODE = 'MZ003',
                      HINT = 'The relation is managed by mzproxy: connect through mzproxy to drop it.';
        END IF;
        IF rev IS NULL THEN
            UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
            -- (Version 40) For on_ddl_command_end of this DROP.
            marked := set_config('mzproxy.drop_rev', rev::text, true) <> '';
        END IF;
        -- The history table stays (compaction removes it once no read can
        -- reach it); the trigger functions go.
        UPDATE @SCHEMA@.catalog SET dropped_ts = coalesce(ts, vts), revision = rev WHERE id = k.id;
        IF k.kind = 'table' THEN
            marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
            -- (Version 28: the trigger functions go with the history
            -- table, in compact.)
            PERFORM @SCHEMA@.retire_marker(k.oid);  -- version 19: kept for the next table
            marked := set_config('mzproxy.in_ddl', '', true) <> '';
        END IF;
    END LOOP;
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (48);
