-- bench/ddlcost.sh VARIANTS file (docs/ddl-cost.md, session 15): lazy.sql
-- with the table's two marker sequences made at CREATE, as storage 36 does.
CREATE OR REPLACE FUNCTION mzproxy.history_pending() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
    RAISE EXCEPTION 'history of %.% is not built', TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = 'MZ004';
END
$f$;
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
    INSERT INTO mzproxy.collections (id, since) VALUES (new_id, p_ts);
    EXECUTE format('CREATE TRIGGER mzproxy_history_pending BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION mzproxy.history_pending()', rel);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER mzproxy_history_pending', rel);
    PERFORM mzproxy.make_marker(p_oid);
    RETURN new_id;
END
$$;
