-- mzproxy backend state, version 9 to 10: what DDL on a managed table
-- costs beyond the same DDL on a plain one (issue 16).
--
-- Measured on PostgreSQL 15 (pg_stat_statements with track = all, backend
-- CPU time from /proc), per statement on a table (a int PRIMARY KEY, b text):
--
--  * Every btree PostgreSQL 15 builds, even on an empty table, ends with an
--    fsync of the new index file (_bt_load's smgrimmedsync), 2-15 ms on a
--    shared disk: with a busy disk most of a managed CREATE TABLE's cost is
--    the history table's btrees (its TOAST index, mz_to, the lookup mirror
--    of the primary key, frontier.sql's index of pending rows), which this
--    version keeps. (A hash index, built with no fsync, does not do for the
--    pending rows: they all share one key, the transaction's placeholder,
--    and a hash index walks its bucket's whole overflow chain for each
--    insert: 80,000 rows written in one block took 2.7 s instead of 0.6.)
--  * ALTER TABLE ran user_columns (a catalog join with a PL/pgSQL call per
--    column) six times in reconcile: 1.8 of its 3.7 ms of CPU when nothing
--    changed. It now reads the user's columns once.
--  * ADD/DROP COLUMN compared every row of the table with its current
--    versions (resync: a temporary table when the table has rows, a
--    full scan of both either way), also when no value can have changed: a
--    dropped column, or an added one that is NULL in every row, leaves
--    the current versions equal to the rows. For tables with a primary key
--    (whose history carries no hash of the whole row) resync now runs only
--    when values changed: a column type changed, or a column was added
--    with a default, a domain type (whose default PostgreSQL fills in), an
--    identity or a generated expression. ADD COLUMN without a default on a
--    large table is then as cheap through mzproxy as directly, where it
--    was a scan of the table and its history.
--  * CREATE INDEX reconciled its table in full (columns, names, trigger
--    functions compared with their text, grants): an index changes only
--    the lookup mirrors, so CREATE INDEX now syncs only those.
--  * Each DDL statement mzproxy runs for a managed table (14 for a CREATE
--    TABLE) fires the event triggers, which compare mzproxy.in_ddl with
--    ddl_mark(); ddl_mark computes the tag in one function call less.

-- Whether the values of column p_attnum of table p_oid, just added, can be
-- other than NULL in the rows the table already had: a default (also a
-- generated expression), an identity, or a domain type, whose default
-- ADD COLUMN fills in.
CREATE FUNCTION @SCHEMA@.added_column_filled(p_oid oid, p_attnum int2) RETURNS bool
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN coalesce((SELECT a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' OR t.typtype = 'd'
                       FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                      WHERE a.attrelid = p_oid AND a.attnum = p_attnum), true);
END
$$;

-- Bring the history table of p_id in step with its user table after DDL:
-- names, columns (by attnum), types, lookup indexes, triggers, grants. As
-- in versions 1 and 6, with the user's columns read once, and resync only
-- when the current versions can differ from the rows (see the header).
CREATE OR REPLACE FUNCTION @SCHEMA@.reconcile(p_id bigint, p_ts bigint, p_new bool) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    m record;
    -- The user's columns now, as user_columns gives them.
    u_attnum int2[];
    u_name name[];
    u_type text[];
    -- Some column's values changed in every row (or may have).
    refill bool := p_new;
    -- Columns went or came: the whole-row hashes of a table without a
    -- primary key change.
    reshaped bool := false;
BEGIN
    SELECT * INTO c FROM @SCHEMA@.catalog WHERE id = p_id;
    UPDATE @SCHEMA@.catalog k SET schema_name = n.nspname, name = r.relname
      FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
     WHERE k.id = p_id AND r.oid = k.oid AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname);
    SELECT coalesce(array_agg(uc.attnum ORDER BY uc.attnum), '{}'), coalesce(array_agg(uc.name ORDER BY uc.attnum), '{}'),
           coalesce(array_agg(uc.type ORDER BY uc.attnum), '{}')
      INTO u_attnum, u_name, u_type FROM @SCHEMA@.user_columns(c.oid) uc;
    IF u_name && ARRAY['mz_from', 'mz_to', 'mz_hash']::name[] THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    -- Dropped columns: dropped from history too (old versions lose them).
    FOR m IN SELECT cc.attnum, cc.name FROM @SCHEMA@.columns cc
              WHERE cc.id = p_id AND NOT cc.attnum = ANY (u_attnum)
    LOOP
        -- (A DROP TYPE ... CASCADE may have dropped it from history already.)
        IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c.history::regclass AND attname = m.name AND NOT attisdropped) THEN
            EXECUTE format('ALTER TABLE %s DROP COLUMN %I', c.history, m.name);
        END IF;
        DELETE FROM @SCHEMA@.columns WHERE id = p_id AND attnum = m.attnum;
        reshaped := true;
    END LOOP;
    -- Renamed columns: two steps, so that swaps (a->b, b->a) work.
    FOR m IN SELECT cc.attnum, cc.name FROM @SCHEMA@.columns cc JOIN unnest(u_attnum, u_name) AS uc(attnum, name) USING (attnum)
              WHERE cc.id = p_id AND cc.name <> uc.name
    LOOP
        EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', c.history, m.name, 'mz_tmp_' || m.attnum);
        UPDATE @SCHEMA@.columns SET name = 'mz_tmp_' || m.attnum WHERE id = p_id AND attnum = m.attnum;
    END LOOP;
    FOR m IN SELECT cc.attnum, cc.name, uc.name AS newname FROM @SCHEMA@.columns cc JOIN unnest(u_attnum, u_name) AS uc(attnum, name) USING (attnum)
              WHERE cc.id = p_id AND cc.name <> uc.name
    LOOP
        EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', c.history, m.name, m.newname);
        UPDATE @SCHEMA@.columns SET name = m.newname WHERE id = p_id AND attnum = m.attnum;
    END LOOP;
    -- Changed types: convert history by cast; when there is no cast, the
    -- old versions get NULL (the current ones are rewritten by resync).
    FOR m IN SELECT cc.attnum, cc.name, uc.type FROM @SCHEMA@.columns cc JOIN unnest(u_attnum, u_type) AS uc(attnum, type) USING (attnum)
              WHERE cc.id = p_id AND cc.type <> uc.type
    LOOP
        BEGIN
            IF NOT @SCHEMA@.builtin_conversion(c.oid, m.attnum, c.history, m.name) THEN
                RAISE EXCEPTION 'no built-in conversion';  -- the old versions get NULL, below
            END IF;
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE %s USING %I::%s', c.history, m.name, m.type, m.name,
                           regexp_replace(m.type, ' COLLATE .*$', ''));
        EXCEPTION WHEN OTHERS THEN
            EXECUTE format('ALTER TABLE %s DROP COLUMN %I', c.history, m.name);
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s', c.history, m.name, m.type);
        END;
        UPDATE @SCHEMA@.columns SET type = m.type WHERE id = p_id AND attnum = m.attnum;
        refill := true;
    END LOOP;
    -- Added columns: NULL in every existing version.
    FOR m IN SELECT uc.* FROM unnest(u_attnum, u_name, u_type) AS uc(attnum, name, type)
              WHERE uc.attnum NOT IN (SELECT cc.attnum FROM @SCHEMA@.columns cc WHERE cc.id = p_id)
              ORDER BY uc.attnum
    LOOP
        IF NOT p_new THEN
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s', c.history, m.name, m.type);
        END IF;
        INSERT INTO @SCHEMA@.columns VALUES (p_id, m.attnum, m.name, m.type);
        reshaped := true;
        refill := refill OR @SCHEMA@.added_column_filled(c.oid, m.attnum);
    END LOOP;
    IF @SCHEMA@.pk_columns(c.oid) IS NULL THEN
        -- The current versions' hashes are of the whole row's text; a
        -- table that lost its primary key needs them made.
        refill := refill OR reshaped
                  OR to_regclass('@SCHEMA@.' || quote_ident('h' || p_id || '_mz_hash')) IS NULL;
    END IF;
    IF refill THEN
        PERFORM @SCHEMA@.resync(p_id, p_ts);
    END IF;
    PERFORM @SCHEMA@.sync_indexes(p_id);
    PERFORM @SCHEMA@.gen_triggers(p_id);
    PERFORM @SCHEMA@.sync_grants(p_id);
