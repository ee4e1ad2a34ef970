-- mzproxy backend state, version 7 to 8: DDL at PostgreSQL's speed
-- (issue 16), its cost flat in the number of tables.
--
-- Measured with track_functions = all at 1,000 managed tables, one cycle of
-- CREATE TABLE, CREATE INDEX, ALTER TABLE ADD/DROP COLUMN, CREATE/DROP
-- VIEW, DROP INDEX, DROP TABLE cost ~160 ms in the event triggers, against
-- ~16 ms for the same statements on plain tables:
--
--  * DROP INDEX looked for the history mirror of the dropped index with a
--    regular expression over all of pg_class (15 ms at 1,000 tables, ten
--    times that at 10,000). Mirrors are now recorded in index_mirrors,
--    keyed by the user index's oid: one index probe.
--  * gen_triggers made the four trigger functions and the four triggers
--    again after every DDL on a table (7 ms), also when nothing they spell
--    out changed (CREATE INDEX, DROP INDEX of a non-key index, a rename).
--    It now keeps them when the generated text is what is there.
--  * Every DDL mzproxy runs itself (about ten per user statement: history
--    table, indexes, functions, triggers) fires the event triggers, which
--    read the write slot (a tag check) before seeing that the DDL is
--    mzproxy's own and returning. They now check that first.
--  * Replacing them kept their grants, yet gen_triggers revoked again;
--    sync_grants granted the history table's owner SELECT on it after
--    every DDL (when it owns the user table too, as it does when one role
--    does everything); ALTER TABLE DROP COLUMN reconciled its table twice
--    (at sql_drop, then at ddl_command_end). Each was DDL that changed
--    nothing, with its event triggers.
--  * resync, run after ALTER TABLE ADD/DROP COLUMN, built a temporary table
--    even for a table with no rows and no current versions; it now returns
--    at once then.
--  * Every ALTER deparsed every managed view again (its name might be in
--    their text); after ALTER of a relation only the views depending on
--    it are.
--  * pk_columns and col_list, SQL functions planned on every call (pk_columns
--    has a SET clause, col_list an aggregate), are PL/pgSQL, whose plans
--    are kept for the session, as user_columns became in version 5.

-- The history mirror of each of the user's unique indexes (see
-- sync_indexes), by the user index's oid. A row whose index went with its
-- table is removed by on_sql_drop; its mirror stays with the history table
-- until compaction drops that.
CREATE TABLE @SCHEMA@.index_mirrors (
    index_oid oid PRIMARY KEY,
    mirror name NOT NULL
);
-- The mirrors there are. One left on the history of a dropped table may
-- carry the oid of a newer index (oids come round again): the mirror of a
-- table not dropped goes in first and wins.
INSERT INTO @SCHEMA@.index_mirrors (index_oid, mirror)
SELECT substring(c.relname FROM '_k([0-9]+)$')::oid, c.relname
  FROM pg_class c
  LEFT JOIN @SCHEMA@.catalog k ON k.id = substring(c.relname FROM '^h([0-9]+)_')::bigint
 WHERE c.relnamespace = '@SCHEMA@'::regnamespace AND c.relkind = 'i' AND c.relname ~ '^h[0-9]+_k[0-9]+$'
 ORDER BY k.dropped_ts IS NULL DESC
ON CONFLICT (index_oid) DO NOTHING;

CREATE OR REPLACE FUNCTION @SCHEMA@.pk_columns(p_oid oid) RETURNS name[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT array_agg(a.attname ORDER BY k.ord)
              FROM pg_index i
              CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = p_oid AND i.indisprimary);
END
$$;

CREATE OR REPLACE FUNCTION @SCHEMA@.col_list(p_id bigint, p_alias text) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT coalesce(string_agg(p_alias || quote_ident(c.name), ', ' ORDER BY c.attnum), '')
              FROM @SCHEMA@.columns c WHERE c.id = p_id);
END
$$;

