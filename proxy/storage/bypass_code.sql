-- mzproxy backend state, version 29 to 30: an UPDATE or DELETE of a
-- managed table with a primary key, run past mzproxy in a session that
-- never set mzproxy.write_ts, fails with MZ002 again.
--
-- Since version 27 (write_lean.sql) such a table's trigger begins with
--   _fresh := left(current_setting('mzproxy.write_ts', true), 4) = '0 - ';
-- In a session where the setting was never set, current_setting(..., true)
-- is NULL, so _fresh was NULL, and the general path's IF NOT _fresh (which
-- calls stamp_ts and raises MZ002 without a slot) was skipped: the
-- retraction then ran with T NULL and failed on history's NOT NULL column
-- (23502). The write never committed, but the client saw a constraint of
-- mzproxy's history table instead of "cannot write to managed table ...
-- outside mzproxy". A session that had set the setting once (to '' at the
-- end of its transaction) got MZ002. Now _fresh is false when the setting
-- is missing.

-- Edit to gen_triggers as version 29 left it; it must apply exactly once.
DO $edit$
DECLARE
    old text := $$_fresh := left(current_setting('mzproxy.write_ts', true), 4) = '0 - ';$$;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'storage version 30: the edit of gen_triggers does not apply once';
    END IF;
    EXECUTE replace(def, old, $$_fresh := coalesce(left(current_setting('mzproxy.write_ts', true), 4) = '0 - ', false);$$);
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (30);
