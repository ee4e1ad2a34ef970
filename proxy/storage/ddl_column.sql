-- mzproxy backend state, version 28 to 29: ALTER TABLE ADD COLUMN
-- (nullable, no default) and DROP COLUMN with one catalog read and one
-- change of the history table, and every DDL's timestamp in one statement
-- (issue 16).
--
-- Measured (track_functions = 'all', 100 ALTER TABLE ADD/DROP COLUMN of a
-- non-key column in a proxy write, per statement, docs/ddl-cost.md): the
-- event triggers ran 34 (ADD) and 37 (DROP) nested statements; reconcile
-- read the table's columns through user_columns (a quarter of the event
-- triggers' time, a PL/pgSQL RETURN QUERY over pg_attribute, pg_type,
-- storage_type and pg_collation, aggregated into three arrays), then ran
-- five queries comparing them with mzproxy.columns (dropped, renamed
-- twice, retyped, added), one ALTER of the history table and one
-- catalog write per column, added_column_filled per added column and the
-- primary key's presence; and current_write_ts took the DDL's timestamp
-- through five PL/pgSQL calls (write_slot, tag, choose_ts, pinned_ts,
-- set_slot) and two SHA-256 tags.
--
-- An ALTER that only adds plain columns without a value (nullable, no
-- default, identity or generation, not of a domain) or drops columns, on
-- a table with a primary key, changes no row's value: history needs the
-- same columns added and dropped, nothing refilled. plain_column_change
-- finds that in one statement over pg_attribute, pg_type and
-- mzproxy.columns, and then runs one ALTER of the history table and one
-- write of mzproxy.columns. reconcile's checks of the table's indexes,
-- triggers and grants (table_shape, version 24) follow as before. Anything
-- else (a rename, a type change, a column with a value, a column whose
-- type text user_columns spells differently from format_type: domains,
-- arrays, a collation other than its type's) takes the full path, as
-- before. Tables need no upgrade: the fast path reads only the catalog.
--
-- ddl_ts is current_write_ts for the event triggers: the slot's tag
-- checked and, for a pending slot, T chosen and the slot tagged again, in
-- one statement; any other slot (none, or one a later fix must settle,
-- or a forged one) goes to current_write_ts, which answers or refuses it
-- as before. The write path keeps current_write_ts.
--
-- The event triggers now run with plan_cache_mode = force_generic_plan,
-- as reconcile does since version 10: PL/pgSQL keeps a statement's
-- generic plan only when it costs no more than the custom ones, and
-- several of theirs were planned again at every DDL (planning was 16% of
-- the backend's CPU in a run of ADD/DROP COLUMN under perf; backend CPU
-- per ALTER 2.0-2.2 -> 1.65-1.9 ms in three alternated rounds). The
-- plans are the same index scans by oid.
--
-- This version edits reconcile, on_ddl_command_end and on_sql_drop.

-- Whether the table p_oid (catalog id p_id) changed since its last
-- reconcile only by plain columns added or columns dropped; if so, history
-- and mzproxy.columns are changed to match. False (nothing done) when the
-- full reconcile is needed.
CREATE FUNCTION @SCHEMA@.plain_column_change(p_id bigint, p_oid oid, p_history text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d record;
BEGIN
    WITH live AS (
        SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type,
               -- user_columns' type text is format_type's exactly then.
               t.typtype <> 'd' AND t.typcategory <> 'A' AND a.attcollation = t.typcollation AS plain,
               -- (added_column_filled, with the domain in plain.)
               a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' AS filled
          FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
         WHERE a.attrelid = p_oid AND a.attnum > 0 AND NOT a.attisdropped),
    known AS (SELECT cc.attnum, cc.name, cc.type FROM @SCHEMA@.columns cc WHERE cc.id = p_id)
    SELECT coalesce(bool_and(CASE WHEN k.attnum IS NULL THEN l.plain AND NOT l.filled
                                                          AND l.attname NOT IN ('mz_from', 'mz_to', 'mz_hash')
                                  WHEN l.attnum IS NULL THEN true
                                  ELSE l.plain AND l.attname = k.name AND l.type = k.type END), false)
           AND EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = p_oid AND x.indisprimary) AS ok,
           array_agg(k.attnum) FILTER (WHERE l.attnum IS NULL) AS gone,
           array_agg(l.attnum ORDER BY l.attnum) FILTER (WHERE k.attnum IS NULL) AS added_attnum,
           array_agg(l.attname ORDER BY l.attnum) FILTER (WHERE k.attnum IS NULL) AS added_name,
           array_agg(l.type ORDER BY l.attnum) FILTER (WHERE k.attnum IS NULL) AS added_type,
           -- Drops before adds, as PostgreSQL runs an ALTER's subcommands
           -- (a column dropped and added again by name). A column a
           -- cascade (DROP TYPE ... CASCADE) dropped from history already
           -- is not dropped again.
           concat_ws(', ',
               string_agg(format('DROP COLUMN %I', k.name), ', ' ORDER BY k.attnum)
                   FILTER (WHERE l.attnum IS NULL AND EXISTS (
                       SELECT 1 FROM pg_attribute h
                        WHERE h.attrelid = p_history::regclass AND h.attname = k.name AND NOT h.attisdropped)),
               string_agg(format('ADD COLUMN %I %s', l.attname, l.type), ', ' ORDER BY l.attnum)
                   FILTER (WHERE k.attnum IS NULL)) AS alter_history
      INTO d
      FROM live l FULL JOIN known k ON k.attnum = l.attnum;
    IF NOT d.ok THEN
        RETURN false;
    END IF;
    IF d.alter_history <> '' THEN
        EXECUTE format('ALTER TABLE %s %s', p_history, d.alter_history);
    END IF;
    IF d.gone IS NOT NULL OR d.added_attnum IS NOT NULL THEN
        WITH dropped AS (DELETE FROM @SCHEMA@.columns cc WHERE cc.id = p_id AND cc.attnum = ANY (d.gone))
        INSERT INTO @SCHEMA@.columns
        SELECT p_id, u.attnum, u.name, u.type FROM unnest(d.added_attnum, d.added_name, d.added_type) AS u(attnum, name, type);
    END IF;
    RETURN true;
END
$$;

-- current_write_ts for the event triggers, in one statement when the slot
-- is tagged and either pending (T chosen as choose_ts does: after the
-- clock and the pin, and the slot set as set_slot(T, NULL) sets it) or
-- already stamped.
CREATE FUNCTION @SCHEMA@.ddl_ts() RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    t bigint;
BEGIN
    SELECT CASE WHEN s.pending
                -- The slot set, then T (set_config's result is never NULL).
                THEN CASE WHEN set_config('mzproxy.write_ts', s.t || ' - ' || @SCHEMA@.key_tag(s.k, s.t || ' -'), true) IS NOT NULL
                          THEN s.t END
                ELSE s.t END
      INTO t
      FROM (SELECT CASE WHEN p.vt = '0'
                        THEN GREATEST(@SCHEMA@.now_ms(),
                                      (SELECT CASE WHEN q.is_called THEN q.last_value
                                                   ELSE GREATEST(@SCHEMA@.now_ms() + 1000, (SELECT u.upper FROM @SCHEMA@.txns_durable u)) END
                                         FROM @SCHEMA@.pinned q) + 1)
                        ELSE p.vt::bigint END AS t,
                   p.vt = '0' AS pending, p.k
              FROM (SELECT split_part(v.v, ' ', 1) AS vt, split_part(v.v, ' ', 2) AS ve,
                           split_part(v.v, ' ', 3) AS tg, split_part(v.v, ' ', 4) AS rest, w.k
                      FROM (SELECT current_setting('mzproxy.write_ts', true) AS v) v, @SCHEMA@.write_key w) p
             -- A tag proves set_slot wrote both numbers (write_slot).
             WHERE p.tg = @SCHEMA@.key_tag(p.k, p.vt || ' ' || p.ve) AND p.rest = ''
               AND (p.vt = '0' OR p.vt ~ '^[1-9][0-9]*$')) s;
    IF FOUND THEN
        RETURN t;
    END IF;
    RETURN @SCHEMA@.current_write_ts();
END
$$;

DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- (1) reconcile's fast path, after the name's update.
        ['reconcile(bigint,bigint,boolean)', $$     WHERE k.id = p_id AND r.oid = k.oid AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname);
$$, $$     WHERE k.id = p_id AND r.oid = k.oid AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname);
    -- (Version 29: plain columns added or columns dropped, nothing else,
    -- in one read; the shape checked as below.)
    IF NOT p_new AND @SCHEMA@.plain_column_change(p_id, c.oid, c.history) THEN
        IF c.shape IS NULL OR c.shape <> @SCHEMA@.table_shape(p_id) THEN
            PERFORM @SCHEMA@.sync_indexes(p_id);
            PERFORM @SCHEMA@.sync_triggers(p_id);
            PERFORM @SCHEMA@.sync_grants(p_id);
        END IF;
        RETURN;
    END IF;
$$],
        -- (2) to (4): the event triggers' timestamp in one statement.
        ['on_ddl_command_end()', $$    ts := @SCHEMA@.current_write_ts();
$$, $$    ts := @SCHEMA@.ddl_ts();  -- (version 29)
$$],
        ['on_sql_drop()', $$                ts := coalesce(ts, @SCHEMA@.current_write_ts());
$$, $$                ts := coalesce(ts, @SCHEMA@.ddl_ts());  -- (version 29)
$$],
        ['on_sql_drop()', $$        ts := coalesce(ts, @SCHEMA@.current_write_ts());
$$, $$        ts := coalesce(ts, @SCHEMA@.ddl_ts());  -- (version 29)
$$]];
    i int;
    def text;
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regprocedure);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
            RAISE EXCEPTION 'ddl_column.sql: edit % of % does not apply once', i, edits[i][1];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

ALTER FUNCTION @SCHEMA@.on_ddl_command_end() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION @SCHEMA@.on_sql_drop() SET plan_cache_mode = force_generic_plan;

REVOKE ALL ON FUNCTION @SCHEMA@.plain_column_change(bigint, oid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @SCHEMA@.ddl_ts() FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (29);
