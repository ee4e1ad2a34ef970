#!/usr/bin/env bash
# DDL latency (issue 16): each of CREATE/DROP TABLE, CREATE/DROP INDEX,
# CREATE/DROP VIEW and ALTER TABLE ADD/DROP COLUMN, through mzproxy (default
# flags, so on managed tables, database ddl_mz) against the same statement
# directly on plain tables (database ddl_direct, which mzproxy never
# touches), at 100, 1,000 and 10,000 tables present.
#
# One run of bench/ddllatency --shapes: at each count it first creates
# tables fill_<n> (a int PRIMARY KEY, b text) until each database holds
# that many, FILL_BATCH CREATE TABLEs per transaction (one query string,
# BEGIN ... COMMIT) on both sides, so 10,000 managed tables take a couple
# of minutes, not a quarter of an hour; then it runs SAMPLES cycles of the
# eight statements on a table ddl_probe, each statement timed on its own,
# the two sides alternating cycle by cycle so both see the same load.
# Prints p50, p95 and the ratios; only the ratios mean much on a shared
# machine.
#
# usage: bench/ddl.sh
#   env: COUNTS=100,1000,10000 SAMPLES=30,30,12 FILL_BATCH=250
#        SRC=tree (build the working tree instead of the last commit)
#        PG_SETTINGS="-c synchronous_commit=off" (bench/lib.sh: the WAL
#        flush out of each side's time, where the disk's is slow)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

COUNTS=${COUNTS:-100,1000,10000}
SAMPLES=${SAMPLES:-30,30,12}
FILL_BATCH=${FILL_BATCH:-250}

declare -A db=()
bench_setup
for db in ddl_mz ddl_direct; do
	psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE $db" >/dev/null
done
echo "DDL latency at $COUNTS tables, $SAMPLES cycles, $(git -C "$root" rev-parse --short HEAD)${SRC:+ (SRC=$SRC)}, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
t0=$(now)
(cd "$src" && go run ./bench/ddllatency --shapes \
	--proxy "postgres://postgres@127.0.0.1:$mz_port/ddl_mz?sslmode=disable" \
	--direct "postgres://postgres@127.0.0.1:$pg_port/ddl_direct?sslmode=disable" \
	--counts "$COUNTS" --samples "$SAMPLES" --fill-batch "$FILL_BATCH")
echo
printf 'done in %.0f s, load %s\n' "$(python3 -c "print($(now)-$t0)")" "$(cut -d' ' -f1-3 /proc/loadavg)"
