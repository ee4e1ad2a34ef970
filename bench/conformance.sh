#!/usr/bin/env bash
# The sqllogictest conformance corpus (the team's shared sqlite corpus:
# select*.test and evidence/*.test) with cmd/mzslt directly against
# PostgreSQL and through mzproxy in front of the same PostgreSQL, over both
# query protocols, interleaved over several rounds; prints the median wall
# time per target and protocol and the ratio proxy/direct. Each file runs in
# a fresh database on both sides (mzslt's default), so the proxy's side also
# pays for installing its schema in each new database and for the managed
# tables' history on every INSERT.
#
# usage: bench/conformance.sh   (env: ROUNDS=5 PROTOCOLS="simple extended"
#                                CORPUS=<dir of select*.test and evidence/>,
#                                by default $MZPROXY_SLT_DIR as for the tests,
#                                else ../shared/slt/sqlite beside the clone)
#        MZPROXY_FLAGS="--history-reads"  flags of the mzproxy target
#        VARIANT_FLAGS="--history-reads"  also a second mzproxy with these
#                 flags (target "variant") in the same rounds, reported
#                 against direct and against the default mzproxy
#        VARIANT_BIN=<mzproxy binary>  the variant runs this build (e.g.
#                 another branch's) instead of this tree's
#        BASELINE=<git revision>  also that revision's mzslt directly
#                 (target base-direct) and through that revision's mzproxy
#                 (target baseline), in the same rounds: an A/B of runner
#                 and proxy together
#        TIMINGS=<dir>  each run's mzslt --timings into <dir>
#                 (<target>-<protocol>-<round>.tsv); bench/slttimes.py
#                 compares them per kind of statement
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-5}
PROTOCOLS=${PROTOCOLS:-"simple extended"}
CORPUS=${CORPUS:-${MZPROXY_SLT_DIR:-$root/../shared/slt/sqlite}}
[ -f "$CORPUS/select1.test" ] || { echo "no corpus at $CORPUS (set CORPUS or MZPROXY_SLT_DIR)" >&2; exit 1; }

VARIANT_FLAGS=${VARIANT_FLAGS:-}
VARIANT_BIN=${VARIANT_BIN:-}
BASELINE=${BASELINE:-}
TIMINGS=${TIMINGS:-}
MZPROXY_FLAGS=${MZPROXY_FLAGS:-}
# shellcheck disable=SC2086 # the flags are words
bench_setup $MZPROXY_FLAGS
(cd "$src" && go build -o "$work/mzslt" ./cmd/mzslt)
targets="direct mzproxy"
if [ -n "$VARIANT_FLAGS$VARIANT_BIN" ]; then
	# shellcheck disable=SC2086 # the flags are words
	bench_mzproxy variant "${VARIANT_BIN:-$work/mzproxy}" -- $VARIANT_FLAGS
	targets="$targets variant"
fi
declare -A slt
for t in direct mzproxy variant; do slt[$t]=$work/mzslt; done
if [ -n "$BASELINE" ]; then
	build_rev "$BASELINE" baseline
	(cd "$work/src-baseline" && go build -o "$work/mzslt-baseline" ./cmd/mzslt)
	bench_mzproxy baseline "$work/mzproxy-baseline"
	slt[base-direct]=$work/mzslt-baseline slt[baseline]=$work/mzslt-baseline
	targets="$targets base-direct baseline"
