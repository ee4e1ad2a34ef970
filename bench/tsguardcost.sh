#!/usr/bin/env bash
# Backend instructions of a timestamped read of the present's guard
# (issue 15, docs/read-cost.md "Session 20"): callgrind on a single-user
# backend (postgres --single, no other process, no timing) over a
# database made through this tree's mzproxy (pgbench -i -s 1, managed
# tables), each guard form run in front of the history read mzproxy
# sends for `SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid =
# $1` (taken from the server's statement log), both prepared once
# (PREPARE) and run as one query string per read (one implicit
# transaction, as the proxy's batch is): EXECUTE guard; EXECUTE read.
# The guards are this tree's, each by its last execution in the log (its
# text and parameters: the learning guard, then the one that reads
# through the learned count with the catalog revision, then without),
# beside 126767b's (the view settled_pin), pin() alone, none at all (the
# timestamp set by a constant set_config) and none reading the view
# settled_writes (peek). P is set an hour ahead before the server
# stops (nothing ticks in a single-user run). Each figure is (instructions at N - at 20) / (N - 20);
# instruction counts do not move with the machine's load. A single-user
# EXECUTE evaluates each parameter as an expression (a few thousand
# instructions), which a Bind does not.
#
# usage: bench/tsguardcost.sh   (env: N=220, FORMS="names...", HOLES=1)
set -euo pipefail
N=${N:-220}

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
SRC=tree bench_postgres
declare -A port pid db
rev_database tree
d=$(rev_dbname tree)
direct_sql() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAtc "$2"; }
pgbench -i -q -s 1 -h 127.0.0.1 -p "${port[$d]}" -U postgres "$d" >"$work/init.log" 2>&1 || { cat "$work/init.log" >&2; exit 1; }
direct_sql postgres "ALTER DATABASE $d SET log_min_duration_statement = 0"
from=$(wc -l <"$work/pg.log")
cat >"$work/ts.sql" <<'Q'
\set aid random(1, 99999)
SELECT abalance, mz_now() FROM pgbench_accounts WHERE aid = :aid;
Q
pgbench -n -M prepared -t 12 -f "$work/ts.sql" -h 127.0.0.1 -p "${port[$d]}" -U postgres "$d" >"$work/run.log" 2>&1 || { cat "$work/run.log" >&2; exit 1; }
direct_sql postgres "ALTER DATABASE $d RESET log_min_duration_statement"
tail -n +"$((from + 1))" "$work/pg.log" >"$work/log"
kill "${pid[$d]}"
wait "${pid[$d]}" 2>/dev/null || true
read_sql=$(grep 'execute [^:]*: SELECT abalance' "$work/log" | tail -1 | sed 's/.*execute [^:]*: //')
guard_sql=$(grep 'execute [^:]*read_guard[^:]*: ' "$work/log" | tail -1 | sed 's/.*execute [^:]*: //')
rev=$(direct_sql "$d" "SELECT revision FROM mzproxy.catalog_revision")
w=$(direct_sql "$d" "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM mzproxy.writes")
direct_sql "$d" "SELECT setval('mzproxy.pinned', mzproxy.now_ms() + 3600000)" >/dev/null
p=$(direct_sql "$d" "SELECT last_value FROM mzproxy.pinned")
settled=$(direct_sql "$d" "SELECT t FROM mzproxy.settled_pin")
[ "$settled" = "$p" ] || { echo "settled_pin answers '$settled', not P $p: writes not settled" >&2; exit 1; }
direct_sql postgres "CREATE DATABASE plain"
pgbench -i -q -s 1 -h 127.0.0.1 -p "$pg_port" -U postgres plain >"$work/init.plain.log" 2>&1
for x in plain "$d"; do direct_sql "$x" 'VACUUM ANALYZE'; done
direct_sql postgres CHECKPOINT
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null
echo "read: $read_sql" >&2
echo "guard: $guard_sql" >&2

