CREATE OR REPLACE FUNCTION mzproxy.ensure_history(p_rel regclass) RETURNS void LANGUAGE sql AS $$ SELECT $$;
