#!/usr/bin/env bash
# Backend instructions of a timestamped read's rights guard (issue 15,
# docs/read-cost.md): callgrind on a single-user backend (postgres
# --single, no other process, no timing), a table pt(a int primary key, b
# int) and a history-shaped ph(mz_from, mz_to, a, b) with 10,000 rows each
# and the history's indexes, the point read
#   SELECT a, b FROM (SELECT a, b FROM ph <guard> WHERE mz_from <= 5 AND
#   mz_to > 5) t WHERE a = 42
# with each guard form, run N times as a simple Query and as PREPARE once
# plus N EXECUTE (plan_cache_mode = force_generic_plan). Each figure is
# (instructions at N - at 20) / (N - 20): start-up and cache warm-up
# cancel out; instruction counts do not move with the machine's load.
#
# usage: bench/guardcost.sh   (env: N=220)
set -euo pipefail
N=${N:-220}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
work=$(mktemp -d /tmp/mzguard.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
[ "$(id -u)" = 0 ] && chown postgres "$work"
bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
as_pg "$bindir/initdb" -D "$work/pg" -U postgres -A trust >/dev/null
as_pg "$bindir/postgres" --single -D "$work/pg" postgres >/dev/null 2>&1 <<'SQL'
CREATE TABLE pt (a int PRIMARY KEY, b int)
INSERT INTO pt SELECT g, g FROM generate_series(1, 10000) g
CREATE TABLE ph (mz_from bigint, mz_to bigint, a int, b int)
INSERT INTO ph SELECT 1, 9223372036854775807, g, g FROM generate_series(1, 10000) g
CREATE INDEX ON ph (mz_to, mz_from)
CREATE INDEX ON ph (a, mz_to)
VACUUM ANALYZE
SQL

# instructions n sql prepared: the single-user backend's instructions for
# n executions of sql.
instructions() {
	local n=$1 sql=$2 prepared=$3 i
	{
		[ "$prepared" = 0 ] || echo "PREPARE q AS $sql"
		for ((i = 0; i < n; i++)); do
			if [ "$prepared" = 0 ]; then echo "$sql"; else echo "EXECUTE q"; fi
		done
	} >"$work/in.sql"
	as_pg valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$bindir/postgres" --single -D "$work/pg" \
		-c plan_cache_mode=force_generic_plan -c autovacuum=off postgres <"$work/in.sql" >"$work/out" 2>"$work/vg.log"
	if grep -q 'ERROR:' "$work/out"; then
		grep -m1 'ERROR:' "$work/out" >&2
		exit 1
	fi
	awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.out"
}

cond="mz_from <= 5 AND mz_to > 5"
declare -A form=(
	[none]="FROM ph WHERE $cond"
	[not-exists]="FROM ph WHERE $cond AND NOT EXISTS (SELECT FROM pt a, public.pt b WHERE false)"
	[left-join]="FROM ph LEFT JOIN (SELECT FROM pt a, public.pt b HAVING false) AS c ON true WHERE $cond"
)
printf '%-12s %14s %14s\n' guard simple prepared
for g in none not-exists left-join; do
	sql="SELECT a, b FROM (SELECT a, b ${form[$g]}) t WHERE a = 42"
	out=()
	for prepared in 0 1; do
		small=$(instructions 20 "$sql" $prepared)
		big=$(instructions "$N" "$sql" $prepared)
		out+=($(((big - small) / (N - 20))))
	done
	printf '%-12s %14d %14d\n' "$g" "${out[@]}"
done
