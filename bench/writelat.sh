#!/usr/bin/env bash
# One client's autocommit UPDATE, decomposed (issue 14, docs/write-cost.md).
# One PostgreSQL (pg_stat_statements with track = all), one mzproxy of this
# tree (and, with BASELINE, one of that revision on a database of its own)
# and one PgBouncer (session pooling) in front of it. The same single-row
# UPDATE of a random row of 10,000 (one pgbench client, --max-tries 1) on:
#
#   direct    PostgreSQL directly, a plain table (database plain)
#   bouncer   PgBouncer, the same plain table: a reference proxy hop
#   mzplain   mzproxy, a table made directly in PostgreSQL in mzproxy's
#             database (unmanaged: no history trigger; the write still
#             goes through the optimistic path with the write slot)
#   mz        mzproxy, a managed table (the write slot and history trigger)
#   base      BASELINE's mzproxy, a managed table of its own database
#   mzvar     with VARIANT_ENV: this tree's mzproxy run with those
#             environment values (e.g. GOMAXPROCS=1), the managed table
#
# Each round runs every target back to back (interleaved), for each
# protocol and fsync setting. For each run: p50 and p95 latency from
# pgbench's per-transaction log, mzproxy's (or PgBouncer's) CPU and
# context switches (all its threads, voluntary and not) per UPDATE from
# /proc, and the backend's own time per UPDATE from pg_stat_statements
# (reset before each run): the client's statement (top level, so its
# triggers included) and, through mzproxy, the write slot's statement.
#
# usage: bench/writelat.sh
#   env: DURATION=5 ROUNDS=3 FSYNC="on off" PROTOS="simple prepared"
#        TARGETS="direct bouncer mzplain mz" BASELINE= (a git revision:
#        adds target base)
#        VARIANT_ENV="GOMAXPROCS=1" (adds target mzvar)
#        SRC=tree (build the working tree instead of the last commit)
#        STMTS=1 (list the statements, nested ones too, of mzproxy's
#                 targets in the last round)
set -euo pipefail

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
FSYNC=${FSYNC:-"on off"}
PROTOS=${PROTOS:-"simple prepared"}
TARGETS=${TARGETS:-"direct bouncer mzplain mz"}
BASELINE=${BASELINE:-}
VARIANT_ENV=${VARIANT_ENV:-}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_postgres
direct_sql() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAtc "$2"; }

# pg_stat_statements, every statement nested ones included.
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null
cat >>"$work/pg/postgresql.auto.conf" <<'EOF'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
EOF
as_pg "$bindir/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
	-o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$work -c max_connections=200 -c shared_buffers=256MB" \
	start >/dev/null

declare -A port pid db tab
for d in plain managed; do direct_sql postgres "CREATE DATABASE $d"; done
port[direct]=$pg_port
db[direct]=plain db[bouncer]=plain db[mz]=managed db[mzplain]=managed db[base]=baseline db[mzvar]=managed
tab[direct]=acct tab[bouncer]=acct tab[mz]=acct tab[mzplain]=acct_plain tab[base]=acct tab[mzvar]=acct
bench_mzproxy mz "$work/mzproxy" -- --backend "${backend/\/postgres\?//managed?}"
port[mzplain]=${port[mz]} pid[mzplain]=${pid[mz]}
if [ -n "$VARIANT_ENV" ]; then
	# shellcheck disable=SC2086 # the values are words
	bench_mzproxy mzvar "$work/mzproxy" $VARIANT_ENV -- --backend "${backend/\/postgres\?//managed?}"
	TARGETS="$TARGETS mzvar"
fi
if [ -n "$BASELINE" ]; then
	direct_sql postgres "CREATE DATABASE baseline"
	echo "building mzproxy $BASELINE" >&2
	build_rev "$BASELINE" baseline
	bench_mzproxy base "$work/mzproxy-baseline" -- --backend "${backend/\/postgres\?//baseline?}"
	TARGETS="$TARGETS base"
fi

# PgBouncer in session mode on the plain database, over the Unix socket.
bench_pgbouncer bouncer plain

setup='CREATE TABLE acct (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO acct SELECT g, 0 FROM generate_series(1, 10000) g;'
direct_sql plain "$setup"
psql -X -h 127.0.0.1 -p "${port[mz]}" -U postgres -d managed -qAtc "$setup"
direct_sql managed "${setup//acct/acct_plain}"
if [ -n "$BASELINE" ]; then psql -X -h 127.0.0.1 -p "${port[base]}" -U postgres -d baseline -qAtc "$setup"; fi
for d in plain managed ${BASELINE:+baseline}; do
	direct_sql "$d" 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements'
	direct_sql "$d" 'VACUUM ANALYZE'
done
direct_sql postgres CHECKPOINT
for t in $TARGETS; do
	printf '\\set id random(1, 10000)\nUPDATE %s SET v = v + 1 WHERE id = :id;\n' "${tab[$t]}" >"$work/upd.$t.sql"
