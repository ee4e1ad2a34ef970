-- mzproxy backend state, version 34 to 35: a transaction block's writes
-- and COMMIT, cheaper for the backend (issue 14). docs/write-cost.md has
-- the method and the figures.
--
--  * A history trigger in a block (a deferred slot, placeholder p =
--    -(xid)) records its table in the block's row of deferred_slots
--    itself, instead of through a nested stamp_ts call that read the row
--    and then updated it: one UPDATE that matches only at the table's
--    first write in the block (the row not fixed, the table not yet in
--    rels), returning p; at a later write one SELECT of the row. Anything
--    else (no row, T fixed, the setting taken away) takes stamp_ts as
--    before, so its refusals (MZ002, 42501, 25006) are unchanged.
--  * At the table's first write in the block no version of the table is
--    at p yet, so every current version of an old row's key is the one
--    that row replaces: the UPDATE and DELETE triggers of a table with a
--    non-deferrable primary key take the path of a trigger that chose T
--    itself (by key alone, two plain statements and their row counts for
--    an UPDATE; write_lean.sql, hist_write.sql), not the whole-row text
--    comparison and the search for a version at p. That path's close took
--    versions written before T; with a placeholder it takes the key's
--    current version, whatever its time (every other one is positive). A
--    later write of the table in the block keeps the general path.
--  * COMMIT: fix_at_commit no longer reads the row before fix_write
--    deletes it; fix_write checks the incarnation, counts the write,
--    chooses T and makes the restamp statements' text in one query, and
--    sets the tables' markers in the query that sets T's tag (no nested
--    check_incarnation or mark_written call, no format() statement per
--    restamp).
--  * open_write_deferred, a block's first statement, has no xid and no
--    setting yet: it calls neither write_slot nor check_incarnation then.

-- Edits to gen_triggers as version 31 left it; each must apply exactly
-- once.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- The block's placeholder, and its table recorded, inline.
        [$$
    _t := mzproxy.stamp_ts(TG_RELID);
    IF _t IS NULL THEN
        RAISE EXCEPTION 'cannot write to managed table$$, $$
    IF left(current_setting('mzproxy.write_ts', true), 3) = '-1 ' THEN
        UPDATE mzproxy.deferred_slots d SET rels = d.rels || TG_RELID
         WHERE d.xid = pg_current_xact_id_if_assigned()::text::bigint AND d.fixed_t IS NULL
           AND NOT TG_RELID = ANY (d.rels)
        RETURNING -d.xid INTO _t;
        _fresh := _t IS NOT NULL;
        IF NOT _fresh THEN
            SELECT -d.xid INTO _t FROM mzproxy.deferred_slots d
             WHERE d.xid = pg_current_xact_id_if_assigned()::text::bigint AND d.fixed_t IS NULL;
        END IF;
    END IF;
    IF _t IS NULL THEN
        _t := mzproxy.stamp_ts(TG_RELID);
    END IF;
    IF _t IS NULL THEN
        RAISE EXCEPTION 'cannot write to managed table$$],
        -- _fresh, which that sets, declared by the INSERT and TRUNCATE
        -- triggers too.
        [$$E'\nDECLARE _t bigint;%s\nBEGIN%s%s\n$$, $$E'\nDECLARE _t bigint; _fresh bool;%s\nBEGIN%s%s\n$$],
        [$$
DECLARE _t bigint;
BEGIN%s
    _t := mzproxy.truncate_ts(_t, TG_RELID);$$, $$
DECLARE _t bigint; _fresh bool;
BEGIN%s
    _t := mzproxy.truncate_ts(_t, TG_RELID);$$],
        -- A placeholder is below every version: the close takes the
        -- key's current one.
        [$$
     WHERE %2$s h.mz_to = 9223372036854775807 AND h.mz_from < _t;$$, $$
     WHERE %2$s h.mz_to = 9223372036854775807 AND (h.mz_from < _t OR _t < 0);$$]
    ];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'storage version 35: edit % of gen_triggers does not apply once', i;
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

-- The row is deleted, and T chosen, by fix_write alone; a row fixed
-- before COMMIT needs nothing more (fix_write returns its T).
CREATE OR REPLACE FUNCTION @SCHEMA@.fix_at_commit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @SCHEMA@.fix_write(true);
    RETURN NULL;
END
$$;

