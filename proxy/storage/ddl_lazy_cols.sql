-- mzproxy backend state, version 40 to 41 (issue 16): ALTER TABLE,
-- above all of a table without history, and CREATE TABLE, with fewer
-- statements in the event trigger.
--
-- Measured with bench/ddlcost.sh (backend instructions per pair, 100 and
-- 1,000 tables, docs/ddl-cost.md "Session 18"):
--
--  * mzproxy.columns is the history's column map: a table gets its rows
--    there when its history is made (build_history, from user_columns),
--    not at CREATE TABLE and again at every ALTER before. A table without
--    history has none (this version deletes those it had), so its ALTER
--    runs no user_columns, no delete and insert of its rows and no
--    foreign-key checks of them; the reserved column names are checked on
--    pg_attribute.
--  * on_ddl_command_end takes an ALTER TABLE of a managed table in one
--    UPDATE of its catalog row (name, schema, revision), whose RETURNING
--    says whether a column takes a reserved name (42939), whether the
--    table was made an inheritance child (0A000) and whether a view's
--    rule depends on it (if not, no dependent views' lookup at the end),
--    instead of the relation lookup, the inheritance check, the catalog
--    lookup and the revision's update; a table without history needs
--    nothing more (before: reconcile, three statements and user_columns),
--    one with history goes to reconcile_built directly (reconcile's
--    wrapper read its row again).
--  * manage_table inserts the catalog row and the collection and checks
--    the column names in one statement, and looks for rows (CREATE TABLE
--    AS) only in a relation that has blocks: a plain CREATE TABLE plans
--    no query for them.
--
-- Tried and not kept: the revision moved in the statement that reads the
-- commands (a writable CTE joined to pg_event_trigger_ddl_commands()),
-- and the relation lookup, the inheritance check, the catalog lookup and
-- the new-relation check merged into one statement: each cost more
-- instructions than the statements it replaced (an executor set up for
-- every subplan, run or not).

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
    ts := @SCHEMA@.ddl_ts();  -- (version 29)
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
        IF r.classid IS DISTINCT FROM 'pg_class'::regclass OR r.schema_name = '@SCHEMA@' THEN
            CONTINUE;
        END IF;
        -- (Version 41) ALTER TABLE of a managed table, in one statement:
        -- its name, schema and revision followed, and what the checks
        -- below need (no column takes a reserved name; not made an
        -- inheritance child, the one way ALTER TABLE of a managed table
        -- brings it into inheritance; a view whose text may name it). A
        -- table without history needs nothing else; one with history is
        -- reconciled.
        IF r.command_tag = 'ALTER TABLE' AND NOT r.objid = ANY (done) THEN
            UPDATE @SCHEMA@.catalog t SET schema_name = r.schema_name, name = c.relname, revision = rev
              FROM pg_class c
             WHERE t.oid = r.objid AND t.dropped_ts IS NULL AND t.kind = 'table' AND c.oid = t.oid
            RETURNING t.id, t.history_built, EXISTS (SELECT 1 FROM pg_attribute a
                               WHERE a.attrelid = t.oid AND a.attname IN ('mz_from', 'mz_to', 'mz_hash')
                                 AND a.attnum > 0 AND NOT a.attisdropped) AS reserved,
                      EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = t.oid) AS inherits,
                      EXISTS (SELECT 1 FROM pg_depend d
                               WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = t.oid
                                 AND (d.classid = 'pg_rewrite'::regclass) IS TRUE) AS viewed
              INTO altered_table;
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
                IF NOT altered_table.viewed THEN
                    altered := array_remove(altered, r.objid);
                END IF;
                IF altered_table.history_built THEN
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
            AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', '@SCHEMA@')
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
                   @SCHEMA@.view_definition(c.oid), ts, rev
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = l.rel;
        ELSE
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


