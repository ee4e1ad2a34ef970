-- mzproxy backend state, version 30 to 31: the history write of an
-- autocommit write, cheaper for the backend (issue 14). docs/write-cost.md
-- has the method and the figures.
--
--  * An UPDATE of a table with a non-deferrable primary key whose trigger
--    chose T (the slot was pending) closes the old versions and inserts
--    the new ones with two plain statements and compares their row counts
--    (GET DIAGNOSTICS), instead of one statement of two writable CTEs
--    whose counts and max(mz_from) an aggregate over the closed versions
--    and a count of mz_old computed. The close takes only versions written
--    before T. The counts differ only when a current version of an old
--    row's key was written at or after T, or the history is out of step;
--    only then does the trigger look further: a version after T is counted
--    and reported (40001 through raise_overtaken, as before), one at T
--    (another transaction's, sharing T) is retracted at T, so deleted, as
--    the one statement did through _z; a missing one fails the count check
--    (XX000, as before). Kept: the count check, the overtaken check, the
--    insert-after-later-delete check (ins_gap.sql: the branch for a T
--    chosen before the statement, unchanged), DELETE's statement
--    (unchanged: without an INSERT, the count of mz_old would be a
--    statement of its own).
--  * A table without a usable key (none, or a deferrable primary key):
--    its INSERT, UPDATE and DELETE triggers choose T in their own query
--    when the slot is pending, as a keyed table's have since version 27
--    (write_lean.sql), instead of through a nested stamp_ts call. The query
--    is the keyed tables' text, moved ahead of gen_triggers' branch on the
--    key. A value that only looks pending finds no row there: _t stays
--    NULL and the general path's stamp_ts fails the write with 42501, as
--    before; a write outside mzproxy (no slot) still fails with MZ002.
--    Their retraction, by whole-row text through mz_hash, is unchanged.
--    TRUNCATE keeps stamp_ts (truncate_ts follows it).
--
-- Counted with callgrind, per autocommit write through a single-user
-- backend, version 29 -> 31: UPDATE of a random pgbench_accounts row 691k
-- -> 652k (168k directly), the one-row counter (pgbench_branches bid = 1)
-- 699k -> 668k (129k), blind INSERT into pgbench_history 503k -> 492k
-- (109k). Of the UPDATE's 39k, 20k is the count of mz_old alone.
--
-- Measured and left (docs/write-cost.md):
--
--  * Two statements with the counts kept (the CTE's UPDATE, then the
--    INSERT): 5k more than one.
--  * A layout whose close is a HOT update (no index on mz_to: the key
--    mirror on the key alone, fillfactor 80, the (mz_to, mz_from) index
--    dropped): 655k per UPDATE with today's trigger, so at most 36k to
--    win (all 220 closes HOT), while compaction, reads at a timestamp and
--    a block's restamp, which find versions by mz_to through that index,
--    would need another way to find them.
--  * The six SET clauses that fix a keyless row's text form for its
--    mz_hash (DateStyle, TimeZone, ...): 18.6k of the blind INSERT; the
--    retraction looks versions up by the hash of that text, and a hash of
--    another form would change every current version's.

-- Edits to gen_triggers as version 29 left it; each must apply exactly
-- once.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        -- Without a usable key: the pending slot's T chosen in the
        -- trigger's own query, the general path after it when that found
        -- no row; the retraction closes the general path's IF.
        [$$    ELSE
        retract_sql := format($r$
$$, $$    ELSE
        -- (Version 31, see hist_write.sql.)
        fresh_sql := $r$
    IF current_setting('mzproxy.write_ts', true) ^@ '0 - ' THEN$r$ || fresh_stamp || $r$
    END IF;
    IF _t IS NULL THEN$r$;
        ins_check := fresh_sql || check_sql || E'\n    END IF;';
        retract_sql := E'\n    END IF;' || format($r$
$$],
        [$$CASE WHEN ins_check = '' THEN '' ELSE ' _m bigint;' END$$,
         $$CASE WHEN pk IS NOT NULL AND NOT pk_deferrable THEN ' _m bigint;' ELSE '' END$$],
        [$$    fresh_stamp text;
$$, $$    fresh_stamp text;
    fresh_upd text;
$$],
        -- An UPDATE whose trigger chose T: two plain statements and their
        -- row counts; the versions at or after T only when those differ.
        [$$        upd_sql := E'\n    END IF;\n    IF _fresh THEN' || fresh_cte || upd_insert || retract_select
$$, $$        -- (Version 31, see hist_write.sql.) An UPDATE whose trigger
        -- chose T: the current versions written before T closed, the new
        -- versions inserted, each by a plain statement, and the two row
        -- counts compared. They differ only when a current version of an
        -- old row's key was written at or after T (or the history is out
        -- of step). One after T is counted as retracted and reported
        -- (_m: the statement fails). One at T is another transaction's
        -- (sharing T) and is retracted at T, so deleted: every current
        -- version at T of an old row's key is deleted, this statement's
        -- own among them, and this statement's for those keys inserted
        -- again; the difference is the other transactions'. _z, which has
        -- the general path delete versions closed at T, stays 0: none is.
        fresh_upd := format($r$
    UPDATE %1$s h SET mz_to = _t FROM mz_old d
     WHERE %2$s h.mz_to = 9223372036854775807 AND h.mz_from < _t;
    GET DIAGNOSTICS _k = ROW_COUNT;%3$s
    GET DIAGNOSTICS _n = ROW_COUNT;
    IF _k <> _n THEN
        SELECT max(h.mz_from), _k + count(*) INTO _m, _k
          FROM mz_old d JOIN %1$s h ON %2$s h.mz_to = 9223372036854775807 AND h.mz_from > _t;
        DELETE FROM %1$s h USING mz_old d WHERE %2$s h.mz_to = 9223372036854775807 AND h.mz_from = _t;
        GET DIAGNOSTICS _z = ROW_COUNT;%4$s
         WHERE EXISTS (SELECT FROM mz_old d WHERE %5$s true);
        GET DIAGNOSTICS _d = ROW_COUNT;
        _k := _k + _z - _d;
        _z := 0;
    END IF;$r$, h, kjoin, insert_sql, replace(left(insert_sql, -1), E'\n    ', E'\n        '),
            (SELECT string_agg(format('n.%I %s d.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)));
        upd_sql := E'\n    END IF;\n    IF _fresh THEN' || fresh_upd
$$]];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
    branch text := E'    IF pk IS NOT NULL AND NOT pk_deferrable THEN\n';
    fresh_stamp text;
BEGIN
    -- The assignment of stamp_ts' query for a pending slot (write_lean.sql)
    -- moves, as it is, from the keyed branch to ahead of the branch on the
    -- key: every table's triggers use it now.
    fresh_stamp := substring(def from '(        -- \(Version 27, see write_lean\.sql\.\) stamp_ts'' query for a.*?IS NOT NULL;\$r\$;\n)');
    IF fresh_stamp IS NULL OR (length(def) - length(replace(def, branch, ''))) / length(branch) <> 1 THEN
        RAISE EXCEPTION 'storage version 31: the assignment of fresh_stamp does not move once in gen_triggers';
    END IF;
    def := replace(replace(def, fresh_stamp, ''), branch, fresh_stamp || E'\n' || branch);
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'storage version 31: edit % of gen_triggers does not apply once', i;
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (31);
