-- mzproxy backend state, version 16 to 17: a transaction that reads at its
-- timestamp and then writes is checked per table, not against every write
-- in the database (issue 14: writes on disjoint tables never abort each
-- other, a read never makes a write abort).
--
-- Until now the COMMIT of such a transaction (pinned for its reads at P
-- when W writes were counted, then writing with a deferred slot) failed
-- with 40001 when any write had been counted since W, on any table. Now it
-- fails only when a managed table it read was written by a transaction not
-- in its snapshot:
--
--  * Each managed table has a marker, the unlogged sequence w<table oid>.
--    Every write sets it to the writes counted so far
--    (pg_sequence_last_value of writes), while it holds its ROW EXCLUSIVE
--    lock on the table: an autocommit or begin_write slot in stamp_ts
--    (each history statement), a deferred slot (transaction block) in
--    fix_write once it is counted.
--  * A write counted at or below W finished before the pin (the pin waited
--    for it at the gate, or pin_check saw it settled), so its mark is at
--    most W; a write not in the snapshot counts after W, so it marks above
--    W, and so does every write after it: a marker above W is exactly
--    "written since the pin".
--  * The tables the transaction read are those it holds a lock on (every
--    read locks its relations, views their tables, until the transaction
--    ends; a read of a history table counts for its table). The tables it
--    wrote are among them: their rows were read by the writes' WHERE.
--  * fix_write chooses T first, then reads which of those tables another
--    transaction writes with its T chosen or being chosen (pg_locks: it
--    holds ROW EXCLUSIVE or stronger on the table, and the gate), then
--    their markers: a table being written so, or whose marker is above W,
--    fails the transaction with 40001. A write that takes those locks
--    after that read chooses its T after this T, so it is ordered after
--    this transaction (a block before its COMMIT holds no gate: it
--    chooses T at its COMMIT); one that held them was seen, and one that
--    ended had marked its table before. Only then does the transaction
--    mark the tables it wrote. Nothing waits for a transaction, and no
--    lock is taken on a table read (VACUUM's lock does not count).
--  * That order (T, then locks, then markers) covers a write that locks
--    its table before its T is chosen. A write whose T was chosen before
--    it locked the table (a later statement of a multi-statement write,
--    a block that fixed its T early to read its own writes or for DDL)
--    may write a table read here after this check, at a T below this
--    one. For it each managed table has a check mark too, the unlogged
--    sequence c<table oid>: the largest T of a checked transaction that
--    read the table. The check raises the marks of the tables read to
--    its T before it reads pg_locks and the markers; such a write, once
--    it holds its lock and has set the table's marker, reads the table's
--    check mark and fails with 40001 when it is above its own T (stamp_ts;
--    an autocommit statement is retried by mzproxy). Exact: either the
--    write's read of the mark comes after the check's raise (the write
--    fails), or the write's marker was set before the check read it (the
--    check fails); both may fail. The mark outlives the checked
--    transaction: a write at an earlier T after it committed is caught as
--    well (pg_locks, which the checked transaction leaves when it ends,
--    would miss it). The raise is atomic (a lock on @SCHEMA@.checking held
--    for the raise only), so a smaller T never replaces a larger one. A
--    write whose T its own statement chose (an autocommit write's first
--    statement, a block's writes before its T) pays nothing for it.
--  * Not caught: a read whose locks are gone at the check (made in a
--    savepoint rolled back since), or made after this transaction's T was
--    fixed early (it reads at that T, but takes no part in the check).
--    Nor DDL at a T chosen before it locks its table (begin_write): its
--    catalog and history changes set no marker and read no check mark.
--
-- Cost: a write sets one unlogged sequence per history statement (no WAL;
-- about 2.5 us, measured against a read of the count); a write at a T
-- chosen before its statement reads one more (under 1 us, measured in a
-- query); a checked transaction raises one sequence per table it read
-- (with the subtransaction and the lock, about 30 us for one table),
-- reads pg_locks twice and one sequence per table it read.

-- The marker (w<oid>) and the check mark (c<oid>) of managed table p_oid,
-- each made unless it exists (as the schema's owner: no other role may
-- read or set them).
CREATE FUNCTION @SCHEMA@.make_marker(p_oid oid) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s text;
BEGIN
    IF p_oid IS NULL THEN
        RETURN;
    END IF;
    FOREACH s IN ARRAY ARRAY['w' || p_oid, 'c' || p_oid] LOOP
        IF to_regclass('@SCHEMA@.' || s) IS NULL THEN
            EXECUTE format('CREATE UNLOGGED SEQUENCE @SCHEMA@.%I MINVALUE 0 START 0', s);
        END IF;
    END LOOP;
END
$$;

-- Held by a checked transaction only while it raises the check marks of
-- the tables it read (see check_reads): it makes their raise to the
-- largest T atomic. No role but the schema's owner may lock it.
CREATE UNLOGGED TABLE @SCHEMA@.checking ();
REVOKE ALL ON @SCHEMA@.checking FROM PUBLIC;

-- gen_restamp as version 11 made it, and the table's marker: every new
-- managed table gets one (gen_triggers calls gen_restamp).
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

-- Every managed table that exists has one.
SELECT @SCHEMA@.make_marker(c.oid) FROM @SCHEMA@.catalog c
 WHERE c.kind = 'table' AND c.dropped_ts IS NULL AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = c.oid);

