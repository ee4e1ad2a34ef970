-- mzproxy backend state, version 44 to 45 (session 20, tsguard): the read
-- guard reads writes_seen itself (issue 15).
--
-- A timestamped read of the present runs behind the proxy's read guard,
-- which pinned through the view settled_pin (pin_cheap.sql). Each
-- relation a statement names costs the backend its lock, its permission
-- check and its scan's start at every run, whether or not the branch that
-- reads it runs: the guard cost about 100k instructions in front of a
-- point read of 134k, most of it settled_pin's four sequence reads.
-- The guard now asks settled_pin's question itself, in the same order
-- (the writes counted w, writes_seen = w, P fresh, the writes again = w),
-- and answers w with t: a count every write of which had ended before the
-- guard returned. A later guard of the same session then reads only P and
-- the writes (w unchanged, as the read-only transaction's guard does since
-- pin_seq.sql), so it needs writes_seen, which only the view read.
--
-- writes_seen tells no more than settled_pin, settled_writes and
-- pin_peek(), which anyone may read or call, and writes, which PUBLIC
-- reads since version 32: how many write slots pins have seen settled.
-- SELECT on a sequence neither advances nor sets it.
GRANT SELECT ON @SCHEMA@.writes_seen TO PUBLIC;

INSERT INTO @SCHEMA@.schema_version (version) VALUES (45);
