#!/usr/bin/env bash
# Statements the backend runs per read through mzproxy (issue 15), counted
# by pg_stat_statements (track = all: top-level and nested, the proxy's
# own connections included) over 100 point reads of a managed table by one
# pgbench client, after 20 to warm up, in each pgbench protocol (simple,
# extended: an unnamed Parse, Bind, Describe, Execute and Sync per read as
# the corpus runner sends it; prepared), with and without
# --history-reads, for each revision. The proxies run with
# --tick-interval=0, so no tick falls in the window (a read of the present
# pins itself); their heartbeats and compactions in it are counted too.
#
# usage: bench/readstmts.sh
#   env: REVS="main tree" (git revisions, or tree for the working tree)
#        MODES="simple extended prepared"  FLAGS="none --history-reads"
set -euo pipefail

REVS=${REVS:-"main tree"}
MODES=${MODES:-"simple extended prepared"}
FLAGS=${FLAGS:-"none --history-reads"}
N=100

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
SRC=tree bench_postgres
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null
as_pg "$bindir/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
	-o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$work -c max_connections=200 -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all" \
	start >/dev/null
direct_sql() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAtc "$2"; }
direct_sql postgres "CREATE EXTENSION pg_stat_statements"
echo 'SELECT v FROM r WHERE k = 2;' >"$work/read.sql"

declare -A port pid db
printf '%-10s %-16s %-9s %9s %9s\n' revision flags protocol top-level nested
for rev in $REVS; do
	bin=$work/mzproxy
	if [ "$rev" != tree ]; then
		build_rev "$rev" "$(rev_dbname "$rev")"
		bin=$work/mzproxy-$(rev_dbname "$rev")
	fi
	for flags in $FLAGS; do
		name=$(rev_dbname "$rev${flags//-/_}")
		direct_sql postgres "CREATE DATABASE $name"
		db[$name]=$name
		f=()
		[ "$flags" = none ] || f=("$flags")
		bench_mzproxy "$name" "$bin" -- --backend "${backend/\/postgres\?//$name?}" --tick-interval=0 "${f[@]}"
		psql -X -h 127.0.0.1 -p "${port[$name]}" -U postgres -d "$name" -qc \
			"CREATE TABLE r (k int PRIMARY KEY, v int)" -c "INSERT INTO r VALUES (1, 1), (2, 2), (3, 3)"
		for mode in $MODES; do
			pgbench -n -t 20 -M "$mode" -f "$work/read.sql" -h 127.0.0.1 -p "${port[$name]}" -U postgres "$name" >/dev/null 2>&1
			direct_sql postgres "SELECT pg_stat_statements_reset()" >/dev/null
			pgbench -n -t $N -M "$mode" -f "$work/read.sql" -h 127.0.0.1 -p "${port[$name]}" -U postgres "$name" >"$work/run.log" 2>&1 ||
				{ cat "$work/run.log" >&2; exit 1; }
			direct_sql postgres "SELECT round(sum(calls) FILTER (WHERE toplevel) / $N.0, 2), round(sum(calls) FILTER (WHERE NOT toplevel) / $N.0, 2)
				FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '$name'" |
				{ IFS='|' read -r top nested; printf '%-10s %-16s %-9s %9s %9s\n' "$rev" "$flags" "$mode" "$top" "$nested"; }
		done
		kill "${pid[$name]}"
		wait "${pid[$name]}" 2>/dev/null || true
	done
done
