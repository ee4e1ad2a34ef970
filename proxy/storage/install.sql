-- mzproxy backend state, schema version 1.
--
-- The Go side (install.go) replaces every occurrence of the token
-- @SCHEMA@ with the quoted private schema name and runs this script in one
-- transaction under an advisory lock. Everything here must therefore be
-- safe to run on an empty database; re-running the same version is skipped
-- by Install before this script is reached.

CREATE SCHEMA IF NOT EXISTS @SCHEMA@;
GRANT USAGE ON SCHEMA @SCHEMA@ TO PUBLIC;

CREATE TABLE IF NOT EXISTS @SCHEMA@.schema_version (
    version      int PRIMARY KEY,
    installed_at timestamptz NOT NULL DEFAULT now()
);

-- Milliseconds since the Unix epoch from the wall clock (not now(), which
-- is the transaction's start).
CREATE OR REPLACE FUNCTION @SCHEMA@.now_ms() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

-- The timestamp oracle. read_ts and write_ts live in separate tables: every
-- commit updates the read_ts row inside its own transaction (so it holds
-- that row lock until it commits), and allocating a write timestamp must
-- never queue behind such a commit.
CREATE TABLE IF NOT EXISTS @SCHEMA@.oracle (
    timeline text PRIMARY KEY,
    read_ts  bigint NOT NULL
) WITH (fillfactor = 50);
CREATE TABLE IF NOT EXISTS @SCHEMA@.oracle_write (
    timeline text PRIMARY KEY,
    write_ts bigint NOT NULL
) WITH (fillfactor = 50);

-- The shared transaction-log upper: every write at a time < upper is
-- durable and final.
CREATE TABLE IF NOT EXISTS @SCHEMA@.txns (
    one   bool PRIMARY KEY DEFAULT true CHECK (one),
    upper bigint NOT NULL
) WITH (fillfactor = 50);

INSERT INTO @SCHEMA@.oracle VALUES ('EpochMilliseconds', @SCHEMA@.now_ms())
    ON CONFLICT DO NOTHING;
INSERT INTO @SCHEMA@.oracle_write SELECT timeline, read_ts FROM @SCHEMA@.oracle
    ON CONFLICT DO NOTHING;
INSERT INTO @SCHEMA@.txns (upper) SELECT read_ts + 1 FROM @SCHEMA@.oracle
    ON CONFLICT DO NOTHING;

-- The catalog of managed objects.
CREATE SEQUENCE IF NOT EXISTS @SCHEMA@.catalog_id_seq;
CREATE TABLE IF NOT EXISTS @SCHEMA@.catalog (
    id          bigint PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('table', 'view')),
    oid         oid NOT NULL,          -- the user relation (pg_class.oid)
    schema_name name NOT NULL,         -- kept in sync on RENAME / SET SCHEMA
    name        name NOT NULL,
    history     text,                  -- tables: qualified, quoted history relation
    view_sql    text,                  -- views: pg_get_viewdef, fully qualified
    created_ts  bigint NOT NULL,
    dropped_ts  bigint,                -- NULL while live
    revision    bigint NOT NULL,       -- catalog revision of the last change to this row
    CHECK ((kind = 'table') = (history IS NOT NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS catalog_live_oid ON @SCHEMA@.catalog (oid)
    WHERE dropped_ts IS NULL;

CREATE TABLE IF NOT EXISTS @SCHEMA@.catalog_revision (
    one      bool PRIMARY KEY DEFAULT true CHECK (one),
    revision bigint NOT NULL
);
INSERT INTO @SCHEMA@.catalog_revision (revision) VALUES (1) ON CONFLICT DO NOTHING;

-- History columns of a managed table, keyed by the user column's attnum so
-- that RENAME COLUMN can be told apart from DROP + ADD. name is both the
-- user's and the history table's column name.
CREATE TABLE IF NOT EXISTS @SCHEMA@.columns (
    id     bigint NOT NULL REFERENCES @SCHEMA@.catalog (id),
    attnum int2 NOT NULL,
    name   name NOT NULL,
    type   text NOT NULL,              -- format_type + COLLATE clause
    PRIMARY KEY (id, attnum)
);

CREATE TABLE IF NOT EXISTS @SCHEMA@.collections (
    id        bigint PRIMARY KEY REFERENCES @SCHEMA@.catalog (id),
    since     bigint NOT NULL,
    retain_ms bigint NOT NULL DEFAULT 3600000,
    compacted_at timestamptz
);

CREATE TABLE IF NOT EXISTS @SCHEMA@.incarnations (
    id           bigserial PRIMARY KEY,
    epoch        bigint NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    lease_ms     bigint NOT NULL DEFAULT 30000,
    host         text,
    pid          int
);

CREATE TABLE IF NOT EXISTS @SCHEMA@.read_holds (
    incarnation bigint NOT NULL REFERENCES @SCHEMA@.incarnations (id) ON DELETE CASCADE,
    collection  bigint NOT NULL REFERENCES @SCHEMA@.collections (id) ON DELETE CASCADE,
    ts          bigint NOT NULL,
    PRIMARY KEY (incarnation, collection)
);

GRANT SELECT ON @SCHEMA@.schema_version, @SCHEMA@.oracle, @SCHEMA@.oracle_write,
    @SCHEMA@.txns, @SCHEMA@.catalog, @SCHEMA@.catalog_revision, @SCHEMA@.columns,
    @SCHEMA@.collections TO PUBLIC;

------------------------------------------------------------------------------
-- Oracle and commit functions.

CREATE OR REPLACE FUNCTION @SCHEMA@.read_ts() RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT read_ts FROM @SCHEMA@.oracle WHERE timeline = 'EpochMilliseconds' $$;

-- Allocate a write timestamp. Never below the committed upper (which is
-- T+1 after a commit at T), so allocations are ahead of every applied write
-- without begin_write having to hold the write_ts row.
CREATE OR REPLACE FUNCTION @SCHEMA@.write_ts() RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE @SCHEMA@.oracle_write
       SET write_ts = GREATEST(write_ts + 1, @SCHEMA@.now_ms(),
                               (SELECT upper FROM @SCHEMA@.txns),
                               (SELECT read_ts + 1 FROM @SCHEMA@.oracle WHERE timeline = 'EpochMilliseconds'))
     WHERE timeline = 'EpochMilliseconds'
    RETURNING write_ts
$$;

CREATE OR REPLACE FUNCTION @SCHEMA@.apply_write(ts bigint) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE @SCHEMA@.oracle SET read_ts = ts
     WHERE timeline = 'EpochMilliseconds' AND read_ts < ts;
    UPDATE @SCHEMA@.oracle_write SET write_ts = ts
     WHERE timeline = 'EpochMilliseconds' AND write_ts < ts;
$$;

-- The commit slot of the current transaction: see doc.go. p_ts NULL means
-- "any timestamp", otherwise exactly p_ts or an MZ001 error whose DETAIL is
-- the actual upper.
CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write_internal(p_ts bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cur text := current_setting('mzproxy.write_ts', true);
    u bigint;
    r bigint;
    t bigint;
BEGIN
    IF cur IS NOT NULL AND cur <> '' THEN
        IF p_ts IS NULL OR p_ts = cur::bigint THEN
            RETURN cur::bigint;
        END IF;
        RAISE EXCEPTION 'transaction already writes at timestamp %, cannot also write at %', cur, p_ts
            USING ERRCODE = '25000';
    END IF;
    -- The UPDATE takes the txns row lock, which serializes commits and is
    -- held until COMMIT. Under READ COMMITTED a writer that waited for the
    -- lock re-evaluates against the newest upper, so T stays ahead of every
    -- earlier commit; read_ts/write_ts may come from the statement's
    -- snapshot, which includes everything that finished before it started.
    IF p_ts IS NULL THEN
        UPDATE @SCHEMA@.txns x
           SET upper = GREATEST(
                   (SELECT w.write_ts + 1 FROM @SCHEMA@.oracle_write w WHERE w.timeline = 'EpochMilliseconds'),
                   (SELECT o.read_ts + 1 FROM @SCHEMA@.oracle o WHERE o.timeline = 'EpochMilliseconds'),
                   @SCHEMA@.now_ms(), x.upper) + 1
        RETURNING x.upper - 1 INTO t;
    ELSE
        UPDATE @SCHEMA@.txns x SET upper = p_ts + 1
         WHERE x.upper <= p_ts
           AND (SELECT o.read_ts FROM @SCHEMA@.oracle o WHERE o.timeline = 'EpochMilliseconds') < p_ts
        RETURNING p_ts INTO t;
        IF t IS NULL THEN
            SELECT x.upper INTO u FROM @SCHEMA@.txns x;
            SELECT o.read_ts INTO r FROM @SCHEMA@.oracle o WHERE o.timeline = 'EpochMilliseconds';
            RAISE EXCEPTION 'write at timestamp % conflicts: the upper is already %', p_ts, GREATEST(u, r + 1)
                USING ERRCODE = 'MZ001', DETAIL = GREATEST(u, r + 1)::text;
        END IF;
    END IF;
    -- GREATEST: a concurrent apply_write may have raised it meanwhile.
    UPDATE @SCHEMA@.oracle SET read_ts = GREATEST(read_ts, t) WHERE timeline = 'EpochMilliseconds';
    PERFORM set_config('mzproxy.write_ts', t::text, true);
    RETURN t;
END
$$;

CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT @SCHEMA@.begin_write_internal(NULL) $$;

CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write_at(ts bigint) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT @SCHEMA@.begin_write_internal(ts) $$;

------------------------------------------------------------------------------
-- Managing tables: history relation, columns, indexes, triggers.

-- The write timestamp of the current transaction, or NULL outside a proxy
-- write transaction.
CREATE OR REPLACE FUNCTION @SCHEMA@.current_write_ts() RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT nullif(current_setting('mzproxy.write_ts', true), '')::bigint $$;

-- The history-column list of table p_id in attnum order, each prefixed
-- with p_alias (e.g. 'n.'), comma separated.
CREATE OR REPLACE FUNCTION @SCHEMA@.col_list(p_id bigint, p_alias text) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(string_agg(p_alias || quote_ident(c.name), ', ' ORDER BY c.attnum), '')
      FROM @SCHEMA@.columns c WHERE c.id = p_id
$$;

-- 'ROW(a.x, a.y)::text' for table p_id (the whole-row text used to match
-- versions; computed only inside functions with fixed output settings).
CREATE OR REPLACE FUNCTION @SCHEMA@.row_text(p_id bigint, p_alias text) RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT 'ROW(' || @SCHEMA@.col_list(p_id, p_alias) || ')::text' $$;

-- The user's columns as they should appear in history: attnum, name, type.
CREATE OR REPLACE FUNCTION @SCHEMA@.user_columns(p_oid oid)
RETURNS TABLE (attnum int2, name name, type text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
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
     ORDER BY a.attnum
$$;

-- The primary key columns of the user table (by name, in key order), or
-- NULL when it has none.
CREATE OR REPLACE FUNCTION @SCHEMA@.pk_columns(p_oid oid) RETURNS name[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT array_agg(a.attname ORDER BY k.ord)
      FROM pg_index i
      CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = p_oid AND i.indisprimary
$$;

-- (Re)generate the history trigger functions and triggers of table p_id.
-- The function bodies are static SQL with the column list spelled out, so
-- the hot path runs cached plans.
--
-- Retraction (DELETE, the old rows of UPDATE) has two forms:
--  * keyed: the table has a primary key that is not deferrable. After every
--    statement the current versions are then unique per key, and the old
--    rows of one statement have distinct keys, so a join on the key through
--    the history lookup index finds exactly one version per old row.
--  * general (no primary key, or a deferrable one): multiset matching by
--    whole-row text, one version per old row (row_number within equal rows).
--    Without a key, candidates are found through the stored hash of the
--    row's text; the functions then run with fixed output settings so the
--    text (and so the hash) does not depend on the writing session's
--    DateStyle, TimeZone, extra_float_digits, ...
-- Either way versions written at this same timestamp are deleted outright,
-- and a count check raises if history ever disagrees with the table.
CREATE OR REPLACE FUNCTION @SCHEMA@.gen_triggers(p_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $gen$
DECLARE
    c record;
    h text;
    rel text;
    fn text;
    cols text;
    ncols text;
    ntext text;
    otext text;
    htext text;
    pk name[];
    pk_deferrable bool;
    kop text[];
    hash_expr text;
    okeys text := '';
    ogroup text := '';
    kjoin text;
    check_sql text;
    retract_sql text;
    insert_sql text;
    tg name;
    settings text := '';
    join_settings text := ' SET enable_hashjoin = off SET enable_mergejoin = off';
BEGIN
    SELECT * INTO c FROM @SCHEMA@.catalog WHERE id = p_id;
    h := c.history;
    rel := format('%I.%I', c.schema_name, c.name);
    fn := '@SCHEMA@.' || quote_ident('h' || p_id);
    cols := @SCHEMA@.col_list(p_id, '');
    ncols := @SCHEMA@.col_list(p_id, 'n.');
    ntext := @SCHEMA@.row_text(p_id, 'n.');
    otext := @SCHEMA@.row_text(p_id, 'd.');
    htext := @SCHEMA@.row_text(p_id, 'h.');
    pk := @SCHEMA@.pk_columns(c.oid);
    SELECT x.condeferrable INTO pk_deferrable FROM pg_constraint x WHERE x.conrelid = c.oid AND x.contype = 'p';
    -- The primary key's own equality operators, spelled out: the functions
    -- run as their owner with search_path = pg_catalog, so neither a
    -- caller's search_path nor a type living outside pg_catalog (citext)
    -- changes which operator is used.
    SELECT array_agg(format('OPERATOR(%I.%s)', opn.nspname, op.oprname) ORDER BY k.ord)
      INTO kop
      FROM pg_index x
      CROSS JOIN LATERAL unnest(x.indkey::int2[], x.indclass::oid[]) WITH ORDINALITY AS k(attnum, opclass, ord)
      JOIN pg_opclass oc ON oc.oid = k.opclass
      JOIN pg_amop ao ON ao.amopfamily = oc.opcfamily AND ao.amoplefttype = oc.opcintype
                     AND ao.amoprighttype = oc.opcintype AND ao.amopstrategy = 3
                     AND ao.amopmethod = (SELECT oid FROM pg_am WHERE amname = 'btree')
      JOIN pg_operator op ON op.oid = ao.amopopr
      JOIN pg_namespace opn ON opn.oid = op.oprnamespace
     WHERE x.indrelid = c.oid AND x.indisprimary;

    -- Plans of the retraction statements are cached per session, made for
    -- the transition table's size at planning time; a hash join planned for
    -- a bulk statement would scan all current versions for every later
    -- single-row one. Nested loops over the lookup indexes are linear in the
    -- statement's rows whatever the plan was made for (join_settings, for
    -- the functions that retract).
    settings := 'SET search_path = pg_catalog, pg_temp';
    IF pk IS NULL THEN
        settings := settings || $s$
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 1 SET bytea_output = 'hex' SET lc_monetary = 'C'$s$;
        hash_expr := 'hashtext(' || ntext || ')';
    ELSE
        hash_expr := '0';  -- unused while the table has a key
    END IF;

    check_sql := $c$
    _t := nullif(current_setting('mzproxy.write_ts', true), '')::bigint;
    IF _t IS NULL THEN
        RAISE EXCEPTION 'cannot write to managed table %.% outside mzproxy', quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME)
            USING ERRCODE = 'MZ002',
                  HINT = 'Connect through mzproxy: it runs every write in a transaction that records the table''s history.';
    END IF;$c$;

    insert_sql := format($i$
    INSERT INTO %s (%s mz_from, mz_to, mz_hash)
    SELECT %s _t, 9223372036854775807, %s FROM mz_new n;$i$,
        h, CASE WHEN cols = '' THEN '' ELSE cols || ',' END,
        CASE WHEN ncols = '' THEN '' ELSE ncols || ',' END, hash_expr);

    IF pk IS NOT NULL THEN
        SELECT string_agg(format('d.%I AS %I, ', k, 'k' || i), '' ORDER BY i),
               string_agg(format('%I, ', 'k' || i), '' ORDER BY i),
               string_agg(format('h.%I %s o.%I AND ', k, kop[i], 'k' || i), '' ORDER BY i)
          INTO okeys, ogroup, kjoin
          FROM unnest(pk) WITH ORDINALITY AS u(k, i);
    ELSE
        kjoin := 'h.mz_hash = hashtext(o.txt) AND ';
    END IF;

    IF pk IS NOT NULL AND NOT pk_deferrable THEN
        SELECT string_agg(format('h.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i)
          INTO kjoin FROM unnest(pk) WITH ORDINALITY AS u(k, i);
        -- One version per old row, found through the lookup index and
        -- checked by whole-row text: normally the key's only current
        -- version, but a query whose writable CTEs delete and re-insert a
        -- key may fire the INSERT trigger first, leaving two. Versions are
        -- found first and then deleted or closed by ctid, so that a filter
        -- on mz_from never tempts the planner to scan all current versions.
        retract_sql := format($r$
    WITH c AS MATERIALIZED (
        SELECT x.tid, x.mz_from FROM mz_old d CROSS JOIN LATERAL (
            SELECT h.ctid AS tid, h.mz_from FROM %s h
             WHERE %s h.mz_to = 9223372036854775807 AND %s = %s
             ORDER BY h.mz_from = _t DESC LIMIT 1) x
    ), del AS (
        DELETE FROM %s h USING c WHERE h.ctid = c.tid AND c.mz_from = _t RETURNING 1
    ), upd AS (
        UPDATE %s h SET mz_to = _t FROM c WHERE h.ctid = c.tid AND c.mz_from <> _t RETURNING 1
    )
    SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM upd), (SELECT count(*) FROM mz_old)
      INTO _k, _n;$r$, h, kjoin, htext, otext, h, h);
    ELSE
        retract_sql := format($r$
    WITH o AS (
        SELECT %s %s AS txt, count(*) AS n FROM mz_old d GROUP BY %s txt
    ), c AS MATERIALIZED (
        SELECT h.ctid AS tid, h.mz_from, o.n,
               row_number() OVER (PARTITION BY o.txt ORDER BY h.mz_from = _t DESC) AS rn
          FROM o JOIN %s h ON %s h.mz_to = 9223372036854775807 AND %s = o.txt
    ), del AS (
        DELETE FROM %s h USING c WHERE h.ctid = c.tid AND c.rn <= c.n AND c.mz_from = _t RETURNING 1
    ), upd AS (
        UPDATE %s h SET mz_to = _t FROM c WHERE h.ctid = c.tid AND c.rn <= c.n AND c.mz_from <> _t RETURNING 1
    )
    SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM upd), (SELECT coalesce(sum(n), 0) FROM o)
      INTO _k, _n;$r$,
            okeys, otext, ogroup, h, kjoin, htext, h, h);
    END IF;
    retract_sql := retract_sql || $r$
    IF _k <> _n THEN
        RAISE EXCEPTION 'mzproxy: history of %.% is out of step: % rows removed but % versions found', TG_TABLE_SCHEMA, TG_TABLE_NAME, _n, _k
            USING ERRCODE = 'XX000';
    END IF;$r$;

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER %s
AS $body$
DECLARE _t bigint;
BEGIN%s%s
    RETURN NULL;
END
$body$$f$, fn || '_ins', settings, check_sql, insert_sql);

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER %s
AS $body$
DECLARE _t bigint; _k bigint; _n bigint;
BEGIN%s%s
    RETURN NULL;
END
$body$$f$, fn || '_del', settings || join_settings, check_sql, retract_sql);

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER %s
AS $body$
DECLARE _t bigint; _k bigint; _n bigint;
BEGIN%s%s%s
    RETURN NULL;
END
$body$$f$, fn || '_upd', settings || join_settings, check_sql, retract_sql, insert_sql);

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE _t bigint;
BEGIN%s
    DELETE FROM %s WHERE mz_to = 9223372036854775807 AND mz_from = _t;
    UPDATE %s SET mz_to = _t WHERE mz_to = 9223372036854775807;
    RETURN NULL;
END
$body$$f$, fn || '_trunc', check_sql, h, h);

    -- Drop only what exists: DROP TRIGGER IF EXISTS would send the client a NOTICE.
    FOR tg IN SELECT tgname FROM pg_trigger WHERE tgrelid = c.oid AND tgname LIKE 'mzproxy\_history\_%' LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', tg, rel);
    END LOOP;
    EXECUTE format('CREATE TRIGGER mzproxy_history_ins AFTER INSERT ON %s REFERENCING NEW TABLE AS mz_new FOR EACH STATEMENT EXECUTE FUNCTION %s()', rel, fn || '_ins');
    EXECUTE format('CREATE TRIGGER mzproxy_history_upd AFTER UPDATE ON %s REFERENCING OLD TABLE AS mz_old NEW TABLE AS mz_new FOR EACH STATEMENT EXECUTE FUNCTION %s()', rel, fn || '_upd');
    EXECUTE format('CREATE TRIGGER mzproxy_history_del AFTER DELETE ON %s REFERENCING OLD TABLE AS mz_old FOR EACH STATEMENT EXECUTE FUNCTION %s()', rel, fn || '_del');
    EXECUTE format('CREATE TRIGGER mzproxy_history_trunc AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s()', rel, fn || '_trunc');
    -- ALWAYS: the triggers also fire under session_replication_role = replica.
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER mzproxy_history_ins, ENABLE ALWAYS TRIGGER mzproxy_history_upd, '
                   'ENABLE ALWAYS TRIGGER mzproxy_history_del, ENABLE ALWAYS TRIGGER mzproxy_history_trunc', rel);
