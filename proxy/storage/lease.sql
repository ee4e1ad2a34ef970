-- mzproxy backend state, schema version 2: incarnations, read-protection
-- leases, fencing, compaction and retention, introspection views.
--
-- Runs after install.sql (version 1) on a fresh database, alone on a
-- database at version 1; in one transaction under Install's advisory lock.
-- See leases in doc.go for the model.

-- Version 1 created incarnations and read_holds but never used them.
DROP TABLE IF EXISTS @SCHEMA@.read_holds;
DROP TABLE IF EXISTS @SCHEMA@.incarnations;

-- The highest generation ever registered: incarnations of lower
-- generations are fenced, forever.
CREATE TABLE @SCHEMA@.fence (
    one        bool PRIMARY KEY DEFAULT true CHECK (one),
    generation bigint NOT NULL
);
INSERT INTO @SCHEMA@.fence (generation) VALUES (1);

-- One row per proxy process that used this database. floor_ts is the
-- incarnation's published read floor: while it is live, every collection's
-- history at times >= floor_ts is protected. retired_at set: its floor and
-- holds no longer count and it may not write; retired_reason says why
-- ('lease expired', 'fenced', 'shutdown'), fenced_by which incarnation of a
-- newer generation fenced it.
CREATE TABLE @SCHEMA@.incarnations (
    id             bigserial PRIMARY KEY,
    generation     bigint NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    grace_ms       bigint NOT NULL,
    floor_ts       bigint NOT NULL,
    host           text,
    pid            int,
    retired_at     timestamptz,
    retired_reason text,
    fenced_by      bigint
);
CREATE INDEX incarnations_live ON @SCHEMA@.incarnations (id) WHERE retired_at IS NULL;

-- Holds below an incarnation's floor, per collection (the slow path of
-- acquiring a hold; see acquire_hold).
CREATE TABLE @SCHEMA@.read_holds (
    incarnation bigint NOT NULL REFERENCES @SCHEMA@.incarnations (id) ON DELETE CASCADE,
    collection  bigint NOT NULL,
    ts          bigint NOT NULL,
    PRIMARY KEY (incarnation, collection)
);

-- retain_ms NULL: the compacting proxy's default retention.
ALTER TABLE @SCHEMA@.collections ALTER COLUMN retain_ms DROP NOT NULL;
ALTER TABLE @SCHEMA@.collections ALTER COLUMN retain_ms DROP DEFAULT;
UPDATE @SCHEMA@.collections SET retain_ms = NULL WHERE retain_ms = 3600000;
ALTER TABLE @SCHEMA@.collections ADD COLUMN compacted_rows bigint NOT NULL DEFAULT 0;
ALTER TABLE @SCHEMA@.collections ADD COLUMN last_compacted_rows bigint NOT NULL DEFAULT 0;

-- The last compaction round (by whichever proxy held the compaction lock).
CREATE TABLE @SCHEMA@.compactor (
    one               bool PRIMARY KEY DEFAULT true CHECK (one),
    incarnation       bigint,
    ran_at            timestamptz,
    default_retain_ms bigint,
    dropped_removed   bigint NOT NULL DEFAULT 0
);
INSERT INTO @SCHEMA@.compactor DEFAULT VALUES;

GRANT SELECT ON @SCHEMA@.fence, @SCHEMA@.incarnations, @SCHEMA@.read_holds,
    @SCHEMA@.compactor TO PUBLIC;

------------------------------------------------------------------------------
-- Incarnations.

-- The error an incarnation that may no longer serve gets (XX000, message
-- starting 'mzproxy incarnation ').
CREATE FUNCTION @SCHEMA@.raise_fenced(p_id bigint) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    i record;
    n record;
BEGIN
    SELECT * INTO i FROM @SCHEMA@.incarnations WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'mzproxy incarnation % is not registered in this database', p_id
            USING ERRCODE = 'XX000', DETAIL = 'expired', HINT = 'The proxy must register again before serving.';
    END IF;
    IF i.fenced_by IS NOT NULL THEN
        SELECT * INTO n FROM @SCHEMA@.incarnations WHERE id = i.fenced_by;
        RAISE EXCEPTION 'mzproxy incarnation % (generation %) fenced by new generation % (incarnation %)',
            i.id, i.generation, n.generation, n.id
            USING ERRCODE = 'XX000', DETAIL = 'fenced',
                  HINT = 'A proxy of a newer generation owns writes to this database.';
    END IF;
    IF i.generation < (SELECT generation FROM @SCHEMA@.fence) THEN
        RAISE EXCEPTION 'mzproxy incarnation % (generation %) fenced by new generation %',
            i.id, i.generation, (SELECT generation FROM @SCHEMA@.fence)
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

