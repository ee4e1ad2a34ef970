-- mzproxy backend state, version 21 to 22: an INSERT of a key whose
-- deletion committed at a later T fails with 40001, and so does an UPDATE
-- that moves a row to such a key (issue 14).
--
-- A transaction's T is chosen once its first history-writing statement
-- holds its row locks (frontier.sql), so a statement whose own stamp_ts
-- chose T is placed after every write it waited for. A statement of a
-- transaction whose T is already chosen (a later statement of an
-- autocommit query string of several statements; a block after DDL or
-- after a read of its own writes at a timestamp) may wait for a write that
-- commits at a later T. UPDATE and DELETE then meet the version that
-- write left and fail with
-- 40001 (raise_overtaken). An INSERT met nothing: Y chose T_Y, X deleted
-- key k and committed at T_X > T_Y, and Y's INSERT of k (which waited on
-- X's delete through the primary key's index, or came after it) opened a
-- version of k at T_Y while the version X retracted stays visible until
-- T_X: between the two, history showed two versions of one key.
--
-- Now the _ins function of a table with a non-deferrable primary key
-- looks, when its slot was not pending (so T was not chosen by its own
-- stamp_ts call) and T is not a block's placeholder, for versions
-- of the inserted keys that end after T (through the key's lookup mirror,
-- (key columns, mz_to)), before it writes its own, and locks the last
-- one of each key (FOR NO KEY UPDATE). The search is a LATERAL subquery
-- with ORDER BY mz_to DESC LIMIT 1: a nested loop of backward probes of
-- the mirror whatever plan PL/pgSQL cached (the function has no SET
-- clauses to keep hash joins off: each costs every call), estimated as
-- one row each (a plan is made again for each call, but from the parse
-- tree of the session's first, whose transition table's size it keeps: a
-- first bulk INSERT made the plan without the LIMIT cost millions and run
-- with JIT, 60 ms, for each later single row), and the filter on Infinity
-- stays outside, so an open version is locked too:
--
--  * One that ends at a finite mz_to > T was retracted by a write at a
--    later T. At READ COMMITTED every statement of the function takes a
--    new snapshot, after the INSERT's own wait, so it sees that write.
--    History would show both versions between T and mz_to: the statement
--    fails with 40001 (raise_deleted_later). This is exact: such a
--    version overlaps the new one, and a version of the key the
--    transaction retracted itself ends at T, not after it.
--  * One still open (mz_to Infinity) is either retracted by this same
--    statement, whose writable CTEs delete the key and insert it again and
--    whose DELETE trigger has not run yet (its INSERT ended first: INSERT
--    ... SELECT ... FROM d LIMIT 1), which is no conflict; or, at
--    REPEATABLE READ or SERIALIZABLE, was retracted by a transaction that
--    committed after this transaction's snapshot. The lock tells them
--    apart: it is PostgreSQL's own 40001 ("could not serialize access due
--    to concurrent update") for a row changed after the snapshot. That
--    transaction's T is unknown here, so this may fail a transaction
--    whose conflicting delete was at a lower T (chosen before ours,
--    committed after our snapshot), exactly as PostgreSQL fails an UPDATE
--    or DELETE of such a row at REPEATABLE READ.
--  * Only the last version of a key is looked at: an open one hides a
--    finite one behind it only when the open one was written after that
--    retraction, so after T, and then the DELETE trigger that closes it
--    fails the statement (raise_overtaken).
--
-- Only such versions are locked: none in the common case, so the search
-- writes nothing.
--
-- An UPDATE that moves a row to a key deleted at a later T shows the same
-- two versions. The _upd function searches the new rows' keys the same
-- way, after its statement, in its branch for a T chosen before the
-- statement, leaving out the statement's own new versions (open from T;
-- another transaction's open version of such a key would be a row the
-- UPDATE could not have made), and not when a version it closed was
-- written after T (raise_overtaken then fails it, named as before). That
-- branch pays one more statement (an index probe per row) when T is
-- positive: a later statement of an autocommit query string, a block
-- after its T was fixed. An autocommit UPDATE (its trigger chose T) and a
-- block's UPDATE before its T is fixed (placeholder) do not run it, nor
-- any new expression.
--
-- The common path: an autocommit INSERT's trigger finds its slot pending
-- and lets stamp_ts choose T, with no search (as the retraction skips its
-- search for a version written at T, write_trim.sql), and without the
-- MZ002 check of a NULL T, which stamp_ts never returns for a pending
-- slot (a forged one fails there with 42501). The test of the setting
-- replaces that check; a block's INSERT before its T is fixed (a negative
-- placeholder) skips the search too: its T is chosen at COMMIT, after
-- every wait. Measured with callgrind (a single-user backend, 300
-- autocommit single-row INSERTs into an empty table with a primary key,
-- BEGIN; begin_write_occ; INSERT; COMMIT each, two tables of one database
-- whose _ins functions are this version's and version 19's, alternated
-- twice): about 4.5k instructions more per INSERT of some 830k (0.5%), the
-- setting test's expression (PL/pgSQL builds a simple expression's state
-- again in each transaction) against the NULL test's. A first version
-- that kept the NULL test and added _fresh as _upd has it cost 10.8k.
--
-- Not caught, still:
--
--  * tables without a primary key, or with a deferrable one (no key to
--    look up; a keyless table has no two versions "of one key" anyway),
--    and unique indexes other than the primary key: an INSERT of a value
--    of another unique column whose row was deleted at a later T shows
--    both rows between the two timestamps;
--  * an INSERT (or UPDATE) whose own transaction deletes the key again
--    later at T fails, although the version it opened would then have
--    been deleted outright.

