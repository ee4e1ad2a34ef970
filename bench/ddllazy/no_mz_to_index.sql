-- bench/ddlcost.sh VARIANTS file (docs/ddl-cost.md, session 15): storage
-- 36's manage_table without the history's (mz_to, mz_from) index: what
-- one btree costs a CREATE TABLE (compaction and restamp need that index).
CREATE OR REPLACE FUNCTION mzproxy.manage_table(p_oid oid, p_ts bigint, p_rev bigint) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    new_id bigint := nextval('mzproxy.catalog_id_seq');
    hist text := 'mzproxy.' || quote_ident('h' || new_id);
    rel text;
    reserved bool;
    defs text;
    has_rows bool;
BEGIN
    INSERT INTO mzproxy.catalog (id, kind, oid, schema_name, name, history, created_ts, revision)
    SELECT new_id, 'table', r.oid, n.nspname, r.relname, hist, p_ts, p_rev
      FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = p_oid
    RETURNING format('%I.%I', schema_name, name) INTO rel;
    INSERT INTO mzproxy.columns (id, attnum, name, type)
    SELECT new_id, uc.attnum, uc.name, uc.type FROM mzproxy.user_columns(p_oid) uc;
    SELECT coalesce(bool_or(c.name IN ('mz_from', 'mz_to', 'mz_hash')), false),
           coalesce(string_agg(format('%I %s', c.name, c.type), ', ' ORDER BY c.attnum) || ', ', '')
      INTO reserved, defs FROM mzproxy.columns c WHERE c.id = new_id;
    IF reserved THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    -- (Version 13: the validity columns first, see ddl_trim.sql.)
    EXECUTE format('CREATE TABLE %s (mz_from int8 NOT NULL, mz_to int8 NOT NULL, mz_hash int4 NOT NULL%s)', hist,
                   CASE WHEN defs = '' THEN '' ELSE ', ' || left(defs, -2) END);
    INSERT INTO mzproxy.collections (id, since) VALUES (new_id, p_ts);
    -- Rows the table already has (CREATE TABLE AS, SELECT INTO) become
    -- versions at p_ts.
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', rel) INTO has_rows;
    IF has_rows THEN
        PERFORM mzproxy.resync(new_id, p_ts);
    END IF;
    PERFORM mzproxy.sync_indexes(new_id);
    PERFORM mzproxy.sync_triggers(new_id);  -- version 16: with its signature
    PERFORM mzproxy.sync_grants(new_id);
    RETURN new_id;
END
$$;
