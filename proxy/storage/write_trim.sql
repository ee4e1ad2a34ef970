-- mzproxy backend state, version 11 to 12: an autocommit write's backend
-- cost, trimmed (issue 14).
--
-- An autocommit write is one implicit transaction:
-- SELECT begin_write_occ(inc, 0); <the client's statement>. Measured by
-- instructions (callgrind, a single-user backend, a random single-row
-- UPDATE of a table of 10,000 rows with a primary key, per write): the
-- plain UPDATE 183k; the managed one 906k. Of the 723k more: the extra
-- statement 30k, begin_write_occ 152k, the history trigger's own call
-- (SECURITY DEFINER, three SET clauses, transition tables) 34k, stamp_ts
-- 123k, the trigger's retraction statement 384k (the NOT EXISTS for a
-- version already written at T 66k of it; executor start-up of its plan,
-- the history row's non-HOT update, four index insertions and page
-- pruning most of the rest). The SET clauses of begin_write_occ and the
-- trigger cost 27k together (3%): they stay. Now:
--
--  * The retraction skips the search for a version written at T when the
--    trigger found the slot pending, that is, when its stamp_ts call chose
--    T: the transaction has written nothing at T before (every path that
--    chooses T records it in the slot, and a value that only looks
--    pending fails in stamp_ts with 42501), so there is none to keep open.
--    A later statement of the transaction, or a second trigger of the same
--    statement (writable CTEs), runs the statement with the search, as
--    before. -59k.
--  * stamp_ts checks the pending slot, chooses T, tags it and sets it in
--    one query, and reads P with pg_sequence_last_value (NULL when the
--    sequence was never called, as is_called says) instead of a scan of
--    the sequence. -11k.
--  * begin_write_occ sets the pending slot in the query that checks the
--    incarnation and counts the write (one statement fewer; when the check
--    fails, raise_fenced fails the transaction, which undoes the setting).
--    -8k.
--
-- 906k -> 828k per write (-8.6%).

-- The slot mzproxy takes for a client's writes (see write_cost.sql).
CREATE OR REPLACE FUNCTION @SCHEMA@.begin_write_occ(p_inc bigint, p_floor bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    may_write bool;
BEGIN
    IF coalesce(current_setting('mzproxy.write_ts', true), '') <> '' THEN
        RETURN @SCHEMA@.open_write(NULL, p_inc);
    END IF;
    LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
    -- The incarnation is checked with the gate held (see open_write), by
    -- check_incarnation's condition, inline so that one query does it all
    -- (not by a view: pg_dump's sessions may not read one). The write is
    -- counted and the slot set even when the check fails: that only makes
    -- the next pin move P one further, and the transaction fails anyway.
    SELECT p_inc IS NULL OR coalesce((
               SELECT i.retired_at IS NULL
                      AND i.heartbeat_at >= clock_timestamp() - i.grace_ms * interval '1 millisecond'
                 FROM @SCHEMA@.incarnations i WHERE i.id = p_inc), false),
           set_config('mzproxy.write_ts', '0 - ' || @SCHEMA@.key_tag(k.k, '0 -'), true),
           nextval('@SCHEMA@.writes')
      INTO may_write FROM @SCHEMA@.write_key k;
    IF NOT may_write THEN
        PERFORM @SCHEMA@.raise_fenced(p_inc);
    END IF;
    RETURN 0;
END
$$;

-- The timestamp a history trigger of table p_rel stamps (see frontier.sql,
-- write_cost.sql and block_cost.sql).
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
        -- its tag set in the same query. P is read as pinned_ts reads it;
        -- after a crash (the sequence not yet called) pinned_ts gives its
        -- floor.
        SELECT x.t, set_config('mzproxy.write_ts', x.t::text || ' - ' || @SCHEMA@.key_tag(x.k, x.t::text || ' -'), true)
          INTO t, slot
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t
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
    IF t = 0 THEN
        RETURN @SCHEMA@.choose_ts();
    END IF;
    RETURN t;
END
$$;

-- The retracting trigger functions of tables with a non-deferrable primary
-- key run their statement in two forms (see the header): _fresh, set before
-- stamp_ts, chooses. Edits to gen_triggers as version 11 left it; each must
-- apply as often as given.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        [$$    upd_sql text;
$$, $$    upd_sql text;
    fresh_cte text;
    retract_select text;
    upd_insert text;
    fresh_sql text := '';
$$, '1'],
        [$$DECLARE _t bigint; _k bigint; _n bigint; _m bigint; _z bigint;$$,
         $$DECLARE _t bigint; _k bigint; _n bigint; _m bigint; _z bigint; _fresh bool;$$, '3'],
        [$$        retract_end := format($r$
    SELECT count(*), (SELECT count(*) FROM mz_old), max(u.mz_from), count(*) FILTER (WHERE u.mz_from = _t)
      INTO _k, _n, _m, _z FROM u;
    IF _z > 0 THEN
        DELETE FROM %s h USING mz_old d WHERE %s h.mz_to = _t AND h.mz_from = _t;
    END IF;$r$, h, kjoin);
        retract_sql := retract_cte || retract_end;
        upd_sql := retract_cte || E', i AS (' || left(insert_sql, -1) || E'\n    )' || retract_end;
$$, $$        -- (Version 12, see write_trim.sql.) The same statement without
        -- the search for a version written at _t, for a trigger whose
        -- stamp_ts chose T (the slot was pending): the transaction has
        -- written none yet.
        fresh_cte := format($r$
    WITH u AS (
        UPDATE %1$s h SET mz_to = _t FROM mz_old d
         WHERE %2$s h.mz_to = 9223372036854775807 AND %3$s = %4$s
        RETURNING h.mz_from
    )$r$, h, kjoin, htext, otext);
        retract_select := $r$
    SELECT count(*), (SELECT count(*) FROM mz_old), max(u.mz_from), count(*) FILTER (WHERE u.mz_from = _t)
      INTO _k, _n, _m, _z FROM u;$r$;
        retract_end := format($r$
    IF _z > 0 THEN
        DELETE FROM %s h USING mz_old d WHERE %s h.mz_to = _t AND h.mz_from = _t;
    END IF;$r$, h, kjoin);
        upd_insert := E', i AS (' || left(insert_sql, -1) || E'\n    )';
        retract_sql := E'\n    IF _fresh THEN' || fresh_cte || retract_select
                       || E'\n    ELSE' || retract_cte || retract_select || E'\n    END IF;' || retract_end;
        upd_sql := E'\n    IF _fresh THEN' || fresh_cte || upd_insert || retract_select
                   || E'\n    ELSE' || retract_cte || upd_insert || retract_select || E'\n    END IF;' || retract_end;
        fresh_sql := $r$
    _fresh := left(current_setting('mzproxy.write_ts', true), 4) = '0 - ';$r$;
$$, '1'],
        [$$check_sql, upd_sql, '')$$, $$fresh_sql || check_sql, upd_sql, '')$$, '2'],
        [$$check_sql, retract_sql);$$, $$fresh_sql || check_sql, retract_sql);$$, '1']];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> edits[i][3]::int THEN
            RAISE EXCEPTION 'storage version 12: edit % of gen_triggers does not apply % time(s)', i, edits[i][3];
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (12);