s=mzproxy
declare -A form params
form[none]="SELECT pg_catalog.set_config('mzproxy.read_ts', '$p', true)"
form[126767b]="SELECT pg_catalog.set_config('mzproxy.read_ts', (CASE WHEN (SELECT revision FROM $s.catalog_revision) = $rev AND pg_catalog.current_setting('transaction_isolation') IN ('read committed', 'read uncommitted') THEN coalesce((SELECT t FROM $s.settled_pin), $s.pin())::text ELSE 'mzproxy: plan of a changed catalog' END)::int8::text, true)"
# pin(): the timestamp of EXPLAIN TIMESTAMP, a read in a transaction
# block, AS OF mz_now(), and a steady guard's once the writes moved; on
# this path (every write settled, P fresh) it answers through settled_pin.
form[pin]="SELECT pg_catalog.set_config('mzproxy.read_ts', $s.pin()::text, true)"
# peek: none's statement reading the view settled_writes too (PinPeekSQL,
# before a read-only transaction's BEGIN in a session with no settled count).
form[peek]="SELECT pg_catalog.set_config('mzproxy.read_ts', '$p', true), w FROM $s.settled_writes"
names=()
for name in $(grep -o 'execute [^:]*read_guard[^:]*:' "$work/log" | awk '!seen[$0]++' | sed 's/execute \(.*\):/\1/'); do
	line=$(grep -n "execute $name: " "$work/log" | tail -1 | cut -d: -f1)
	label=guard$(echo "${name##*/}" | sed "s/.*read_guard_[0-9a-f]*//")
	form[$label]=$(sed -n "${line}p" "$work/log" | sed "s|.*execute $name: ||")
	detail=$(sed -n "$((line + 1))p" "$work/log")
	case $detail in *"DETAIL:  parameters:"*) params[$label]=$(echo "$detail" | sed 's/.*DETAIL:  parameters: //; s/\$[0-9]* = //g') ;; esac
	names+=("$label")
done
FORMS=${FORMS:-"none 126767b pin peek ${names[*]}"}

instructions() { # db n guard read params
	local x=$1 n=$2 guard=$3 read=$4 args=${5:+($5)} ts=${READ_TS:-NULL} i out=$work/cg.out
	{
		[ -z "$guard" ] || echo "PREPARE g AS $(echo "$guard" | tr '\n' ' ')"
		echo "PREPARE r AS $read"
		for ((i = 0; i < n; i++)); do
			aid=$(((i * 48271) % 99999 + 1))
			if [ -z "$guard" ]; then echo "EXECUTE r($aid${READ_TS:+, $ts})"; else echo "EXECUTE g$args; EXECUTE r($aid, $ts)"; fi
		done
	} >"$work/in.sql"
	as_pg valgrind --tool=callgrind --callgrind-out-file="$out" "$bindir/postgres" --single -D "$work/pg" \
		-c plan_cache_mode=force_generic_plan -c autovacuum=off "$x" <"$work/in.sql" >"$work/out" 2>"$work/vg.log"
	if grep -q "ERROR:" "$work/out" "$work/vg.log"; then
		grep -h -m1 "ERROR:" "$work/out" "$work/vg.log" >&2
		exit 1
	fi
	[ -z "${DEBUG:-}" ] || cp "$work/in.sql" "$work/out" "$work/vg.log" "$DEBUG/"
	awk '/^(summary|totals):/ { print $2; exit }' "$out"
}
per_read() { # label db guard read [params]
	local small big
	small=$(instructions "$2" 20 "$3" "$4" "${5:-}")
	big=$(instructions "$2" "$N" "$3" "$4" "${5:-}")
	printf '%-16s %12d\n' "$1" $(((big - small) / (N - 20)))
}
printf '%-16s %12s\n' form per_read
per_read direct-plain plain "" "SELECT abalance FROM pgbench_accounts WHERE aid = \$1"
for f in $FORMS; do per_read "$f" "$d" "${form[$f]}" "$read_sql" "${params[$f]:-}"; done
# HOLES=1 (session 24): the history read alone, no guard, bound with the
# timestamp P as its parameter, in three forms of its timestamp holes: as a
# prepared or extended read has them (tsParamSQL: coalesce of the
# parameter and the setting the guard pins, through nullif), as the
# parameter itself; and the plain read directly with the same two
# parameters ($2 in its select list), to tell the holes' cost from the
# history table's.
if [ -n "${HOLES:-}" ]; then
	holes="coalesce(\$2, nullif(pg_catalog.current_setting('mzproxy.read_ts', true), '')::int8)"
	case $read_sql in *"$holes"*) ;; *) echo "the read has no holes of the form $holes" >&2; exit 1 ;; esac
	READ_TS=$p per_read holes-prepared "$d" "" "$read_sql"
	READ_TS=$p per_read holes-param "$d" "" "${read_sql//"$holes"/\$2}"
	READ_TS=$p per_read plain-param plain "" "SELECT abalance, \$2::int8 FROM pgbench_accounts WHERE aid = \$1"
fi
