-- mzproxy backend state, version 8 to 9: a managed write's backend cost
-- (issue 14).
--
-- An autocommit write is one implicit transaction:
-- SELECT begin_write_occ(inc, 0); <the client's statement>. Measured with
-- track_functions = all (a random single-row UPDATE of t(id int primary
-- key, v int)), per write: the history trigger 200 µs (127 of it its own
-- statements), begin_write_occ 101, stamp_ts 74; tag, a SHA-256 over the
-- write key read by a query of its own, ran three times at 15 µs. Now:
--
--  * begin_write_occ takes a fresh slot with two statements of its own
--    (the gate; the incarnation check, the write count and the tag in one
--    query) instead of five nested functions.
--  * stamp_ts checks a pending slot, chooses T and tags it in one query
--    (the key read once, both hashes computed there), instead of
--    write_slot, choose_ts, pinned_ts and set_slot with a tag query each.
--    The slot keeps its form and meaning ('t e tag' in mzproxy.write_ts,
--    the tag as tag() makes it): every other reader is unchanged, and a
--    value that is not exactly the pending slot this transaction was given
--    takes the general path, which fails with 42501 as before.
--
-- The hot functions keep SET search_path: without it, every name in them
-- (functions, operators, casts, types) would resolve through the caller's
-- search_path, where a role may put its own objects ahead of pg_catalog.

-- The tag of value p_v in the current transaction under key p_key: the one
-- formula, inlined into the queries that read the key (a SQL function with
-- no FROM, not strict, no SET: the planner inlines it).
CREATE FUNCTION @SCHEMA@.key_tag(p_key text, p_v text) RETURNS text
LANGUAGE sql VOLATILE
AS $$ SELECT encode(sha256(convert_to(p_key || ' ' || pg_current_xact_id()::text || ' ' || p_v, 'UTF8')), 'hex') $$;

CREATE OR REPLACE FUNCTION @SCHEMA@.tag(p_v text) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN (SELECT @SCHEMA@.key_tag(k.k, p_v) FROM @SCHEMA@.write_key k);
END
$$;

-- The slot mzproxy takes for a client's writes (see frontier.sql): T
-- pending, returns 0. A transaction that already has a slot (or a value
-- in the setting) goes through open_write, which checks it.
CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write_occ(p_inc bigint, p_floor bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    may_write bool;
    pending text;
BEGIN
    IF coalesce(current_setting('mzproxy.write_ts', true), '') <> '' THEN
        RETURN @SCHEMA@.open_write(NULL, p_inc);
    END IF;
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    -- The incarnation is checked with the gate held (see open_write), by
    -- check_incarnation's condition, inline so that one query does it all
    -- (not by a view: pg_dump's sessions may not read one). The write is
    -- counted even when the check fails: that only makes the next pin
    -- move P one further, and the transaction fails anyway.
    SELECT p_inc IS NULL OR coalesce((
               SELECT i.retired_at IS NULL
                      AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                 FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false),
           '0 - ' || @SCHEMA@.key_tag(k.k, '0 -'), nextval('@SCHEMA@.writes')
      INTO may_write, pending FROM @SCHEMA@.write_key k;
    IF NOT may_write THEN
        PERFORM @SCHEMA@.raise_fenced(p_inc);
    END IF;
    PERFORM set_config('mzproxy.write_ts', pending, true);
    RETURN 0;
END
$$;

-- The timestamp a history trigger of table p_rel stamps (see frontier.sql).
-- The common case, the pending slot begin_write_occ made in this
-- transaction, is checked, given T = GREATEST(clock, P + 1) and tagged in
-- one query; anything else is read through write_slot, which refuses a
-- value mzproxy did not make (42501).
CREATE OR REPLACE FUNCTION @SCHEMA@.stamp_ts(p_rel oid) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v text := current_setting('mzproxy.write_ts', true);
    t bigint;
    key text;
    list text;
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
    t := (SELECT s.t FROM @SCHEMA@.write_slot() s);
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

REVOKE ALL ON FUNCTION @SCHEMA@.key_tag(text, text) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (9);
