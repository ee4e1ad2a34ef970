#!/usr/bin/env bash
# Timestamped reads, counted per read (issue 15): system calls (strace -c
# -f on the mzproxy process) and mzproxy's CPU time, over one pgbench
# client's reads of bench/managed.sh's tsread and asof scripts on a
# managed pgbench_accounts, in both protocols; counts, not speeds (a
# loaded machine moves them little; strace slows the process, so the CPU
# is measured in runs without it, ROUNDS of them interleaved across the
# revisions, and the median taken). SCRIPTS may also name managed.sh's
# point (a plain point read) and rotxn (BEGIN, two point reads, COMMIT:
# its "read" is the transaction) and update (an autocommit UPDATE of a
# random row, issue 14's single-client write: its "read" is the write)
# and insert (an autocommit blind INSERT of one row into a keyless table,
# as bench/writes.sh's 32-client section sends).
# CLIENTS: pgbench clients of the CPU runs (the strace run too), default 1;
# READS is then the reads of each client.
#
# REVS: the revisions measured, each (rev_database) with its own mzproxy
# in front of a database of its own on the same PostgreSQL, so that
# revisions of different storage versions compare in one run ("tree" is
# the working tree).
# PROFILE=<dir>: each mzproxy writes a CPU profile of its whole run (the
# setup too) to <dir>/<database>.prof when the script ends
# (MZPROXY_CPU_PROFILE; read it with go tool pprof).
# FLAGS: more mzproxy flags for every revision (e.g. --event-loop=false).
# BACKEND=1: the strace run also traces PostgreSQL (strace -c -f on the
# postmaster, so the backends forked for the run's connections; other
# server processes add a little), per read: the backends' round trips
# show as their recvfrom and epoll_wait.
#
# usage: bench/tsread-calls.sh
#   env: REVS="tree" READS=2000 ROUNDS=3 SCRIPTS="tsread asof"
#        MODES="simple prepared" STRACE=1 (STRACE=0: CPU only) PROFILE= FLAGS=
#        CLIENTS=1 BACKEND=
set -euo pipefail
. "$(dirname "$0")/lib.sh"

REVS=${REVS:-tree}
READS=${READS:-2000}
ROUNDS=${ROUNDS:-3}
SCRIPTS=${SCRIPTS:-"tsread asof"}
MODES=${MODES:-"simple prepared"}
STRACE=${STRACE:-1}
PROFILE=${PROFILE:-}
CLIENTS=${CLIENTS:-1}
read -ra flags <<<"${FLAGS:-}"

SRC=tree bench_postgres
declare -A port pid db
for rev in $REVS; do
	d=$(rev_dbname "$rev")
	envs=()
	[ -n "$PROFILE" ] && mkdir -p "$PROFILE" && envs=("MZPROXY_CPU_PROFILE=$(realpath "$PROFILE")/$d.prof")
	rev_database "$rev" "${envs[@]}" -- "${flags[@]}"
	pgbench -i -q -s 1 -h 127.0.0.1 -p "${port[$d]}" -U postgres "$d" >"$work/init.$d.log" 2>&1 ||
		{ cat "$work/init.$d.log" >&2; exit 1; }
	psql -h 127.0.0.1 -p "${port[$d]}" -U postgres -d "$d" -qAtc \
		"ALTER TABLE pgbench_accounts SET (RETAIN HISTORY FOR '1h')" >/dev/null
	asof_t=$(psql -h 127.0.0.1 -p "${port[$d]}" -U postgres -d "$d" -qAtc "SELECT mz_now()")
	cat >"$work/tsread.$d.sql" <<EOS
\set aid random(1, 100000)
SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = :aid;
EOS
	cat >"$work/point.$d.sql" <<EOS
\set aid random(1, 100000)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
EOS
	cat >"$work/rotxn.$d.sql" <<EOS
\set aid random(1, 100000)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid + 1;
COMMIT;
EOS
	cat >"$work/update.$d.sql" <<EOS
\set aid random(1, 100000)
\set delta random(-5000, 5000)
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
EOS
	psql -h 127.0.0.1 -p "${port[$d]}" -U postgres -d "$d" -qAtc "CREATE TABLE ins (x int)" >/dev/null
	echo 'INSERT INTO ins VALUES (1);' >"$work/insert.$d.sql"
	cat >"$work/asof.$d.sql" <<EOS
