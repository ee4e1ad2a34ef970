-- mzproxy backend state, version 48 to 49 (session 21, tpcb): a block's
-- COMMIT restamps each table it wrote with one call that also returns
-- what _closed returned (issue 14). docs/write-cost.md has the figures.
--
-- At a block's COMMIT fix_write chose T, then ran two statements over
-- the tables the block wrote: GREATEST(h<id>_closed(p), ...), the newest
-- start of a version the block closed (its placeholder p in mz_to), to
-- raise T above it, and h<id>_restamp(p, T) of each table. Since version
-- 37 (hist_plans.sql) both run with plan_cache_mode =
-- force_custom_plan, so both are planned at every call: _closed's
-- max() (an aggregate the planner also tries as an index scan with a
-- LIMIT) cost a TPC-B block 1.1M of its 4.2M backend instructions.
--
-- Now each table has h<id>_fix(p, T): _restamp's one UPDATE, which
-- returns the newest mz_from among the versions it closed (a closed
-- version keeps its mz_from, so RETURNING gives it), with _restamp's
-- settings. fix_write runs GREATEST(h<id>_fix(p, T), ...) once. When
-- that is above T (under a clock that does not step back it never is:
-- the closed versions were committed before T was chosen, at T or below;
-- TestBlockRestampRaisedOnce writes one by hand), restamp_raise moves
-- the block's versions from T to it: the versions closed at T and the
-- current ones at T that this transaction's restamp wrote, found by the
-- xmin of the version closed below its own start (only this
-- transaction's restamp makes one, and it is not committed). T, its tag,
-- the check of the block's reads and the tables' markers are as before.
--
-- Replaced: fix_write, restamp_functions (also makes _fix), gen_restamp
-- (a table without _fix gets its functions made); new: restamp_raise and
-- every static table's _fix. _closed and _restamp stay (no caller in
-- this version). It depends only on version 46's objects (nothing after
-- 37 replaced restamp_functions or gen_restamp, nor after 35 fix_write).

