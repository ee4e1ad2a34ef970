-- mzproxy backend state, version 22 to 23: a transaction block's deferred
-- slot lives in its row of deferred_slots, not in settings the client can
-- reset (issues 14, 10).
--
-- Two transaction-local settings carried a block's slot: mzproxy.write_ts
-- ('-1 <incarnation> <tag>') and mzproxy.read_writes ('<writes> <tag>', the
-- writes counted at the pin of a block that read before it wrote). A tag
-- cannot be forged, but a setting can be taken away, and both were read
-- as if a missing one had never been set:
--
--  * RESET mzproxy.read_writes (or SET LOCAL ... = '') after the block's
--    first write made fix_write skip check_reads: a write skew committed.
--  * RESET ALL (or RESET mzproxy.write_ts) in a block that wrote failed its
--    COMMIT with 42501, where PostgreSQL commits, and its later writes
--    with MZ002.
--
-- Now the block's row of deferred_slots holds what the settings held:
-- open_write_deferred records p_read_writes there (read_writes), and
-- fix_write reads it from there and records the T it chooses (fixed_t);
-- the row goes at COMMIT (fix_at_commit). Only the schema's SECURITY
-- DEFINER functions write that table (no role has a right on it), and the
-- row's key is the transaction's id (an xid8, never reused); so a row says
-- exactly "mzproxy's open_write_deferred took a deferred slot in this
-- transaction, for this incarnation, after reads pinned when this many
-- writes were counted; fix_write chose this T, or none yet". Hence:
--
--  * The check's input is the row's: no setting skips or changes it.
--    open_write_deferred called again (any role may call it) keeps the
--    smaller count (LEAST ignores NULL): a second call can only make the
--    check stricter, never remove it.
--  * An empty mzproxy.write_ts with the row present is the row's slot
--    (write_slot gives -1 and the incarnation, or fixed_t; stamp_ts the
--    placeholder, or fixed_t; fix_write accepts it): RESET ALL, RESET
--    mzproxy.write_ts and SET LOCAL mzproxy.write_ts = '' change nothing,
--    before or after T is chosen. A value that is not empty must still be
--    one mzproxy made (42501 otherwise), as before.
--  * What the setting protects is unchanged: the slot's T is chosen by
--    fix_write alone (a placeholder is all a block writes before it), and
--    without a row an empty setting is no slot (MZ002 at a write). A role
--    that calls open_write_deferred directly gets what it got before: a
--    deferred slot checked for its incarnation, T chosen by the oracle.
--
-- Cost: the autocommit write's functions take no new step (stamp_ts tests
-- its '0 - ' slot first, as before; begin_write_occ is unchanged).
-- write_slot reads the row only when the setting is empty and the
-- transaction has an xid (a block's read after a write, pin()). A block's
-- COMMIT runs the same statements (fix_at_commit reads the row, fix_write
-- deletes it); one that chose T early (DDL, a read of its own writes)
-- updates the row then and deletes it at COMMIT.
--
-- Not covered: an autocommit slot (begin_write_occ) is the setting alone;
-- mzproxy takes a deferred slot for a query string with RESET ALL among
-- its writes instead (proxy/relay.go). RESET mzproxy.write_ts between two
-- writes of one autocommit query string still fails the second (MZ002).

-- Taken first, as block_cost.sql did: the upgrade waits for the blocks in
-- progress, and blocks that start meanwhile wait for it.
ALTER TABLE @SCHEMA@.deferred_slots ADD COLUMN read_writes bigint, ADD COLUMN fixed_t bigint;

-- The slot set_slot or open_write_deferred recorded in this transaction
-- (see trust.sql); both NULL when there is none. With the setting empty, a
-- deferred slot is its transaction's row (see the header).
CREATE OR REPLACE FUNCTION @SCHEMA@.write_slot(OUT t bigint, OUT e bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    vt text;
    ve text;
    my_xid bigint;
BEGIN
    IF v IS NULL OR v = '' THEN
        -- No xid, no row: a transaction that has not written pays nothing.
        my_xid := pg_current_xact_id_if_assigned()::text::bigint;
        IF my_xid IS NOT NULL THEN
            -- (set_slot(T, NULL) once fix_write chose T.)
            SELECT coalesce(d.fixed_t, -1), CASE WHEN d.fixed_t IS NULL THEN d.inc END INTO t, e
              FROM @SCHEMA@.deferred_slots d WHERE d.xid = my_xid;
        END IF;
        RETURN;
    END IF;
    -- split_part, not a regular expression: this runs for every write
    -- statement, and a capturing match costs a fifth of a millisecond. A
    -- matching tag proves set_slot wrote both numbers.
    vt := split_part(v, ' ', 1);
    ve := split_part(v, ' ', 2);
    IF split_part(v, ' ', 3) IS DISTINCT FROM @SCHEMA@.tag(vt || ' ' || ve) OR split_part(v, ' ', 4) <> '' THEN
        RAISE EXCEPTION 'mzproxy.write_ts was not set by mzproxy'
            USING ERRCODE = '42501',
                  DETAIL = 'A write''s timestamp is chosen by mzproxy''s oracle for that write alone.',
                  HINT = 'RESET mzproxy.write_ts, and write through mzproxy.';
    END IF;
    t := vt::bigint;
    e := nullif(ve, '-')::bigint;
END
$$;

-- A transaction block's write slot (see frontier.sql and block_cost.sql):
-- the setting (unless the slot is already there, the row standing for an
-- empty setting) and the transaction's row, which records p_read_writes
-- for fix_write's check.
CREATE OR REPLACE FUNCTION @SCHEMA@.open_write_deferred(p_inc bigint, p_read_writes bigint DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    slot text := '-1 ' || coalesce(p_inc::text, '-');
    cur bigint := (SELECT s.t FROM @SCHEMA@.write_slot() s);
BEGIN
    IF cur >= 0 THEN
        -- A slot whose T is chosen or pending (fix_write ran, or a
        -- begin_write): nothing is left to check against a pin.
        RETURN 0;
    END IF;
    IF cur IS NULL THEN
        -- Fenced now or at fix_write, which checks again with the gate held.
        PERFORM @SCHEMA@.check_incarnation(p_inc);
        PERFORM set_config('mzproxy.write_ts', slot || ' ' || @SCHEMA@.key_tag(k.k, slot), true) FROM @SCHEMA@.write_key k;
    END IF;
    -- A READ ONLY transaction writes no history (PostgreSQL refuses its
    -- writes), and could not record itself either.
    IF current_setting('transaction_read_only') = 'off' THEN
        -- A second call keeps the stricter check (see the header).
        INSERT INTO @SCHEMA@.deferred_slots AS d (xid, inc, read_writes)
            VALUES (pg_current_xact_id()::text::bigint, p_inc, p_read_writes)
            ON CONFLICT (xid) DO UPDATE SET read_writes = LEAST(d.read_writes, excluded.read_writes);
    END IF;
    RETURN 0;
END
$$;

-- The timestamp a history trigger of table p_rel stamps (see rw_check.sql,
-- which this follows but for the deferred slot's row standing for an empty
-- setting).
CREATE OR REPLACE FUNCTION @SCHEMA@.stamp_ts(p_rel oid) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    t bigint;
    slot text;
    my_xid bigint;
    rels oid[];
BEGIN
    IF left(v, 4) = '0 - ' THEN
        -- The pending slot begin_write_occ made in this transaction: T and
        -- its tag set, and the table marked, in the same query. P is read
        -- as pinned_ts reads it; after a crash (the sequence not yet
        -- called) pinned_ts gives its floor.
        SELECT x.t, set_config('mzproxy.write_ts', x.t::text || ' - ' || @SCHEMA@.key_tag(x.k, x.t::text || ' -'), true)
          INTO t, slot
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       setval(to_regclass('@SCHEMA@.w' || p_rel), pg_sequence_last_value('@SCHEMA@.writes'))
                  FROM @SCHEMA@.write_key k
                 WHERE v = '0 - ' || @SCHEMA@.key_tag(k.k, '0 -')
                OFFSET 0) x;
        IF t IS NOT NULL THEN
            RETURN t;
        END IF;
    END IF;
    IF v IS NULL OR v = '' OR left(v, 3) = '-1 ' THEN
        -- Only open_write_deferred makes the row: the setting needs no
        -- check here (fix_write checks it once), and an empty one is the
        -- row's slot (see the header).
        my_xid := pg_current_xact_id_if_assigned()::text::bigint;
        SELECT d.rels, d.fixed_t INTO rels, t FROM @SCHEMA@.deferred_slots d WHERE d.xid = my_xid;
        IF FOUND AND t IS NULL THEN
            IF NOT p_rel = ANY (rels) THEN
                UPDATE @SCHEMA@.deferred_slots d SET rels = d.rels || p_rel WHERE d.xid = my_xid;
            END IF;
            RETURN -my_xid;
        END IF;
        IF NOT FOUND AND (v IS NULL OR v = '') THEN
            RETURN NULL;
        END IF;
        -- Found with T chosen (fix_write): the row's T, below.
    END IF;
    IF t IS NULL THEN
        t := (SELECT s.t FROM @SCHEMA@.write_slot() s);
    END IF;
    IF t = -1 THEN
        -- A deferred slot without a row: taken in a READ ONLY transaction,
        -- which writes no history. Nothing could restamp a placeholder.
        RAISE EXCEPTION 'mzproxy: deferred write slot of a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF t IS NOT NULL THEN
        PERFORM @SCHEMA@.mark_written(ARRAY[p_rel]);
    END IF;
    IF t = 0 THEN
        RETURN @SCHEMA@.choose_ts();
    END IF;
    -- T was chosen before this statement locked p_rel (a later statement,
    -- a block's T fixed early): after the marker, the check mark (see
    -- rw_check.sql). A transaction that read p_rel and was checked at a
    -- later T did not see this write.
    IF t > 0 AND coalesce(pg_sequence_last_value(to_regclass('@SCHEMA@.c' || p_rel)), 0) > t THEN
        PERFORM @SCHEMA@.raise_read_later(p_rel, t);
    END IF;
    RETURN t;
END
$$;

-- Make a deferred slot an ordinary one (see rw_check.sql): as before, but
-- the check's count comes from the transaction's row, an empty setting is
-- the row's slot, and before COMMIT the row is kept with T (fixed_t) for
-- the block's later writes and reads (see the header). At COMMIT
-- (p_at_commit, fix_at_commit) the row goes. Returns T.
DROP FUNCTION @SCHEMA@.fix_write();
CREATE FUNCTION @SCHEMA@.fix_write(p_at_commit bool DEFAULT false) RETURNS bigint
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
    SELECT array_agg(k.history), bool_and(to_regprocedure(k.history || '_restamp(bigint, bigint)') IS NOT NULL)
      INTO hist, static FROM @SCHEMA@.catalog k WHERE k.oid = ANY (coalesce(rels, '{}'));
    IF hist IS NULL THEN
        NULL;
    ELSIF static THEN
        -- One statement for all tables, one more to restamp them all.
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

-- At COMMIT (see frontier.sql): the slot fixed unless fix_write did so
-- before; the row goes either way.
CREATE OR REPLACE FUNCTION @SCHEMA@.fix_at_commit() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fixed bigint;
BEGIN
    SELECT d.fixed_t INTO fixed FROM @SCHEMA@.deferred_slots d WHERE d.xid = NEW.xid;
    IF NOT FOUND THEN
        -- Taken out (a savepoint rolled back, or a second event).
        RETURN NULL;
    END IF;
    IF fixed IS NULL THEN
        PERFORM @SCHEMA@.fix_write(true);
    ELSE
        DELETE FROM @SCHEMA@.deferred_slots d WHERE d.xid = NEW.xid;
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.fix_write(bool) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (23);
