#!/usr/bin/env bash
# Managed tables (issue 4): read throughput on tables created through
# mzproxy (so catalog-managed, with history) against the same data in plain
# PostgreSQL tables of a second database read directly; and the latency of
# catalog-managed DDL (CREATE TABLE + DROP TABLE through the proxy) against
# the same DDL directly, at 100 and 1,000 existing tables.
#
# pgbench custom scripts, interleaved over rounds, median TPS:
#   point: SELECT abalance FROM pgbench_accounts WHERE aid = :aid
#   join3: pgbench_accounts JOIN pgbench_branches JOIN pgbench_tellers, one aid
#   rotxn: a read-only transaction: BEGIN, two point SELECTs, COMMIT (through
#          mzproxy: pinned at one timestamp, REPEATABLE READ, timedomain checked)
#   tsread: a timestamped point read, SELECT abalance, mz_now() ... WHERE aid =
#          :aid (through mzproxy: pinned by the oracle, read from history)
#   asof:  the point read AS OF an old time, the end of the load (through
#          mzproxy: a read hold below the floor, read from history); the
#          managed pgbench_accounts retains an hour of history for it
#   tsread and asof run the plain point read on direct: they are measured
#   against PostgreSQL's own point read.
# plus the CPU time of the mzproxy process per statement.
#
# More mzproxy processes on the same PostgreSQL, measured in the same
# interleaved rounds as extra targets:
#   VARIANTS="p1:GOMAXPROCS=1 gc400:GOGC=400"  this tree's binary with that
#          environment (target mz-<name>);
#   BASELINE=<git revision>  a binary built from that revision (target
#          mz-baseline), for a before/after comparison in one run; it must
#          have the same storage version (a proxy refuses a newer schema).
#
# usage: bench/managed.sh
#   env: ROUNDS=3 DURATION=10 CLIENTS=8 JOBS=2 SCALE=1 MODES="simple prepared"
#        SCRIPTS="point join3 rotxn" (also: tsread asof; SCRIPTS= skips the
#        read part)
#        DDL_COUNTS=100,1000 DDL_PAIRS=40 (DDL_COUNTS= skips the DDL part)
#        VARIANTS= BASELINE=
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-8}
JOBS=${JOBS:-2}
SCALE=${SCALE:-1}
MODES=${MODES:-"simple prepared"}
SCRIPTS=${SCRIPTS-"point join3 rotxn"}
DDL_COUNTS=${DDL_COUNTS-100,1000}
DDL_PAIRS=${DDL_PAIRS:-40}
VARIANTS=${VARIANTS:-}
BASELINE=${BASELINE:-}

bench_setup
declare -A port db pid
port[direct]=$pg_port db[direct]=plain
db[mzproxy]=managed
targets="direct mzproxy"
# The databases first: a variant is up once it answers in managed.
for db in managed plain ddl_mz ddl_direct; do
	psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE $db" >/dev/null
done
start_variant() { # name binary env...
	db[$1]=managed
	bench_mzproxy "$@"
	targets="$targets $1"
}
if [ -n "$BASELINE" ]; then
	build_rev "$BASELINE" baseline
	# A baseline with idle release (session 15 on) would let go of
	# managed between rounds and, registering again, find the schema
	# this tree upgraded it to: newer than it knows, so it refuses.
	# It keeps the database instead.
	keep=()
	"$work/mzproxy-baseline" --help 2>&1 | grep -q -- -idle-release && keep=(-- --idle-release 0)
	start_variant mz-baseline "$work/mzproxy-baseline" "${keep[@]}"
fi
for v in $VARIANTS; do
	start_variant "mz-${v%%:*}" "$work/mzproxy" $(echo "${v#*:}" | tr , ' ')
done

# The read part (its body is not indented: it holds here-documents).
if [ -n "$SCRIPTS" ]; then
echo "pgbench -i -s $SCALE: through mzproxy into managed, directly into plain" >&2
t0=$(now)
pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$mz_port" -U postgres managed >"$work/init-mz.log" 2>&1 ||
	{ cat "$work/init-mz.log" >&2; exit 1; }
t1=$(now)
pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres plain >"$work/init-direct.log" 2>&1 ||
	{ cat "$work/init-direct.log" >&2; exit 1; }
t2=$(now)
printf 'pgbench -i: through mzproxy %.1f s, directly %.1f s\n' "$(python3 -c "print($t1-$t0)")" "$(python3 -c "print($t2-$t1)")" >&2
managed=$(psql -h 127.0.0.1 -p "$pg_port" -U postgres -d managed -Atc \
	"SELECT count(*) FROM mzproxy.catalog WHERE name LIKE 'pgbench%'" 2>/dev/null || echo "?")
echo "pgbench_* tables in mzproxy's catalog of the managed database: $managed (4 expected)" >&2

if [[ " $SCRIPTS " == *" asof "* ]]; then
	psql -h 127.0.0.1 -p "$mz_port" -U postgres -d managed -qAtc \
		"ALTER TABLE pgbench_accounts SET (RETAIN HISTORY FOR '1h')" >/dev/null
	asof_t=$(psql -h 127.0.0.1 -p "$mz_port" -U postgres -d managed -qAtc "SELECT mz_now()")
