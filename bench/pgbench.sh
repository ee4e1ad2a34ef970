#!/usr/bin/env bash
# Read-only pgbench (-S) directly against PostgreSQL, through mzproxy, and
# through PgBouncer in session mode (installed with apt-get when missing and
# run as root; run as user postgres on a free port), interleaved over
# several rounds; prints median TPS per target and protocol and the ratio to
# direct, and, for each process in the middle (mzproxy, PgBouncer), its CPU
# time and its system calls per transaction. The machine is shared and noisy:
# only ratios measured in the same run mean anything.
#
# usage: bench/pgbench.sh
#   env: ROUNDS=5 DURATION=10 CLIENTS=8 JOBS=2 SCALE=10 MODES="simple extended prepared"
#        BASELINE=<git revision>  also mzproxy built from that revision (target
#                 mz-baseline), for a before/after comparison in one run; it
#                 serves database `baseline` (its own pgbench tables), so its
#                 storage version may differ; shared_buffers is then 512MB, so
#                 that both databases' tables (about 150 MB each at scale 10)
#                 stay in it and neither target's runs evict the other's pages
#        VARIANTS="name:VAR=v,VAR=v ..."  extra mzproxy processes with these
#                 environment variables (e.g. "p1:GOMAXPROCS=1 gc400:GOGC=400"),
#                 each measured as target mz-<name> in the same rounds
#        PROFILE=dir   write mzproxy's CPU profile (whole run) to dir/mzproxy.pprof
#                      and the binary to dir/mzproxy (go tool pprof dir/mzproxy dir/mzproxy.pprof)
#        SRC=tree      build the working tree instead of the last commit
#        PGBOUNCER_FRESH=1  also a second PgBouncer (target pgbouncer-fresh) that
#                      closes each server connection when its client leaves
#                      (server_lifetime = 0), so that each pgbench run gets fresh
#                      backends, as it does directly and through mzproxy; the
#                      pooled PgBouncer's backends are the previous runs', which
#                      have mapped the shared buffers already (below)
#        STRACE=secs   after the rounds, one extra run per protocol (MODES) and middle
#                      process with `strace -c -f` attached: calls and failed
#                      calls (EAGAIN) per transaction for each system call
#                      (strace slows the process; its counts, not its TPS,
#                      are the point)
# CPU is /proc/<pid>/stat utime+stime before and after each pgbench run
# (utime alone in parentheses: the process's own code, the rest being its
# system calls' work in the kernel);
# pgbench's own (bash's time) and the PostgreSQL cluster's (the postmaster,
# its live children and the exited ones it reaped, read 0.5 s after the run
# so that the run's backends have exited) are reported beside it, with the
# cluster's minor page faults: on a machine saturated by the run, the total
# CPU per transaction is what bounds its rate, and a middle process can move
# others' share (fewer wake-ups of pgbench; warm or fresh backends);
# system calls are `perf stat -e raw_syscalls:sys_enter -p <pid>` over the same
# run (skipped when perf cannot count them); context switches are the
# voluntary and involuntary ones of the process's threads
# (/proc/<pid>/task/*/status) over the same run: a middle process that sleeps
# or is preempted while it holds other sessions' bytes stalls them all.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-8}
JOBS=${JOBS:-2}
SCALE=${SCALE:-10}
MODES=${MODES:-"simple extended prepared"}
VARIANTS=${VARIANTS:-}
BASELINE=${BASELINE:-}
PROFILE=${PROFILE:-}
STRACE=${STRACE:-}
PGBOUNCER_FRESH=${PGBOUNCER_FRESH:-}

# With a baseline, two databases' pgbench tables share the buffers.
[ -n "$BASELINE" ] && export PG_SHARED_BUFFERS=${PG_SHARED_BUFFERS:-512MB}
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_postgres

