#!/usr/bin/env bash
# What a CREATE DATABASE / use / DROP DATABASE round costs through mzproxy
# (the sqllogictest runner mzslt and bench/conformance.sh make and drop a
# database per file), this tree's mzproxy against revision BASE
# (default 4d0ab04), interleaved, each its own proxy in front of the same
# PostgreSQL (pg_stat_statements, track = all). A round, as the backend
# superuser through the proxy: CREATE DATABASE; a session in it that makes
# a table, writes a row and reads mz_now(); that session closed; DROP
# DATABASE ... WITH (FORCE) as mzslt sends it. Per round and target: the
# wall time of the DROP and of the whole round, the cluster's CPU over the
# round (postmaster, exited and live children), the proxy's CPU, and the
# statements the server ran (top-level + nested).
#
# usage: bench/dropdbcost.sh   (env: ROUNDS=10 BASE=4d0ab04)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-10}
BASE=${BASE:-4d0ab04}

bench_postgres
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null
as_pg "$bindir/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
	-o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$work -c max_connections=200 -c shared_buffers=256MB -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.max=10000" \
	start >/dev/null
psql -h 127.0.0.1 -p "$pg_port" -U postgres -qAtc 'CREATE EXTENSION pg_stat_statements' >/dev/null
declare -A port pid db
build_rev "$BASE" base
bench_mzproxy base "$work/mzproxy-base"
bench_mzproxy tree "$work/mzproxy"

direct() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "$1"; }
through() { psql -X -h 127.0.0.1 -p "${port[$1]}" -U postgres -d "$2" -qAt -v ON_ERROR_STOP=1 -c "$3" >/dev/null; }
statements() { direct "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0) || ' ' || coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0) FROM pg_stat_statements"; }

# The template database, made once by each proxy's first CREATE DATABASE.
for target in base tree; do
	through "$target" postgres "CREATE DATABASE warmup_$target"
	sleep 3
	through "$target" postgres "DROP DATABASE warmup_$target WITH (FORCE)"
done

printf '%-5s %5s %9s %9s %10s %9s %6s %6s\n' target round drop_ms round_ms cluster_ms proxy_ms top nested
declare -A sum
add() { sum[$1]=$(echo "${sum[$1]:-0} + $2" | bc); }
for r in $(seq "$ROUNDS"); do
	for target in base tree; do
		name="dropdb_${target}_$r"
		read -r top0 nested0 <<<"$(statements)"
		c0=$(cluster_ticks) p0=$(cpu_ticks "${pid[$target]}")
		t0=$(now)
		through "$target" postgres "CREATE DATABASE $name"
		psql -X -h 127.0.0.1 -p "${port[$target]}" -U postgres -d "$name" -qAt -v ON_ERROR_STOP=1 \
			-c "CREATE TABLE t (k int PRIMARY KEY)" -c "INSERT INTO t VALUES (1)" -c "SELECT k, mz_now() FROM t" >/dev/null
		t1=$(now)
		through "$target" postgres "DROP DATABASE $name WITH (FORCE)"
		t2=$(now)
		c1=$(cluster_ticks) p1=$(cpu_ticks "${pid[$target]}")
		read -r top1 nested1 <<<"$(statements)"
		drop=$(echo "($t2 - $t1) * 1000" | bc)
		round=$(echo "($t2 - $t0) * 1000" | bc)
		cluster=$(((c1 - c0) * 1000 / hz))
		proxy=$(((p1 - p0) * 1000 / hz))
		top=$((top1 - top0 - 1)) nested=$((nested1 - nested0))
		printf '%-5s %5d %9.1f %9.1f %10d %9d %6d %6d\n' "$target" "$r" "$drop" "$round" "$cluster" "$proxy" "$top" "$nested"
		for k in drop round cluster proxy top nested; do add "$target.$k" "${!k}"; done
	done
done
echo "means over $ROUNDS rounds (base = $BASE):"
for target in base tree; do
	printf '%-5s' "$target"
	for k in drop round cluster proxy top nested; do
		printf ' %s=%.1f' "$k" "$(echo "${sum[$target.$k]} / $ROUNDS" | bc -l)"
	done
	echo
done
