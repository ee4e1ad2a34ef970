-- mzproxy backend state, version 43 to 44 (session 20, issue 14): the
-- write slot as one flat statement of the proxy's, and the history
-- triggers' gate taken by their T query itself, not by a LOCK statement.
--
-- The slot. Until version 43 mzproxy took an autocommit write's slot by
-- calling begin_write_occ, a SECURITY DEFINER PL/pgSQL function with a SET
-- search_path frame, a LOCK TABLE, a query for the incarnation check and
-- a set_config. Since version 42 nothing in it needs a right the caller
-- lacks or proves anything: the request '0 - pending' is what any role may
-- set, and the code that chooses T from it takes the gate and counts the
-- write itself (slot_pending.sql). So the proxy now sends that work as one
-- plain statement of its own (storage.OpenWriteFor), run as the client's
-- role with every name, operator and type qualified: the gate in ROW SHARE
-- mode through a FOR SHARE of its range-table entry (PostgreSQL takes
-- that lock when the statement starts and holds it to the transaction's
-- end, as LOCK TABLE does), the incarnation's check, the request; and
-- begin_write_occ, unchanged, only when the transaction already has a
-- setting. FOR SHARE needs SELECT on the gate besides UPDATE (PUBLIC's
-- since version 6, for pin_held); the gate has no columns and no rows, so
-- SELECT on it shows nothing, and a lock it allows (ACCESS SHARE) is
-- weaker than what UPDATE already allows.
--
-- The triggers. A history trigger that chooses T from a pending slot
-- locked the gate with a LOCK TABLE statement of its own before its T
-- query (a no-op for the lock manager after the slot, but a utility
-- statement through SPI). The T query now names the gate FOR SHARE in a
-- clause that reads nothing (WHERE false): the lock is taken when that
-- query starts, before it reads P or counts the write, so T is still
-- chosen with the gate held, whoever set the request. Edit to
-- gen_triggers as version 43 left it; it must apply exactly once. The
-- functions replaced: gen_triggers, and every managed table's trigger
-- functions h<id>_ins, h<id>_upd, h<id>_del (made again below).

GRANT SELECT ON @SCHEMA@.gate TO PUBLIC;

DO $edit$
DECLARE
    old text := $$
        IF current_setting('mzproxy.write_ts', true) = '0 - pending' THEN
            LOCK TABLE @SCHEMA@.gate IN ROW SHARE MODE;
        END IF;
        SELECT x.t INTO _t
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       setval(to_regclass('@SCHEMA@.w' || TG_RELID), nextval('@SCHEMA@.writes'))
                  FROM @SCHEMA@.write_key k
                 WHERE current_setting('mzproxy.write_ts', true) = '0 - pending'
                OFFSET 0) x$$;
    new text := $$
        SELECT x.t INTO _t
          FROM (SELECT k.k, GREATEST(@SCHEMA@.now_ms(),
                                     coalesce(pg_sequence_last_value('@SCHEMA@.pinned'), @SCHEMA@.pinned_ts()) + 1) AS t,
                       setval(to_regclass('@SCHEMA@.w' || TG_RELID), nextval('@SCHEMA@.writes'))
                  FROM @SCHEMA@.write_key k
                 WHERE current_setting('mzproxy.write_ts', true) = '0 - pending'
                   AND NOT EXISTS (SELECT FROM @SCHEMA@.gate WHERE false FOR SHARE)
                OFFSET 0) x$$;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    IF (length(def) - length(replace(def, old, ''))) / length(old) <> 1 THEN
        RAISE EXCEPTION 'storage version 44: the edit of gen_triggers does not apply once';
    END IF;
    EXECUTE replace(def, old, new);
END
$edit$;

-- The trigger functions of every managed table with history made again
-- (as version 42 did: sync_triggers records the new signature).
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (44);
