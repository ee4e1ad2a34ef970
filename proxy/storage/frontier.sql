-- mzproxy backend state: version 6 to 7, the upper as a frontier.
--
-- Until version 6 every write moved the upper, one row (txns) that each
-- commit updated and held locked through its flush: writes to unrelated
-- tables queued behind each other, and a transaction block was validated
-- against every commit in the database. Now the proxy serializes only the
-- handing out of timestamps, and PostgreSQL's own row locks order
-- conflicting writes:
--
--   * A writer takes the gate in ROW SHARE mode at begin_write (writers do
--     not conflict with each other) and keeps it until its transaction
--     ends. Its commit timestamp T is chosen when it is first needed (the
--     first history row, a DDL, a read of its own writes), after the
--     statement's row locks are held: T = max(clock, P + 1). Every write
--     it conflicts with has committed by then, at a T no greater, so T
--     order agrees with PostgreSQL's order of conflicting writes.
--   * A read of the present pins: it takes the gate in EXCLUSIVE mode,
--     which waits for the writers in progress, and hands out
--     t = max(clock, P, P + 1 if a write began since the last pin), then
--     records P = t. Every write that committed has T <= t; every write to
--     come has T > t. The upper is P + 1.
--   * P lives in an unlogged sequence: pins and writers never write WAL for
--     it. After a crash it starts over, and until a pin repairs it the
--     floor is the clock plus a second (a pin never hands out a t more than
--     a second ahead of the clock) or the durable upper the tick records.
--
-- txns becomes a view of the upper, so every reader of it is unchanged.

ALTER TABLE @SCHEMA@.txns RENAME TO txns_durable;
REVOKE ALL ON @SCHEMA@.txns_durable FROM PUBLIC;

-- The gate has no rows. Readers that must take their snapshot inside the
-- pin (a read-only transaction) lock it themselves before their first
-- statement: LOCK needs UPDATE on the table.
CREATE TABLE @SCHEMA@.gate ();
GRANT UPDATE ON @SCHEMA@.gate TO PUBLIC;

CREATE UNLOGGED SEQUENCE @SCHEMA@.pinned MINVALUE 0;
CREATE UNLOGGED SEQUENCE @SCHEMA@.writes;
CREATE UNLOGGED SEQUENCE @SCHEMA@.writes_seen MINVALUE 0 START 0;

-- P, the largest timestamp handed out for reading, as a writer may rely on
-- it (see the header for the crash floor). Called with the gate held.
CREATE FUNCTION @SCHEMA@.pinned_ts() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    p bigint;
    called bool;
BEGIN
    SELECT s.last_value, s.is_called INTO p, called FROM @SCHEMA@.pinned s;
    IF called THEN
        RETURN p;
    END IF;
    RETURN GREATEST(@SCHEMA@.now_ms() + 1000, (SELECT d.upper FROM @SCHEMA@.txns_durable d));
END
$$;

-- Start P from everything version 6 handed out.
SELECT setval('@SCHEMA@.pinned', GREATEST(
    (SELECT d.upper - 1 FROM @SCHEMA@.txns_durable d),
    (SELECT o.read_ts FROM @SCHEMA@.oracle o WHERE o.timeline = 'EpochMilliseconds'),
    (SELECT w.write_ts FROM @SCHEMA@.oracle_write w WHERE w.timeline = 'EpochMilliseconds'),
    @SCHEMA@.now_ms()));

-- The upper: every write below it has committed, and none to come will be.
CREATE FUNCTION @SCHEMA@.upper() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN @SCHEMA@.pinned_ts() + 1; END $$;

CREATE VIEW @SCHEMA@.txns AS SELECT @SCHEMA@.upper() AS upper;
GRANT SELECT ON @SCHEMA@.txns TO PUBLIC;

-- A view names the relation it was made with, now txns_durable.
CREATE OR REPLACE VIEW mz_internal.mz_frontiers AS
SELECT 'u' || k.id AS object_id, k.schema_name, k.name, c.since AS read_frontier, x.upper AS write_frontier,
       coalesce(c.retain_ms, m.default_retain_ms) AS retain_ms, k.dropped_ts
  FROM @SCHEMA@.collections c JOIN @SCHEMA@.catalog k ON k.id = c.id
  CROSS JOIN @SCHEMA@.txns x CROSS JOIN @SCHEMA@.compactor m;

