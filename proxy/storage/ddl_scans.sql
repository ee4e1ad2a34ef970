-- mzproxy backend state, version 32 to 33: ALTER TABLE ADD/DROP COLUMN reads the
-- catalogs through their indexes (issue 16).
--
-- Measured with bench/ddlcost.sh (PostgreSQL under callgrind, backend
-- instructions per ADD COLUMN + DROP COLUMN pair in a proxy write, on a
-- new database: docs/ddl-cost.md): 7.67M at version 31, 0.61M directly.
-- A sixth of it was table_shape, and the largest single cost in the
-- profile was deforming catalog tuples: the generic plans of table_shape
-- and plain_column_change scan pg_index, pg_constraint and pg_trigger
-- sequentially and join pg_type by hashing all of it (671 rows on a new
-- database, growing by two per table), because on a database with few
-- tables a scan of a small catalog costs the planner less than an index
-- probe. In instructions it costs far more: every row is deformed and
-- filtered for the one or two wanted. And table_shape found the primary
-- key's column names by joining every attribute of the table, dropped
-- ones too (each ADD/DROP COLUMN leaves one), with a hash.
--
--  * table_shape and plain_column_change run with enable_seqscan = off.
--    They read only catalogs (by the table's oid, an index's key, a type's
--    oid) and mzproxy.columns (by its key), and call nothing that reads
--    more (the setting holds for what a function calls): an index probe
--    is the cheap plan for each, at any number of tables. The setting is
--    planning's only, so their plans are those of a database with many
--    tables. Not on the functions CREATE TABLE runs, which scan small
--    catalogs the same way: sync_triggers reaches take_spare_marker,
--    whose join with pg_class took 1.5 s a call with the setting.
--  * on_ddl_command_end looks up the rules of the views that depend on
--    an altered relation by their oid.
--  * table_shape looks up each key column's name by (attrelid, attnum).
--    Its text is unchanged, so the shapes recorded stay valid: no table is
--    synced again by the upgrade.
--
-- 7.67M -> 5.85M per pair (docs/ddl-cost.md has the command).

CREATE OR REPLACE FUNCTION @SCHEMA@.table_shape(p_id bigint) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp SET enable_seqscan = off
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
                                        -- (Version 33: each by its attnum.)
                                        CASE WHEN x.indisprimary THEN
                                            (SELECT string_agg(quote_ident((SELECT a.attname FROM pg_attribute a
                                                                             WHERE a.attrelid = x.indrelid AND a.attnum = k.attnum)),
                                                               ',' ORDER BY k.ord)
                                               FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord))
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

ALTER FUNCTION @SCHEMA@.plain_column_change(bigint, oid, text) SET enable_seqscan = off;

-- on_ddl_command_end's lookup of the views that depend on an altered
-- relation joined pg_rewrite by hashing all of it (152 rows on a new
-- database); now each dependent rule is looked up by its oid (none, for
-- a table no view reads).
DO $edit$
DECLARE
    old text := $$        SELECT array_agg(DISTINCT w.ev_class) INTO dependents
          FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
         WHERE d.refclassid$$;
    new text := $$        -- (Version 33: each rule by its oid, not a join that hashes
        -- pg_rewrite.)
        SELECT array_agg(DISTINCT (SELECT w.ev_class FROM pg_rewrite w WHERE w.oid = d.objid)) INTO dependents
          FROM pg_depend d
         WHERE d.refclassid$$;
    def text := pg_get_functiondef('@SCHEMA@.on_ddl_command_end()'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'ddl_scans.sql: the edit of on_ddl_command_end does not apply once';
    END IF;
    EXECUTE replace(def, old, new);
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (33);
