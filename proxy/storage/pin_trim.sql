-- mzproxy backend state, version 13 to 14: a read-only transaction's pin
-- without the gate (issue 15).
--
-- Until now every read-only transaction locked the gate in EXCLUSIVE mode
-- before its snapshot and kept it for three statements (LOCK, pin_held,
-- ROLLBACK TO SAVEPOINT): read-only transactions queued behind each other
-- and behind every write in progress, a few thousand per second at most
-- on any machine. Now a read-only transaction can pin without any lock:
--
--  * Before its BEGIN, outside any transaction block, pin_peek() reads the
--    writes counted (the sequence writes) when every one of them is
--    settled: no write slot was taken since the last pin, so every write
--    counted committed before that pin got the gate (it waited for them),
--    at a T <= P. NULL otherwise.
--  * The transaction's first statement takes its snapshot and calls
--    pin_check(peek): it reads P, then the writes counted. When the count
--    is still the peek's, no slot was taken since the peek: every write
--    ever counted committed before the peek, so before the snapshot, and
--    is in it, at a T <= P; every write to come counts after this and
--    chooses T > P. So the snapshot holds exactly the writes at or below
--    P: the transaction reads at t = P, upper P + 1, and P never moved
--    (no lock, no WAL, nothing written). P is read before the count: a
--    slot taken in between changes the count; one taken after chooses T
--    above the P read.
--  * Otherwise (a slot was taken since the peek, or P is not set after a
--    crash) pin_check returns NULL and the transaction must pin as before
--    (PinSnapshotSQL) in a new backend transaction: its snapshot is
--    taken.
--
-- t = P is the time of the last write or tick, which is what
-- Materialize's oracle hands out too. It is used only while it is less
-- than a second behind the clock (the tick moves it every 0.9 s by
-- default): mz_now() stays within a second of the clock whether or not
-- anything ticks. It never goes backwards, and every read that finished
-- before has t' <= P.

CREATE FUNCTION @SCHEMA@.pin_peek() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    w bigint;
    seen bigint;
    called bool;
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO w FROM @SCHEMA@.writes s;
    SELECT s.last_value INTO seen FROM @SCHEMA@.writes_seen s;
    SELECT s.is_called INTO called FROM @SCHEMA@.pinned s;
    IF w <> seen OR NOT called THEN
        RETURN NULL;
    END IF;
    RETURN w;
END
$$;

-- P in the caller's snapshot statement when no write slot was taken since
-- pin_peek answered p_peek (see the header); NULL otherwise.
CREATE FUNCTION @SCHEMA@.pin_check(p_peek bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p bigint;
    called bool;
    w bigint;
BEGIN
    IF p_peek IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT s.last_value, s.is_called INTO p, called FROM @SCHEMA@.pinned s;
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO w FROM @SCHEMA@.writes s;
    IF NOT called OR w <> p_peek OR p < @SCHEMA@.now_ms() - 1000 THEN
        RETURN NULL;
    END IF;
    RETURN p;
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.pin_peek(), @SCHEMA@.pin_check(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @SCHEMA@.pin_peek(), @SCHEMA@.pin_check(bigint) TO PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (14);
