#!/bin/bash
# Backend instructions per autocommit write, through mzproxy and directly
# (docs/write-cost.md's method): pgbench -i -s 1 through mzproxy (managed
# tables, database postgres) and directly (plain tables, database plain),
# both servers stopped, then each write shape run in a single-user backend
# under callgrind on a fresh copy of the data directory, 20 writes and 220;
# the figure is (Ir(220) - Ir(20)) / 200. Generic plans, as the proxy's
# sessions run the trigger's statements after their sixth call.
#
#   bench/write-callgrind.sh            # HEAD
#   SRC=tree bench/write-callgrind.sh   # the working tree
#
# Prints one line per shape: managed, direct, ratio.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_setup
as_pg psql -h "$work" -p "$pg_port" -U postgres -qc 'CREATE DATABASE plain'
pgbench -i -q -s 1 -h 127.0.0.1 -p "$mz_port" -U postgres postgres >"$work/init.managed.log" 2>&1
pgbench -i -q -s 1 -h "$work" -p "$pg_port" -U postgres plain >"$work/init.plain.log" 2>&1
kill "$mz_pid"; wait "$mz_pid" 2>/dev/null || true
mz_pid= # stopped on purpose: bench_cleanup reports a proxy that exited by itself
as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast -w stop >/dev/null

python3 - "$work" <<'PY'
import random, sys
random.seed(7)
aids = [random.randint(1, 100000) for _ in range(220)]
shapes = {
    "update": lambda a: f"UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = {a}",
    "counter": lambda a: "UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1",
    "insert": lambda a: f"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, {a}, 5, CURRENT_TIMESTAMP)",
}
for name, stmt in shapes.items():
    for n in (20, 220):
        for db, slot in (("postgres", "SELECT mzproxy.begin_write_occ(NULL, 0); "), ("plain", "")):
            with open(f"{sys.argv[1]}/{name}.{db}.{n}", "w") as f:
                f.writelines(slot + stmt(a) + "\n" for a in aids[:n])
PY
chown -R postgres "$work"

# instructions SHAPE DB N: callgrind's total for N writes of SHAPE.
instructions() {
	rm -rf "$work/run"
	cp -a "$work/pg" "$work/run"
	as_pg valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
		"$bindir/postgres" --single -D "$work/run" -c plan_cache_mode=force_generic_plan "$2" \
		<"$work/$1.$2.$3" >"$work/single.log" 2>&1
	if grep -q ERROR "$work/single.log"; then grep -m3 ERROR "$work/single.log" >&2; exit 1; fi
	awk '/^summary:/ {print $2}' "$work/cg.out"
}
for shape in update counter insert; do
	m=$(( ($(instructions $shape postgres 220) - $(instructions $shape postgres 20)) / 200 ))
	d=$(( ($(instructions $shape plain 220) - $(instructions $shape plain 20)) / 200 ))
	echo "$shape: mzproxy $m, direct $d, ratio $(awk "BEGIN {printf \"%.2f\", $m / $d}")"
done