-- Whether incarnation p_id may serve now: registered, not retired, of the
-- newest generation, heartbeat within its grace (by the backend's clock).
CREATE FUNCTION @SCHEMA@.incarnation_live(p_id bigint) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT i.retired_at IS NULL
                        AND i.generation >= (SELECT generation FROM @SCHEMA@.fence)
                        AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                       FROM @SCHEMA@.incarnations i WHERE i.id = p_id), false)
$$;

-- Register a new incarnation. p_generation 0 joins the newest generation;
-- a lower one than the newest fails (fenced); a higher one fences every
-- live incarnation of a lower generation. Then the txns row is updated
-- (not only locked) so that the fence is ordered with commits: a write transaction
-- of a fenced incarnation either committed before this, or its begin_write
-- sees the fence (READ COMMITTED) or fails to serialize (REPEATABLE READ).
-- The floor starts at the oracle's read_ts, never below a since.
CREATE FUNCTION @SCHEMA@.register(p_generation bigint, p_grace_ms bigint, p_host text, p_pid int,
                                  OUT r_id bigint, OUT r_generation bigint, OUT r_floor bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g bigint;
BEGIN
    -- Only a new generation fences, and only it needs the txns row; taken
    -- before the hold lock, so that waiting for a slow writer's commit
    -- does not hold up compaction and acquire_hold. (If the fence rose
    -- meanwhile, p_generation is no longer above it: nothing to fence.)
    IF p_generation > (SELECT f.generation FROM @SCHEMA@.fence f) THEN
        UPDATE @SCHEMA@.txns SET upper = upper;
    END IF;
    PERFORM pg_advisory_xact_lock(@SCHEMA@.hold_lock_key());
    SELECT f.generation INTO g FROM @SCHEMA@.fence f FOR UPDATE;
    IF p_generation = 0 THEN
        p_generation := g;
    ELSIF p_generation < g THEN
        RAISE EXCEPTION 'mzproxy generation % fenced by new generation %', p_generation, g
            USING ERRCODE = 'XX000', DETAIL = 'fenced',
                  HINT = 'A proxy of a newer generation owns this database; start this one with a generation >= the newest.';
    END IF;
    r_floor := GREATEST(@SCHEMA@.read_ts(), (SELECT max(c.since) FROM @SCHEMA@.collections c));
    INSERT INTO @SCHEMA@.incarnations (generation, grace_ms, floor_ts, host, pid)
    VALUES (p_generation, p_grace_ms, r_floor, p_host, p_pid)
    RETURNING incarnations.id INTO r_id;
    IF p_generation > g THEN
        UPDATE @SCHEMA@.fence SET generation = p_generation;
        UPDATE @SCHEMA@.incarnations i
           SET retired_at = clock_timestamp(), retired_reason = 'fenced', fenced_by = r_id
         WHERE i.retired_at IS NULL AND i.generation < p_generation;
    END IF;
    r_generation := p_generation;
END
$$;

-- Heartbeat of a live incarnation: renews the lease, raises (never lowers)
-- the floor to p_floor, replaces its holds below the floor by p_holds
-- (collection -> ts pairs in two arrays; rows not listed are released, the
-- rest only ever raised) and returns the oracle's read_ts, the candidate
-- for the next floor. Fails with raise_fenced when the incarnation may no
-- longer serve.
CREATE FUNCTION @SCHEMA@.heartbeat(p_id bigint, p_floor bigint, p_colls bigint[], p_ts bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE @SCHEMA@.incarnations i
       SET heartbeat_at = clock_timestamp(), floor_ts = GREATEST(i.floor_ts, p_floor)
     WHERE i.id = p_id AND @SCHEMA@.incarnation_live(p_id);
    IF NOT FOUND THEN
        PERFORM @SCHEMA@.raise_fenced(p_id);
    END IF;
    DELETE FROM @SCHEMA@.read_holds h
     WHERE h.incarnation = p_id AND NOT (h.collection = ANY (coalesce(p_colls, '{}')));
    UPDATE @SCHEMA@.read_holds h SET ts = GREATEST(h.ts, u.ts)
      FROM unnest(p_colls, p_ts) AS u(coll, ts)
     WHERE h.incarnation = p_id AND h.collection = u.coll AND h.ts < u.ts;
    RETURN @SCHEMA@.read_ts();
END
$$;

-- Retire incarnation p_id (a proxy shutting down): its floor and holds stop
-- counting at once.
CREATE FUNCTION @SCHEMA@.deregister(p_id bigint) RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE @SCHEMA@.incarnations SET retired_at = clock_timestamp(), retired_reason = 'shutdown'
     WHERE id = p_id AND retired_at IS NULL;
    DELETE FROM @SCHEMA@.read_holds WHERE incarnation = p_id;
$$;

-- The transaction-level advisory lock that orders compaction's since
-- advance with holds published below a floor (and registration).
CREATE FUNCTION @SCHEMA@.hold_lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$ SELECT 7888888888888888801::bigint $$;

-- A hold at p_ts on collections p_inputs below incarnation p_id's floor:
-- under the hold lock, so no compaction advances a since between the check
-- and the publication. Returns each input's since; when one is above p_ts
-- nothing is published (the caller reports 'not valid for all inputs').
-- Inputs without a collection (unknown, or dropped and removed) are
-- skipped.
CREATE FUNCTION @SCHEMA@.acquire_hold(p_id bigint, p_ts bigint, p_inputs bigint[])
RETURNS TABLE (collection bigint, since bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(@SCHEMA@.hold_lock_key());
    IF NOT @SCHEMA@.incarnation_live(p_id) THEN
        PERFORM @SCHEMA@.raise_fenced(p_id);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM @SCHEMA@.collections c WHERE c.id = ANY (p_inputs) AND c.since > p_ts) THEN
        INSERT INTO @SCHEMA@.read_holds AS h (incarnation, collection, ts)
        SELECT p_id, c.id, p_ts FROM @SCHEMA@.collections c WHERE c.id = ANY (p_inputs)
        ON CONFLICT ON CONSTRAINT read_holds_pkey DO UPDATE SET ts = LEAST(h.ts, excluded.ts);
    END IF;
    RETURN QUERY SELECT c.id, c.since FROM @SCHEMA@.collections c WHERE c.id = ANY (p_inputs) ORDER BY c.id;
END
$$;

------------------------------------------------------------------------------
-- Fencing writes: begin_write(incarnation).

-- The commit slot, as in version 1, plus: when p_inc is not NULL the
-- transaction writes for incarnation p_inc, which must be live (checked
-- after the txns row lock is taken, so a fence that committed meanwhile is
-- seen). Failing aborts the transaction: no partial write.
DROP FUNCTION @SCHEMA@.begin_write();
DROP FUNCTION @SCHEMA@.begin_write_at(bigint);
DROP FUNCTION @SCHEMA@.begin_write_internal(bigint);
CREATE FUNCTION @SCHEMA@.begin_write_internal(p_ts bigint, p_inc bigint) RETURNS bigint
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
    -- See version 1 (install.sql) for why this is correct under READ
    -- COMMITTED.
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
    -- A new statement: under READ COMMITTED it sees every fence committed
    -- before the txns row lock was granted.
    -- incarnation_live, spelled out (one query, no function call) and
    -- without the generation check: registering a newer generation
    -- retires every live incarnation of an older one in the same
    -- transaction that raises the fence.
    IF p_inc IS NOT NULL AND NOT coalesce((
            SELECT i.retired_at IS NULL
                   AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
              FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false) THEN
        PERFORM @SCHEMA@.raise_fenced(p_inc);
    END IF;
    UPDATE @SCHEMA@.oracle SET read_ts = GREATEST(read_ts, t) WHERE timeline = 'EpochMilliseconds';
    PERFORM set_config('mzproxy.write_ts', t::text, true);
    RETURN t;
END
$$;

-- Without an incarnation: unfenced (kept for callers that do not register).
CREATE FUNCTION @SCHEMA@.begin_write() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT @SCHEMA@.begin_write_internal(NULL, NULL) $$;

CREATE FUNCTION @SCHEMA@.begin_write(p_incarnation bigint) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT @SCHEMA@.begin_write_internal(NULL, p_incarnation) $$;

CREATE FUNCTION @SCHEMA@.begin_write_at(ts bigint) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT @SCHEMA@.begin_write_internal(ts, NULL) $$;

CREATE FUNCTION @SCHEMA@.begin_write_at(ts bigint, p_incarnation bigint) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT @SCHEMA@.begin_write_internal(ts, p_incarnation) $$;

------------------------------------------------------------------------------
-- Retention and compaction.

-- Set the retention of managed table p_rel (RETAIN HISTORY FOR ...) to
-- p_ms milliseconds, or back to the default when p_ms is NULL (RESET).
-- Must run in the DDL's proxy write transaction. Returns false when p_rel
-- is not a managed table (a temporary or unmanaged table: nothing to
-- retain). Raising retention does not bring back compacted history.
CREATE FUNCTION @SCHEMA@.set_retention(p_rel regclass, p_ms bigint) RETURNS bool
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF @SCHEMA@.current_write_ts() IS NULL THEN
        RAISE EXCEPTION 'RETAIN HISTORY of % can only be changed through mzproxy', p_rel
            USING ERRCODE = 'MZ003';
    END IF;
    IF p_ms IS NOT NULL AND p_ms < 0 THEN
        RAISE EXCEPTION 'RETAIN HISTORY must not be negative' USING ERRCODE = '22023';
    END IF;
    UPDATE @SCHEMA@.collections c SET retain_ms = p_ms
      FROM @SCHEMA@.catalog k
     WHERE k.id = c.id AND k.oid = p_rel AND k.kind = 'table' AND k.dropped_ts IS NULL;
    RETURN FOUND;
END
$$;

-- One compaction round's bookkeeping (the caller holds the compaction
-- lock): retire incarnations whose heartbeat is older than their grace,
-- then advance every since to
--   GREATEST(since, LEAST(upper - 1 - retain, live floors, live holds))
-- and remove the history of dropped tables once since >= dropped_ts (no
-- hold can read them any more). Returns the tables that may have versions
-- to delete (mz_to <= since): compact_batch removes them.
CREATE FUNCTION @SCHEMA@.compact(p_default_retain_ms bigint, p_by bigint)
RETURNS TABLE (id bigint, since bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    up bigint;
    fl bigint;
    d record;
    removed bigint := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(@SCHEMA@.hold_lock_key());
    UPDATE @SCHEMA@.incarnations i SET retired_at = clock_timestamp(), retired_reason = 'lease expired'
     WHERE i.retired_at IS NULL AND i.heartbeat_at < clock_timestamp() - i.grace_ms * interval '1 millisecond';
    UPDATE @SCHEMA@.incarnations i SET retired_at = clock_timestamp(), retired_reason = 'fenced'
     WHERE i.retired_at IS NULL AND i.generation < (SELECT f.generation FROM @SCHEMA@.fence f);
    DELETE FROM @SCHEMA@.read_holds h USING @SCHEMA@.incarnations i
     WHERE i.id = h.incarnation AND i.retired_at IS NOT NULL;
    -- Keep retired incarnations a day for introspection.
    DELETE FROM @SCHEMA@.incarnations i WHERE i.retired_at < clock_timestamp() - interval '1 day';
    SELECT x.upper INTO up FROM @SCHEMA@.txns x;
    SELECT min(i.floor_ts) INTO fl FROM @SCHEMA@.incarnations i WHERE i.retired_at IS NULL;
    UPDATE @SCHEMA@.collections c
       SET since = GREATEST(c.since, LEAST(up - 1 - coalesce(c.retain_ms, p_default_retain_ms), fl,
                                           (SELECT min(h.ts) FROM @SCHEMA@.read_holds h WHERE h.collection = c.id)))
     WHERE c.since < LEAST(up - 1 - coalesce(c.retain_ms, p_default_retain_ms), fl,
                           (SELECT min(h.ts) FROM @SCHEMA@.read_holds h WHERE h.collection = c.id));
    -- Dropped tables nobody can read any more.
    FOR d IN SELECT k.id, k.history FROM @SCHEMA@.catalog k JOIN @SCHEMA@.collections c ON c.id = k.id
              WHERE k.dropped_ts IS NOT NULL AND c.since >= k.dropped_ts
    LOOP
        PERFORM set_config('mzproxy.in_ddl', 'on', true);
        EXECUTE format('DROP TABLE IF EXISTS %s', d.history);
        PERFORM set_config('mzproxy.in_ddl', '', true);
        DELETE FROM @SCHEMA@.read_holds h WHERE h.collection = d.id;
        DELETE FROM @SCHEMA@.collections c WHERE c.id = d.id;
        DELETE FROM @SCHEMA@.columns c WHERE c.id = d.id;
        DELETE FROM @SCHEMA@.catalog k WHERE k.id = d.id;
        removed := removed + 1;
    END LOOP;
    UPDATE @SCHEMA@.compactor SET incarnation = p_by, ran_at = clock_timestamp(),
           default_retain_ms = p_default_retain_ms, dropped_removed = dropped_removed + removed;
    RETURN QUERY SELECT c.id, c.since FROM @SCHEMA@.collections c ORDER BY c.id;
END
$$;

-- Delete up to p_limit versions of table p_id that no time >= since can
-- see (mz_to <= since); returns how many. Needs no lock: a since only rises.
CREATE FUNCTION @SCHEMA@.compact_batch(p_id bigint, p_limit int) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    n bigint;
BEGIN
    SELECT k.history, s.since INTO c FROM @SCHEMA@.catalog k JOIN @SCHEMA@.collections s ON s.id = k.id
     WHERE k.id = p_id;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    EXECUTE format('WITH d AS (DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s WHERE mz_to <= $1 LIMIT $2)) RETURNING 1) '
                   'SELECT count(*) FROM d', c.history, c.history)
       INTO n USING c.since, p_limit;
    IF n > 0 THEN
        UPDATE @SCHEMA@.collections s SET compacted_rows = compacted_rows + n, last_compacted_rows = n,
               compacted_at = clock_timestamp()
         WHERE s.id = p_id;
    END IF;
    RETURN n;
END
$$;

------------------------------------------------------------------------------
-- Introspection, readable by anyone with SELECT through any proxy (plain
-- views; reads of the present are forwarded unchanged). Names follow
-- Materialize's mz_internal; object_id is 'u' || catalog id.

CREATE SCHEMA IF NOT EXISTS mz_internal;
GRANT USAGE ON SCHEMA mz_internal TO PUBLIC;

CREATE OR REPLACE VIEW mz_internal.mz_incarnations AS
SELECT i.id, i.generation, i.host, i.pid, i.started_at, i.heartbeat_at,
       clock_timestamp() - i.heartbeat_at AS heartbeat_age,
       i.grace_ms, i.floor_ts AS read_floor,
       CASE WHEN i.retired_at IS NOT NULL THEN i.retired_reason
            WHEN i.generation < f.generation THEN 'fenced'
            WHEN i.heartbeat_at < clock_timestamp() - i.grace_ms * interval '1 millisecond' THEN 'expired'
            ELSE 'live' END AS status,
       i.retired_at, i.fenced_by
  FROM @SCHEMA@.incarnations i CROSS JOIN @SCHEMA@.fence f;

-- The read protection that counts now: each live incarnation's floor on
-- every collection (kind 'floor') and its holds below the floor ('hold').
CREATE OR REPLACE VIEW mz_internal.mz_read_holds AS
SELECT i.id AS incarnation, 'u' || k.id AS object_id, k.schema_name, k.name, 'floor'::text AS kind, i.floor_ts AS ts
  FROM @SCHEMA@.incarnations i CROSS JOIN @SCHEMA@.collections c JOIN @SCHEMA@.catalog k ON k.id = c.id
 WHERE i.retired_at IS NULL
UNION ALL
SELECT h.incarnation, 'u' || k.id, k.schema_name, k.name, 'hold', h.ts
  FROM @SCHEMA@.read_holds h JOIN @SCHEMA@.incarnations i ON i.id = h.incarnation AND i.retired_at IS NULL
  JOIN @SCHEMA@.catalog k ON k.id = h.collection;

CREATE OR REPLACE VIEW mz_internal.mz_frontiers AS
SELECT 'u' || k.id AS object_id, k.schema_name, k.name, c.since AS read_frontier, x.upper AS write_frontier,
       coalesce(c.retain_ms, m.default_retain_ms) AS retain_ms, k.dropped_ts
  FROM @SCHEMA@.collections c JOIN @SCHEMA@.catalog k ON k.id = c.id
  CROSS JOIN @SCHEMA@.txns x CROSS JOIN @SCHEMA@.compactor m;

CREATE OR REPLACE VIEW mz_internal.mz_compactions AS
SELECT 'u' || k.id AS object_id, k.schema_name, k.name, c.since, c.compacted_at,
       c.last_compacted_rows, c.compacted_rows AS total_compacted_rows,
       m.ran_at AS last_round_at, m.incarnation AS last_round_by
  FROM @SCHEMA@.collections c JOIN @SCHEMA@.catalog k ON k.id = c.id CROSS JOIN @SCHEMA@.compactor m;

GRANT SELECT ON mz_internal.mz_incarnations, mz_internal.mz_read_holds, mz_internal.mz_frontiers,
    mz_internal.mz_compactions TO PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (2);
