#!/usr/bin/env bash
# CREATE+DROP TABLE latency (bench/ddllatency, docs/ddl-cost.md session
# 15): the working tree's mzproxy and schema as they are (database
# ddl_mz) and with bench/ddllazy/lazy.sql run after the install (ddl_lazy:
# a CREATE TABLE that builds no history), each against a direct database
# of its own, two rounds. The tables each count creates stay, so round 2
# runs at the largest count for every count.
#
# usage: bench/ddllazy/latency.sh   env: COUNTS=100,1000 PAIRS=40
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=tree
. bench/lib.sh
bench_postgres
declare -A port pid db
for d in ddl_mz ddl_lazy ddl_direct ddl_direct2; do
	psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE $d" >/dev/null
done
for d in ddl_mz ddl_lazy; do
	db[$d]=$d
	bench_mzproxy "$d" "$work/mzproxy" -- --backend "${backend/\/postgres\?//$d?}"
done
psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d ddl_lazy -qAt -v ON_ERROR_STOP=1 -f bench/ddllazy/lazy.sql >/dev/null
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2; do
	for d in ddl_mz ddl_lazy; do
		dd=ddl_direct; [ $d = ddl_lazy ] && dd=ddl_direct2
		echo "== round $round: $d, load $(cut -d' ' -f1-3 /proc/loadavg)"
		go run ./bench/ddllatency --proxy "postgres://postgres@127.0.0.1:${port[$d]}/$d?sslmode=disable" \
			--direct "postgres://postgres@127.0.0.1:$pg_port/$dd?sslmode=disable" --counts "${COUNTS:-100,1000}" --pairs "${PAIRS:-40}"
	done
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
