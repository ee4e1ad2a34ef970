-- mzproxy backend state, version 15 to 16: DDL at PostgreSQL's speed
-- (issue 16), flat in the number of tables.
--
-- Measured with auto_explain (log_nested_statements) and
-- pg_stat_statements (track = all) on bench/ddl.sh's cycle (CREATE TABLE,
-- CREATE INDEX, ALTER TABLE ADD COLUMN, DROP COLUMN, ... on a fresh table
-- ddl_probe each cycle) at 100 and 4,000 managed tables:
--
--  * sync_triggers (version 13) found whether the primary key is
--    deferrable by joining pg_constraint on conindid, which has no index:
--    a scan of every constraint of the database, the only query of an
--    ALTER TABLE that grew with the table count (25 ms of an ALTER at
--    4,000 tables under load). It now joins on conrelid too, through
--    pg_constraint's (conrelid, contypid, conname) index. The signature's
--    value is unchanged, so signatures kept before the upgrade still hold.
--  * A new table's trigger functions were made by gen_triggers directly,
--    which left no signature, so the first ALTER TABLE of every table ran
--    gen_triggers again (a dozen catalog queries and the comparison of
--    the functions' text) to find them unchanged. manage_table now calls
--    sync_triggers, which keeps the signature from the start.

-- Edits to the text of functions as version 15 left them (the method of
-- ddl_trim.sql): each edit must apply exactly once, or the upgrade fails.
DO $edit$
DECLARE
    edits text[][] := ARRAY[
        ['sync_triggers', $$FROM pg_index x LEFT JOIN pg_constraint con ON con.conindid = x.indexrelid AND con.contype = 'p'$$,
         $$FROM pg_index x LEFT JOIN pg_constraint con
                            -- (Version 16: conrelid first, pg_constraint's index.)
                            ON con.conrelid = x.indrelid AND con.conindid = x.indexrelid AND con.contype = 'p'$$],
        ['manage_table', $$    PERFORM @SCHEMA@.gen_triggers(new_id);
$$, $$    PERFORM @SCHEMA@.sync_triggers(new_id);  -- version 16: with its signature
$$]];
    i int;
    def text;
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        def := pg_get_functiondef(('@SCHEMA@.' || edits[i][1])::regproc);
        IF (length(def) - length(replace(def, edits[i][2], ''))) / length(edits[i][2]) <> 1 THEN
            RAISE EXCEPTION 'ddl_fast.sql: edit % of % does not apply once', i, edits[i][1];
        END IF;
        EXECUTE replace(def, edits[i][2], edits[i][3]);
    END LOOP;
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (16);
