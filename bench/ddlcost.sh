#!/usr/bin/env bash
# Backend instructions per DDL statement (issue 16, docs/ddl-cost.md):
# PostgreSQL under callgrind (a postmaster, not a single-user backend:
# PostgreSQL fires no event trigger in single-user mode), driven by psql
# with what mzproxy sends for an autocommit DDL (the write slot, then the
# statement, in one implicit transaction; plain index DDL without the
# slot, as mzproxy sends it since session 11), and the same statement
# directly. The databases are made through mzproxy of each revision
# (managed: the schema and a table probe (a int PRIMARY KEY, b text)) and
# directly (plain); no mzproxy runs while they are measured (no lease
# statements in the counts). Each figure is (backend of N pairs - backend
# of N0 pairs) / (N - N0) for one CREATE+DROP (or ADD+DROP COLUMN) pair:
# start-up and cache warm-up cancel out. Each pair runs on a fresh copy of
# its database. Instruction counts do not move with the machine's load.
#
# usage: bench/ddlcost.sh
#   env: REVS="main tree" (git revisions, or tree for the working tree)
#        N0=5 N=45 PAIRS="column table view index" (or first:
#                  CREATE TABLE, one INSERT, DROP TABLE; on the managed
#                  side the INSERT's transaction builds t2's history
#                  first, as mzproxy sends it since storage 38
#                  (ensure_history(oid[]) in the slot's transaction),
#                  where the schema has ensure_history(oid[]); firstkeyless:
#                  the same with t2 (a int, b text), no primary key)
#        CGSAVE=dir (keep each run's callgrind output there)
#        PATCH=file.sql (run in each managed database before it is
#                        measured: a part stubbed, to measure it by
#                        subtraction)
#        VARIANTS="name=file.sql ..." (each managed database measured
#                  again with each file run on its copy first: the
#                  parts changed or stubbed, in one run)
#        TABLES=0 (more tables f1..fTABLES (a int PRIMARY KEY, b text)
#                  in every database, made as probe is: the catalogs'
#                  size a statement may scan)
#        FORM=one (how the slot and the statement are sent: one, the
#                  slot's prepared statement and the statement in one
#                  implicit transaction, as mzproxy sends an autocommit
#                  DDL since session 20; three, the Queries "BEGIN;
#                  <slot>", the statement and "COMMIT", as it sent one
#                  before, the slot parsed each time). A revision may
#                  name its own: REVS="126767b:three tree".
#        SLOT=occ (the slot's statement in FORM=one: occ, "SELECT
#                  mzproxy.begin_write_occ(NULL, 0)", as earlier sessions
#                  measured; proxy, what this tree's mzproxy sends
#                  (bench/slotsql: the flat statement of storage version
#                  44 and later, without an incarnation), for every
#                  revision)
set -euo pipefail

REVS=${REVS:-"main tree"}
N0=${N0:-5}
N=${N:-45}
PAIRS=${PAIRS:-"column table view index"}
FORM=${FORM:-one}
case ${SLOT:-occ} in
occ) slot_sql="SELECT mzproxy.begin_write_occ(NULL, 0)" ;;
proxy) slot_sql=$(cd "$(dirname "$0")/.." && go run ./bench/slotsql) ;;
*) echo "unknown SLOT $SLOT" >&2; exit 1 ;;
esac
# rev_of SPEC, form_of SPEC: a REVS entry's revision and its FORM.
rev_of() { echo "${1%%:*}"; }
form_of() { case $1 in *:*) echo "${1#*:}" ;; *) echo "$FORM" ;; esac; }

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
SRC=tree bench_postgres
direct_sql() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAtc "$2"; }
probe="CREATE TABLE probe (a int PRIMARY KEY, b text)"
TABLES=${TABLES:-0}
# tables PORT DB: probe and the TABLES more, through PORT (one session).
tables() {
	{
		echo "$probe;"
		for i in $(seq "$TABLES"); do echo "CREATE TABLE f$i (a int PRIMARY KEY, b text);"; done
	} | psql -X -h 127.0.0.1 -p "$1" -U postgres -d "$2" -qAt -v ON_ERROR_STOP=1
}

declare -A port pid db
for spec in $REVS; do
	rev=$(rev_of "$spec")
	d=$(rev_dbname "$rev")
	[ -z "${db[$d]:-}" ] || continue
	rev_database "$rev"
	tables "${port[$d]}" "$d"
	[ -z "${PATCH:-}" ] || direct_sql "$d" "$(cat "$PATCH")" >/dev/null
	kill "${pid[$d]}"
	wait "${pid[$d]}" 2>/dev/null || true
done
direct_sql postgres "CREATE DATABASE plain"
tables "$pg_port" plain
for d in plain $(for spec in $REVS; do rev_dbname "$(rev_of "$spec")"; done | sort -u); do direct_sql "$d" 'VACUUM ANALYZE'; done
direct_sql postgres CHECKPOINT
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null

