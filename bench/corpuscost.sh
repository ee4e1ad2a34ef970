#!/usr/bin/env bash
# What the sqllogictest corpus costs the backend, in counts that the
# machine's load does not move: per pass of the corpus (cmd/mzslt, each
# file in a fresh database) directly against PostgreSQL and through
# mzproxy, the connections the server received (log_connections), the
# statements it ran (pg_stat_statements, top-level and nested) and the
# cluster's CPU (the postmaster, its exited children and its live ones),
# with the wall time and mzproxy's CPU beside them. Each pass ends with a
# pause (TAIL seconds) that counts too: what a pass leaves running (a
# lease of a dropped database) is charged to it.
#
# usage: bench/corpuscost.sh   (env: PROTOCOLS="simple extended" TAIL=25
#                               CORPUS=<dir of select*.test and evidence/>,
#                               FILES="<files relative to it>" (default all)
#                               BASELINE=<git revision>: also mzproxy built
#                               from it (target baseline), in the same run
#                               FLAGS="--history-reads": flags of every mzproxy
#                               VARIANT_FLAGS="--history-reads": also every
#                               mzproxy with these flags more (targets
#                               mzproxy-v, baseline-v), in the same run
#                               TOP=20: each pass's TOP statements by calls
#                               (pg_stat_statements) into $TOP_DIR, default .)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PROTOCOLS=${PROTOCOLS:-"simple extended"}
TAIL=${TAIL:-25}
CORPUS=${CORPUS:-${MZPROXY_SLT_DIR:-$root/../shared/slt/sqlite}}
BASELINE=${BASELINE:-}
FLAGS=${FLAGS:-}
VARIANT_FLAGS=${VARIANT_FLAGS:-}
TOP=${TOP:-0}
TOP_DIR=${TOP_DIR:-.}
[ -f "$CORPUS/select1.test" ] || { echo "no corpus at $CORPUS (set CORPUS or MZPROXY_SLT_DIR)" >&2; exit 1; }

bench_postgres
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null
as_pg "$bindir/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
	-o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$work -c max_connections=200 -c shared_buffers=256MB -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.max=10000 -c log_connections=on" \
	start >/dev/null
psql -h 127.0.0.1 -p "$pg_port" -U postgres -qAtc 'CREATE EXTENSION pg_stat_statements' >/dev/null
declare -A port pid db
# shellcheck disable=SC2086 # the flags are words
bench_mzproxy mzproxy "$work/mzproxy" -- $FLAGS
targets="direct mzproxy"
if [ -n "$BASELINE" ]; then
	build_rev "$BASELINE" baseline
	# shellcheck disable=SC2086
	bench_mzproxy baseline "$work/mzproxy-baseline" -- $FLAGS
	targets="$targets baseline"
fi
if [ -n "$VARIANT_FLAGS" ]; then
	# shellcheck disable=SC2086
	bench_mzproxy mzproxy-v "$work/mzproxy" -- $FLAGS $VARIANT_FLAGS
	targets="$targets mzproxy-v"
	if [ -n "$BASELINE" ]; then
		# shellcheck disable=SC2086
		bench_mzproxy baseline-v "$work/mzproxy-baseline" -- $FLAGS $VARIANT_FLAGS
		targets="$targets baseline-v"
	fi
fi
(cd "$src" && go build -o "$work/mzslt" ./cmd/mzslt)
if [ -n "${FILES:-}" ]; then
	files=($FILES)
else
	files=($(cd "$CORPUS" && ls select*.test evidence/*.test))
fi

q() { psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "$1"; }

printf '| target | protocol | wall s | cluster CPU s | mzproxy CPU s | connections | statements (top + nested) |\n'
printf '|---|---|---|---|---|---|---|\n'
for proto in $PROTOCOLS; do
	for t in $targets; do
		p=$pg_port
		[ "$t" != direct ] && p=${port[$t]}
		cpu_pid=${pid[${t/direct/mzproxy}]}
		# The proxies idle in the postgres database between passes; settle.
		sleep 2
		q 'SELECT pg_stat_statements_reset()' >/dev/null
		conns0=$(grep -c 'connection received' "$work/pg.log" || true)
		c0=$(cluster_ticks) m0=$(cpu_ticks "$cpu_pid") t0=$(now)
		(cd "$CORPUS" && "$work/mzslt" --url "postgres://postgres@127.0.0.1:$p/postgres?sslmode=disable" \
			--protocol "$proto" "${files[@]}") >"$work/mzslt.out" 2>&1 || true
		t1=$(now)
		# The record counts, on stderr: a pass that went wrong shows.
		echo "$t $proto: $(tail -1 "$work/mzslt.out")" >&2
		sleep "$TAIL"
		c1=$(cluster_ticks) m1=$(cpu_ticks "$cpu_pid")
		conns1=$(grep -c 'connection received' "$work/pg.log" || true)
		stmts=$(q "SELECT sum(calls) FILTER (WHERE toplevel) || ' + ' || sum(calls) FILTER (WHERE NOT toplevel) FROM pg_stat_statements")
		[ "$t" = direct ] && m1=$m0
		if [ "$TOP" -gt 0 ]; then
			q "SELECT calls, toplevel, round(total_exec_time::numeric, 1), left(regexp_replace(query, '\s+', ' ', 'g'), 160)
			     FROM pg_stat_statements ORDER BY calls DESC LIMIT $TOP" >"$TOP_DIR/corpuscost-top-$t-$proto.txt"
		fi
		printf '| %s | %s | %.1f | %.2f | %.2f | %d | %s |\n' "$t" "$proto" \
			"$(python3 -c "print($t1 - $t0)")" "$(python3 -c "print(($c1 - $c0) / $hz)")" \
			"$(python3 -c "print(($m1 - $m0) / $hz)")" $((conns1 - conns0)) "$stmts"
	done
done
echo
echo "${#files[@]} files; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
