-- mzproxy backend state, schema version 5: DDL and compaction cost nothing
-- per managed object that the statement does not touch (issue 4's DDL
-- latency, flat in the number of managed tables).
--
--  * user_columns keeps its plan for the session.
--  * manage_table makes a new table managed without reconcile's diffing
--    (there is nothing to diff yet) and copies rows into history only when
--    the new table has any (CREATE TABLE AS, SELECT INTO): an empty table
--    needs no resync, which made a temporary table per CREATE TABLE.
--  * on_ddl_command_end re-deparses the stored SQL of managed views only
--    after a command that can rename what a view names (ALTER ...); before,
--    every DDL deparsed every view.
--  * on_sql_drop looks for history mirrors of a dropped unique index (a
--    scan of all of pg_class) only when the index itself was dropped (DROP
--    INDEX); indexes dropped with their table keep their mirrors on the
--    history table, and ALTER TABLE reconciles its table at command end.
--  * compact says which collections hold versions their since makes
--    unreadable (an index probe each, in the function, for at most 128
--    collections and 20 ms per round, those whose since moved since they
--    were found clean),
--    so the compacting proxy calls compact_batch only for those instead of
--    once per collection per round.

-- The user's columns as they should appear in history: attnum, name, type.
-- PL/pgSQL, not SQL as in version 1: a SQL function with a SET clause is
-- planned on every call (a four-way catalog join, most of a millisecond),
-- a PL/pgSQL one keeps its plan for the session.
CREATE OR REPLACE FUNCTION @SCHEMA@.user_columns(p_oid oid)
RETURNS TABLE (attnum int2, name name, type text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT a.attnum, a.attname,
           format_type(a.atttypid, a.atttypmod) ||
           CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                THEN ' COLLATE ' || quote_ident(cn.nspname) || '.' || quote_ident(co.collname)
                ELSE '' END
      FROM pg_attribute a
      JOIN pg_type t ON t.oid = a.atttypid
      LEFT JOIN pg_collation co ON co.oid = a.attcollation
      LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
     WHERE a.attrelid = p_oid AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY a.attnum;
END
$$;

-- Make the new table p_oid managed at p_ts.
CREATE OR REPLACE FUNCTION @SCHEMA@.manage_table(p_oid oid, p_ts bigint, p_rev bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint := nextval('@SCHEMA@.catalog_id_seq');
    hist text := '@SCHEMA@.' || quote_ident('h' || new_id);
    rel text;
    reserved bool;
    defs text;
    has_rows bool;
BEGIN
    INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, history, created_ts, revision)
    SELECT new_id, 'table', r.oid, n.nspname, r.relname, hist, p_ts, p_rev
      FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = p_oid
    RETURNING format('%I.%I', schema_name, name) INTO rel;
    INSERT INTO @SCHEMA@.columns (id, attnum, name, type)
    SELECT new_id, uc.attnum, uc.name, uc.type FROM @SCHEMA@.user_columns(p_oid) uc;
    SELECT coalesce(bool_or(c.name IN ('mz_from', 'mz_to', 'mz_hash')), false),
           coalesce(string_agg(format('%I %s', c.name, c.type), ', ' ORDER BY c.attnum) || ', ', '')
      INTO reserved, defs FROM @SCHEMA@.columns c WHERE c.id = new_id;
    IF reserved THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    EXECUTE format('CREATE TABLE %s (%s mz_from int8 NOT NULL, mz_to int8 NOT NULL, mz_hash int4 NOT NULL)', hist, defs);
    EXECUTE format('CREATE INDEX %I ON %s (mz_to)', 'h' || new_id || '_mz_to', hist);
    INSERT INTO @SCHEMA@.collections (id, since) VALUES (new_id, p_ts);
    -- Rows the table already has (CREATE TABLE AS, SELECT INTO) become
    -- versions at p_ts.
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', rel) INTO has_rows;
    IF has_rows THEN
        PERFORM @SCHEMA@.resync(new_id, p_ts);
    END IF;
    PERFORM @SCHEMA@.sync_indexes(new_id);
    PERFORM @SCHEMA@.gen_triggers(new_id);
    PERFORM @SCHEMA@.sync_grants(new_id);
    RETURN new_id;
END
$$;

CREATE OR REPLACE FUNCTION @SCHEMA@.on_ddl_command_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    k record;
    ts bigint := @SCHEMA@.current_write_ts();
    rev bigint;
    rel_oid oid;
    done oid[] := '{}';
    renames bool := false;
BEGIN
    IF coalesce(current_setting('mzproxy.in_ddl', true), '') = 'on' THEN
        RETURN;  -- DDL that mzproxy itself runs below
    END IF;
    IF ts IS NULL THEN
        -- Outside the proxy: refuse DDL on managed relations, leave the
        -- rest alone. Index maintenance, comments and grants are allowed.
        FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
            IF r.command_tag IN ('GRANT', 'REVOKE') THEN
                -- Grants need no timestamp: keep history readable by the
                -- same roles as its table.
                PERFORM set_config('mzproxy.in_ddl', 'on', true);
                PERFORM @SCHEMA@.sync_grants(g.id) FROM @SCHEMA@.catalog g WHERE g.kind = 'table' AND g.dropped_ts IS NULL;
                PERFORM set_config('mzproxy.in_ddl', '', true);
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

    PERFORM set_config('mzproxy.in_ddl', 'on', true);
    UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
    FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
        -- Only ALTER renames or moves what a view's deparsed text names
        -- (relations, columns, schemas, types, functions); CREATE adds new
        -- names, and DROP removes the views that depend on what it drops.
        renames := renames OR r.command_tag LIKE 'ALTER %';
        IF r.command_tag IN ('GRANT', 'REVOKE') THEN
            -- GRANT does not say which relations it touched.
            PERFORM @SCHEMA@.sync_grants(g.id) FROM @SCHEMA@.catalog g WHERE g.kind = 'table' AND g.dropped_ts IS NULL;
            CONTINUE;
        END IF;
        IF r.classid IS DISTINCT FROM 'pg_class'::regclass OR r.schema_name = '@SCHEMA@' THEN
            CONTINUE;
        END IF;
        -- The relation the command is about (an index's table for CREATE INDEX).
        SELECT CASE WHEN c.relkind IN ('i', 'I') THEN (SELECT indrelid FROM pg_index WHERE indexrelid = c.oid)
                    ELSE c.oid END
          INTO rel_oid FROM pg_class c WHERE c.oid = r.objid;
        IF rel_oid IS NULL OR rel_oid = ANY (done) THEN
            CONTINUE;
        END IF;
        done := done || rel_oid;
        -- A write through an inheritance parent reaches its children's rows,
        -- which the parent's history triggers cannot account for.
        IF EXISTS (SELECT 1 FROM pg_inherits i
                     JOIN @SCHEMA@.catalog g ON g.oid IN (i.inhparent, i.inhrelid) AND g.dropped_ts IS NULL
                    WHERE rel_oid IN (i.inhparent, i.inhrelid)) THEN
            RAISE EXCEPTION 'table inheritance involving a table managed by mzproxy is not supported (%)', rel_oid::regclass
                USING ERRCODE = '0A000';
        END IF;
        SELECT * INTO k FROM @SCHEMA@.catalog WHERE oid = rel_oid AND dropped_ts IS NULL;
        IF FOUND THEN
            IF k.kind = 'table' THEN
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
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
          WHERE c.oid = rel_oid AND c.relpersistence <> 't'
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
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel_oid;
        ELSE
            PERFORM @SCHEMA@.manage_table(rel_oid, ts, rev);
        END IF;
    END LOOP;
    IF renames THEN
        -- Deparsed view text names relations as they are called now.
        UPDATE @SCHEMA@.catalog SET view_sql = @SCHEMA@.view_definition(oid)
         WHERE kind = 'view' AND dropped_ts IS NULL AND view_sql IS DISTINCT FROM @SCHEMA@.view_definition(oid);
    END IF;
    PERFORM set_config('mzproxy.in_ddl', '', true);
END
$$;

CREATE OR REPLACE FUNCTION @SCHEMA@.on_sql_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    k record;
    ts bigint := @SCHEMA@.current_write_ts();
    rev bigint;
BEGIN
    IF coalesce(current_setting('mzproxy.in_ddl', true), '') = 'on' THEN
        RETURN;
    END IF;
    FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
        IF r.object_type = 'trigger' AND r.original AND r.object_identity LIKE 'mzproxy\_history\_% on %' THEN
            RAISE EXCEPTION 'cannot drop trigger %: mzproxy records the table''s history with it', r.object_identity
                USING ERRCODE = 'MZ003';
        END IF;
        IF r.classid = 'pg_class'::regclass AND r.objsubid <> 0 THEN
            -- A column of a managed table: ALTER TABLE DROP COLUMN (also
            -- handled at ddl_command_end), or a cascade from another object
            -- (DROP TYPE ... CASCADE) that no ALTER TABLE event reports.
            SELECT * INTO k FROM @SCHEMA@.catalog WHERE oid = r.objid AND kind = 'table' AND dropped_ts IS NULL;
            IF FOUND AND EXISTS (SELECT 1 FROM pg_class WHERE oid = r.objid) THEN
                IF ts IS NULL THEN
                    RAISE EXCEPTION 'dropping % is not allowed outside mzproxy', r.object_identity
                        USING ERRCODE = 'MZ003',
                              HINT = 'The table is managed by mzproxy: connect through mzproxy to change it.';
                END IF;
                PERFORM set_config('mzproxy.in_ddl', 'on', true);
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
                PERFORM set_config('mzproxy.in_ddl', '', true);
            END IF;
            CONTINUE;
        END IF;
        IF r.classid <> 'pg_class'::regclass THEN
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
            IF r.original THEN
                FOR k IN SELECT c.relname FROM pg_class c
                          WHERE c.relnamespace = '@SCHEMA@'::regnamespace AND c.relkind = 'i'
                            AND c.relname ~ ('^h[0-9]+_k' || r.objid || '$')
                LOOP
                    PERFORM set_config('mzproxy.in_ddl', 'on', true);
                    EXECUTE format('DROP INDEX @SCHEMA@.%I', k.relname);
                    PERFORM set_config('mzproxy.in_ddl', '', true);
                END LOOP;
            END IF;
            CONTINUE;
        END IF;
        SELECT * INTO k FROM @SCHEMA@.catalog WHERE oid = r.objid AND dropped_ts IS NULL;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        IF ts IS NULL THEN
            RAISE EXCEPTION 'DROP of % is not allowed outside mzproxy', r.object_identity
                USING ERRCODE = 'MZ003',
                      HINT = 'The relation is managed by mzproxy: connect through mzproxy to drop it.';
        END IF;
        IF rev IS NULL THEN
            UPDATE @SCHEMA@.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
        END IF;
        -- The history table stays (compaction removes it once no read can
        -- reach it); the trigger functions go.
        UPDATE @SCHEMA@.catalog SET dropped_ts = ts, revision = rev WHERE id = k.id;
        IF k.kind = 'table' THEN
            PERFORM set_config('mzproxy.in_ddl', 'on', true);
            EXECUTE format('DROP FUNCTION IF EXISTS @SCHEMA@.%I(), @SCHEMA@.%I(), @SCHEMA@.%I(), @SCHEMA@.%I()',
                           'h' || k.id || '_ins', 'h' || k.id || '_upd', 'h' || k.id || '_del', 'h' || k.id || '_trunc');
            PERFORM set_config('mzproxy.in_ddl', '', true);
        END IF;
    END LOOP;
END
$$;

-- clean_since: the since at which the collection's history last held no
-- version with mz_to <= since (NULL: not known). A commit after that check
-- writes at a T above that since, so only a since that moved past it can
-- make more versions unreadable.
ALTER TABLE @SCHEMA@.collections ADD COLUMN clean_since bigint;

-- One compaction round: see lease.sql (version 2). pending says whether
-- the collection's history holds a version no time at or after its since
-- can read (mz_to <= since): only those need compact_batch. It is found by
-- one probe of the history's mz_to index, for at most probe_limit
-- collections (and probe_budget of time) per round whose since moved past
-- their clean_since, the
-- longest unchecked first (compact_batch marks a collection clean when it
-- has deleted all there was, so the check goes round the collections). The
-- round so costs a bounded number of probes whatever the number of managed
-- tables; a table written all the time is checked at least every
-- (tables / probe_limit) rounds.
DROP FUNCTION @SCHEMA@.compact(bigint, bigint);
CREATE FUNCTION @SCHEMA@.compact(p_default_retain_ms bigint, p_by bigint)
RETURNS TABLE (id bigint, since bigint, pending bool)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    up bigint;
    fl bigint;
    d record;
    removed bigint := 0;
    p bool;
    todo bigint[] := '{}';
    probe_limit constant int := 128;
    probe_budget constant interval := '20 ms';
    deadline timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(@SCHEMA@.hold_lock_key());
    UPDATE @SCHEMA@.incarnations i SET retired_at = clock_timestamp(), retired_reason = 'lease expired'
     WHERE i.retired_at IS NULL AND i.heartbeat_at < clock_timestamp() - i.grace_ms * interval '1 millisecond';
    UPDATE @SCHEMA@.incarnations i SET retired_at = clock_timestamp(), retired_reason = 'fenced'
     WHERE i.retired_at IS NULL AND i.generation < (SELECT f.generation FROM @SCHEMA@.fence f);
    DELETE FROM @SCHEMA@.read_holds h USING @SCHEMA@.incarnations i
     WHERE i.id = h.incarnation AND i.retired_at IS NOT NULL;
    -- Keep retired incarnations a day for introspection.
    DELETE FROM @SCHEMA@.incarnations i WHERE i.retired_at < clock_timestamp() - interval '1 day';
    SELECT x.upper INTO up FROM @SCHEMA@.txns x;
    SELECT min(i.floor_ts) INTO fl FROM @SCHEMA@.incarnations i WHERE i.retired_at IS NULL;
    -- Every since may move each round: one join, not two subqueries per
    -- collection.
    UPDATE @SCHEMA@.collections c SET since = v.since
      FROM (SELECT c2.id, LEAST(up - 1 - coalesce(c2.retain_ms, p_default_retain_ms), fl, h.ts) AS since
              FROM @SCHEMA@.collections c2
              LEFT JOIN (SELECT h.collection, min(h.ts) AS ts FROM @SCHEMA@.read_holds h GROUP BY h.collection) h
                ON h.collection = c2.id) v
     WHERE v.id = c.id AND c.since < v.since;
    -- Dropped tables nobody can read any more.
    FOR d IN SELECT k.id, k.history FROM @SCHEMA@.catalog k JOIN @SCHEMA@.collections c ON c.id = k.id
              WHERE k.dropped_ts IS NOT NULL AND c.since >= k.dropped_ts
    LOOP
        PERFORM set_config('mzproxy.in_ddl', 'on', true);
        EXECUTE format('DROP TABLE IF EXISTS %s', d.history);
        PERFORM set_config('mzproxy.in_ddl', '', true);
        DELETE FROM @SCHEMA@.read_holds h WHERE h.collection = d.id;
        DELETE FROM @SCHEMA@.collections c WHERE c.id = d.id;
        DELETE FROM @SCHEMA@.columns c WHERE c.id = d.id;
        DELETE FROM @SCHEMA@.catalog k WHERE k.id = d.id;
        removed := removed + 1;
    END LOOP;
    UPDATE @SCHEMA@.compactor SET incarnation = p_by, ran_at = clock_timestamp(),
           default_retain_ms = p_default_retain_ms, dropped_removed = dropped_removed + removed;
    FOR d IN SELECT c.id, c.since, k.history FROM @SCHEMA@.collections c JOIN @SCHEMA@.catalog k ON k.id = c.id
              WHERE c.clean_since IS NULL OR c.clean_since < c.since
              ORDER BY c.clean_since NULLS FIRST, c.id
              LIMIT probe_limit
    LOOP
        -- Probing a table whose cached catalog entries were invalidated
        -- (as a backend's whole cache is after a burst of DDL elsewhere)
        -- costs milliseconds: the round stops after probe_budget, the
        -- unchecked tables first in the next one.
        IF deadline IS NULL THEN
            deadline := clock_timestamp() + probe_budget;
        ELSIF clock_timestamp() > deadline THEN
            EXIT;
        END IF;
        -- A history table dropped by hand has nothing to compact.
        p := false;
        IF to_regclass(d.history) IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE mz_to <= $1)', d.history) INTO p USING d.since;
        END IF;
        IF p THEN
            todo := todo || d.id;
        ELSE
            UPDATE @SCHEMA@.collections c SET clean_since = d.since WHERE c.id = d.id;
        END IF;
    END LOOP;
    RETURN QUERY SELECT c.id, c.since, c.id = ANY (todo) FROM @SCHEMA@.collections c ORDER BY c.id;
END
$$;

-- Delete up to p_limit versions of table p_id that no time >= since can
-- see (mz_to <= since); returns how many. Needs no lock: a since only rises.
-- Fewer than p_limit means none is left: the table is clean at that since.
CREATE OR REPLACE FUNCTION @SCHEMA@.compact_batch(p_id bigint, p_limit int) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    n bigint;
BEGIN
    SELECT k.history, s.since INTO c FROM @SCHEMA@.catalog k JOIN @SCHEMA@.collections s ON s.id = k.id
     WHERE k.id = p_id;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    EXECUTE format('WITH d AS (DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s WHERE mz_to <= $1 LIMIT $2)) RETURNING 1) '
                   'SELECT count(*) FROM d', c.history, c.history)
       INTO n USING c.since, p_limit;
    IF n > 0 OR n < p_limit THEN
        UPDATE @SCHEMA@.collections s
           SET compacted_rows = compacted_rows + n,
               last_compacted_rows = CASE WHEN n > 0 THEN n ELSE last_compacted_rows END,
               compacted_at = CASE WHEN n > 0 THEN clock_timestamp() ELSE compacted_at END,
               clean_since = CASE WHEN n < p_limit THEN c.since ELSE clean_since END
         WHERE s.id = p_id;
    END IF;
    RETURN n;
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (5);