done

# switches pid: context switches of all the process's threads so far.
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s + 0}'; }

set_fsync() {
	direct_sql postgres "ALTER SYSTEM SET fsync = $1" && direct_sql postgres "SELECT pg_reload_conf()" >/dev/null
	for _ in $(seq 50); do
		[ "$(direct_sql postgres 'SHOW fsync')" = "$1" ] && return 0
		sleep 0.1
	done
	echo "fsync did not become $1" >&2
	exit 1
}

# statements database: the backend's mean time (µs) and calls of the
# UPDATE (top level) and of the write slot, since the last reset.
statements() {
	direct_sql "$1" "SELECT
		coalesce(round(sum(total_exec_time) FILTER (WHERE toplevel AND query LIKE 'UPDATE%') * 1000
			/ nullif(sum(calls) FILTER (WHERE toplevel AND query LIKE 'UPDATE%'), 0)), 0),
		coalesce(sum(calls) FILTER (WHERE toplevel AND query LIKE 'UPDATE%'), 0),
		coalesce(round(sum(total_exec_time) FILTER (WHERE toplevel AND query LIKE '%begin_write%') * 1000
			/ nullif(sum(calls) FILTER (WHERE toplevel AND query LIKE '%begin_write%'), 0)), 0)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())" | tr '|' ' '
}

results=$work/results.txt
: >"$results"
echo "run of $(git -C "$root" rev-parse --short HEAD); DURATION=$DURATION ROUNDS=$ROUNDS; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in $FSYNC; do
	set_fsync "$mode"
	for round in $(seq "$ROUNDS"); do
		echo "# fsync=$mode round $round ($(date -u '+%H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg))"
		for proto in $PROTOS; do
			for t in $TARGETS; do
				rm -f "$work"/lat.*
				direct_sql "${db[$t]}" 'SELECT pg_stat_statements_reset()' >/dev/null
				c0=0 s0=0
				[ "$t" = direct ] || { c0=$(cpu_ticks "${pid[$t]}"); s0=$(switches "${pid[$t]}"); }
				(cd "$work" && pgbench -n -c 1 -M "$proto" -f "$work/upd.$t.sql" -T "$DURATION" --max-tries 1 \
					-l --log-prefix="$work/lat" -h 127.0.0.1 -p "${port[$t]}" -U postgres "${db[$t]}" >"$work/pgbench.out" 2>&1) ||
					{ cat "$work/pgbench.out" >&2; exit 1; }
				c1=0 s1=0
				[ "$t" = direct ] || { c1=$(cpu_ticks "${pid[$t]}"); s1=$(switches "${pid[$t]}"); }
				read -r p50 p95 n < <(cat "$work"/lat.* | awk '$3 ~ /^[0-9]+$/ {print $3}' | sort -n |
					awk '{a[NR] = $1} END {printf "%d %d %d\n", a[int(NR * 0.50)], a[int(NR * 0.95)], NR}')
				read -r be calls slot < <(statements "${db[$t]}")
				cpu=$(awk -v c="$((c1 - c0))" -v n="$n" -v hz="$hz" 'BEGIN { printf "%d", n ? c * 1e6 / hz / n : 0 }')
				cs=$(awk -v c="$((s1 - s0))" -v n="$n" 'BEGIN { printf "%.2f", n ? c / n : 0 }')
				echo "$mode $proto $t p50=$p50 p95=$p95 n=$n backend_us=$be calls=$calls slot_us=$slot proxy_cpu_us=$cpu proxy_switches=$cs"
				echo "$mode $proto $t $p50 $p95 $be $slot $cpu $cs" >>"$results"
				if [ -n "${STMTS:-}" ] && [ "$round" = "$ROUNDS" ] && [ "${t#mz}" != "$t" ]; then
					# Every statement the writes ran, nested ones too.
					direct_sql "${db[$t]}" "SELECT calls, round((mean_exec_time * 1000)::numeric, 1) AS us, toplevel,
						left(regexp_replace(query, '\s+', ' ', 'g'), 110) FROM pg_stat_statements
						WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls >= $n
						ORDER BY total_exec_time DESC LIMIT 20" | sed 's/^/    /'
				fi
			done
		done
	done
done
echo "done $(date -u '+%H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "medians over the rounds: p50, p95 (µs), backend's time per UPDATE (µs), the slot's (µs), proxy CPU (µs) and context switches per UPDATE"
python3 - "$results" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    mode, proto, t, *v = line.split()
    rows.setdefault((mode, proto, t), []).append([float(x) for x in v])
print("| fsync | protocol | target | p50 | p95 | backend UPDATE | backend slot | proxy CPU | proxy switches |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for (mode, proto, t), vs in rows.items():
    med = [statistics.median(col) for col in zip(*vs)]
    print(f"| {mode} | {proto} | {t} | " + " | ".join(str(int(x)) for x in med[:-1]) + f" | {med[-1]:.2f} |")
PY
