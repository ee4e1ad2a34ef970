-- mzproxy backend state: version 2 to 3, optimistic writes.
--
-- A write transaction through the proxy no longer has to hold the txns row
-- lock (the global commit slot) for its whole length. begin_write_occ picks
-- the commit timestamp T and remembers the upper of its snapshot (the
-- expected upper) without locking anything; the statements run and their
-- history triggers stamp T as before; commit_write then compare-and-appends:
-- it moves the upper from exactly the expected value to T+1, so the write
-- commits only if nothing else committed since its snapshot, and fails with
-- MZ001 (DETAIL: the actual upper) otherwise. The txns row lock is held
-- from that UPDATE to COMMIT only.

-- The optimistic commit slot of the current transaction: returns T. No
-- lock is taken. T is at least p_floor (the actual upper of the caller's
-- last conflict), the upper, read_ts + 1, write_ts + 1 and the clock, all
-- as of this snapshot; a commit after the snapshot makes commit_write
-- fail, so a stale choice is never committed. Idempotent within a
-- transaction (also after begin_write, whose slot it then shares).
CREATE FUNCTION @SCHEMA@.begin_write_occ(p_inc bigint, p_floor bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cur text := current_setting('mzproxy.write_ts', true);
    u bigint;
    t bigint;
BEGIN
    IF cur IS NOT NULL AND cur <> '' THEN
        RETURN cur::bigint;
    END IF;
    -- One statement, one snapshot: T >= the upper it expects.
    SELECT x.upper,
           GREATEST(x.upper, o.read_ts + 1, w.write_ts + 1, @SCHEMA@.now_ms(), coalesce(p_floor, 0))
      INTO u, t
      FROM @SCHEMA@.txns x, @SCHEMA@.oracle o, @SCHEMA@.oracle_write w
     WHERE o.timeline = 'EpochMilliseconds' AND w.timeline = 'EpochMilliseconds';
    PERFORM set_config('mzproxy.write_ts', t::text, true);
    PERFORM set_config('mzproxy.expected_upper', u::text, true);
    RETURN t;
END
$$;

-- The compare-and-append of an optimistic write transaction: upper moves
-- from the expected upper to T+1 and read_ts to T, or the call fails with
-- MZ001 and DETAIL the actual upper (the transaction must then roll back).
-- It does not wait for the txns row lock: held by another writer, it
-- fails with MZ004 and DETAIL T+1 (a floor for the retry, whose
-- begin_write_occ reads the real upper); the caller rolls back (dropping
-- its row locks) and may wait with await_slot before it tries again.
-- Under REPEATABLE READ PostgreSQL itself fails it with 40001 when any
-- commit happened since the transaction's snapshot. p_inc fences as
-- begin_write(p_inc) does. Returns T; returns T at once when the slot is already held (begin_write, or a
-- commit_write earlier in the transaction) and NULL when the transaction
-- has no write slot (nothing to append).
CREATE FUNCTION @SCHEMA@.commit_write(p_inc bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t bigint := nullif(current_setting('mzproxy.write_ts', true), '')::bigint;
    e bigint := nullif(current_setting('mzproxy.expected_upper', true), '')::bigint;
    done bigint;
    u bigint;
    r bigint;
BEGIN
    IF t IS NULL OR e IS NULL THEN
        RETURN t;
    END IF;
    -- Never wait for the slot while holding the write's row locks: a
    -- pessimistic writer (begin_write) that holds the slot may be waiting
    -- for them (a deadlock), and whoever holds it is about to move the
    -- upper anyway, so the append would fail after the wait.
    PERFORM 1 FROM @SCHEMA@.txns x FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'write at timestamp % conflicts: another write holds the commit slot', t
            USING ERRCODE = 'MZ004', DETAIL = (t + 1)::text,
                  HINT = 'Roll back, wait for the slot (await_slot), and try again.';
    END IF;
    UPDATE @SCHEMA@.txns x SET upper = t + 1 WHERE x.upper = e RETURNING t INTO done;
    IF done IS NULL THEN
        SELECT x.upper INTO u FROM @SCHEMA@.txns x;
        RAISE EXCEPTION 'write at timestamp % conflicts: the upper is already %', t, u
            USING ERRCODE = 'MZ001', DETAIL = u::text;
    END IF;
    -- read_ts moves without the txns lock only through apply_write: a
    -- reader may already have been told a timestamp >= T.
    SELECT o.read_ts INTO r FROM @SCHEMA@.oracle o WHERE o.timeline = 'EpochMilliseconds';
    IF r >= t THEN
        RAISE EXCEPTION 'write at timestamp % conflicts: read timestamp % was already handed out', t, r
            USING ERRCODE = 'MZ001', DETAIL = (r + 1)::text;
    END IF;
    -- As in begin_write_internal: checked once the txns row is locked.
    IF p_inc IS NOT NULL AND NOT coalesce((
            SELECT i.retired_at IS NULL
                   AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
              FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false) THEN
        PERFORM @SCHEMA@.raise_fenced(p_inc);
    END IF;
    UPDATE @SCHEMA@.oracle SET read_ts = GREATEST(read_ts, t) WHERE timeline = 'EpochMilliseconds';
    PERFORM set_config('mzproxy.expected_upper', '', true);
    RETURN t;
END
$$;

-- Wait until no transaction holds the commit slot (a pessimistic writer,
-- or a commit in progress), without taking it: run in a transaction of its
-- own that holds no other lock, it returns once the holder has committed.
CREATE FUNCTION @SCHEMA@.await_slot() RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM @SCHEMA@.txns x FOR SHARE;
END
$$;

-- commit_write for a client's explicit transaction, at its COMMIT: a
-- conflict is PostgreSQL's serialization failure, which clients retry.
CREATE FUNCTION @SCHEMA@.commit_write_tx(p_inc bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN @SCHEMA@.commit_write(p_inc);
EXCEPTION WHEN SQLSTATE 'MZ001' OR SQLSTATE 'MZ004' THEN
    RAISE EXCEPTION 'could not serialize access due to concurrent update'
        USING ERRCODE = '40001', DETAIL = 'mzproxy: another write committed since this transaction''s snapshot.',
              HINT = 'The transaction might succeed if retried.';
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (3);
