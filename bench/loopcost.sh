#!/usr/bin/env bash
# The session's instructions per pgbench -S transaction in the event loop
# (issue 15, session 25): proxy's BenchmarkLoopTransaction (Admit of the
# client's batch, Answer of each frame of the backend's answer the loop
# keeps) run under valgrind's lackey, which counts the instructions the
# program executes (callgrind does not run Go test binaries: it fails an
# assertion on Go's signals). Each figure is (instructions of a run of
# 3N transactions - of one of N) / 2N: the binary's start and the
# benchmark's setup cancel out. Lackey counts every thread's
# instructions, and the Go runtime's monitor thread (sysmon) runs more of
# them the longer the run lasts, which the machine's load stretches: at
# N=1000 the figures moved by about 20% between runs; at N=4000 the
# transactions' own instructions outweigh it more (run twice and compare).
# The loop's own code and its system calls are not in them
# (bench/pgbench.sh measures those).
#
# usage: bench/loopcost.sh
#   env: REVS="3dbfbcb tree" (git revisions, or tree for the working tree)
#        CASES="simple extended prepared prepared-pgx" N=4000
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
REVS=${REVS:-"main tree"}
CASES=${CASES:-"simple extended prepared prepared-pgx"}
N=${N:-4000}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
work=$(mktemp -d /tmp/loopcost.XXXXXX)
trap 'rm -rf "$work"' EXIT

for rev in $REVS; do
	src=$root
	if [ "$rev" != tree ]; then
		src=$work/src-$rev
		mkdir -p "$src"
		git -C "$root" archive "$rev" | tar -x -C "$src"
	fi
	(cd "$src" && go test -c -o "$work/proxy-$rev.test" ./proxy)
done

# instructions BINARY CASE ITERATIONS: guest instructions of one run.
instructions() {
	GODEBUG=asyncpreemptoff=1 valgrind --tool=lackey --basic-counts=yes "$1" \
		-test.run '^$' -test.bench "BenchmarkLoopTransaction/$2\$" -test.benchtime "${3}x" -test.cpu 1 2>&1 |
		awk '/guest instrs:/{gsub(",", "", $NF); print $NF}'
}

echo "instructions per transaction of BenchmarkLoopTransaction (lackey, (3N - N) / 2N, N=$N)"
echo
echo "| case | $(echo "$REVS" | sed 's/ / | /g') |"
echo "|---|$(for _ in $REVS; do printf -- '---|'; done)"
for c in $CASES; do
	row="| $c |"
	for rev in $REVS; do
		a=$(instructions "$work/proxy-$rev.test" "$c" "$N")
		b=$(instructions "$work/proxy-$rev.test" "$c" $((3 * N)))
		row="$row $(((b - a) / (2 * N))) |"
	done
	echo "$row"
done
