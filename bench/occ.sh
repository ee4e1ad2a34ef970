#!/usr/bin/env bash
# Optimistic writes (issue #5), one run of each, mzproxy against PostgreSQL
# directly (plain tables in a database of their own: direct writes to
# managed tables are refused), pgbench's simple protocol (the optimistic
# path; pgbench -M extended autocommit writes take the pessimistic slot):
#
#   1. 8 clients incrementing one row: TPS, lost updates (the counter's
#      final value against pgbench's count of committed transactions), and
#      mzproxy's retries per committed statement (from /metrics). mzproxy
#      twice: the default --occ-max-concurrent 1 and 8 (every client in
#      the loop at once).
#   2. 32 clients doing blind single-row INSERTs.
#   3. One client updating random rows of 10,000 (uncontended): latency
#      p50/p95 from pgbench's per-transaction log; through mzproxy also
#      pessimistically (the UPDATE and a SELECT 1 in one query string).
#
# The machine is shared and noisy: only ratios from the same run mean
# anything.
#
# usage: bench/occ.sh
#   env: DURATION=10 INS_DURATION=30  SRC=tree (build the working tree instead of the last commit)
#        SECTIONS=123 (which of the three to run)
set -euo pipefail

DURATION=${DURATION:-10}
# The blind-insert runs are longer: 32 sessions take seconds to connect
# through mzproxy on a loaded machine, and pgbench's -T includes that.
INS_DURATION=${INS_DURATION:-30}
SECTIONS=${SECTIONS:-123}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_postgres

declare -A port pid mport
start_mzproxy() { # name flags...
	local name=$1; shift
	mport[$name]=$(free_port)
	bench_mzproxy "$name" "$work/mzproxy" -- --metrics-listen "127.0.0.1:${mport[$name]}" "$@"
}
start_mzproxy mz1
start_mzproxy mz8 --occ-max-concurrent 8

psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c 'CREATE DATABASE plain'
setup='CREATE TABLE counter (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO counter VALUES (1, 0);
CREATE TABLE ins (x int);
CREATE TABLE acct (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO acct SELECT g, 0 FROM generate_series(1, 10000) g;'
psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d plain -c "$setup"           # unmanaged
psql -q -h 127.0.0.1 -p "${port[mz1]}" -U postgres -d postgres -c "$setup"   # managed

printf 'UPDATE counter SET v = v + 1 WHERE id = 1;\n' >"$work/inc.sql"
printf 'INSERT INTO ins VALUES (1);\n' >"$work/ins.sql"
printf '\\set id random(1, 10000)\nUPDATE acct SET v = v + 1 WHERE id = :id;\n' >"$work/upd.sql"
# The same UPDATE and a SELECT in one query string: mzproxy runs a string of
# several statements pessimistically (begin_write), for comparison.
printf '\\set id random(1, 10000)\nUPDATE acct SET v = v + 1 WHERE id = :id \\; SELECT 1;\n' >"$work/updp.sql"

target_port() { case $1 in direct) echo "$pg_port" ;; *) echo "${port[$1]}" ;; esac; }
target_db() { case $1 in direct) echo plain ;; *) echo postgres ;; esac; }

# run target script clients [pgbench args...]: prints "tps processed failed".
run() {
	local target=$1 script=$2 clients=$3; shift 3
	local out
	out=$(cd "$work" && pgbench -n -M simple -f "$work/$script" -c "$clients" -j 2 -T "$DURATION" --max-tries 1000 "$@" \
		-h 127.0.0.1 -p "$(target_port "$target")" -U postgres "$(target_db "$target")" 2>&1) ||
		{ echo "pgbench $target $script failed:" >&2; echo "$out" >&2; exit 1; }
	local tps processed failed
	tps=$(awk '/^tps/ {print $3; exit}' <<<"$out")
	processed=$(awk -F': ' '/^number of transactions actually processed/ {split($2, a, "/"); print a[1]; exit}' <<<"$out")
	failed=$(awk -F': ' '/^number of failed transactions/ {split($2, a, " "); print a[1]; exit}' <<<"$out")
	echo "$tps $processed ${failed:-0}"
}

sql() { psql -h 127.0.0.1 -p "$(target_port "$1")" -U postgres -d "$(target_db "$1")" -Atc "$2"; }

metric() { # name target: a counter's value from mzproxy's /metrics
	curl -s "http://127.0.0.1:${mport[$2]}/metrics" | awk -v n="$1" '$1 ~ "^"n && !done {print $2; done = 1}'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

if [[ $SECTIONS == *1* ]]; then
echo "## 1. 8 clients incrementing one row (${DURATION}s each)"
for target in direct mz1 mz8; do
	before=$(sql "$target" 'SELECT v FROM counter WHERE id = 1')
	r0=0 c0=0
	if [ "$target" != direct ]; then
		r0=$(metric mzproxy_occ_retries "$target"); c0=$(metric mzproxy_occ_commits "$target")
	fi
	read -r tps processed failed < <(run "$target" inc.sql 8)
	after=$(sql "$target" 'SELECT v FROM counter WHERE id = 1')
	lost=$((processed - (after - before)))
	extra=""
	if [ "$target" != direct ]; then
		r1=$(metric mzproxy_occ_retries "$target"); c1=$(metric mzproxy_occ_commits "$target")
		extra=" retries/commit=$(ratio "$((r1 - r0))" "$((c1 - c0))")"
	fi
	declare "inc_$target=$tps"
	echo "$target: tps=$tps processed=$processed failed=$failed lost_updates=$lost$extra"
done
echo "ratio mz1/direct: $(ratio "$inc_mz1" "$inc_direct")  mz8/direct: $(ratio "$inc_mz8" "$inc_direct")"
fi

if [[ $SECTIONS == *2* ]]; then
echo "## 2. 32 clients, blind single-row INSERT (${INS_DURATION}s each)"
for target in direct mz1 mz8; do
	read -r tps processed failed < <(DURATION=$INS_DURATION run "$target" ins.sql 32)
	declare "ins_$target=$tps"
	echo "$target: tps=$tps processed=$processed failed=$failed"
done
echo "ratio mz1/direct: $(ratio "$ins_mz1" "$ins_direct")  mz8/direct: $(ratio "$ins_mz8" "$ins_direct")"
fi

if [[ $SECTIONS == *3* ]]; then
echo "## 3. one client, single-row UPDATE of random rows (${DURATION}s each): latency"
for variant in direct:upd mz1:upd mz1:updp; do
	target=${variant%%:*} script=${variant#*:}
	rm -f "$work"/lat.*
	run "$target" "$script.sql" 1 -l --log-prefix="$work/lat" >/dev/null
	# pgbench's log: client, transaction, latency (us), script, epoch, us.
	read -r p50 p95 n < <(cat "$work"/lat.* | awk '{print $3}' | sort -n |
		awk '{a[NR] = $1} END {printf "%d %d %d\n", a[int(NR * 0.50)], a[int(NR * 0.95)], NR}')
	declare "p50_${target}_$script=$p50" "p95_${target}_$script=$p95"
	echo "$target ($script): transactions=$n p50=${p50}us p95=${p95}us"
done
echo "ratio mz1/direct: p50 $(ratio "$p50_mz1_upd" "$p50_direct_upd")x  p95 $(ratio "$p95_mz1_upd" "$p95_direct_upd")x"
echo "mzproxy pessimistic (UPDATE; SELECT 1 in one string) vs optimistic: p50 $(ratio "$p50_mz1_updp" "$p50_mz1_upd")x  p95 $(ratio "$p95_mz1_updp" "$p95_mz1_upd")x"
fi