\set aid random(1, 100000)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid AS OF $asof_t;
EOS
done
# As in managed.sh, the AS OF time is older than the proxies' lease floors
# by the time it is read (a heartbeat every 5 s moves them).
sleep 11

run() { # database script mode reads [clients]
	pgbench -n -M "$3" -c "${5:-1}" -j "$(( ${5:-1} < 2 ? 1 : 2 ))" -t "$4" -f "$work/$2.$1.sql" \
		-h 127.0.0.1 -p "${port[$1]}" -U postgres "$1" 2>&1
}
# cpu database script mode: mzproxy's CPU per read over 2*READS reads of
# each of CLIENTS clients, µs.
cpu() {
	local p=${pid[$1]} c0 c1 out
	c0=$(cpu_ticks "$p")
	out=$(run "$1" "$2" "$3" "$((READS * 2))" "$CLIENTS")
	c1=$(cpu_ticks "$p")
	grep -q "number of failed transactions: 0" <<<"$out" || { echo "$out" >&2; exit 1; }
	python3 -c "print(f'{($c1 - $c0) / $hz / $((READS * 2 * CLIENTS)) * 1e6:.1f}')"
}
printf '%-22s %-7s %-9s %10s %s\n' revision script mode "calls/read" "cpu-us/read (rounds)   per read: calls (failed)" >&2
for script in $SCRIPTS; do
	for mode in $MODES; do
		declare -A cpus=()
		for rev in $REVS; do
			run "$(rev_dbname "$rev")" "$script" "$mode" 200 >/dev/null # warm: plans, statements, holds
		done
		for _ in $(seq "$ROUNDS"); do
			for rev in $REVS; do
				d=$(rev_dbname "$rev")
				cpus[$rev]="${cpus[$rev]:-} $(cpu "$d" "$script" "$mode")"
			done
		done
		for rev in $REVS; do
			d=$(rev_dbname "$rev")
			total=0 breakdown=
			if [ "$STRACE" = 1 ]; then
				strace -c -f -p "${pid[$d]}" -o "$work/trace" 2>/dev/null &
				spid=$!
				if [ "${BACKEND:-}" = 1 ]; then
					strace -c -f -p "$(head -1 "$work/pg/postmaster.pid")" -o "$work/btrace" 2>/dev/null &
					bpid=$!
				fi
				sleep 0.5
				run "$d" "$script" "$mode" "$READS" "$CLIENTS" >/dev/null
				kill -INT "$spid" 2>/dev/null || true
				wait "$spid" 2>/dev/null || true
				if [ "${BACKEND:-}" = 1 ]; then
					kill -INT "$bpid" 2>/dev/null || true
					wait "$bpid" 2>/dev/null || true
					awk -v n="$((READS * CLIENTS))" -v rev="$rev" -v what="$script $mode" '
						$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { calls[$NF] += $4; total += $4 }
						END {
							printf "%-22s %-17s backend: %.2f calls/read: ", rev, what, total / n
							for (c in calls) if (calls[c] / n >= 0.05) printf "%s %.2f, ", c, calls[c] / n
							printf "\n"
						}' "$work/btrace" >&2
				fi
				total=$(awk '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {n += $4} END {print n + 0}' "$work/trace")
				breakdown=$(awk -v n="$((READS * CLIENTS))" '
					$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {
						calls[$NF] += $4; if (NF >= 6) errs[$NF] += $5
					}
					END { for (c in calls) if (calls[c] / n >= 0.05) printf "%s %.2f (%.2f), ", c, calls[c] / n, errs[c] / n }
				' "$work/trace")
			fi
			med=$(tr ' ' '\n' <<<"${cpus[$rev]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
			printf '%-22s %-7s %-9s %10.2f %s (%s)   %s\n' "$rev" "$script" "$mode" \
				"$(python3 -c "print(${total:-0} / $READS / $CLIENTS)")" "$med" "${cpus[$rev]# }" "$breakdown"
		done
		unset cpus
	done
done
