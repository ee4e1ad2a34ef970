-- mzproxy backend state, version 50 to 51 (session 22, tsread22): the views
-- settled_pin and settled_writes read the sequences after the first by
-- pg_sequence_last_value, not as relations (issue 15).
--
-- Each relation a statement names costs the backend its lock, its rights
-- check and its scan's start at every run, whether or not the branch that
-- reads it runs (docs/read-cost.md, sessions 20 and 21). settled_pin
-- (pin_cheap.sql) named four sequences (writes twice, writes_seen,
-- pinned), settled_writes (pin_views.sql) three. Since session 21 the read
-- guards (proxy/seen_read.go) and the read-only transaction's guard
-- (storage.PinGuardCheck) read writes_seen and the second count of the
-- writes by pg_sequence_last_value and compare P's age as a time; the
-- views are who still read them as tables: pin() (ReadTSSQL: EXPLAIN
-- TIMESTAMP, reads in a transaction block, AS OF mz_now(), and a read
-- guard's pin once the writes moved or P aged) reads settled_pin, and
-- PinPeekSQL (before the BEGIN of a read-only transaction whose session
-- has no settled count) reads settled_writes. (The read guards of this
-- proxy no longer read settled_pin themselves; those of proxies before
-- version 45 do.)
--
-- The reads and their order are the views' as before (pin_cheap.sql and
-- pin_views.sql give the argument): the first, the count of writes w, is
-- still the row the view scans (read before anything is projected); each
-- later read is in a branch of a CASE, run only when the CASE reaches it,
-- in order. What changed is how each later read reads its sequence:
--
--   - writes_seen and the second count of the writes:
--     coalesce(pg_sequence_last_value(...), 0), the value now (as the scan
--     read it: a sequence has no snapshot), 0 before the first nextval or
--     setval with is_called (the scans' CASE WHEN is_called; writes_seen
--     starts at 0 and is only ever set with is_called, so its last value
--     is the coalesce's);
--   - in settled_pin, P stays the row of its subquery's scan (it is named
--     twice there, its age and its value; a function in FROM or a
--     subquery kept by OFFSET 0 cost more than the scan, session 21), and
--     its age is compared as a time, as storage.PinFresh does:
--     clock_timestamp() < 'epoch' + (P + 1001) ms holds exactly when
--     P >= now_ms() - 1000 (the proof is PinFresh's; TestPeekGuardAnswers
--     checks the two forms at the millisecond's bounds);
--   - in settled_writes, whether P is set at all: pg_sequence_last_value
--     of pinned is NULL exactly when is_called is false.
--
-- A function in a view runs with its reader's rights, where the view's
-- relations are read with its owner's: pg_sequence_last_value needs
-- SELECT (or USAGE) on the sequence, which PUBLIC has on writes and
-- pinned since version 32 (pin_seq.sql) and on writes_seen since 45
-- (read_peek.sql), and the views answer an ordinary role as before
-- (TestSettledPin reads them as one). The sequences are named by
-- regclass constants bound when the view is made; a role's search_path
-- cannot put anything in their place.
--
-- Replaced (in full): the views settled_pin and settled_writes. Their
-- columns, grants and owners are unchanged (CREATE OR REPLACE VIEW).
-- pin_state (pin_views.sql) has no caller in the proxy since version 32
-- and stays as it is.
CREATE OR REPLACE VIEW @SCHEMA@.settled_pin AS
SELECT CASE
         WHEN coalesce(pg_catalog.current_setting('mzproxy.write_ts', true), '') <> '' THEN NULL
         WHEN coalesce(pg_catalog.pg_sequence_last_value('@SCHEMA@.writes_seen'::pg_catalog.regclass), 0) <> counted.w THEN NULL
         ELSE (SELECT CASE
                        WHEN NOT (p.is_called AND pg_catalog.clock_timestamp()
                                  < 'epoch'::pg_catalog.timestamptz + (p.last_value + 1001)::pg_catalog.float8 * '1 ms'::pg_catalog.interval) THEN NULL
                        WHEN coalesce(pg_catalog.pg_sequence_last_value('@SCHEMA@.writes'::pg_catalog.regclass), 0) = counted.w THEN p.last_value
                      END
                 FROM @SCHEMA@.pinned p)
       END AS t
  FROM (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END AS w FROM @SCHEMA@.writes s) counted;

CREATE OR REPLACE VIEW @SCHEMA@.settled_writes AS
SELECT CASE
         WHEN coalesce(pg_catalog.pg_sequence_last_value('@SCHEMA@.writes_seen'::pg_catalog.regclass), 0) <> counted.w THEN NULL
         WHEN pg_catalog.pg_sequence_last_value('@SCHEMA@.pinned'::pg_catalog.regclass) IS NOT NULL THEN counted.w
       END AS w
  FROM (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END AS w FROM @SCHEMA@.writes s) counted;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (51);
