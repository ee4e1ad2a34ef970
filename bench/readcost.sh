#!/usr/bin/env bash
# Backend instructions per read-only transaction (issue 15,
# docs/read-cost.md): BEGIN, two point SELECTs of pgbench_accounts, COMMIT,
# counted with callgrind on a single-user backend (postgres --single, no
# other process, no timing), directly on plain tables and with what
# mzproxy of each revision sends for it on its managed tables.
#
# What mzproxy sends is taken from the server's own log, not spelled here:
# each revision's mzproxy runs eight read-only transactions on a database
# it made (pgbench -i -s 1) while the server logs every statement, and its
# raise to REPEATABLE READ and the last execution of each of its guards
# (the prepared statements named *pin_guard*, with their parameters) are
# run again: PREPARE once, then per transaction BEGIN, the raise, EXECUTE
# of the guard with the logged parameters, the two reads, COMMIT. P is set
# an hour ahead before the server stops: nothing ticks in a single-user
# run, and the guard refuses a P more than a second behind the clock.
# plan_cache_mode = force_generic_plan makes the prepared guard run as
# mzproxy's prepared statement does from its first use.
#
# Each figure is (instructions of N transactions - of 20) / (N - 20): the
# backend's start-up and the caches' warm-up cancel out. Instruction
# counts do not move with the machine's load. A single-user EXECUTE
# evaluates its parameters as expressions, about 6k instructions each;
# a Bind of mzproxy's costs less per parameter.
#
# usage: bench/readcost.sh
#   env: REVS="main tree" (git revisions, or tree for the working tree)
#        N=220
#        CGSAVE=dir (keep each callgrind output there)
set -euo pipefail

REVS=${REVS:-"main tree"}
N=${N:-220}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
SRC=tree bench_postgres
direct_sql() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAtc "$2"; }

cat >"$work/rotxn.sql" <<'EOF'
\set aid random(1, 99999)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid + 1;
COMMIT;
EOF

declare -A port pid db
for rev in $REVS; do
	d=$(rev_dbname "$rev")
	rev_database "$rev"
	pgbench -i -q -s 1 -h 127.0.0.1 -p "${port[$d]}" -U postgres "$d" >"$work/init.$d.log" 2>&1 ||
		{ cat "$work/init.$d.log" >&2; exit 1; }
	direct_sql postgres "ALTER DATABASE $d SET log_min_duration_statement = 0"
	from=$(wc -l <"$work/pg.log")
	pgbench -n -t 8 -f "$work/rotxn.sql" -h 127.0.0.1 -p "${port[$d]}" -U postgres "$d" >"$work/run.$d.log" 2>&1 ||
		{ cat "$work/run.$d.log" >&2; exit 1; }
	direct_sql postgres "ALTER DATABASE $d RESET log_min_duration_statement"
	tail -n +"$((from + 1))" "$work/pg.log" >"$work/log.$d"
	kill "${pid[$d]}"
	wait "${pid[$d]}" 2>/dev/null || true
	direct_sql "$d" "SELECT setval('mzproxy.pinned', mzproxy.now_ms() + 3600000)" >/dev/null
done
direct_sql postgres "CREATE DATABASE plain"
pgbench -i -q -s 1 -h 127.0.0.1 -p "$pg_port" -U postgres plain >"$work/init.plain.log" 2>&1
for d in plain $(for rev in $REVS; do rev_dbname "$rev"; done); do direct_sql "$d" 'VACUUM ANALYZE'; done
direct_sql postgres CHECKPOINT
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null

# script n [raise guard-name guard-text params begin]: n read-only
# transactions, one statement a line (single-user mode reads a statement
# per line).
script() {
	local n=$1 raise=${2:-} name=${3:-} text=${4:-} params=${5:-} begin=${6:-BEGIN} aid=1 i
	[ -z "$name" ] || echo "PREPARE guard AS $text"
	for ((i = 0; i < n; i++)); do
		aid=$(((aid * 48271) % 2147483647))
		echo "$begin"
		[ -z "$raise" ] || echo "$raise"
		[ -z "$name" ] || echo "EXECUTE guard($params)"
		echo "SELECT abalance FROM pgbench_accounts WHERE aid = $((aid % 99999 + 1))"
		echo "SELECT abalance FROM pgbench_accounts WHERE aid = $((aid % 99999 + 2))"
		echo COMMIT
	done
}

# instructions db n args...: the single-user backend's instructions for
# script n args.
instructions() {
	local d=$1 n=$2 out=$work/cg.$1.$2
	shift 2
	script "$n" "$@" >"$work/in.sql"
	as_pg valgrind --tool=callgrind --callgrind-out-file="$out" "$bindir/postgres" --single -D "$work/pg" \
		-c plan_cache_mode=force_generic_plan -c autovacuum=off "$d" <"$work/in.sql" >"$work/out.$d.$n" 2>"$work/vg.log"
	if grep -q 'ERROR:' "$work/out.$d.$n"; then
		grep -m1 'ERROR:' "$work/out.$d.$n" >&2
		exit 1
	fi
	[ -z "${CGSAVE:-}" ] || cp "$out" "$CGSAVE/"
	awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

per_txn() { # db label args...
	local d=$1 label=$2 small big
	shift 2
	small=$(instructions "$d" 20 "$@")
	big=$(instructions "$d" "$N" "$@")
	printf '%-24s %-28s %12d\n' "$d" "$label" $(((big - small) / (N - 20)))
}

printf '%-24s %-28s %12s\n' database shape per_transaction
per_txn plain direct
for rev in $REVS; do
	d=$(rev_dbname "$rev")
	raise=$(sed -n 's/.*execute [^:]*pin_raise[^:]*: //p' "$work/log.$d" | tail -1)
	# The BEGIN the event loop sends with the first read (since session
	# 19 it may begin REPEATABLE READ, and then no raise follows it).
	begin=$(sed -n 's/.*execute [^:]*pin_begin[^:]*: //p' "$work/log.$d" | tail -1)
	if [ -n "$begin" ] && ! grep -q "execute [^:]*pin_raise[^:]*: " <(tail -20 "$work/log.$d"); then
		raise=
	fi
	# The guards, each by its last execution: the statement, then the
	# DETAIL line of its parameters ($1 = '...', $2 = '...').
	for name in $(grep -o 'execute [^:]*pin_guard[^:]*:' "$work/log.$d" | sort -u | sed 's/execute \(.*\):/\1/'); do
		line=$(grep -n "execute $name: " "$work/log.$d" | tail -1 | cut -d: -f1)
		text=$(sed -n "${line}p" "$work/log.$d" | sed "s/.*execute $name: //")
		params=$(sed -n "$((line + 1))p" "$work/log.$d" | sed 's/.*DETAIL:  parameters: //; s/\$[0-9]* = //g')
		label=raise+$name
		[ -n "$raise" ] || label=begin-rr+$name
		per_txn "$d" "$label" "$raise" "$name" "$text" "$params" "${begin:-BEGIN}"
	done
done