END
$$;

-- tag('ddl') (see trust.sql), without the call of tag.
CREATE OR REPLACE FUNCTION @SCHEMA@.ddl_mark() RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN (SELECT @SCHEMA@.key_tag(k.k, 'ddl') FROM @SCHEMA@.write_key k); END $$;

-- A CREATE INDEX statement on a managed table changes no column, name,
-- grant or trigger function (a primary key is made by ALTER TABLE), only
-- which lookup mirrors its history needs.
DO $edit$
DECLARE
    def text := pg_get_functiondef('@SCHEMA@.on_ddl_command_end()'::regprocedure);
    full_sync text := $a$            IF k.kind = 'table' THEN
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
$a$;
BEGIN
    IF (length(def) - length(replace(def, full_sync, ''))) / length(full_sync) <> 1 THEN
        RAISE EXCEPTION 'storage version 10: the reconcile of on_ddl_command_end was not found once';
    END IF;
    EXECUTE replace(def, full_sync, $a$            IF k.kind = 'table' AND TG_TAG = 'CREATE INDEX' THEN
                -- (Version 10: only the lookup mirrors. The statement's
                -- tag, not the command's: ALTER TABLE ... ADD UNIQUE
                -- reports an index of its own too.)
                PERFORM @SCHEMA@.sync_indexes(k.id);
                UPDATE @SCHEMA@.catalog SET revision = rev WHERE id = k.id;
            ELSIF k.kind = 'table' THEN
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
$a$);
END
$edit$;

REVOKE ALL ON FUNCTION @SCHEMA@.added_column_filled(oid, int2) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (10);