-- As hist_plans.sql made it, and _fix.
CREATE OR REPLACE FUNCTION @SCHEMA@.restamp_functions(h text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $fn$
SELECT format($f$
CREATE OR REPLACE FUNCTION %1$s_closed(p bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_custom_plan
AS $$ BEGIN RETURN (SELECT max(h.mz_from) FROM %1$s h WHERE h.mz_to = p AND h.mz_to < 0); END $$;
CREATE OR REPLACE FUNCTION %1$s_restamp(p bigint, t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_custom_plan
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
CREATE OR REPLACE FUNCTION %1$s_fix(p bigint, t bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    closed bigint;
    f bigint;
BEGIN
    -- _restamp's UPDATE, returning the newest start of a version the
    -- block closed (now ending at t; a version it wrote is current).
    FOR f IN UPDATE %1$s h SET mz_to = CASE WHEN h.mz_to = p THEN t ELSE h.mz_to END,
                               mz_from = CASE WHEN h.mz_from = p THEN t ELSE h.mz_from END
              WHERE (h.mz_to = p AND h.mz_to < 0)
                 OR (h.mz_to = 9223372036854775807 AND h.mz_from = p AND h.mz_from < 0)
             RETURNING CASE WHEN h.mz_to < 9223372036854775807 THEN h.mz_from END LOOP
        closed := GREATEST(closed, f);
    END LOOP;
    RETURN closed;
END
$$;
REVOKE ALL ON FUNCTION %1$s_closed(bigint), %1$s_restamp(bigint, bigint), %1$s_fix(bigint, bigint) FROM PUBLIC;$f$, h)
$fn$;
REVOKE ALL ON FUNCTION @SCHEMA@.restamp_functions(text) FROM PUBLIC;

-- As restamp.sql made it; a table whose functions predate _fix gets
-- them made again.
CREATE OR REPLACE FUNCTION @SCHEMA@.gen_restamp(p_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET check_function_bodies = off
    SET quote_all_identifiers = off
AS $gen$
DECLARE
    h text := (SELECT k.history FROM @SCHEMA@.catalog k WHERE k.id = p_id);
BEGIN
    PERFORM @SCHEMA@.make_marker((SELECT k.oid FROM @SCHEMA@.catalog k WHERE k.id = p_id AND k.kind = 'table'));
    IF h IS NULL OR to_regprocedure(h || '_fix(bigint, bigint)') IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE @SCHEMA@.restamp_functions(h);
END
$gen$;

-- The rare case of fix_write: a version the block closed starts at
-- p_new, above the T (p_t) its restamp wrote. Every version of the
-- tables p_hist that this transaction's restamp closed at p_t or wrote
-- at p_t moves to p_new; other transactions' versions at p_t (which
-- share T) stay. The restamp's versions are told by their xmin: that of
-- a version closed at p_t below its own start, which only this
-- transaction's restamp makes (and one exists: p_new was read from it).
CREATE FUNCTION @SCHEMA@.restamp_raise(p_hist text[], p_t bigint, p_new bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET enable_seqscan = off SET jit = off
AS $fn$
DECLARE
    h text;
    x xid;
BEGIN
    FOREACH h IN ARRAY p_hist LOOP
        EXECUTE format('SELECT h.xmin FROM %s h WHERE h.mz_to = $1 AND h.mz_from > $1 LIMIT 1', h) INTO x USING p_t;
        EXIT WHEN x IS NOT NULL;
    END LOOP;
    IF x IS NULL THEN
        RAISE EXCEPTION 'mzproxy: no version closed at % above it', p_t USING ERRCODE = 'XX000';
    END IF;
    FOREACH h IN ARRAY p_hist LOOP
        EXECUTE format($u$
            UPDATE %s h SET mz_to = CASE WHEN h.mz_to = $1 THEN $2 ELSE h.mz_to END,
                            mz_from = CASE WHEN h.mz_to = 9223372036854775807 THEN $2 ELSE h.mz_from END
             WHERE (h.mz_to = $1 OR (h.mz_to = 9223372036854775807 AND h.mz_from = $1)) AND h.xmin = $3$u$, h)
          USING p_t, p_new, x;
    END LOOP;
    RETURN p_new;
END
$fn$;
REVOKE ALL ON FUNCTION @SCHEMA@.restamp_raise(text[], bigint, bigint) FROM PUBLIC;

-- Every table with restamp functions gets _fix (dropped tables' too, while
-- their history is kept, as restamp.sql did). Tables without them keep
-- restamp_dynamic.
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

-- fix_write as block_lean.sql made it, the restamp by _fix (above).
CREATE OR REPLACE FUNCTION @SCHEMA@.fix_write(p_at_commit boolean DEFAULT false) RETURNS bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    my_xid bigint := pg_current_xact_id()::text::bigint;
    p bigint := -my_xid;
    v text := current_setting('@SCHEMA@.write_ts', true);
    slot_ok bool;
    slot_inc bigint;
    may_write bool;
    rels oid[];
    hist text[];
    fix_sql text;
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
        IF p_at_commit THEN
            -- Taken out (a savepoint rolled back, or a second event).
            RETURN NULL;
        END IF;
        -- No row: the slot of a READ ONLY transaction, which wrote nothing.
        SELECT s.t, s.e INTO t, slot_inc FROM @SCHEMA@.write_slot() s;
        slot_ok := t = -1;
    ELSIF p_at_commit AND fixed IS NOT NULL THEN
        -- T was chosen before COMMIT, and the row kept with it till now.
        RETURN fixed;
    END IF;
    IF slot_ok IS NOT TRUE THEN
        -- The setting was replaced.
        RAISE EXCEPTION '@SCHEMA@.write_ts was not set by mzproxy'
            USING ERRCODE = '42501',
                  DETAIL = 'A write''s timestamp is chosen by mzproxy''s oracle for that write alone.';
    END IF;
    IF fixed IS NOT NULL THEN
        -- T was chosen before, and the deferred slot's setting put back
        -- since: T again.
        PERFORM set_config('@SCHEMA@.write_ts', fixed::text || ' - ' || @SCHEMA@.key_tag(k.k, fixed::text || ' -'), true)
           FROM @SCHEMA@.write_key k;
        RETURN fixed;
    END IF;
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    -- With the gate held: the incarnation checked (check_incarnation's
    -- condition), the write counted and T chosen, P read as pinned_ts
    -- reads it (after a crash, its floor), and the restamp statements'
    -- lists made (to_regproc: a name, no argument types to parse), in one
    -- query. No pin runs in between, so their order does not matter; the
    -- write is counted even when the check fails (the transaction fails).
    SELECT slot_inc IS NULL OR coalesce((
               SELECT i.retired_at IS NULL
                      AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                 FROM @SCHEMA@.incarnations i WHERE i.id = slot_inc), false),
           GREATEST(@SCHEMA@.now_ms(), CASE WHEN s.is_called THEN s.last_value ELSE @SCHEMA@.pinned_ts() END + 1),
           nextval('@SCHEMA@.writes'),
           c.hist, c.fix_sql, c.static
      INTO may_write, t, counted, hist, fix_sql, static
      FROM @SCHEMA@.pinned s,
           (SELECT array_agg(k.history) AS hist,
                   string_agg(k.history || '_fix($1, $2)', ', ') AS fix_sql,
                   bool_and(to_regproc(k.history || '_fix') IS NOT NULL) AS static
              FROM @SCHEMA@.catalog k WHERE k.oid = ANY (coalesce(rels, '{}'))) c;
    IF NOT may_write THEN
        PERFORM @SCHEMA@.raise_fenced(slot_inc);
    END IF;
    -- After T is chosen, before the restamp and before this transaction
    -- marks its own tables.
    IF read_writes IS NOT NULL THEN
        checked_at := t;
        PERFORM @SCHEMA@.check_reads(read_writes, checked_at);
    END IF;
    IF hist IS NULL THEN
        NULL;
    ELSIF static THEN
        -- (Version 49.) One statement restamps every table at T and
        -- returns the newest start of a version the block closed. Above
        -- T (a clock that stepped back, a T written by hand) the block's
        -- versions move on to it: T is raised as _closed raised it
        -- before, without a query per table at every COMMIT.
        EXECUTE 'SELECT GREATEST(' || fix_sql || ')' INTO closed USING p, t;
        IF closed > t THEN
            t := @SCHEMA@.restamp_raise(hist, t, closed);
        END IF;
    ELSE
        t := @SCHEMA@.restamp_dynamic(hist, p, t);
    END IF;
    -- The restamp raised T (it replaced a version written above the T
    -- chosen): the check marks must carry the final T, so check again.
    IF t > checked_at THEN
        PERFORM @SCHEMA@.check_reads(read_writes, t);
    END IF;
    IF NOT p_at_commit THEN
        UPDATE @SCHEMA@.deferred_slots d SET fixed_t = t WHERE d.xid = my_xid;
    END IF;
    -- set_slot(t, NULL) and mark_written(rels), inline, in one query.
    PERFORM set_config('@SCHEMA@.write_ts', t::text || ' - ' || @SCHEMA@.key_tag(k.k, t::text || ' -'), true),
            (SELECT count(setval(to_regclass('@SCHEMA@.w' || r), pg_sequence_last_value('@SCHEMA@.writes')))
               FROM unnest(rels) r)
       FROM @SCHEMA@.write_key k;
    RETURN t;
END
$_$;

REVOKE ALL ON FUNCTION @SCHEMA@.fix_write(boolean) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (49);