END
$gen$;

-- Make the current versions in history (mz_to = infinity) equal, as a
-- multiset, to the user table's rows: retract surplus versions at p_ts and
-- insert missing rows at p_ts. Used when a table becomes managed (CREATE
-- TABLE AS copies its rows in) and after ALTER TABLE changed columns (ADD
-- COLUMN with a default, ALTER COLUMN TYPE ... USING): the change shows up
-- in history at the DDL's timestamp. Also refreshes the stored hashes.
CREATE OR REPLACE FUNCTION @SCHEMA@.resync(p_id bigint, p_ts bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC'
SET extra_float_digits = 1 SET bytea_output = 'hex' SET lc_monetary = 'C'
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    rel text;
    cols text;
    ucols text;
    utext text;
    htext text;
BEGIN
    SELECT * INTO c FROM @SCHEMA@.catalog WHERE id = p_id;
    rel := format('%I.%I', c.schema_name, c.name);
    cols := @SCHEMA@.col_list(p_id, '');
    ucols := @SCHEMA@.col_list(p_id, 'u.');
    utext := @SCHEMA@.row_text(p_id, 'u.');
    htext := @SCHEMA@.row_text(p_id, 'h.');
    IF @SCHEMA@.pk_columns(c.oid) IS NULL THEN
        EXECUTE format('UPDATE %s h SET mz_hash = hashtext(%s) WHERE mz_to = 9223372036854775807 AND mz_hash <> hashtext(%s)',
                       c.history, htext, htext);
    END IF;
    EXECUTE format($q$
    CREATE TEMP TABLE mz_resync ON COMMIT DROP AS
    SELECT coalesce(u.txt, h.txt) AS txt, coalesce(u.n, 0) - coalesce(h.n, 0) AS diff
      FROM (SELECT %s AS txt, count(*) AS n FROM ONLY %s u GROUP BY 1) u
      FULL JOIN (SELECT %s AS txt, count(*) AS n FROM %s h WHERE mz_to = 9223372036854775807 GROUP BY 1) h
        ON u.txt = h.txt
     WHERE coalesce(u.n, 0) <> coalesce(h.n, 0)$q$, utext, rel, htext, c.history);
    -- Surplus versions.
    EXECUTE format($q$
    WITH x AS MATERIALIZED (
        SELECT h.ctid AS tid, h.mz_from, -r.diff AS n,
               row_number() OVER (PARTITION BY r.txt ORDER BY h.mz_from = $1 DESC) AS rn
          FROM mz_resync r JOIN %s h ON h.mz_to = 9223372036854775807 AND %s = r.txt
         WHERE r.diff < 0
    ), del AS (
        DELETE FROM %s h USING x WHERE h.ctid = x.tid AND x.rn <= x.n AND x.mz_from = $1
    )
    UPDATE %s h SET mz_to = $1 FROM x WHERE h.ctid = x.tid AND x.rn <= x.n AND x.mz_from <> $1$q$,
        c.history, htext, c.history, c.history) USING p_ts;
    -- Missing rows. (x's extra columns are named mz_from and mz_to only
    -- because those names cannot clash with a user column.)
    EXECUTE format($q$
    INSERT INTO %s (%s mz_from, mz_to, mz_hash)
    SELECT %s $1, 9223372036854775807, hashtext(x.mz_from)
      FROM (SELECT u.*, %s AS mz_from, row_number() OVER (PARTITION BY %s) AS mz_to FROM ONLY %s u) x
      JOIN mz_resync r ON r.txt = x.mz_from AND r.diff > 0 AND x.mz_to <= r.diff$q$,
        c.history, CASE WHEN cols = '' THEN '' ELSE cols || ',' END,
        CASE WHEN cols = '' THEN '' ELSE @SCHEMA@.col_list(p_id, 'x.') || ',' END,
        utext, utext, rel) USING p_ts;
    DROP TABLE mz_resync;
END
$$;

-- Mirror the user's primary key and unique indexes as lookup indexes on the
-- history table (key columns plus mz_to), and drop mirrors of indexes that
-- are gone.
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
        SELECT x.indexrelid,
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
        EXECUTE format('CREATE INDEX %I ON %s (%s, mz_to)', format('h%s_k%s', p_id, i.indexrelid), c.history, i.cols);
    END LOOP;
    FOR i IN
        SELECT ic.relname FROM pg_class ic JOIN pg_index x ON x.indexrelid = ic.oid
         WHERE x.indrelid = c.history::regclass AND ic.relname ~ ('^h' || p_id || '_k[0-9]+$')
           AND NOT EXISTS (SELECT 1 FROM pg_index ux
                            WHERE ux.indrelid = c.oid AND ux.indexrelid::text = substring(ic.relname FROM '_k([0-9]+)$'))
    LOOP
        EXECUTE format('DROP INDEX @SCHEMA@.%I', i.relname);
    END LOOP;
END
$$;

-- Mirror SELECT on the user table (owner included) as SELECT on the history
-- table, so explicit-timestamp reads (rewritten into reads of history) work
-- for exactly the roles that may read the table. Run on manage and after
-- every GRANT/REVOKE through the proxy.
CREATE OR REPLACE FUNCTION @SCHEMA@.sync_grants(p_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    g record;
BEGIN
    SELECT * INTO c FROM @SCHEMA@.catalog WHERE id = p_id;
    FOR g IN
        WITH want AS (
            SELECT e.grantee FROM pg_class k
             CROSS JOIN LATERAL aclexplode(coalesce(k.relacl, acldefault('r', k.relowner))) e
             WHERE k.oid = c.oid AND e.privilege_type = 'SELECT'
        ), have AS (
            SELECT e.grantee FROM pg_class k
             CROSS JOIN LATERAL aclexplode(k.relacl) e
             WHERE k.oid = c.history::regclass AND e.privilege_type = 'SELECT' AND e.grantee <> k.relowner
        )
        SELECT 'GRANT' AS op, w.grantee FROM want w WHERE w.grantee NOT IN (SELECT grantee FROM have)
        UNION ALL
        SELECT 'REVOKE', h.grantee FROM have h WHERE h.grantee NOT IN (SELECT grantee FROM want)
    LOOP
        EXECUTE format('%s SELECT ON %s %s %s', g.op, c.history, CASE g.op WHEN 'GRANT' THEN 'TO' ELSE 'FROM' END,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;

-- Bring the history table of p_id in step with its user table after DDL:
-- names, columns (by attnum), types, lookup indexes, triggers, grants.
CREATE OR REPLACE FUNCTION @SCHEMA@.reconcile(p_id bigint, p_ts bigint, p_new bool) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    u record;
    m record;
    changed bool := p_new;
BEGIN
    SELECT * INTO c FROM @SCHEMA@.catalog WHERE id = p_id;
    UPDATE @SCHEMA@.catalog k SET schema_name = n.nspname, name = r.relname
      FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
     WHERE k.id = p_id AND r.oid = k.oid AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname);
    IF EXISTS (SELECT 1 FROM @SCHEMA@.user_columns(c.oid) uc WHERE uc.name IN ('mz_from', 'mz_to', 'mz_hash')) THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    -- Dropped columns: dropped from history too (old versions lose them).
    FOR m IN SELECT cc.attnum, cc.name FROM @SCHEMA@.columns cc
              WHERE cc.id = p_id AND cc.attnum NOT IN (SELECT uc.attnum FROM @SCHEMA@.user_columns(c.oid) uc)
    LOOP
        -- (A DROP TYPE ... CASCADE may have dropped it from history already.)
        IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c.history::regclass AND attname = m.name AND NOT attisdropped) THEN
            EXECUTE format('ALTER TABLE %s DROP COLUMN %I', c.history, m.name);
        END IF;
        DELETE FROM @SCHEMA@.columns WHERE id = p_id AND attnum = m.attnum;
        changed := true;
    END LOOP;
    -- Renamed columns: two steps, so that swaps (a->b, b->a) work.
    FOR m IN SELECT cc.attnum, cc.name FROM @SCHEMA@.columns cc JOIN @SCHEMA@.user_columns(c.oid) uc USING (attnum)
              WHERE cc.id = p_id AND cc.name <> uc.name
    LOOP
        EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', c.history, m.name, 'mz_tmp_' || m.attnum);
        UPDATE @SCHEMA@.columns SET name = 'mz_tmp_' || m.attnum WHERE id = p_id AND attnum = m.attnum;
    END LOOP;
    FOR m IN SELECT cc.attnum, cc.name, uc.name AS newname FROM @SCHEMA@.columns cc JOIN @SCHEMA@.user_columns(c.oid) uc USING (attnum)
              WHERE cc.id = p_id AND cc.name <> uc.name
    LOOP
        EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', c.history, m.name, m.newname);
        UPDATE @SCHEMA@.columns SET name = m.newname WHERE id = p_id AND attnum = m.attnum;
    END LOOP;
    -- Changed types: convert history by cast; when there is no cast, the
    -- old versions get NULL (the current ones are rewritten by resync).
    FOR m IN SELECT cc.attnum, cc.name, uc.type FROM @SCHEMA@.columns cc JOIN @SCHEMA@.user_columns(c.oid) uc USING (attnum)
              WHERE cc.id = p_id AND cc.type <> uc.type
    LOOP
        BEGIN
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE %s USING %I::%s', c.history, m.name, m.type, m.name,
                           regexp_replace(m.type, ' COLLATE .*$', ''));
        EXCEPTION WHEN OTHERS THEN
            EXECUTE format('ALTER TABLE %s DROP COLUMN %I', c.history, m.name);
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s', c.history, m.name, m.type);
        END;
        UPDATE @SCHEMA@.columns SET type = m.type WHERE id = p_id AND attnum = m.attnum;
        changed := true;
    END LOOP;
    -- Added columns: NULL in every existing version.
    FOR u IN SELECT uc.* FROM @SCHEMA@.user_columns(c.oid) uc
              WHERE uc.attnum NOT IN (SELECT cc.attnum FROM @SCHEMA@.columns cc WHERE cc.id = p_id)
              ORDER BY uc.attnum
    LOOP
        IF NOT p_new THEN
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s', c.history, u.name, u.type);
        END IF;
        INSERT INTO @SCHEMA@.columns VALUES (p_id, u.attnum, u.name, u.type);
        changed := true;
    END LOOP;
    -- A table that lost its primary key needs hashes of its current versions.
    IF @SCHEMA@.pk_columns(c.oid) IS NULL
       AND to_regclass('@SCHEMA@.' || quote_ident('h' || p_id || '_mz_hash')) IS NULL THEN
        changed := true;
    END IF;
    IF changed THEN
        PERFORM @SCHEMA@.resync(p_id, p_ts);
    END IF;
    PERFORM @SCHEMA@.sync_indexes(p_id);
    PERFORM @SCHEMA@.gen_triggers(p_id);
    PERFORM @SCHEMA@.sync_grants(p_id);
