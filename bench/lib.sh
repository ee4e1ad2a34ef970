# Shared by the bench scripts (sourced): a throw-away PostgreSQL on
# 127.0.0.1 and a Unix socket in a temporary directory, mzproxy in front of
# it, and cleanup of everything on exit.
#
# After `bench_setup`: $work, $bindir, $pg_port, $backend (mzproxy's backend
# URL over the Unix socket), $mz_port, $mz_pid; mzproxy binary at
# $work/mzproxy (built from this tree).

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# cpu_ticks pid: user+system CPU time of a process in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# user_ticks pid: its user CPU time alone (the rest is the kernel's, the
# system calls' work).
user_ticks() { awk '{print $14}' "/proc/$1/stat"; }
# cluster_ticks: CPU ticks of the postmaster of bench_postgres's cluster
# ($work/pg), its exited children and its live ones.
cluster_ticks() {
	local pm s c
	pm=$(head -1 "$work/pg/postmaster.pid")
	s=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
	for c in $(cat "/proc/$pm/task/$pm/children"); do
		s=$((s + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
	done
	echo "$s"
}
# cluster_faults: minor page faults of the same processes (a backend's
# first touch of each shared-buffer page it maps is one).
cluster_faults() {
	local pm s c
	pm=$(head -1 "$work/pg/postmaster.pid")
	s=$(awk '{print $10 + $11}' "/proc/$pm/stat")
	for c in $(cat "/proc/$pm/task/$pm/children"); do
		s=$((s + $(awk '{print $10}' "/proc/$c/stat" 2>/dev/null || echo 0)))
	done
	echo "$s"
}
hz=$(getconf CLK_TCK)

# now: seconds since the epoch with nanoseconds.
now() { date +%s.%N; }

bench_pids=()
bench_cleanup() {
	if [ -n "${mz_pid:-}" ] && ! kill -0 "$mz_pid" 2>/dev/null; then
		echo "mzproxy exited early:" >&2
		tail -20 "$work/mzproxy.log" >&2
	fi
	for p in "${bench_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	as_pg "$bindir/pg_ctl" -D "$work/pg" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$work"
}

# bench_pgbouncer NAME DATABASE [SETTING ...]: a PgBouncer in session mode
# on a free port (port[NAME]), over the Unix socket to DATABASE of
# bench_postgres's server, with these extra settings; returns once it
# answers, with its pid in pid[NAME].
bench_pgbouncer() {
	local name=$1 database=$2
	shift 2
	port[$name]=$(free_port)
	cat >"$work/$name.ini" <<EOF
[databases]
$database = host=$work port=$pg_port dbname=$database user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port[$name]}
unix_socket_dir =
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = session
logfile = $work/$name.log
pidfile = $work/$name.pid
EOF
	printf '%s\n' "$@" >>"$work/$name.ini"
	echo '"postgres" ""' >"$work/userlist.txt"
	chown postgres "$work/$name.ini" "$work/userlist.txt"
	as_pg pgbouncer "$work/$name.ini" </dev/null >/dev/null 2>&1 &
	bench_pids+=("$!")
	for _ in $(seq 50); do
		psql -X -h 127.0.0.1 -p "${port[$name]}" -U postgres -d "$database" -Atc 'select 1' >/dev/null 2>&1 && break
		sleep 0.2
	done
	pid[$name]=$(cat "$work/$name.pid")
	bench_pids+=("${pid[$name]}")
}

# bench_postgres: the temporary directory, the mzproxy binary and a
# PostgreSQL (shared_buffers $PG_SHARED_BUFFERS, default 256MB; more server
# settings in $PG_SETTINGS, e.g. "-c synchronous_commit=off" to take the
# WAL flush out of a latency where the disk's is slow); sets $work,
# $bindir, $pg_port and $backend.
bench_postgres() {
	work=$(mktemp -d /tmp/mzbench.XXXXXX)
	chmod 755 "$work"
	trap bench_cleanup EXIT
	bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
	[ -x "$bindir/postgres" ] || { echo "no PostgreSQL server binaries (set PG_BINDIR)" >&2; exit 1; }
	[ "$(id -u)" = 0 ] && chown postgres "$work"
	pg_port=$(free_port)
	echo "building mzproxy and starting PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') in $work" >&2
	if [ "${SRC:-head}" = tree ]; then
		src=$root
	else
		src=$work/src
		mkdir -p "$src"
		git -C "$root" archive HEAD | tar -x -C "$src"
	fi
	(cd "$src" && go build -o "$work/mzproxy" ./cmd/mzproxy)
	as_pg "$bindir/initdb" -D "$work/pg" -U postgres -A trust >/dev/null
	as_pg "$bindir/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
		-o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$work -c max_connections=200 -c shared_buffers=${PG_SHARED_BUFFERS:-256MB} ${PG_SETTINGS:-}" \
		start >/dev/null
	backend="postgres://postgres@/postgres?host=$work&port=$pg_port&sslmode=disable"
}

# bench_mzproxy NAME BINARY [ENV=VALUE ...] [-- FLAG ...]: BINARY as the
# mzproxy NAME in front of bench_postgres's server, on a free port, once
# it answers (in database db[NAME], default postgres). Sets port[NAME] and
# pid[NAME] (associative arrays: the caller declares them); its log is
# $work/NAME.log.
bench_mzproxy() {
	local name=$1 bin=$2 envs=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	port[$name]=$(free_port)
	env "${envs[@]}" "$bin" --listen "127.0.0.1:${port[$name]}" --metrics-listen= --log-level warn \
		--backend "$backend" "$@" 2>"$work/$name.log" &
	pid[$name]=$!
	bench_pids+=("$!")
	for _ in $(seq 100); do
		psql -h 127.0.0.1 -p "${port[$name]}" -U postgres -d "${db[$name]:-postgres}" -Atc 'select 1' >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "mzproxy $name did not come up:" >&2
	cat "$work/$name.log" >&2
	exit 1
}

# build_rev REV NAME: mzproxy built from revision REV (git archive, so
# uncommitted changes are not in it) as $work/mzproxy-NAME.
build_rev() {
	mkdir -p "$work/src-$2"
	git -C "$root" archive "$1" | tar -x -C "$work/src-$2"
	(cd "$work/src-$2" && go build -o "$work/mzproxy-$2" ./cmd/mzproxy)
}

# rev_dbname REV: the database rev_database makes for REV.
rev_dbname() { echo "managed_${1//[^a-zA-Z0-9]/_}"; }

# rev_database REV [ENV=VALUE ...] [-- FLAG ...]: database $(rev_dbname
# REV) on bench_postgres's server, with REV's mzproxy ("tree": this
# tree's) in front of it, started by bench_mzproxy (with those
# environment values and flags) under the database's name (the caller declares port, pid
# and db, sets the database up through port[NAME] and stops the proxy).
rev_database() {
	local d bin=$work/mzproxy
	d=$(rev_dbname "$1")
	if [ "$1" != tree ]; then
		build_rev "$1" "$d"
		bin=$work/mzproxy-$d
	fi
	shift
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE $d"
	db[$d]=$d
	bench_mzproxy "$d" "$bin" "${envs[@]}" -- --backend "${backend/\/postgres\?//$d?}" "$@"
}

# bench_setup [extra mzproxy flags...]: bench_postgres, then mzproxy in
# front of it on $mz_port.
bench_setup() {
	bench_postgres
	declare -gA port pid db
	bench_mzproxy mzproxy "$work/mzproxy" -- "$@"
	mz_port=${port[mzproxy]} mz_pid=${pid[mzproxy]}
}
