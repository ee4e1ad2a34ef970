#!/usr/bin/env bash
# Leases, handover and compaction, against a throw-away PostgreSQL shared
# by several mzproxy processes (bench/lease.py does the measuring):
#
#   bench/lease.sh handover    process start -> /readyz and -> first query, new generation
#   bench/lease.sh proxies     pgbench -S throughput through one proxy vs two (same clients), and the
#                              proxies' CPU per transaction (PROXIES_SECONDS, 20; PROXIES_ROUNDS, 3)
#   bench/lease.sh storage     history rows under a steady update load (STORAGE_SECONDS, 300),
#                              rows compacted per second, read latency with and without compaction
#
# Needs python3 with psycopg2 ($PYTHON, default /usr/bin/python3, as Debian packages it), pgbench and psql. Results go to stdout.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
what=${1:?usage: bench/lease.sh handover|proxies|storage}
bench_postgres
export MZ_BINARY=$work/mzproxy MZ_BACKEND=$backend MZ_WORK=$work PG_PORT=$pg_port PG_SOCKET=$work
"${PYTHON:-/usr/bin/python3}" "$root/bench/lease.py" "$what"
