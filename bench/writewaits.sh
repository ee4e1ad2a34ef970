#!/usr/bin/env bash
# What 32 clients of blind single-row INSERTs wait for (issue 14): during
# one pgbench run through mzproxy (this tree, simple protocol, a managed
# keyless table) and one directly (a plain table of another database),
# each on the same PostgreSQL (fsync on), a sampler in the database reads
# every 0.1 s the wait events of pgbench's backends and the buffers some
# backend has pinned (pg_buffercache), by relation: which pages the
# BufferContent waits are on.
#
# usage: bench/writewaits.sh    env: DURATION=10 CLIENTS=32
set -euo pipefail
. "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-32}

SRC=tree bench_postgres
declare -A port pid db
rev_database tree
d=$(rev_dbname tree)
psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE plain"
psql -X -h 127.0.0.1 -p "${port[$d]}" -U postgres -d "$d" -qAtc "CREATE TABLE ins (x int)"
psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d plain -qAtc "CREATE TABLE ins (x int)"
for t in "$d" plain; do
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$t" -qAtc "CREATE EXTENSION IF NOT EXISTS pg_buffercache"
done
echo 'INSERT INTO ins VALUES (1);' >"$work/ins.sql"

# sample database seconds: one line per sample and backend ("wait"), and
# per pinned buffer of a relation ("pin").
sample() {
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAt <<EOS
CREATE TEMP TABLE waits (wait text);
CREATE TEMP TABLE pins (rel text, blk bigint, pinned int);
DO \$\$
DECLARE stop timestamptz := clock_timestamp() + interval '$2 seconds';
BEGIN
  WHILE clock_timestamp() < stop LOOP
    INSERT INTO waits SELECT coalesce(wait_event_type || ' ' || wait_event, 'on CPU')
      FROM pg_stat_activity WHERE application_name = 'pgbench' AND state <> 'idle';
    INSERT INTO pins SELECT c.relname, b.relblocknumber, b.pinning_backends
      FROM pg_buffercache b JOIN pg_class c ON c.relfilenode = b.relfilenode
      WHERE b.pinning_backends > 0 AND b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database());
    PERFORM pg_stat_clear_snapshot();
    PERFORM pg_sleep(0.1);
  END LOOP;
END \$\$;
SELECT 'wait', wait, count(*) FROM waits GROUP BY 2 ORDER BY 3 DESC;
SELECT 'pin', rel, count(*), sum(pinned), count(DISTINCT blk) FROM pins GROUP BY 2 ORDER BY 4 DESC LIMIT 12;
EOS
}

for t in mz direct; do
	if [ "$t" = mz ]; then p=${port[$d]} dbn=$d; else p=$pg_port dbn=plain; fi
	sample "$dbn" "$DURATION" >"$work/sample.$t" &
	spid=$!
	sleep 0.5
	out=$(pgbench -n -M simple -c "$CLIENTS" -j 2 -T "$((DURATION - 1))" -f "$work/ins.sql" \
		-h 127.0.0.1 -p "$p" -U postgres "$dbn" 2>&1)
	wait "$spid"
	echo "## $t: $(grep -E '^tps' <<<"$out" | head -1)"
	echo "# kind | wait event or relation | samples | (pin: backends pinning, summed | distinct blocks)"
	cat "$work/sample.$t"
done
