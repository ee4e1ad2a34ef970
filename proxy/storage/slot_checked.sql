-- mzproxy backend state, version 46 to 47 (session 21, outside21): a
-- block that read at its pin keeps its read-then-write check whatever
-- slot a function PUBLIC may call took first.
--
-- mzproxy takes a block's slot with open_write_deferred, and after a
-- read at the block's pin passes the writes counted at it (read_writes);
-- fix_write checks the tables read against that count once T is chosen
-- (check_reads). open_write_deferred returned at once for a slot already
-- taken, "nothing left to check", which is true only of the slot
-- fix_write itself fixed (a block's DDL, a read of its own writes). A
-- role that called begin_write_occ(NULL, NULL) or set the request
-- '0 - pending' by hand in its block before its first write left a
-- pending slot, and one that called begin_write() (which chooses T at
-- once), begin_write_at, or commit_write after a pending slot, a chosen
-- one: either way its block committed without
-- the check (two such blocks each read a sum and each took from a
-- different row: both committed, write skew in the role's own tables).
-- mzproxy never makes either slot in a block. Now:
--
--  * a pending slot (T not chosen: nothing written under it yet) becomes
--    the block's deferred slot, as if none had been taken: the setting
--    and the transaction's row with read_writes; T is chosen and the
--    reads checked at COMMIT (or first need) by fix_write as for any
--    block. The gate the pending slot locked stays locked to the end of
--    the transaction (a lock is not released early), as before.
--  * a chosen T with read_writes given is refused (25000) unless it is
--    the one fix_write fixed (the transaction's row holds it in
--    fixed_t, and fix_write checked the reads before fixing it): the
--    reads can no longer be checked at a T chosen before them.
--
-- Neither branch is on a path mzproxy takes: its block's first slot
-- finds no slot (cur IS NULL), unchanged; the autocommit flat slot
-- (OpenWriteFor) does not call this function.
--
-- Replaced: open_write_deferred (in full). It depends only on version
-- 46's objects (write_slot, deferred_slots, write_key, key_tag,
-- raise_fenced, incarnations).

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
    IF cur > 0 THEN
        -- T chosen. By fix_write (a block's DDL, a read of its own
        -- writes): its reads were checked then, nothing is left to check.
        -- By anything else (begin_write(), begin_write_at, commit_write
        -- after a pending slot), in a block that read: they can no longer be
        -- (version 47).
        IF p_read_writes IS NOT NULL AND NOT EXISTS (
                SELECT FROM @SCHEMA@.deferred_slots d
                 WHERE d.xid = pg_current_xact_id_if_assigned()::text::bigint AND d.fixed_t = cur) THEN
            RAISE EXCEPTION 'transaction chose its write timestamp % before its reads were checked', cur
                USING ERRCODE = '25000',
                      DETAIL = 'A transaction block that read at its timestamp and then writes is checked against what it read when mzproxy chooses its write timestamp.',
                      HINT = 'Do not call mzproxy''s write-slot functions in a transaction block; ROLLBACK and run it again.';
        END IF;
        RETURN 0;
    END IF;
    IF cur IS NULL OR cur = 0 THEN
        -- No slot, or a pending one (begin_write_occ, the request set by
        -- hand: nothing is written under it yet, since the
        -- first history row chooses T), which becomes the block's
        -- deferred slot (version 47). Fenced now or at fix_write, which
        -- checks again with the gate held (check_incarnation's condition).
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (47);
