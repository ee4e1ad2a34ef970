-- mzproxy backend state, version 33 to 34: a transaction block's COMMIT
-- finds the versions it wrote through the index again (issue 14).
--
-- A block stamps its history with the placeholder p = -(xid); its COMMIT
-- restamps with T the versions it closed (mz_to = p) and those it wrote
-- (mz_from = p), in one UPDATE per table (<history>_restamp, block_cost.sql).
-- Version 13 (ddl_trim.sql) made history tables with one index,
-- (mz_to, mz_from), and so looked for the written versions among the
-- current ones: mz_to = Infinity AND mz_from = p. Version 17 (rw_check.sql)
-- defined gen_restamp again from version 11's text, and with it the old
-- condition, mz_from = p alone: no index leads with mz_from, so every
-- COMMIT of a block since then read the whole (mz_to, mz_from) index of
-- every table it wrote, once per table, at the end of the transaction,
-- holding its row locks (pgbench_accounts at scale 1: 84 index pages per
-- COMMIT; scale 10, ten times that). docs/write-cost.md has the figures.
--
-- A version the block wrote is current until the block closes it again,
-- and then the trigger deletes it (written and retracted at the same
-- time); no other transaction can close it before the block commits. So
-- mz_from = p means mz_to = Infinity, and the two conditions find the same
-- rows. (Were one left with mz_to = p, the first arm finds it.)
--
-- Now the text of a table's two restamp functions is made in one place,
-- restamp_functions(history), which gen_restamp runs for a new table and
-- this upgrade runs for every table that has them. A table made before
-- version 13 has an index on mz_to and a partial one on mz_from < 0: its
-- second arm takes the partial index (the "< 0" stays for it, and for the
-- generic plan's estimate).

-- The CREATE statements of history table h's _closed and _restamp (see
-- block_cost.sql); OR REPLACE, so an upgrade can run them again.
CREATE FUNCTION @SCHEMA@.restamp_functions(h text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $gen$
SELECT format($f$
CREATE OR REPLACE FUNCTION %1$s_closed(p bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN (SELECT max(h.mz_from) FROM %1$s h WHERE h.mz_to = p AND h.mz_to < 0); END $$;
CREATE OR REPLACE FUNCTION %1$s_restamp(p bigint, t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- One statement (two index conditions OR-ed): the versions the block
    -- closed, and those it wrote, which are current (one it closed again
    -- was deleted by the trigger). restamp.sql says why mz_to is named.
    UPDATE %1$s h SET mz_to = CASE WHEN h.mz_to = p THEN t ELSE h.mz_to END,
                      mz_from = CASE WHEN h.mz_from = p THEN t ELSE h.mz_from END
     WHERE (h.mz_to = p AND h.mz_to < 0)
        OR (h.mz_to = 9223372036854775807 AND h.mz_from = p AND h.mz_from < 0);
END
$$;
REVOKE ALL ON FUNCTION %1$s_closed(bigint), %1$s_restamp(bigint, bigint) FROM PUBLIC;$f$, h)
$gen$;
REVOKE ALL ON FUNCTION @SCHEMA@.restamp_functions(text) FROM PUBLIC;

-- gen_restamp as rw_check.sql made it, the text from restamp_functions.
CREATE OR REPLACE FUNCTION @SCHEMA@.gen_restamp(p_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET check_function_bodies = off
AS $gen$
DECLARE
    h text := (SELECT k.history FROM @SCHEMA@.catalog k WHERE k.id = p_id);
BEGIN
    PERFORM @SCHEMA@.make_marker((SELECT k.oid FROM @SCHEMA@.catalog k WHERE k.id = p_id AND k.kind = 'table'));
    IF h IS NULL OR to_regprocedure(h || '_restamp(bigint, bigint)') IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE @SCHEMA@.restamp_functions(h);
END
$gen$;

-- Every table's functions made again (dropped tables' too, while their
-- history is kept: a block may still restamp one it wrote before the
-- DROP). Tables without them keep restamp_dynamic.
DO $regen$
DECLARE
    h text;
BEGIN
    FOR h IN SELECT k.history FROM @SCHEMA@.catalog k
              WHERE k.history IS NOT NULL AND to_regprocedure(k.history || '_restamp(bigint, bigint)') IS NOT NULL
              ORDER BY k.id LOOP
        EXECUTE @SCHEMA@.restamp_functions(h);
    END LOOP;
END
$regen$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (34);