-- Mirror the user's primary key and unique indexes as lookup indexes on the
-- history table (key columns plus mz_to), and drop mirrors of indexes that
-- are gone; as in version 1, with each mirror recorded in index_mirrors.
CREATE OR REPLACE FUNCTION @SCHEMA@.sync_indexes(p_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    i record;
BEGIN
    SELECT * INTO c FROM @SCHEMA@.catalog WHERE id = p_id;
    -- The hash lookup serves retraction in tables without a primary key;
    -- only current versions are ever looked up.
    IF @SCHEMA@.pk_columns(c.oid) IS NULL THEN
        IF to_regclass('@SCHEMA@.' || quote_ident('h' || p_id || '_mz_hash')) IS NULL THEN
            EXECUTE format('CREATE INDEX %I ON %s (mz_hash) WHERE mz_to = 9223372036854775807', 'h' || p_id || '_mz_hash', c.history);
        END IF;
    ELSIF to_regclass('@SCHEMA@.' || quote_ident('h' || p_id || '_mz_hash')) IS NOT NULL THEN
        EXECUTE format('DROP INDEX @SCHEMA@.%I', 'h' || p_id || '_mz_hash');
    END IF;
    FOR i IN
        SELECT x.indexrelid, format('h%s_k%s', p_id, x.indexrelid) AS mirror,
               (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord)
                  FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                  JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum) AS cols
          FROM pg_index x
         WHERE x.indrelid = c.oid AND x.indisunique AND x.indpred IS NULL AND x.indexprs IS NULL
           AND NOT (0 = ANY (x.indkey::int2[]))
           AND NOT EXISTS (SELECT 1 FROM pg_class ic
                            WHERE ic.relnamespace = '@SCHEMA@'::regnamespace
                              AND ic.relname = format('h%s_k%s', p_id, x.indexrelid))
    LOOP
        EXECUTE format('CREATE INDEX %I ON %s (%s, mz_to)', i.mirror, c.history, i.cols);
        -- An oid left by an index whose table was dropped may come again.
        INSERT INTO @SCHEMA@.index_mirrors (index_oid, mirror) VALUES (i.indexrelid, i.mirror)
        ON CONFLICT (index_oid) DO UPDATE SET mirror = EXCLUDED.mirror;
    END LOOP;
    FOR i IN
        SELECT ic.relname, substring(ic.relname FROM '_k([0-9]+)$')::oid AS index_oid
          FROM pg_class ic JOIN pg_index x ON x.indexrelid = ic.oid
         WHERE x.indrelid = c.history::regclass AND ic.relname ~ ('^h' || p_id || '_k[0-9]+$')
           AND NOT EXISTS (SELECT 1 FROM pg_index ux
                            WHERE ux.indrelid = c.oid AND ux.indexrelid::text = substring(ic.relname FROM '_k([0-9]+)$'))
    LOOP
        EXECUTE format('DROP INDEX @SCHEMA@.%I', i.relname);
        DELETE FROM @SCHEMA@.index_mirrors m WHERE m.index_oid = i.index_oid AND m.mirror = i.relname;
    END LOOP;
END
$$;

