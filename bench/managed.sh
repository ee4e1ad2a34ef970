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
# plus the CPU time of the mzproxy process per statement.
#
# usage: bench/managed.sh
#   env: ROUNDS=3 DURATION=10 CLIENTS=8 JOBS=2 SCALE=1 MODES="simple prepared"
#        SCRIPTS="point join3 rotxn"
#        DDL_COUNTS=100,1000 DDL_PAIRS=40 (DDL_COUNTS= skips the DDL part)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-8}
JOBS=${JOBS:-2}
SCALE=${SCALE:-1}
MODES=${MODES:-"simple prepared"}
SCRIPTS=${SCRIPTS:-"point join3 rotxn"}
DDL_COUNTS=${DDL_COUNTS-100,1000}
DDL_PAIRS=${DDL_PAIRS:-40}

bench_setup
for db in managed plain ddl_mz ddl_direct; do
	psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE $db" >/dev/null
done

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

declare -A port db
port[direct]=$pg_port db[direct]=plain
port[mzproxy]=$mz_port db[mzproxy]=managed

results="$work/results.txt"
: >"$results"
for round in $(seq "$ROUNDS"); do
	for script in $SCRIPTS; do
		for mode in $MODES; do
			for t in direct mzproxy; do
				c0=$(cpu_ticks "$mz_pid")
				out=$(pgbench -n -f "$work/$script.sql" -M "$mode" -c "$CLIENTS" -j "$JOBS" -T "$DURATION" \
					-h 127.0.0.1 -p "${port[$t]}" -U postgres "${db[$t]}" 2>&1) || true
				c1=$(cpu_ticks "$mz_pid")
				tps=$(awk '/^tps = /{print $3}' <<<"$out")
				n=$(awk '/^number of transactions actually processed/{print $NF}' <<<"$out" | cut -d/ -f1)
				cpu=-
				if [ "$t" = mzproxy ] && [ "${n:-0}" -gt 0 ]; then
					cpu=$(python3 -c "print(f'{($c1 - $c0) / $hz / $n * 1e6:.1f}')")
				fi
				if [ -z "$tps" ]; then
					echo "pgbench failed:" >&2
					tail -5 <<<"$out" >&2
				fi
				echo "$t $script $mode ${tps:-0} $cpu" >>"$results"
				printf 'round %d %-6s %-9s %-8s %10s tps  mzproxy cpu %s us/stmt\n' \
					"$round" "$script" "$mode" "$t" "${tps:-0}" "$cpu" >&2
			done
		done
	done
done

python3 - "$results" "$MODES" "$ROUNDS" "$DURATION" "$CLIENTS" "$SCALE" "$SCRIPTS" <<'EOF'
import statistics, sys
path, modes, rounds, duration, clients, scale, scripts = sys.argv[1:]
tps, cpu = {}, {}
for line in open(path):
    t, s, m, v, c = line.split()
    tps.setdefault((t, s, m), []).append(float(v))
    if c != "-":
        cpu.setdefault((s, m), []).append(float(c))
print(f"pgbench custom scripts, {clients} clients, scale {scale}, {rounds} rounds x {duration} s, interleaved; median TPS")
print()
print("| script | protocol | direct (plain tables) | mzproxy (managed tables) | ratio | mzproxy CPU/stmt |")
print("|---|---|---|---|---|---|")
for s in scripts.split():
    for m in modes.split():
        d, p = statistics.median(tps[("direct", s, m)]), statistics.median(tps[("mzproxy", s, m)])
        c = statistics.median(cpu[(s, m)]) if (s, m) in cpu else float("nan")
        print(f"| {s} | {m} | {d:.0f} | {p:.0f} | {p / d if d else 0:.2f} | {c:.0f} µs |")
EOF

if [ -n "$DDL_COUNTS" ]; then
	echo
	echo "CREATE TABLE + DROP TABLE pair latency, $DDL_PAIRS pairs per endpoint and count, alternating"
	echo
	(cd "$src" && go run ./bench/ddllatency \
		--proxy "postgres://postgres@127.0.0.1:$mz_port/ddl_mz?sslmode=disable" \
		--direct "postgres://postgres@127.0.0.1:$pg_port/ddl_direct?sslmode=disable" \
		--counts "$DDL_COUNTS" --pairs "$DDL_PAIRS")
fi
