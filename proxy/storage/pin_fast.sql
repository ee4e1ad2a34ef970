-- mzproxy backend state, version 14 to 15: a read of the present pins
-- without the gate when no write began since the last pin (issue 15).
--
-- pin() took the gate in EXCLUSIVE mode for every autocommit read that
-- needs its timestamp (mz_now(), EXPLAIN TIMESTAMP, a guarded AS OF read):
-- such reads ran one at a time per database, each waiting for the writes
-- in progress. When every write counted so far was settled by a pin
-- (writes = writes_seen, as pin_peek asks in pin_trim.sql), P already is a
-- valid answer without the lock:
--
--  * every write counted committed before the pin that settled it got the
--    gate, at a T <= P (that pin set P before writes_seen, and P is read
--    after writes_seen here);
--  * every write acknowledged before this call was counted before it, so
--    it is among those: the read sees it (linearizable);
--  * a write counted after writes is read here chooses T > P (it reads P
--    later, with the gate held, and P never goes down), so it is not part
--    of the read at P, whenever it commits. A read at P goes to history
--    (mz_from <= P AND mz_to > P), so a snapshot taken after such a commit
--    still reads exactly the writes at or below P.
--
-- So pin() first asks what a read-only transaction's lock-free pin asks
-- (pin_trim.sql): pin_peek reads writes, then writes_seen; pin_check then
-- reads P (used only while less than a second behind the clock) and the
-- count again. Anything else (a write since the last pin, an older P, P
-- not set since a crash) takes the gate as before.
CREATE OR REPLACE FUNCTION @SCHEMA@.pin() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t bigint;
BEGIN
    IF (SELECT s.t FROM @SCHEMA@.write_slot() s) IS NOT NULL THEN
        RETURN @SCHEMA@.current_write_ts();
    END IF;
    t := @SCHEMA@.pin_check(@SCHEMA@.pin_peek());
    IF t IS NOT NULL THEN
        RETURN t;
    END IF;
    BEGIN
        t := @SCHEMA@.pin_locked();
        RAISE SQLSTATE 'MZP00';
    EXCEPTION WHEN SQLSTATE 'MZP00' THEN
        NULL;
    END;
    RETURN t;
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (15);
