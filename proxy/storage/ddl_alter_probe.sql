-- mzproxy backend state, version 56 to 57 (session 24, ddl24): an ALTER
-- TABLE of a managed table reads less in on_ddl_command_end (issue 16's
-- ADD and DROP COLUMN).
--
-- The statement that reads an altered table's catalog row (version 52)
-- joined pg_class for the table's name, and probed pg_depend for a view
-- over the table at every ALTER. Now:
--
-- - The rename or move is seen in the command's object_identity (the
--   table's schema-qualified name as it is now, quoted as format's %I
--   quotes it, under the same quote_all_identifiers) against the row's
--   names: no pg_class row, no join. A command that reports a column
--   (RENAME COLUMN: its identity names the column too) renames no table.
--   A mismatch of quoting could only take a plain ALTER for a rename,
--   which writes the row again and scans the views: slower, never wrong.
-- - The dependent views are looked for only where a view's text can
--   change: a rename or move of the table, or a command that reports a
--   column (objsubid <> 0, what PostgreSQL reports for RENAME COLUMN;
--   ALTER TABLE's subcommands report the table, objsubid 0). ADD COLUMN
--   changes no view's text (a view's text lists the columns it had), and
--   PostgreSQL refuses a DROP or a type change of a column a view uses
--   (a CASCADE drops the view, which reaches sql_drop). The loop's later
--   scan of pg_depend, by the table's oid left in `altered`, does the
--   looking, as it did where the probe found a view.
--
-- Edited (in place, on_ddl_command_end's ALTER TABLE block, ddl_probe.sql's
-- text).
DO $edit$
DECLARE
    edits constant text[][] := ARRAY[
        [$$(t.name, t.schema_name) IS DISTINCT FROM (c.relname, r.schema_name) AS renamed,$$,
         $$(r.objsubid = 0 AND r.object_identity IS DISTINCT FROM format('%I.%I', t.schema_name, t.name)) AS renamed,  -- (version 57)$$],
        [$$                   EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = t.oid) AS inherits,
                   EXISTS (SELECT 1 FROM pg_depend d
                            WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = t.oid
                              AND (d.classid = 'pg_rewrite'::regclass) IS TRUE) AS viewed
              INTO altered_table
              FROM @SCHEMA@.catalog t JOIN pg_class c ON c.oid = t.oid$$,
         $$                   EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = t.oid) AS inherits
              INTO altered_table
              FROM @SCHEMA@.catalog t$$],
        [$$                IF NOT altered_table.viewed THEN$$,
         $$                -- (Version 57) Only a rename or move, or a column's
                -- rename (a command that reports a column), changes the
                -- text of a view over the table: the loop's end looks for
                -- such views then, by the oid left in altered.
                IF NOT altered_table.renamed AND r.objsubid = 0 THEN$$]];
    def text;
BEGIN
    def := pg_get_functiondef('@SCHEMA@.on_ddl_command_end()'::regprocedure);
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION 'ddl_alter_probe.sql: edit % of on_ddl_command_end() does not apply once', i;
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (57);
