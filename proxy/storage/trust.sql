-- mzproxy backend state: version 5 to 6, the trust model.
--
-- Ordinary roles reach this schema twice: through mzproxy, whose write
-- transactions call a few functions here on the client's own connection
-- (as the client's role), and directly. Before this version two
-- transaction-local settings, which any role can set, carried authority:
-- mzproxy.write_ts (the commit timestamp the history triggers stamp) and
-- mzproxy.in_ddl (the event triggers stand aside for DDL mzproxy itself
-- runs). A role could write into the past with the first and change a
-- managed table unseen with the second. Now both carry a tag: SHA-256 over
-- a per-database secret (write_key, readable only by the schema's owner),
-- the transaction's id and the value. Only the SECURITY DEFINER functions
-- below can make one, and it is worth nothing in any other transaction.
-- Every function is EXECUTE-able only by the owner, except the few a
-- client's connection needs, each safe in any hands.

CREATE TABLE @SCHEMA@.write_key (k text NOT NULL);
INSERT INTO @SCHEMA@.write_key SELECT gen_random_uuid()::text || gen_random_uuid()::text;

-- The tag of value p_v in the current transaction. The functions from here
-- to current_write_ts are called only by mzproxy's SECURITY DEFINER
-- functions (no other role may execute them), so they run as the owner
-- with the callers' search_path without a definer and a SET clause of
-- their own, which would cost a GUC save and restore per call on every
-- write. PL/pgSQL, not SQL: a SQL function is planned on every call.
CREATE FUNCTION @SCHEMA@.tag(p_v text) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN (SELECT encode(sha256(convert_to(k || ' ' || pg_current_xact_id()::text || ' ' || p_v, 'UTF8')), 'hex')
              FROM @SCHEMA@.write_key);
END
$$;

-- What mzproxy.in_ddl holds while mzproxy runs DDL of its own.
CREATE FUNCTION @SCHEMA@.ddl_mark() RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN @SCHEMA@.tag('ddl'); END $$;

-- The write slot of the current transaction: its commit timestamp t and,
-- for an optimistic slot not yet appended, the expected upper e. Kept in
-- mzproxy.write_ts as 't e tag' (e is '-' when there is none).
CREATE FUNCTION @SCHEMA@.set_slot(p_t bigint, p_e bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v text := p_t::text || ' ' || coalesce(p_e::text, '-');
BEGIN
    PERFORM set_config('mzproxy.write_ts', v || ' ' || @SCHEMA@.tag(v), true);
END
$$;

-- The slot set_slot recorded in this transaction; both NULL when there is
-- none. A value mzproxy did not make is an error, not a missing slot: the
-- statement that relied on it fails.
CREATE FUNCTION @SCHEMA@.write_slot(OUT t bigint, OUT e bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    vt text;
    ve text;
BEGIN
    IF v IS NULL OR v = '' THEN
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

CREATE OR REPLACE FUNCTION @SCHEMA@.current_write_ts() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN (SELECT t FROM @SCHEMA@.write_slot()); END $$;

-- Locks no other role can take. Advisory locks are anyone's: a role that
-- held the hold lock's key would stall every read hold, registration and
-- compaction round, and one that held the compaction key would stop
-- compaction for good. Row locks need UPDATE on the row's table, which only
-- the owner has.
CREATE TABLE @SCHEMA@.locks (name text PRIMARY KEY);
INSERT INTO @SCHEMA@.locks VALUES ('hold');

-- The transaction-level lock that orders compaction's since advance with
-- holds published below a floor and with registration.
CREATE FUNCTION @SCHEMA@.take_hold_lock() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN PERFORM 1 FROM @SCHEMA@.locks WHERE name = 'hold' FOR UPDATE; END $$;

-- The right to compact a database, and the right to tick it (advance the
-- upper with the clock while it is idle), each belong to one live
-- incarnation at a time: the holder keeps it while its lease lives; when
-- the holder is gone (retired, fenced, expired) the next caller takes it.
CREATE TABLE @SCHEMA@.claims (name text PRIMARY KEY, holder bigint);
INSERT INTO @SCHEMA@.claims VALUES ('compaction', NULL), ('tick', NULL);
GRANT SELECT ON @SCHEMA@.claims TO PUBLIC;
CREATE FUNCTION @SCHEMA@.claim(p_name text, p_id bigint) RETURNS bool
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h bigint;
BEGIN
    SELECT holder INTO h FROM @SCHEMA@.claims WHERE name = p_name;
    IF h = p_id THEN
        RETURN @SCHEMA@.incarnation_live(p_id);
    END IF;
    IF (h IS NOT NULL AND @SCHEMA@.incarnation_live(h)) OR NOT @SCHEMA@.incarnation_live(p_id) THEN
        RETURN false;
    END IF;
    -- Under READ COMMITTED a concurrent claim re-checks this condition
    -- against the row it committed: one of two claimants wins.
    UPDATE @SCHEMA@.claims SET holder = p_id WHERE name = p_name AND holder IS NOT DISTINCT FROM h;
    RETURN FOUND;
END
$$;

-- mzproxy's functions run as the schema's owner, so they must never
-- evaluate a role's own code. Two ways they could: a domain's CHECK (it
-- may call any function of the role's) when history values are coerced to
-- a domain, and a cast the role created (CREATE CAST with its function)
-- when ALTER COLUMN TYPE converts history. So history columns store a
-- domain as its base type (also as an array element; PostgreSQL sends a
-- domain as its base type on the wire anyway), and history is converted by
-- cast only between built-in types (whose casts no role can add).
CREATE FUNCTION @SCHEMA@.storage_type(p_type oid, p_typmod int4, OUT typ oid, OUT typmod int4)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
    elem oid;
    elem_mod int4;
BEGIN
    typ := p_type;
    typmod := p_typmod;
    LOOP
        SELECT y.typtype, y.typbasetype, y.typtypmod, y.typelem, y.typcategory INTO t FROM pg_type y WHERE y.oid = typ;
        EXIT WHEN t.typtype IS DISTINCT FROM 'd';
        IF typmod = -1 THEN
            typmod := t.typtypmod;
        END IF;
        typ := t.typbasetype;
    END LOOP;
    IF t.typcategory = 'A' AND t.typelem <> 0 THEN
        SELECT s.typ, s.typmod INTO elem, elem_mod FROM @SCHEMA@.storage_type(t.typelem, typmod) s;
        IF elem <> t.typelem THEN
            SELECT y.typarray INTO typ FROM pg_type y WHERE y.oid = elem;
            typmod := elem_mod;
        END IF;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION @SCHEMA@.user_columns(p_oid oid)
RETURNS TABLE (attnum int2, name name, type text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT a.attnum, a.attname,
           format_type(s.typ, s.typmod) ||
           CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                THEN ' COLLATE ' || quote_ident(cn.nspname) || '.' || quote_ident(co.collname)
                ELSE '' END
      FROM pg_attribute a
      CROSS JOIN LATERAL @SCHEMA@.storage_type(a.atttypid, a.atttypmod) s
      JOIN pg_type t ON t.oid = s.typ
      LEFT JOIN pg_collation co ON co.oid = a.attcollation
      LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
     WHERE a.attrelid = p_oid AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY a.attnum;
END
$$;

-- Whether history column p_name of p_history can be converted by cast to
-- the type user column p_attnum of p_rel has now: both built in.
CREATE FUNCTION @SCHEMA@.builtin_conversion(p_rel oid, p_attnum int2, p_history text, p_name name) RETURNS bool
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT s.typ < 16384 FROM pg_attribute a, @SCHEMA@.storage_type(a.atttypid, a.atttypmod) s
                      WHERE a.attrelid = p_rel AND a.attnum = p_attnum)
                AND (SELECT s.typ < 16384 FROM pg_attribute a, @SCHEMA@.storage_type(a.atttypid, a.atttypmod) s
                      WHERE a.attrelid = p_history::regclass AND a.attname = p_name), false)
$$;

-- Every function of earlier versions that read or wrote either setting
-- directly goes through the functions above instead. That includes the
-- generated history trigger functions of tables managed so far and the
-- generator itself, so the change is made to the functions' text, which
-- also keeps each function's body in one place (its own version's script).
-- The functions that took the hold lock's advisory key take take_hold_lock
-- instead, reconcile casts history only by a built-in conversion, and
-- gen_triggers takes EXECUTE on the trigger functions it makes from PUBLIC.
DO $rewrite$
DECLARE
    f record;
    def text;
    edits text[][] := ARRAY[
        [$$nullif(current_setting('mzproxy.write_ts', true), '')::bigint$$, '@SCHEMA@.current_write_ts()'],
        [$$current_setting('mzproxy.write_ts', true)$$, '@SCHEMA@.current_write_ts()::text'],
        [$$set_config('mzproxy.write_ts', t::text, true)$$, '@SCHEMA@.set_slot(t, NULL)'],
        [$$coalesce(current_setting('mzproxy.in_ddl', true), '') = 'on'$$,
         $$coalesce(current_setting('mzproxy.in_ddl', true), '') = @SCHEMA@.ddl_mark()$$],
        [$$set_config('mzproxy.in_ddl', 'on', true)$$, $$set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true)$$],
        [$$pg_advisory_xact_lock(@SCHEMA@.hold_lock_key())$$, '@SCHEMA@.take_hold_lock()'],
        [$$    -- Drop only what exists: DROP TRIGGER IF EXISTS would send the client a NOTICE.$$,
         $$    EXECUTE format('REVOKE ALL ON FUNCTION %s(), %s(), %s(), %s() FROM PUBLIC',
                   fn || '_ins', fn || '_del', fn || '_upd', fn || '_trunc');
    -- Drop only what exists: DROP TRIGGER IF EXISTS would send the client a NOTICE.$$],
        [$$EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE %s USING %I::%s', c.history,$$,
         $$IF NOT @SCHEMA@.builtin_conversion(c.oid, m.attnum, c.history, m.name) THEN
                RAISE EXCEPTION 'no built-in conversion';  -- the old versions get NULL, below
            END IF;
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE %s USING %I::%s', c.history,$$]];
    i int;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
              WHERE p.pronamespace = '@SCHEMA@'::regnamespace AND p.prokind = 'f'
                AND p.proname NOT IN ('set_slot', 'write_slot', 'current_write_ts')
                AND EXISTS (SELECT 1 FROM generate_subscripts(edits, 1) AS e(i) WHERE strpos(p.prosrc, edits[e.i][1]) > 0) LOOP
        def := pg_get_functiondef(f.oid);
        FOR i IN 1 .. array_length(edits, 1) LOOP
            def := replace(def, edits[i][1], edits[i][2]);
        END LOOP;
        EXECUTE def;
    END LOOP;
END
$rewrite$;

-- Optimistic slots (occ.sql), with the expected upper inside the tagged
-- slot. p_floor comes from the caller (the actual upper of its last
-- conflict): it may raise T by at most a second past what the oracle would
-- choose, so no caller can push the timeline far ahead of the clock.
CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write_occ(p_inc bigint, p_floor bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cur bigint := @SCHEMA@.current_write_ts();
    u bigint;
    t bigint;
BEGIN
    IF cur IS NOT NULL THEN
        RETURN cur;
    END IF;
    SELECT x.upper, GREATEST(x.upper, o.read_ts + 1, w.write_ts + 1, @SCHEMA@.now_ms())
      INTO u, t
      FROM @SCHEMA@.txns x, @SCHEMA@.oracle o, @SCHEMA@.oracle_write w
     WHERE o.timeline = 'EpochMilliseconds' AND w.timeline = 'EpochMilliseconds';
    t := GREATEST(t, LEAST(coalesce(p_floor, 0), t + 1000));
    PERFORM @SCHEMA@.set_slot(t, u);
    RETURN t;
END
$$;

CREATE OR REPLACE FUNCTION @SCHEMA@.commit_write(p_inc bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    done bigint;
    u bigint;
    r bigint;
BEGIN
    SELECT * INTO s FROM @SCHEMA@.write_slot();
    IF s.t IS NULL OR s.e IS NULL THEN
        RETURN s.t;
    END IF;
    -- See occ.sql: never wait for the slot while holding row locks.
    PERFORM 1 FROM @SCHEMA@.txns x FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'write at timestamp % conflicts: another write holds the commit slot', s.t
            USING ERRCODE = 'MZ004', DETAIL = (s.t + 1)::text,
                  HINT = 'Roll back, wait for the slot (await_slot), and try again.';
    END IF;
    UPDATE @SCHEMA@.txns x SET upper = s.t + 1 WHERE x.upper = s.e RETURNING s.t INTO done;
    IF done IS NULL THEN
        SELECT x.upper INTO u FROM @SCHEMA@.txns x;
        RAISE EXCEPTION 'write at timestamp % conflicts: the upper is already %', s.t, u
            USING ERRCODE = 'MZ001', DETAIL = u::text;
    END IF;
    SELECT o.read_ts INTO r FROM @SCHEMA@.oracle o WHERE o.timeline = 'EpochMilliseconds';
    IF r >= s.t THEN
        RAISE EXCEPTION 'write at timestamp % conflicts: read timestamp % was already handed out', s.t, r
            USING ERRCODE = 'MZ001', DETAIL = (r + 1)::text;
    END IF;
    IF p_inc IS NOT NULL AND NOT coalesce((
            SELECT i.retired_at IS NULL
                   AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
              FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false) THEN
        PERFORM @SCHEMA@.raise_fenced(p_inc);
    END IF;
    UPDATE @SCHEMA@.oracle SET read_ts = GREATEST(read_ts, s.t) WHERE timeline = 'EpochMilliseconds';
    PERFORM @SCHEMA@.set_slot(s.t, NULL);
    RETURN s.t;
END
$$;

-- The pessimistic slot at the oracle's choice of T, callable by clients'
-- connections without begin_write_internal, which also takes a T of the
-- caller's choosing.
CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN @SCHEMA@.begin_write_internal(NULL, NULL); END $$;

CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write(p_incarnation bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN @SCHEMA@.begin_write_internal(NULL, p_incarnation); END $$;

-- RETAIN HISTORY is the owner's to change, as ALTER TABLE is. The caller is
-- the session's current role (this function runs as the schema's owner).
CREATE OR REPLACE FUNCTION @SCHEMA@.set_retention(p_rel regclass, p_ms bigint) RETURNS bool
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller text := CASE current_setting('role') WHEN 'none' THEN session_user ELSE current_setting('role') END;
BEGIN
    IF @SCHEMA@.current_write_ts() IS NULL THEN
        RAISE EXCEPTION 'RETAIN HISTORY of % can only be changed through mzproxy', p_rel
            USING ERRCODE = 'MZ003';
    END IF;
    IF NOT pg_has_role(caller, (SELECT relowner FROM pg_class WHERE oid = p_rel), 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', (SELECT relname FROM pg_class WHERE oid = p_rel)
            USING ERRCODE = '42501';
    END IF;
    IF p_ms IS NOT NULL AND p_ms < 0 THEN
        RAISE EXCEPTION 'RETAIN HISTORY must not be negative' USING ERRCODE = '22023';
    END IF;
    UPDATE @SCHEMA@.collections c SET retain_ms = p_ms
      FROM @SCHEMA@.catalog k
     WHERE k.id = c.id AND k.oid = p_rel AND k.kind = 'table' AND k.dropped_ts IS NULL;
    RETURN FOUND;
END
$$;

-- Nothing here is PUBLIC's to run, but what a client's own connection runs
-- for mzproxy: the oracle's read timestamp, taking and appending a write
-- slot (the timestamp is the oracle's choice), waiting for the slot,
-- RETAIN HISTORY (owner only, above) and the lost-lease abort; and the
-- two read-only helpers of LoadCatalog's query (view text, type names).
-- Registration, fencing, compaction, holds and apply_write are the
-- proxy's, on its own connections. (Per-schema default privileges cannot
-- take away what PUBLIC gets by default, so gen_triggers revokes on the
-- trigger functions it makes, above.)
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @SCHEMA@ FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @SCHEMA@.now_ms(), @SCHEMA@.read_ts(), @SCHEMA@.begin_write(), @SCHEMA@.begin_write(bigint),
    @SCHEMA@.begin_write_occ(bigint, bigint), @SCHEMA@.commit_write(bigint), @SCHEMA@.commit_write_tx(bigint),
    @SCHEMA@.await_slot(), @SCHEMA@.set_retention(regclass, bigint), @SCHEMA@.raise_fenced(bigint),
    @SCHEMA@.view_definition(oid), @SCHEMA@.type_name(oid, int4)
    TO PUBLIC;

-- Fail the install rather than leave a function trusting a setting or an
-- advisory lock.
DO $check$
DECLARE
    f record;
BEGIN
    FOR f IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
              WHERE p.pronamespace = '@SCHEMA@'::regnamespace AND p.proname NOT IN ('set_slot', 'write_slot')
                AND (p.prosrc ~ $$(current_setting|set_config)\('mzproxy\.(write_ts|expected_upper)'$$
                     OR p.prosrc ~ $$'mzproxy\.in_ddl', 'on'|'mzproxy\.in_ddl', true\), ''\) = 'on'|pg_advisory$$) LOOP
        RAISE EXCEPTION 'mzproxy install: % still trusts a setting or a lock any role can take', f.fn;
    END LOOP;
END
$check$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (6);
