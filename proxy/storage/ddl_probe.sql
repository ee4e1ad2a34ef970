-- mzproxy backend state, version 51 to 52 (session 22, colddl22): a
-- column change and a DROP VIEW cheaper in the backend (issue 16).
--
-- on_ddl_command_end, for an ALTER TABLE of a managed table, reads the
-- catalog row and the three checks' probes with a SELECT, and writes the
-- row (name, schema, revision) only when the table was renamed or moved:
-- the catalog revision moves as before at every DDL, and nothing reads a
-- row's own revision but as the revision of its last change (now: its
-- name's, schema's, text's or drop's; a column change is recorded in
-- mzproxy.columns where the table has history). The reserved-name probe
-- is one index range, filtered, instead of an IN list.
--
-- on_sql_drop marks a view that a DROP VIEW drops under a pending slot
-- dropped in one UPDATE, without the SELECT of its row first.
--
-- Replaced: on_ddl_command_end (in full, from version 46's text) and
-- on_sql_drop (in full, from version 48's). They depend only on objects
-- of version 48 and before.

CREATE OR REPLACE FUNCTION @SCHEMA@.on_ddl_command_end() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    r record;
    l record;  -- (version 41) the relation the command is about
    altered_table record;  -- (version 41) what an ALTER TABLE of a managed table found
    k record;
    ts bigint;
    rev bigint;
    done oid[] := '{}';
    renames bool := false;
    altered oid[] := '{}';
    dependents oid[];
    marked bool := false;  -- (version 36) mzproxy.in_ddl set below
BEGIN
    -- (Version 28: the mark, a hash, only when a mark is set at all.)
    IF current_setting('mzproxy.in_ddl', true) <> '' THEN
        IF current_setting('mzproxy.in_ddl', true) = @SCHEMA@.ddl_mark() THEN
            RETURN;  -- DDL that mzproxy itself runs below
        END IF;
    END IF;
    -- (Version 40) A DROP whose sql_drop event took the timestamp and
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
    -- (Version 46) A pending slot, the request begin_write_occ leaves (the
    -- proxy's autocommit DDL), is all the proof of the proxy that this
    -- needs: T is chosen (ddl_ts) only where one is recorded, a table's
    -- (manage_table, reconcile), not for a view's DDL (view_ts) nor for
    -- an ALTER of a table without history, whose T nothing reads. Any
    -- other value is ddl_ts' to check as before (a block's slot, a T
    -- chosen already, a forged one: 42501, none: NULL).
    IF current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
        ts := 0;
    ELSE
        ts := @SCHEMA@.ddl_ts();  -- (version 29)
    END IF;
    IF ts IS NULL THEN
        -- Outside the proxy: refuse DDL on managed relations, leave the
        -- rest alone. Index maintenance, comments and grants are allowed.
        FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
            IF r.command_tag IN ('GRANT', 'REVOKE') THEN
                -- Grants need no timestamp: keep history readable by the
                -- same roles as its table.
                marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                PERFORM @SCHEMA@.sync_grants(g.id) FROM @SCHEMA@.catalog g WHERE g.kind = 'table' AND g.dropped_ts IS NULL;
                marked := set_config('mzproxy.in_ddl', '', true) <> '';
                CONTINUE;
            END IF;
            IF r.classid = 'pg_class'::regclass
               AND r.command_tag NOT IN ('COMMENT', 'GRANT', 'REVOKE', 'SECURITY LABEL',
                                         'CREATE INDEX', 'ALTER INDEX', 'REINDEX')
               AND EXISTS (SELECT 1 FROM @SCHEMA@.catalog WHERE oid = r.objid AND dropped_ts IS NULL) THEN
                RAISE EXCEPTION '% on % is not allowed outside mzproxy', r.command_tag, r.object_identity
                    USING ERRCODE = 'MZ003',
                          HINT = 'The table is managed by mzproxy: connect through mzproxy to change it.';
            END IF;
        END LOOP;
        RETURN;
    END IF;

    -- (Version 28: mzproxy.in_ddl is set before each call below that
    -- runs DDL of mzproxy's own, not for every DDL.)
    UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
    FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
        -- Only ALTER renames or moves what a view's deparsed text names
        -- (relations, columns, schemas, types, functions); CREATE adds new
        -- names, and DROP removes the views that depend on what it drops.
        IF r.command_tag LIKE 'ALTER %' THEN
            IF r.classid = 'pg_class'::regclass THEN
                altered := altered || r.objid;
            ELSE
                renames := true;
            END IF;
        END IF;
        IF r.command_tag IN ('GRANT', 'REVOKE') THEN
            -- GRANT does not say which relations it touched.
            marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
            PERFORM @SCHEMA@.sync_grants(g.id) FROM @SCHEMA@.catalog g WHERE g.kind = 'table' AND g.dropped_ts IS NULL;
            CONTINUE;
        END IF;
        IF r.classid IS DISTINCT FROM 'pg_class'::regclass OR r.schema_name = 'mzproxy' THEN
            CONTINUE;
        END IF;
        -- (Version 41) ALTER TABLE of a managed table, in one statement:
        -- what the checks below need (no column takes a reserved name; not
        -- made an inheritance child, the one way ALTER TABLE of a managed
        -- table brings it into inheritance; a view whose text may name
        -- it). A table without history needs nothing else; one with
        -- history is reconciled.
        -- (Version 52) A SELECT, not an UPDATE that returned the same:
        -- the row is written only when the table was renamed or moved
        -- (its name and schema followed, with the revision), not at every
        -- column change (a non-HOT UPDATE of the catalog, with its indexes
        -- and foreign-key triggers set up each time). The reserved names
        -- are one range of the (attrelid, attname) index, filtered: an IN
        -- list there was three descents with their array keys sorted at
        -- every execution (about 28k instructions an ALTER).
        IF r.command_tag = 'ALTER TABLE' AND NOT r.objid = ANY (done) THEN
            SELECT t.id, t.history_built, (t.name, t.schema_name) IS DISTINCT FROM (c.relname, r.schema_name) AS renamed,
                   EXISTS (SELECT 1 FROM pg_attribute a
                            WHERE a.attrelid = t.oid AND a.attname BETWEEN 'mz_from'::name AND 'mz_to'::name
                              AND a.attname IN ('mz_from', 'mz_to', 'mz_hash')
                              AND a.attnum > 0 AND NOT a.attisdropped) AS reserved,
                   EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = t.oid) AS inherits,
                   EXISTS (SELECT 1 FROM pg_depend d
                            WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = t.oid
                              AND (d.classid = 'pg_rewrite'::regclass) IS TRUE) AS viewed
              INTO altered_table
              FROM @SCHEMA@.catalog t JOIN pg_class c ON c.oid = t.oid
             WHERE t.oid = r.objid AND t.dropped_ts IS NULL AND t.kind = 'table';
            IF FOUND THEN
                done := done || r.objid;
                IF altered_table.inherits THEN
                    RAISE EXCEPTION 'table inheritance involving a table managed by mzproxy is not supported (%)', r.objid::regclass
                        USING ERRCODE = '0A000';
                END IF;
                IF altered_table.reserved THEN
                    RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
                        USING ERRCODE = '42939';
                END IF;
                IF altered_table.renamed THEN
                    UPDATE @SCHEMA@.catalog t SET schema_name = r.schema_name, name = c.relname, revision = rev
                      FROM pg_class c WHERE t.id = altered_table.id AND c.oid = t.oid;
                END IF;
                IF NOT altered_table.viewed THEN
                    altered := array_remove(altered, r.objid);
                END IF;
                IF altered_table.history_built THEN
                    IF ts = 0 THEN
                        ts := @SCHEMA@.ddl_ts();
                    END IF;
                    marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                    PERFORM @SCHEMA@.reconcile_built(altered_table.id, ts, false);
                END IF;
                CONTINUE;
            END IF;
        END IF;
        -- (Version 40) A view created or replaced, in one statement: the
        -- conditions of a managed view below, and its row new or updated.
        IF r.command_tag = 'CREATE VIEW' AND r.object_type = 'view' THEN
            INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, view_sql, created_ts, revision)
            SELECT nextval('@SCHEMA@.catalog_id_seq'), 'view', c.oid, n.nspname, c.relname,
                   rtrim(btrim(pg_get_viewdef(c.oid)), ';'), CASE WHEN ts = 0 THEN @SCHEMA@.view_ts() ELSE ts END, rev
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = r.objid AND c.relkind = 'v' AND c.relpersistence <> 't'
               AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'mzproxy')
               AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
            ON CONFLICT (oid) WHERE dropped_ts IS NULL DO UPDATE
               SET schema_name = excluded.schema_name, name = excluded.name,
                   view_sql = excluded.view_sql, revision = excluded.revision;
            CONTINUE;
        END IF;
        -- The relation the command is about (an index's table for CREATE INDEX).
        SELECT CASE WHEN c.relkind IN ('i', 'I') THEN (SELECT indrelid FROM pg_index WHERE indexrelid = c.oid)
                    ELSE c.oid END AS rel, c.relkind
          INTO l FROM pg_class c WHERE c.oid = r.objid;
        IF l.rel IS NULL OR l.rel = ANY (done) THEN
            CONTINUE;
        END IF;
        done := done || l.rel;
        -- A write through an inheritance parent reaches its children's rows,
        -- which the parent's history triggers cannot account for.
        -- (Version 36: a view takes no part in inheritance.)
        IF l.relkind <> 'v' AND EXISTS (SELECT 1 FROM pg_inherits i
                     JOIN @SCHEMA@.catalog g ON g.oid IN (i.inhparent, i.inhrelid) AND g.dropped_ts IS NULL
                    WHERE l.rel IN (i.inhparent, i.inhrelid)) THEN
            RAISE EXCEPTION 'table inheritance involving a table managed by mzproxy is not supported (%)', l.rel::regclass
                USING ERRCODE = '0A000';
        END IF;
        SELECT * INTO k FROM @SCHEMA@.catalog WHERE oid = l.rel AND dropped_ts IS NULL;
        IF FOUND THEN
            IF k.kind = 'table' AND TG_TAG = 'CREATE INDEX' THEN
                -- (Version 10: only the lookup mirrors. The statement's
                -- tag, not the command's: ALTER TABLE ... ADD UNIQUE
                -- reports an index of its own too.)
                -- (Version 28: an index that is not unique has no
                -- mirror and changes no primary key.)
                IF EXISTS (SELECT 1 FROM pg_index x WHERE x.indexrelid = r.objid AND x.indisunique) THEN
                    marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                    PERFORM @SCHEMA@.sync_indexes(k.id);
                END IF;
                UPDATE @SCHEMA@.catalog SET revision = rev WHERE id = k.id;
            ELSIF k.kind = 'table' THEN
                -- (Version 41: reconcile_built without reconcile's second
                -- read of the row when the table has history.)
                IF ts = 0 THEN
                    ts := @SCHEMA@.ddl_ts();  -- (version 46) what reconciles records T
                END IF;
                IF k.history_built THEN
                    marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
                    PERFORM @SCHEMA@.reconcile_built(k.id, ts, false);
                ELSE
                    PERFORM @SCHEMA@.reconcile(k.id, ts, false);
                END IF;
                UPDATE @SCHEMA@.catalog SET revision = rev WHERE id = k.id;
            ELSE
                UPDATE @SCHEMA@.catalog c SET schema_name = n.nspname, name = x.relname,
                       view_sql = @SCHEMA@.view_definition(x.oid), revision = rev
                  FROM pg_class x JOIN pg_namespace n ON n.oid = x.relnamespace
                 WHERE c.id = k.id AND x.oid = c.oid;
            END IF;
            CONTINUE;
        END IF;
        -- A new relation: ordinary permanent tables (not partitions) and
        -- views outside system schemas become managed.
        PERFORM 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = l.rel AND c.relpersistence <> 't'
            AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'mzproxy')
            AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
            AND ((c.relkind = 'r' AND NOT c.relispartition
                  AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)
                  AND r.command_tag IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO'))
              OR (c.relkind = 'v' AND r.command_tag = 'CREATE VIEW'));
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        IF r.object_type = 'view' THEN
            INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, view_sql, created_ts, revision)
            SELECT nextval('@SCHEMA@.catalog_id_seq'), 'view', c.oid, n.nspname, c.relname,
                   @SCHEMA@.view_definition(c.oid), CASE WHEN ts = 0 THEN @SCHEMA@.view_ts() ELSE ts END, rev
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = l.rel;
        ELSE
            IF ts = 0 THEN
                ts := @SCHEMA@.ddl_ts();
            END IF;
            marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
            PERFORM @SCHEMA@.manage_table(l.rel, ts, rev);
        END IF;
    END LOOP;
    IF renames THEN
        -- Deparsed view text names relations as they are called now.
        UPDATE @SCHEMA@.catalog SET view_sql = @SCHEMA@.view_definition(oid)
         WHERE kind = 'view' AND dropped_ts IS NULL AND view_sql IS DISTINCT FROM @SCHEMA@.view_definition(oid);
    ELSIF altered <> '{}' THEN
        -- A relation's name (or its columns' or schema's) is in the text of
        -- the views whose rules depend on it, and only there.
        -- (Version 13: the views first, then the update only if any.)
        -- (Version 33: each rule by its oid, not a join that hashes
        -- pg_rewrite.)
        SELECT array_agg(DISTINCT (SELECT w.ev_class FROM pg_rewrite w WHERE w.oid = d.objid)) INTO dependents
          FROM pg_depend d
         WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY (altered)
           -- (Version 39: a filter, not an index condition: the
           -- relation's references only, not every rule's.)
           AND (d.classid = 'pg_rewrite'::regclass) IS TRUE;
        IF dependents IS NOT NULL THEN
            UPDATE @SCHEMA@.catalog g SET view_sql = @SCHEMA@.view_definition(g.oid)
             WHERE g.kind = 'view' AND g.dropped_ts IS NULL AND g.oid = ANY (dependents)
               AND g.view_sql IS DISTINCT FROM @SCHEMA@.view_definition(g.oid);
        END IF;
    END IF;
    IF marked THEN
        marked := set_config('mzproxy.in_ddl', '', true) <> '';
    END IF;
END
$$;

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
        -- (Version 52) A view that a DROP VIEW drops under a pending slot
        -- (the proxy's autocommit DDL): its row marked dropped at
        -- view_ts() in one statement, without reading it first. The
        -- revision moves here even when the view is not managed (a
        -- temporary one): on_ddl_command_end would move it otherwise, and
        -- now finds drop_rev and returns, as after any managed DROP. Views
        -- after a T was chosen in this DROP (a cascade that reconciled a
        -- column) take the path below, and that T, as before.
        IF TG_TAG = 'DROP VIEW' AND r.object_type = 'view' AND current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            IF rev IS NULL THEN
                UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
                marked := set_config('mzproxy.drop_rev', rev::text, true) <> '';
            END IF;
            vts := coalesce(vts, @SCHEMA@.view_ts());
            UPDATE @SCHEMA@.catalog SET dropped_ts = vts, revision = rev
             WHERE oid = r.objid AND dropped_ts IS NULL AND kind = 'view';
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (52);
