-- mzproxy backend state, version 58 to 59 (session 26, ddl26): a view's
-- CREATE records its row without a relation lookup, and a DROP's catalog
-- revision moves in on_sql_drop alone (issue 16's CREATE and DROP VIEW).
--
-- - CREATE VIEW: the row is written from the command itself. Its schema
--   is the command's schema_name (pg_event_trigger_ddl_commands reports
--   any temporary schema as 'pg_temp'), its name the last part of its
--   object_identity (parse_ident, the inverse of the quoting there), and
--   object_type 'view' is relkind 'v'. The INSERT ... SELECT joined
--   pg_class and pg_namespace (a subquery scan over a nested loop of two
--   index scans, set up at every CREATE VIEW); the same conditions are
--   now PL/pgSQL expressions on the command's columns, and the row one
--   INSERT ... VALUES (about 55k backend instructions a CREATE VIEW).
-- - DROP: PostgreSQL stashes no command for a DROP, so on_ddl_command_end
--   found nothing to do for one but move the revision, which on_sql_drop
--   had moved already for a managed object (handing it over in
--   mzproxy.drop_rev, checked against the revision row's xmin: an EXISTS
--   set up at every DROP). Now on_sql_drop moves the revision for every
--   DROP through mzproxy (the pending slot, or a slot ddl_ts accepts)
--   once, at its first managed object or after its loop, and
--   on_ddl_command_end returns at once for a DROP (about 40k a DROP).
--   DROP OWNED keeps the old path: it stashes its revocations as a
--   REVOKE, which on_ddl_command_end syncs to the history tables. A DROP
--   that drops nothing (IF EXISTS of a missing object) fires no sql_drop
--   and no longer moves the revision: nothing changed. A forged
--   mzproxy.drop_rev is read by nothing now.
--
-- Edited in place (on_ddl_command_end and on_sql_drop, their text since
-- ddl_alter_probe.sql and ddl_probe.sql).
DO $edit$
DECLARE
    end_edits constant text[][] := ARRAY[
        [$$    -- (Version 40) A DROP whose sql_drop event took the timestamp and
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
$$,
         $$    -- (Version 59) A DROP stashes no command: on_sql_drop moved the
    -- revision for it (DROP OWNED stashes its revocations, a REVOKE).
    IF TG_TAG LIKE 'DROP %' AND TG_TAG <> 'DROP OWNED' THEN
        RETURN;
    END IF;
$$],
        [$$        IF r.command_tag = 'CREATE VIEW' AND r.object_type = 'view' THEN
            INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, view_sql, created_ts, revision)
            SELECT nextval('@SCHEMA@.catalog_id_seq'), 'view', c.oid, n.nspname, c.relname,
                   rtrim(btrim(pg_get_viewdef(c.oid)), ';'), CASE WHEN ts = 0 THEN @SCHEMA@.view_ts() ELSE ts END, rev
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = r.objid AND c.relkind = 'v' AND c.relpersistence <> 't'
               AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', '@SCHEMA@')
               AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
            ON CONFLICT (oid) WHERE dropped_ts IS NULL DO UPDATE
               SET schema_name = excluded.schema_name, name = excluded.name,
                   view_sql = excluded.view_sql, revision = excluded.revision;
            CONTINUE;$$,
         $$        -- (Version 59) From the command alone: its schema_name ('pg_temp'
        -- for any temporary schema) and the name in its object_identity.
        IF r.command_tag = 'CREATE VIEW' AND r.object_type = 'view' THEN
            IF r.schema_name NOT IN ('pg_catalog', 'information_schema', 'pg_toast', '@SCHEMA@', 'pg_temp')
               AND r.schema_name NOT LIKE 'pg\_temp\_%' AND r.schema_name NOT LIKE 'pg\_toast\_temp\_%' THEN
                INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, view_sql, created_ts, revision)
                VALUES (nextval('@SCHEMA@.catalog_id_seq'), 'view', r.objid, r.schema_name, (parse_ident(r.object_identity))[2],
                        rtrim(btrim(pg_get_viewdef(r.objid)), ';'), CASE WHEN ts = 0 THEN @SCHEMA@.view_ts() ELSE ts END, rev)
                ON CONFLICT (oid) WHERE dropped_ts IS NULL DO UPDATE
                   SET schema_name = excluded.schema_name, name = excluded.name,
                       view_sql = excluded.view_sql, revision = excluded.revision;
            END IF;
            CONTINUE;$$]];
    drop_edits constant text[][] := ARRAY[
        [$$                UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
                marked := set_config('mzproxy.drop_rev', rev::text, true) <> '';
$$,
         $$                UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
$$],
        [$$        -- revision moves here even when the view is not managed (a
        -- temporary one): on_ddl_command_end would move it otherwise, and
        -- now finds drop_rev and returns, as after any managed DROP. Views$$,
         $$        -- revision moves here even when the view is not managed (a
        -- temporary one), once, as for any DROP through mzproxy. Views$$],
        [$$            UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
            -- (Version 40) For on_ddl_command_end of this DROP.
            marked := set_config('mzproxy.drop_rev', rev::text, true) <> '';
$$,
         $$            UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
$$],
        [$$            PERFORM @SCHEMA@.retire_marker(k.oid);  -- version 19: kept for the next table
            marked := set_config('mzproxy.in_ddl', '', true) <> '';
        END IF;
    END LOOP;
$$,
         $$            PERFORM @SCHEMA@.retire_marker(k.oid);  -- version 19: kept for the next table
            marked := set_config('mzproxy.in_ddl', '', true) <> '';
        END IF;
    END LOOP;
    -- (Version 59) The revision of a DROP through mzproxy moves here, once,
    -- also when nothing managed went: on_ddl_command_end returns at once
    -- for a DROP (it has no command). Not for DROP OWNED, which
    -- on_ddl_command_end still runs, nor for another tag's drops (an
    -- ALTER's), whose command on_ddl_command_end runs.
    IF rev IS NULL AND TG_TAG LIKE 'DROP %' AND TG_TAG <> 'DROP OWNED' THEN
        IF current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1;
        ELSIF coalesce(ts, vts, @SCHEMA@.ddl_ts()) IS NOT NULL THEN
            UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1;
        END IF;
    END IF;
$$]];
    def text;
BEGIN
    def := pg_get_functiondef('@SCHEMA@.on_ddl_command_end()'::regprocedure);
    FOR i IN 1 .. array_length(end_edits, 1) LOOP
        IF (length(def) - length(replace(def, end_edits[i][1], ''))) / length(end_edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'ddl_view_drop.sql: edit % of on_ddl_command_end() does not apply once', i;
        END IF;
        def := replace(def, end_edits[i][1], end_edits[i][2]);
    END LOOP;
    EXECUTE def;
    def := pg_get_functiondef('@SCHEMA@.on_sql_drop()'::regprocedure);
    FOR i IN 1 .. array_length(drop_edits, 1) LOOP
        IF (length(def) - length(replace(def, drop_edits[i][1], ''))) / length(drop_edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'ddl_view_drop.sql: edit % of on_sql_drop() does not apply once', i;
        END IF;
        def := replace(def, drop_edits[i][1], drop_edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (59);
