#!/usr/bin/env bash
# What a new database costs through mzproxy (issue 16: the sqllogictest
# runner makes one per file): CREATE DATABASE through mzproxy and the
# first statement of a session in it, with the template database (the
# default) and without it (--no-template: template1 copied, the schema
# installed at the first connection), interleaved, against the same
# PostgreSQL (pg_stat_statements, track = all). Per round and target: the
# wall time of the two client steps, the cluster's CPU from before the
# CREATE DATABASE to 2 s after the first statement (the postmaster, its
# exited children and its live ones: the client's backend, the lease's
# install and registration, its tick), and the statements the server ran
# (top-level + nested). The database is dropped after each round (not
# counted). The template is made before the first round (not counted;
# its making is timed once). Backend CPU (/proc/<pid>/schedstat, read by
# pg_read_file: µs) of the three backends a new database costs: the
# client's session's CREATE DATABASE (with mzproxy's look at the template
# before it), the new database's first client backend from its start to
# its first statement, and the lease's backend there (the install, or a
# copy's fresh values, and the registration) by then.
#
# usage: bench/newdbcost.sh   (env: ROUNDS=10 SETTLE=2)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-10}
SETTLE=${SETTLE:-2}

bench_postgres
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null
as_pg "$bindir/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
	-o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$work -c max_connections=200 -c shared_buffers=256MB -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.max=10000" \
	start >/dev/null
psql -h 127.0.0.1 -p "$pg_port" -U postgres -qAtc 'CREATE EXTENSION pg_stat_statements' >/dev/null
declare -A port pid db
bench_mzproxy template "$work/mzproxy"
bench_mzproxy install "$work/mzproxy" -- --no-template

direct() { psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "$1"; }
through() { psql -X -h 127.0.0.1 -p "${port[$1]}" -U postgres -d "$2" -qAtc "$3" >/dev/null; }
statements() { direct "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0) || ' ' || coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0) FROM pg_stat_statements"; }

# The template, made once.
t0=$(now)
through template postgres "CREATE DATABASE warmup"
for _ in $(seq 300); do
	[ "$(direct "SELECT count(*) FROM pg_database WHERE datname = 'mzproxy_template' AND datistemplate")" = 1 ] && break
	sleep 0.1
done
echo "template made $(echo "$(now) - $t0" | bc) s after the first CREATE DATABASE"
through template postgres "DROP DATABASE warmup"
template_oid=$(direct "SELECT oid FROM pg_database WHERE datname = 'mzproxy_template'")
echo "template: $(direct "SELECT pg_size_pretty(pg_database_size('mzproxy_template')) || ', template1 ' || pg_size_pretty(pg_database_size('template1'))")"

# CPU of a backend so far, in µs: its own (self) or another's (pid).
cpu_self="split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint / 1000"
cpu_others="(SELECT coalesce(sum(split_part(pg_read_file('/proc/' || pid || '/schedstat'), ' ', 1)::bigint), 0)::bigint / 1000 FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid())"

printf '%-8s %5s %9s %9s %9s %9s %9s %6s %6s\n' target round wall_ms create_us client_us lease_us cluster_ms top nested
declare -A sum
add() { sum[$1]=$(echo "${sum[$1]:-0} + $2" | bc); }
for r in $(seq "$ROUNDS"); do
	for target in install template; do
		name="newdb_${target}_$r"
		read -r top0 nested0 <<<"$(statements)"
		c0=$(cluster_ticks)
		t0=$(now)
		create=$(printf '%s\n' "SELECT $cpu_self AS c0 \gset" "CREATE DATABASE $name;" "SELECT $cpu_self - :c0;" |
			psql -X -h 127.0.0.1 -p "${port[$target]}" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1)
		read -r client lease <<<"$(psql -X -h 127.0.0.1 -p "${port[$target]}" -U postgres -d "$name" -qAt -F ' ' -c "SELECT $cpu_self, $cpu_others")"
		t1=$(now)
		sleep "$SETTLE"
		c1=$(cluster_ticks)
		read -r top1 nested1 <<<"$(statements)"
		wall=$(echo "($t1 - $t0) * 1000" | bc)
		cluster=$(((c1 - c0) * 1000 / hz))
		# The statements query itself (one top-level) is not the target's.
		top=$((top1 - top0 - 1)) nested=$((nested1 - nested0))
		printf '%-8s %5d %9.1f %9d %9d %9d %9d %6d %6d\n' "$target" "$r" "$wall" "$create" "$client" "$lease" "$cluster" "$top" "$nested"
		for k in wall create client lease cluster top nested; do add "$target.$k" "${!k}"; done
		direct "DROP DATABASE $name WITH (FORCE)"
	done
done
echo "means over $ROUNDS rounds (load average now: $(cut -d' ' -f1-3 /proc/loadavg)):"
for target in install template; do
	printf '%-8s' "$target"
	for k in wall create client lease cluster top nested; do
		printf ' %s %.0f' "$k" "$(echo "${sum[$target.$k]} / $ROUNDS" | bc -l)"
	done
	echo
done
[ "$(direct "SELECT oid FROM pg_database WHERE datname = 'mzproxy_template'")" = "$template_oid" ] ||
	echo "the template was made again during the rounds (template1 changed, or looked changed)"
