-- mzproxy backend state, version 12 to 13: managed DDL closer to
-- PostgreSQL's own cost (issue 16).
--
-- Measured with track_functions = all (ALTER TABLE ADD/DROP COLUMN on a
-- table (a int PRIMARY KEY, b text)) and bench/ddl.sh:
--
--  * ADD/DROP COLUMN made the table's trigger functions again: their text
--    spelled out the column list (the insertion's target and values, the
--    whole-row text the retraction checks), so each column change was
--    three CREATE OR REPLACE FUNCTIONs (with their validation and the
--    event triggers they fire), over half of reconcile's time. A history
--    table made from this version on puts mz_from, mz_to and mz_hash
--    first, so its remaining columns are the user's in the user's order
--    for good (an added column goes last in both, a dropped one from
--    both); its trigger functions name no column: versions are inserted
--    as SELECT _t, ..., n.* (PL/pgSQL plans again when the history table
--    changes, and every change to the user's columns changes it), and the
--    whole-row texts are the rows' own ((d.*)::text; a history row's text with
--    its three leading integers cut). Their text no longer changes with
--    the columns, so gen_triggers keeps them (its comparison with the text
--    in place, version 8). A history table whose columns are not in that
--    order (made before this version, or whose column a type change
--    dropped and added again) keeps the column lists.
--  * PostgreSQL 15 fsyncs every btree it builds (smgrimmedsync at the end
--    of _bt_load), also an empty one, and CREATE TABLE built four on the
--    history table: its TOAST index, mz_to, the lookup mirror of the
--    primary key, and the pending versions' (mz_from) WHERE mz_from < 0.
--    A new history table has one index (mz_to, mz_from) in place of the
--    last two but one: compaction (mz_to <= since), TRUNCATE and the
--    restamp of closed versions (mz_to = p) use its first column as they
--    used mz_to's index, reads of a timestamp both columns, and the
--    restamp finds a block's new versions as mz_to = Infinity AND mz_from
--    = p (a version a block both writes and closes is deleted by the
--    trigger, so every version with mz_from = p is current). One fsync
--    less per CREATE TABLE.
--  * The functions the event triggers call plan their catalog queries (by
--    oid and id, all through indexes) with PL/pgSQL's parameters, and
--    custom plans were chosen for some every time: a quarter of an ALTER
--    TABLE's backend time was planning. reconcile and manage_table (and
--    what they call) now run with plan_cache_mode = force_generic_plan,
--    so a session plans each of those queries once. After ALTER of a
--    relation, on_ddl_command_end planned its update of the dependent
--    views anew each time (1.5 ms at 1,000 tables): it now finds them
--    first (most relations have none) and updates only if there are any.
--  * Even unchanged, the trigger functions' text took a dozen catalog
--    queries to make and compare (a quarter of an ALTER TABLE's backend
--    time). reconcile now compares a signature of what that text depends
--    on (sync_triggers) first.
--  * user_columns (the user's columns as history stores them, read once
--    per ALTER TABLE and CREATE TABLE) called storage_type, a PL/pgSQL
--    function with a query of its own, for every column: now only for
--    domains and arrays, the types it may change.
--  * The trigger and restamp functions CREATE TABLE makes (six) were
--    compiled by PL/pgSQL's validator when made, and again when first
--    called: they are made with check_function_bodies = off.

-- Whether the history table of p_id has the column order of this version:
-- mz_from, mz_to, mz_hash, then the user's columns in the user's order.
CREATE FUNCTION @SCHEMA@.history_aligned(p_id bigint) RETURNS bool
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT array_agg(a.attname ORDER BY a.attnum)
              FROM @SCHEMA@.catalog k JOIN pg_attribute a ON a.attrelid = to_regclass(k.history)
             WHERE k.id = p_id AND a.attnum > 0 AND NOT a.attisdropped)
           = ARRAY['mz_from', 'mz_to', 'mz_hash']::name[]
             || coalesce((SELECT array_agg(c.name ORDER BY c.attnum) FROM @SCHEMA@.columns c WHERE c.id = p_id), '{}');
END
$$;

-- An expression for the text of the user's columns of history row p_alias
-- in an aligned history table: what ROW(<p_alias>.<column>, ...)::text
-- gives, with no column named. The row's own text is "(mz_from,mz_to,
-- mz_hash,<columns>)", and integers are never quoted; a table without
-- columns has the text "()" (which a one-column row of NULL has too, so
-- the two cannot share an expression).
CREATE FUNCTION @SCHEMA@.history_text(p_id bigint, p_alias text) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM @SCHEMA@.columns c WHERE c.id = p_id) THEN
        RETURN $t$'()'$t$;
    END IF;
    RETURN format($t$('(' || substr((%1$s.*)::text, length(%1$s.mz_from::text) + length(%1$s.mz_to::text) + length(%1$s.mz_hash::text) + 5))$t$,
                  p_alias);
END
$$;

