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

-- A pending write slot (t = 0) gets its T the first time it is asked for.
CREATE OR REPLACE FUNCTION @SCHEMA@.current_write_ts() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t bigint := (SELECT s.t FROM @SCHEMA@.write_slot() s);
BEGIN
    IF t = 0 THEN
        t := GREATEST(@SCHEMA@.now_ms(), @SCHEMA@.pinned_ts() + 1);
        PERFORM @SCHEMA@.set_slot(t, NULL);
    END IF;
    RETURN t;
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
    IF p_inc IS NOT NULL AND NOT coalesce((
            SELECT i.retired_at IS NULL
                   AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
              FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false) THEN
        PERFORM @SCHEMA@.raise_fenced(p_inc);
    END IF;
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
BEGIN
    IF (SELECT s.t FROM @SCHEMA@.write_slot() s) IS NULL THEN
        RETURN NULL;
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

-- The truncate trigger's T: versions committed after T was chosen cannot
-- be closed at T.
CREATE FUNCTION @SCHEMA@.truncate_ts(p_t bigint, p_rel oid) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    m bigint;
BEGIN
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
         E'USING ERRCODE = \'XX000\';\n    END IF;\n    IF _m > _t THEN\n        PERFORM @SCHEMA@.raise_overtaken(TG_RELID, _m, _t);\n    END IF;'],
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
    @SCHEMA@.pin(), @SCHEMA@.pin_held(), @SCHEMA@.upper()
    TO PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (7);
