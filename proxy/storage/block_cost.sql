-- mzproxy backend state, version 10 to 11: a transaction block's write cost
-- (issue 14).
--
-- A block's writes are stamped with the placeholder -(xid) and restamped
-- with T at COMMIT (frontier.sql). Measured with track_functions = all on
-- a TPC-B-like block (three UPDATEs by key and an INSERT, four managed
-- tables): fix_write 1.45 ms of its own per COMMIT, twelve dynamic
-- statements (parsed and planned on every call); stamp_ts 0.13 ms per
-- history write, three tags (a SHA-256 and a read of the key each) to
-- check the slot and the tagged list of written tables, and retag it.
-- Now:
--
--  * The tables a block wrote are kept in its row of deferred_slots (with
--    its incarnation), not in the tagged setting mzproxy.touched: only
--    mzproxy's functions can write that table, so nothing needs a tag, and
--    a repeat write to a table reads the row (by its key) and writes
--    nothing. A row's change inside a savepoint is undone with the
--    placeholders written there, as the setting was.
--  * stamp_ts takes the placeholder path when mzproxy.write_ts names a
--    deferred slot and the transaction has its row: no tag. A value that
--    is not a real slot still fails there (write_slot, 42501) or at
--    COMMIT, which checks the slot once: a slot taken away or forged fails
--    COMMIT with 42501, and no placeholder reaches history.
--  * Each history table gets two functions with static SQL (plans cached
--    by PL/pgSQL): <history>_closed(p), the newest version the block
--    closed, and <history>_restamp(p, t), one UPDATE. fix_write calls them, all tables
--    in one statement for each step, instead of running three dynamic
--    statements per table. gen_triggers makes them (one line); fix_write
--    falls back to the dynamic statements when a table has none.
--  * fix_write checks the slot against the row with one query (no
--    write_slot), counts the write and chooses T with one more, and tags
--    T inline (no set_slot); open_write_deferred tags its slot inline too.
--
-- Backend CPU time per block (/proc/<pid>/schedstat of the backend, 350
-- blocks, the previous version in the same run): 2.35 ms -> 1.82 ms; the
-- COMMIT 1.03 -> 0.74 ms, each UPDATE 0.28-0.30 -> 0.21-0.24 ms (and the
-- COMMIT a further 8-10% with the restamp in one UPDATE per table). What
-- remains is mostly the history triggers' own statements and the
-- restamp's row updates (two per updated row, each non-HOT).

-- Taken first: the upgrade waits here for the blocks in progress (their
-- row is locked), and blocks that start meanwhile wait for it, so none
-- straddles the two ways of recording written tables.
ALTER TABLE @SCHEMA@.deferred_slots
    ADD COLUMN inc bigint,
    ADD COLUMN rels oid[] NOT NULL DEFAULT '{}',
    ADD PRIMARY KEY (xid);