fi
[ -n "$TIMINGS" ] && mkdir -p "$TIMINGS"
files=($(cd "$CORPUS" && ls select*.test evidence/*.test))
expect=$src/cmd/mzslt/testdata/sqlite-expected.txt

declare -A url
url[direct]="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
url[mzproxy]="postgres://postgres@127.0.0.1:$mz_port/postgres?sslmode=disable"
url[variant]="postgres://postgres@127.0.0.1:${port[variant]:-0}/postgres?sslmode=disable"
url[base-direct]=${url[direct]}
url[baseline]="postgres://postgres@127.0.0.1:${port[baseline]:-0}/postgres?sslmode=disable"

results="$work/results.txt"
: >"$results"
for round in $(seq "$ROUNDS"); do
	for proto in $PROTOCOLS; do
		for t in $targets; do
			cpu_pid=$mz_pid
			case $t in variant | baseline) cpu_pid=${pid[$t]} ;; esac
			timings=()
			# (A baseline's runner may be older than --timings.)
			if [ -n "$TIMINGS" ] && [ "${slt[$t]}" = "$work/mzslt" ]; then
				timings=(--timings "$TIMINGS/$t-$proto-$round.tsv")
			fi
			c0=$(cpu_ticks "$cpu_pid")
			t0=$(now)
			# --expect checks the per-file counts against the committed
			# ones, so a timing is never of a run that went wrong (the
			# paths there are relative to the corpus).
			status=ok
			(cd "$CORPUS" && "${slt[$t]}" --url "${url[$t]}" --protocol "$proto" \
				--expect "$expect" "${timings[@]}" "${files[@]}") >"$work/mzslt.out" 2>&1 || status=mismatch
			t1=$(now)
			c1=$(cpu_ticks "$cpu_pid")
			secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
			cpu=$(python3 -c "print(f'{($c1 - $c0) / $hz:.2f}')")
			echo "$t $proto $secs $cpu $status" >>"$results"
			printf 'round %d %-8s %-8s %7s s  (mzproxy CPU %s s) %s\n' "$round" "$proto" "$t" "$secs" "$cpu" "$status" >&2
			if [ "$status" != ok ]; then
				tail -5 "$work/mzslt.out" >&2
			fi
		done
	done
done

python3 - "$results" "$PROTOCOLS" "$ROUNDS" "${#files[@]}" "${VARIANT_BIN:+$VARIANT_BIN }$VARIANT_FLAGS" "$BASELINE" <<'EOF'
import statistics, sys
path, protocols, rounds, nfiles, variant, baseline = sys.argv[1:]
secs, cpu, bad = {}, {}, set()
for line in open(path):
    t, p, s, c, status = line.split()
    secs.setdefault((t, p), []).append(float(s))
    cpu.setdefault((t, p), []).append(float(c))
    if status != "ok":
        bad.add((t, p))
print(f"mzslt over the sqlite corpus ({nfiles} files), {rounds} rounds, interleaved; median wall seconds")
print()
print("(per-round: the median of each round's mzproxy/direct, steadier when the machine's load drifts)")
print()
print("| protocol | direct | mzproxy | mzproxy/direct | per-round | mzproxy CPU s |")
print("|---|---|---|---|---|---|")
for p in protocols.split():
    ds, ms = secs[("direct", p)], secs[("mzproxy", p)]
    d, m = statistics.median(ds), statistics.median(ms)
    per = statistics.median(b / a for a, b in zip(ds, ms))
    c = statistics.median(cpu[("mzproxy", p)])
    print(f"| {p} | {d:.1f} | {m:.1f} | {m / d:.2f}x | {per:.2f}x | {c:.1f} |")
if variant:
    print()
    print(f"mzproxy {variant} (target variant), same rounds:")
    print()
    print("| protocol | variant | variant/direct | variant/mzproxy | per-round variant/mzproxy | variant CPU s |")
    print("|---|---|---|---|---|---|")
    for p in protocols.split():
        ds, ms, vs = secs[("direct", p)], secs[("mzproxy", p)], secs[("variant", p)]
        v = statistics.median(vs)
        per = statistics.median(b / a for a, b in zip(ms, vs))
        c = statistics.median(cpu[("variant", p)])
        print(f"| {p} | {v:.1f} | {v / statistics.median(ds):.2f}x | {v / statistics.median(ms):.2f}x | {per:.2f}x | {c:.1f} |")
if baseline:
    print()
    print(f"{baseline}'s mzslt directly (base-direct) and through {baseline}'s mzproxy (baseline), same rounds:")
    print()
    print("| protocol | base-direct | baseline | baseline/base-direct | per-round | baseline CPU s |")
    print("|---|---|---|---|---|---|")
    for p in protocols.split():
        ds, bs = secs[("base-direct", p)], secs[("baseline", p)]
        d, b = statistics.median(ds), statistics.median(bs)
        per = statistics.median(y / x for x, y in zip(ds, bs))
        c = statistics.median(cpu[("baseline", p)])
        print(f"| {p} | {d:.1f} | {b:.1f} | {b / d:.2f}x | {per:.2f}x | {c:.1f} |")
if bad:
    print()
    print("counts differing from cmd/mzslt/testdata/sqlite-expected.txt in: " + ", ".join(f"{t}/{p}" for t, p in sorted(bad)))
EOF
