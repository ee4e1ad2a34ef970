-- mzproxy backend state, version 54 to 55 (session 23, outside23): ALTER
-- INDEX that renames a managed table or view outside mzproxy is refused
-- (MZ003), as ALTER TABLE is.
--
-- PostgreSQL lets ALTER INDEX ... RENAME TO rename any relation, a table
-- or a view too (RenameRelation's compatibility rule), and reports it with
-- the command tag ALTER INDEX and the table's or view's oid.
-- on_ddl_command_end, outside mzproxy, refused DDL on a managed relation
-- unless its tag was one of index maintenance's, ALTER INDEX among them:
-- so `ALTER INDEX t RENAME TO u` renamed a managed table (or view)
-- directly, and its catalog row kept the old name, the revision did not
-- move and a managed view's text still named the old name.
--
-- An ALTER INDEX of an index reports the index's oid, which is never a
-- catalog row's (the catalog holds tables and views): dropping ALTER
-- INDEX from the exempt tags refuses exactly the renames of managed
-- relations and nothing index maintenance does. Through mzproxy such a
-- rename was and stays allowed (its branch reconciles the row).
--
-- Edited (in place, the outside branch's list of exempt tags of
-- on_ddl_command_end, ddl_probe.sql's text).
DO $edit$
DECLARE
    anchor constant text := $$'CREATE INDEX', 'ALTER INDEX', 'REINDEX')$$;
    def text;
BEGIN
    def := pg_get_functiondef('@SCHEMA@.on_ddl_command_end()'::regprocedure);
    IF (length(def) - length(replace(def, anchor, ''))) / length(anchor) <> 1 THEN
        RAISE EXCEPTION 'alter_index_guard.sql: the edit of on_ddl_command_end() does not apply once';
    END IF;
    EXECUTE replace(def, anchor, $$'CREATE INDEX', 'REINDEX')  -- (version 55) not ALTER INDEX: it renames tables and views too$$);
END
$edit$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (55);