END
$$;

-- Make the new table p_oid managed at p_ts.
CREATE OR REPLACE FUNCTION @SCHEMA@.manage_table(p_oid oid, p_ts bigint, p_rev bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id bigint := nextval('@SCHEMA@.catalog_id_seq');
    hist text := '@SCHEMA@.' || quote_ident('h' || id);
    defs text;
BEGIN
    IF EXISTS (SELECT 1 FROM @SCHEMA@.user_columns(p_oid) uc WHERE uc.name IN ('mz_from', 'mz_to', 'mz_hash')) THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    SELECT coalesce(string_agg(format('%I %s', uc.name, uc.type), ', ' ORDER BY uc.attnum) || ', ', '')
      INTO defs FROM @SCHEMA@.user_columns(p_oid) uc;
    EXECUTE format('CREATE TABLE %s (%s mz_from int8 NOT NULL, mz_to int8 NOT NULL, mz_hash int4 NOT NULL)', hist, defs);
    EXECUTE format('CREATE INDEX %I ON %s (mz_to)', 'h' || id || '_mz_to', hist);
    INSERT INTO @SCHEMA@.catalog (id, kind, oid, schema_name, name, history, created_ts, revision)
    SELECT id, 'table', r.oid, n.nspname, r.relname, hist, p_ts, p_rev
      FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = p_oid;
    INSERT INTO @SCHEMA@.collections (id, since) VALUES (id, p_ts);
    PERFORM @SCHEMA@.reconcile(id, p_ts, true);
    RETURN id;
END
$$;

-- A view's definition, fully schema-qualified (search_path is empty while
-- it is deparsed), without the trailing semicolon.
CREATE OR REPLACE FUNCTION @SCHEMA@.view_definition(p_oid oid) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT rtrim(btrim(pg_get_viewdef(p_oid)), ';') $$;