CREATE OR REPLACE FUNCTION @SCHEMA@.reconcile(p_id bigint, p_ts bigint, p_new boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    rel oid;
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
    -- No history: the name is all there is to follow (version 41: the
    -- columns are recorded when the history is made).
    IF EXISTS (SELECT 1 FROM pg_attribute a
                WHERE a.attrelid = rel AND a.attname IN ('mz_from', 'mz_to', 'mz_hash') AND a.attnum > 0 AND NOT a.attisdropped) THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
END
$$;


CREATE OR REPLACE FUNCTION @SCHEMA@.manage_table(p_oid oid, p_ts bigint, p_rev bigint) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    new_id bigint := nextval('@SCHEMA@.catalog_id_seq');
    rel text;
    has_rows bool;
    reserved bool;
BEGIN
    -- (Version 41) The row, the collection and the check of the column
    -- names in one statement. The columns are recorded when the history
    -- is made (build_history): a table without history has none.
    WITH added AS (
        INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, history, created_ts, revision, history_built)
        SELECT new_id, 'table', r.oid, n.nspname, r.relname, '@SCHEMA@.' || quote_ident('h' || new_id), p_ts, p_rev, false
          FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = p_oid
        RETURNING id, schema_name, name),
    collection AS (
        INSERT INTO @SCHEMA@.collections (id, since) SELECT a.id, p_ts FROM added a)
    SELECT format('%I.%I', a.schema_name, a.name),
           EXISTS (SELECT 1 FROM pg_attribute c
                    WHERE c.attrelid = p_oid AND c.attname IN ('mz_from', 'mz_to', 'mz_hash') AND c.attnum > 0 AND NOT c.attisdropped)
      INTO rel, reserved FROM added a;
    IF reserved THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    -- The markers now: a read-write transaction's check (check_reads)
    -- takes a table without them for one just dropped.
    PERFORM @SCHEMA@.make_marker(p_oid);
    -- Rows the table already has (CREATE TABLE AS, SELECT INTO) become
    -- versions at p_ts: built now. So is a table that a later statement
    -- of the same query string writes (the proxy sets
    -- mzproxy.eager_history for such a string: it builds before the
    -- string, when the table is not there yet).
    -- (Version 41) A relation of no blocks has no rows: a plain CREATE
    -- TABLE plans no query for them.
    has_rows := pg_relation_size(p_oid) > 0;
    IF has_rows THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', rel) INTO has_rows;
    END IF;
    IF has_rows OR current_setting('mzproxy.eager_history', true) = 'on' THEN
        PERFORM @SCHEMA@.build_history(new_id, p_ts);
    ELSE
        EXECUTE format('CREATE TRIGGER mzproxy_pending_history BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s '
                       'FOR EACH STATEMENT EXECUTE FUNCTION @SCHEMA@.history_pending()', rel);
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER mzproxy_pending_history', rel);
    END IF;
    RETURN new_id;
END
$$;


CREATE OR REPLACE FUNCTION @SCHEMA@.build_history(p_id bigint, p_rows_ts bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    k record;
    defs text;
BEGIN
    SELECT c.oid, c.history INTO k FROM @SCHEMA@.catalog c WHERE c.id = p_id;
    -- (Version 41) The columns recorded now, as the history gets them:
    -- a table without history has none in mzproxy.columns.
    WITH added AS (
        INSERT INTO @SCHEMA@.columns (id, attnum, name, type)
        SELECT p_id, uc.attnum, uc.name, uc.type FROM @SCHEMA@.user_columns(k.oid) uc
        RETURNING attnum, name, type)
    SELECT coalesce(string_agg(format('%I %s', c.name, c.type), ', ' ORDER BY c.attnum), '')
      INTO defs FROM added c;
    EXECUTE format('CREATE TABLE %s (mz_from int8 NOT NULL, mz_to int8 NOT NULL, mz_hash int4 NOT NULL%s)', k.history,
                   CASE WHEN defs = '' THEN '' ELSE ', ' || defs END);
    EXECUTE format('CREATE INDEX %I ON %s (mz_to, mz_from)', 'h' || p_id || '_mz_to', k.history);
    -- Disabled, not dropped: DROP TRIGGER takes ACCESS EXCLUSIVE on the
    -- table, which readers would wait for until the write's transaction
    -- ends; DISABLE takes SHARE ROW EXCLUSIVE, as the build's other DDL.
    IF EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = k.oid AND t.tgname = 'mzproxy_pending_history') THEN
        EXECUTE format('ALTER TABLE %s DISABLE TRIGGER mzproxy_pending_history', k.oid::regclass);
    END IF;
    UPDATE @SCHEMA@.catalog SET history_built = true WHERE id = p_id AND NOT history_built;
    IF p_rows_ts IS NOT NULL THEN
        PERFORM @SCHEMA@.resync(p_id, p_rows_ts);
    END IF;
    PERFORM @SCHEMA@.sync_indexes(p_id);
    PERFORM @SCHEMA@.sync_triggers(p_id);
    PERFORM @SCHEMA@.sync_grants(p_id);
END
$$;


-- A table without history keeps no columns (its history, when made,
-- records them).
DELETE FROM @SCHEMA@.columns c USING @SCHEMA@.catalog k WHERE k.id = c.id AND NOT k.history_built;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (41);
