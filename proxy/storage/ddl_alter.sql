-- mzproxy backend state, version 23 to 24: ALTER TABLE ADD
-- and DROP COLUMN without the trigger and index checks whose answer they
-- cannot change (issue 16).
--
-- Measured (track_functions = 'all', warm, 60 ALTER TABLE ADD/DROP COLUMN
-- of a non-key column through mzproxy, per statement): the event triggers
-- took 3.0 ms, of which reconcile 2.2 (its own statements and the history
-- table's ALTER 0.8, sync_indexes 0.48, sync_triggers 0.43 with
-- history_aligned, user_columns 0.22, pk_columns 0.21 in two calls,
-- sync_grants 0.08), on_ddl_command_end's own statements 0.69 and, for a
-- DROP COLUMN, on_sql_drop 0.24. The proxy's own statements (the write
-- slot and COMMIT) are sent with the DDL in one flush and took 0.2 ms.
--
-- sync_indexes, sync_triggers and sync_grants find nothing to do after a
-- column change that leaves the table's indexes, mzproxy's triggers and
-- the table's owner and grants as they were:
--
--  * the history table's lookup mirrors follow the table's unique indexes
--    (by oid; other indexes have none, so a CREATE INDEX of a plain index
--    changes nothing here) and the hash index its primary key's absence;
--  * the trigger functions' text depends on gen_triggers' own text (its
--    row version in pg_proc stands for it), whether the table has
--    columns, its primary key (columns, operator classes, deferrability)
--    and the history table's alignment (a history whose columns follow
--    the table's, version 13); the four triggers must exist and be
--    enabled;
--  * the history table's readers follow the table's owner and grants
--    (GRANT and REVOKE, which are not ALTER TABLE, sync every table at
--    ddl_command_end as before).
--
-- An ADD or DROP COLUMN keeps an aligned history aligned (reconcile adds
-- at the end of both, drops from both), and so does a RENAME COLUMN (both
-- renamed). A type change may not (a column without a cast is added again
-- at the end): it refills history, and reconcile then syncs as before.
--
-- So sync_triggers now records in catalog.shape, when the history is
-- aligned, what all of that reads (table_shape: one statement over
-- pg_index, pg_constraint, pg_attribute, pg_trigger and pg_class by the
-- table's oid, and gen_triggers' row version). reconcile compares it with
-- table_shape now and skips the three syncs when nothing is refilled and
-- the shape is unchanged. A table made before this version has no shape
-- yet: its next ALTER syncs as before and records it. A later version
-- that makes gen_triggers again changes every table's shape, so each
-- table's next ALTER checks its triggers, as before.
--
-- This version replaces sync_triggers (last defined by ddl_trim.sql and
-- edited by ddl_fast.sql and ddl_lean.sql) whole, and edits reconcile.

ALTER TABLE @SCHEMA@.catalog ADD COLUMN shape text;  -- (Version 24: see table_shape.)

