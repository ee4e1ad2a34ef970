-- mzproxy backend state, version 42 to 43 (session 19, outside19):
-- quote_all_identifiers cannot break a table.
--
-- quote_all_identifiers is a setting any role may change (SET, set_config,
-- ALTER ROLE ... SET, a function's SET clause, and ALTER DATABASE ... SET
-- by a database's owner, which mzproxy's own connections then take too).
-- Under it quote_ident('h5') is '"h5"': CREATE TABLE recorded the history
-- relation as mzproxy."h5", and every later write of the table failed
-- with 42602 (invalid name syntax) for good, whatever the writer's
-- setting, because gen_restamp and fix_write append suffixes to that name
-- (mzproxy."h5"_restamp); a write by a session with the setting on failed
-- the same way at the build of a table made without it. The functions
-- that make or compare mzproxy's names from quote_ident and format's %I
-- now run with the setting off, as they already run with their own
-- search_path (the SET clause also holds for the functions they call),
-- and a catalog row recorded under the setting gets its name back.
--
-- gen_triggers itself is left as it is, called only by sync_triggers,
-- whose setting holds for it: a table's recorded shape names
-- gen_triggers' pg_proc row version (table_shape), and a new one would
-- make every table's next ALTER make its triggers again.
--
-- Only DDL and history builds run these functions: a write or read of a
-- built table runs none of them. (compact's names are only parsed, by
-- to_regprocedure and DROP FUNCTION, which take them quoted.)

ALTER FUNCTION @SCHEMA@.manage_table(oid, bigint, bigint) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.build_history(bigint, bigint) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.gen_restamp(bigint) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.sync_triggers(bigint) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.sync_indexes_built(bigint) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.reconcile_built(bigint, bigint, boolean) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.resync(bigint, bigint) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.plain_column_change(bigint, oid, text) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.table_shape(bigint) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.user_columns(oid) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.make_marker(oid) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.retire_marker(oid) SET quote_all_identifiers = off;
ALTER FUNCTION @SCHEMA@.take_spare_marker(oid) SET quote_all_identifiers = off;

-- A history name recorded under the setting: the same relation's name,
-- unquoted (a history relation is always h<id>).
UPDATE @SCHEMA@.catalog SET history = '@SCHEMA@.h' || id
 WHERE kind = 'table' AND history = '@SCHEMA@."h' || id || '"';

INSERT INTO @SCHEMA@.schema_version (version) VALUES (43);
