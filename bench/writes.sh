#!/usr/bin/env bash
# Writes (issue 14): mzproxy with its DEFAULT flags on managed tables
# against PostgreSQL directly on plain tables of another database, and
# against mzproxy built from BASELINE (its own database), interleaved in one
# run: each workload runs on every target back to back. Two more mzproxy
# processes serve only section 5 (one of this tree, one of BASELINE).
#
#   1. 1 client, single-row UPDATE of random rows of 10,000: latency p50 and
#      p95 from pgbench's per-transaction log, -M simple and -M prepared.
#   2. 8 clients incrementing one row: TPS, and lost updates (the counter's
#      growth against pgbench's count of committed transactions).
#   3. 32 clients, blind single-row INSERT: TPS.
#   4. pgbench TPC-B (pgbench -i -s SCALE through the proxy for the managed
#      copy, directly for the plain one), 8 clients, --max-tries 10: TPS and
#      the failed-transaction percentage.
#   5. two mzproxy processes on the same database, 8 clients (4 per proxy)
#      x 50 increments of one row (pgbench -t 50, --max-tries 1): how many
#      landed, and the 40001s (and 40P01s) the clients saw.
#
# Everything twice: durable (fsync on, PostgreSQL's and the embedded
# backend's default), then fsync off (ALTER SYSTEM + reload: fsync is a
# SIGHUP setting, so nothing restarts). Apart from TPC-B, clients run with
# --max-tries 1, so any 40001 an autocommit statement returns shows up as a
# failed transaction instead of being retried by pgbench.
#
# The machine is shared and noisy: only ratios from the same run mean
# anything.
#
# usage: bench/writes.sh
#   env: DURATION=12 (seconds per pgbench -T run; about 30 runs in all)
#        BASELINE=310ec21 (git revision; BASELINE= measures without it)
#        SCALE=10 FSYNC="on off" SECTIONS=12345
#        VARIANT_FLAGS="--occ-max-concurrent 64"  also this tree's mzproxy with
#                 these flags (target "variant", on database managed too), in
#                 sections 1-4: what a flag would change, in the same run
#        SRC=tree (build the working tree instead of the last commit)
#        ORDER=reverse (with BASELINE: each workload runs on direct, then
#                 BASELINE's proxy, then this tree's)
set -euo pipefail

DURATION=${DURATION:-12}
BASELINE=${BASELINE-310ec21}
VARIANT_FLAGS=${VARIANT_FLAGS:-}
SCALE=${SCALE:-10}
FSYNC=${FSYNC:-"on off"}
SECTIONS=${SECTIONS:-12345}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_postgres

declare -A port pid db
port[direct]=$pg_port
db[direct]=plain db[mz]=managed db[mz2]=managed db[base]=baseline db[base2]=baseline db[variant]=managed
targets="direct mz"

sql() { # target sql: run on the target's database through the target
	psql -X -h 127.0.0.1 -p "${port[$1]}" -U postgres -d "${db[$1]}" -qAtc "$2"
}
direct_sql() { # database sql: run on PostgreSQL directly
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAtc "$2"
}

# start_proxies: two mzproxy processes of this tree on database managed
# (their --backend), and two of BASELINE on database baseline: the second
# of each pair serves only section 5.
start_proxies() {
	local t
	for t in plain managed baseline; do direct_sql postgres "CREATE DATABASE $t"; done
	for t in mz mz2; do
		bench_mzproxy "$t" "$work/mzproxy" -- --backend "${backend/\/postgres\?//managed?}"
	done
	if [ -n "$VARIANT_FLAGS" ]; then
		# shellcheck disable=SC2086 # the flags are words
		bench_mzproxy variant "$work/mzproxy" -- --backend "${backend/\/postgres\?//managed?}" $VARIANT_FLAGS
		targets="$targets variant"
	fi
	[ -n "$BASELINE" ] || return 0
	echo "building mzproxy $BASELINE" >&2
	build_rev "$BASELINE" baseline
	for t in base base2; do
		bench_mzproxy "$t" "$work/mzproxy-baseline" -- --backend "${backend/\/postgres\?//baseline?}"
	done
	targets="$targets base"
	# ORDER=reverse: the proxies in the other order (direct, then baseline
	# before this tree), to alternate which one runs first.
	if [ "${ORDER:-}" = reverse ]; then targets="direct base mz${VARIANT_FLAGS:+ variant}"; fi
}