-- The user's columns of table p_oid with the types their history columns
-- have (see trust.sql), as in version 6, with storage_type (a PL/pgSQL
-- call and a catalog query per column, recursive for arrays) called only
-- for domains and arrays: every other type is stored as it is.
CREATE OR REPLACE FUNCTION @SCHEMA@.user_columns(p_oid oid)
RETURNS TABLE (attnum int2, name name, type text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT a.attnum, a.attname,
           format_type(s.typ, s.typmod) ||
           CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                THEN ' COLLATE ' || quote_ident(cn.nspname) || '.' || quote_ident(co.collname)
                ELSE '' END
      FROM pg_attribute a
      JOIN pg_type u ON u.oid = a.atttypid
      CROSS JOIN LATERAL (
          -- (Each condition is on the outer row only: the branch not
          -- taken does not run.)
          SELECT x.typ, x.typmod FROM @SCHEMA@.storage_type(a.atttypid, a.atttypmod) x
           WHERE u.typtype = 'd' OR u.typcategory = 'A'
          UNION ALL
          SELECT a.atttypid, a.atttypmod
           WHERE NOT (u.typtype = 'd' OR u.typcategory = 'A')) s
      JOIN pg_type t ON t.oid = s.typ
      LEFT JOIN pg_collation co ON co.oid = a.attcollation
      LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
     WHERE a.attrelid = p_oid AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY a.attnum;
END
$$;

-- What reconcile runs for the trigger functions of table p_id: those of an
-- aligned history table depend only on the table's primary key (its
-- columns' names, operator classes, whether deferrable), on whether the
-- table has columns, and on gen_triggers itself. That signature is kept as
-- the comment of the table's _upd function; when it is unchanged and the
-- four triggers are in place, gen_triggers (a dozen catalog queries to
-- make the functions' text and compare it) does not run.
CREATE FUNCTION @SCHEMA@.sync_triggers(p_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel oid := (SELECT k.oid FROM @SCHEMA@.catalog k WHERE k.id = p_id);
    fn text := '@SCHEMA@.' || quote_ident('h' || p_id);
    sig text;
BEGIN
    IF @SCHEMA@.history_aligned(p_id) THEN
        SELECT md5(g.prosrc) || ' ' || EXISTS (SELECT 1 FROM @SCHEMA@.columns cc WHERE cc.id = p_id) || ' ' ||
               coalesce((SELECT x.indclass::text || ' ' || coalesce(con.condeferrable, false) || ' ' ||
                                (SELECT string_agg(quote_ident(a.attname), ',' ORDER BY k.ord)
                                   FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                                   JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum)
                           FROM pg_index x LEFT JOIN pg_constraint con ON con.conindid = x.indexrelid AND con.contype = 'p'
                          WHERE x.indrelid = rel AND x.indisprimary), 'no key')
          INTO sig
          FROM pg_proc g WHERE g.oid = '@SCHEMA@.gen_triggers(bigint)'::regprocedure;
        IF sig = obj_description(to_regprocedure(fn || '_upd()'), 'pg_proc')
           AND (SELECT count(*) FROM pg_trigger t
                 WHERE t.tgrelid = rel AND t.tgenabled = 'A'
                   AND (t.tgname, t.tgfoid) IN (('mzproxy_history_ins', to_regprocedure(fn || '_ins()')),
                                                ('mzproxy_history_upd', to_regprocedure(fn || '_upd()')),
                                                ('mzproxy_history_del', to_regprocedure(fn || '_del()')),
                                                ('mzproxy_history_trunc', to_regprocedure(fn || '_trunc()')))) = 4 THEN
            RETURN;
        END IF;
    END IF;
    PERFORM @SCHEMA@.gen_triggers(p_id);
    IF sig IS NOT NULL THEN
        EXECUTE format('COMMENT ON FUNCTION %s() IS %L', fn || '_upd', sig);
    END IF;
END
$$;

-- Edits to the text of functions as version 12 left them, so that
-- each body stays in one place; each edit must apply exactly once, or the
-- upgrade fails.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- A new history table: the validity columns first, and one index
        -- for mz_to and the pending versions.
        ['manage_table', $$    EXECUTE format('CREATE TABLE %s (%s mz_from int8 NOT NULL, mz_to int8 NOT NULL, mz_hash int4 NOT NULL)', hist, defs);
$$, $$    -- (Version 13: the validity columns first, see ddl_trim.sql.)
    EXECUTE format('CREATE TABLE %s (mz_from int8 NOT NULL, mz_to int8 NOT NULL, mz_hash int4 NOT NULL%s)', hist,
                   CASE WHEN defs = '' THEN '' ELSE ', ' || left(defs, -2) END);
$$],
        ['manage_table', $$    EXECUTE format('CREATE INDEX %I ON %s (mz_to)', 'h' || new_id || '_mz_to', hist);
    EXECUTE format('CREATE INDEX %I ON %s (mz_from) WHERE mz_from < 0', 'h' || new_id || '_pending', hist);
$$, $$    EXECUTE format('CREATE INDEX %I ON %s (mz_to, mz_from)', 'h' || new_id || '_mz_to', hist);
$$],
        -- The restamp finds a block's new versions among the current ones.
        ['gen_restamp', $$     WHERE (h.mz_to = p AND h.mz_to < 0) OR (h.mz_from = p AND h.mz_from < 0);$$,
         $$     WHERE (h.mz_to = p AND h.mz_to < 0)
        OR (h.mz_to = 9223372036854775807 AND h.mz_from = p AND h.mz_from < 0);$$],
        -- Trigger functions of an aligned history table name no column.
        ['gen_triggers', $$DECLARE
    c record;
$$, $$DECLARE
    c record;
    aligned bool;
$$],
        ['gen_triggers', $$    cols := @SCHEMA@.col_list(p_id, '');
    ncols := @SCHEMA@.col_list(p_id, 'n.');
    ntext := @SCHEMA@.row_text(p_id, 'n.');
    otext := @SCHEMA@.row_text(p_id, 'd.');
    htext := @SCHEMA@.row_text(p_id, 'h.');
$$, $$    aligned := @SCHEMA@.history_aligned(p_id);
    IF aligned THEN
        -- (Version 13: the rows' own texts, see ddl_trim.sql.)
        -- ("n.*": a bare "n" would be the user's column n, if any.)
        ntext := '(n.*)::text';
        otext := '(d.*)::text';
        htext := @SCHEMA@.history_text(p_id, 'h');
    ELSE
        cols := @SCHEMA@.col_list(p_id, '');
        ncols := @SCHEMA@.col_list(p_id, 'n.');
        ntext := @SCHEMA@.row_text(p_id, 'n.');
        otext := @SCHEMA@.row_text(p_id, 'd.');
        htext := @SCHEMA@.row_text(p_id, 'h.');
    END IF;
$$],
        ['gen_triggers', $$        CASE WHEN ncols = '' THEN '' ELSE ncols || ',' END, hash_expr);
$$, $$        CASE WHEN ncols = '' THEN '' ELSE ncols || ',' END, hash_expr);
    IF aligned THEN
        -- The history table's columns are the new rows' after the first three.
        insert_sql := format($i$
    INSERT INTO %s
    SELECT _t, 9223372036854775807, %s, n.* FROM mz_new n;$i$, h, hash_expr);
    END IF;
$$],
        -- reconcile keeps the trigger functions through their signature.
        ['reconcile', $$    PERFORM @SCHEMA@.gen_triggers(p_id);
$$, $$    PERFORM @SCHEMA@.sync_triggers(p_id);  -- version 13
$$],
        ['gen_triggers', $$@SCHEMA@.row_text(p_id, 'x.'))$$,
         $$CASE WHEN aligned THEN @SCHEMA@.history_text(p_id, 'x') ELSE @SCHEMA@.row_text(p_id, 'x.') END)$$],
        -- After ALTER of a relation, its dependent views are found first
        -- (most relations have none), and only they are compared with
        -- their deparsed text.
        ['on_ddl_command_end', $$    altered oid[] := '{}';
$$, $$    altered oid[] := '{}';
    dependents oid[];
$$],
        ['on_ddl_command_end', $$        UPDATE @SCHEMA@.catalog g SET view_sql = @SCHEMA@.view_definition(g.oid)
         WHERE g.kind = 'view' AND g.dropped_ts IS NULL
           AND g.oid IN (SELECT w.ev_class FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
                          WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY (altered)
                            AND d.classid = 'pg_rewrite'::regclass)
           AND g.view_sql IS DISTINCT FROM @SCHEMA@.view_definition(g.oid);
$$, $$        -- (Version 13: the views first, then the update only if any.)
        SELECT array_agg(DISTINCT w.ev_class) INTO dependents
          FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
         WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY (altered)
           AND d.classid = 'pg_rewrite'::regclass;
        IF dependents IS NOT NULL THEN
            UPDATE @SCHEMA@.catalog g SET view_sql = @SCHEMA@.view_definition(g.oid)
             WHERE g.kind = 'view' AND g.dropped_ts IS NULL AND g.oid = ANY (dependents)
               AND g.view_sql IS DISTINCT FROM @SCHEMA@.view_definition(g.oid);
        END IF;
$$]];
    i int;
    def text;
BEGIN
    -- Edits apply one by one (each function is replaced after each edit).
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regproc);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
            RAISE EXCEPTION 'ddl_trim.sql: edit % of % does not apply once', i, edits[i][1];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

-- (Not the event triggers themselves: a generic plan of on_ddl_command_end's
-- update of dependent views deparses every view before it filters.)
ALTER FUNCTION @SCHEMA@.reconcile(bigint, bigint, bool) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION @SCHEMA@.manage_table(oid, bigint, bigint) SET plan_cache_mode = force_generic_plan;
-- The functions gen_triggers and gen_restamp make are not compiled when
-- made (their text is generated, and the tests run every form of it).
ALTER FUNCTION @SCHEMA@.gen_triggers(bigint) SET check_function_bodies = off;
ALTER FUNCTION @SCHEMA@.gen_restamp(bigint) SET check_function_bodies = off;

REVOKE ALL ON FUNCTION @SCHEMA@.history_aligned(bigint), @SCHEMA@.history_text(bigint, text),
    @SCHEMA@.sync_triggers(bigint) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (13);
