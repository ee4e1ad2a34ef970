-- mzproxy backend state, version 43 to 44 (session 20, issue 14): the
-- write slot as one flat statement of the proxy's, which needs SELECT on
-- the gate.
--
-- The slot. Until version 43 mzproxy took an autocommit write's slot by
-- calling begin_write_occ, a SECURITY DEFINER PL/pgSQL function with a SET
-- search_path frame, a LOCK TABLE, a query for the incarnation check and
-- a set_config. Since version 42 nothing in it needs a right the caller
-- lacks or proves anything: the request '0 - pending' is what any role may
-- set, and the code that chooses T from it takes the gate and counts the
-- write itself (slot_pending.sql). So the proxy now sends that work as one
-- plain statement of its own (storage.OpenWriteFor), run as the client's
-- role with every name, operator and type qualified: the gate in ROW SHARE
-- mode through a FOR SHARE of its range-table entry (PostgreSQL takes
-- that lock when the statement starts and holds it to the transaction's
-- end, as LOCK TABLE does), the incarnation's check, the request; and
-- begin_write_occ, unchanged, only when the transaction already has a
-- setting. FOR SHARE needs SELECT on the gate besides UPDATE (PUBLIC's
-- since version 7, for pin_held); the gate has no columns and no rows, so
-- SELECT on it shows nothing, and a lock it allows (ACCESS SHARE) is
-- weaker than what UPDATE already allows.
--
-- The triggers are unchanged. Tried and not kept: their T query naming
-- the gate FOR SHARE in a clause that reads nothing (WHERE false), instead
-- of the LOCK TABLE statement before it. PostgreSQL takes the lock when
-- that query starts, before it reads P, so it would have been as safe,
-- but the LockRows node it plans costs as much to start as the LOCK
-- statement through SPI: 1.5k instructions more per write
-- (docs/write-cost.md, "Session 20").

GRANT SELECT ON @SCHEMA@.gate TO PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (44);
