#!/usr/bin/env bash
# Backend instructions per autocommit write (issue 14, docs/write-cost.md):
# PostgreSQL under callgrind, driven by bench/wirecost with the messages
# mzproxy sends (or a client sends directly), on pgbench's tables (scale 1)
# made through mzproxy of each revision (managed) and directly (plain).
# Each figure is (backend of N writes - backend of 20 writes) / (N - 20):
# connection start-up and cache warm-up cancel out. Each shape runs on a
# fresh copy of its database, after one write of a backend of its own
# (the first after a copy builds the relation cache file), so every shape
# finds the same pages in the same state. Instruction counts do not move
# with the machine's load.
#
# usage: bench/writecost.sh
#   env: REVS="main tree" (git revisions, or tree for the working tree)
#        N=220 WRITES="update counter insert"
#        SHAPES="direct-simple direct-prepared slot-query slot-exec slot-prepared"
#        PGOPTS="" (more -c settings for the measured server)
#        WIREFLAGS="" (more flags for bench/wirecost, e.g. -peek=false)
#        CGSAVE=dir (keep each run's callgrind output there, for
#                    callgrind_annotate, as <database>.<shape>.<write>.<n>)
set -euo pipefail

REVS=${REVS:-"main tree"}
N=${N:-220}
WRITES=${WRITES:-"update counter insert"}
SHAPES=${SHAPES:-"direct-simple direct-prepared slot-query slot-exec slot-prepared"}
PGOPTS=${PGOPTS:-}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
SRC=tree bench_postgres
(cd "$root" && go build -o "$work/wirecost" ./bench/wirecost)
direct_sql() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAtc "$2"; }

declare -A port pid db
for rev in $REVS; do
	d=$(rev_dbname "$rev")
	rev_database "$rev"
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

mkdir -p "$work/cg"
chmod 777 "$work/cg"
# shellcheck disable=SC2086 # PGOPTS are words
as_pg valgrind --tool=callgrind --callgrind-out-file="$work/cg/%p" \
	"$bindir/postgres" -D "$work/pg" -c listen_addresses=127.0.0.1 -c port="$pg_port" \
	-c unix_socket_directories="$work" -c autovacuum=off $PGOPTS >"$work/valgrind.log" 2>&1 &
bench_pids+=("$!")
for _ in $(seq 300); do
	direct_sql postgres 'select 1' >/dev/null 2>&1 && break
	sleep 1
done

# instructions db shape write n seed: the backend's instructions for n
# writes (the output kept under the name of the database copied, $d).
instructions() {
	local p f
	# shellcheck disable=SC2086 # WIREFLAGS are words
	p=$("$work/wirecost" -dsn "${backend/\/postgres\?//$1?}" -shape "$2" -write "$3" -n "$4" -seed "$5" ${WIREFLAGS:-} | head -1)
	f=$work/cg/$p
	for _ in $(seq 600); do
		if [ -s "$f" ] && ! kill -0 "$p" 2>/dev/null; then
			awk '/^(summary|totals):/ { print $2; exit }' "$f"
			[ -z "${CGSAVE:-}" ] || cp "$f" "$CGSAVE/$d.$2.$3.$4"
			return
		fi
		sleep 0.5
	done
	echo "no callgrind output for backend $p" >&2
	exit 1
}

printf '%-8s %-16s %-24s %12s\n' write shape database per_write
for write in $WRITES; do
	for shape in $SHAPES; do
		case $shape in
		direct-*) dbs=plain ;;
		*) dbs=$(for rev in $REVS; do rev_dbname "$rev"; done) ;;
		esac
		for d in $dbs; do
			direct_sql postgres "CREATE DATABASE copy TEMPLATE $d STRATEGY FILE_COPY"
			instructions copy "$shape" "$write" 1 1 >/dev/null
			small=$(instructions copy "$shape" "$write" 20 2)
			big=$(instructions copy "$shape" "$write" "$N" 3)
			direct_sql postgres "DROP DATABASE copy"
			printf '%-8s %-16s %-24s %12d\n' "$write" "$shape" "$d" $(((big - small) / (N - 20)))
		done
	done
done
