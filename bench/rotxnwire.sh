#!/usr/bin/env bash
# Backend instructions per read-only transaction over the wire (issue 15,
# docs/read-cost.md, session 19): bench/readcost.sh replays what mzproxy
# sends as single-user statements, which has no Bind, Execute or Parse
# message of its own; this counts the real thing. The whole PostgreSQL
# server runs under callgrind (each backend a process of its own, its
# counts written to a file of its own when it exits), and one pgbench
# client runs bench/managed.sh's rotxn (BEGIN, two point SELECTs, COMMIT)
# in each protocol, directly and through each revision's mzproxy (each
# with a database of its own, made through it by pgbench -i). The
# client's backends are found by its application_name in the server's
# log of connections. Each figure is (instructions of the backend of a client
# that ran N transactions - of one that ran 20) / (N - 20): the
# connection's start, the proxy's first pins (the peek, the statements it
# prepares) and the caches' warm-up cancel out, after a first client of
# each that is not counted. Instruction counts do not
# move with the machine's load.
#
# SCRIPT=tsread (session 20) counts bench/managed.sh's tsread instead: a
# timestamped point read (SELECT abalance, mz_now() ... WHERE aid = :aid)
# through each mzproxy, the plain point read directly; per read.
# SCRIPT=explain (session 22): EXPLAIN TIMESTAMP FOR that point read
# through each mzproxy (each one calls pin(), which reads the view
# settled_pin), the plain point read directly; per statement. Simple
# protocol only.
#
# usage: bench/rotxnwire.sh
#   env: REVS="main tree" (git revisions, or tree for the working tree)
#        MODES="simple extended prepared" N=220 SCRIPT=rotxn|tsread|explain
set -euo pipefail

REVS=${REVS:-"main tree"}
MODES=${MODES:-"simple extended prepared"}
N=${N:-220}
SCRIPT=${SCRIPT:-rotxn}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
SRC=tree bench_postgres
declare -A port pid db bin
direct_sql() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAtc "$2"; }

for rev in $REVS; do
	d=$(rev_dbname "$rev")
	rev_database "$rev"
	bin[$d]=$work/mzproxy
	[ "$rev" = tree ] || bin[$d]=$work/mzproxy-$d
	pgbench -i -q -s 1 -h 127.0.0.1 -p "${port[$d]}" -U postgres "$d" >"$work/init.$d.log" 2>&1 ||
		{ cat "$work/init.$d.log" >&2; exit 1; }
	kill "${pid[$d]}"
	wait "${pid[$d]}" 2>/dev/null || true
done
direct_sql postgres "CREATE DATABASE plain"
pgbench -i -q -s 1 -h 127.0.0.1 -p "$pg_port" -U postgres plain >"$work/init.plain.log" 2>&1
for d in plain $(for rev in $REVS; do rev_dbname "$rev"; done); do direct_sql "$d" 'VACUUM ANALYZE'; done
direct_sql postgres CHECKPOINT
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null

# The server again, under callgrind.
mkdir -p "$work/cg"
chown postgres "$work/cg" 2>/dev/null || true
as_pg valgrind --tool=callgrind --callgrind-out-file="$work/cg/cg.%p" "$bindir/postgres" -D "$work/pg" \
	-c listen_addresses=127.0.0.1 -c port="$pg_port" -c unix_socket_directories="$work" \
	-c autovacuum=off -c log_connections=on -c log_line_prefix='[%p] ' >"$work/vg.log" 2>&1 &
bench_pids+=("$!")
for _ in $(seq 300); do
	"$bindir/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && break
	sleep 0.5
done
for rev in $REVS; do
	d=$(rev_dbname "$rev")
	# Ticks every 180 ms: under callgrind a tick can come late, and a
	# pin more than a second old makes the guard refuse (the gated pin,
	# more statements) at random; with ticks this often none was seen
	# late enough.
	bench_mzproxy "$d" "${bin[$d]}" -- --backend "${backend/\/postgres\?//$d?}" --tick-interval 200ms
done

cat >"$work/rotxn.sql" <<'EOF'
\set aid random(1, 100000)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid + 1;
COMMIT;
EOF
cp "$work/rotxn.sql" "$work/direct.sql"
if [ "$SCRIPT" = tsread ]; then
	printf '%s\n' '\set aid random(1, 100000)' 'SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = :aid;' >"$work/rotxn.sql"
	printf '%s\n' '\set aid random(1, 100000)' 'SELECT abalance FROM pgbench_accounts WHERE aid = :aid;' >"$work/direct.sql"
fi
if [ "$SCRIPT" = explain ]; then
	printf '%s\n' '\set aid random(1, 100000)' 'EXPLAIN TIMESTAMP FOR SELECT abalance FROM pgbench_accounts WHERE aid = :aid;' >"$work/rotxn.sql"
	printf '%s\n' '\set aid random(1, 100000)' 'SELECT abalance FROM pgbench_accounts WHERE aid = :aid;' >"$work/direct.sql"
fi

# instructions app target-port database mode n: the instructions of the
# backends of one pgbench client (application_name app, new each time)
# that ran n transactions: every backend with that application_name
# (pgbench's own first connection too, and any the proxy opened for it),
# once each has exited.
instructions() {
	local app=$1 p=$2 d=$3 mode=$4 n=$5 pids="" cg total=0 x script=$work/rotxn.sql
	[ "$d" != plain ] || script=$work/direct.sql
	PGAPPNAME=$app pgbench -n -c 1 -t "$n" -M "$mode" -f "$script" -h 127.0.0.1 -p "$p" -U postgres "$d" \
		>"$work/run.$run.log" 2>&1 || { cat "$work/run.$run.log" >&2; exit 1; }
	pids=$(sed -n "s/^\[\([0-9]*\)\] LOG:  connection authorized: .*application_name=$app\( .*\)\{0,1\}\$/\1/p" "$work/vg.log" | sort -un | tr '\n' ' ')
	[ -n "${pids// /}" ] || { echo "no backend found for $app" >&2; exit 1; }
	for x in $pids; do
		cg=$work/cg/cg.$x
		for _ in $(seq 150); do
			grep -q '^totals:' "$cg" 2>/dev/null && break
			sleep 0.2
		done
		grep -q '^totals:' "$cg" 2>/dev/null || { echo "backend $x of $app did not exit" >&2; exit 1; }
		total=$((total + $(awk '/^(summary|totals):/ { print $2; exit }' "$cg")))
	done
	echo "$app $mode $d n=$n pids:$pids total $total" >>"$work/runs.log"
	echo "$total"
}

run=0
printf '%-24s %-10s %12s\n' target mode per_transaction
for mode in $MODES; do
	for target in direct $REVS; do
		if [ "$target" = direct ]; then
			p=$pg_port d=plain
		else
			d=$(rev_dbname "$target") p=${port[$(rev_dbname "$target")]}
		fi
		run=$((run + 1))
		# A first client warms what a server's first connection to a
		# database builds (the relation cache's file) and the proxy's
		# statements; not counted.
		instructions "rotxnwire_${run}_warm" "$p" "$d" "$mode" 20 >/dev/null
		small=$(instructions "rotxnwire_${run}_small" "$p" "$d" "$mode" 20)
		big=$(instructions "rotxnwire_${run}_big" "$p" "$d" "$mode" "$N")
		printf '%-24s %-10s %12d\n' "$target" "$mode" $(((big - small) / (N - 20)))
	done
done
cat "$work/runs.log" >&2