-- What sync_indexes and sync_triggers read of managed table p_id, in one
-- text: equal texts, equal results.
CREATE FUNCTION @SCHEMA@.table_shape(p_id bigint) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel oid := (SELECT k.oid FROM @SCHEMA@.catalog k WHERE k.id = p_id);
BEGIN
    -- gen_triggers' row version, not md5 of its text (a third of a
    -- millisecond: the text is long, compressed and out of line): any
    -- CREATE OR REPLACE makes a new row version. (A row moved by VACUUM
    -- FULL only makes each table sync once more.)
    RETURN (SELECT g.xmin || ' ' || g.ctid FROM pg_proc g WHERE g.oid = '@SCHEMA@.gen_triggers(bigint)'::regprocedure)
        || ' ' || EXISTS (SELECT 1 FROM @SCHEMA@.columns cc WHERE cc.id = p_id)
        || ' ' || coalesce((
            SELECT string_agg(concat_ws(' ', x.indexrelid, x.indisprimary, x.indisunique, x.indpred IS NULL,
                                        x.indexprs IS NULL, x.indkey::text, x.indclass::text, con.condeferrable,
                                        -- The key's column names are in the triggers' text.
                                        CASE WHEN x.indisprimary THEN
                                            (SELECT string_agg(quote_ident(a.attname), ',' ORDER BY k.ord)
                                               FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                                               JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum)
                                        END), ';' ORDER BY x.indexrelid)
              FROM pg_index x LEFT JOIN pg_constraint con
                ON con.conrelid = x.indrelid AND con.conindid = x.indexrelid AND con.contype = 'p'
             -- Only unique indexes (the key's among them) have mirrors: a
             -- CREATE INDEX of another kind leaves the shape as it was.
             WHERE x.indrelid = rel AND x.indisunique), 'no index')
        || ' ' || coalesce((
            SELECT string_agg(concat_ws(' ', t.tgname, t.tgfoid, t.tgenabled), ';' ORDER BY t.tgname)
              FROM pg_trigger t
             WHERE t.tgrelid = rel AND t.tgname LIKE 'mzproxy\_history\_%'), 'no trigger')
        -- Who may read the table, and so its history (sync_grants).
        || ' ' || (SELECT concat_ws(' ', r.relowner, r.relacl::text) FROM pg_class r WHERE r.oid = rel);
END
$$;

-- As before (ddl_trim.sql, ddl_fast.sql, ddl_lean.sql), and at the end the
-- table's shape recorded: only when its history is aligned (otherwise the
-- triggers name every column, and any column change must make them again).
CREATE OR REPLACE FUNCTION @SCHEMA@.sync_triggers(p_id bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel oid := (SELECT k.oid FROM @SCHEMA@.catalog k WHERE k.id = p_id);
    fn text := '@SCHEMA@.' || quote_ident('h' || p_id);
    aligned bool := @SCHEMA@.history_aligned(p_id);
    sig text;
BEGIN
    IF aligned THEN
        SELECT md5(g.prosrc) || ' ' || EXISTS (SELECT 1 FROM @SCHEMA@.columns cc WHERE cc.id = p_id) || ' ' ||
               coalesce((SELECT x.indclass::text || ' ' || coalesce(con.condeferrable, false) || ' ' ||
                                (SELECT string_agg(quote_ident(a.attname), ',' ORDER BY k.ord)
                                   FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                                   JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum)
                           FROM pg_index x LEFT JOIN pg_constraint con
                            ON con.conrelid = x.indrelid AND con.conindid = x.indexrelid AND con.contype = 'p'
                          WHERE x.indrelid = rel AND x.indisprimary), 'no key')
          INTO sig
          FROM pg_proc g WHERE g.oid = '@SCHEMA@.gen_triggers(bigint)'::regprocedure;
    END IF;
    IF sig IS NULL
       OR sig IS DISTINCT FROM (SELECT d.description FROM pg_description d
                                 WHERE d.objoid = to_regprocedure(fn || '_upd()') AND d.classoid = 'pg_proc'::regclass
                                   AND d.objsubid = 0)
       OR (SELECT count(*) FROM pg_trigger t
            WHERE t.tgrelid = rel AND t.tgenabled = 'A'
              AND (t.tgname, t.tgfoid) IN (('mzproxy_history_ins', to_regprocedure(fn || '_ins()')),
                                           ('mzproxy_history_upd', to_regprocedure(fn || '_upd()')),
                                           ('mzproxy_history_del', to_regprocedure(fn || '_del()')),
                                           ('mzproxy_history_trunc', to_regprocedure(fn || '_trunc()')))) <> 4 THEN
        PERFORM @SCHEMA@.gen_triggers(p_id);
        IF sig IS NOT NULL THEN
            EXECUTE format('COMMENT ON FUNCTION %s() IS %L', fn || '_upd', sig);
        END IF;
    END IF;
    -- (Version 24.)
    UPDATE @SCHEMA@.catalog k SET shape = s.shape
      FROM (SELECT CASE WHEN aligned THEN @SCHEMA@.table_shape(p_id) END AS shape) s
     WHERE k.id = p_id AND k.shape IS DISTINCT FROM s.shape;
END
$$;

-- reconcile: the three syncs only when the shape may have changed, and
-- the primary key's presence read directly.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        ['reconcile', $$    PERFORM @SCHEMA@.sync_indexes(p_id);
    PERFORM @SCHEMA@.sync_triggers(p_id);  -- version 13
    PERFORM @SCHEMA@.sync_grants(p_id);
$$, $$    -- (Version 24: nothing else changes what they read, ddl_alter.sql.)
    IF refill OR c.shape IS NULL OR c.shape <> @SCHEMA@.table_shape(p_id) THEN
        PERFORM @SCHEMA@.sync_indexes(p_id);
        PERFORM @SCHEMA@.sync_triggers(p_id);  -- version 13
        PERFORM @SCHEMA@.sync_grants(p_id);
    END IF;
$$],
        -- Whether the table has a primary key, without pk_columns' names
        -- (a join with pg_attribute, a tenth of a millisecond an ALTER).
        ['reconcile', $$    IF @SCHEMA@.pk_columns(c.oid) IS NULL THEN
$$, $$    IF NOT EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND x.indisprimary) THEN  -- (version 24)
$$]];
    i int;
    def text;
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regproc);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
            RAISE EXCEPTION 'ddl_alter.sql: edit % of % does not apply once', i, edits[i][1];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

REVOKE ALL ON FUNCTION @SCHEMA@.table_shape(bigint) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (24);