-- format_type with every non-pg_catalog type schema-qualified, whatever the
-- caller's search_path.
CREATE OR REPLACE FUNCTION @SCHEMA@.type_name(p_type oid, p_typmod int4) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT format_type(p_type, p_typmod) $$;

------------------------------------------------------------------------------
-- Event triggers.

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
    -- Deparsed view text names relations as they are called now.
    UPDATE @SCHEMA@.catalog SET view_sql = @SCHEMA@.view_definition(oid)
     WHERE kind = 'view' AND dropped_ts IS NULL AND view_sql IS DISTINCT FROM @SCHEMA@.view_definition(oid);
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
            -- Drop the history mirror of a dropped unique index, if any.
            FOR k IN SELECT c.relname FROM pg_class c
                      WHERE c.relnamespace = '@SCHEMA@'::regnamespace AND c.relkind = 'i'
                        AND c.relname ~ ('^h[0-9]+_k' || r.objid || '$')
            LOOP
                PERFORM set_config('mzproxy.in_ddl', 'on', true);
                EXECUTE format('DROP INDEX @SCHEMA@.%I', k.relname);
                PERFORM set_config('mzproxy.in_ddl', '', true);
            END LOOP;
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

DROP EVENT TRIGGER IF EXISTS mzproxy_ddl_command_end;
DROP EVENT TRIGGER IF EXISTS mzproxy_sql_drop;
CREATE EVENT TRIGGER mzproxy_ddl_command_end ON ddl_command_end EXECUTE FUNCTION @SCHEMA@.on_ddl_command_end();
CREATE EVENT TRIGGER mzproxy_sql_drop ON sql_drop EXECUTE FUNCTION @SCHEMA@.on_sql_drop();

INSERT INTO @SCHEMA@.schema_version (version) VALUES (1);