-- Edits to the text of functions as earlier versions (and trust.sql's
-- rewrite) left them, so that each body stays in one place; each edit must
-- apply exactly once, or the upgrade fails.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- After ALTER of a relation, only the views that depend on it are
        -- deparsed again (an index probe of pg_depend), not every managed
        -- view; ALTER of anything else (a schema, type, function) still
        -- deparses all.
        ['on_ddl_command_end', $$    renames bool := false;
$$, $$    renames bool := false;
    altered oid[] := '{}';
$$],
        ['on_ddl_command_end', $$        renames := renames OR r.command_tag LIKE 'ALTER %';
$$, $$        IF r.command_tag LIKE 'ALTER %' THEN
            IF r.classid = 'pg_class'::regclass THEN
                altered := altered || r.objid;
            ELSE
                renames := true;
            END IF;
        END IF;
$$],
        ['on_ddl_command_end', $$         WHERE kind = 'view' AND dropped_ts IS NULL AND view_sql IS DISTINCT FROM @SCHEMA@.view_definition(oid);
    END IF;
$$, $$         WHERE kind = 'view' AND dropped_ts IS NULL AND view_sql IS DISTINCT FROM @SCHEMA@.view_definition(oid);
    ELSIF altered <> '{}' THEN
        -- A relation's name (or its columns' or schema's) is in the text of
        -- the views whose rules depend on it, and only there.
        UPDATE @SCHEMA@.catalog g SET view_sql = @SCHEMA@.view_definition(g.oid)
         WHERE g.kind = 'view' AND g.dropped_ts IS NULL
           AND g.oid IN (SELECT w.ev_class FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
                          WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY (altered)
                            AND d.classid = 'pg_rewrite'::regclass)
           AND g.view_sql IS DISTINCT FROM @SCHEMA@.view_definition(g.oid);
    END IF;
$$],
        -- The event triggers: mzproxy's own DDL returns before the write
        -- slot is read.
        ['on_ddl_command_end', $$    ts bigint := @SCHEMA@.current_write_ts();$$, $$    ts bigint;$$],
        ['on_ddl_command_end', $$        RETURN;  -- DDL that mzproxy itself runs below
    END IF;
$$, $$        RETURN;  -- DDL that mzproxy itself runs below
    END IF;
    ts := @SCHEMA@.current_write_ts();
$$],
        ['on_sql_drop', $$    ts bigint := @SCHEMA@.current_write_ts();$$, $$    ts bigint;$$],
        ['on_sql_drop', $$        RETURN;
    END IF;
$$, $$        RETURN;
    END IF;
    ts := @SCHEMA@.current_write_ts();
$$],
        -- DROP INDEX finds its mirror by the index's oid.
        ['on_sql_drop', $$    rev bigint;
BEGIN$$, $$    rev bigint;
    mirror name;
BEGIN$$],
        ['on_sql_drop', $$            IF r.original THEN
                FOR k IN SELECT c.relname FROM pg_class c
                          WHERE c.relnamespace = '@SCHEMA@'::regnamespace AND c.relkind = 'i'
                            AND c.relname ~ ('^h[0-9]+_k' || r.objid || '$')
                LOOP
                    PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
                    EXECUTE format('DROP INDEX @SCHEMA@.%I', k.relname);
                    PERFORM set_config('mzproxy.in_ddl', '', true);
                END LOOP;
            END IF;$$, $$            -- (Version 8: found in index_mirrors by the index's oid.)
            DELETE FROM @SCHEMA@.index_mirrors m WHERE m.index_oid = r.objid RETURNING m.mirror INTO mirror;
            IF r.original AND to_regclass('@SCHEMA@.' || quote_ident(mirror)) IS NOT NULL THEN
                PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
                EXECUTE format('DROP INDEX @SCHEMA@.%I', mirror);
                PERFORM set_config('mzproxy.in_ddl', '', true);
            END IF;$$],
        -- gen_triggers keeps trigger functions whose text would not change,
        -- and triggers that are in place: they name their functions by
        -- oid, which CREATE OR REPLACE keeps. The _upd function spells out
        -- all that the others do, and its text also differs whenever their
        -- SET clauses would (those depend on the primary key, as the
        -- retraction and the hash in the text do).
        ['gen_triggers', $$    join_settings text := ' SET enable_hashjoin = off SET enable_mergejoin = off';
$$, $$    join_settings text := ' SET enable_hashjoin = off SET enable_mergejoin = off';
    triggers_ok bool;
$$],
        ['gen_triggers', $$    END IF;$r$;

    EXECUTE format($f$$, $$    END IF;$r$;

    triggers_ok := (SELECT count(*) FROM pg_trigger t
                     WHERE t.tgrelid = c.oid AND t.tgenabled = 'A'
                       AND (t.tgname, t.tgfoid) IN (('mzproxy_history_ins', to_regprocedure(fn || '_ins()')),
                                                    ('mzproxy_history_upd', to_regprocedure(fn || '_upd()')),
                                                    ('mzproxy_history_del', to_regprocedure(fn || '_del()')),
                                                    ('mzproxy_history_trunc', to_regprocedure(fn || '_trunc()')))) = 4;
    IF triggers_ok AND EXISTS (
            SELECT 1 FROM pg_proc p
             WHERE p.oid = to_regprocedure(fn || '_upd()')
               AND p.prosrc = format(E'\nDECLARE _t bigint; _k bigint; _n bigint; _m bigint;\nBEGIN%s%s%s\n    RETURN NULL;\nEND\n',
                                     check_sql, retract_sql, insert_sql)) THEN
        RETURN;
    END IF;

    EXECUTE format($f$$],
        -- (Functions replaced keep their grants: no REVOKE either.)
        ['gen_triggers', $$    EXECUTE format('REVOKE ALL ON FUNCTION %s(), %s(), %s(), %s() FROM PUBLIC',
$$, $$    IF triggers_ok THEN
        RETURN;
    END IF;
    EXECUTE format('REVOKE ALL ON FUNCTION %s(), %s(), %s(), %s() FROM PUBLIC',
$$],
        -- sync_grants granted SELECT on the history table to its own owner
        -- (the user table's owner, when the same role) after every DDL:
        -- a GRANT, with its event triggers, that changed nothing.
        ['sync_grants', $$             WHERE k.oid = c.oid AND e.privilege_type = 'SELECT'
$$, $$             WHERE k.oid = c.oid AND e.privilege_type = 'SELECT'
               AND e.grantee <> (SELECT hk.relowner FROM pg_class hk WHERE hk.oid = c.history::regclass)
$$],
        -- ALTER TABLE DROP COLUMN (the column is the original object)
        -- reconciled its table twice: here and at ddl_command_end.
        ['on_sql_drop', $$                PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
                PERFORM @SCHEMA@.reconcile(k.id, ts, false);
                PERFORM set_config('mzproxy.in_ddl', '', true);
$$, $$                -- (ALTER TABLE DROP COLUMN, which drops the column
                -- itself, reconciles the table at ddl_command_end.)
                IF NOT r.original THEN
                    PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
                    PERFORM @SCHEMA@.reconcile(k.id, ts, false);
                    PERFORM set_config('mzproxy.in_ddl', '', true);
                END IF;
$$],
        -- resync of an empty table with no current versions.
        ['resync', $$    htext text;
BEGIN$$, $$    htext text;
    busy bool;
BEGIN$$],
        ['resync', $$    rel := format('%I.%I', c.schema_name, c.name);
$$, $$    rel := format('%I.%I', c.schema_name, c.name);
    -- Nothing to compare (a new or emptied table after ALTER TABLE): no
    -- temporary table.
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s) OR EXISTS (SELECT 1 FROM %s WHERE mz_to = 9223372036854775807)',
                   rel, c.history) INTO busy;
    IF NOT busy THEN
        RETURN;
    END IF;
$$]];
    i int;
    def text;
BEGIN
    -- Edits apply one by one (each function is replaced after each edit),
    -- so a declaration comes before its use.
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regproc);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
            RAISE EXCEPTION 'storage version 8: edit % of % does not apply once', i, edits[i][1];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

-- Version 8 (7 is frontier.sql); registered as 6 to 7 in this branch
-- until frontier.sql is merged.
INSERT INTO @SCHEMA@.schema_version (version) VALUES (8);
