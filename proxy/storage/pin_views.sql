-- mzproxy backend state, version 25 to 26: a read-only transaction's pin
-- without PL/pgSQL (issue 15).
--
-- Every read-only transaction called pin_peek() before its BEGIN and
-- pin_check(peek) in its first statement (pin_trim.sql). Each is a
-- PL/pgSQL SECURITY DEFINER function with a SET clause: a GUC nest level
-- saved and restored, and each of its statements an SPI execution.
-- Measured behind the proxy (pgbench rotxn, one client,
-- pg_stat_user_functions): about 30 us of backend CPU per call, 60 of the
-- 180-200 us a transaction costs the backend more than directly.
--
-- The views settled_writes and pin_state ask exactly what the two
-- functions ask, reading the same sequences in the same order (the order
-- is the plan's, as in settled_pin, pin_cheap.sql: the first read is the
-- row the query scans, each later one a subquery in a branch of a CASE,
-- run once, when the CASE reaches it). A view is planned with the
-- statement that reads it (the proxy prepares both: planned once) and
-- reads the sequences with its owner's rights, so they stay unreadable by
-- ordinary roles; it tells a reader what pin_peek and pin_check, which
-- anyone may call, tell. Its names were bound when it was made: a role's
-- search_path cannot put functions or operators of its own in their place.
--
-- A session that restricts non-system views (SET
-- restrict_nonsystem_relation_kind = 'view', as pg_dump does; see
-- view_safe.sql) cannot read a view of mzproxy's: the proxy learns it
-- from the error (nothing ran) and calls pin_peek and pin_check in that
-- session, as before this version. They stay for it.
--
-- settled_writes is pin_peek: the writes counted w (the sequence writes),
-- then writes_seen, which must equal w (every write counted was settled
-- by a pin), then whether P is set since the last crash; w, or NULL.
CREATE VIEW @SCHEMA@.settled_writes AS
SELECT CASE
         WHEN (SELECT seen.last_value FROM @SCHEMA@.writes_seen seen) <> counted.w THEN NULL
         WHEN (SELECT p.is_called FROM @SCHEMA@.pinned p) THEN counted.w
       END AS w
  FROM (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END AS w FROM @SCHEMA@.writes s) counted;

-- pin_state is what pin_check compares with the peek: P (the sequence
-- pinned) when it is set and less than a second behind the clock, else
-- NULL as t; then, read after P, the writes counted as w (NULL when P was
-- never set). pin_check(peek) is
--   SELECT CASE WHEN s.w = peek THEN s.t END FROM pin_state s
-- (storage.PinCheckSQL), which must name w once: each mention would read
-- the sequence again.
CREATE VIEW @SCHEMA@.pin_state AS
SELECT CASE WHEN NOT p.is_called OR p.last_value < @SCHEMA@.now_ms() - 1000 THEN NULL ELSE p.last_value END AS t,
       CASE WHEN p.is_called THEN
         (SELECT CASE WHEN again.is_called THEN again.last_value ELSE 0 END FROM @SCHEMA@.writes again)
       END AS w
  FROM @SCHEMA@.pinned p;

GRANT SELECT ON @SCHEMA@.settled_writes, @SCHEMA@.pin_state TO PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (26);
