-- mzproxy backend state, version 41 to 42 (issues 14 and 16): the write
-- slot's pending state is a request, not a credential, so neither the
-- slot nor the code that chooses T computes or checks a keyed tag for it.
--
-- Until version 41 begin_write_occ locked the gate, counted the write and
-- set mzproxy.write_ts to '0 - ' || key_tag('0 -') (a SHA-256 over the
-- write key, the xid and the text); whatever chose T from it (the history
-- triggers' own query, stamp_ts, ddl_ts, current_write_ts) read the key
-- and checked that tag, then set T with a second tag. A custom setting is
-- anyone's to set, hence the tag: a pending value copied into another
-- transaction would otherwise have let a write choose T without holding
-- the gate and without being counted.
--
-- Now the pending value is the constant '0 - pending', and what a pending
-- slot guarantees is made true by the code that chooses T, in the
-- transaction that chooses it, instead of being proved by a tag:
--
--  * the gate: it locks mzproxy.gate in ROW SHARE mode first (already
--    held by a transaction whose begin_write_occ ran: the lock manager's
--    local table answers; a role that set the value itself takes it
--    here), so T is chosen with the gate held, and no pin completes
--    between T's choice and the commit;
--  * the count: nextval('mzproxy.writes') moves from the slot to the
--    choice of T (under the gate, before the commit), and the table's
--    marker takes that count, in the same query. A pin waits for the gate,
--    so it sees the count of every write that chose T before it; a
--    transaction that takes a slot and never chooses T wrote nothing and
--    is not counted. A reader pinned before the write has a count below
--    the write's, so the marker check (check_reads) still fails it;
--  * T: GREATEST(clock, P + 1), read with the gate held, tagged as before
--    (the tag of a chosen T is unchanged: it is what a role cannot forge).
--
-- So a role that sets '0 - pending' itself gets exactly what calling
-- begin_write_occ(NULL, 0) gives it (EXECUTE is PUBLIC's, as the proxy
-- calls it as the client's role): a slot, its gate held from the first
-- write on instead of from before it. Only the incarnation check is
-- skipped, which fences a proxy, not a role (a role passes NULL). Any
-- other value that starts like a pending one ('0 - ' and a made-up tag,
-- an old tag copied) still fails with 42501 where a slot is checked.
--
-- An honest write takes the gate before its statement (the slot), as
-- before: taking it only at the first write, after the statement's row
-- locks, could make a writer that waits for one of those rows and a pin
-- queued for the gate wait on each other until the deadlock detector
-- reorders the queue. A role that takes that path itself can stall
-- pins no longer than it can by locking the gate itself (UPDATE on the
-- gate is PUBLIC's, for pin_held).
--
-- Per autocommit write this saves the slot's tag and its read of
-- write_key (the slot's query has no FROM), and the trigger's check of
-- the pending tag; per DDL, the same in begin_write_occ and ddl_ts
-- (docs/write-cost.md, "Session 19").

-- The slot: the gate, the incarnation, the request. No key, no count.
CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write_occ(p_inc bigint, p_floor bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    may_write bool;
BEGIN
    IF coalesce(current_setting('mzproxy.write_ts', true), '') <> '' THEN
        RETURN @SCHEMA@.open_write(NULL, p_inc);
    END IF;
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    -- The incarnation is checked with the gate held (see open_write), by
    -- check_incarnation's condition, inline (not by a view: pg_dump's
    -- sessions may not read one). The slot is set even when the check
    -- fails: the transaction fails anyway. The write is counted when T is
    -- chosen (version 42: choose_ts, stamp_ts, ddl_ts, the triggers).
    SELECT p_inc IS NULL OR coalesce((
               SELECT i.retired_at IS NULL
                      AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                 FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false),
           set_config('mzproxy.write_ts', '0 - pending', true)
      INTO may_write;
    IF NOT may_write THEN
        PERFORM @SCHEMA@.raise_fenced(p_inc);
    END IF;
    RETURN 0;
END
$$;

-- begin_write / begin_write_at: T given is counted here, as before; T
-- pending is counted by choose_ts when current_write_ts chooses it.
CREATE OR REPLACE FUNCTION @SCHEMA@.open_write(p_ts bigint, p_inc bigint) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    cur bigint := (SELECT s.t FROM @SCHEMA@.write_slot() s);
    least_t bigint;
BEGIN
    IF cur IS NOT NULL THEN
        IF p_ts IS NULL OR p_ts = cur THEN
            RETURN cur;
        END IF;
        RAISE EXCEPTION 'transaction already writes at timestamp %, cannot also write at %', cur, p_ts
            USING ERRCODE = '25000';
    END IF;
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    PERFORM @SCHEMA@.check_incarnation(p_inc);
    IF p_ts IS NULL THEN
        PERFORM set_config('mzproxy.write_ts', '0 - pending', true);
        RETURN 0;
    END IF;
    PERFORM nextval('@SCHEMA@.writes');
    least_t := @SCHEMA@.pinned_ts() + 1;
    IF p_ts < least_t THEN
        RAISE EXCEPTION 'write at timestamp % conflicts: the upper is already %', p_ts, least_t
            USING ERRCODE = 'MZ001', DETAIL = least_t::text;
    END IF;
    -- A pin relies on every T being at most what current_write_ts
    -- would choose.
    IF p_ts > GREATEST(@SCHEMA@.now_ms(), least_t) THEN
        RAISE EXCEPTION 'cannot write at timestamp %, ahead of the clock', p_ts
            USING ERRCODE = '22008';
    END IF;
    PERFORM @SCHEMA@.set_slot(p_ts, NULL);
    RETURN p_ts;
END
$$;

-- T chosen for a pending slot: the gate (held already, unless the role
-- set the request itself), the count, then T.
CREATE OR REPLACE FUNCTION @SCHEMA@.choose_ts() RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    t bigint;
BEGIN
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    PERFORM nextval('@SCHEMA@.writes');
    t := GREATEST(@SCHEMA@.now_ms(), @SCHEMA@.pinned_ts() + 1);
    PERFORM @SCHEMA@.set_slot(t, NULL);
    RETURN t;
END
$$;

-- The pending request is taken as it is (T 0); every other value is
-- checked by its tag, as before.
CREATE OR REPLACE FUNCTION @SCHEMA@.write_slot(OUT t bigint, OUT e bigint) RETURNS record
LANGUAGE plpgsql
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
    IF v = '0 - pending' THEN
        t := 0;
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

CREATE OR REPLACE FUNCTION @SCHEMA@.stamp_ts(p_rel oid) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    t bigint;
    slot text;
    my_xid bigint;
    rels oid[];
BEGIN
    IF v = '0 - pending' THEN
        -- A pending slot: with the gate held, the write counted and the
        -- table's marker set to that count, T chosen and tagged, in one
        -- query (version 42). P is read as pinned_ts reads it; after a
        -- crash (the sequence not yet called) pinned_ts gives its floor.
        LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
        SELECT x.t, set_config('mzproxy.write_ts', x.t::text || ' - ' || @SCHEMA@.key_tag(x.k, x.t::text || ' -'), true)
          INTO t, slot
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       setval(to_regclass('@SCHEMA@.w' || p_rel), nextval('@SCHEMA@.writes'))
                  FROM @SCHEMA@.write_key k
                OFFSET 0) x;
        RETURN t;
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
    IF t = 0 THEN
        -- A slot of version 41's form ('0 - ' and its tag, taken by a
        -- transaction that spans the upgrade): counted by choose_ts, then
        -- marked, since the marker must not be below the write's count.
        t := @SCHEMA@.choose_ts();
        PERFORM @SCHEMA@.mark_written(ARRAY[p_rel]);
        RETURN t;
    END IF;
    IF t IS NOT NULL THEN
        PERFORM @SCHEMA@.mark_written(ARRAY[p_rel]);
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

-- The DDL's timestamp: a pending slot's T chosen as stamp_ts chooses it
-- (the gate, the count, one tag); a chosen T's tag checked once.
CREATE OR REPLACE FUNCTION @SCHEMA@.ddl_ts() RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    vt text;
    k text;
    t bigint;
BEGIN
    IF v = '0 - pending' THEN
        LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
        SELECT x.t, set_config('mzproxy.write_ts', x.t::text || ' - ' || @SCHEMA@.key_tag(x.k, x.t::text || ' -'), true)
          INTO t, v
          FROM (SELECT w.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       nextval('@SCHEMA@.writes')
                  FROM @SCHEMA@.write_key w
                OFFSET 0) x;
        RETURN t;
    END IF;
    vt := split_part(v, ' ', 1);
    IF split_part(v, ' ', 2) = '-' AND split_part(v, ' ', 4) = '' AND vt ~ '^[1-9][0-9]*$' THEN
        k := (SELECT w.k FROM @SCHEMA@.write_key w);
        -- A tag proves set_slot wrote T (write_slot).
        IF split_part(v, ' ', 3) = @SCHEMA@.key_tag(k, vt || ' -') THEN
            RETURN vt::bigint;
        END IF;
    END IF;
    RETURN @SCHEMA@.current_write_ts();
END
$$;

-- The history triggers' own query for a pending slot (version 27), made
-- the same way: the gate, the count as the marker, T and its tag. Edit to
-- gen_triggers as version 41 left it; it must apply exactly once.
DO $edit$
DECLARE
    old text := $$
        SELECT x.t INTO _t
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       setval(to_regclass('@SCHEMA@.w' || TG_RELID), pg_sequence_last_value('@SCHEMA@.writes'))
                  FROM @SCHEMA@.write_key k
                 WHERE current_setting('mzproxy.write_ts', true) = '0 - ' || @SCHEMA@.key_tag(k.k, '0 -')
                OFFSET 0) x$$;
    new text := $$
        IF current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
        END IF;
        SELECT x.t INTO _t
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       setval(to_regclass('@SCHEMA@.w' || TG_RELID), nextval('@SCHEMA@.writes'))
                  FROM @SCHEMA@.write_key k
                 WHERE current_setting('mzproxy.write_ts', true) = '0 - pending'
                OFFSET 0) x$$;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'storage version 42: the edit of gen_triggers does not apply once';
    END IF;
    EXECUTE replace(def, old, new);
END
$edit$;

-- The trigger functions of every managed table with history made again
-- (the triggers, which name them by oid, stay), as mzproxy's own DDL,
-- through sync_triggers: gen_triggers' text changed, so every kept
-- signature is stale, and sync_triggers records the new one.
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (42);
