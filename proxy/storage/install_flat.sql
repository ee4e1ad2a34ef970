-- mzproxy backend state, schema version 59, generated from the migration chain by TestFlatInstall on PostgreSQL 15: do not edit.
-- What the migration chain (install.sql and every upgrade) leaves on an
-- empty database, as Install runs it there; upgrades run the chain.
SELECT pg_catalog.set_config('search_path', '', true);
CREATE SCHEMA IF NOT EXISTS mz_internal;



CREATE SCHEMA IF NOT EXISTS mzproxy;



CREATE FUNCTION mzproxy.acquire_hold(p_id bigint, p_ts bigint, p_inputs bigint[]) RETURNS TABLE(collection bigint, since bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM mzproxy.take_hold_lock();
    IF NOT mzproxy.incarnation_live(p_id) THEN
        PERFORM mzproxy.raise_fenced(p_id);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM mzproxy.collections c WHERE c.id = ANY (p_inputs) AND c.since > p_ts) THEN
        INSERT INTO mzproxy.read_holds AS h (incarnation, collection, ts)
        SELECT p_id, c.id, p_ts FROM mzproxy.collections c WHERE c.id = ANY (p_inputs)
        ON CONFLICT ON CONSTRAINT read_holds_pkey DO UPDATE SET ts = LEAST(h.ts, excluded.ts);
    END IF;
    RETURN QUERY SELECT c.id, c.since FROM mzproxy.collections c WHERE c.id = ANY (p_inputs) ORDER BY c.id;
END
$$;



CREATE FUNCTION mzproxy.added_column_filled(p_oid oid, p_attnum smallint) RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN coalesce((SELECT a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' OR t.typtype = 'd'
                       FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                      WHERE a.attrelid = p_oid AND a.attnum = p_attnum), true);
END
$$;



CREATE FUNCTION mzproxy.apply_write(ts bigint) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    UPDATE mzproxy.oracle SET read_ts = ts
     WHERE timeline = 'EpochMilliseconds' AND read_ts < ts;
    UPDATE mzproxy.oracle_write SET write_ts = ts
     WHERE timeline = 'EpochMilliseconds' AND write_ts < ts;
$$;



CREATE FUNCTION mzproxy.await_slot() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ BEGIN END $$;



CREATE FUNCTION mzproxy.begin_write() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ BEGIN RETURN mzproxy.begin_write_internal(NULL, NULL); END $$;