-- Marks the tables p_rels as written now (see the header). A table
-- without a marker is skipped: its readers then fail their check.
CREATE FUNCTION @SCHEMA@.mark_written(p_rels oid[]) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM setval(to_regclass('@SCHEMA@.w' || r), pg_sequence_last_value('@SCHEMA@.writes'))
       FROM unnest(p_rels) r;
END
$$;

-- The check of a transaction pinned for its reads when p_writes writes
-- were counted, whose T is p_t (see the header): the check marks of the
-- tables it read raised to p_t, then 40001 when one of them was written
-- since the pin, or is being written. Run by fix_write once T is chosen.
CREATE FUNCTION @SCHEMA@.check_reads(p_writes bigint, p_t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    read oid[];
    pending oid[];
    changed text;
BEGIN
    WITH locked AS (
        SELECT DISTINCT l.relation FROM pg_locks l
         WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.relation IS NOT NULL
    )
    SELECT array_agg(k.oid ORDER BY k.oid) INTO read FROM @SCHEMA@.catalog k
     WHERE k.kind = 'table' AND k.dropped_ts IS NULL
       AND (k.oid IN (SELECT x.relation FROM locked x)
            OR k.id IN (SELECT substr(c.relname, 2)::bigint FROM locked x JOIN pg_class c ON c.oid = x.relation
                         WHERE c.relnamespace = '@SCHEMA@'::regnamespace AND c.relname ~ '^h[0-9]+$'))
       AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = k.oid);
    IF read IS NULL THEN
        RETURN;
    END IF;
    -- The check marks first, each to the larger of its value and p_t: a
    -- write at a T already chosen that marks one of these tables after
    -- this sees it (stamp_ts). The lock makes read-and-raise atomic among
    -- checked transactions (two raising one mark at once could otherwise
    -- leave the smaller T); it is held only for these reads and sets (the
    -- subtransaction rolled back releases it, the sequences keep their
    -- values), so no one waits for a transaction.
    BEGIN
        LOCK TABLE @SCHEMA@.checking IN EXCLUSIVE MODE;
        PERFORM setval(c.s, p_t)
           FROM (SELECT to_regclass('@SCHEMA@.c' || r) AS s FROM unnest(read) r) c
          WHERE c.s IS NOT NULL AND coalesce(pg_sequence_last_value(c.s), 0) < p_t;
        RAISE SQLSTATE 'MZP00';
    EXCEPTION WHEN SQLSTATE 'MZP00' THEN
        NULL;
    END;
    -- Writes in progress next (a write marks its table before it ends),
    -- then the markers. A write in progress counts when it holds the gate
    -- too: its T is chosen or being chosen. (A block that has not reached
    -- its COMMIT holds no gate: it chooses its T after this one. Not
    -- ShareUpdateExclusiveLock: VACUUM's.)
    WITH locks AS MATERIALIZED (
        SELECT l.relation, l.mode, l.virtualtransaction FROM pg_locks l
         WHERE l.locktype = 'relation' AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
    )
    SELECT array_agg(DISTINCT l.relation) INTO pending FROM locks l
     WHERE l.relation = ANY (read)
       AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
       AND EXISTS (SELECT 1 FROM locks g
                    WHERE g.relation = '@SCHEMA@.gate'::regclass AND g.virtualtransaction = l.virtualtransaction);
    SELECT string_agg(r::regclass::text, ', ') INTO changed FROM unnest(read) r
     WHERE r = ANY (coalesce(pending, '{}'))
        OR to_regclass('@SCHEMA@.w' || r) IS NULL OR to_regclass('@SCHEMA@.c' || r) IS NULL
        OR coalesce(pg_sequence_last_value(to_regclass('@SCHEMA@.w' || r)), 0) > p_writes;
    IF changed IS NOT NULL THEN
        RAISE EXCEPTION 'could not serialize access due to concurrent update'
            USING ERRCODE = '40001',
                  DETAIL = format('mzproxy: %s changed since this transaction read at its timestamp, or is being written.', changed),
                  HINT = 'The transaction might succeed if retried.';
    END IF;
END
$$;

-- A write at T p_t to table p_rel, whose T was chosen before it locked the
-- table, comes after a transaction that read the table at an earlier
-- timestamp and was checked at a later T: it would change what that
-- transaction read (see the header).
CREATE FUNCTION @SCHEMA@.raise_read_later(p_rel oid, p_t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'could not serialize access due to concurrent update'
        USING ERRCODE = '40001',
              DETAIL = format('mzproxy: %s was read by a transaction with a later timestamp than this transaction''s %s, which did not see this write.',
                              p_rel::regclass, p_t),
              HINT = 'The transaction might succeed if retried.';
END
$$;

-- The timestamp a history trigger of table p_rel stamps (see frontier.sql,
-- write_cost.sql, block_cost.sql and write_trim.sql), and the table marked
-- as written unless the slot is deferred (fix_write marks those).
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
    IF v IS NULL OR v = '' THEN
        RETURN NULL;
    END IF;
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
    IF t IS NOT NULL THEN
        PERFORM @SCHEMA@.mark_written(ARRAY[p_rel]);
    END IF;
    IF t = 0 THEN
        RETURN @SCHEMA@.choose_ts();
    END IF;
    -- T was chosen before this statement locked p_rel (a later statement,
    -- a block's T fixed early): after the marker, the check mark (see the
    -- header). A transaction that read p_rel and was checked at a later T
    -- did not see this write.
    IF t > 0 AND coalesce(pg_sequence_last_value(to_regclass('@SCHEMA@.c' || p_rel)), 0) > t THEN
        PERFORM @SCHEMA@.raise_read_later(p_rel, t);
    END IF;
    RETURN t;
END
$$;

-- Make a deferred slot an ordinary one (see frontier.sql and
-- block_cost.sql): the gate, the incarnation, T, the placeholder replaced
-- in the tables the transaction's row lists; for a transaction pinned for
-- its reads, the check of its reads (check_reads); then its tables marked
-- as written. Returns T.
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
    checked_at bigint;
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
    IF read_writes <> ''
       AND split_part(read_writes, ' ', 2) IS DISTINCT FROM @SCHEMA@.tag('read_writes ' || split_part(read_writes, ' ', 1)) THEN
        RAISE EXCEPTION 'mzproxy.read_writes was not set by mzproxy' USING ERRCODE = '42501';
    END IF;
    -- The write counted and T chosen in one query; P read as pinned_ts
    -- reads it (after a crash, its floor). With the gate held no pin runs
    -- in between, so the order of the two does not matter.
    SELECT GREATEST(@SCHEMA@.now_ms(), CASE WHEN s.is_called THEN s.last_value ELSE @SCHEMA@.pinned_ts() END + 1),
           nextval('@SCHEMA@.writes')
      INTO t, counted FROM @SCHEMA@.pinned s;
    -- After T is chosen, before the restamp and before this transaction
    -- marks its own tables.
    IF read_writes <> '' THEN
        checked_at := t;
        PERFORM @SCHEMA@.check_reads(split_part(read_writes, ' ', 1)::bigint, checked_at);
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
    -- (Rare: under REPEATABLE READ such a version is not in the snapshot,
    -- and PostgreSQL refuses to replace it.)
    IF t > checked_at THEN
        PERFORM @SCHEMA@.check_reads(split_part(read_writes, ' ', 1)::bigint, t);
    END IF;
    PERFORM @SCHEMA@.mark_written(rels);
    -- set_slot(t, NULL), inline.
    PERFORM set_config('mzproxy.write_ts', t::text || ' - ' || @SCHEMA@.key_tag(k.k, t::text || ' -'), true)
       FROM @SCHEMA@.write_key k;
    RETURN t;
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.make_marker(oid), @SCHEMA@.mark_written(oid[]), @SCHEMA@.check_reads(bigint, bigint),
    @SCHEMA@.raise_read_later(oid, bigint) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (17);