declare -A port pid db
cleanup() {
	for name in "${!pid[@]}"; do
		[[ $name = pgbouncer* ]] && continue
		kill -0 "${pid[$name]}" 2>/dev/null || { echo "$name exited early:" >&2; tail -20 "$work/$name.log" >&2; }
	done
	for p in "${bench_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	# runuser does not pass the signal on to PgBouncer: stop it by its pid file.
	for f in "$work"/pgbouncer*.pid; do
		[ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

port[direct]=$pg_port

start_mzproxy() { # name env...
	bench_mzproxy "$1" "$work/mzproxy" "${@:2}"
}

targets="direct mzproxy"
if [ -n "$PROFILE" ]; then
	mkdir -p "$PROFILE"
	PROFILE=$(cd "$PROFILE" && pwd)
	cp "$work/mzproxy" "$PROFILE/mzproxy"
	start_mzproxy mzproxy "MZPROXY_CPU_PROFILE=$PROFILE/mzproxy.pprof"
else
	start_mzproxy mzproxy
fi
for v in $VARIANTS; do
	# shellcheck disable=SC2046
	start_mzproxy "mz-${v%%:*}" $(echo "${v#*:}" | tr , ' ')
	targets="$targets mz-${v%%:*}"
done

if [ -n "$BASELINE" ]; then
	build_rev "$BASELINE" baseline
	psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE baseline" >/dev/null
	db[mz-baseline]=baseline
	bench_mzproxy mz-baseline "$work/mzproxy-baseline" -- --backend "${backend/\/postgres\?//baseline?}"
	targets="$targets mz-baseline"
fi

if ! command -v pgbouncer >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "installing pgbouncer (apt-get install -y pgbouncer)" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null 2>&1 ||
		{ apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null 2>&1; } || true
fi
# The package's own service, if it started one, is not ours: ours runs as
# postgres with the ini below, on a free port.
pgbouncer_bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
# start_pgbouncer NAME [SETTING ...]: a PgBouncer in session mode on a free
# port, with these extra settings.
start_pgbouncer() {
	local name=$1
	shift
	port[$name]=$(free_port)
	cat >"$work/$name.ini" <<EOF
[databases]
postgres = host=$work port=$pg_port dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port[$name]}
unix_socket_dir =
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = session
max_client_conn = 200
default_pool_size = 50
logfile = $work/$name.log
pidfile = $work/$name.pid
EOF
	printf '%s\n' "$@" >>"$work/$name.ini"
	[ "$(id -u)" = 0 ] && chown postgres "$work/$name.ini"
	as_pg "$pgbouncer_bin" "$work/$name.ini" >/dev/null 2>&1 &
	bench_pids+=($!)
	targets="$targets $name"
}
pgbouncers=
if [ -x "$pgbouncer_bin" ]; then
	echo '"postgres" ""' >"$work/userlist.txt"
	[ "$(id -u)" = 0 ] && chown postgres "$work"/userlist.txt
	start_pgbouncer pgbouncer
	pgbouncers=pgbouncer
	if [ -n "$PGBOUNCER_FRESH" ]; then
		# server_lifetime = 0: a server connection serves one client
		# only, and is closed when that client leaves.
		start_pgbouncer pgbouncer-fresh "server_lifetime = 0"
		pgbouncers="$pgbouncers pgbouncer-fresh"
	fi
else
	echo "pgbouncer not installed (apt-get install pgbouncer): measuring without it" >&2
fi

for t in $targets; do
	for _ in $(seq 50); do
		psql -h 127.0.0.1 -p "${port[$t]}" -U postgres -d "${db[$t]:-postgres}" -Atc 'select 1' >/dev/null 2>&1 && break
		sleep 0.2
	done
done
for b in $pgbouncers; do pid[$b]=$(cat "$work/$b.pid"); done

perf_ok=
if command -v perf >/dev/null 2>&1 &&
	perf stat -x, -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then
	perf_ok=1
fi

echo "pgbench -i -s $SCALE" >&2
pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres postgres >/dev/null 2>&1
[ -n "$BASELINE" ] && pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres baseline >/dev/null 2>&1
# The tables into the shared buffers before the first run: pgbench -i
# writes them through a small ring of buffers, so the first target measured
# would otherwise read most of its pages in (a fault and a copy each) and
# the others not.
for d in postgres ${BASELINE:+baseline}; do
	psql -h 127.0.0.1 -p "$pg_port" -U postgres -d "$d" -qAt \
		-c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" \
		-c "SELECT pg_prewarm('pgbench_accounts') + pg_prewarm('pgbench_accounts_pkey') + pg_prewarm('pgbench_branches') + pg_prewarm('pgbench_tellers')" >/dev/null 2>&1 ||
		echo "pg_prewarm unavailable: the first run reads the tables in" >&2
done

# ctx_switches pid: voluntary and involuntary context switches, summed over
# the process's threads.
ctx_switches() {
	cat /proc/"$1"/task/*/status 2>/dev/null |
		awk '/^voluntary_ctxt_switches/{v += $2} /^nonvoluntary_ctxt_switches/{n += $2} END{print v + 0, n + 0}'
}

# syscall_breakdown file n: from strace -c, per system call, calls and failed calls
# per transaction, summed over the process's threads.
syscall_breakdown() {
	awk -v n="$2" '
		$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {
			calls[$NF] += $4; if (NF >= 6) errs[$NF] += $5
		}
		END { if (n > 0) for (c in calls) printf "  %-16s %8.2f (%.2f)\n", c, calls[c] / n, errs[c] / n }
	' "$1"
}

results="$work/results.txt"
: >"$results"
for round in $(seq "$ROUNDS"); do
	for mode in $MODES; do
		for t in $targets; do
			p=${pid[$t]:-}
			c0=0 u0=0 perfpid= vcs0=0 nvcs0=0
			if [ -n "$p" ]; then
				c0=$(cpu_ticks "$p") u0=$(user_ticks "$p")
				read -r vcs0 nvcs0 < <(ctx_switches "$p")
				if [ -n "$perf_ok" ]; then
					perf stat -x, -e raw_syscalls:sys_enter -o "$work/perf.out" -p "$p" &
					perfpid=$!
				fi
			fi
			k0=$(cluster_ticks) f0=$(cluster_faults)
			pgcpu=$( {
				TIMEFORMAT='%3U %3S'
				time pgbench -n -S -M "$mode" -c "$CLIENTS" -j "$JOBS" -T "$DURATION" \
					-h 127.0.0.1 -p "${port[$t]}" -U postgres "${db[$t]:-postgres}" >"$work/pgbench.out" 2>&1 || true
			} 2>&1)
			out=$(cat "$work/pgbench.out")
			tps=$(awk '/^tps = /{print $3}' <<<"$out")
			n=$(awk '/^number of transactions actually processed/{print $NF}' <<<"$out" | cut -d/ -f1)
			cpu=- sys=- cs=- others=-
			if [ -n "$p" ] && [ "${n:-0}" -gt 0 ]; then
				c1=$(cpu_ticks "$p") u1=$(user_ticks "$p")
				read -r vcs1 nvcs1 < <(ctx_switches "$p")
				cpu=$(python3 -c "print(f'{($c1 - $c0) / $hz / $n * 1e6:.1f}/{($u1 - $u0) / $hz / $n * 1e6:.1f}')")
				cs=$(python3 -c "print(f'{($vcs1 - $vcs0) / $n:.2f}/{($nvcs1 - $nvcs0) / $n:.2f}')")
				if [ -n "$perfpid" ]; then
					kill -INT "$perfpid" 2>/dev/null || true
					wait "$perfpid" 2>/dev/null || true
					calls=$(awk -F, '/raw_syscalls:sys_enter/{print $1}' "$work/perf.out")
					[ -n "$calls" ] && sys=$(python3 -c "print(f'{$calls / $n:.2f}')")
				fi
			elif [ -n "$perfpid" ]; then
				kill -INT "$perfpid" 2>/dev/null || true
				wait "$perfpid" 2>/dev/null || true
			fi
			if [ "${n:-0}" -gt 0 ]; then
				# The run's backends exit once their clients (or mzproxy's
				# sessions) have gone, and are counted once reaped.
				sleep 0.5
				k1=$(cluster_ticks) f1=$(cluster_faults)
				others=$(python3 -c "u, s = '$pgcpu'.split(); print(f'{(float(u) + float(s)) / $n * 1e6:.1f}/{($k1 - $k0) / $hz / $n * 1e6:.1f}/{($f1 - $f0) / $n:.2f}')")
			fi
			echo "$t $mode ${tps:-0} $cpu $sys $cs $others" >>"$results"
			printf 'round %d %-9s %-15s %10s tps  cpu %6s us/txn  syscalls %6s /txn  switches %9s /txn  pgbench/cluster us, faults /txn %s\n' \
				"$round" "$mode" "$t" "${tps:-0}" "$cpu" "$sys" "$cs" "$others" >&2
		done
	done
done

if [ -n "$STRACE" ]; then
	# strace -c counts each system call and its failures: a read that
	# found nothing (EAGAIN) before its wait is a call spent for nothing.
	for mode in $MODES; do
		for t in $targets; do
			p=${pid[$t]:-}
			[ -n "$p" ] || continue
			strace -c -f -p "$p" -o "$work/trace.$t" 2>/dev/null &
			spid=$!
			sleep 0.5
			out=$(pgbench -n -S -M "$mode" -c "$CLIENTS" -j "$JOBS" -T "$STRACE" \
				-h 127.0.0.1 -p "${port[$t]}" -U postgres "${db[$t]:-postgres}" 2>&1) || true
			kill -INT "$spid" 2>/dev/null || true
			wait "$spid" 2>/dev/null || true
			n=$(awk '/^number of transactions actually processed/{print $NF}' <<<"$out" | cut -d/ -f1)
			echo
			echo "strace -c -f of $t over $STRACE s of pgbench -S -M $mode: $n transactions; calls (failed) per transaction:"
			syscall_breakdown "$work/trace.$t" "${n:-0}" | sort -k2 -rn | head -8
		done
	done
	echo
fi

python3 - "$results" "$targets" "$MODES" "$ROUNDS" "$DURATION" "$CLIENTS" "$SCALE" <<'EOF'
import statistics, sys
path, targets, modes, rounds, duration, clients, scale = sys.argv[1:]
targets, modes = targets.split(), modes.split()
tps, cpu, ucpu, sysc, vcs, nvcs, pgb, clu, flt = {}, {}, {}, {}, {}, {}, {}, {}, {}
for line in open(path):
    t, m, v, c, s, cs, others = line.split()
    if others != "-":
        a, b, f = others.split("/")
        pgb.setdefault((t, m), []).append(float(a))
        clu.setdefault((t, m), []).append(float(b))
        flt.setdefault((t, m), []).append(float(f))
    tps.setdefault((t, m), []).append(float(v))
    if c != "-":
        c, u = c.split("/")
        cpu.setdefault((t, m), []).append(float(c))
        ucpu.setdefault((t, m), []).append(float(u))
    if s != "-":
        sysc.setdefault((t, m), []).append(float(s))
    if cs != "-":
        vol, invol = cs.split("/")
        vcs.setdefault((t, m), []).append(float(vol))
        nvcs.setdefault((t, m), []).append(float(invol))
print(f"pgbench -S, {clients} clients, scale {scale}, {rounds} rounds x {duration} s, interleaved; median TPS (ratio to direct)")
print()
print("| protocol | " + " | ".join(targets) + " |")
print("|---|" + "---|" * len(targets))
for m in modes:
    direct = statistics.median(tps[("direct", m)])
    cells = []
    for t in targets:
        med = statistics.median(tps[(t, m)])
        cells.append(f"{med:.0f}" if t == "direct" else f"{med:.0f} ({med / direct:.2f})")
    print(f"| {m} | " + " | ".join(cells) + " |")
print()
print("Median of each round's ratio to direct (steadier when the machine's load drifts)")
print()
print("| protocol | " + " | ".join(targets[1:]) + " |")
print("|---|" + "---|" * (len(targets) - 1))
for m in modes:
    cells = []
    for t in targets[1:]:
        r = statistics.median(b / a for a, b in zip(tps[("direct", m)], tps[(t, m)]) if a)
        cells.append(f"{r:.2f}")
    print(f"| {m} | " + " | ".join(cells) + " |")
middle = [t for t in targets if t != "direct"]
print()
print("CPU time of the middle process per transaction (µs, median over rounds; its user time alone in parentheses); system calls per transaction")
print()
print("| protocol | " + " | ".join(middle) + " |")
print("|---|" + "---|" * len(middle))
for m in modes:
    cells = []
    for t in middle:
        c = f"{statistics.median(cpu[(t, m)]):.1f} µs ({statistics.median(ucpu[(t, m)]):.1f})" if (t, m) in cpu else "-"
        s = f"{statistics.median(sysc[(t, m)]):.1f} sc" if (t, m) in sysc else ""
        cells.append(f"{c} / {s}" if s else c)
    print(f"| {m} | " + " | ".join(cells) + " |")
print()
print("Context switches of the middle process per transaction, voluntary / involuntary (median over rounds)")
print()
print("| protocol | " + " | ".join(middle) + " |")
print("|---|" + "---|" * len(middle))
for m in modes:
    cells = []
    for t in middle:
        if (t, m) in vcs:
            cells.append(f"{statistics.median(vcs[(t, m)]):.2f} / {statistics.median(nvcs[(t, m)]):.2f}")
        else:
            cells.append("-")
    print(f"| {m} | " + " | ".join(cells) + " |")
print()
print("CPU per transaction (µs, median over rounds): pgbench + PostgreSQL cluster + middle process = total; in parentheses the cluster's minor page faults per transaction")
print()
print("| protocol | " + " | ".join(targets) + " |")
print("|---|" + "---|" * len(targets))
for m in modes:
    cells = []
    for t in targets:
        if (t, m) not in clu:
            cells.append("-")
            continue
        a, b = statistics.median(pgb[(t, m)]), statistics.median(clu[(t, m)])
        c = statistics.median(cpu[(t, m)]) if (t, m) in cpu else 0.0
        cells.append(f"{a:.1f} + {b:.1f} + {c:.1f} = {a + b + c:.1f} ({statistics.median(flt[(t, m)]):.2f})")
    print(f"| {m} | " + " | ".join(cells) + " |")
EOF
