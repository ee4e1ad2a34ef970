-- mzproxy backend state, version 37 to 38: a table's history is built at
-- its first write through mzproxy, not at its CREATE (issue 16; the
-- design and its figures are in docs/ddl-cost.md, "Session 15" and
-- "Session 16").
--
-- CREATE TABLE records the catalog row, the columns, the collection
-- (since = the CREATE's timestamp) and the table's two marker sequences,
-- and puts one trigger on the table, mzproxy_pending_history: BEFORE
-- INSERT OR UPDATE OR DELETE OR TRUNCATE FOR EACH STATEMENT, ENABLE
-- ALWAYS (so also under session_replication_role = replica), calling the
-- shared history_pending(), which refuses the write with 40001 and the
-- table's oid in its DETAIL. No history table, index, trigger function
-- or trigger of the table's own: those are most of the instructions a
-- CREATE+DROP pair cost.
--
-- ensure_history(oids) builds them: the proxy calls it in the write's own
-- transaction before the first write to a table whose catalog row says
-- history_built = false (and before a read at a timestamp). It checks the
-- caller's rights on every table first (any of SELECT, INSERT, UPDATE,
-- DELETE, TRUNCATE: the role the client connected as, or SET ROLE to),
-- then takes SHARE ROW EXCLUSIVE on each (writers wait for it, readers do
-- not), checks again whether the history exists (the catalog snapshot is
-- fresh after a lock), and builds what manage_table built until version
-- 37 (build_history), disabling the refusing trigger. The catalog revision
-- does not move: the history's name, which plans use, is the same.
--
-- A table made with rows (CREATE TABLE AS, SELECT INTO) is built at its
-- CREATE, its rows versions at the CREATE's timestamp, as before; so is
-- one made while the transaction's mzproxy.eager_history is 'on'.
--
-- DDL on a table without history changes only what it has: reconcile
-- updates the catalog's name and columns; sync_indexes and sync_grants
-- (CREATE UNIQUE INDEX, GRANT, REVOKE) return; the build later runs them
-- with the table as it is then. The three are renamed *_built and
-- wrapped.

ALTER TABLE @SCHEMA@.catalog ADD COLUMN history_built boolean NOT NULL DEFAULT true;

CREATE FUNCTION @SCHEMA@.history_pending() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'cannot write to managed table %.% before mzproxy builds its history', quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME)
        USING ERRCODE = '40001',
              DETAIL = format('mzproxy: the history of relation %s is not built', TG_RELID),
              HINT = 'Write through mzproxy: it builds a table''s history before its first write. The transaction might succeed if retried.';
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.history_pending() FROM PUBLIC;

ALTER FUNCTION @SCHEMA@.reconcile(bigint, bigint, boolean) RENAME TO reconcile_built;
ALTER FUNCTION @SCHEMA@.sync_indexes(bigint) RENAME TO sync_indexes_built;
ALTER FUNCTION @SCHEMA@.sync_grants(bigint) RENAME TO sync_grants_built;

CREATE FUNCTION @SCHEMA@.reconcile(p_id bigint, p_ts bigint, p_new boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    rel oid;
BEGIN
    SELECT k.oid INTO rel FROM @SCHEMA@.catalog k WHERE k.id = p_id AND NOT k.history_built;
    IF NOT FOUND THEN
        PERFORM @SCHEMA@.reconcile_built(p_id, p_ts, p_new);
        RETURN;
    END IF;
    -- No history: the name and the columns are all there is to follow.
    UPDATE @SCHEMA@.catalog k SET schema_name = n.nspname, name = r.relname
      FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
     WHERE k.id = p_id AND r.oid = k.oid AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname);
    DELETE FROM @SCHEMA@.columns WHERE id = p_id;
    INSERT INTO @SCHEMA@.columns (id, attnum, name, type)
    SELECT p_id, uc.attnum, uc.name, uc.type FROM @SCHEMA@.user_columns(rel) uc;
    IF EXISTS (SELECT 1 FROM @SCHEMA@.columns c WHERE c.id = p_id AND c.name IN ('mz_from', 'mz_to', 'mz_hash')) THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
END
$$;

