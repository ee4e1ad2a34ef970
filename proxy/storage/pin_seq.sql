-- mzproxy backend state, version 31 to 32: the read-only transaction's
-- guard reads P and the writes counted straight from their sequences
-- (issue 15; docs/read-cost.md has the method and the figures).
--
-- The guard that rides in front of a read-only transaction's first read
-- (proxy/pin_read.go) read pin_state (pin_views.sql) through a scalar
-- subquery, the catalog revision through another, and compared three
-- settings: about 167k backend instructions per transaction, most of a
-- read-only transaction's cost beyond the same statements sent directly.
-- Reading the two sequences itself (storage.PinGuardCheck), in one flat
-- statement, saves the view's lock and permission check and the subquery
-- levels. An ordinary role reads them with its own rights, so it may
-- read them now: SELECT on a sequence allows reading it (and currval,
-- which needs a nextval of the session's own first), not nextval or
-- setval (USAGE, UPDATE), which stay the schema owner's. What the role
-- reads, P and the count of write slots, is what the views settled_writes
-- and pin_state and the functions pin_peek and pin_check already tell
-- anyone. writes_seen stays unreadable.
--
-- A sequence is not a view: a session that restricts non-system views
-- (view_safe.sql) reads them too.
GRANT SELECT ON @SCHEMA@.pinned, @SCHEMA@.writes TO PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (32);
