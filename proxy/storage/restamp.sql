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
-- Also, fix_write checks that a table has its restamp functions by name.
--
-- Now the text of a table's two restamp functions is made in one place,
-- restamp_functions(history), which gen_restamp runs for a new table and
-- this upgrade runs for every table that has them. The condition is
-- version 13's, which it gave tables made before it too (an index on
-- mz_to and a partial one on mz_from < 0, which the "< 0" keeps usable;
-- it also keeps the generic plan's estimate small).

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

-- fix_write as slot_state.sql made it, but the check that each table has
-- its restamp functions is by name (to_regproc), not by signature
-- (to_regprocedure parses the argument types: 25k instructions per COMMIT
-- of a TPC-B block).
CREATE OR REPLACE FUNCTION @SCHEMA@.fix_write(p_at_commit bool DEFAULT false) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    my_xid bigint := pg_current_xact_id()::text::bigint;
    p bigint := -my_xid;
    v text := current_setting('mzproxy.write_ts', true);
    slot_ok bool;
    slot_inc bigint;
    rels oid[];
    hist text[];
    static bool;
    closed bigint;
    counted bigint;
    read_writes bigint;
    fixed bigint;
    checked_at bigint;
    t bigint;
BEGIN
    -- The transaction's row (taken out at COMMIT), and the slot checked
    -- against the one open_write_deferred made with it, in one query.
    WITH gone AS (DELETE FROM @SCHEMA@.deferred_slots d WHERE d.xid = my_xid AND p_at_commit RETURNING d.*),
         d AS (SELECT * FROM gone
               UNION ALL SELECT * FROM @SCHEMA@.deferred_slots x WHERE x.xid = my_xid AND NOT p_at_commit)
    SELECT d.rels, d.inc, d.read_writes, d.fixed_t, v IS NULL OR v = '' OR v =
               '-1 ' || coalesce(d.inc::text, '-') || ' ' || @SCHEMA@.key_tag(k.k, '-1 ' || coalesce(d.inc::text, '-'))
      INTO rels, slot_inc, read_writes, fixed, slot_ok FROM d, @SCHEMA@.write_key k;
    IF NOT FOUND THEN
        -- No row: the slot of a READ ONLY transaction, which wrote nothing.
        SELECT s.t, s.e INTO t, slot_inc FROM @SCHEMA@.write_slot() s;
        slot_ok := t = -1;
    END IF;
    IF slot_ok IS NOT TRUE THEN
        -- The setting was replaced.
        RAISE EXCEPTION 'mzproxy.write_ts was not set by mzproxy'
            USING ERRCODE = '42501',
                  DETAIL = 'A write''s timestamp is chosen by mzproxy''s oracle for that write alone.';
    END IF;
    IF fixed IS NOT NULL THEN
        -- T was chosen before, and the deferred slot's setting put back
        -- since: T again.
        PERFORM set_config('mzproxy.write_ts', fixed::text || ' - ' || @SCHEMA@.key_tag(k.k, fixed::text || ' -'), true)
           FROM @SCHEMA@.write_key k;
        RETURN fixed;
    END IF;
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    PERFORM @SCHEMA@.check_incarnation(slot_inc);
    -- The write counted and T chosen in one query; P read as pinned_ts
    -- reads it (after a crash, its floor). With the gate held no pin runs
    -- in between, so the order of the two does not matter.
    SELECT GREATEST(@SCHEMA@.now_ms(), CASE WHEN s.is_called THEN s.last_value ELSE @SCHEMA@.pinned_ts() END + 1),
           nextval('@SCHEMA@.writes')
      INTO t, counted FROM @SCHEMA@.pinned s;
    -- After T is chosen, before the restamp and before this transaction
    -- marks its own tables.
    IF read_writes IS NOT NULL THEN
        checked_at := t;
        PERFORM @SCHEMA@.check_reads(read_writes, checked_at);
    END IF;
    -- (to_regproc: a name, no argument types to parse.)
    SELECT array_agg(k.history), bool_and(to_regproc(k.history || '_restamp') IS NOT NULL)
      INTO hist, static FROM @SCHEMA@.catalog k WHERE k.oid = ANY (coalesce(rels, '{}'));
    IF hist IS NULL THEN
        NULL;
    ELSIF static THEN
        -- One statement for all tables, one more to restamp them all.
        -- (Measured: one statement with the first as its subquery costs
        -- as much to plan as the two, docs/write-cost.md.)
        EXECUTE format('SELECT GREATEST(%s)', (SELECT string_agg(x || '_closed($1)', ', ') FROM unnest(hist) x))
           INTO closed USING p;
        t := GREATEST(t, closed);
        EXECUTE format('SELECT %s', (SELECT string_agg(x || '_restamp($1, $2)', ', ') FROM unnest(hist) x)) USING p, t;
    ELSE
        t := @SCHEMA@.restamp_dynamic(hist, p, t);
    END IF;
    -- The restamp raised T (it replaced a version written above the T
    -- chosen): the check marks must carry the final T, so check again.
    IF t > checked_at THEN
        PERFORM @SCHEMA@.check_reads(read_writes, t);
    END IF;
    PERFORM @SCHEMA@.mark_written(rels);
    IF NOT p_at_commit THEN
        UPDATE @SCHEMA@.deferred_slots d SET fixed_t = t WHERE d.xid = my_xid;
    END IF;
    -- set_slot(t, NULL), inline.
    PERFORM set_config('mzproxy.write_ts', t::text || ' - ' || @SCHEMA@.key_tag(k.k, t::text || ' -'), true)
       FROM @SCHEMA@.write_key k;
    RETURN t;
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (34);