# load_tables: the same tables on every target (through the proxies, so
# managed there), pgbench's TPC-B tables included. Each table is written
# once here: a managed table's first write makes its history (storage 38's
# lazy history), which in a timed run held the other 31 INSERT clients on
# the table's lock for some tenths of a second (docs/write-cost.md,
# session 19); the runs measure the steady state.
load_tables() {
	local t setup='CREATE TABLE counter (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO counter VALUES (1, 0), (2, 0);
CREATE TABLE ins (x int);
INSERT INTO ins VALUES (0);
CREATE TABLE acct (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO acct SELECT g, 0 FROM generate_series(1, 10000) g;'
	for t in $targets; do
		[ "$t" = variant ] && continue # it shares mz's tables
		echo "tables and pgbench -i -s $SCALE on $t" >&2
		sql "$t" "$setup"
		pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "${port[$t]}" -U postgres "${db[$t]}" >"$work/init.$t.log" 2>&1 ||
			{ echo "pgbench -i on $t failed:" >&2; cat "$work/init.$t.log" >&2; exit 1; }
	done
	# Settle what the loading left behind (autovacuum of the freshly loaded
	# pgbench tables would otherwise land in whichever run comes first).
	for t in plain managed baseline; do direct_sql "$t" 'VACUUM ANALYZE'; done
	direct_sql postgres CHECKPOINT
	printf '\\set id random(1, 10000)\nUPDATE acct SET v = v + 1 WHERE id = :id;\n' >"$work/upd.sql"
	printf 'UPDATE counter SET v = v + 1 WHERE id = 1;\n' >"$work/inc.sql"
	printf 'INSERT INTO ins VALUES (1);\n' >"$work/ins.sql"
	# Section 5 counts on a row of its own, so section 2 cannot blur it.
	printf 'UPDATE counter SET v = v + 1 WHERE id = 2;\n' >"$work/inc2.sql"
}

# pgbench_run target clients [pgbench args...]: pgbench against the
# target; prints "tps processed failed serialization deadlock". A run that
# pgbench itself reports as failed (an error other than 40001/40P01 aborts
# a client) stops the benchmark with its output.
pgbench_run() {
	local target=$1 clients=$2 out
	shift 2
	out=$(cd "$work" && pgbench -n -c "$clients" -j 2 --failures-detailed "$@" \
		-h 127.0.0.1 -p "${port[$target]}" -U postgres "${db[$target]}" 2>&1) ||
		{ echo "pgbench on $target failed:" >&2; echo "$out" >&2; exit 1; }
	awk '
		/^tps = / { tps = $3 }
		/^number of transactions actually processed:/ { split($NF, a, "/"); processed = a[1] }
		/^number of failed transactions:/ { failed = $5 }
		/^number of serialization failures:/ { ser = $5 }
		/^number of deadlock failures:/ { dl = $5 }
		END { printf "%s %d %d %d %d\n", tps, processed, failed, ser, dl }' <<<"$out"
}

results=$work/results.txt
: >"$results"
record() { echo "$*" >>"$results"; } # mode section metric target value

counter() { sql "$1" "SELECT v FROM counter WHERE id = $2"; }

# section_latency mode: 1 client updating random rows, both protocols.
section_latency() {
	local mode=$1 proto t p50 p95 n tps failed
	echo "## 1. one client, single-row UPDATE of random rows (${DURATION}s each): latency"
	for proto in simple prepared; do
		for t in $targets; do
			rm -f "$work"/lat.*
			read -r tps _ failed _ _ < <(pgbench_run "$t" 1 -M "$proto" -f "$work/upd.sql" \
				-T "$DURATION" --max-tries 1 -l --log-prefix="$work/lat")
			# pgbench's log: client, transaction, latency (us) or the
			# failure's kind, script, epoch, us.
			read -r p50 p95 n < <(cat "$work"/lat.* | awk '$3 ~ /^[0-9]+$/ {print $3}' | sort -n |
				awk '{a[NR] = $1} END {printf "%d %d %d\n", a[int(NR * 0.50)], a[int(NR * 0.95)], NR}')
			record "$mode" "update_$proto" p50_us "$t" "$p50"
			record "$mode" "update_$proto" p95_us "$t" "$p95"
			record "$mode" "update_$proto" failed "$t" "$failed"
			echo "$proto $t: transactions=$n tps=$tps p50=${p50}us p95=${p95}us failed=$failed"
		done
	done
}

# section_counter mode: 8 clients incrementing one row.
section_counter() {
	local mode=$1 t before after tps processed failed
	echo "## 2. 8 clients incrementing one row (${DURATION}s each)"
	for t in $targets; do
		before=$(counter "$t" 1)
		read -r tps processed failed _ _ < <(pgbench_run "$t" 8 -M simple -f "$work/inc.sql" \
			-T "$DURATION" --max-tries 1)
		after=$(counter "$t" 1)
		record "$mode" counter tps "$t" "$tps"
		record "$mode" counter failed "$t" "$failed"
		record "$mode" counter lost "$t" "$((processed - (after - before)))"
		echo "$t: tps=$tps committed=$processed counter+=$((after - before)) failed=$failed"
	done
}

# section_insert mode: 32 clients, blind INSERT.
section_insert() {
	local mode=$1 t tps processed failed
	echo "## 3. 32 clients, blind single-row INSERT (${DURATION}s each)"
	for t in $targets; do
		read -r tps processed failed _ _ < <(pgbench_run "$t" 32 -M simple -f "$work/ins.sql" \
			-T "$DURATION" --max-tries 1)
		record "$mode" insert tps "$t" "$tps"
		record "$mode" insert failed "$t" "$failed"
		echo "$t: tps=$tps committed=$processed failed=$failed"
	done
}

# section_tpcb mode: pgbench's TPC-B, 8 clients, up to 10 tries.
section_tpcb() {
	local mode=$1 t tps processed failed ser dl pct
	echo "## 4. pgbench TPC-B, scale $SCALE, 8 clients, --max-tries 10 (${DURATION}s each)"
	for t in $targets; do
		read -r tps processed failed ser dl < <(pgbench_run "$t" 8 -M simple -b tpcb-like \
			-T "$DURATION" --max-tries 10)
		pct=$(awk -v f="$failed" -v p="$processed" 'BEGIN { printf "%.2f", (f + p) ? 100 * f / (f + p) : 0 }')
		record "$mode" tpcb tps "$t" "$tps"
		record "$mode" tpcb failed_pct "$t" "$pct"
		echo "$t: tps=$tps committed=$processed failed=$failed (${pct}%: 40001 $ser, 40P01 $dl)"
	done
}

# section_two_proxies mode: 4 clients on each of two proxies of the same
# database, 50 increments each, at once (PostgreSQL directly: two pgbench
# processes on it, for reference).
section_two_proxies() {
	local mode=$1 t second before after start secs landed ser dl failed a b
	echo "## 5. two proxies, 8 clients (4 per proxy) x 50 increments of one row"
	for t in $targets; do
		[ "$t" = variant ] && continue # no second proxy with its flags
		second=$t
		[ "$t" = direct ] || second=${t}2
		before=$(counter "$t" 2)
		start=$(now)
		pgbench_run "$t" 4 -M simple -f "$work/inc2.sql" -t 50 --max-tries 1 >"$work/two.a" &
		a=$!
		pgbench_run "$second" 4 -M simple -f "$work/inc2.sql" -t 50 --max-tries 1 >"$work/two.b" &
		b=$!
		wait "$a" && wait "$b"
		secs=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
		after=$(counter "$t" 2)
		landed=$((after - before))
		read -r failed ser dl < <(cat "$work/two.a" "$work/two.b" | awk '{f += $3; s += $4; d += $5} END {print f, s, d}')
		record "$mode" two_proxies landed "$t" "$landed"
		record "$mode" two_proxies e40001 "$t" "$ser"
		record "$mode" two_proxies failed "$t" "$failed"
		echo "$t + $second: landed=$landed/400 in ${secs}s; clients saw 40001 x$ser, 40P01 x$dl, failed in all $failed"
	done
}

set_fsync() { # on|off, by reload
	direct_sql postgres "ALTER SYSTEM SET fsync = $1" && direct_sql postgres "SELECT pg_reload_conf()" >/dev/null
	for _ in $(seq 50); do
		[ "$(direct_sql postgres 'SHOW fsync')" = "$1" ] && return 0
		sleep 0.1
	done
	echo "fsync did not become $1" >&2
	exit 1
}

start_proxies
load_tables
echo "run of $(git -C "$root" rev-parse --short HEAD)${BASELINE:+ against $BASELINE}${VARIANT_FLAGS:+; variant: mzproxy $VARIANT_FLAGS}; DURATION=$DURATION; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in $FSYNC; do
	set_fsync "$mode"
	echo
	echo "# fsync=$mode ($(date -u '+%H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg))"
	[[ $SECTIONS == *1* ]] && section_latency "$mode"
	[[ $SECTIONS == *2* ]] && section_counter "$mode"
	[[ $SECTIONS == *3* ]] && section_insert "$mode"
	[[ $SECTIONS == *4* ]] && section_tpcb "$mode"
	[[ $SECTIONS == *5* ]] && section_two_proxies "$mode"
done
echo
echo "done $(date -u '+%H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
# The table: for each workload and fsync setting, the direct figure, then
# mzproxy's (and the baseline's) with its ratio to direct; latency ratios
# are mzproxy's latency over direct's (so above 1 is slower), throughput
# ratios mzproxy's TPS over direct's (so below 1 is slower). Counts
# (failed, lost, landed, 40001) are given as they are.
python3 - "$results" "$targets" "$SCALE" <<'PY'
import sys
path, targets, scale = sys.argv[1], sys.argv[2].split(), sys.argv[3]
r, modes = {}, []
for line in open(path):
    mode, section, metric, target, value = line.split()
    r[(mode, section, metric, target)] = value
    if mode not in modes:
        modes.append(mode)
rows = [
    ("update_simple", "p50_us", "1 client, UPDATE random row, simple: p50 latency (µs)"),
    ("update_simple", "p95_us", "1 client, UPDATE random row, simple: p95 latency (µs)"),
    ("update_prepared", "p50_us", "1 client, UPDATE random row, prepared: p50 latency (µs)"),
    ("update_prepared", "p95_us", "1 client, UPDATE random row, prepared: p95 latency (µs)"),
    ("counter", "tps", "8 clients, increment one row: TPS"),
    ("counter", "lost", "8 clients, increment one row: lost updates"),
    ("counter", "failed", "8 clients, increment one row: failed (40001)"),
    ("insert", "tps", "32 clients, blind INSERT: TPS"),
    ("insert", "failed", "32 clients, blind INSERT: failed (40001)"),
    ("tpcb", "tps", f"TPC-B scale {scale}, 8 clients, --max-tries 10: TPS"),
    ("tpcb", "failed_pct", "TPC-B: failed transactions (%)"),
    ("two_proxies", "landed", "two proxies, 8 x 50 increments: landed of 400"),
    ("two_proxies", "e40001", "two proxies: 40001s clients saw"),
]
ratios = {"p50_us", "p95_us", "tps"}
names = {"direct": "direct", "mz": "mzproxy", "base": "baseline", "variant": "variant"}
head = ["workload", "fsync"]
for t in targets:
    head.append(names[t])
    if t != "direct":
        head.append(f"{names[t]}/direct")
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for section, metric, label in rows:
    for mode in modes:
        if (mode, section, metric, "direct") not in r and (mode, section, metric, "mz") not in r:
            continue
        cells = [label, mode]
        direct = r.get((mode, section, metric, "direct"), "-")
        for t in targets:
            v = r.get((mode, section, metric, t), "-")
            cells.append(v if metric not in ("tps",) or v == "-" else f"{float(v):.0f}")
            if t == "direct":
                continue
            if metric in ratios and v != "-" and direct != "-" and float(direct) > 0:
                cells.append(f"**{float(v) / float(direct):.2f}**")
            else:
                cells.append("")
        print("| " + " | ".join(cells) + " |")
PY
