#!/usr/bin/env bash
# Read-only pgbench (-S) directly against PostgreSQL, through mzproxy, and
# through PgBouncer in session mode (when installed), interleaved over
# several rounds; prints median TPS per target and protocol and the ratio to
# direct. The machine is shared and noisy: only ratios measured in the same
# run mean anything.
#
# usage: bench/pgbench.sh            (env: ROUNDS=5 DURATION=10 CLIENTS=8 SCALE=10)
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-8}
JOBS=${JOBS:-2}
SCALE=${SCALE:-10}
MODES=${MODES:-"simple extended prepared"}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/mzbench.XXXXXX)
chmod 755 "$work"
bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$bindir/postgres" ] || { echo "no PostgreSQL server binaries (set PG_BINDIR)" >&2; exit 1; }

as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
[ "$(id -u)" = 0 ] && chown postgres "$work"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pg_port=$(free_port)
mz_port=$(free_port)
bouncer_port=$(free_port)

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "building mzproxy and starting PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') in $work" >&2
(cd "$root" && go build -o "$work/mzproxy" ./cmd/mzproxy)
as_pg "$bindir/initdb" -D "$work/pg" -U postgres -A trust >/dev/null
as_pg "$bindir/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
	-o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$work -c max_connections=100 -c shared_buffers=256MB" \
	start >/dev/null

"$work/mzproxy" --listen "127.0.0.1:$mz_port" --log-level warn \
	--backend "postgres://postgres@/postgres?host=$work&port=$pg_port&sslmode=disable" 2>"$work/mzproxy.log" &
pids+=($!)

targets="direct mzproxy"
if command -v pgbouncer >/dev/null 2>&1; then
	echo '"postgres" ""' >"$work/userlist.txt"
	cat >"$work/pgbouncer.ini" <<EOF
[databases]
postgres = host=$work port=$pg_port dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = session
max_client_conn = 200
default_pool_size = 50
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
EOF
	[ "$(id -u)" = 0 ] && chown postgres "$work"/pgbouncer.ini "$work"/userlist.txt
	as_pg pgbouncer "$work/pgbouncer.ini" >/dev/null 2>&1 &
	pids+=($!)
	targets="$targets pgbouncer"
else
	echo "pgbouncer not installed (apt-get install pgbouncer): measuring without it" >&2
fi

port_of() {
	case $1 in
	direct) echo "$pg_port" ;;
	mzproxy) echo "$mz_port" ;;
	pgbouncer) echo "$bouncer_port" ;;
	esac
}

for t in $targets; do
	for _ in $(seq 50); do
		psql -h 127.0.0.1 -p "$(port_of "$t")" -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1 && break
		sleep 0.2
	done
done

echo "pgbench -i -s $SCALE" >&2
pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres postgres >/dev/null 2>&1

results="$work/results.txt"
: >"$results"
for round in $(seq "$ROUNDS"); do
	for mode in $MODES; do
		for t in $targets; do
			tps=$(pgbench -n -S -M "$mode" -c "$CLIENTS" -j "$JOBS" -T "$DURATION" \
				-h 127.0.0.1 -p "$(port_of "$t")" -U postgres postgres 2>&1 |
				awk '/^tps = /{print $3}')
			echo "$t $mode ${tps:-0}" >>"$results"
			printf 'round %d %-9s %-9s %s tps\n' "$round" "$mode" "$t" "${tps:-0}" >&2
		done
	done
done

python3 - "$results" "$targets" "$MODES" "$ROUNDS" "$DURATION" "$CLIENTS" "$SCALE" <<'EOF'
import statistics, sys
path, targets, modes, rounds, duration, clients, scale = sys.argv[1:]
targets, modes = targets.split(), modes.split()
tps = {}
for line in open(path):
    t, m, v = line.split()
    tps.setdefault((t, m), []).append(float(v))
print(f"pgbench -S, {clients} clients, scale {scale}, {rounds} rounds x {duration} s, interleaved; median TPS (ratio to direct)")
print()
print("| protocol | " + " | ".join(targets) + " |")
print("|---|" + "---|" * len(targets))
for m in modes:
    direct = statistics.median(tps[("direct", m)])
    cells = []
    for t in targets:
        med = statistics.median(tps[(t, m)])
        cells.append(f"{med:.0f}" if t == "direct" else f"{med:.0f} ({med / direct:.2f})")
    print(f"| {m} | " + " | ".join(cells) + " |")
EOF