-- The restamp functions of history table p_id (see the header); made once,
-- their text depends only on the history table's name.
CREATE FUNCTION @SCHEMA@.gen_restamp(p_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $gen$
DECLARE
    h text := (SELECT k.history FROM @SCHEMA@.catalog k WHERE k.id = p_id);
BEGIN
    IF h IS NULL OR to_regprocedure(h || '_restamp(bigint, bigint)') IS NOT NULL THEN
        RETURN;
    END IF;
    -- "< 0" (placeholders are negative) makes the cached generic plans
    -- expect few rows: the index of mz_to, the partial index of pending
    -- versions. Without it the generic plan's estimate is that of a
    -- common value (most versions have mz_to Infinity): a scan of the
    -- table, or a custom plan made at every call.
    EXECUTE format($f$
CREATE FUNCTION %1$s_closed(p bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN (SELECT max(h.mz_from) FROM %1$s h WHERE h.mz_to = p AND h.mz_to < 0); END $$;
CREATE FUNCTION %1$s_restamp(p bigint, t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- One statement (the two indexes OR-ed): the versions the block closed
    -- and those it wrote. (One that is both was deleted by the trigger.)
    UPDATE %1$s h SET mz_to = CASE WHEN h.mz_to = p THEN t ELSE h.mz_to END,
                      mz_from = CASE WHEN h.mz_from = p THEN t ELSE h.mz_from END
     WHERE (h.mz_to = p AND h.mz_to < 0) OR (h.mz_from = p AND h.mz_from < 0);
END
$$;
REVOKE ALL ON FUNCTION %1$s_closed(bigint), %1$s_restamp(bigint, bigint) FROM PUBLIC;$f$, h);
END
$gen$;

-- The timestamp a history trigger of table p_rel stamps (see frontier.sql
-- and write_cost.sql). A deferred slot's placeholder needs the
-- transaction's row of deferred_slots; p_rel is added to its tables once.
CREATE OR REPLACE FUNCTION @SCHEMA@.stamp_ts(p_rel oid) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    t bigint;
    key text;
    my_xid bigint;
    rels oid[];
BEGIN
    IF v IS NULL OR v = '' THEN
        RETURN NULL;
    END IF;
    IF left(v, 4) = '0 - ' THEN
        -- P is read as pinned_ts reads it; after a crash (the sequence not
        -- yet called) pinned_ts gives its floor.
        SELECT CASE WHEN v = '0 - ' || @SCHEMA@.key_tag(k.k, '0 -') THEN
                   GREATEST(@SCHEMA@.now_ms(), CASE WHEN s.is_called THEN s.last_value ELSE @SCHEMA@.pinned_ts() END + 1)
               END AS t, k.k AS key
          INTO t, key FROM @SCHEMA@.write_key k, @SCHEMA@.pinned s;
        IF t IS NOT NULL THEN
            PERFORM set_config('mzproxy.write_ts', t::text || ' - ' || @SCHEMA@.key_tag(key, t::text || ' -'), true);
            RETURN t;
        END IF;
    END IF;
    IF left(v, 3) = '-1 ' THEN
        -- Only open_write_deferred makes the row: the setting needs no
        -- check here (fix_write checks it once).
        my_xid := pg_current_xact_id()::text::bigint;
        SELECT d.rels INTO rels FROM @SCHEMA@.deferred_slots d WHERE d.xid = my_xid;
        IF FOUND THEN
            IF NOT p_rel = ANY (rels) THEN
                UPDATE @SCHEMA@.deferred_slots d SET rels = d.rels || p_rel WHERE d.xid = my_xid;
            END IF;
            RETURN -my_xid;
        END IF;
    END IF;
    t := (SELECT s.t FROM @SCHEMA@.write_slot() s);
    IF t = -1 THEN
        -- A deferred slot without a row: taken in a READ ONLY transaction,
        -- which writes no history. Nothing could restamp a placeholder.
        RAISE EXCEPTION 'mzproxy: deferred write slot of a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF t = 0 THEN
        RETURN @SCHEMA@.choose_ts();
    END IF;
    RETURN t;
END
$$;

-- A transaction block's write slot (see frontier.sql): the slot records
-- -1 and the incarnation (as set_slot would, inline); the transaction's
-- row of deferred_slots its written tables (none yet) and the incarnation
-- again, for fix_write.
CREATE OR REPLACE FUNCTION @SCHEMA@.open_write_deferred(p_inc bigint, p_read_writes bigint DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text := p_read_writes::text;
    slot text := '-1 ' || coalesce(p_inc::text, '-');
BEGIN
    IF coalesce(current_setting('mzproxy.write_ts', true), '') <> ''
       AND (SELECT s.t FROM @SCHEMA@.write_slot() s) IS NOT NULL THEN
        RETURN 0;
    END IF;
    -- Fenced now or at fix_write, which checks again with the gate held.
    PERFORM @SCHEMA@.check_incarnation(p_inc);
    PERFORM set_config('mzproxy.write_ts', slot || ' ' || @SCHEMA@.key_tag(k.k, slot), true) FROM @SCHEMA@.write_key k;
    -- A READ ONLY transaction writes no history (PostgreSQL refuses its
    -- writes), and could not record itself either.
    IF current_setting('transaction_read_only') = 'off' THEN
        -- (Already there when the setting was taken away and the slot is
        -- taken again.)
        INSERT INTO @SCHEMA@.deferred_slots (xid, inc) VALUES (pg_current_xact_id()::text::bigint, p_inc)
            ON CONFLICT (xid) DO NOTHING;
    END IF;
    IF v IS NOT NULL THEN
        PERFORM set_config('mzproxy.read_writes', v || ' ' || @SCHEMA@.tag('read_writes ' || v), true);
    END IF;
    RETURN 0;
END
$$;

-- Make a deferred slot an ordinary one (see frontier.sql): the gate, the
-- incarnation, T, and the placeholder replaced in the tables the
-- transaction's row lists. Returns T.
CREATE OR REPLACE FUNCTION @SCHEMA@.fix_write() RETURNS bigint
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
    read_writes text;
    t bigint;
BEGIN
    -- The transaction's row, and the slot checked against the one
    -- open_write_deferred made with it, in one query.
    WITH d AS (DELETE FROM @SCHEMA@.deferred_slots d WHERE d.xid = my_xid RETURNING d.rels, d.inc)
    SELECT d.rels, d.inc, v IS NOT DISTINCT FROM
               '-1 ' || coalesce(d.inc::text, '-') || ' ' || @SCHEMA@.key_tag(k.k, '-1 ' || coalesce(d.inc::text, '-'))
      INTO rels, slot_inc, slot_ok FROM d, @SCHEMA@.write_key k;
    IF NOT FOUND THEN
        -- No row: the slot of a READ ONLY transaction, which wrote nothing.
        SELECT s.t, s.e INTO t, slot_inc FROM @SCHEMA@.write_slot() s;
        slot_ok := t = -1;
    END IF;
    IF slot_ok IS NOT TRUE THEN
        -- The setting was taken away or replaced.
        RAISE EXCEPTION 'mzproxy.write_ts was not set by mzproxy'
            USING ERRCODE = '42501',
                  DETAIL = 'A write''s timestamp is chosen by mzproxy''s oracle for that write alone.';
    END IF;
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    PERFORM @SCHEMA@.check_incarnation(slot_inc);
    read_writes := coalesce(current_setting('mzproxy.read_writes', true), '');
    IF read_writes <> '' THEN
        IF split_part(read_writes, ' ', 2) IS DISTINCT FROM @SCHEMA@.tag('read_writes ' || split_part(read_writes, ' ', 1)) THEN
            RAISE EXCEPTION 'mzproxy.read_writes was not set by mzproxy' USING ERRCODE = '42501';
        END IF;
        IF (SELECT CASE WHEN w.is_called THEN w.last_value ELSE 0 END FROM @SCHEMA@.writes w)
               <> split_part(read_writes, ' ', 1)::bigint THEN
            RAISE EXCEPTION 'could not serialize access due to concurrent update'
                USING ERRCODE = '40001',
                      DETAIL = 'mzproxy: another write committed or began since this transaction read at its timestamp.',
                      HINT = 'The transaction might succeed if retried.';
        END IF;
    END IF;
    -- The write counted and T chosen in one query; P read as pinned_ts
    -- reads it (after a crash, its floor). With the gate held no pin runs
    -- in between, so the order of the two does not matter.
    SELECT GREATEST(@SCHEMA@.now_ms(), CASE WHEN s.is_called THEN s.last_value ELSE @SCHEMA@.pinned_ts() END + 1),
           nextval('@SCHEMA@.writes')
      INTO t, counted FROM @SCHEMA@.pinned s;
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
    -- set_slot(t, NULL), inline.
    PERFORM set_config('mzproxy.write_ts', t::text || ' - ' || @SCHEMA@.key_tag(k.k, t::text || ' -'), true)
       FROM @SCHEMA@.write_key k;
    RETURN t;
END
$$;

-- fix_write's restamp as version 7 made it, three dynamic statements per
-- table: for history tables without restamp functions (made by gen_triggers
-- before it called gen_restamp). Returns T.
CREATE FUNCTION @SCHEMA@.restamp_dynamic(p_hist text[], p bigint, p_t bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    h text;
    closed bigint;
    t bigint := p_t;
BEGIN
    FOREACH h IN ARRAY p_hist LOOP
        EXECUTE format('SELECT max(mz_from) FROM %s WHERE mz_to = $1', h) INTO closed USING p;
        t := GREATEST(t, closed);
    END LOOP;
    FOREACH h IN ARRAY p_hist LOOP
        EXECUTE format('UPDATE %s SET mz_to = $2 WHERE mz_to = $1', h) USING p, t;
        EXECUTE format('UPDATE %s SET mz_from = $2 WHERE mz_from = $1', h) USING p, t;
    END LOOP;
    RETURN t;
END
$$;

-- The list of written tables is no longer a setting.
DROP FUNCTION @SCHEMA@.touched();

-- gen_triggers makes a new history table's restamp functions.
DO $hook$
DECLARE
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
    anchor text := E'    h := c.history;\n';
BEGIN
    IF (length(def) - length(replace(def, anchor, ''))) / length(anchor) <> 1 THEN
        RAISE EXCEPTION 'storage version 11: gen_triggers: its history table''s name was not found once';
    END IF;
    EXECUTE replace(def, anchor, anchor || E'    PERFORM @SCHEMA@.gen_restamp(p_id);  -- version 11\n');
END
$hook$;

-- Every history table that exists has them too.
DO $existing$
DECLARE
    k record;
BEGIN
    PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
    FOR k IN SELECT c.id FROM @SCHEMA@.catalog c
              WHERE c.kind = 'table' AND to_regclass(c.history) IS NOT NULL LOOP
        PERFORM @SCHEMA@.gen_restamp(k.id);
    END LOOP;
    PERFORM set_config('mzproxy.in_ddl', '', true);
END
$existing$;

REVOKE ALL ON FUNCTION @SCHEMA@.gen_restamp(bigint), @SCHEMA@.restamp_dynamic(text[], bigint, bigint) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (11);