fi
cat >"$work/point.sql" <<EOF
\set aid random(1, 100000 * $SCALE)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
EOF
cat >"$work/join3.sql" <<EOF
\set aid random(1, 100000 * $SCALE)
SELECT a.aid, a.abalance, b.bbalance, t.tid, t.tbalance
  FROM pgbench_accounts a
  JOIN pgbench_branches b ON b.bid = a.bid
  JOIN pgbench_tellers t ON t.bid = b.bid
 WHERE a.aid = :aid;
EOF
cat >"$work/rotxn.sql" <<EOF
\set aid random(1, 100000 * $SCALE)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid + 1;
COMMIT;
EOF
cat >"$work/tsread.sql" <<EOF
\set aid random(1, 100000 * $SCALE)
SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = :aid;
EOF
cat >"$work/asof.sql" <<EOF
\set aid random(1, 100000 * $SCALE)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid AS OF ${asof_t:-0};
EOF
cp "$work/point.sql" "$work/tsread.direct.sql"
cp "$work/point.sql" "$work/asof.direct.sql"

for t in $targets; do
	for _ in $(seq 50); do
		psql -h 127.0.0.1 -p "${port[$t]}" -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1 && break
		sleep 0.2
	done
done

results="$work/results.txt"
: >"$results"
for round in $(seq "$ROUNDS"); do
	for script in $SCRIPTS; do
		for mode in $MODES; do
			for t in $targets; do
				p=${pid[$t]:-}
				c0=0
				[ -n "$p" ] && c0=$(cpu_ticks "$p")
				file=$work/$script.sql
				if [ "$t" = direct ] && [ -f "$work/$script.direct.sql" ]; then
					file=$work/$script.direct.sql
				fi
				out=$(pgbench -n -f "$file" -M "$mode" -c "$CLIENTS" -j "$JOBS" -T "$DURATION" \
					-h 127.0.0.1 -p "${port[$t]}" -U postgres "${db[$t]}" 2>&1) || true
				c1=0
				[ -n "$p" ] && c1=$(cpu_ticks "$p")
				tps=$(awk '/^tps = /{print $3}' <<<"$out")
				n=$(awk '/^number of transactions actually processed/{print $NF}' <<<"$out" | cut -d/ -f1)
				cpu=-
				if [ -n "$p" ] && [ "${n:-0}" -gt 0 ]; then
					cpu=$(python3 -c "print(f'{($c1 - $c0) / $hz / $n * 1e6:.1f}')")
				fi
				if [ -z "$tps" ]; then
					echo "pgbench failed:" >&2
					tail -5 <<<"$out" >&2
				fi
				echo "$round $t $script $mode ${tps:-0} $cpu" >>"$results"
				printf 'round %d %-6s %-9s %-11s %10s tps  cpu %s us/stmt\n' \
					"$round" "$script" "$mode" "$t" "${tps:-0}" "$cpu" >&2
			done
		done
	done
done

python3 - "$results" "$MODES" "$ROUNDS" "$DURATION" "$CLIENTS" "$SCALE" "$SCRIPTS" "$targets" <<'EOF'
import statistics, sys
path, modes, rounds, duration, clients, scale, scripts, targets = sys.argv[1:]
tps, cpu = {}, {}
for line in open(path):
    r, t, s, m, v, c = line.split()
    tps.setdefault((t, s, m), {})[r] = float(v)
    if c != "-":
        cpu.setdefault((t, s, m), []).append(float(c))
print(f"pgbench custom scripts, {clients} clients, scale {scale}, {rounds} rounds x {duration} s, interleaved; median TPS")
print("(direct: plain tables; the others: managed tables through that mzproxy)")
print()
print("| script | protocol | target | direct | target TPS | ratio of medians | median per-round ratio | CPU/stmt |")
print("|---|---|---|---|---|---|---|---|")
med = statistics.median
for s in scripts.split():
    for m in modes.split():
        d = tps[("direct", s, m)]
        for t in targets.split()[1:]:
            p = tps[(t, s, m)]
            ratio = med(p.values()) / med(d.values()) if med(d.values()) else 0
            per_round = med([p[r] / d[r] for r in p if d.get(r)])
            c = med(cpu[(t, s, m)]) if (t, s, m) in cpu else float("nan")
            print(f"| {s} | {m} | {t} | {med(d.values()):.0f} | {med(p.values()):.0f} | {ratio:.2f} | {per_round:.2f} | {c:.0f} µs |")
EOF
fi

if [ -n "$DDL_COUNTS" ]; then
	echo
	echo "CREATE TABLE + DROP TABLE pair latency, $DDL_PAIRS pairs per endpoint and count, alternating"
	echo
	(cd "$src" && go run ./bench/ddllatency \
		--proxy "postgres://postgres@127.0.0.1:$mz_port/ddl_mz?sslmode=disable" \
		--direct "postgres://postgres@127.0.0.1:$pg_port/ddl_direct?sslmode=disable" \
		--counts "$DDL_COUNTS" --pairs "$DDL_PAIRS")
fi
