-- mzproxy backend state, version 17 to 18: a read of the present's pin
-- without PL/pgSQL when it takes no lock (issue 15).
--
-- A timestamped read of the present (SELECT ..., mz_now() ...) runs behind
-- the proxy's guard, which called pin() for its timestamp. On the path
-- pin_fast.sql made lock-free, pin() did nothing but read three sequences
-- and the clock, yet cost about 50 us a call: a PL/pgSQL SECURITY DEFINER
-- function with a SET clause (a GUC nest level saved and restored) calling
-- two more of the same kind (pin_peek, pin_check) and write_slot, each
-- statement of each an SPI execution. The guard's cost was mostly that.
--
-- settled_pin is the same lock-free answer as a view of one row: P when
-- pin() would answer it without the gate, NULL otherwise (the caller then calls
-- pin(), which takes the gate). A view is planned with the statement that
-- reads it (the guard is prepared: planned once per catalog revision) and
-- reads its relations with its owner's rights, so the sequences stay
-- unreadable by ordinary roles while the reader runs no function of
-- mzproxy's at all (now_ms() is inlined). It tells a reader no more than
-- pin() and pin_peek(), which anyone may call: P, or that a write is not
-- settled. Its names were bound when it was made, so a role's search_path
-- cannot put functions or operators of its own in their place.
--
-- Measured on the lock-free path, the guard prepared as the proxy prepares
-- it: callgrind in a single-user backend counts 145k instructions per
-- guard instead of 259k (66k of them the guard without any pin: its pin
-- went from 193k to 79k, the four sequence reads); BenchmarkGuardPin
-- (interleaved, loaded machine) 17-18 us of server time per guard instead
-- of 34-39, 51-54 us per round trip instead of 85-92. pin() alone, now
-- reading the view, went from 259k to 241k.
--
-- It asks exactly what pin() asked through pin_peek and pin_check, reading
-- the sequences in the same order (pin_fast.sql and pin_trim.sql give the
-- argument):
--
--   1. no write slot in this transaction (mzproxy.write_ts empty: a value
--      of any kind leaves it to pin(), which checks the value's tag and,
--      for a slot, answers the transaction's own T);
--   2. the writes counted, w (the sequence writes);
--   3. then writes_seen, which must equal w: every write counted was
--      settled by a pin;
--   4. then P (the sequence pinned), which a pin sets before writes_seen:
--      set since the last crash and less than a second behind the clock;
--   5. then the writes counted again, still w.
--
-- pin_check read pinned twice (is_called in pin_peek, then P with it);
-- reading it once answers as the two reads do when nothing happens
-- between them, one of the orders the two reads allowed. The order of the
-- reads is the plan's, not an accident of evaluation: w is the row the
-- query scans, so it is read before the row is projected; each later read
-- is a subquery in a branch of a CASE, run (once) only when the CASE
-- reaches it, and CASE tries its branches in order. Steps 4 and 5 share
-- one subquery, which reads pinned and then, in its own CASE, writes.
CREATE VIEW @SCHEMA@.settled_pin AS
SELECT CASE
         WHEN coalesce(pg_catalog.current_setting('mzproxy.write_ts', true), '') <> '' THEN NULL
         WHEN (SELECT seen.last_value FROM @SCHEMA@.writes_seen seen) <> counted.w THEN NULL
         ELSE (SELECT CASE
                        WHEN NOT p.is_called OR p.last_value < @SCHEMA@.now_ms() - 1000 THEN NULL
                        WHEN (SELECT CASE WHEN again.is_called THEN again.last_value ELSE 0 END
                                FROM @SCHEMA@.writes again) = counted.w THEN p.last_value
                      END
                 FROM @SCHEMA@.pinned p)
       END AS t
  FROM (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END AS w FROM @SCHEMA@.writes s) counted;

GRANT SELECT ON @SCHEMA@.settled_pin TO PUBLIC;

-- pin() asks the view too, for the callers that still call it first
-- (ReadTSSQL: EXPLAIN TIMESTAMP, reads in a transaction block, AS OF
-- mz_now()): one nested function call instead of two SECURITY DEFINER
-- ones. Otherwise unchanged (pin_fast.sql).
CREATE OR REPLACE FUNCTION @SCHEMA@.pin() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t bigint;
BEGIN
    IF (SELECT s.t FROM @SCHEMA@.write_slot() s) IS NOT NULL THEN
        RETURN @SCHEMA@.current_write_ts();
    END IF;
    t := (SELECT q.t FROM @SCHEMA@.settled_pin q);
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (18);
