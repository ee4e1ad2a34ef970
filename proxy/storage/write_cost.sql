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
--  * The history trigger of a table with a non-deferrable primary key
--    retracts with one UPDATE that closes the version of each old row
--    (found by key through the lookup index, checked by whole-row text),
--    and its UPDATE trigger inserts the new versions in the same statement.
--    Before, a materialized CTE chose the version, two more deleted or
--    closed it, and three subqueries counted. The rare cases keep their
--    meaning: a version written at this T is preferred (NOT EXISTS keeps
--    an older one of the same key and text open, as when a statement's
--    writable CTEs delete and insert the same key), and one written and
--    retracted at T, closed to the empty [T, T), is deleted outright by a
--    second statement that runs only then. Tables without a key (or with a
--    deferrable one) keep the multiset retraction.
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

-- The history triggers of tables with a non-deferrable primary key: one
-- statement retracts (and, for UPDATE, inserts), see the header. Edits to
-- gen_triggers as version 8 left it; each must apply as often as given.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        [$$    triggers_ok bool;
$$, $$    triggers_ok bool;
    retract_cte text;
    retract_end text;
    retract_check text;
    upd_sql text;
$$, '1'],
        [$$DECLARE _t bigint; _k bigint; _n bigint; _m bigint;$$,
         $$DECLARE _t bigint; _k bigint; _n bigint; _m bigint; _z bigint;$$, '3'],
        [$$        retract_sql := format($r$
    WITH c AS MATERIALIZED (
        SELECT x.tid, x.mz_from FROM mz_old d CROSS JOIN LATERAL (
            SELECT h.ctid AS tid, h.mz_from FROM %s h
             WHERE %s h.mz_to = 9223372036854775807 AND %s = %s
             ORDER BY h.mz_from = _t DESC LIMIT 1) x
    ), del AS (
        DELETE FROM %s h USING c WHERE h.ctid = c.tid AND c.mz_from = _t RETURNING 1
    ), upd AS (
        UPDATE %s h SET mz_to = _t FROM c WHERE h.ctid = c.tid AND c.mz_from <> _t RETURNING c.mz_from
    )
    SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM upd), (SELECT count(*) FROM mz_old), (SELECT max(mz_from) FROM upd)
      INTO _k, _n, _m;$r$, h, kjoin, htext, otext, h, h);
$$, $$        -- (Version 9: one statement, see write_cost.sql.) An older
        -- version of the key with the same text stays open when one
        -- written at _t is there; versions closed at their own _t are
        -- deleted after the statement.
        retract_cte := format($r$
    WITH u AS (
        UPDATE %1$s h SET mz_to = _t FROM mz_old d
         WHERE %2$s h.mz_to = 9223372036854775807 AND %3$s = %4$s
           AND (h.mz_from = _t OR NOT EXISTS (
                SELECT 1 FROM %1$s x
                 WHERE %5$s x.mz_to = 9223372036854775807 AND x.mz_from = _t AND %6$s = %4$s))
        RETURNING h.mz_from
    )$r$, h, kjoin, htext, otext,
            (SELECT string_agg(format('x.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)),
            @SCHEMA@.row_text(p_id, 'x.'));
        retract_end := format($r$
    SELECT count(*), (SELECT count(*) FROM mz_old), max(u.mz_from), count(*) FILTER (WHERE u.mz_from = _t)
      INTO _k, _n, _m, _z FROM u;
    IF _z > 0 THEN
        DELETE FROM %s h USING mz_old d WHERE %s h.mz_to = _t AND h.mz_from = _t;
    END IF;$r$, h, kjoin);
        retract_sql := retract_cte || retract_end;
        upd_sql := retract_cte || E', i AS (' || left(insert_sql, -1) || E'\n    )' || retract_end;
$$, '1'],
        [$$    retract_sql := retract_sql || $r$
    IF _k <> _n THEN$$, $$    retract_check := $r$
    IF _k <> _n THEN$$, '1'],
        [$$    END IF;$r$;

    triggers_ok := $$, $$    END IF;$r$;
    retract_sql := retract_sql || retract_check;
    upd_sql := coalesce(upd_sql || retract_check, retract_sql || insert_sql);

    triggers_ok := $$, '1'],
        -- The _upd function is upd_sql (retraction and insertion).
        [$$check_sql, retract_sql, insert_sql)$$, $$check_sql, upd_sql, '')$$, '2']];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> edits[i][3]::int THEN
            RAISE EXCEPTION 'storage version 9: edit % of gen_triggers does not apply % time(s)', i, edits[i][3];
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

-- The trigger functions of every managed table made again (the triggers,
-- which name them by oid, stay), as mzproxy's own DDL.
DO $regen$
DECLARE
    k record;
BEGIN
    PERFORM set_config('mzproxy.in_ddl', @SCHEMA@.ddl_mark(), true);
    FOR k IN SELECT c.id FROM @SCHEMA@.catalog c
              WHERE c.kind = 'table' AND c.dropped_ts IS NULL AND to_regclass(c.history) IS NOT NULL
                AND EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = c.oid) LOOP
        PERFORM @SCHEMA@.gen_triggers(k.id);
    END LOOP;
    PERFORM set_config('mzproxy.in_ddl', '', true);
END
$regen$;

REVOKE ALL ON FUNCTION @SCHEMA@.key_tag(text, text) FROM PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (9);
