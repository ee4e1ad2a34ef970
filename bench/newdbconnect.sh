#!/usr/bin/env bash
# A new database's first connection through two mzproxy builds in front of
# one PostgreSQL, interleaved (bench/newdbconnect.py: CREATE DATABASE
# through the proxy, a copy of the template database, then a timed
# connect to it and its first CREATE TABLE): BASE (a revision, default
# HEAD; built from git, so uncommitted changes are not in it) against
# this tree. Both builds must share the storage version (they share the
# template database).
#
# usage: bench/newdbconnect.sh   (env: BASE=HEAD ROUNDS=8)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SRC=tree bench_postgres
declare -A port pid db
build_rev "${BASE:-HEAD}" base
bench_mzproxy base "$work/mzproxy-base"
bench_mzproxy tree "$work/mzproxy"
echo "base ${BASE:-HEAD} ($(git -C "$root" rev-parse --short "${BASE:-HEAD}")), tree; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# A python with psycopg (3): the system's when the first on PATH has none.
py=python3
python3 -c 'import psycopg' 2>/dev/null || py=/usr/bin/python3
LABELS="base tree" ROUNDS=${ROUNDS:-8} "$py" "$root/bench/newdbconnect.py" "$pg_port" "${port[base]}" "${port[tree]}"
echo "load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
