-- bench/ddlcost.sh PATCH file (docs/ddl-cost.md, session 15): a no-op
-- ensure_history, so that the first pair runs on storage 36 as it is.
CREATE OR REPLACE FUNCTION mzproxy.ensure_history(p_rel regclass) RETURNS void LANGUAGE sql AS $$ SELECT $$;