-- As restamp.sql made it, with fewer statements (see the header).
CREATE OR REPLACE FUNCTION @SCHEMA@.fix_write(p_at_commit bool DEFAULT false) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    my_xid bigint := pg_current_xact_id()::text::bigint;
    p bigint := -my_xid;
    v text := current_setting('mzproxy.write_ts', true);
    slot_ok bool;
    slot_inc bigint;
    may_write bool;
    rels oid[];
    hist text[];
    closed_sql text;
    restamp_sql text;
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
           c.hist, c.closed_sql, c.restamp_sql, c.static
      INTO may_write, t, counted, hist, closed_sql, restamp_sql, static
      FROM @SCHEMA@.pinned s,
           (SELECT array_agg(k.history) AS hist,
                   string_agg(k.history || '_closed($1)', ', ') AS closed_sql,
                   string_agg(k.history || '_restamp($1, $2)', ', ') AS restamp_sql,
                   bool_and(to_regproc(k.history || '_restamp') IS NOT NULL) AS static
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
        -- One statement for all tables, one more to restamp them all.
        -- (Measured: one statement with the first as its subquery costs
        -- as much to plan as the two, docs/write-cost.md.)
        EXECUTE 'SELECT GREATEST(' || closed_sql || ')' INTO closed USING p;
        t := GREATEST(t, closed);
        EXECUTE 'SELECT ' || restamp_sql USING p, t;
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
    PERFORM set_config('mzproxy.write_ts', t::text || ' - ' || @SCHEMA@.key_tag(k.k, t::text || ' -'), true),
            (SELECT count(setval(to_regclass('@SCHEMA@.w' || r), pg_sequence_last_value('@SCHEMA@.writes')))
               FROM unnest(rels) r)
       FROM @SCHEMA@.write_key k;
    RETURN t;
END
$$;

-- As slot_state.sql made it; a block's first statement (no xid, no
-- setting) has no slot to look up, and the incarnation is checked inline.
CREATE OR REPLACE FUNCTION @SCHEMA@.open_write_deferred(p_inc bigint, p_read_writes bigint DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    slot text := '-1 ' || coalesce(p_inc::text, '-');
    cur bigint;
BEGIN
    IF coalesce(current_setting('mzproxy.write_ts', true), '') <> '' OR pg_current_xact_id_if_assigned() IS NOT NULL THEN
        cur := (SELECT s.t FROM @SCHEMA@.write_slot() s);
    END IF;
    IF cur >= 0 THEN
        -- A slot whose T is chosen or pending (fix_write ran, or a
        -- begin_write): nothing is left to check against a pin.
        RETURN 0;
    END IF;
    IF cur IS NULL THEN
        -- Fenced now or at fix_write, which checks again with the gate
        -- held (check_incarnation's condition).
        IF p_inc IS NOT NULL AND NOT coalesce((
                SELECT i.retired_at IS NULL
                       AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                  FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false) THEN
            PERFORM @SCHEMA@.raise_fenced(p_inc);
        END IF;
        PERFORM set_config('mzproxy.write_ts', slot || ' ' || @SCHEMA@.key_tag(k.k, slot), true) FROM @SCHEMA@.write_key k;
    END IF;
    -- A READ ONLY transaction writes no history (PostgreSQL refuses its
    -- writes), and could not record itself either.
    IF current_setting('transaction_read_only') = 'off' THEN
        -- A second call keeps the stricter check (see block_cost.sql).
        INSERT INTO @SCHEMA@.deferred_slots AS d (xid, inc, read_writes)
            VALUES (pg_current_xact_id()::text::bigint, p_inc, p_read_writes)
            ON CONFLICT (xid) DO UPDATE SET read_writes = LEAST(d.read_writes, excluded.read_writes);
    END IF;
    RETURN 0;
END
$$;

-- The trigger functions of every managed table made again (the triggers,
-- which name them by oid, stay), as mzproxy's own DDL, through
-- sync_triggers: gen_triggers' text changed, so every kept signature is
-- stale, and sync_triggers records the new one.
DO $regen$
DECLARE
    k record;
BEGIN
    PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
    FOR k IN SELECT c.id FROM @SCHEMA@.catalog c
              WHERE c.kind = 'table' AND c.dropped_ts IS NULL AND to_regclass(c.history) IS NOT NULL
                AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = c.oid) LOOP
        PERFORM @SCHEMA@.sync_triggers(k.id);
    END LOOP;
    PERFORM set_config('mzproxy.in_ddl', '', true);
END
$regen$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (35);