mkdir -p "$work/cg"
chmod 777 "$work/cg"
as_pg valgrind --tool=callgrind --callgrind-out-file="$work/cg/%p" \
	"$bindir/postgres" -D "$work/pg" -c listen_addresses=127.0.0.1 -c port="$pg_port" \
	-c unix_socket_directories="$work" -c autovacuum=off >"$work/valgrind.log" 2>&1 &
bench_pids+=("$!")
for _ in $(seq 300); do
	direct_sql postgres 'select 1' >/dev/null 2>&1 && break
	sleep 1
done

# pair KIND: the two statements of one pair, one a line.
pair() {
	case $1 in
	column) printf '%s\n' 'ALTER TABLE probe ADD COLUMN c int' 'ALTER TABLE probe DROP COLUMN c' ;;
	table) printf '%s\n' 'CREATE TABLE t2 (a int PRIMARY KEY, b text)' 'DROP TABLE t2' ;;
	view) printf '%s\n' 'CREATE VIEW v AS SELECT a, b FROM probe' 'DROP VIEW v' ;;
	index) printf '%s\n' 'CREATE INDEX probe_b ON probe (b)' 'DROP INDEX probe_b' ;;
	# A table's first write with its CREATE and DROP; a line marked
	# BUILD runs, in the managed databases, after the slot and the
	# build of t2's history (a no-op where the schema builds at CREATE).
	first) printf '%s\n' 'CREATE TABLE t2 (a int PRIMARY KEY, b text)' "BUILD INSERT INTO t2 VALUES (1, 'x')" 'DROP TABLE t2' ;;
	# The same for a table without a primary key.
	firstkeyless) printf '%s\n' 'CREATE TABLE t2 (a int, b text)' "BUILD INSERT INTO t2 VALUES (1, 'x')" 'DROP TABLE t2' ;;
	esac
}

# build: t2's history built as mzproxy builds it before a first write,
# where the schema has lazy histories (storage 38); nothing before.
build="SELECT query_to_xml('SELECT mzproxy.ensure_history(ARRAY[to_regclass(''t2'')::oid])', false, false, '') WHERE to_regprocedure('mzproxy.ensure_history(oid[])') IS NOT NULL"

# instructions DB KIND N MANAGED [FORM]: the backend's instructions for N
# pairs.
instructions() {
	local p f i s slot= commit=
	if [ "$4" = yes ] && [ "$2" != index ]; then
		case ${5:-one} in
		one) slot='EXECUTE mzproxy_slot \; ' ;;
		three) slot=$'BEGIN \\; SELECT mzproxy.begin_write_occ(NULL, 0);\n' commit=$'\nCOMMIT;' ;;
		*) echo "unknown FORM $5" >&2; exit 1 ;;
		esac
	fi
	p=$({
		echo 'SELECT pg_backend_pid();'
		[ "$4" = yes ] && echo "PREPARE mzproxy_slot AS $slot_sql;"
		for i in $(seq "$3"); do
			pair "$2" | while read -r s; do
				case $s in
				'BUILD '*) [ "$4" = no ] && echo "${s#BUILD };" || echo "$slot$build \; ${s#BUILD };$commit" ;;
				*) echo "$slot$s;$commit" ;;
				esac
			done
		done
	} | psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAt -v ON_ERROR_STOP=1 | awk 'NR == 1')
	f=$work/cg/$p
	for _ in $(seq 600); do
		if [ -s "$f" ] && ! kill -0 "$p" 2>/dev/null; then
			awk '/^(summary|totals):/ { print $2; exit }' "$f"
			[ -z "${CGSAVE:-}" ] || cp "$f" "$CGSAVE/$cgname.$2.$3"
			return
		fi
		sleep 0.5
	done
	echo "no callgrind output for backend $p" >&2
	exit 1
}

# measure DB KIND MANAGED NAME [FILE] [FORM]: one row, on a copy of DB
# (with FILE run in it first).
measure() {
	local small big
	cgname=$4
	direct_sql postgres "CREATE DATABASE copy TEMPLATE $1 STRATEGY FILE_COPY"
	[ -z "${5:-}" ] || direct_sql copy "$(cat "$5")" >/dev/null
	instructions copy "$2" 1 "$3" "${6:-}" >/dev/null
	small=$(instructions copy "$2" "$N0" "$3" "${6:-}")
	big=$(instructions copy "$2" "$N" "$3" "${6:-}")
	direct_sql postgres "DROP DATABASE copy"
	printf '%-8s %-24s %12d\n' "$2" "$4" $(((big - small) / (N - N0)))
}

printf '%-8s %-24s %12s\n' pair database per_pair
for kind in $PAIRS; do
	measure plain "$kind" no plain
	for spec in $REVS; do
		d=$(rev_dbname "$(rev_of "$spec")")
		f=$(form_of "$spec")
		measure "$d" "$kind" yes "$d@$f" "" "$f"
		for v in ${VARIANTS:-}; do
			measure "$d" "$kind" yes "$d@$f+${v%%=*}" "${v#*=}" "$f"
		done
	done
done
