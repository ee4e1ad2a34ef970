-- mzproxy backend state, version 19 to 20 (to be renumbered at merge: 23):
-- the per-table check (rw_check.sql) counts a table as "being written"
-- only by a transaction that holds the writers' gate in the mode writers
-- take it, ROW SHARE.
--
-- check_reads took any lock on the gate, with ROW EXCLUSIVE or stronger on
-- a table read, for a write whose T is chosen or being chosen. Parse
-- analysis takes both without any right: a role that may not write the
-- table, nor select from the gate, ran
--   BEGIN; PREPARE a AS INSERT INTO t VALUES (...); PREPARE g AS SELECT FROM mzproxy.gate;
-- and idled, and every transaction that read t and then wrote failed with
-- 40001 until it ended. Its ACCESS SHARE lock on the gate stalls nothing
-- (pins take EXCLUSIVE), so nothing showed it either
-- (TestHostile8ForgedWriteInProgress). Every writer takes the gate in
-- ROW SHARE mode (begin_write, begin_write_occ, fix_write); a role that
-- takes that mode too holds off every gated pin, the documented stall that
-- idle_in_transaction_session_timeout bounds (README, Security). A
-- transaction that pinned with the gate (EXCLUSIVE) and then writes in a
-- block has not chosen its T until its COMMIT's ROW SHARE, and no longer
-- counts before it, as the header of rw_check.sql says it should.
DO $edit$
DECLARE
    old text := $$WHERE g.relation = '@SCHEMA@.gate'::regclass AND g.virtualtransaction = l.virtualtransaction$$;
    def text := pg_get_functiondef('@SCHEMA@.check_reads(bigint, bigint)'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'rw_check_gate.sql: the edit of check_reads does not apply once';
    END IF;
    EXECUTE replace(def, old, $$WHERE g.mode = 'RowShareLock' AND g.relation = '@SCHEMA@.gate'::regclass$$
                           || $$ AND g.virtualtransaction = l.virtualtransaction$$);
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (20);