CREATE FUNCTION mzproxy.begin_write(p_incarnation bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ BEGIN RETURN mzproxy.begin_write_internal(NULL, p_incarnation); END $$;



CREATE FUNCTION mzproxy.begin_write_at(ts bigint) RETURNS bigint
    LANGUAGE sql
    AS $$ SELECT mzproxy.begin_write_internal(ts, NULL) $$;



CREATE FUNCTION mzproxy.begin_write_at(ts bigint, p_incarnation bigint) RETURNS bigint
    LANGUAGE sql
    AS $$ SELECT mzproxy.begin_write_internal(ts, p_incarnation) $$;



CREATE FUNCTION mzproxy.begin_write_internal(p_ts bigint, p_inc bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM mzproxy.open_write(p_ts, p_inc);
    RETURN mzproxy.current_write_ts();
END
$$;



CREATE FUNCTION mzproxy.begin_write_occ(p_inc bigint, p_floor bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    may_write bool;
BEGIN
    IF coalesce(current_setting('mzproxy.write_ts', true), '') <> '' THEN
        RETURN mzproxy.open_write(NULL, p_inc);
    END IF;
    LOCK TABLE mzproxy.gate IN ROW SHARE MODE;
    -- The incarnation is checked with the gate held (see open_write), by
    -- check_incarnation's condition, inline (not by a view: pg_dump's
    -- sessions may not read one). The slot is set even when the check
    -- fails: the transaction fails anyway. The write is counted when T is
    -- chosen (version 42: choose_ts, stamp_ts, ddl_ts, the triggers).
    SELECT p_inc IS NULL OR coalesce((
               SELECT i.retired_at IS NULL
                      AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                 FROM mzproxy.incarnations i WHERE i.id = p_inc), false),
           set_config('mzproxy.write_ts', '0 - pending', true)
      INTO may_write;
    IF NOT may_write THEN
        PERFORM mzproxy.raise_fenced(p_inc);
    END IF;
    RETURN 0;
END
$$;



CREATE FUNCTION mzproxy.build_history(p_id bigint, p_rows_ts bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET quote_all_identifiers TO 'off'
    AS $$
DECLARE
    k record;
    defs text;
BEGIN
    SELECT c.oid, c.history INTO k FROM mzproxy.catalog c WHERE c.id = p_id;
    -- (Version 41) The columns recorded now, as the history gets them:
    -- a table without history has none in mzproxy.columns.
    WITH added AS (
        INSERT INTO mzproxy.columns (id, attnum, name, type)
        SELECT p_id, uc.attnum, uc.name, uc.type FROM mzproxy.user_columns(k.oid) uc
        RETURNING attnum, name, type)
    SELECT coalesce(string_agg(format('%I %s', c.name, c.type), ', ' ORDER BY c.attnum), '')
      INTO defs FROM added c;
    EXECUTE format('CREATE TABLE %s (mz_from int8 NOT NULL, mz_to int8 NOT NULL, mz_hash int4 NOT NULL%s)', k.history,
                   CASE WHEN defs = '' THEN '' ELSE ', ' || defs END);
    EXECUTE format('CREATE INDEX %I ON %s (mz_to, mz_from)', 'h' || p_id || '_mz_to', k.history);
    -- Disabled, not dropped: DROP TRIGGER takes ACCESS EXCLUSIVE on the
    -- table, which readers would wait for until the write's transaction
    -- ends; DISABLE takes SHARE ROW EXCLUSIVE, as the build's other DDL.
    IF EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = k.oid AND t.tgname = 'mzproxy_pending_history') THEN
        EXECUTE format('ALTER TABLE %s DISABLE TRIGGER mzproxy_pending_history', k.oid::regclass);
    END IF;
    UPDATE mzproxy.catalog SET history_built = true WHERE id = p_id AND NOT history_built;
    IF p_rows_ts IS NOT NULL THEN
        PERFORM mzproxy.resync(p_id, p_rows_ts);
    END IF;
    PERFORM mzproxy.sync_indexes(p_id);
    PERFORM mzproxy.sync_triggers(p_id);
    PERFORM mzproxy.sync_grants(p_id);
END
$$;



CREATE FUNCTION mzproxy.builtin_conversion(p_rel oid, p_attnum smallint, p_history text, p_name name) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT coalesce((SELECT s.typ < 16384 FROM pg_attribute a, mzproxy.storage_type(a.atttypid, a.atttypmod) s
                      WHERE a.attrelid = p_rel AND a.attnum = p_attnum)
                AND (SELECT s.typ < 16384 FROM pg_attribute a, mzproxy.storage_type(a.atttypid, a.atttypmod) s
                      WHERE a.attrelid = p_history::regclass AND a.attname = p_name), false)
$$;



CREATE FUNCTION mzproxy.check_incarnation(p_inc bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_inc IS NOT NULL AND NOT coalesce((
            SELECT i.retired_at IS NULL
                   AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
              FROM mzproxy.incarnations i WHERE i.id = p_inc), false) THEN
        PERFORM mzproxy.raise_fenced(p_inc);
    END IF;
END
$$;



CREATE FUNCTION mzproxy.check_reads(p_writes bigint, p_t bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    read oid[];
    pending oid[];
    marked oid[];
    marks bigint[];
    counted bigint;
    changed text;
BEGIN
    WITH locked AS (
        SELECT DISTINCT l.relation FROM pg_locks l
         WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.relation IS NOT NULL
    )
    SELECT array_agg(k.oid ORDER BY k.oid) INTO read FROM mzproxy.catalog k
     WHERE k.kind = 'table' AND k.dropped_ts IS NULL
       AND (k.oid IN (SELECT x.relation FROM locked x)
            OR k.id IN (SELECT substr(c.relname, 2)::bigint FROM locked x JOIN pg_class c ON c.oid = x.relation
                         WHERE c.relnamespace = 'mzproxy'::regnamespace AND c.relname ~ '^h[0-9]+$'))
       AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = k.oid);
    IF read IS NULL THEN
        RETURN;
    END IF;
    -- The check marks first (see rw_check.sql).
    BEGIN
        LOCK TABLE mzproxy.checking IN SHARE UPDATE EXCLUSIVE MODE;  -- (version 21)
        PERFORM setval(c.s, p_t)
           FROM (SELECT to_regclass('mzproxy.c' || r) AS s FROM unnest(read) r) c
          WHERE c.s IS NOT NULL AND coalesce(pg_sequence_last_value(c.s), 0) < p_t;
        RAISE SQLSTATE 'MZP00';
    EXCEPTION WHEN SQLSTATE 'MZP00' THEN
        NULL;
    END;
    -- Writes in progress next (see rw_check.sql).
    WITH locks AS MATERIALIZED (
        SELECT l.relation, l.mode, l.virtualtransaction FROM pg_locks l
         WHERE l.locktype = 'relation' AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
    )
    SELECT array_agg(DISTINCT l.relation) INTO pending FROM locks l
     WHERE l.relation = ANY (read)
       AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
       AND EXISTS (SELECT 1 FROM locks g
                    WHERE g.mode = 'RowShareLock' AND g.relation = 'mzproxy.gate'::regclass AND g.virtualtransaction = l.virtualtransaction);
    -- Then the markers above the pin's count, kept as read; then the count
    -- (in this order: a marker of this epoch is at most any count read
    -- after it).
    WITH m AS MATERIALIZED (
        SELECT r, pg_sequence_last_value(to_regclass('mzproxy.w' || r)) AS v FROM unnest(read) r
    )
    SELECT array_agg(m.r), array_agg(m.v) INTO marked, marks FROM m WHERE m.v > p_writes;
    counted := coalesce(pg_sequence_last_value('mzproxy.writes'), 0);
    SELECT string_agg(r::regclass::text, ', ') INTO changed FROM unnest(read) r
     WHERE r = ANY (coalesce(pending, '{}'))
        OR to_regclass('mzproxy.w' || r) IS NULL OR to_regclass('mzproxy.c' || r) IS NULL
        OR r IN (SELECT x.r FROM unnest(marked, marks) x(r, v) WHERE x.v <= counted);
    IF changed IS NOT NULL THEN
        RAISE EXCEPTION 'could not serialize access due to concurrent update'
            USING ERRCODE = '40001',
                  DETAIL = format('mzproxy: %s changed since this transaction read at its timestamp, or is being written.', changed),
                  HINT = 'The transaction might succeed if retried.';
    END IF;
END
$_$;



CREATE FUNCTION mzproxy.choose_ts() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    t bigint;
BEGIN
    LOCK TABLE mzproxy.gate IN ROW SHARE MODE;
    PERFORM nextval('mzproxy.writes');
    t := GREATEST(mzproxy.now_ms(), mzproxy.pinned_ts() + 1);
    PERFORM mzproxy.set_slot(t, NULL);
    RETURN t;
END
$$;



CREATE FUNCTION mzproxy.claim(p_name text, p_id bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    h bigint;
BEGIN
    SELECT holder INTO h FROM mzproxy.claims WHERE name = p_name;
    IF h = p_id THEN
        RETURN mzproxy.incarnation_live(p_id);
    END IF;
    IF (h IS NOT NULL AND mzproxy.incarnation_live(h)) OR NOT mzproxy.incarnation_live(p_id) THEN
        RETURN false;
    END IF;
    -- Under READ COMMITTED a concurrent claim re-checks this condition
    -- against the row it committed: one of two claimants wins.
    UPDATE mzproxy.claims SET holder = p_id WHERE name = p_name AND holder IS NOT DISTINCT FROM h;
    RETURN FOUND;
END
$$;



CREATE FUNCTION mzproxy.col_list(p_id bigint, p_alias text) RETURNS text
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT coalesce(string_agg(p_alias || quote_ident(c.name), ', ' ORDER BY c.attnum), '')
              FROM mzproxy.columns c WHERE c.id = p_id);
END
$$;



CREATE FUNCTION mzproxy.commit_write(p_inc bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t bigint := (SELECT s.t FROM mzproxy.write_slot() s);
BEGIN
    IF t IS NULL OR t > 0 THEN
        RETURN t;
    END IF;
    RETURN mzproxy.current_write_ts();
END
$$;



CREATE FUNCTION mzproxy.commit_write_tx(p_inc bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF (SELECT s.t FROM mzproxy.write_slot() s) IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN mzproxy.current_write_ts();
END
$$;



CREATE FUNCTION mzproxy.compact(p_default_retain_ms bigint, p_by bigint) RETURNS TABLE(id bigint, since bigint, pending boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
    PERFORM mzproxy.take_hold_lock();
    UPDATE mzproxy.incarnations i SET retired_at = clock_timestamp(), retired_reason = 'lease expired'
     WHERE i.retired_at IS NULL AND i.heartbeat_at < clock_timestamp() - i.grace_ms * interval '1 millisecond';
    UPDATE mzproxy.incarnations i SET retired_at = clock_timestamp(), retired_reason = 'fenced'
     WHERE i.retired_at IS NULL AND i.generation < (SELECT f.generation FROM mzproxy.fence f);
    DELETE FROM mzproxy.read_holds h USING mzproxy.incarnations i
     WHERE i.id = h.incarnation AND i.retired_at IS NOT NULL;
    -- Keep retired incarnations a day for introspection.
    DELETE FROM mzproxy.incarnations i WHERE i.retired_at < clock_timestamp() - interval '1 day';
    SELECT x.upper INTO up FROM mzproxy.txns x;
    SELECT min(i.floor_ts) INTO fl FROM mzproxy.incarnations i WHERE i.retired_at IS NULL;
    -- Every since may move each round: one join, not two subqueries per
    -- collection.
    UPDATE mzproxy.collections c SET since = v.since
      FROM (SELECT c2.id, LEAST(up - 1 - coalesce(c2.retain_ms, p_default_retain_ms), fl, h.ts) AS since
              FROM mzproxy.collections c2
              LEFT JOIN (SELECT h.collection, min(h.ts) AS ts FROM mzproxy.read_holds h GROUP BY h.collection) h
                ON h.collection = c2.id) v
     WHERE v.id = c.id AND c.since < v.since;
    -- Dropped tables nobody can read any more.
    FOR d IN SELECT k.id, k.history FROM mzproxy.catalog k JOIN mzproxy.collections c ON c.id = k.id
              WHERE k.dropped_ts IS NOT NULL AND c.since >= k.dropped_ts
    LOOP
        PERFORM set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true);
        EXECUTE format('DROP TABLE IF EXISTS %s', d.history);
        -- (Version 28: since then DROP TABLE leaves them here. IF EXISTS
        -- would send a NOTICE for a table dropped before.)
        IF to_regprocedure(format('mzproxy.%I()', 'h' || d.id || '_ins')) IS NOT NULL THEN
            EXECUTE format('DROP FUNCTION IF EXISTS mzproxy.%I(), mzproxy.%I(), mzproxy.%I(), mzproxy.%I()',
                           'h' || d.id || '_ins', 'h' || d.id || '_upd', 'h' || d.id || '_del', 'h' || d.id || '_trunc');
        END IF;
        -- (Version 53) The restamp function made at the first write.
        IF to_regprocedure(format('mzproxy.%I(bigint, bigint)', 'h' || d.id || '_fix')) IS NOT NULL THEN
            EXECUTE format('DROP FUNCTION mzproxy.%I(bigint, bigint)', 'h' || d.id || '_fix');
        END IF;
        PERFORM set_config('mzproxy.in_ddl', '', true);
        DELETE FROM mzproxy.read_holds h WHERE h.collection = d.id;
        DELETE FROM mzproxy.collections c WHERE c.id = d.id;
        DELETE FROM mzproxy.columns c WHERE c.id = d.id;
        DELETE FROM mzproxy.catalog k WHERE k.id = d.id;
        removed := removed + 1;
    END LOOP;
    UPDATE mzproxy.compactor SET incarnation = p_by, ran_at = clock_timestamp(),
           default_retain_ms = p_default_retain_ms, dropped_removed = dropped_removed + removed;
    FOR d IN SELECT c.id, c.since, k.history FROM mzproxy.collections c JOIN mzproxy.catalog k ON k.id = c.id
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
            UPDATE mzproxy.collections c SET clean_since = d.since WHERE c.id = d.id;
        END IF;
    END LOOP;
    RETURN QUERY SELECT c.id, c.since, c.id = ANY (todo) FROM mzproxy.collections c ORDER BY c.id;
END
$_$;



CREATE FUNCTION mzproxy.compact_batch(p_id bigint, p_limit integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
DECLARE
    c record;
    n bigint;
BEGIN
    SELECT k.history, s.since INTO c FROM mzproxy.catalog k JOIN mzproxy.collections s ON s.id = k.id
     WHERE k.id = p_id;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    EXECUTE format('WITH d AS (DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s WHERE mz_to <= $1 LIMIT $2)) RETURNING 1) '
                   'SELECT count(*) FROM d', c.history, c.history)
       INTO n USING c.since, p_limit;
    IF n > 0 OR n < p_limit THEN
        UPDATE mzproxy.collections s
           SET compacted_rows = compacted_rows + n,
               last_compacted_rows = CASE WHEN n > 0 THEN n ELSE last_compacted_rows END,
               compacted_at = CASE WHEN n > 0 THEN clock_timestamp() ELSE compacted_at END,
               clean_since = CASE WHEN n < p_limit THEN c.since ELSE clean_since END
         WHERE s.id = p_id;
    END IF;
    RETURN n;
END
$_$;



CREATE FUNCTION mzproxy.current_write_ts() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    t bigint := (SELECT s.t FROM mzproxy.write_slot() s);
BEGIN
    IF t = 0 THEN
        t := mzproxy.choose_ts();
    ELSIF t = -1 THEN
        t := mzproxy.fix_write();
    END IF;
    RETURN t;
END
$$;



CREATE FUNCTION mzproxy.ddl_mark() RETURNS text
    LANGUAGE plpgsql
    AS $$ BEGIN RETURN (SELECT mzproxy.key_tag(k.k, 'ddl') FROM mzproxy.write_key k); END $$;



CREATE FUNCTION mzproxy.ddl_ts() RETURNS bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    vt text;
    k text;
    t bigint;
BEGIN
    IF v = '0 - pending' THEN
        LOCK TABLE mzproxy.gate IN ROW SHARE MODE;
        SELECT x.t, set_config('mzproxy.write_ts', x.t::text || ' - ' || mzproxy.key_tag(x.k, x.t::text || ' -'), true)
          INTO t, v
          FROM (SELECT w.k, GREATEST(mzproxy.now_ms(),
                                     coalesce(pg_sequence_last_value('mzproxy.pinned'), mzproxy.pinned_ts()) + 1) AS t,
                       nextval('mzproxy.writes')
                  FROM mzproxy.write_key w
                OFFSET 0) x;
        RETURN t;
    END IF;
    vt := split_part(v, ' ', 1);
    IF split_part(v, ' ', 2) = '-' AND split_part(v, ' ', 4) = '' AND vt ~ '^[1-9][0-9]*$' THEN
        k := (SELECT w.k FROM mzproxy.write_key w);
        -- A tag proves set_slot wrote T (write_slot).
        IF split_part(v, ' ', 3) = mzproxy.key_tag(k, vt || ' -') THEN
            RETURN vt::bigint;
        END IF;
    END IF;
    RETURN mzproxy.current_write_ts();
END
$_$;



CREATE FUNCTION mzproxy.deregister(p_id bigint) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    UPDATE mzproxy.incarnations SET retired_at = clock_timestamp(), retired_reason = 'shutdown'
     WHERE id = p_id AND retired_at IS NULL;
    DELETE FROM mzproxy.read_holds WHERE incarnation = p_id;
$$;



CREATE FUNCTION mzproxy.ensure_history(p_rels oid[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    caller name := CASE WHEN current_setting('role') = 'none' THEN session_user
                        ELSE current_setting('role')::name END;
    k record;
    todo bigint[] := '{}';
    marked bool := false;
BEGIN
    FOR k IN SELECT c.id, c.oid FROM mzproxy.catalog c
              WHERE c.oid = ANY (p_rels) AND c.kind = 'table' AND c.dropped_ts IS NULL AND NOT c.history_built
              ORDER BY c.oid
    LOOP
        IF NOT has_table_privilege(caller, k.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE') THEN
            RAISE EXCEPTION 'permission denied for table %', k.oid::regclass
                USING ERRCODE = '42501';
        END IF;
        todo := todo || k.id;
    END LOOP;
    FOR k IN SELECT c.id, c.oid, c.history FROM mzproxy.catalog c WHERE c.id = ANY (todo) ORDER BY c.oid LOOP
        EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', k.oid::regclass);
        -- Built meanwhile by a transaction that held the lock: its history
        -- is there now, whatever this transaction's snapshot says.
        IF to_regclass(k.history) IS NULL THEN
            IF NOT marked THEN
                marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
            END IF;
            PERFORM mzproxy.build_history(k.id, NULL);
        END IF;
    END LOOP;
    IF marked THEN
        marked := set_config('mzproxy.in_ddl', '', true) <> '';
    END IF;
END
$$;



CREATE FUNCTION mzproxy.fix_at_commit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM mzproxy.fix_write(true);
    RETURN NULL;
END
$$;



CREATE FUNCTION mzproxy.fix_write(p_at_commit boolean DEFAULT false) RETURNS bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    my_xid bigint := pg_current_xact_id()::text::bigint;
    p bigint := -my_xid;
    v text := current_setting('mzproxy.write_ts', true);
    slot_ok bool;
    slot_inc bigint;
    may_write bool;
    rels oid[];
    hist text[];
    fix_sql text;
    static bool;
    closed bigint;
    counted bigint;
    read_writes bigint;
    fixed bigint;
    checked_at bigint;
    t bigint;
BEGIN
    -- The transaction's row (taken out at COMMIT), and the slot checked
    -- against the one open_write_deferred made with it, in one query.
    WITH gone AS (DELETE FROM mzproxy.deferred_slots d WHERE d.xid = my_xid AND p_at_commit RETURNING d.*),
         d AS (SELECT * FROM gone
               UNION ALL SELECT * FROM mzproxy.deferred_slots x WHERE x.xid = my_xid AND NOT p_at_commit)
    SELECT d.rels, d.inc, d.read_writes, d.fixed_t, v IS NULL OR v = '' OR v =
               '-1 ' || coalesce(d.inc::text, '-') || ' ' || mzproxy.key_tag(k.k, '-1 ' || coalesce(d.inc::text, '-'))
      INTO rels, slot_inc, read_writes, fixed, slot_ok FROM d, mzproxy.write_key k;
    IF NOT FOUND THEN
        IF p_at_commit THEN
            -- Taken out (a savepoint rolled back, or a second event).
            RETURN NULL;
        END IF;
        -- No row: the slot of a READ ONLY transaction, which wrote nothing.
        SELECT s.t, s.e INTO t, slot_inc FROM mzproxy.write_slot() s;
        slot_ok := t = -1;
    ELSIF p_at_commit AND fixed IS NOT NULL THEN
        -- T was chosen before COMMIT, and the row kept with it till now.
        RETURN fixed;
    END IF;
    IF slot_ok IS NOT TRUE THEN
        -- The setting was replaced.
        RAISE EXCEPTION 'mzproxy.write_ts was not set by mzproxy'
            USING ERRCODE = '42501',
                  DETAIL = 'A write''s timestamp is chosen by mzproxy''s oracle for that write alone.';
    END IF;
    IF fixed IS NOT NULL THEN
        -- T was chosen before, and the deferred slot's setting put back
        -- since: T again.
        PERFORM set_config('mzproxy.write_ts', fixed::text || ' - ' || mzproxy.key_tag(k.k, fixed::text || ' -'), true)
           FROM mzproxy.write_key k;
        RETURN fixed;
    END IF;
    LOCK TABLE mzproxy.gate IN ROW SHARE MODE;
    -- With the gate held: the incarnation checked (check_incarnation's
    -- condition), the write counted and T chosen, P read as pinned_ts
    -- reads it (after a crash, its floor), and the restamp statements'
    -- lists made (to_regproc: a name, no argument types to parse), in one
    -- query. No pin runs in between, so their order does not matter; the
    -- write is counted even when the check fails (the transaction fails).
    SELECT slot_inc IS NULL OR coalesce((
               SELECT i.retired_at IS NULL
                      AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                 FROM mzproxy.incarnations i WHERE i.id = slot_inc), false),
           GREATEST(mzproxy.now_ms(), CASE WHEN s.is_called THEN s.last_value ELSE mzproxy.pinned_ts() END + 1),
           nextval('mzproxy.writes'),
           c.hist, c.fix_sql, c.static
      INTO may_write, t, counted, hist, fix_sql, static
      FROM mzproxy.pinned s,
           (SELECT array_agg(k.history) AS hist,
                   string_agg(k.history || '_fix($1, $2)', ', ') AS fix_sql,
                   bool_and(to_regproc(k.history || '_fix') IS NOT NULL) AS static
              FROM mzproxy.catalog k WHERE k.oid = ANY (coalesce(rels, '{}'))) c;
    IF NOT may_write THEN
        PERFORM mzproxy.raise_fenced(slot_inc);
    END IF;
    -- After T is chosen, before the restamp and before this transaction
    -- marks its own tables.
    IF read_writes IS NOT NULL THEN
        checked_at := t;
        PERFORM mzproxy.check_reads(read_writes, checked_at);
    END IF;
    IF hist IS NULL THEN
        NULL;
    ELSIF static THEN
        -- (Version 49.) One statement restamps every table at T and
        -- returns the newest start of a version the block closed. Above
        -- T (a clock that stepped back, a T written by hand) the block's
        -- versions move on to it: T is raised as _closed raised it
        -- before, without a query per table at every COMMIT.
        EXECUTE 'SELECT GREATEST(' || fix_sql || ')' INTO closed USING p, t;
        IF closed > t THEN
            t := mzproxy.restamp_raise(hist, t, closed);
        END IF;
    ELSE
        t := mzproxy.restamp_dynamic(hist, p, t);
    END IF;
    -- The restamp raised T (it replaced a version written above the T
    -- chosen): the check marks must carry the final T, so check again.
    IF t > checked_at THEN
        PERFORM mzproxy.check_reads(read_writes, t);
    END IF;
    IF NOT p_at_commit THEN
        UPDATE mzproxy.deferred_slots d SET fixed_t = t WHERE d.xid = my_xid;
    END IF;
    -- set_slot(t, NULL) and mark_written(rels), inline, in one query.
    PERFORM set_config('mzproxy.write_ts', t::text || ' - ' || mzproxy.key_tag(k.k, t::text || ' -'), true),
            (SELECT count(setval(to_regclass('mzproxy.w' || r), pg_sequence_last_value('mzproxy.writes')))
               FROM unnest(rels) r)
       FROM mzproxy.write_key k;
    RETURN t;
END
$_$;



CREATE FUNCTION mzproxy.gen_restamp(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET check_function_bodies TO 'off'
    SET quote_all_identifiers TO 'off'
    AS $$
DECLARE
    h text := (SELECT k.history FROM mzproxy.catalog k WHERE k.id = p_id);
BEGIN
    PERFORM mzproxy.make_marker((SELECT k.oid FROM mzproxy.catalog k WHERE k.id = p_id AND k.kind = 'table'));
    IF h IS NULL OR to_regprocedure(h || '_fix(bigint, bigint)') IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE mzproxy.restamp_functions(h);
END
$$;



CREATE FUNCTION mzproxy.gen_triggers(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET check_function_bodies TO 'off'
    AS $_$
DECLARE
    c record;
    aligned bool;
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
    triggers_ok bool;
    retract_cte text;
    retract_end text;
    retract_check text;
    upd_sql text;
    upd_check text;
    fresh_cte text;
    retract_select text;
    upd_insert text;
    fresh_sql text := '';
    ins_check text := '';
    ins_src text;
    fresh_stamp text;
    fresh_upd text;
    probe text;
    keyed_head text;
BEGIN
    SELECT * INTO c FROM mzproxy.catalog WHERE id = p_id;
    h := c.history;
    PERFORM mzproxy.gen_restamp(p_id);  -- version 11
    rel := format('%I.%I', c.schema_name, c.name);
    fn := 'mzproxy.' || quote_ident('h' || p_id);
    aligned := mzproxy.history_aligned(p_id);
    IF aligned THEN
        -- (Version 13: the rows' own texts, see ddl_trim.sql.)
        -- ("n.*": a bare "n" would be the user's column n, if any.)
        ntext := '(n.*)::text';
        otext := '(d.*)::text';
        htext := mzproxy.history_text(p_id, 'h');
    ELSE
        cols := mzproxy.col_list(p_id, '');
        ncols := mzproxy.col_list(p_id, 'n.');
        ntext := mzproxy.row_text(p_id, 'n.');
        otext := mzproxy.row_text(p_id, 'd.');
        htext := mzproxy.row_text(p_id, 'h.');
    END IF;
    pk := mzproxy.pk_columns(c.oid);
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
    IF left(current_setting('mzproxy.write_ts', true), 3) = '-1 ' THEN
        UPDATE mzproxy.deferred_slots d SET rels = d.rels || TG_RELID
         WHERE d.xid = pg_current_xact_id_if_assigned()::text::bigint AND d.fixed_t IS NULL
           AND NOT TG_RELID = ANY (d.rels)
        RETURNING -d.xid INTO _t;
        _fresh := _t IS NOT NULL;
        IF NOT _fresh THEN
            SELECT -d.xid INTO _t FROM mzproxy.deferred_slots d
             WHERE d.xid = pg_current_xact_id_if_assigned()::text::bigint AND d.fixed_t IS NULL;
        END IF;
    END IF;
    IF _t IS NULL THEN
        _t := mzproxy.stamp_ts(TG_RELID);
        IF _t IS NULL THEN
            RAISE EXCEPTION 'cannot write to managed table %.% outside mzproxy', quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME)
                USING ERRCODE = 'MZ002',
                      HINT = 'Connect through mzproxy: it runs every write in a transaction that records the table''s history.';
        END IF;
    END IF;$c$;

    insert_sql := format($i$
    INSERT INTO %s (%s mz_from, mz_to, mz_hash)
    SELECT %s _t, 9223372036854775807, %s FROM mz_new n;$i$,
        h, CASE WHEN cols = '' THEN '' ELSE cols || ',' END,
        CASE WHEN ncols = '' THEN '' ELSE ncols || ',' END, hash_expr);
    IF aligned THEN
        -- The history table's columns are the new rows' after the first three.
        insert_sql := format($i$
    INSERT INTO %s
    SELECT _t, 9223372036854775807, %s, n.* FROM mz_new n;$i$, h, hash_expr);
    END IF;

    IF pk IS NOT NULL THEN
        SELECT string_agg(format('d.%I AS %I, ', k, 'k' || i), '' ORDER BY i),
               string_agg(format('%I, ', 'k' || i), '' ORDER BY i),
               string_agg(format('h.%I %s o.%I AND ', k, kop[i], 'k' || i), '' ORDER BY i)
          INTO okeys, ogroup, kjoin
          FROM unnest(pk) WITH ORDINALITY AS u(k, i);
    ELSE
        kjoin := 'h.mz_hash = hashtext(o.txt) AND ';
    END IF;

        -- (Version 27, see write_lean.sql.) stamp_ts' query for a
        -- pending slot, in the trigger's own body: the tag checked, T
        -- chosen and tagged, the table's marker set. No row (a value that
        -- only looks pending): _t stays NULL, and the general path's
        -- stamp_ts fails with 42501.
        fresh_stamp := $r$
        IF current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            LOCK TABLE mzproxy.gate IN ROW SHARE MODE;
        END IF;
        SELECT x.t INTO _t
          FROM (SELECT k.k, GREATEST(mzproxy.now_ms(),
                                     coalesce(pg_sequence_last_value('mzproxy.pinned'), mzproxy.pinned_ts()) + 1) AS t,
                       setval(to_regclass('mzproxy.w' || TG_RELID), nextval('mzproxy.writes'))
                  FROM mzproxy.write_key k
                 WHERE current_setting('mzproxy.write_ts', true) = '0 - pending'
                OFFSET 0) x
         WHERE set_config('mzproxy.write_ts', x.t::text || ' - ' || mzproxy.key_tag(x.k, x.t::text || ' -'), true) IS NOT NULL;$r$;

    retract_check := $r$
    IF _k <> _n THEN
        RAISE EXCEPTION 'mzproxy: history of %.% is out of step: % rows removed but % versions found', TG_TABLE_SCHEMA, TG_TABLE_NAME, _n, _k
            USING ERRCODE = 'XX000';
    END IF;
    IF _m > _t AND _t > 0 THEN
        PERFORM mzproxy.raise_overtaken(TG_RELID, _m, _t);
    END IF;$r$;
    IF pk IS NOT NULL AND NOT pk_deferrable THEN
        settings := settings || ' SET enable_seqscan = off SET jit = off';
        SELECT string_agg(format('h.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i)
          INTO kjoin FROM unnest(pk) WITH ORDINALITY AS u(k, i);
        -- One version per old row, found through the lookup index and
        -- checked by whole-row text: normally the key's only current
        -- version, but a query whose writable CTEs delete and re-insert a
        -- key may fire the INSERT trigger first, leaving two. Versions are
        -- found first and then deleted or closed by ctid, so that a filter
        -- on mz_from never tempts the planner to scan all current versions.
        -- (Version 9: one statement, see write_cost.sql.) An older
        -- version of the key with the same text stays open when one
        -- written at _t is there; versions closed at their own _t are
        -- deleted after the statement.
        retract_cte := format($r$
    WITH u AS (
        UPDATE %1$s h SET mz_to = _t FROM mz_old d
         WHERE %2$s h.mz_to = 9223372036854775807 AND %3$s = %4$s
           AND (h.mz_from = _t OR NOT EXISTS (
                SELECT 1 FROM %1$s x
                 WHERE %5$s x.mz_to = 9223372036854775807 AND x.mz_from = _t AND %6$s = %4$s OFFSET 0))
        RETURNING h.mz_from
    )$r$, h, kjoin, htext, otext,
            (SELECT string_agg(format('x.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)),
            CASE WHEN aligned THEN mzproxy.history_text(p_id, 'x') ELSE mzproxy.row_text(p_id, 'x.') END);
        -- (Version 12, see write_trim.sql.) The same statement without
        -- the search for a version written at _t, for a trigger whose
        -- stamp_ts chose T (the slot was pending): the transaction has
        -- written none yet.
        -- (Version 27, see write_lean.sql.) By key alone: with T chosen
        -- by this trigger the key has one current version.
        -- (Version 37, see hist_plans.sql.) The key's current version of
        -- an old row d, as a condition on x: (key, mz_to) >= and <= (d's
        -- key, Infinity), two row comparisons, which only the mirror
        -- (key, mz_to) can take as index conditions, and which start and
        -- end its scan at that one entry. Keys whose operators are not
        -- all pg_catalog's: the key's equalities and mz_to.
        SELECT CASE WHEN bool_and(kop[i] ^@ 'OPERATOR(pg_catalog.')
                    THEN format('ROW(%1$s, x.mz_to) OPERATOR(pg_catalog.>=) ROW(%2$s, 9223372036854775807)'
                                ' AND ROW(%1$s, x.mz_to) OPERATOR(pg_catalog.<=) ROW(%2$s, 9223372036854775807)',
                                string_agg(format('x.%I', k), ', ' ORDER BY i),
                                string_agg(format('d.%I', k), ', ' ORDER BY i))
                    ELSE string_agg(format('x.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i)
                         || 'x.mz_to = 9223372036854775807' END
          INTO probe FROM unnest(pk) WITH ORDINALITY AS u(k, i);
        fresh_cte := format($r$
    WITH u AS (
        UPDATE %1$s h SET mz_to = _t
         WHERE h.ctid = ANY (ARRAY(SELECT s.tid FROM mz_old d, LATERAL (
                   SELECT x.ctid AS tid FROM %1$s x WHERE %2$s OFFSET 0) s))
        RETURNING h.mz_from
    )$r$, h, probe);
        retract_select := $r$
    SELECT count(*), (SELECT count(*) FROM mz_old), max(u.mz_from), count(*) FILTER (WHERE u.mz_from = _t)
      INTO _k, _n, _m, _z FROM u;$r$;
        retract_end := format($r$
    IF _z > 0 THEN
        DELETE FROM %s h USING mz_old d WHERE %s h.mz_to = _t AND h.mz_from = _t;
    END IF;$r$, h, kjoin);
        upd_insert := E', i AS (' || left(insert_sql, -1) || E'\n    )';
        -- (Version 22, see ins_gap.sql.) After an UPDATE whose T was
        -- chosen before it, a version of a new row's key that ends after
        -- T, other than the statement's own new ones (open from T); not
        -- when a version it closed was written after T (_m: the check
        -- after the statement fails it, naming that).
        upd_check := format($r$
    IF _t > 0 AND coalesce(_m, 0) <= _t THEN
        SELECT max(s.mz_to) INTO _d
          FROM mz_new n, LATERAL (SELECT x.mz_to FROM %s x WHERE %s x.mz_to > _t
                                     AND NOT (x.mz_from = _t AND x.mz_to = 9223372036854775807)
                                     ORDER BY x.mz_to DESC LIMIT 1 FOR NO KEY UPDATE) s
         WHERE s.mz_to < 9223372036854775807;
        IF _d IS NOT NULL THEN
            PERFORM mzproxy.raise_deleted_later(TG_RELID, _d, _t);
        END IF;
    END IF;$r$, h,
            (SELECT string_agg(format('x.%I %s n.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)));
        retract_sql := E'\n    END IF;\n    IF _fresh THEN' || fresh_cte || retract_select
                       || E'\n    ELSE' || retract_cte || retract_select || E'\n    END IF;' || retract_end;
        -- (Version 31, see hist_write.sql.) An UPDATE whose trigger
        -- chose T: the current versions written before T closed, the new
        -- versions inserted, each by a plain statement, and the two row
        -- counts compared. They differ only when a current version of an
        -- old row's key was written at or after T (or the history is out
        -- of step). One after T is counted as retracted and reported
        -- (_m: the statement fails). One at T is another transaction's
        -- (sharing T) and is retracted at T, so deleted: every current
        -- version at T of an old row's key is deleted, this statement's
        -- own among them, and this statement's for those keys inserted
        -- again; the difference is the other transactions'. _z, which has
        -- the general path delete versions closed at T, stays 0: none is.
        fresh_upd := format($r$
    UPDATE %1$s h SET mz_to = _t
     WHERE h.ctid = ANY (ARRAY(SELECT s.tid FROM mz_old d, LATERAL (
               SELECT x.ctid AS tid FROM %1$s x WHERE %6$s AND (x.mz_from < _t OR _t < 0) OFFSET 0) s));
    GET DIAGNOSTICS _k = ROW_COUNT;%3$s
    GET DIAGNOSTICS _n = ROW_COUNT;
    IF _k <> _n THEN
        SELECT max(h.mz_from), _k + count(*) INTO _m, _k
          FROM mz_old d JOIN %1$s h ON %2$s h.mz_to = 9223372036854775807 AND h.mz_from > _t;
        DELETE FROM %1$s h USING mz_old d WHERE %2$s h.mz_to = 9223372036854775807 AND h.mz_from = _t;
        GET DIAGNOSTICS _z = ROW_COUNT;%4$s
         WHERE EXISTS (SELECT FROM mz_old d WHERE %5$s true);
        GET DIAGNOSTICS _d = ROW_COUNT;
        _k := _k + _z - _d;
        _z := 0;%7$s
    END IF;$r$, h, kjoin, insert_sql, replace(left(insert_sql, -1), E'\n    ', E'\n        '),
            (SELECT string_agg(format('n.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)),
            probe, replace(retract_check, E'\n    ', E'\n        '));
        upd_sql := E'\n    END IF;\n    IF _fresh THEN' || fresh_upd
                   || E'\n    ELSE' || retract_cte || upd_insert || retract_select || upd_check || retract_end || retract_check || E'\n    END IF;';
        fresh_sql := $r$
    _fresh := coalesce(left(current_setting('mzproxy.write_ts', true), 4) = '0 - ', false);
    IF _fresh THEN$r$ || fresh_stamp || $r$
        _fresh := _t IS NOT NULL;
    END IF;
    IF NOT _fresh THEN$r$;
        -- (Version 22, see ins_gap.sql.) A pending slot: this
        -- statement's stamp_ts chooses T. Otherwise the MZ002 check, and
        -- a version of an inserted key that ends after T.
        ins_check := format($r$
    IF current_setting('mzproxy.write_ts', true) ^@ '0 - ' THEN%s
    END IF;
    IF _t IS NULL THEN%s
    IF _t > 0 THEN
        SELECT max(s.mz_to) INTO _m
          FROM mz_new n, LATERAL (SELECT x.mz_to FROM %s x WHERE %s x.mz_to > _t
                                     ORDER BY x.mz_to DESC LIMIT 1 FOR NO KEY UPDATE) s
         WHERE s.mz_to < 9223372036854775807;
        IF _m IS NOT NULL THEN
            PERFORM mzproxy.raise_deleted_later(TG_RELID, _m, _t);
        END IF;
    END IF;
    END IF;$r$, fresh_stamp, check_sql, h,
            (SELECT string_agg(format('x.%I %s n.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)));
    ELSE
        -- (Version 31, see hist_write.sql.)
        fresh_sql := $r$
    IF current_setting('mzproxy.write_ts', true) ^@ '0 - ' THEN$r$ || fresh_stamp || $r$
    END IF;
    IF _t IS NULL THEN$r$;
        ins_check := fresh_sql || check_sql || E'\n    END IF;';
        retract_sql := E'\n    END IF;' || format($r$
    WITH o AS (
        SELECT %s %s AS txt, count(*) AS n FROM mz_old d GROUP BY %s txt
    ), c AS MATERIALIZED (
        SELECT h.ctid AS tid, h.mz_from, o.n,
               row_number() OVER (PARTITION BY o.txt ORDER BY h.mz_from = _t DESC) AS rn
          FROM o JOIN %s h ON %s h.mz_to = 9223372036854775807 AND %s = o.txt
    ), del AS (
        DELETE FROM %s h USING c WHERE h.ctid = c.tid AND c.rn <= c.n AND c.mz_from = _t RETURNING 1
    ), upd AS (
        UPDATE %s h SET mz_to = _t FROM c WHERE h.ctid = c.tid AND c.rn <= c.n AND c.mz_from <> _t RETURNING c.mz_from
    )
    SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM upd), (SELECT coalesce(sum(n), 0) FROM o), (SELECT max(mz_from) FROM upd)
      INTO _k, _n, _m;$r$,
            okeys, otext, ogroup, h, kjoin, htext, h, h);
    END IF;
    retract_sql := retract_sql || retract_check;
    upd_sql := coalesce(upd_sql, retract_sql || insert_sql);
    keyed_head := fresh_sql || check_sql;
    IF fresh_upd IS NOT NULL THEN
        -- (Version 58, see hist_record.sql.) A keyed table's _upd and
        -- _del: the pending slot and the block's deferred slot as one IF
        -- and its ELSIF; no _fresh branch around the record and stamp_ts,
        -- so the bodies after it lose the END IF that closed it.
        IF NOT starts_with(check_sql, E'\n    IF left(current_setting(''mzproxy.write_ts'', true), 3) = ''-1 '' THEN')
           OR left(upd_sql, 12) <> E'\n    END IF;' OR left(retract_sql, 12) <> E'\n    END IF;' THEN
            RAISE EXCEPTION 'mzproxy: gen_triggers: the slot part of %.% is not as version 57 made it', c.schema_name, c.name
                USING ERRCODE = 'XX000';
        END IF;
        keyed_head := E'\n    IF left(current_setting(''mzproxy.write_ts'', true), 4) = ''0 - '' THEN' || fresh_stamp
                      || E'\n        _fresh := _t IS NOT NULL;\n    ELSIF left(current_setting(''mzproxy.write_ts'', true), 3) = ''-1 '' THEN'
                      || substr(check_sql, length(E'\n    IF left(current_setting(''mzproxy.write_ts'', true), 3) = ''-1 '' THEN') + 1);
        upd_sql := substr(upd_sql, 13);
        retract_sql := substr(retract_sql, 13);
    END IF;

    triggers_ok := (SELECT count(*) FROM pg_trigger t
                     WHERE t.tgrelid = c.oid AND t.tgenabled = 'A'
                       AND (t.tgname, t.tgfoid) IN (('mzproxy_history_ins', to_regprocedure(fn || '_ins()')),
                                                    ('mzproxy_history_upd', to_regprocedure(fn || '_upd()')),
                                                    ('mzproxy_history_del', to_regprocedure(fn || '_del()')),
                                                    ('mzproxy_history_trunc', to_regprocedure(fn || '_trunc()')))) = 4;
    ins_src := format(E'\nDECLARE _t bigint; _fresh bool;%s\nBEGIN%s%s\n    RETURN NULL;\nEND\n',
                      CASE WHEN pk IS NOT NULL AND NOT pk_deferrable THEN ' _m bigint;' ELSE '' END,
                      CASE WHEN ins_check = '' THEN check_sql ELSE ins_check END, insert_sql);
    IF triggers_ok AND EXISTS (
            SELECT 1 FROM pg_proc p
             WHERE p.oid = to_regprocedure(fn || '_ins()') AND p.prosrc = ins_src
               AND coalesce(p.proconfig @> '{enable_seqscan=off,jit=off}', false)
                   = coalesce(pk IS NOT NULL AND NOT pk_deferrable, false)) AND EXISTS (
            SELECT 1 FROM pg_proc p
             WHERE p.oid = to_regprocedure(fn || '_upd()')
               AND p.prosrc = format(E'\nDECLARE _t bigint; _k bigint; _n bigint; _m bigint; _z bigint; _fresh bool; _d bigint;\nBEGIN%s%s%s\n    RETURN NULL;\nEND\n',
                                     keyed_head, upd_sql, '')) THEN
        RETURN;
    END IF;

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER %s
AS $body$%s$body$$f$, fn || '_ins', settings, ins_src);

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER %s
AS $body$
DECLARE _t bigint; _k bigint; _n bigint; _m bigint; _z bigint; _fresh bool;
BEGIN%s%s
    RETURN NULL;
END
$body$$f$, fn || '_del', settings || join_settings, keyed_head, retract_sql);

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER %s
AS $body$
DECLARE _t bigint; _k bigint; _n bigint; _m bigint; _z bigint; _fresh bool; _d bigint;
BEGIN%s%s%s
    RETURN NULL;
END
$body$$f$, fn || '_upd', settings || join_settings, keyed_head, upd_sql, '');

    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE _t bigint; _fresh bool;
BEGIN%s
    _t := mzproxy.truncate_ts(_t, TG_RELID);
    DELETE FROM %s WHERE mz_to = 9223372036854775807 AND mz_from = _t;
    UPDATE %s SET mz_to = _t WHERE mz_to = 9223372036854775807;
    RETURN NULL;
END
$body$$f$, fn || '_trunc', check_sql, h, h);

    IF triggers_ok THEN
        RETURN;
    END IF;
    EXECUTE format('REVOKE ALL ON FUNCTION %s(), %s(), %s(), %s() FROM PUBLIC',
                   fn || '_ins', fn || '_del', fn || '_upd', fn || '_trunc');
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
$_$;



CREATE FUNCTION mzproxy.heartbeat(p_id bigint, p_floor bigint, p_colls bigint[], p_ts bigint[]) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    UPDATE mzproxy.incarnations i
       SET heartbeat_at = clock_timestamp(), floor_ts = GREATEST(i.floor_ts, p_floor)
     WHERE i.id = p_id AND mzproxy.incarnation_live(p_id);
    IF NOT FOUND THEN
        PERFORM mzproxy.raise_fenced(p_id);
    END IF;
    DELETE FROM mzproxy.read_holds h
     WHERE h.incarnation = p_id AND NOT (h.collection = ANY (coalesce(p_colls, '{}')));
    -- A hold not yet published is at or above the floor (one below it was
    -- published by acquire_hold), so inserting it never lowers what
    -- compaction may do below the floor; raising only, as before.
    INSERT INTO mzproxy.read_holds AS h (incarnation, collection, ts)
    SELECT p_id, u.coll, u.ts FROM unnest(p_colls, p_ts) AS u(coll, ts)
     WHERE EXISTS (SELECT 1 FROM mzproxy.collections c WHERE c.id = u.coll)
    ON CONFLICT ON CONSTRAINT read_holds_pkey DO UPDATE SET ts = GREATEST(h.ts, excluded.ts);
    RETURN mzproxy.pinned_ts();
END
$$;



CREATE FUNCTION mzproxy.history_aligned(p_id bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN (SELECT array_agg(a.attname ORDER BY a.attnum)
              FROM mzproxy.catalog k JOIN pg_attribute a ON a.attrelid = to_regclass(k.history)
             WHERE k.id = p_id AND a.attnum > 0 AND NOT a.attisdropped)
           = ARRAY['mz_from', 'mz_to', 'mz_hash']::name[]
             || coalesce((SELECT array_agg(c.name ORDER BY c.attnum) FROM mzproxy.columns c WHERE c.id = p_id), '{}');
END
$$;



CREATE FUNCTION mzproxy.history_pending() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'cannot write to managed table %.% before mzproxy builds its history', quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME)
        USING ERRCODE = '40001',
              DETAIL = format('mzproxy: the history of relation %s is not built', TG_RELID),
              HINT = 'Write through mzproxy: it builds a table''s history before its first write. The transaction might succeed if retried.';
END
$$;



CREATE FUNCTION mzproxy.history_text(p_id bigint, p_alias text) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mzproxy.columns c WHERE c.id = p_id) THEN
        RETURN $t$'()'$t$;
    END IF;
    RETURN format($t$('(' || substr((%1$s.*)::text, length(%1$s.mz_from::text) + length(%1$s.mz_to::text) + length(%1$s.mz_hash::text) + 5))$t$,
                  p_alias);
END
$_$;



CREATE FUNCTION mzproxy.hold_lock_key() RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 7888888888888888801::bigint $$;



CREATE FUNCTION mzproxy.incarnation_live(p_id bigint) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT coalesce((SELECT i.retired_at IS NULL
                        AND i.generation >= (SELECT generation FROM mzproxy.fence)
                        AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                       FROM mzproxy.incarnations i WHERE i.id = p_id), false)
$$;



CREATE FUNCTION mzproxy.key_tag(p_key text, p_v text) RETURNS text
    LANGUAGE sql
    AS $$ SELECT encode(sha256(convert_to(p_key || ' ' || pg_current_xact_id()::text || ' ' || p_v, 'UTF8')), 'hex') $$;



CREATE FUNCTION mzproxy.make_marker(p_oid oid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET quote_all_identifiers TO 'off'
    AS $$
DECLARE
    s text;
BEGIN
    IF p_oid IS NULL THEN
        RETURN;
    END IF;
    IF to_regclass('mzproxy.w' || p_oid) IS NULL AND to_regclass('mzproxy.c' || p_oid) IS NULL
       AND mzproxy.take_spare_marker(p_oid) THEN
        RETURN;
    END IF;
    FOREACH s IN ARRAY ARRAY['w' || p_oid, 'c' || p_oid] LOOP
        IF to_regclass('mzproxy.' || s) IS NULL THEN
            EXECUTE format('CREATE SEQUENCE mzproxy.%I MINVALUE 0 START 0', s);
        END IF;
    END LOOP;
END
$$;



CREATE FUNCTION mzproxy.manage_table(p_oid oid, p_ts bigint, p_rev bigint) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET quote_all_identifiers TO 'off'
    AS $$
DECLARE
    new_id bigint := nextval('mzproxy.catalog_id_seq');
    rel text;
    has_rows bool;
    reserved bool;
BEGIN
    -- (Version 41) The row, the collection and the check of the column
    -- names in one statement. The columns are recorded when the history
    -- is made (build_history): a table without history has none.
    WITH added AS (
        INSERT INTO mzproxy.catalog (id, kind, oid, schema_name, name, history, created_ts, revision, history_built)
        SELECT new_id, 'table', r.oid, n.nspname, r.relname, 'mzproxy.' || quote_ident('h' || new_id), p_ts, p_rev, false
          FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = p_oid
        RETURNING id, schema_name, name),
    collection AS (
        INSERT INTO mzproxy.collections (id, since) SELECT a.id, p_ts FROM added a)
    SELECT format('%I.%I', a.schema_name, a.name),
           EXISTS (SELECT 1 FROM pg_attribute c
                    WHERE c.attrelid = p_oid AND c.attname IN ('mz_from', 'mz_to', 'mz_hash') AND c.attnum > 0 AND NOT c.attisdropped)
      INTO rel, reserved FROM added a;
    IF reserved THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    -- The markers now: a read-write transaction's check (check_reads)
    -- takes a table without them for one just dropped.
    PERFORM mzproxy.make_marker(p_oid);
    -- Rows the table already has (CREATE TABLE AS, SELECT INTO) become
    -- versions at p_ts: built now. So is a table that a later statement
    -- of the same query string writes (the proxy sets
    -- mzproxy.eager_history for such a string: it builds before the
    -- string, when the table is not there yet).
    -- (Version 41) A relation of no blocks has no rows: a plain CREATE
    -- TABLE plans no query for them.
    has_rows := pg_relation_size(p_oid) > 0;
    IF has_rows THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s)', rel) INTO has_rows;
    END IF;
    IF has_rows OR current_setting('mzproxy.eager_history', true) = 'on' THEN
        PERFORM mzproxy.build_history(new_id, p_ts);
    ELSE
        EXECUTE format('CREATE TRIGGER mzproxy_pending_history BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s '
                       'FOR EACH STATEMENT EXECUTE FUNCTION mzproxy.history_pending()', rel);
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER mzproxy_pending_history', rel);
    END IF;
    RETURN new_id;
END
$$;



CREATE FUNCTION mzproxy.mark_written(p_rels oid[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM setval(to_regclass('mzproxy.w' || r), pg_sequence_last_value('mzproxy.writes'))
       FROM unnest(p_rels) r;
END
$$;



CREATE FUNCTION mzproxy.now_ms() RETURNS bigint
    LANGUAGE sql
    AS $$ SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;



CREATE FUNCTION mzproxy.on_ddl_command_end() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    r record;
    l record;  -- (version 41) the relation the command is about
    altered_table record;  -- (version 41) what an ALTER TABLE of a managed table found
    k record;
    ts bigint;
    rev bigint;
    done oid[] := '{}';
    renames bool := false;
    altered oid[] := '{}';
    dependents oid[];
    marked bool := false;  -- (version 36) mzproxy.in_ddl set below
BEGIN
    -- (Version 28: the mark, a hash, only when a mark is set at all.)
    IF current_setting('mzproxy.in_ddl', true) <> '' THEN
        IF current_setting('mzproxy.in_ddl', true) = mzproxy.ddl_mark() THEN
            RETURN;  -- DDL that mzproxy itself runs below
        END IF;
    END IF;
    -- (Version 59) A DROP stashes no command: on_sql_drop moved the
    -- revision for it (DROP OWNED stashes its revocations, a REVOKE).
    IF TG_TAG LIKE 'DROP %' AND TG_TAG <> 'DROP OWNED' THEN
        RETURN;
    END IF;
    -- (Version 46) A pending slot, the request begin_write_occ leaves (the
    -- proxy's autocommit DDL), is all the proof of the proxy that this
    -- needs: T is chosen (ddl_ts) only where one is recorded, a table's
    -- (manage_table, reconcile), not for a view's DDL (view_ts) nor for
    -- an ALTER of a table without history, whose T nothing reads. Any
    -- other value is ddl_ts' to check as before (a block's slot, a T
    -- chosen already, a forged one: 42501, none: NULL).
    IF current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
        ts := 0;
    ELSE
        ts := mzproxy.ddl_ts();  -- (version 29)
    END IF;
    IF ts IS NULL THEN
        -- Outside the proxy: refuse DDL on managed relations, leave the
        -- rest alone. Index maintenance, comments and grants are allowed.
        FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
            IF r.command_tag IN ('GRANT', 'REVOKE') THEN
                -- Grants need no timestamp: keep history readable by the
                -- same roles as its table.
                marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
                PERFORM mzproxy.sync_grants(g.id) FROM mzproxy.catalog g WHERE g.kind = 'table' AND g.dropped_ts IS NULL;
                marked := set_config('mzproxy.in_ddl', '', true) <> '';
                CONTINUE;
            END IF;
            IF r.classid = 'pg_class'::regclass
               AND r.command_tag NOT IN ('COMMENT', 'GRANT', 'REVOKE', 'SECURITY LABEL',
                                         'CREATE INDEX', 'REINDEX')  -- (version 55) not ALTER INDEX: it renames tables and views too
               AND EXISTS (SELECT 1 FROM mzproxy.catalog WHERE oid = r.objid AND dropped_ts IS NULL) THEN
                RAISE EXCEPTION '% on % is not allowed outside mzproxy', r.command_tag, r.object_identity
                    USING ERRCODE = 'MZ003',
                          HINT = 'The table is managed by mzproxy: connect through mzproxy to change it.';
            END IF;
        END LOOP;
        RETURN;
    END IF;

    -- (Version 28: mzproxy.in_ddl is set before each call below that
    -- runs DDL of mzproxy's own, not for every DDL.)
    UPDATE mzproxy.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
    FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
        -- Only ALTER renames or moves what a view's deparsed text names
        -- (relations, columns, schemas, types, functions); CREATE adds new
        -- names, and DROP removes the views that depend on what it drops.
        IF r.command_tag LIKE 'ALTER %' THEN
            IF r.classid = 'pg_class'::regclass THEN
                altered := altered || r.objid;
            ELSE
                renames := true;
            END IF;
        END IF;
        IF r.command_tag IN ('GRANT', 'REVOKE') THEN
            -- GRANT does not say which relations it touched.
            marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
            PERFORM mzproxy.sync_grants(g.id) FROM mzproxy.catalog g WHERE g.kind = 'table' AND g.dropped_ts IS NULL;
            CONTINUE;
        END IF;
        IF r.classid IS DISTINCT FROM 'pg_class'::regclass OR r.schema_name = 'mzproxy' THEN
            CONTINUE;
        END IF;
        -- (Version 41) ALTER TABLE of a managed table, in one statement:
        -- what the checks below need (no column takes a reserved name; not
        -- made an inheritance child, the one way ALTER TABLE of a managed
        -- table brings it into inheritance; a view whose text may name
        -- it). A table without history needs nothing else; one with
        -- history is reconciled.
        -- (Version 52) A SELECT, not an UPDATE that returned the same:
        -- the row is written only when the table was renamed or moved
        -- (its name and schema followed, with the revision), not at every
        -- column change (a non-HOT UPDATE of the catalog, with its indexes
        -- and foreign-key triggers set up each time). The reserved names
        -- are one range of the (attrelid, attname) index, filtered: an IN
        -- list there was three descents with their array keys sorted at
        -- every execution (about 28k instructions an ALTER).
        IF r.command_tag = 'ALTER TABLE' AND NOT r.objid = ANY (done) THEN
            SELECT t.id, t.history_built, (r.objsubid = 0 AND r.object_identity IS DISTINCT FROM format('%I.%I', t.schema_name, t.name)) AS renamed,  -- (version 57)
                   EXISTS (SELECT 1 FROM pg_attribute a
                            WHERE a.attrelid = t.oid AND a.attname BETWEEN 'mz_from'::name AND 'mz_to'::name
                              AND a.attname IN ('mz_from', 'mz_to', 'mz_hash')
                              AND a.attnum > 0 AND NOT a.attisdropped) AS reserved,
                   EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = t.oid) AS inherits
              INTO altered_table
              FROM mzproxy.catalog t
             WHERE t.oid = r.objid AND t.dropped_ts IS NULL AND t.kind = 'table';
            IF FOUND THEN
                done := done || r.objid;
                IF altered_table.inherits THEN
                    RAISE EXCEPTION 'table inheritance involving a table managed by mzproxy is not supported (%)', r.objid::regclass
                        USING ERRCODE = '0A000';
                END IF;
                IF altered_table.reserved THEN
                    RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
                        USING ERRCODE = '42939';
                END IF;
                IF altered_table.renamed THEN
                    UPDATE mzproxy.catalog t SET schema_name = r.schema_name, name = c.relname, revision = rev
                      FROM pg_class c WHERE t.id = altered_table.id AND c.oid = t.oid;
                END IF;
                -- (Version 57) Only a rename or move, or a column's
                -- rename (a command that reports a column), changes the
                -- text of a view over the table: the loop's end looks for
                -- such views then, by the oid left in altered.
                IF NOT altered_table.renamed AND r.objsubid = 0 THEN
                    altered := array_remove(altered, r.objid);
                END IF;
                IF altered_table.history_built THEN
                    IF ts = 0 THEN
                        ts := mzproxy.ddl_ts();
                    END IF;
                    marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
                    PERFORM mzproxy.reconcile_built(altered_table.id, ts, false);
                END IF;
                CONTINUE;
            END IF;
        END IF;
        -- (Version 40) A view created or replaced, in one statement: the
        -- conditions of a managed view below, and its row new or updated.
        -- (Version 59) From the command alone: its schema_name ('pg_temp'
        -- for any temporary schema) and the name in its object_identity.
        IF r.command_tag = 'CREATE VIEW' AND r.object_type = 'view' THEN
            IF r.schema_name NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'mzproxy', 'pg_temp')
               AND r.schema_name NOT LIKE 'pg\_temp\_%' AND r.schema_name NOT LIKE 'pg\_toast\_temp\_%' THEN
                INSERT INTO mzproxy.catalog (id, kind, oid, schema_name, name, view_sql, created_ts, revision)
                VALUES (nextval('mzproxy.catalog_id_seq'), 'view', r.objid, r.schema_name, (parse_ident(r.object_identity))[2],
                        rtrim(btrim(pg_get_viewdef(r.objid)), ';'), CASE WHEN ts = 0 THEN mzproxy.view_ts() ELSE ts END, rev)
                ON CONFLICT (oid) WHERE dropped_ts IS NULL DO UPDATE
                   SET schema_name = excluded.schema_name, name = excluded.name,
                       view_sql = excluded.view_sql, revision = excluded.revision;
            END IF;
            CONTINUE;
        END IF;
        -- The relation the command is about (an index's table for CREATE INDEX).
        SELECT CASE WHEN c.relkind IN ('i', 'I') THEN (SELECT indrelid FROM pg_index WHERE indexrelid = c.oid)
                    ELSE c.oid END AS rel, c.relkind
          INTO l FROM pg_class c WHERE c.oid = r.objid;
        IF l.rel IS NULL OR l.rel = ANY (done) THEN
            CONTINUE;
        END IF;
        done := done || l.rel;
        -- A write through an inheritance parent reaches its children's rows,
        -- which the parent's history triggers cannot account for.
        -- (Version 36: a view takes no part in inheritance.)
        IF l.relkind <> 'v' AND EXISTS (SELECT 1 FROM pg_inherits i
                     JOIN mzproxy.catalog g ON g.oid IN (i.inhparent, i.inhrelid) AND g.dropped_ts IS NULL
                    WHERE l.rel IN (i.inhparent, i.inhrelid)) THEN
            RAISE EXCEPTION 'table inheritance involving a table managed by mzproxy is not supported (%)', l.rel::regclass
                USING ERRCODE = '0A000';
        END IF;
        SELECT * INTO k FROM mzproxy.catalog WHERE oid = l.rel AND dropped_ts IS NULL;
        IF FOUND THEN
            IF k.kind = 'table' AND TG_TAG = 'CREATE INDEX' THEN
                -- (Version 10: only the lookup mirrors. The statement's
                -- tag, not the command's: ALTER TABLE ... ADD UNIQUE
                -- reports an index of its own too.)
                -- (Version 28: an index that is not unique has no
                -- mirror and changes no primary key.)
                IF EXISTS (SELECT 1 FROM pg_index x WHERE x.indexrelid = r.objid AND x.indisunique) THEN
                    marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
                    PERFORM mzproxy.sync_indexes(k.id);
                END IF;
                UPDATE mzproxy.catalog SET revision = rev WHERE id = k.id;
            ELSIF k.kind = 'table' THEN
                -- (Version 41: reconcile_built without reconcile's second
                -- read of the row when the table has history.)
                IF ts = 0 THEN
                    ts := mzproxy.ddl_ts();  -- (version 46) what reconciles records T
                END IF;
                IF k.history_built THEN
                    marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
                    PERFORM mzproxy.reconcile_built(k.id, ts, false);
                ELSE
                    PERFORM mzproxy.reconcile(k.id, ts, false);
                END IF;
                UPDATE mzproxy.catalog SET revision = rev WHERE id = k.id;
            ELSE
                UPDATE mzproxy.catalog c SET schema_name = n.nspname, name = x.relname,
                       view_sql = mzproxy.view_definition(x.oid), revision = rev
                  FROM pg_class x JOIN pg_namespace n ON n.oid = x.relnamespace
                 WHERE c.id = k.id AND x.oid = c.oid;
            END IF;
            CONTINUE;
        END IF;
        -- A new relation: ordinary permanent tables (not partitions) and
        -- views outside system schemas become managed.
        PERFORM 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = l.rel AND c.relpersistence <> 't'
            AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'mzproxy')
            AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
            AND ((c.relkind = 'r' AND NOT c.relispartition
                  AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)
                  AND r.command_tag IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO'))
              OR (c.relkind = 'v' AND r.command_tag = 'CREATE VIEW'));
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        IF r.object_type = 'view' THEN
            INSERT INTO mzproxy.catalog (id, kind, oid, schema_name, name, view_sql, created_ts, revision)
            SELECT nextval('mzproxy.catalog_id_seq'), 'view', c.oid, n.nspname, c.relname,
                   mzproxy.view_definition(c.oid), CASE WHEN ts = 0 THEN mzproxy.view_ts() ELSE ts END, rev
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = l.rel;
        ELSE
            IF ts = 0 THEN
                ts := mzproxy.ddl_ts();
            END IF;
            marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
            PERFORM mzproxy.manage_table(l.rel, ts, rev);
        END IF;
    END LOOP;
    IF renames THEN
        -- Deparsed view text names relations as they are called now.
        UPDATE mzproxy.catalog SET view_sql = mzproxy.view_definition(oid)
         WHERE kind = 'view' AND dropped_ts IS NULL AND view_sql IS DISTINCT FROM mzproxy.view_definition(oid);
    ELSIF altered <> '{}' THEN
        -- A relation's name (or its columns' or schema's) is in the text of
        -- the views whose rules depend on it, and only there.
        -- (Version 13: the views first, then the update only if any.)
        -- (Version 33: each rule by its oid, not a join that hashes
        -- pg_rewrite.)
        SELECT array_agg(DISTINCT (SELECT w.ev_class FROM pg_rewrite w WHERE w.oid = d.objid)) INTO dependents
          FROM pg_depend d
         WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = ANY (altered)
           -- (Version 39: a filter, not an index condition: the
           -- relation's references only, not every rule's.)
           AND (d.classid = 'pg_rewrite'::regclass) IS TRUE;
        IF dependents IS NOT NULL THEN
            UPDATE mzproxy.catalog g SET view_sql = mzproxy.view_definition(g.oid)
             WHERE g.kind = 'view' AND g.dropped_ts IS NULL AND g.oid = ANY (dependents)
               AND g.view_sql IS DISTINCT FROM mzproxy.view_definition(g.oid);
        END IF;
    END IF;
    IF marked THEN
        marked := set_config('mzproxy.in_ddl', '', true) <> '';
    END IF;
END
$$;



CREATE FUNCTION mzproxy.on_pending_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    r record;
BEGIN
    IF current_setting('mzproxy.in_ddl', true) <> '' THEN
        IF current_setting('mzproxy.in_ddl', true) = mzproxy.ddl_mark() THEN
            RETURN;
        END IF;
    END IF;
    FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
        IF r.object_type = 'trigger' AND r.original AND r.object_identity LIKE 'mzproxy\_pending\_history on %' THEN
            RAISE EXCEPTION 'cannot drop trigger %: mzproxy refuses writes to the table with it until it builds the table''s history', r.object_identity
                USING ERRCODE = 'MZ003';
        END IF;
    END LOOP;
END
$$;



CREATE FUNCTION mzproxy.on_sql_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
DECLARE
    r record;
    k record;
    ts bigint;
    vts bigint;  -- (version 46) a view's timestamp, when no T was chosen
    rev bigint;
    mirror name;
    marked bool;  -- (version 36) set_config in an assignment, not a query
BEGIN
    -- (Version 28: the mark only when one is set; the timestamp only
    -- when a managed relation or column is dropped, below.)
    IF current_setting('mzproxy.in_ddl', true) <> '' THEN
        IF current_setting('mzproxy.in_ddl', true) = mzproxy.ddl_mark() THEN
            RETURN;
        END IF;
    END IF;
    -- (Version 48) An ALTER TABLE that drops only columns of its own
    -- (DROP COLUMN without a cascade), which the loop below would pass
    -- over: on_ddl_command_end reconciles them, or refuses them outside
    -- mzproxy. One query instead of the loop's cursor, and only for an
    -- ALTER TABLE (in one IF with the tag, the query's plan was set up
    -- for every DROP too).
    IF TG_TAG = 'ALTER TABLE' THEN
        IF NOT EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() o
                        WHERE NOT (o.classid = 'pg_class'::regclass AND o.objsubid <> 0 AND o.original)) THEN
            RETURN;
        END IF;
    END IF;
    FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
        IF r.object_type = 'trigger' AND r.original AND r.object_identity LIKE 'mzproxy\_history\_% on %' THEN
            RAISE EXCEPTION 'cannot drop trigger %: mzproxy records the table''s history with it', r.object_identity
                USING ERRCODE = 'MZ003';
        END IF;
        -- (Version 39) A column its own ALTER TABLE drops: reconciled,
        -- or refused outside mzproxy, by on_ddl_command_end.
        IF r.classid = 'pg_class'::regclass AND r.objsubid <> 0 AND r.original AND TG_TAG = 'ALTER TABLE' THEN
            CONTINUE;
        END IF;
        IF r.classid = 'pg_class'::regclass AND r.objsubid <> 0 THEN
            -- A column of a managed table: ALTER TABLE DROP COLUMN (also
            -- handled at ddl_command_end), or a cascade from another object
            -- (DROP TYPE ... CASCADE) that no ALTER TABLE event reports.
            SELECT * INTO k FROM mzproxy.catalog WHERE oid = r.objid AND kind = 'table' AND dropped_ts IS NULL;
            IF FOUND AND EXISTS (SELECT 1 FROM pg_class WHERE oid = r.objid) THEN
                ts := coalesce(ts, mzproxy.ddl_ts());  -- (version 29)
                IF ts IS NULL THEN
                    RAISE EXCEPTION 'dropping % is not allowed outside mzproxy', r.object_identity
                        USING ERRCODE = 'MZ003',
                              HINT = 'The table is managed by mzproxy: connect through mzproxy to change it.';
                END IF;
                -- (Version 39: every column but an ALTER TABLE's own.)
                marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
                PERFORM mzproxy.reconcile(k.id, ts, false);
                marked := set_config('mzproxy.in_ddl', '', true) <> '';
            END IF;
            CONTINUE;
        END IF;
        IF r.classid <> 'pg_class'::regclass THEN
            CONTINUE;
        END IF;
        -- (Version 40) A table's TOAST table and index: never managed.
        IF r.schema_name = 'pg_toast' THEN
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
            -- (Version 8: found in index_mirrors by the index's oid.)
            DELETE FROM mzproxy.index_mirrors m WHERE m.index_oid = r.objid RETURNING m.mirror INTO mirror;
            IF r.original AND to_regclass('mzproxy.' || quote_ident(mirror)) IS NOT NULL THEN
                marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
                EXECUTE format('DROP INDEX mzproxy.%I', mirror);
                marked := set_config('mzproxy.in_ddl', '', true) <> '';
            END IF;
            CONTINUE;
        END IF;
        -- (Version 52) A view that a DROP VIEW drops under a pending slot
        -- (the proxy's autocommit DDL): its row marked dropped at
        -- view_ts() in one statement, without reading it first. The
        -- revision moves here even when the view is not managed (a
        -- temporary one), once, as for any DROP through mzproxy. Views
        -- after a T was chosen in this DROP (a cascade that reconciled a
        -- column) take the path below, and that T, as before.
        IF TG_TAG = 'DROP VIEW' AND r.object_type = 'view' AND current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            IF rev IS NULL THEN
                UPDATE mzproxy.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
            END IF;
            vts := coalesce(vts, mzproxy.view_ts());
            UPDATE mzproxy.catalog SET dropped_ts = vts, revision = rev
             WHERE oid = r.objid AND dropped_ts IS NULL AND kind = 'view';
            CONTINUE;
        END IF;
        SELECT * INTO k FROM mzproxy.catalog WHERE oid = r.objid AND dropped_ts IS NULL;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        -- (Version 46) A DROP VIEW (which drops views alone) under a
        -- pending slot takes no T (view_ts); any other DROP does (ddl_ts),
        -- views it drops with a table included, which then share its T.
        IF TG_TAG = 'DROP VIEW' AND k.kind = 'view' AND current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            vts := coalesce(vts, mzproxy.view_ts());
        ELSE
            ts := coalesce(ts, mzproxy.ddl_ts());  -- (version 29)
        END IF;
        IF coalesce(ts, vts) IS NULL THEN
            RAISE EXCEPTION 'DROP of % is not allowed outside mzproxy', r.object_identity
                USING ERRCODE = 'MZ003',
                      HINT = 'The relation is managed by mzproxy: connect through mzproxy to drop it.';
        END IF;
        IF rev IS NULL THEN
            UPDATE mzproxy.catalog_revision SET revision = revision + 1 RETURNING revision INTO rev;
        END IF;
        -- The history table stays (compaction removes it once no read can
        -- reach it); the trigger functions go.
        UPDATE mzproxy.catalog SET dropped_ts = coalesce(ts, vts), revision = rev WHERE id = k.id;
        IF k.kind = 'table' THEN
            marked := set_config('mzproxy.in_ddl', mzproxy.ddl_mark(), true) <> '';
            -- (Version 28: the trigger functions go with the history
            -- table, in compact.)
            PERFORM mzproxy.retire_marker(k.oid);  -- version 19: kept for the next table
            marked := set_config('mzproxy.in_ddl', '', true) <> '';
        END IF;
    END LOOP;
    -- (Version 59) The revision of a DROP through mzproxy moves here, once,
    -- also when nothing managed went: on_ddl_command_end returns at once
    -- for a DROP (it has no command). Not for DROP OWNED, which
    -- on_ddl_command_end still runs, nor for another tag's drops (an
    -- ALTER's), whose command on_ddl_command_end runs.
    IF rev IS NULL AND TG_TAG LIKE 'DROP %' AND TG_TAG <> 'DROP OWNED' THEN
        IF current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            UPDATE mzproxy.catalog_revision SET revision = revision + 1;
        ELSIF coalesce(ts, vts, mzproxy.ddl_ts()) IS NOT NULL THEN
            UPDATE mzproxy.catalog_revision SET revision = revision + 1;
        END IF;
    END IF;
END
$$;



CREATE FUNCTION mzproxy.open_write(p_ts bigint, p_inc bigint) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    cur bigint := (SELECT s.t FROM mzproxy.write_slot() s);
    least_t bigint;
BEGIN
    IF cur IS NOT NULL THEN
        IF p_ts IS NULL OR p_ts = cur THEN
            RETURN cur;
        END IF;
        RAISE EXCEPTION 'transaction already writes at timestamp %, cannot also write at %', cur, p_ts
            USING ERRCODE = '25000';
    END IF;
    LOCK TABLE mzproxy.gate IN ROW SHARE MODE;
    PERFORM mzproxy.check_incarnation(p_inc);
    IF p_ts IS NULL THEN
        PERFORM set_config('mzproxy.write_ts', '0 - pending', true);
        RETURN 0;
    END IF;
    PERFORM nextval('mzproxy.writes');
    least_t := mzproxy.pinned_ts() + 1;
    IF p_ts < least_t THEN
        RAISE EXCEPTION 'write at timestamp % conflicts: the upper is already %', p_ts, least_t
            USING ERRCODE = 'MZ001', DETAIL = least_t::text;
    END IF;
    -- A pin relies on every T being at most what current_write_ts
    -- would choose.
    IF p_ts > GREATEST(mzproxy.now_ms(), least_t) THEN
        RAISE EXCEPTION 'cannot write at timestamp %, ahead of the clock', p_ts
            USING ERRCODE = '22008';
    END IF;
    PERFORM mzproxy.set_slot(p_ts, NULL);
    RETURN p_ts;
END
$$;



CREATE FUNCTION mzproxy.open_write_deferred(p_inc bigint, p_read_writes bigint DEFAULT NULL::bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    slot text := '-1 ' || coalesce(p_inc::text, '-');
    cur bigint;
BEGIN
    IF coalesce(current_setting('mzproxy.write_ts', true), '') <> '' OR pg_current_xact_id_if_assigned() IS NOT NULL THEN
        cur := (SELECT s.t FROM mzproxy.write_slot() s);
    END IF;
    IF cur > 0 THEN
        -- T chosen. By fix_write (a block's DDL, a read of its own
        -- writes): its reads were checked then, nothing is left to check.
        -- By anything else (begin_write(), begin_write_at, commit_write
        -- after a pending slot), in a block that read: they can no longer be
        -- (version 47).
        IF p_read_writes IS NOT NULL AND NOT EXISTS (
                SELECT FROM mzproxy.deferred_slots d
                 WHERE d.xid = pg_current_xact_id_if_assigned()::text::bigint AND d.fixed_t = cur) THEN
            RAISE EXCEPTION 'transaction chose its write timestamp % before its reads were checked', cur
                USING ERRCODE = '25000',
                      DETAIL = 'A transaction block that read at its timestamp and then writes is checked against what it read when mzproxy chooses its write timestamp.',
                      HINT = 'Do not call mzproxy''s write-slot functions in a transaction block; ROLLBACK and run it again.';
        END IF;
        RETURN 0;
    END IF;
    IF cur IS NULL OR cur = 0 THEN
        -- No slot, or a pending one (begin_write_occ, the request set by
        -- hand: nothing is written under it yet, since the
        -- first history row chooses T), which becomes the block's
        -- deferred slot (version 47). Fenced now or at fix_write, which
        -- checks again with the gate held (check_incarnation's condition).
        IF p_inc IS NOT NULL AND NOT coalesce((
                SELECT i.retired_at IS NULL
                       AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                  FROM mzproxy.incarnations i WHERE i.id = p_inc), false) THEN
            PERFORM mzproxy.raise_fenced(p_inc);
        END IF;
        PERFORM set_config('mzproxy.write_ts', slot || ' ' || mzproxy.key_tag(k.k, slot), true) FROM mzproxy.write_key k;
    END IF;
    -- A READ ONLY transaction writes no history (PostgreSQL refuses its
    -- writes), and could not record itself either.
    IF current_setting('transaction_read_only') = 'off' THEN
        -- A second call keeps the stricter check (see block_cost.sql).
        INSERT INTO mzproxy.deferred_slots AS d (xid, inc, read_writes)
            VALUES (pg_current_xact_id()::text::bigint, p_inc, p_read_writes)
            ON CONFLICT (xid) DO UPDATE SET read_writes = LEAST(d.read_writes, excluded.read_writes);
    END IF;
    RETURN 0;
END
$$;



CREATE FUNCTION mzproxy.pin() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t bigint;
BEGIN
    IF (SELECT s.t FROM mzproxy.write_slot() s) IS NOT NULL THEN
        RETURN mzproxy.current_write_ts();
    END IF;
    t := (SELECT q.t FROM mzproxy.settled_pin q);
    IF t IS NOT NULL THEN
        RETURN t;
    END IF;
    BEGIN
        t := mzproxy.pin_locked();
        RAISE SQLSTATE 'MZP00';
    EXCEPTION WHEN SQLSTATE 'MZP00' THEN
        NULL;
    END;
    RETURN t;
END
$$;



CREATE FUNCTION mzproxy.pin_check(p_peek bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    p bigint;
    called bool;
    w bigint;
BEGIN
    IF p_peek IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT s.last_value, s.is_called INTO p, called FROM mzproxy.pinned s;
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO w FROM mzproxy.writes s;
    IF NOT called OR w <> p_peek OR p < mzproxy.now_ms() - 1000 THEN
        RETURN NULL;
    END IF;
    RETURN p;
END
$$;



CREATE FUNCTION mzproxy.pin_held() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ BEGIN RETURN mzproxy.pin_locked(); END $$;



CREATE FUNCTION mzproxy.pin_locked() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    p bigint;
    w bigint;
    seen bigint;
    t bigint;
    clock bigint;
BEGIN
    LOCK TABLE mzproxy.gate IN EXCLUSIVE MODE;
    p := mzproxy.pinned_ts();
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO w FROM mzproxy.writes s;
    SELECT s.last_value INTO seen FROM mzproxy.writes_seen s;
    clock := mzproxy.now_ms();
    t := GREATEST(clock, p + CASE WHEN w <> seen THEN 1 ELSE 0 END);
    -- Reads and writes alternating faster than the clock push P ahead of
    -- it; past a second they wait for the clock (the crash floor relies
    -- on it).
    WHILE t > clock + 1000 LOOP
        PERFORM pg_sleep(0.001);
        clock := mzproxy.now_ms();
    END LOOP;
    IF t <> p OR NOT (SELECT s.is_called FROM mzproxy.pinned s) THEN
        PERFORM setval('mzproxy.pinned', t);
    END IF;
    IF w <> seen THEN
        PERFORM setval('mzproxy.writes_seen', w);
    END IF;
    RETURN t;
END
$$;



CREATE FUNCTION mzproxy.pin_peek() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    w bigint;
    seen bigint;
    called bool;
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO w FROM mzproxy.writes s;
    SELECT s.last_value INTO seen FROM mzproxy.writes_seen s;
    SELECT s.is_called INTO called FROM mzproxy.pinned s;
    IF w <> seen OR NOT called THEN
        RETURN NULL;
    END IF;
    RETURN w;
END
$$;



CREATE FUNCTION mzproxy.pinned_ts() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    p bigint;
    called bool;
BEGIN
    SELECT s.last_value, s.is_called INTO p, called FROM mzproxy.pinned s;
    IF called THEN
        RETURN p;
    END IF;
    RETURN GREATEST(mzproxy.now_ms() + 1000, (SELECT d.upper FROM mzproxy.txns_durable d));
END
$$;



CREATE FUNCTION mzproxy.pinned_writes() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ BEGIN RETURN (SELECT s.last_value FROM mzproxy.writes_seen s); END $$;



CREATE FUNCTION mzproxy.pk_columns(p_oid oid) RETURNS name[]
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RETURN (SELECT array_agg(a.attname ORDER BY k.ord)
              FROM pg_index i
              CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = p_oid AND i.indisprimary);
END
$$;



CREATE FUNCTION mzproxy.plain_column_change(p_id bigint, p_oid oid, p_history text) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET quote_all_identifiers TO 'off'
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
    known AS (SELECT cc.attnum, cc.name, cc.type FROM mzproxy.columns cc WHERE cc.id = p_id)
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
        WITH dropped AS (DELETE FROM mzproxy.columns cc WHERE cc.id = p_id AND cc.attnum = ANY (d.gone))
        INSERT INTO mzproxy.columns
        SELECT p_id, u.attnum, u.name, u.type FROM unnest(d.added_attnum, d.added_name, d.added_type) AS u(attnum, name, type);
    END IF;
    RETURN true;
END
$$;



CREATE FUNCTION mzproxy.raise_deleted_later(p_rel oid, p_deleted bigint, p_t bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'could not serialize access due to concurrent delete'
        USING ERRCODE = '40001',
              DETAIL = format('mzproxy: a row of %s with a key this statement inserts was deleted at timestamp %s, after this transaction''s timestamp %s.',
                              p_rel::regclass, p_deleted, p_t),
              HINT = 'The transaction might succeed if retried.';
END
$$;



CREATE FUNCTION mzproxy.raise_fenced(p_id bigint) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    i record;
    n record;
BEGIN
    SELECT * INTO i FROM mzproxy.incarnations WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'mzproxy incarnation % is not registered in this database', p_id
            USING ERRCODE = 'XX000', DETAIL = 'expired', HINT = 'The proxy must register again before serving.';
    END IF;
    IF i.fenced_by IS NOT NULL THEN
        SELECT * INTO n FROM mzproxy.incarnations WHERE id = i.fenced_by;
        RAISE EXCEPTION 'mzproxy incarnation % (generation %) fenced by new generation % (incarnation %)',
            i.id, i.generation, n.generation, n.id
            USING ERRCODE = 'XX000', DETAIL = 'fenced',
                  HINT = 'A proxy of a newer generation owns writes to this database.';
    END IF;
    IF i.generation < (SELECT generation FROM mzproxy.fence) THEN
        RAISE EXCEPTION 'mzproxy incarnation % (generation %) fenced by new generation %',
            i.id, i.generation, (SELECT generation FROM mzproxy.fence)
            USING ERRCODE = 'XX000', DETAIL = 'fenced',
                  HINT = 'A proxy of a newer generation owns writes to this database.';
    END IF;
    RAISE EXCEPTION 'mzproxy incarnation % lost its lease (%) and is fenced until it registers again',
        i.id, CASE WHEN i.retired_at IS NULL THEN format('no heartbeat for more than %s ms', i.grace_ms)
                   ELSE i.retired_reason END
        USING ERRCODE = 'XX000', DETAIL = 'expired',
              HINT = 'Its read holds no longer protect history; the proxy must register again before serving.';
END
$$;



CREATE FUNCTION mzproxy.raise_overtaken(p_rel oid, p_newer bigint, p_t bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'could not serialize access due to concurrent update'
        USING ERRCODE = '40001',
              DETAIL = format('mzproxy: a row of %s was written at timestamp %s, after this transaction''s timestamp %s.',
                              p_rel::regclass, p_newer, p_t),
              HINT = 'The transaction might succeed if retried.';
END
$$;



CREATE FUNCTION mzproxy.raise_read_later(p_rel oid, p_t bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    RAISE EXCEPTION 'could not serialize access due to concurrent update'
        USING ERRCODE = '40001',
              DETAIL = format('mzproxy: %s was read by a transaction with a later timestamp than this transaction''s %s, which did not see this write.',
                              p_rel::regclass, p_t),
              HINT = 'The transaction might succeed if retried.';
END
$$;



CREATE FUNCTION mzproxy.read_ts() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ BEGIN RETURN mzproxy.pin(); END $$;



CREATE FUNCTION mzproxy.reconcile(p_id bigint, p_ts bigint, p_new boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    rel oid;
BEGIN
    -- (Version 40: the row and the name's update in one statement.)
    WITH renamed AS (
        UPDATE mzproxy.catalog k SET schema_name = n.nspname, name = r.relname
          FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
         WHERE k.id = p_id AND NOT k.history_built AND r.oid = k.oid
           AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname))
    SELECT k.oid INTO rel FROM mzproxy.catalog k WHERE k.id = p_id AND NOT k.history_built;
    IF NOT FOUND THEN
        PERFORM mzproxy.reconcile_built(p_id, p_ts, p_new);
        RETURN;
    END IF;
    -- No history: the name is all there is to follow (version 41: the
    -- columns are recorded when the history is made).
    IF EXISTS (SELECT 1 FROM pg_attribute a
                WHERE a.attrelid = rel AND a.attname IN ('mz_from', 'mz_to', 'mz_hash') AND a.attnum > 0 AND NOT a.attisdropped) THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
END
$$;



CREATE FUNCTION mzproxy.reconcile_built(p_id bigint, p_ts bigint, p_new boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET quote_all_identifiers TO 'off'
    AS $_$
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
    -- (Version 39: one statement; c is the row before the name's update.)
    WITH renamed AS (
        UPDATE mzproxy.catalog k SET schema_name = n.nspname, name = r.relname
          FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace
         WHERE k.id = p_id AND r.oid = k.oid AND (k.schema_name, k.name) IS DISTINCT FROM (n.nspname, r.relname))
    SELECT * INTO c FROM mzproxy.catalog WHERE id = p_id;
    -- (Version 29: plain columns added or columns dropped, nothing else,
    -- in one read; the shape checked as below.)
    IF NOT p_new AND mzproxy.plain_column_change(p_id, c.oid, c.history) THEN
        IF c.shape IS NULL OR c.shape <> mzproxy.table_shape(p_id) THEN
            PERFORM mzproxy.sync_indexes(p_id);
            PERFORM mzproxy.sync_triggers(p_id);
            PERFORM mzproxy.sync_grants(p_id);
        END IF;
        RETURN;
    END IF;
    SELECT coalesce(array_agg(uc.attnum ORDER BY uc.attnum), '{}'), coalesce(array_agg(uc.name ORDER BY uc.attnum), '{}'),
           coalesce(array_agg(uc.type ORDER BY uc.attnum), '{}')
      INTO u_attnum, u_name, u_type FROM mzproxy.user_columns(c.oid) uc;
    IF u_name && ARRAY['mz_from', 'mz_to', 'mz_hash']::name[] THEN
        RAISE EXCEPTION 'column names mz_from, mz_to and mz_hash are reserved by mzproxy'
            USING ERRCODE = '42939';
    END IF;
    -- Dropped columns: dropped from history too (old versions lose them).
    FOR m IN SELECT cc.attnum, cc.name FROM mzproxy.columns cc
              WHERE cc.id = p_id AND NOT cc.attnum = ANY (u_attnum)
    LOOP
        -- (A DROP TYPE ... CASCADE may have dropped it from history already.)
        IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c.history::regclass AND attname = m.name AND NOT attisdropped) THEN
            EXECUTE format('ALTER TABLE %s DROP COLUMN %I', c.history, m.name);
        END IF;
        DELETE FROM mzproxy.columns WHERE id = p_id AND attnum = m.attnum;
        reshaped := true;
    END LOOP;
    -- Renamed columns: two steps, so that swaps (a->b, b->a) work.
    FOR m IN SELECT cc.attnum, cc.name FROM mzproxy.columns cc JOIN unnest(u_attnum, u_name) AS uc(attnum, name) USING (attnum)
              WHERE cc.id = p_id AND cc.name <> uc.name
    LOOP
        EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', c.history, m.name, 'mz_tmp_' || m.attnum);
        UPDATE mzproxy.columns SET name = 'mz_tmp_' || m.attnum WHERE id = p_id AND attnum = m.attnum;
    END LOOP;
    FOR m IN SELECT cc.attnum, cc.name, uc.name AS newname FROM mzproxy.columns cc JOIN unnest(u_attnum, u_name) AS uc(attnum, name) USING (attnum)
              WHERE cc.id = p_id AND cc.name <> uc.name
    LOOP
        EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', c.history, m.name, m.newname);
        UPDATE mzproxy.columns SET name = m.newname WHERE id = p_id AND attnum = m.attnum;
    END LOOP;
    -- Changed types: convert history by cast; when there is no cast, the
    -- old versions get NULL (the current ones are rewritten by resync).
    FOR m IN SELECT cc.attnum, cc.name, uc.type FROM mzproxy.columns cc JOIN unnest(u_attnum, u_type) AS uc(attnum, type) USING (attnum)
              WHERE cc.id = p_id AND cc.type <> uc.type
    LOOP
        BEGIN
            IF NOT mzproxy.builtin_conversion(c.oid, m.attnum, c.history, m.name) THEN
                RAISE EXCEPTION 'no built-in conversion';  -- the old versions get NULL, below
            END IF;
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE %s USING %I::%s', c.history, m.name, m.type, m.name,
                           regexp_replace(m.type, ' COLLATE .*$', ''));
        EXCEPTION WHEN OTHERS THEN
            EXECUTE format('ALTER TABLE %s DROP COLUMN %I', c.history, m.name);
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s', c.history, m.name, m.type);
        END;
        UPDATE mzproxy.columns SET type = m.type WHERE id = p_id AND attnum = m.attnum;
        refill := true;
    END LOOP;
    -- Added columns: NULL in every existing version.
    FOR m IN SELECT uc.* FROM unnest(u_attnum, u_name, u_type) AS uc(attnum, name, type)
              WHERE uc.attnum NOT IN (SELECT cc.attnum FROM mzproxy.columns cc WHERE cc.id = p_id)
              ORDER BY uc.attnum
    LOOP
        IF NOT p_new THEN
            EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s', c.history, m.name, m.type);
        END IF;
        INSERT INTO mzproxy.columns VALUES (p_id, m.attnum, m.name, m.type);
        reshaped := true;
        refill := refill OR mzproxy.added_column_filled(c.oid, m.attnum);
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND x.indisprimary) THEN  -- (version 24)
        -- The current versions' hashes are of the whole row's text; a
        -- table that lost its primary key needs them made.
        refill := refill OR reshaped
                  OR to_regclass('mzproxy.' || quote_ident('h' || p_id || '_mz_hash')) IS NULL;
    END IF;
    IF refill THEN
        PERFORM mzproxy.resync(p_id, p_ts);
    END IF;
    -- (Version 24: nothing else changes what they read, ddl_alter.sql.)
    IF refill OR c.shape IS NULL OR c.shape <> mzproxy.table_shape(p_id) THEN
        PERFORM mzproxy.sync_indexes(p_id);
        PERFORM mzproxy.sync_triggers(p_id);  -- version 13
        PERFORM mzproxy.sync_grants(p_id);
    END IF;
END
$_$;



CREATE FUNCTION mzproxy.register(p_generation bigint, p_grace_ms bigint, p_host text, p_pid integer, OUT r_id bigint, OUT r_generation bigint, OUT r_floor bigint) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    g bigint;
BEGIN
    -- Only a new generation fences, and only it needs the txns row; taken
    -- before the hold lock, so that waiting for a slow writer's commit
    -- does not hold up compaction and acquire_hold. (If the fence rose
    -- meanwhile, p_generation is no longer above it: nothing to fence.)
    IF p_generation > (SELECT f.generation FROM mzproxy.fence f) THEN
        LOCK TABLE mzproxy.gate IN EXCLUSIVE MODE;
    END IF;
    PERFORM mzproxy.take_hold_lock();
    SELECT f.generation INTO g FROM mzproxy.fence f FOR UPDATE;
    IF p_generation = 0 THEN
        p_generation := g;
    ELSIF p_generation < g THEN
        RAISE EXCEPTION 'mzproxy generation % fenced by new generation %', p_generation, g
            USING ERRCODE = 'XX000', DETAIL = 'fenced',
                  HINT = 'A proxy of a newer generation owns this database; start this one with a generation >= the newest.';
    END IF;
    r_floor := GREATEST(mzproxy.read_ts(), (SELECT max(c.since) FROM mzproxy.collections c));
    INSERT INTO mzproxy.incarnations (generation, grace_ms, floor_ts, host, pid)
    VALUES (p_generation, p_grace_ms, r_floor, p_host, p_pid)
    RETURNING incarnations.id INTO r_id;
    IF p_generation > g THEN
        UPDATE mzproxy.fence SET generation = p_generation;
        UPDATE mzproxy.incarnations i
           SET retired_at = clock_timestamp(), retired_reason = 'fenced', fenced_by = r_id
         WHERE i.retired_at IS NULL AND i.generation < p_generation;
    END IF;
    r_generation := p_generation;
END
$$;



CREATE FUNCTION mzproxy.restamp_dynamic(p_hist text[], p bigint, p_t bigint) RETURNS bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    h text;
    closed bigint;
    t bigint := p_t;
BEGIN
    FOREACH h IN ARRAY p_hist LOOP
        EXECUTE format('SELECT max(mz_from) FROM %s WHERE mz_to = $1', h) INTO closed USING p;
        t := GREATEST(t, closed);
    END LOOP;
    FOREACH h IN ARRAY p_hist LOOP
        EXECUTE format('UPDATE %s SET mz_to = $2 WHERE mz_to = $1', h) USING p, t;
        EXECUTE format('UPDATE %s SET mz_from = $2 WHERE mz_from = $1', h) USING p, t;
    END LOOP;
    RETURN t;
END
$_$;



CREATE FUNCTION mzproxy.restamp_functions(h text) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
SELECT CASE WHEN to_regclass(h || '_pending') IS NULL
            THEN format($i$
CREATE INDEX %2$I ON %1$s ((CASE WHEN mz_to = 9223372036854775807 THEN mz_from ELSE mz_to END))
 WHERE least(mz_to, mz_from) < 0;$i$,
                        h, (parse_ident(h))[2] || '_pending')
            ELSE '' END
    || format($f$
CREATE OR REPLACE FUNCTION %1$s_fix(p bigint, t bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    closed bigint;
    f bigint;
BEGIN
    -- The versions the block closed (mz_to = p) and those it wrote, which
    -- are current (one it closed again was deleted by the trigger), found
    -- by the placeholder they carry, through the partial index on it
    -- (restamp_generic.sql: the only index path, so the plan kept for the
    -- session is that one, whatever the statistics were when it was made;
    -- the least(...) condition is the index's predicate, hist_trim.sql,
    -- implied by the first two). It returns the newest start of a version
    -- the block closed (now ending at t; a version it wrote is current),
    -- which fix_write raises T to when it is above t.
    FOR f IN UPDATE %1$s h SET mz_to = CASE WHEN h.mz_to = p THEN t ELSE h.mz_to END,
                               mz_from = CASE WHEN h.mz_from = p THEN t ELSE h.mz_from END
              WHERE (CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) = p
                AND (CASE WHEN h.mz_to = 9223372036854775807 THEN h.mz_from ELSE h.mz_to END) < 0
                AND least(h.mz_to, h.mz_from) < 0
             RETURNING CASE WHEN h.mz_to < 9223372036854775807 THEN h.mz_from END LOOP
        closed := GREATEST(closed, f);
    END LOOP;
    RETURN closed;
END
$$;
REVOKE ALL ON FUNCTION %1$s_fix(bigint, bigint) FROM PUBLIC;$f$, h)
$_$;



CREATE FUNCTION mzproxy.restamp_raise(p_hist text[], p_t bigint, p_new bigint) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $_$
DECLARE
    h text;
    x xid;
BEGIN
    FOREACH h IN ARRAY p_hist LOOP
        EXECUTE format('SELECT h.xmin FROM %s h WHERE h.mz_to = $1 AND h.mz_from > $1 LIMIT 1', h) INTO x USING p_t;
        EXIT WHEN x IS NOT NULL;
    END LOOP;
    IF x IS NULL THEN
        RAISE EXCEPTION 'mzproxy: no version closed at % above it', p_t USING ERRCODE = 'XX000';
    END IF;
    FOREACH h IN ARRAY p_hist LOOP
        EXECUTE format($u$
            UPDATE %s h SET mz_to = CASE WHEN h.mz_to = $1 THEN $2 ELSE h.mz_to END,
                            mz_from = CASE WHEN h.mz_to = 9223372036854775807 THEN $2 ELSE h.mz_from END
             WHERE (h.mz_to = $1 OR (h.mz_to = 9223372036854775807 AND h.mz_from = $1)) AND h.xmin = $3$u$, h)
          USING p_t, p_new, x;
    END LOOP;
    RETURN p_new;
END
$_$;



CREATE FUNCTION mzproxy.resync(p_id bigint, p_ts bigint) RETURNS void
    LANGUAGE plpgsql
    SET "DateStyle" TO 'ISO, YMD'
    SET "IntervalStyle" TO 'postgres'
    SET "TimeZone" TO 'UTC'
    SET extra_float_digits TO '1'
    SET bytea_output TO 'hex'
    SET lc_monetary TO 'C'
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET quote_all_identifiers TO 'off'
    AS $_$
DECLARE
    c record;
    rel text;
    cols text;
    ucols text;
    utext text;
    htext text;
    busy bool;
BEGIN
    SELECT * INTO c FROM mzproxy.catalog WHERE id = p_id;
    rel := format('%I.%I', c.schema_name, c.name);
    -- Nothing to compare (a new or emptied table after ALTER TABLE): no
    -- temporary table.
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %s) OR EXISTS (SELECT 1 FROM %s WHERE mz_to = 9223372036854775807)',
                   rel, c.history) INTO busy;
    IF NOT busy THEN
        RETURN;
    END IF;
    cols := mzproxy.col_list(p_id, '');
    ucols := mzproxy.col_list(p_id, 'u.');
    utext := mzproxy.row_text(p_id, 'u.');
    htext := mzproxy.row_text(p_id, 'h.');
    IF mzproxy.pk_columns(c.oid) IS NULL THEN
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
        CASE WHEN cols = '' THEN '' ELSE mzproxy.col_list(p_id, 'x.') || ',' END,
        utext, utext, rel) USING p_ts;
    DROP TABLE mz_resync;
END
$_$;



CREATE FUNCTION mzproxy.retire_marker(p_oid oid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET quote_all_identifiers TO 'off'
    AS $$
DECLARE
    w regclass := to_regclass('mzproxy.w' || p_oid);
    c regclass := to_regclass('mzproxy.c' || p_oid);
BEGIN
    IF w IS NULL OR c IS NULL THEN
        RETURN;
    END IF;
    EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', w, 'sw' || w::oid);
    EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', c, 'sc' || w::oid);
    INSERT INTO mzproxy.spare_markers (w, c) VALUES (w, c);
END
$$;



CREATE FUNCTION mzproxy.row_text(p_id bigint, p_alias text) RETURNS text
    LANGUAGE sql STABLE
    AS $$ SELECT 'ROW(' || mzproxy.col_list(p_id, p_alias) || ')::text' $$;



CREATE FUNCTION mzproxy.set_retention(p_rel regclass, p_ms bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    caller text := CASE current_setting('role') WHEN 'none' THEN session_user ELSE current_setting('role') END;
BEGIN
    IF mzproxy.current_write_ts() IS NULL THEN
        RAISE EXCEPTION 'RETAIN HISTORY of % can only be changed through mzproxy', p_rel
            USING ERRCODE = 'MZ003';
    END IF;
    IF NOT pg_has_role(caller, (SELECT relowner FROM pg_class WHERE oid = p_rel), 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', (SELECT relname FROM pg_class WHERE oid = p_rel)
            USING ERRCODE = '42501';
    END IF;
    IF p_ms IS NOT NULL AND p_ms < 0 THEN
        RAISE EXCEPTION 'RETAIN HISTORY must not be negative' USING ERRCODE = '22023';
    END IF;
    UPDATE mzproxy.collections c SET retain_ms = p_ms
      FROM mzproxy.catalog k
     WHERE k.id = c.id AND k.oid = p_rel AND k.kind = 'table' AND k.dropped_ts IS NULL;
    RETURN FOUND;
END
$$;



CREATE FUNCTION mzproxy.set_slot(p_t bigint, p_e bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v text := p_t::text || ' ' || coalesce(p_e::text, '-');
BEGIN
    PERFORM set_config('mzproxy.write_ts', v || ' ' || mzproxy.tag(v), true);
END
$$;



CREATE FUNCTION mzproxy.stamp_ts(p_rel oid) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    t bigint;
    slot text;
    my_xid bigint;
    rels oid[];
BEGIN
    IF v = '0 - pending' THEN
        -- A pending slot: with the gate held, the write counted and the
        -- table's marker set to that count, T chosen and tagged, in one
        -- query (version 42). P is read as pinned_ts reads it; after a
        -- crash (the sequence not yet called) pinned_ts gives its floor.
        LOCK TABLE mzproxy.gate IN ROW SHARE MODE;
        SELECT x.t, set_config('mzproxy.write_ts', x.t::text || ' - ' || mzproxy.key_tag(x.k, x.t::text || ' -'), true)
          INTO t, slot
          FROM (SELECT k.k, GREATEST(mzproxy.now_ms(),
                                     coalesce(pg_sequence_last_value('mzproxy.pinned'), mzproxy.pinned_ts()) + 1) AS t,
                       setval(to_regclass('mzproxy.w' || p_rel), nextval('mzproxy.writes'))
                  FROM mzproxy.write_key k
                OFFSET 0) x;
        RETURN t;
    END IF;
    IF v IS NULL OR v = '' OR left(v, 3) = '-1 ' THEN
        -- Only open_write_deferred makes the row: the setting needs no
        -- check here (fix_write checks it once), and an empty one is the
        -- row's slot (see the header).
        my_xid := pg_current_xact_id_if_assigned()::text::bigint;
        SELECT d.rels, d.fixed_t INTO rels, t FROM mzproxy.deferred_slots d WHERE d.xid = my_xid;
        IF FOUND AND t IS NULL THEN
            IF NOT p_rel = ANY (rels) THEN
                UPDATE mzproxy.deferred_slots d SET rels = d.rels || p_rel WHERE d.xid = my_xid;
            END IF;
            RETURN -my_xid;
        END IF;
        IF NOT FOUND AND (v IS NULL OR v = '') THEN
            RETURN NULL;
        END IF;
        -- Found with T chosen (fix_write): the row's T, below.
    END IF;
    IF t IS NULL THEN
        t := (SELECT s.t FROM mzproxy.write_slot() s);
    END IF;
    IF t = -1 THEN
        -- A deferred slot without a row: taken in a READ ONLY transaction,
        -- which writes no history. Nothing could restamp a placeholder.
        RAISE EXCEPTION 'mzproxy: deferred write slot of a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF t = 0 THEN
        -- A slot of version 41's form ('0 - ' and its tag, taken by a
        -- transaction that spans the upgrade): counted by choose_ts, then
        -- marked, since the marker must not be below the write's count.
        t := mzproxy.choose_ts();
        PERFORM mzproxy.mark_written(ARRAY[p_rel]);
        RETURN t;
    END IF;
    IF t IS NOT NULL THEN
        PERFORM mzproxy.mark_written(ARRAY[p_rel]);
    END IF;
    -- T was chosen before this statement locked p_rel (a later statement,
    -- a block's T fixed early): after the marker, the check mark (see
    -- rw_check.sql). A transaction that read p_rel and was checked at a
    -- later T did not see this write.
    IF t > 0 AND coalesce(pg_sequence_last_value(to_regclass('mzproxy.c' || p_rel)), 0) > t THEN
        PERFORM mzproxy.raise_read_later(p_rel, t);
    END IF;
    RETURN t;
END
$$;



CREATE FUNCTION mzproxy.storage_type(p_type oid, p_typmod integer, OUT typ oid, OUT typmod integer) RETURNS record
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t record;
    elem oid;
    elem_mod int4;
BEGIN
    typ := p_type;
    typmod := p_typmod;
    LOOP
        SELECT y.typtype, y.typbasetype, y.typtypmod, y.typelem, y.typcategory INTO t FROM pg_type y WHERE y.oid = typ;
        EXIT WHEN t.typtype IS DISTINCT FROM 'd';
        IF typmod = -1 THEN
            typmod := t.typtypmod;
        END IF;
        typ := t.typbasetype;
    END LOOP;
    IF t.typcategory = 'A' AND t.typelem <> 0 THEN
        SELECT s.typ, s.typmod INTO elem, elem_mod FROM mzproxy.storage_type(t.typelem, typmod) s;
        IF elem <> t.typelem THEN
            SELECT y.typarray INTO typ FROM pg_type y WHERE y.oid = elem;
            typmod := elem_mod;
        END IF;
    END IF;
END
$$;



CREATE FUNCTION mzproxy.sync_grants(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF (SELECT k.history_built FROM mzproxy.catalog k WHERE k.id = p_id) THEN
        PERFORM mzproxy.sync_grants_built(p_id);
    END IF;
END
$$;



CREATE FUNCTION mzproxy.sync_grants_built(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    c record;
    g record;
BEGIN
    SELECT * INTO c FROM mzproxy.catalog WHERE id = p_id;
    FOR g IN
        WITH want AS (
            SELECT e.grantee FROM pg_class k
             CROSS JOIN LATERAL aclexplode(coalesce(k.relacl, acldefault('r', k.relowner))) e
             WHERE k.oid = c.oid AND e.privilege_type = 'SELECT'
               AND e.grantee <> (SELECT hk.relowner FROM pg_class hk WHERE hk.oid = c.history::regclass)
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



CREATE FUNCTION mzproxy.sync_indexes(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF (SELECT k.history_built FROM mzproxy.catalog k WHERE k.id = p_id) THEN
        PERFORM mzproxy.sync_indexes_built(p_id);
    END IF;
END
$$;



CREATE FUNCTION mzproxy.sync_indexes_built(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET quote_all_identifiers TO 'off'
    AS $_$
DECLARE
    c record;
    i record;
BEGIN
    SELECT * INTO c FROM mzproxy.catalog WHERE id = p_id;
    -- The hash lookup serves retraction in tables without a primary key;
    -- only current versions are ever looked up.
    IF mzproxy.pk_columns(c.oid) IS NULL THEN
        IF to_regclass('mzproxy.' || quote_ident('h' || p_id || '_mz_hash')) IS NULL THEN
            EXECUTE format('CREATE INDEX %I ON %s (mz_hash) WHERE mz_to = 9223372036854775807', 'h' || p_id || '_mz_hash', c.history);
        END IF;
    ELSIF to_regclass('mzproxy.' || quote_ident('h' || p_id || '_mz_hash')) IS NOT NULL THEN
        EXECUTE format('DROP INDEX mzproxy.%I', 'h' || p_id || '_mz_hash');
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
                            WHERE ic.relnamespace = 'mzproxy'::regnamespace
                              AND ic.relname = format('h%s_k%s', p_id, x.indexrelid))
    LOOP
        EXECUTE format('CREATE INDEX %I ON %s (%s, mz_to)', i.mirror, c.history, i.cols);
        -- An oid left by an index whose table was dropped may come again.
        INSERT INTO mzproxy.index_mirrors (index_oid, mirror) VALUES (i.indexrelid, i.mirror)
        ON CONFLICT (index_oid) DO UPDATE SET mirror = EXCLUDED.mirror;
    END LOOP;
    FOR i IN
        SELECT ic.relname, substring(ic.relname FROM '_k([0-9]+)$')::oid AS index_oid
          FROM pg_class ic JOIN pg_index x ON x.indexrelid = ic.oid
         WHERE x.indrelid = c.history::regclass AND ic.relname ~ ('^h' || p_id || '_k[0-9]+$')
           AND NOT EXISTS (SELECT 1 FROM pg_index ux
                            WHERE ux.indrelid = c.oid AND ux.indexrelid::text = substring(ic.relname FROM '_k([0-9]+)$'))
    LOOP
        EXECUTE format('DROP INDEX mzproxy.%I', i.relname);
        DELETE FROM mzproxy.index_mirrors m WHERE m.index_oid = i.index_oid AND m.mirror = i.relname;
    END LOOP;
END
$_$;



CREATE FUNCTION mzproxy.sync_triggers(p_id bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET quote_all_identifiers TO 'off'
    AS $$
DECLARE
    rel oid := (SELECT k.oid FROM mzproxy.catalog k WHERE k.id = p_id);
    fn text := 'mzproxy.' || quote_ident('h' || p_id);
    aligned bool := mzproxy.history_aligned(p_id);
    sig text;
BEGIN
    IF aligned THEN
        -- (Version 36: gen_triggers' row version, as in table_shape,
        -- not md5 of its text, which is read out of line and decompressed.)
        SELECT g.xmin || ' ' || g.ctid || ' ' || EXISTS (SELECT 1 FROM mzproxy.columns cc WHERE cc.id = p_id) || ' ' ||
               coalesce((SELECT x.indclass::text || ' ' || coalesce(con.condeferrable, false) || ' ' ||
                                (SELECT string_agg(quote_ident(a.attname), ',' ORDER BY k.ord)
                                   FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                                   JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum)
                           FROM pg_index x LEFT JOIN pg_constraint con
                            ON con.conrelid = x.indrelid AND con.conindid = x.indexrelid AND con.contype = 'p'
                          WHERE x.indrelid = rel AND x.indisprimary), 'no key')
          INTO sig
          FROM pg_proc g WHERE g.oid = 'mzproxy.gen_triggers(bigint)'::regprocedure;
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
        PERFORM mzproxy.gen_triggers(p_id);
        IF sig IS NOT NULL THEN
            EXECUTE format('COMMENT ON FUNCTION %s() IS %L', fn || '_upd', sig);
        END IF;
    END IF;
    -- (Version 24.)
    UPDATE mzproxy.catalog k SET shape = s.shape
      FROM (SELECT CASE WHEN aligned THEN mzproxy.table_shape(p_id) END AS shape) s
     WHERE k.id = p_id AND k.shape IS DISTINCT FROM s.shape;
END
$$;



CREATE FUNCTION mzproxy.table_shape(p_id bigint) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET quote_all_identifiers TO 'off'
    AS $$
DECLARE
    rel oid := (SELECT k.oid FROM mzproxy.catalog k WHERE k.id = p_id);
BEGIN
    -- gen_triggers' row version, not md5 of its text (a third of a
    -- millisecond: the text is long, compressed and out of line): any
    -- CREATE OR REPLACE makes a new row version. (A row moved by VACUUM
    -- FULL only makes each table sync once more.)
    RETURN (SELECT g.xmin || ' ' || g.ctid FROM pg_proc g WHERE g.oid = 'mzproxy.gen_triggers(bigint)'::regprocedure)
        || ' ' || EXISTS (SELECT 1 FROM mzproxy.columns cc WHERE cc.id = p_id)
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



CREATE FUNCTION mzproxy.tag(p_v text) RETURNS text
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN (SELECT mzproxy.key_tag(k.k, p_v) FROM mzproxy.write_key k);
END
$$;



CREATE FUNCTION mzproxy.take_hold_lock() RETURNS void
    LANGUAGE plpgsql
    AS $$ BEGIN PERFORM 1 FROM mzproxy.locks WHERE name = 'hold' FOR UPDATE; END $$;



CREATE FUNCTION mzproxy.take_spare_marker(p_oid oid) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '10ms'
    SET quote_all_identifiers TO 'off'
    AS $$
DECLARE
    spare record;
BEGIN
    BEGIN
        DELETE FROM mzproxy.spare_markers s
         WHERE s.w = (SELECT x.w FROM mzproxy.spare_markers x
                       -- Both still there (a lookup in the relation cache
                       -- each: a join with pg_class is planned as a scan of
                       -- it while the list is empty, its size unknown).
                       WHERE pg_relation_filenode(x.w) IS NOT NULL AND pg_relation_filenode(x.c) IS NOT NULL
                       LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING s.w, s.c INTO spare;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', spare.w::regclass, 'w' || p_oid);
        EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', spare.c::regclass, 'c' || p_oid);
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    PERFORM setval(spare.w::regclass, 0, false), setval(spare.c::regclass, 0, false);
    RETURN true;
END
$$;



CREATE FUNCTION mzproxy.tick(p_wait_ms integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    t bigint;
BEGIN
    BEGIN
        PERFORM set_config('lock_timeout', p_wait_ms::text, true);
        t := mzproxy.pin_locked();
        RAISE SQLSTATE 'MZP00';
    EXCEPTION
        WHEN SQLSTATE 'MZP00' THEN NULL;
        WHEN lock_not_available THEN RETURN NULL;
    END;
    UPDATE mzproxy.txns_durable d SET upper = t + 1 WHERE d.upper < t + 1;
    RETURN t;
END
$$;



CREATE FUNCTION mzproxy.truncate_ts(p_t bigint, p_rel oid) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    m bigint;
BEGIN
    IF p_t < 0 THEN
        RETURN p_t;  -- a deferred slot's placeholder: fix_write looks at what it closed
    END IF;
    EXECUTE format('SELECT max(mz_from) FROM %s WHERE mz_to = 9223372036854775807',
                   (SELECT k.history FROM mzproxy.catalog k WHERE k.oid = p_rel AND k.dropped_ts IS NULL))
       INTO m;
    IF m > p_t THEN
        PERFORM mzproxy.raise_overtaken(p_rel, m, p_t);
    END IF;
    RETURN p_t;
END
$$;



CREATE FUNCTION mzproxy.type_name(p_type oid, p_typmod integer) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ SELECT format_type(p_type, p_typmod) $$;



CREATE FUNCTION mzproxy.upper() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ BEGIN RETURN mzproxy.pinned_ts() + 1; END $$;



CREATE FUNCTION mzproxy.user_columns(p_oid oid) RETURNS TABLE(attnum smallint, name name, type text)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET quote_all_identifiers TO 'off'
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
          SELECT x.typ, x.typmod FROM mzproxy.storage_type(a.atttypid, a.atttypmod) x
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



CREATE FUNCTION mzproxy.view_definition(p_oid oid) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ SELECT rtrim(btrim(pg_get_viewdef(p_oid)), ';') $$;



CREATE FUNCTION mzproxy.view_ts() RETURNS bigint
    LANGUAGE sql
    AS $$ SELECT GREATEST(mzproxy.now_ms(), coalesce(pg_sequence_last_value('mzproxy.pinned'), mzproxy.pinned_ts())) $$;



CREATE FUNCTION mzproxy.write_slot(OUT t bigint, OUT e bigint) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    vt text;
    ve text;
    my_xid bigint;
BEGIN
    IF v IS NULL OR v = '' THEN
        -- No xid, no row: a transaction that has not written pays nothing.
        my_xid := pg_current_xact_id_if_assigned()::text::bigint;
        IF my_xid IS NOT NULL THEN
            -- (set_slot(T, NULL) once fix_write chose T.)
            SELECT coalesce(d.fixed_t, -1), CASE WHEN d.fixed_t IS NULL THEN d.inc END INTO t, e
              FROM mzproxy.deferred_slots d WHERE d.xid = my_xid;
        END IF;
        RETURN;
    END IF;
    IF v = '0 - pending' THEN
        t := 0;
        RETURN;
    END IF;
    -- split_part, not a regular expression: this runs for every write
    -- statement, and a capturing match costs a fifth of a millisecond. A
    -- matching tag proves set_slot wrote both numbers.
    vt := split_part(v, ' ', 1);
    ve := split_part(v, ' ', 2);
    IF split_part(v, ' ', 3) IS DISTINCT FROM mzproxy.tag(vt || ' ' || ve) OR split_part(v, ' ', 4) <> '' THEN
        RAISE EXCEPTION 'mzproxy.write_ts was not set by mzproxy'
            USING ERRCODE = '42501',
                  DETAIL = 'A write''s timestamp is chosen by mzproxy''s oracle for that write alone.',
                  HINT = 'RESET mzproxy.write_ts, and write through mzproxy.';
    END IF;
    t := vt::bigint;
    e := nullif(ve, '-')::bigint;
END
$$;



CREATE FUNCTION mzproxy.write_ts() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$ BEGIN RETURN GREATEST(mzproxy.now_ms(), mzproxy.pinned_ts() + 1); END $$;





CREATE TABLE mzproxy.catalog (
    id bigint NOT NULL,
    kind text NOT NULL,
    oid oid NOT NULL,
    schema_name name NOT NULL,
    name name NOT NULL,
    history text,
    view_sql text,
    created_ts bigint NOT NULL,
    dropped_ts bigint,
    revision bigint NOT NULL,
    shape text,
    history_built boolean DEFAULT true NOT NULL
);



CREATE TABLE mzproxy.collections (
    id bigint NOT NULL,
    since bigint NOT NULL,
    retain_ms bigint,
    compacted_at timestamp with time zone,
    compacted_rows bigint DEFAULT 0 NOT NULL,
    last_compacted_rows bigint DEFAULT 0 NOT NULL,
    clean_since bigint
);



CREATE TABLE mzproxy.compactor (
    one boolean DEFAULT true NOT NULL,
    incarnation bigint,
    ran_at timestamp with time zone,
    default_retain_ms bigint,
    dropped_removed bigint DEFAULT 0 NOT NULL,
    CONSTRAINT compactor_one_check CHECK (one)
);



CREATE VIEW mz_internal.mz_compactions AS
 SELECT ('u'::text || k.id) AS object_id,
    k.schema_name,
    k.name,
    c.since,
    c.compacted_at,
    c.last_compacted_rows,
    c.compacted_rows AS total_compacted_rows,
    m.ran_at AS last_round_at,
    m.incarnation AS last_round_by
   FROM ((mzproxy.collections c
     JOIN mzproxy.catalog k ON ((k.id = c.id)))
     CROSS JOIN mzproxy.compactor m);



CREATE VIEW mzproxy.txns AS
 SELECT mzproxy.upper() AS upper;



CREATE VIEW mz_internal.mz_frontiers AS
 SELECT ('u'::text || k.id) AS object_id,
    k.schema_name,
    k.name,
    c.since AS read_frontier,
    x.upper AS write_frontier,
    COALESCE(c.retain_ms, m.default_retain_ms) AS retain_ms,
    k.dropped_ts
   FROM (((mzproxy.collections c
     JOIN mzproxy.catalog k ON ((k.id = c.id)))
     CROSS JOIN mzproxy.txns x)
     CROSS JOIN mzproxy.compactor m);



CREATE TABLE mzproxy.fence (
    one boolean DEFAULT true NOT NULL,
    generation bigint NOT NULL,
    CONSTRAINT fence_one_check CHECK (one)
);



CREATE TABLE mzproxy.incarnations (
    id bigint NOT NULL,
    generation bigint NOT NULL,
    started_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    grace_ms bigint NOT NULL,
    floor_ts bigint NOT NULL,
    host text,
    pid integer,
    retired_at timestamp with time zone,
    retired_reason text,
    fenced_by bigint
);



CREATE VIEW mz_internal.mz_incarnations AS
 SELECT i.id,
    i.generation,
    i.host,
    i.pid,
    i.started_at,
    i.heartbeat_at,
    (clock_timestamp() - i.heartbeat_at) AS heartbeat_age,
    i.grace_ms,
    i.floor_ts AS read_floor,
        CASE
            WHEN (i.retired_at IS NOT NULL) THEN i.retired_reason
            WHEN (i.generation < f.generation) THEN 'fenced'::text
            WHEN (i.heartbeat_at < (clock_timestamp() - ((i.grace_ms)::double precision * '00:00:00.001'::interval))) THEN 'expired'::text
            ELSE 'live'::text
        END AS status,
    i.retired_at,
    i.fenced_by
   FROM (mzproxy.incarnations i
     CROSS JOIN mzproxy.fence f);



CREATE TABLE mzproxy.read_holds (
    incarnation bigint NOT NULL,
    collection bigint NOT NULL,
    ts bigint NOT NULL
);



CREATE VIEW mz_internal.mz_read_holds AS
 SELECT i.id AS incarnation,
    ('u'::text || k.id) AS object_id,
    k.schema_name,
    k.name,
    'floor'::text AS kind,
    i.floor_ts AS ts
   FROM ((mzproxy.incarnations i
     CROSS JOIN mzproxy.collections c)
     JOIN mzproxy.catalog k ON ((k.id = c.id)))
  WHERE (i.retired_at IS NULL)
UNION ALL
 SELECT h.incarnation,
    ('u'::text || k.id) AS object_id,
    k.schema_name,
    k.name,
    'hold'::text AS kind,
    h.ts
   FROM ((mzproxy.read_holds h
     JOIN mzproxy.incarnations i ON (((i.id = h.incarnation) AND (i.retired_at IS NULL))))
     JOIN mzproxy.catalog k ON ((k.id = h.collection)));



CREATE SEQUENCE mzproxy.catalog_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;



CREATE TABLE mzproxy.catalog_revision (
    one boolean DEFAULT true NOT NULL,
    revision bigint NOT NULL
);



CREATE UNLOGGED TABLE mzproxy.checking (
);



CREATE TABLE mzproxy.claims (
    name text NOT NULL,
    holder bigint
);



CREATE TABLE mzproxy.columns (
    id bigint NOT NULL,
    attnum smallint NOT NULL,
    name name NOT NULL,
    type text NOT NULL
);



CREATE UNLOGGED TABLE mzproxy.deferred_slots (
    xid bigint NOT NULL,
    inc bigint,
    rels oid[] DEFAULT '{}'::oid[] NOT NULL,
    read_writes bigint,
    fixed_t bigint
);



CREATE TABLE mzproxy.gate (
);



CREATE SEQUENCE mzproxy.incarnations_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;



ALTER SEQUENCE mzproxy.incarnations_id_seq OWNED BY mzproxy.incarnations.id;



CREATE TABLE mzproxy.index_mirrors (
    index_oid oid NOT NULL,
    mirror name NOT NULL
);



CREATE TABLE mzproxy.locks (
    name text NOT NULL
);



CREATE TABLE mzproxy.oracle (
    timeline text NOT NULL,
    read_ts bigint NOT NULL
)
WITH (fillfactor='50');



CREATE TABLE mzproxy.oracle_write (
    timeline text NOT NULL,
    write_ts bigint NOT NULL
)
WITH (fillfactor='50');



CREATE UNLOGGED SEQUENCE mzproxy.pinned
    START WITH 0
    INCREMENT BY 1
    MINVALUE 0
    NO MAXVALUE
    CACHE 1;



CREATE UNLOGGED SEQUENCE mzproxy.writes
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;



CREATE VIEW mzproxy.pin_state AS
 SELECT
        CASE
            WHEN ((NOT p.is_called) OR (p.last_value < (mzproxy.now_ms() - 1000))) THEN NULL::bigint
            ELSE p.last_value
        END AS t,
        CASE
            WHEN p.is_called THEN ( SELECT
                    CASE
                        WHEN again.is_called THEN again.last_value
                        ELSE (0)::bigint
                    END AS "case"
               FROM mzproxy.writes again)
            ELSE NULL::bigint
        END AS w
   FROM mzproxy.pinned p;



CREATE TABLE mzproxy.schema_version (
    version integer NOT NULL,
    installed_at timestamp with time zone DEFAULT now() NOT NULL
);



CREATE UNLOGGED SEQUENCE mzproxy.writes_seen
    START WITH 0
    INCREMENT BY 1
    MINVALUE 0
    NO MAXVALUE
    CACHE 1;



CREATE VIEW mzproxy.settled_pin AS
 SELECT
        CASE
            WHEN (COALESCE(current_setting('mzproxy.write_ts'::text, true), ''::text) <> ''::text) THEN NULL::bigint
            WHEN (COALESCE(pg_sequence_last_value('mzproxy.writes_seen'::regclass), (0)::bigint) <> counted.w) THEN NULL::bigint
            ELSE ( SELECT
                    CASE
                        WHEN (NOT (p.is_called AND (clock_timestamp() < ('1970-01-01 00:00:00+00'::timestamp with time zone + (((p.last_value + 1001))::double precision * '00:00:00.001'::interval))))) THEN NULL::bigint
                        WHEN (COALESCE(pg_sequence_last_value('mzproxy.writes'::regclass), (0)::bigint) = counted.w) THEN p.last_value
                        ELSE NULL::bigint
                    END AS "case"
               FROM mzproxy.pinned p)
        END AS t
   FROM ( SELECT
                CASE
                    WHEN s.is_called THEN s.last_value
                    ELSE (0)::bigint
                END AS w
           FROM mzproxy.writes s) counted;



CREATE VIEW mzproxy.settled_writes AS
 SELECT
        CASE
            WHEN (COALESCE(pg_sequence_last_value('mzproxy.writes_seen'::regclass), (0)::bigint) <> counted.w) THEN NULL::bigint
            WHEN (pg_sequence_last_value('mzproxy.pinned'::regclass) IS NOT NULL) THEN counted.w
            ELSE NULL::bigint
        END AS w
   FROM ( SELECT
                CASE
                    WHEN s.is_called THEN s.last_value
                    ELSE (0)::bigint
                END AS w
           FROM mzproxy.writes s) counted;



CREATE TABLE mzproxy.spare_markers (
    w oid NOT NULL,
    c oid NOT NULL
);



CREATE TABLE mzproxy.txns_durable (
    one boolean DEFAULT true NOT NULL,
    upper bigint NOT NULL,
    CONSTRAINT txns_one_check CHECK (one)
)
WITH (fillfactor='50');



CREATE TABLE mzproxy.write_key (
    k text NOT NULL
);



ALTER TABLE ONLY mzproxy.incarnations ALTER COLUMN id SET DEFAULT nextval('mzproxy.incarnations_id_seq'::regclass);



ALTER TABLE ONLY mzproxy.catalog
    ADD CONSTRAINT catalog_pkey PRIMARY KEY (id);



ALTER TABLE ONLY mzproxy.catalog_revision
    ADD CONSTRAINT catalog_revision_pkey PRIMARY KEY (one);



ALTER TABLE ONLY mzproxy.claims
    ADD CONSTRAINT claims_pkey PRIMARY KEY (name);



ALTER TABLE ONLY mzproxy.collections
    ADD CONSTRAINT collections_pkey PRIMARY KEY (id);



ALTER TABLE ONLY mzproxy.columns
    ADD CONSTRAINT columns_pkey PRIMARY KEY (id, attnum);



ALTER TABLE ONLY mzproxy.compactor
    ADD CONSTRAINT compactor_pkey PRIMARY KEY (one);



ALTER TABLE ONLY mzproxy.deferred_slots
    ADD CONSTRAINT deferred_slots_pkey PRIMARY KEY (xid);



ALTER TABLE ONLY mzproxy.fence
    ADD CONSTRAINT fence_pkey PRIMARY KEY (one);



ALTER TABLE ONLY mzproxy.incarnations
    ADD CONSTRAINT incarnations_pkey PRIMARY KEY (id);



ALTER TABLE ONLY mzproxy.index_mirrors
    ADD CONSTRAINT index_mirrors_pkey PRIMARY KEY (index_oid);



ALTER TABLE ONLY mzproxy.locks
    ADD CONSTRAINT locks_pkey PRIMARY KEY (name);



ALTER TABLE ONLY mzproxy.oracle
    ADD CONSTRAINT oracle_pkey PRIMARY KEY (timeline);



ALTER TABLE ONLY mzproxy.oracle_write
    ADD CONSTRAINT oracle_write_pkey PRIMARY KEY (timeline);



ALTER TABLE ONLY mzproxy.read_holds
    ADD CONSTRAINT read_holds_pkey PRIMARY KEY (incarnation, collection);



ALTER TABLE ONLY mzproxy.schema_version
    ADD CONSTRAINT schema_version_pkey PRIMARY KEY (version);



ALTER TABLE ONLY mzproxy.spare_markers
    ADD CONSTRAINT spare_markers_pkey PRIMARY KEY (w);



ALTER TABLE ONLY mzproxy.txns_durable
    ADD CONSTRAINT txns_pkey PRIMARY KEY (one);



CREATE UNIQUE INDEX catalog_live_oid ON mzproxy.catalog USING btree (oid) WHERE (dropped_ts IS NULL);



CREATE INDEX incarnations_live ON mzproxy.incarnations USING btree (id) WHERE (retired_at IS NULL);



CREATE CONSTRAINT TRIGGER deferred_slot_fixed AFTER INSERT ON mzproxy.deferred_slots DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION mzproxy.fix_at_commit();



ALTER TABLE ONLY mzproxy.collections
    ADD CONSTRAINT collections_id_fkey FOREIGN KEY (id) REFERENCES mzproxy.catalog(id);



ALTER TABLE ONLY mzproxy.columns
    ADD CONSTRAINT columns_id_fkey FOREIGN KEY (id) REFERENCES mzproxy.catalog(id);



ALTER TABLE ONLY mzproxy.read_holds
    ADD CONSTRAINT read_holds_incarnation_fkey FOREIGN KEY (incarnation) REFERENCES mzproxy.incarnations(id) ON DELETE CASCADE;



GRANT USAGE ON SCHEMA mz_internal TO PUBLIC;



GRANT USAGE ON SCHEMA mzproxy TO PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.acquire_hold(p_id bigint, p_ts bigint, p_inputs bigint[]) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.added_column_filled(p_oid oid, p_attnum smallint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.apply_write(ts bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.begin_write_at(ts bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.begin_write_at(ts bigint, p_incarnation bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.begin_write_internal(p_ts bigint, p_inc bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.build_history(p_id bigint, p_rows_ts bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.builtin_conversion(p_rel oid, p_attnum smallint, p_history text, p_name name) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.check_incarnation(p_inc bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.check_reads(p_writes bigint, p_t bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.choose_ts() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.claim(p_name text, p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.col_list(p_id bigint, p_alias text) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.compact(p_default_retain_ms bigint, p_by bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.compact_batch(p_id bigint, p_limit integer) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.current_write_ts() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.ddl_mark() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.ddl_ts() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.deregister(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.fix_at_commit() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.fix_write(p_at_commit boolean) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.gen_restamp(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.gen_triggers(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.heartbeat(p_id bigint, p_floor bigint, p_colls bigint[], p_ts bigint[]) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.history_aligned(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.history_pending() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.history_text(p_id bigint, p_alias text) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.hold_lock_key() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.incarnation_live(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.key_tag(p_key text, p_v text) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.make_marker(p_oid oid) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.manage_table(p_oid oid, p_ts bigint, p_rev bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.mark_written(p_rels oid[]) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.on_ddl_command_end() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.on_pending_drop() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.on_sql_drop() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.open_write(p_ts bigint, p_inc bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.pin_locked() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.pinned_ts() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.pk_columns(p_oid oid) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.plain_column_change(p_id bigint, p_oid oid, p_history text) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.raise_deleted_later(p_rel oid, p_deleted bigint, p_t bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.raise_overtaken(p_rel oid, p_newer bigint, p_t bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.raise_read_later(p_rel oid, p_t bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.reconcile(p_id bigint, p_ts bigint, p_new boolean) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.reconcile_built(p_id bigint, p_ts bigint, p_new boolean) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.register(p_generation bigint, p_grace_ms bigint, p_host text, p_pid integer, OUT r_id bigint, OUT r_generation bigint, OUT r_floor bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.restamp_dynamic(p_hist text[], p bigint, p_t bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.restamp_functions(h text) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.restamp_raise(p_hist text[], p_t bigint, p_new bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.resync(p_id bigint, p_ts bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.retire_marker(p_oid oid) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.row_text(p_id bigint, p_alias text) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.set_slot(p_t bigint, p_e bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.stamp_ts(p_rel oid) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.storage_type(p_type oid, p_typmod integer, OUT typ oid, OUT typmod integer) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.sync_grants(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.sync_grants_built(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.sync_indexes(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.sync_indexes_built(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.sync_triggers(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.table_shape(p_id bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.tag(p_v text) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.take_hold_lock() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.take_spare_marker(p_oid oid) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.tick(p_wait_ms integer) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.truncate_ts(p_t bigint, p_rel oid) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.user_columns(p_oid oid) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.view_ts() FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.write_slot(OUT t bigint, OUT e bigint) FROM PUBLIC;



REVOKE ALL ON FUNCTION mzproxy.write_ts() FROM PUBLIC;



GRANT SELECT ON TABLE mzproxy.catalog TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.collections TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.compactor TO PUBLIC;



GRANT SELECT ON TABLE mz_internal.mz_compactions TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.txns TO PUBLIC;



GRANT SELECT ON TABLE mz_internal.mz_frontiers TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.fence TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.incarnations TO PUBLIC;



GRANT SELECT ON TABLE mz_internal.mz_incarnations TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.read_holds TO PUBLIC;



GRANT SELECT ON TABLE mz_internal.mz_read_holds TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.catalog_revision TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.claims TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.columns TO PUBLIC;



GRANT SELECT,UPDATE ON TABLE mzproxy.gate TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.oracle TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.oracle_write TO PUBLIC;



GRANT SELECT ON SEQUENCE mzproxy.pinned TO PUBLIC;



GRANT SELECT ON SEQUENCE mzproxy.writes TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.pin_state TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.schema_version TO PUBLIC;



GRANT SELECT ON SEQUENCE mzproxy.writes_seen TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.settled_pin TO PUBLIC;



GRANT SELECT ON TABLE mzproxy.settled_writes TO PUBLIC;



CREATE EVENT TRIGGER mzproxy_ddl_command_end ON ddl_command_end
   EXECUTE FUNCTION mzproxy.on_ddl_command_end();



CREATE EVENT TRIGGER mzproxy_pending_drop ON sql_drop
         WHEN TAG IN ('DROP TRIGGER')
   EXECUTE FUNCTION mzproxy.on_pending_drop();



CREATE EVENT TRIGGER mzproxy_sql_drop ON sql_drop
   EXECUTE FUNCTION mzproxy.on_sql_drop();






-- The chain's rows and sequence values.
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('1', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('2', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('3', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('4', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('5', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('6', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('7', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('8', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('9', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('10', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('11', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('12', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('13', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('14', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('15', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('16', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('17', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('18', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('19', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('20', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('21', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('22', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('23', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('24', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('25', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('26', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('27', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('28', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('29', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('30', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('31', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('32', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('33', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('34', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('35', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('36', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('37', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('38', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('39', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('40', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('41', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('42', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('43', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('44', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('45', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('46', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('47', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('48', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('49', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('50', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('51', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('52', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('53', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('54', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('55', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('56', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('57', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('58', now());
INSERT INTO mzproxy.schema_version ("version", "installed_at") VALUES ('59', now());
INSERT INTO mzproxy.oracle ("timeline", "read_ts") VALUES ('EpochMilliseconds', mzproxy.now_ms());
INSERT INTO mzproxy.oracle_write ("timeline", "write_ts") VALUES ('EpochMilliseconds', (SELECT o.read_ts FROM mzproxy.oracle o WHERE o.timeline = 'EpochMilliseconds'));
INSERT INTO mzproxy.txns_durable ("one", "upper") VALUES ('true', (SELECT o.read_ts + 1 FROM mzproxy.oracle o WHERE o.timeline = 'EpochMilliseconds'));
SELECT pg_catalog.setval('mzproxy.catalog_id_seq', 1, false);
INSERT INTO mzproxy.catalog_revision ("one", "revision") VALUES ('true', '1');
INSERT INTO mzproxy.fence ("one", "generation") VALUES ('true', '1');
SELECT pg_catalog.setval('mzproxy.incarnations_id_seq', 1, false);
INSERT INTO mzproxy.compactor ("one", "incarnation", "ran_at", "default_retain_ms", "dropped_removed") VALUES ('true', NULL, NULL, NULL, '0');
INSERT INTO mzproxy.write_key ("k") VALUES (gen_random_uuid()::text || gen_random_uuid()::text);
INSERT INTO mzproxy.locks ("name") VALUES ('hold');
INSERT INTO mzproxy.claims ("name", "holder") VALUES ('compaction', NULL);
INSERT INTO mzproxy.claims ("name", "holder") VALUES ('tick', NULL);
SELECT pg_catalog.setval('mzproxy.pinned', GREATEST((SELECT d.upper - 1 FROM mzproxy.txns_durable d), mzproxy.now_ms()), true);
SELECT pg_catalog.setval('mzproxy.writes', 1, false);
SELECT pg_catalog.setval('mzproxy.writes_seen', 0, false);

-- The setting exists since PostgreSQL 15.8 (view_safe.sql).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_settings WHERE name = 'restrict_nonsystem_relation_kind') THEN
        ALTER FUNCTION mzproxy.compact(bigint,bigint) SET restrict_nonsystem_relation_kind = '';
        ALTER FUNCTION mzproxy.pin() SET restrict_nonsystem_relation_kind = '';
        ALTER FUNCTION mzproxy.register(bigint,bigint,text,integer) SET restrict_nonsystem_relation_kind = '';
    END IF;
END
$$;
