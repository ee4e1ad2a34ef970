-- mzproxy backend state, version 57 to 58 (session 25, writes25): the
-- UPDATE and DELETE triggers of a keyed table evaluate fewer PL/pgSQL
-- conditions per call: two fewer in a transaction block, one fewer in
-- autocommit (issue 14). docs/write-cost.md ("Session 25") has the
-- figures, and what was measured and not kept for the block's record of
-- its tables (its UPDATE of deferred_slots folded into the history's
-- first close; the triggers planned without bitmap scans).
--
-- PL/pgSQL compiles each simple expression (a condition, an assignment)
-- again in every transaction, about 2k-3k backend instructions each here,
-- and a trigger call is its transaction's only one (hist_trim.sql). The
-- slot part of a keyed table's _upd and _del was
--
--     _fresh := coalesce(left(write_ts, 4) = '0 - ', false);
--     IF _fresh THEN <T chosen here> _fresh := _t IS NOT NULL; END IF;
--     IF NOT _fresh THEN
--         IF left(write_ts, 3) = '-1 ' THEN <the block's record> END IF;
--         IF _t IS NULL THEN <stamp_ts> END IF;
--     END IF;
--     IF _fresh THEN ...
--
-- eight conditions and assignments before the history's first statement
-- in a block, six in autocommit (with the pending test of the branch that
-- chooses T). It is now
--
--     IF left(write_ts, 4) = '0 - ' THEN <T chosen here> _fresh := _t IS NOT NULL;
--     ELSIF left(write_ts, 3) = '-1 ' THEN <the block's record>
--     END IF;
--     IF _t IS NULL THEN <stamp_ts> END IF;
--     IF _fresh THEN ...
--
-- six in a block, five in autocommit. The branches are the same: the two
-- prefixes exclude each other; each branch's body is unchanged (the
-- record's UPDATE of deferred_slots, _fresh from its result, the row's
-- placeholder otherwise); a T not chosen in either (a value that only
-- looks pending, a block whose T was chosen, no slot) goes to stamp_ts as
-- before, which then was reached only with _fresh false, and _t is NULL
-- exactly then. A _fresh no branch set is NULL and takes the general
-- path, as false did. (The block's test first would save one more
-- condition in a block and cost autocommit one more current_setting call:
-- measured, +3.3k an autocommit UPDATE.)
--
-- Edits to gen_triggers as version 57 left it; each must apply as many
-- times as given.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        [$$
    probe text;
BEGIN$$, $$
    probe text;
    keyed_head text;
BEGIN$$, '1'],
        [$$
    upd_sql := coalesce(upd_sql, retract_sql || insert_sql);
$$, $$
    upd_sql := coalesce(upd_sql, retract_sql || insert_sql);
    keyed_head := fresh_sql || check_sql;
    IF fresh_upd IS NOT NULL THEN
        -- (Version 58, see hist_record.sql.) A keyed table's _upd and
        -- _del: the pending slot and the block's deferred slot as one IF
        -- and its ELSIF; no _fresh branch around the record and stamp_ts,
        -- so the bodies after it lose the END IF that closed it.
        IF NOT starts_with(check_sql, E'\n    IF left(current_setting(''mzproxy.write_ts'', true), 3) = ''-1 '' THEN')
           OR left(upd_sql, 12) <> E'\n    END IF;' OR left(retract_sql, 12) <> E'\n    END IF;' THEN
            RAISE EXCEPTION 'mzproxy: gen_triggers: the slot part of %.% is not as version 57 made it', c.schema_name, c.name
                USING ERRCODE = 'XX000';
        END IF;
        keyed_head := E'\n    IF left(current_setting(''mzproxy.write_ts'', true), 4) = ''0 - '' THEN' || fresh_stamp
                      || E'\n        _fresh := _t IS NOT NULL;\n    ELSIF left(current_setting(''mzproxy.write_ts'', true), 3) = ''-1 '' THEN'
                      || substr(check_sql, length(E'\n    IF left(current_setting(''mzproxy.write_ts'', true), 3) = ''-1 '' THEN') + 1);
        upd_sql := substr(upd_sql, 13);
        retract_sql := substr(retract_sql, 13);
    END IF;
$$, '1'],
        [$$fresh_sql || check_sql, upd_sql, '')$$, $$keyed_head, upd_sql, '')$$, '2'],
        [$$fresh_sql || check_sql, retract_sql);$$, $$keyed_head, retract_sql);$$, '1']
    ];
    i int;
    def text := pg_get_functiondef('@SCHEMA@.gen_triggers(bigint)'::regprocedure);
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> edits[i][3]::int THEN
            RAISE EXCEPTION 'storage version 58: edit % of gen_triggers does not apply % times', i, edits[i][3];
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

-- The trigger functions of every managed table made again, as
-- hist_trim.sql did: gen_triggers' text changed.
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

INSERT INTO @SCHEMA@.schema_version (version) VALUES (58);