CREATE FUNCTION @SCHEMA@.sync_indexes(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF (SELECT k.history_built FROM @SCHEMA@.catalog k WHERE k.id = p_id) THEN
        PERFORM @SCHEMA@.sync_indexes_built(p_id);
    END IF;
END
$$;

CREATE FUNCTION @SCHEMA@.sync_grants(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF (SELECT k.history_built FROM @SCHEMA@.catalog k WHERE k.id = p_id) THEN
        PERFORM @SCHEMA@.sync_grants_built(p_id);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.reconcile(bigint, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @SCHEMA@.sync_indexes(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @SCHEMA@.sync_grants(bigint) FROM PUBLIC;

-- What manage_table built until version 37, for a table whose catalog
-- row, columns and collection exist; p_rows_ts: the table's rows become
-- versions at that timestamp (NULL: it has none). The caller holds a lock
-- that keeps writers out and has set mzproxy.in_ddl to the mark.
CREATE FUNCTION @SCHEMA@.build_history(p_id bigint, p_rows_ts bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    k record;
    defs text;
BEGIN
    SELECT c.oid, c.history INTO k FROM @SCHEMA@.catalog c WHERE c.id = p_id;
    SELECT coalesce(string_agg(format('%I %s', c.name, c.type), ', ' ORDER BY c.attnum), '')
      INTO defs FROM @SCHEMA@.columns c WHERE c.id = p_id;
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

REVOKE ALL ON FUNCTION @SCHEMA@.build_history(bigint, bigint) FROM PUBLIC;

-- ensure_history builds the history of each managed table in p_rels that
-- has none yet, in the caller's transaction; a no-op for the others.
-- Callable by any role: it refuses (42501) before taking any lock unless
-- the caller may read or write every table it would build. The caller is
-- the role the session runs as (SET ROLE's, else the session's): inside
-- this SECURITY DEFINER function current_user is the owner.
CREATE FUNCTION @SCHEMA@.ensure_history(p_rels oid[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    caller name := CASE WHEN current_setting('role') = 'none' THEN session_user
                        ELSE current_setting('role')::name END;
    k record;
    todo bigint[] := '{}';
    marked bool := false;
BEGIN
    FOR k IN SELECT c.id, c.oid FROM @SCHEMA@.catalog c
              WHERE c.oid = ANY (p_rels) AND c.kind = 'table' AND c.dropped_ts IS NULL AND NOT c.history_built
              ORDER BY c.oid
    LOOP
        IF NOT has_table_privilege(caller, k.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE') THEN
            RAISE EXCEPTION 'permission denied for table %', k.oid::regclass
                USING ERRCODE = '42501';
        END IF;
        todo := todo || k.id;
    END LOOP;
    FOR k IN SELECT c.id, c.oid, c.history FROM @SCHEMA@.catalog c WHERE c.id = ANY (todo) ORDER BY c.oid LOOP
        EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', k.oid::regclass);
        -- Built meanwhile by a transaction that held the lock: its history
        -- is there now, whatever this transaction's snapshot says.
        IF to_regclass(k.history) IS NULL THEN
            IF NOT marked THEN
                marked := set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true) <> '';
            END IF;
            PERFORM @SCHEMA@.build_history(k.id, NULL);
        END IF;
    END LOOP;
    IF marked THEN
        marked := set_config('mzproxy.in_ddl', '', true) <> '';
    END IF;
END
$$;

GRANT EXECUTE ON FUNCTION @SCHEMA@.ensure_history(oid[]) TO PUBLIC;

CREATE OR REPLACE FUNCTION @SCHEMA@.manage_table(p_oid oid, p_ts bigint, p_rev bigint) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    new_id bigint := nextval('@SCHEMA@.catalog_id_seq');
    rel text;
    has_rows bool;
BEGIN
    INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, history, created_ts, revision, history_built)
    SELECT new_id, 'table', r.oid, n.nspname, r.relname, '@SCHEMA@.' || quote_ident('h' || new_id), p_ts, p_rev, false
      FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = p_oid
    RETURNING format('%I.%I', schema_name, name) INTO rel;
    INSERT INTO @SCHEMA@.columns (id, attnum, name, type)
    SELECT new_id, uc.attnum, uc.name, uc.type FROM @SCHEMA@.user_columns(p_oid) uc;
    IF EXISTS (SELECT 1 FROM @SCHEMA@.columns c WHERE c.id = new_id AND c.name IN ('mz_from', 'mz_to', 'mz_hash')) THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    INSERT INTO @SCHEMA@.collections (id, since) VALUES (new_id, p_ts);
    -- The markers now: a read-write transaction's check (check_reads)
    -- takes a table without them for one just dropped.
    PERFORM @SCHEMA@.make_marker(p_oid);
    -- Rows the table already has (CREATE TABLE AS, SELECT INTO) become
    -- versions at p_ts: built now. So is a table that a later statement
    -- of the same query string writes (the proxy sets
    -- mzproxy.eager_history for such a string: it builds before the
    -- string, when the table is not there yet).
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', rel) INTO has_rows;
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

-- The refusing trigger is not named mzproxy_history_*: gen_triggers drops
-- those (DROP TRIGGER, ACCESS EXCLUSIVE on the table) before it makes
-- them. A client's DROP TRIGGER of it is refused here, as on_sql_drop
-- refuses the history triggers'.
CREATE FUNCTION @SCHEMA@.on_pending_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    r record;
BEGIN
    IF current_setting('mzproxy.in_ddl', true) <> '' THEN
        IF current_setting('mzproxy.in_ddl', true) = @SCHEMA@.ddl_mark() THEN
            RETURN;
        END IF;
    END IF;
    FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
        IF r.object_type = 'trigger' AND r.original AND r.object_identity LIKE 'mzproxy\_pending\_history on %' THEN
            RAISE EXCEPTION 'cannot drop trigger %: mzproxy refuses writes to the table with it until it builds the table''s history', r.object_identity
                USING ERRCODE = 'MZ003';
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.on_pending_drop() FROM PUBLIC;

CREATE EVENT TRIGGER mzproxy_pending_drop ON sql_drop
    WHEN TAG IN ('DROP TRIGGER')
    EXECUTE FUNCTION @SCHEMA@.on_pending_drop();

INSERT INTO @SCHEMA@.schema_version (version) VALUES (38);
