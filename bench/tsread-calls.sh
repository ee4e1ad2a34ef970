#!/usr/bin/env bash
# Timestamped reads, counted per read (issue 15): system calls (strace -c
# -f on the mzproxy process) and mzproxy's CPU time, over one pgbench
# client's reads of bench/managed.sh's tsread and asof scripts on a
# managed pgbench_accounts, in both protocols; counts, not speeds (a
# loaded machine moves them little; strace slows the process, so the CPU
# is measured in a run without it). SCRIPTS may also name managed.sh's
# point (a plain point read) and rotxn (BEGIN, two point reads, COMMIT:
# its "read" is the transaction).
#
# BASELINE=<git revision>: a binary built from that revision in front of
# the same PostgreSQL too (same storage version), measured alike.
# PROFILE=<dir>: each mzproxy writes a CPU profile of its whole run (the
# setup too) to <dir>/<target>.prof when the script ends
# (MZPROXY_CPU_PROFILE; read it with go tool pprof).
# FLAGS: more mzproxy flags for every target (e.g. --event-loop=false).
#
# usage: bench/tsread-calls.sh
#   env: READS=2000 SCRIPTS="tsread asof" MODES="simple prepared" BASELINE=
#        PROFILE= FLAGS=
set -euo pipefail
. "$(dirname "$0")/lib.sh"

READS=${READS:-2000}
SCRIPTS=${SCRIPTS:-"tsread asof"}
MODES=${MODES:-"simple prepared"}
BASELINE=${BASELINE:-}
PROFILE=${PROFILE:-}
read -ra flags <<<"${FLAGS:-}"

bench_postgres
declare -A port pid db
psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE managed" >/dev/null
start() { # name binary
	local envs=()
	[ -n "$PROFILE" ] && mkdir -p "$PROFILE" && envs=("MZPROXY_CPU_PROFILE=$(realpath "$PROFILE")/$1.prof")
	db[$1]=managed
	bench_mzproxy "$1" "$2" "${envs[@]}" -- "${flags[@]}"
}
start mzproxy "$work/mzproxy"
targets=mzproxy
if [ -n "$BASELINE" ]; then
	build_rev "$BASELINE" baseline
	start baseline "$work/mzproxy-baseline"
	targets="$targets baseline"
fi
mz_port=${port[mzproxy]}
pgbench -i -q -s 1 -h 127.0.0.1 -p "$mz_port" -U postgres managed >"$work/init.log" 2>&1 ||
	{ cat "$work/init.log" >&2; exit 1; }
psql -h 127.0.0.1 -p "$mz_port" -U postgres -d managed -qAtc \
	"ALTER TABLE pgbench_accounts SET (RETAIN HISTORY FOR '1h')" >/dev/null
asof_t=$(psql -h 127.0.0.1 -p "$mz_port" -U postgres -d managed -qAtc "SELECT mz_now()")
cat >"$work/tsread.sql" <<EOS
\set aid random(1, 100000)
SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = :aid;
EOS
cat >"$work/point.sql" <<EOS
\set aid random(1, 100000)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
EOS
cat >"$work/rotxn.sql" <<EOS
\set aid random(1, 100000)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid + 1;
COMMIT;
EOS
cat >"$work/asof.sql" <<EOS
\set aid random(1, 100000)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid AS OF $asof_t;
EOS
# As in managed.sh, the AS OF time is older than the proxies' lease floors
# by the time it is read (a heartbeat every 5 s moves them).
sleep 11

run() { # target script mode reads
	pgbench -n -M "$3" -c 1 -t "$4" -f "$work/$2.sql" \
		-h 127.0.0.1 -p "${port[$1]}" -U postgres managed 2>&1
}
printf '%-9s %-7s %-9s %10s %12s   %s\n' target script mode "calls/read" "cpu-us/read" "per read: calls (failed)" >&2
for script in $SCRIPTS; do
	for mode in $MODES; do
		for t in $targets; do
			p=${pid[$t]}
			run "$t" "$script" "$mode" 200 >/dev/null # warm: plans, statements, holds
			c0=$(cpu_ticks "$p")
			out=$(run "$t" "$script" "$mode" "$((READS * 2))")
			c1=$(cpu_ticks "$p")
			grep -q "number of failed transactions: 0" <<<"$out" || { echo "$out" >&2; exit 1; }
			cpu=$(python3 -c "print(f'{($c1 - $c0) / $hz / $((READS * 2)) * 1e6:.1f}')")
			strace -c -f -p "$p" -o "$work/trace" 2>/dev/null &
			spid=$!
			sleep 0.5
			run "$t" "$script" "$mode" "$READS" >/dev/null
			kill -INT "$spid" 2>/dev/null || true
			wait "$spid" 2>/dev/null || true
			total=$(awk '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {n += $4} END {print n + 0}' "$work/trace")
			breakdown=$(awk -v n="$READS" '
				$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {
					calls[$NF] += $4; if (NF >= 6) errs[$NF] += $5
				}
				END { for (c in calls) if (calls[c] / n >= 0.05) printf "%s %.2f (%.2f), ", c, calls[c] / n, errs[c] / n }
			' "$work/trace")
			printf '%-9s %-7s %-9s %10.2f %12s   %s\n' "$t" "$script" "$mode" \
				"$(python3 -c "print(${total:-0} / $READS)")" "$cpu" "$breakdown"
		done
	done
done
