#!/usr/bin/env bash
# What the sqllogictest corpus costs mzproxy itself, in counts the
# machine's load moves little: per pass of the corpus (cmd/mzslt, each file
# in a fresh database) through this tree's mzproxy and through BASELINE's,
# both in front of one PostgreSQL with the same flags, the passes
# alternating per round and protocol, the difference of each proxy's
# /metrics across the pass: the Go heap's allocations (count and bytes),
# the plan cache's misses and the process's CPU seconds (which the load
# does move), with the wall time beside them.
#
# usage: bench/corpusproxy.sh   (env: BASELINE=<git revision> (required)
#                                FLAGS="--history-reads" flags of both proxies
#                                ROUNDS=3 PROTOCOLS="simple extended"
#                                CORPUS=<dir of select*.test and evidence/>,
#                                FILES="<files relative to it>" (default all))
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BASELINE=${BASELINE:?set BASELINE to a git revision}
FLAGS=${FLAGS:-}
ROUNDS=${ROUNDS:-3}
PROTOCOLS=${PROTOCOLS:-"simple extended"}
CORPUS=${CORPUS:-${MZPROXY_SLT_DIR:-$root/../shared/slt/sqlite}}
[ -f "$CORPUS/select1.test" ] || { echo "no corpus at $CORPUS (set CORPUS or MZPROXY_SLT_DIR)" >&2; exit 1; }

bench_postgres
declare -A port pid db mport
(cd "$src" && go build -o "$work/mzslt" ./cmd/mzslt)
build_rev "$BASELINE" baseline
for t in mzproxy baseline; do
	bin=$work/mzproxy
	[ $t = baseline ] && bin=$work/mzproxy-baseline
	mport[$t]=$(free_port)
	# shellcheck disable=SC2086 # the flags are words
	bench_mzproxy $t "$bin" -- $FLAGS --metrics-listen "127.0.0.1:${mport[$t]}"
done
if [ -n "${FILES:-}" ]; then
	files=($FILES)
else
	files=($(cd "$CORPUS" && ls select*.test evidence/*.test))
fi

# metrics NAME: the proxy's counters, one "name value" a line.
metrics() {
	curl -fsS "http://127.0.0.1:${mport[$1]}/metrics" |
		awk '/^(go_memstats_mallocs_total|go_memstats_alloc_bytes_total|mzproxy_plan_cache_misses_total|process_cpu_seconds_total) / {print $1, $2}'
}

results=$work/results.txt
: >"$results"
for round in $(seq "$ROUNDS"); do
	for proto in $PROTOCOLS; do
		for t in mzproxy baseline; do
			m0=$(metrics $t) t0=$(now)
			(cd "$CORPUS" && "$work/mzslt" --url "postgres://postgres@127.0.0.1:${port[$t]}/postgres?sslmode=disable" \
				--protocol "$proto" "${files[@]}") >"$work/mzslt.out" 2>&1 || true
			t1=$(now) m1=$(metrics $t)
			echo "$t $proto: $(tail -1 "$work/mzslt.out")" >&2
			python3 - "$t" "$proto" "$t0" "$t1" "$m0" "$m1" >>"$results" <<'PYEOF'
import sys
t, proto, t0, t1, m0, m1 = sys.argv[1:]
a = dict(l.split() for l in m0.splitlines())
b = dict(l.split() for l in m1.splitlines())
d = {k: float(b[k]) - float(a[k]) for k in a}
print(t, proto, float(t1) - float(t0), d["go_memstats_mallocs_total"], d["go_memstats_alloc_bytes_total"],
      d["mzproxy_plan_cache_misses_total"], d["process_cpu_seconds_total"])
PYEOF
			tail -1 "$results" >&2
		done
	done
done

python3 - "$results" "$BASELINE" "$FLAGS" "${#files[@]}" "$ROUNDS" <<'PYEOF'
import statistics, sys
path, baseline, flags, nfiles, rounds = sys.argv[1:]
rows = {}
for line in open(path):
    t, p, *v = line.split()
    rows.setdefault((t, p), []).append([float(x) for x in v])
print(f"mzproxy's counts per pass of the corpus ({nfiles} files, flags: {flags or 'none'}), this tree against {baseline}, {rounds} rounds; medians")
print()
print("| protocol | build | wall s | mallocs | MB allocated | plan-cache misses | mzproxy CPU s |")
print("|---|---|---|---|---|---|---|")
for (t, p), vs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "baseline")):
    med = [statistics.median(c) for c in zip(*vs)]
    name = baseline if t == "baseline" else "this tree"
    print(f"| {p} | {name} | {med[0]:.1f} | {med[1] / 1e6:.2f} M | {med[2] / 1e6:.0f} | {med[3]:.0f} | {med[4]:.2f} |")
PYEOF