-- One pin, with the gate held (see pin).
CREATE FUNCTION @SCHEMA@.pin_locked() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    p bigint;
    w bigint;
    seen bigint;
    t bigint;
    clock bigint;
BEGIN
    LOCK TABLE @SCHEMA@.gate IN EXCLUSIVE MODE;
    p := @SCHEMA@.pinned_ts();
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO w FROM @SCHEMA@.writes s;
    SELECT s.last_value INTO seen FROM @SCHEMA@.writes_seen s;
    clock := @SCHEMA@.now_ms();
    t := GREATEST(clock, p + CASE WHEN w <> seen THEN 1 ELSE 0 END);
    -- Reads and writes alternating faster than the clock push P ahead of
    -- it; past a second they wait for the clock (the crash floor relies
    -- on it).
    WHILE t > clock + 1000 LOOP
        PERFORM pg_sleep(0.001);
        clock := @SCHEMA@.now_ms();
    END LOOP;
    IF t <> p OR NOT (SELECT s.is_called FROM @SCHEMA@.pinned s) THEN
        PERFORM setval('@SCHEMA@.pinned', t);
    END IF;
    IF w <> seen THEN
        PERFORM setval('@SCHEMA@.writes_seen', w);
    END IF;
    RETURN t;
END
$$;

-- The timestamp of a read of the present (see the header). In a
-- transaction that writes it is the transaction's own T: it reads its own
-- writes. The gate is taken in a subtransaction that is rolled back, so it
-- is held only while the pin is made, whatever transaction calls this;
-- the sequences keep their new values.
CREATE FUNCTION @SCHEMA@.pin() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t bigint;
BEGIN
    IF (SELECT s.t FROM @SCHEMA@.write_slot() s) IS NOT NULL THEN
        RETURN @SCHEMA@.current_write_ts();
    END IF;
    BEGIN
        t := @SCHEMA@.pin_locked();
        RAISE SQLSTATE 'MZP00';
    EXCEPTION WHEN SQLSTATE 'MZP00' THEN
        NULL;
    END;
    RETURN t;
END
$$;

-- The pin of a transaction that already holds the gate in EXCLUSIVE mode
-- (a read-only transaction, which must take its snapshot with the gate
-- held, locks it itself and rolls back to a savepoint after this).
CREATE FUNCTION @SCHEMA@.pin_held() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN @SCHEMA@.pin_locked(); END $$;

-- The number of write slots taken when the last pin was made: read with
-- the gate held, right after pin_held, it is the pinned transaction's.
CREATE FUNCTION @SCHEMA@.pinned_writes() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN (SELECT s.last_value FROM @SCHEMA@.writes_seen s); END $$;

-- The tick: a pin that gives up after p_wait_ms when writers hold the gate
-- (it must not make new writes queue behind it for long), and the upper
-- recorded durably as a floor for after a crash. NULL when it gave up.
CREATE FUNCTION @SCHEMA@.tick(p_wait_ms int) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t bigint;
BEGIN
    BEGIN
        PERFORM set_config('lock_timeout', p_wait_ms::text, true);
        t := @SCHEMA@.pin_locked();
        RAISE SQLSTATE 'MZP00';
    EXCEPTION
        WHEN SQLSTATE 'MZP00' THEN NULL;
        WHEN lock_not_available THEN RETURN NULL;
    END;
    UPDATE @SCHEMA@.txns_durable d SET upper = t + 1 WHERE d.upper < t + 1;
    RETURN t;
END
$$;

-- T for a pending write slot (t = 0), recorded in the slot. The caller has
-- checked the slot: the tag costs a SHA-256 and a read of the key each
-- time, a noticeable part of a single-row write.
CREATE FUNCTION @SCHEMA@.choose_ts() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t bigint := GREATEST(@SCHEMA@.now_ms(), @SCHEMA@.pinned_ts() + 1);
BEGIN
    PERFORM @SCHEMA@.set_slot(t, NULL);
    RETURN t;
END
$$;

-- A pending write slot (t = 0) gets its T the first time it is asked for.
CREATE OR REPLACE FUNCTION @SCHEMA@.current_write_ts() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t bigint := (SELECT s.t FROM @SCHEMA@.write_slot() s);
BEGIN
    IF t = 0 THEN
        t := @SCHEMA@.choose_ts();
    ELSIF t = -1 THEN
        t := @SCHEMA@.fix_write();
    END IF;
    RETURN t;
