-- mzproxy backend state, version 24 to 25: mzproxy's functions answer in a
-- session that restricts non-system views.
--
-- Any role may SET restrict_nonsystem_relation_kind = 'view' (pg_dump
-- 15.8+ does, and it may come from the startup options or ALTER ROLE ...
-- SET). PostgreSQL then refuses, when it rewrites a query, every view with
-- an OID >= FirstNormalObjectId: "access to non-system view ... is
-- restricted" (55000). mzproxy's views are such views, and the setting
-- holds inside a SECURITY DEFINER function too. pin() reads settled_pin
-- (pin_cheap.sql), compact() the view txns (ddl.sql), and register()
-- names it: under the setting pin() failed, and with it EXPLAIN
-- TIMESTAMP, reads in a transaction block and AS OF mz_now().
--
-- Each now lifts the restriction in its SET clause, for its own duration
-- only (the caller's setting is restored when it returns). The views are
-- mzproxy's own, bound when they were made, so lifting it exposes nothing
-- the function did not read before. A version that defines one of these
-- functions again must keep the setting (view_safe_test.go checks every
-- function that names a view of the schema).
--
-- The proxy's own statements read no view either: its read guard calls
-- pin() in a session that refused settled_pin, its read-only pin calls
-- pin_peek() and pin_check() in one that refused the views of
-- pin_views.sql, and it reads the upper from upper(), not txns (a
-- database's or a role's settings restrict its own connections too).
--
-- The setting exists since PostgreSQL 15.8 (and 14.13, 13.16, 12.20); an
-- older server has no such restriction, and refuses the name, so the
-- functions are altered only where it exists.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_settings WHERE name = 'restrict_nonsystem_relation_kind') THEN
        ALTER FUNCTION @SCHEMA@.pin() SET restrict_nonsystem_relation_kind = '';
        ALTER FUNCTION @SCHEMA@.compact(bigint, bigint) SET restrict_nonsystem_relation_kind = '';
        ALTER FUNCTION @SCHEMA@.register(bigint, bigint, text, integer) SET restrict_nonsystem_relation_kind = '';
    END IF;
END
$$;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (25);