-- The failure of an INSERT that would open a version of a key whose
-- version another transaction retracted at p_deleted > p_t.
CREATE FUNCTION @SCHEMA@.raise_deleted_later(p_rel oid, p_deleted bigint, p_t bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'could not serialize access due to concurrent delete'
        USING ERRCODE = '40001',
              DETAIL = format('mzproxy: a row of %s with a key this statement inserts was deleted at timestamp %s, after this transaction''s timestamp %s.',
                              p_rel::regclass, p_deleted, p_t),
              HINT = 'The transaction might succeed if retried.';
END
$$;

REVOKE ALL ON FUNCTION @SCHEMA@.raise_deleted_later(oid, bigint, bigint) FROM PUBLIC;

-- Edits to gen_triggers as version 19 left it; each must apply exactly
-- once. The _ins function of a table with a non-deferrable primary key
-- gets the test of a pending slot and the search, the _upd function the
-- search in its branch for a T chosen before; the _ins function's text is
-- compared too before gen_triggers decides nothing changed (until now
-- only _upd's was).
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        [$$    fresh_sql text := '';
$$, $$    fresh_sql text := '';
    ins_check text := '';
    ins_src text;
$$],
        [$$        fresh_sql := $r$
    _fresh := left(current_setting('mzproxy.write_ts', true), 4) = '0 - ';$r$;
$$, $$        fresh_sql := $r$
    _fresh := left(current_setting('mzproxy.write_ts', true), 4) = '0 - ';$r$;
        -- (Version 22, see ins_gap.sql.) A pending slot: this
        -- statement's stamp_ts chooses T. Otherwise the MZ002 check, and
        -- a version of an inserted key that ends after T.
        ins_check := format($r$
    IF current_setting('mzproxy.write_ts', true) ^@ '0 - ' THEN
        _t := @SCHEMA@.stamp_ts(TG_RELID);
    ELSE%s
    IF _t > 0 THEN
        SELECT max(s.mz_to) INTO _m
          FROM mz_new n, LATERAL (SELECT x.mz_to FROM %s x WHERE %s x.mz_to > _t
                                     ORDER BY x.mz_to DESC LIMIT 1 FOR NO KEY UPDATE) s
         WHERE s.mz_to < 9223372036854775807;
        IF _m IS NOT NULL THEN
            PERFORM @SCHEMA@.raise_deleted_later(TG_RELID, _m, _t);
        END IF;
    END IF;
    END IF;$r$, check_sql, h,
            (SELECT string_agg(format('x.%I %s n.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)));
$$],
        [$$        upd_insert := E', i AS (' || left(insert_sql, -1) || E'\n    )';
$$, $$        upd_insert := E', i AS (' || left(insert_sql, -1) || E'\n    )';
        -- (Version 22, see ins_gap.sql.) After an UPDATE whose T was
        -- chosen before it, a version of a new row's key that ends after
        -- T, other than the statement's own new ones (open from T); not
        -- when a version it closed was written after T (_m: the check
        -- after the statement fails it, naming that).
        upd_check := format($r$
    IF _t > 0 AND coalesce(_m, 0) <= _t THEN
        SELECT max(s.mz_to) INTO _d
          FROM mz_new n, LATERAL (SELECT x.mz_to FROM %s x WHERE %s x.mz_to > _t
                                     AND NOT (x.mz_from = _t AND x.mz_to = 9223372036854775807)
                                     ORDER BY x.mz_to DESC LIMIT 1 FOR NO KEY UPDATE) s
         WHERE s.mz_to < 9223372036854775807;
        IF _d IS NOT NULL THEN
            PERFORM @SCHEMA@.raise_deleted_later(TG_RELID, _d, _t);
        END IF;
    END IF;$r$, h,
            (SELECT string_agg(format('x.%I %s n.%I AND ', k, kop[i], k), '' ORDER BY i) FROM unnest(pk) WITH ORDINALITY AS u(k, i)));
$$],
        [$$|| E'\n    ELSE' || retract_cte || upd_insert || retract_select || E'\n    END IF;' || retract_end;$$,
         $$|| E'\n    ELSE' || retract_cte || upd_insert || retract_select || upd_check || E'\n    END IF;' || retract_end;$$],
        [$$    upd_sql text;
$$, $$    upd_sql text;
    upd_check text;
$$],
        [$$_fresh bool;\nBEGIN%s%s%s$$, $$_fresh bool; _d bigint;\nBEGIN%s%s%s$$],
        [$$_fresh bool;
BEGIN%s%s%s$$, $$_fresh bool; _d bigint;
BEGIN%s%s%s$$],
        [$$    IF triggers_ok AND EXISTS (
$$, $$    ins_src := format(E'\nDECLARE _t bigint;%s\nBEGIN%s%s\n    RETURN NULL;\nEND\n',
                      CASE WHEN ins_check = '' THEN '' ELSE ' _m bigint;' END,
                      CASE WHEN ins_check = '' THEN check_sql ELSE ins_check END, insert_sql);
    IF triggers_ok AND EXISTS (
            SELECT 1 FROM pg_proc p
             WHERE p.oid = to_regprocedure(fn || '_ins()') AND p.prosrc = ins_src) AND EXISTS (
$$],
        [$q$CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER %s
AS $body$
DECLARE _t bigint;
BEGIN%s%s
    RETURN NULL;
END
$body$$f$, fn || '_ins', settings, check_sql, insert_sql);$q$,
         $q$CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER %s
AS $body$%s$body$$f$, fn || '_ins', settings, ins_src);$q$]];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'storage version 22: edit % of gen_triggers does not apply once', i;
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (22);