END
$$;

-- Fails with raise_fenced unless incarnation p_inc (NULL: none, unfenced)
-- may write: not retired, its lease not expired. Without the generation
-- check: registering a newer generation retires every live incarnation of
-- an older one in the transaction that raises the fence.
CREATE FUNCTION @SCHEMA@.check_incarnation(p_inc bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_inc IS NOT NULL AND NOT coalesce((
            SELECT i.retired_at IS NULL
                   AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
              FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false) THEN
        PERFORM @SCHEMA@.raise_fenced(p_inc);
    END IF;
END
$$;

-- The write slot: the gate in ROW SHARE mode, the incarnation checked with
-- the gate held (a fence takes the gate in EXCLUSIVE mode, so a write
-- either began before the fence and commits before it completes, or sees
-- it), and T pending, or exactly p_ts (MZ001 with the least possible T as
-- DETAIL when p_ts is no longer possible).
CREATE FUNCTION @SCHEMA@.open_write(p_ts bigint, p_inc bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE
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
    PERFORM nextval('@SCHEMA@.writes');
    IF p_ts IS NOT NULL THEN
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
    END IF;
    PERFORM @SCHEMA@.set_slot(coalesce(p_ts, 0), NULL);
    RETURN coalesce(p_ts, 0);
END
$$;

-- begin_write and begin_write_at: the slot with its T chosen at once, for
-- callers that need T before they write (a DDL's catalog entry, tests).
-- Its first statement's conflicts may then have committed after T: such a
-- statement fails with 40001 (see raise_overtaken).
CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write_internal(p_ts bigint, p_inc bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM @SCHEMA@.open_write(p_ts, p_inc);
    RETURN @SCHEMA@.current_write_ts();
END
$$;

-- The slot mzproxy takes for a client's writes: T pending, chosen once the
-- first statement holds its row locks (returns 0). Nothing is validated at
-- the end, so nothing is retried but PostgreSQL's own serialization
-- failures. p_floor is ignored: T is never below a write that committed
-- before it was chosen.
CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write_occ(p_inc bigint, p_floor bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN @SCHEMA@.open_write(NULL, p_inc); END $$;

-- The transaction's T, chosen now if it was still pending, or NULL when the
-- transaction holds no slot. Called just before COMMIT.
CREATE OR REPLACE FUNCTION @SCHEMA@.commit_write(p_inc bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t bigint := (SELECT s.t FROM @SCHEMA@.write_slot() s);
BEGIN
    IF t IS NULL OR t > 0 THEN
        RETURN t;
    END IF;
    RETURN @SCHEMA@.current_write_ts();
END
$$;

-- Nothing holds a commit slot any more: nothing to wait for.
CREATE OR REPLACE FUNCTION @SCHEMA@.await_slot() RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN END $$;

-- read_ts, the oracle's read timestamp, is a pin; write_ts a T that would
-- be chosen now.
CREATE OR REPLACE FUNCTION @SCHEMA@.read_ts() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN @SCHEMA@.pin(); END $$;

CREATE OR REPLACE FUNCTION @SCHEMA@.write_ts() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN GREATEST(@SCHEMA@.now_ms(), @SCHEMA@.pinned_ts() + 1); END $$;

-- A transaction block's write slot is deferred: the block holds no gate
-- while it runs (and may sit idle), so a pin never waits for it. Its
-- history rows are stamped with a placeholder unique to the transaction,
-- -(its transaction id), and the history tables it wrote are recorded in
-- mzproxy.touched (tagged like the slot). Its T is chosen when it is
-- first needed (fix_write: at the client's COMMIT, before DDL, or to read
-- its own writes) with the gate held: GREATEST(clock, P + 1, every version
-- it closed), and the placeholder is replaced by T (its pending rows are
-- found through a partial index on mz_from < 0).
--
-- A transaction that read at a pinned timestamp and then writes passes
-- p_read_writes, pinned_writes at its pin: its writes are at a later T, so
-- what it read must not have changed in between. That is checked
-- coarsely at fix_write: no other write may have taken or fixed a slot in
-- the database since the pin (40001). T is chosen after the check, so a
-- writer that takes its slot after it chooses a T no lower.
CREATE FUNCTION @SCHEMA@.open_write_deferred(p_inc bigint, p_read_writes bigint DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text := p_read_writes::text;
BEGIN
    IF (SELECT s.t FROM @SCHEMA@.write_slot() s) IS NOT NULL THEN
        RETURN 0;
    END IF;
    -- Fenced now or at fix_write, which checks again with the gate held.
    PERFORM @SCHEMA@.check_incarnation(p_inc);
    PERFORM @SCHEMA@.set_slot(-1, p_inc);
    PERFORM set_config('mzproxy.touched', ' ' || @SCHEMA@.tag('touched '), true);
    -- A READ ONLY transaction writes no history (PostgreSQL refuses its
    -- writes), and could not record itself either.
    IF current_setting('transaction_read_only') = 'off' THEN
        INSERT INTO @SCHEMA@.deferred_slots VALUES (pg_current_xact_id()::text::bigint);
    END IF;
    IF v IS NOT NULL THEN
        PERFORM set_config('mzproxy.read_writes', v || ' ' || @SCHEMA@.tag('read_writes ' || v), true);
    END IF;
    RETURN 0;
END
$$;

-- The history tables (oids) a deferred slot has written, comma separated,
-- kept as 'list tag'.
CREATE FUNCTION @SCHEMA@.touched() RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v text := coalesce(current_setting('mzproxy.touched', true), '');
    list text := split_part(v, ' ', 1);
BEGIN
    -- open_write_deferred recorded an empty list: a missing one was taken
    -- away, which would leave placeholders behind.
    IF split_part(v, ' ', 2) IS DISTINCT FROM @SCHEMA@.tag('touched ' || list) OR split_part(v, ' ', 3) <> '' THEN
        RAISE EXCEPTION 'mzproxy.touched was not set by mzproxy' USING ERRCODE = '42501';
    END IF;
    RETURN list;
END
$$;

-- The timestamp a history trigger of table p_rel stamps: the slot's T,
-- chosen now if pending; for a deferred slot the placeholder, with p_rel
-- recorded. NULL without a slot.
CREATE FUNCTION @SCHEMA@.stamp_ts(p_rel oid) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t bigint := (SELECT s.t FROM @SCHEMA@.write_slot() s);
    list text;
BEGIN
    IF t = -1 THEN
        list := @SCHEMA@.touched();
        IF NOT p_rel::text = ANY (string_to_array(list, ',')) THEN
            list := CASE WHEN list = '' THEN p_rel::text ELSE list || ',' || p_rel::text END;
            PERFORM set_config('mzproxy.touched', list || ' ' || @SCHEMA@.tag('touched ' || list), true);
        END IF;
        RETURN -(pg_current_xact_id()::text::bigint);
    END IF;
    IF t = 0 THEN
        RETURN @SCHEMA@.choose_ts();
    END IF;
    RETURN t;
END
$$;

-- Make a deferred slot an ordinary one (see open_write_deferred): the gate,
-- the incarnation, T, and the placeholder replaced. Returns T.
CREATE FUNCTION @SCHEMA@.fix_write() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    inc bigint := (SELECT s.e FROM @SCHEMA@.write_slot() s);
    p bigint := -(pg_current_xact_id()::text::bigint);
    rels oid[] := string_to_array(nullif(@SCHEMA@.touched(), ''), ',')::oid[];
    hist text[];
    h text;
    closed bigint;
    read_writes text;
    t bigint;
BEGIN
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    PERFORM @SCHEMA@.check_incarnation(inc);
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
    PERFORM nextval('@SCHEMA@.writes');
    t := GREATEST(@SCHEMA@.now_ms(), @SCHEMA@.pinned_ts() + 1);
    SELECT array_agg(k.history) INTO hist FROM @SCHEMA@.catalog k WHERE k.oid = ANY (coalesce(rels, '{}'));
    FOREACH h IN ARRAY coalesce(hist, '{}') LOOP
        EXECUTE format('SELECT max(mz_from) FROM %s WHERE mz_to = $1', h) INTO closed USING p;
        t := GREATEST(t, closed);
    END LOOP;
    FOREACH h IN ARRAY coalesce(hist, '{}') LOOP
        EXECUTE format('UPDATE %s SET mz_to = $2 WHERE mz_to = $1', h) USING p, t;
        EXECUTE format('UPDATE %s SET mz_from = $2 WHERE mz_from = $1', h) USING p, t;
    END LOOP;
    PERFORM set_config('mzproxy.touched', '', true);
    DELETE FROM @SCHEMA@.deferred_slots d WHERE d.xid = pg_current_xact_id()::text::bigint;
    PERFORM @SCHEMA@.set_slot(t, NULL);
    RETURN t;
END
$$;

-- Every deferred slot is fixed before its transaction commits, whatever the
-- client sends: open_write_deferred records the transaction here, and a
-- deferred constraint trigger fixes the slot at COMMIT if nothing did
-- before (fix_write removes the record). A slot whose settings were taken
-- away cannot be fixed (touched raises 42501): the COMMIT fails, and no
-- placeholder reaches history.
CREATE UNLOGGED TABLE @SCHEMA@.deferred_slots (xid bigint NOT NULL);
CREATE FUNCTION @SCHEMA@.fix_at_commit() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM @SCHEMA@.deferred_slots d WHERE d.xid = NEW.xid) THEN
        PERFORM @SCHEMA@.fix_write();
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER deferred_slot_fixed AFTER INSERT ON @SCHEMA@.deferred_slots
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION @SCHEMA@.fix_at_commit();

-- A client's COMMIT of a transaction block that wrote: fix_write. Returns
-- T, NULL without a slot.
CREATE OR REPLACE FUNCTION @SCHEMA@.commit_write_tx(p_inc bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (SELECT s.t FROM @SCHEMA@.write_slot() s) IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN @SCHEMA@.current_write_ts();
END
$$;

-- Pending rows of deferred slots, on every history table (manage_table
-- makes it for new ones).
DO $pending$
DECLARE
    k record;
BEGIN
    FOR k IN SELECT c.id, c.history FROM @SCHEMA@.catalog c
              WHERE c.kind = 'table' AND to_regclass(c.history) IS NOT NULL LOOP
        EXECUTE format('CREATE INDEX %I ON %s (mz_from) WHERE mz_from < 0', 'h' || k.id || '_pending', k.history);
    END LOOP;
END
$pending$;
DO $manage$
DECLARE
    def text := pg_get_functiondef('@SCHEMA@.manage_table(oid, bigint, bigint)'::regprocedure);
    anchor text := $a$    EXECUTE format('CREATE INDEX %I ON %s (mz_to)', 'h' || new_id || '_mz_to', hist);$a$;
BEGIN
    IF strpos(def, anchor) = 0 THEN
        RAISE EXCEPTION 'manage_table: its index of mz_to was not found';
    END IF;
    EXECUTE replace(def, anchor, anchor || E'\n' ||
        $a$    EXECUTE format('CREATE INDEX %I ON %s (mz_from) WHERE mz_from < 0', 'h' || new_id || '_pending', hist);$a$);
END
$manage$;

-- The truncate trigger's T: versions committed after T was chosen cannot
-- be closed at T.
CREATE FUNCTION @SCHEMA@.truncate_ts(p_t bigint, p_rel oid) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    m bigint;
BEGIN
    IF p_t < 0 THEN
        RETURN p_t;  -- a deferred slot's placeholder: fix_write looks at what it closed
    END IF;
    EXECUTE format('SELECT max(mz_from) FROM %s WHERE mz_to = 9223372036854775807',
                   (SELECT k.history FROM @SCHEMA@.catalog k WHERE k.oid = p_rel AND k.dropped_ts IS NULL))
       INTO m;
    IF m > p_t THEN
        PERFORM @SCHEMA@.raise_overtaken(p_rel, m, p_t);
    END IF;
    RETURN p_t;
END
$$;

-- A statement that would close a version written after its transaction's
-- T (a write that committed after T was chosen, which the statement then
-- waited for) cannot be placed in T order: PostgreSQL's serialization
-- failure, which clients retry (and mzproxy retries for an autocommit
-- statement).
CREATE FUNCTION @SCHEMA@.raise_overtaken(p_rel oid, p_newer bigint, p_t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION 'could not serialize access due to concurrent update'
        USING ERRCODE = '40001',
              DETAIL = format('mzproxy: a row of %s was written at timestamp %s, after this transaction''s timestamp %s.',
                              p_rel::regclass, p_newer, p_t),
              HINT = 'The transaction might succeed if retried.';
END
$$;

-- The history triggers (the generator and every generated function): T is
-- read through current_write_ts (chosen there when pending), a closed
-- version newer than T fails the statement, and so does truncating one.
DO $rewrite$
DECLARE
    f record;
    def text;
    edits text[][] := ARRAY[
        [$$AND c.mz_from <> _t RETURNING 1$$, $$AND c.mz_from <> _t RETURNING c.mz_from$$],
        [E'\n      INTO _k, _n;', E', (SELECT max(mz_from) FROM upd)\n      INTO _k, _n, _m;'],
        [$$DECLARE _t bigint; _k bigint; _n bigint;$$, $$DECLARE _t bigint; _k bigint; _n bigint; _m bigint;$$],
        [E'USING ERRCODE = \'XX000\';\n    END IF;',
         E'USING ERRCODE = \'XX000\';\n    END IF;\n    IF _m > _t AND _t > 0 THEN\n        PERFORM @SCHEMA@.raise_overtaken(TG_RELID, _m, _t);\n    END IF;'],
        [$$_t := @SCHEMA@.current_write_ts();$$, $$_t := @SCHEMA@.stamp_ts(TG_RELID);$$],
        [E'\n    DELETE FROM ', E'\n    _t := @SCHEMA@.truncate_ts(_t, TG_RELID);\n    DELETE FROM ']];
    i int;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
              WHERE p.pronamespace = '@SCHEMA@'::regnamespace AND p.prokind = 'f'
                AND (p.proname = 'gen_triggers' OR p.prorettype = 'trigger'::regtype)
                AND strpos(p.prosrc, 'mz_to') > 0 LOOP
        def := pg_get_functiondef(f.oid);
        FOR i IN 1 .. array_length(edits, 1) LOOP
            def := replace(def, edits[i][1], edits[i][2]);
        END LOOP;
        EXECUTE def;
    END LOOP;
END
$rewrite$;

-- Heartbeats return P as the candidate for the next floor: a pin would
-- wait for the writes in progress.
DO $floor$
DECLARE
    f regprocedure;
    def text;
BEGIN
    FOREACH f IN ARRAY ARRAY['@SCHEMA@.heartbeat(bigint, bigint, bigint[], bigint[])'::regprocedure] LOOP
        def := pg_get_functiondef(f);
        IF strpos(def, 'RETURN @SCHEMA@.read_ts();') = 0 THEN
            RAISE EXCEPTION '%: its floor was not found', f;
        END IF;
        EXECUTE replace(def, 'RETURN @SCHEMA@.read_ts();', 'RETURN @SCHEMA@.pinned_ts();');
    END LOOP;
END
$floor$;

-- A new generation's fence waits for the writes in progress through the
-- gate instead of the txns row.
DO $fence$
DECLARE
    def text := pg_get_functiondef('@SCHEMA@.register(bigint, bigint, text, int)'::regprocedure);
BEGIN
    IF strpos(def, 'UPDATE @SCHEMA@.txns SET upper = upper;') = 0 THEN
        RAISE EXCEPTION 'register: the fence''s wait for writers was not found';
    END IF;
    EXECUTE replace(def, 'UPDATE @SCHEMA@.txns SET upper = upper;', 'LOCK TABLE @SCHEMA@.gate IN EXCLUSIVE MODE;');
END
$fence$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @SCHEMA@ FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @SCHEMA@.now_ms(), @SCHEMA@.read_ts(), @SCHEMA@.begin_write(), @SCHEMA@.begin_write(bigint),
    @SCHEMA@.begin_write_occ(bigint, bigint), @SCHEMA@.commit_write(bigint), @SCHEMA@.commit_write_tx(bigint),
    @SCHEMA@.await_slot(), @SCHEMA@.set_retention(regclass, bigint), @SCHEMA@.raise_fenced(bigint),
    @SCHEMA@.view_definition(oid), @SCHEMA@.type_name(oid, int4),
    @SCHEMA@.pin(), @SCHEMA@.pin_held(), @SCHEMA@.pinned_writes(), @SCHEMA@.upper(),
    @SCHEMA@.open_write_deferred(bigint, bigint)
    TO PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (7);
