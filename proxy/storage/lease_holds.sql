-- mzproxy backend state, schema version 4: a heartbeat publishes every
-- read hold of its incarnation, not only those below its floor, so that
-- mz_internal.mz_read_holds shows each read holding a timestamp (holds at
-- or above the floor change no since: the floor already protects them).

-- Heartbeat of a live incarnation: renews the lease, raises (never lowers)
-- the floor to p_floor, makes its holds exactly p_holds (collection -> ts
-- pairs in two arrays, the oldest hold out on each collection; rows not
-- listed are released, listed ones inserted or only ever raised) and
-- returns the oracle's read_ts, the candidate for the next floor. Fails
-- with raise_fenced when the incarnation may no longer serve.
CREATE OR REPLACE FUNCTION @SCHEMA@.heartbeat(p_id bigint, p_floor bigint, p_colls bigint[], p_ts bigint[])
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
    -- A hold not yet published is at or above the floor (one below it was
    -- published by acquire_hold), so inserting it never lowers what
    -- compaction may do below the floor; raising only, as before.
    INSERT INTO @SCHEMA@.read_holds AS h (incarnation, collection, ts)
    SELECT p_id, u.coll, u.ts FROM unnest(p_colls, p_ts) AS u(coll, ts)
     WHERE EXISTS (SELECT 1 FROM @SCHEMA@.collections c WHERE c.id = u.coll)
    ON CONFLICT ON CONSTRAINT read_holds_pkey DO UPDATE SET ts = GREATEST(h.ts, excluded.ts);
    RETURN @SCHEMA@.read_ts();
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (4);
