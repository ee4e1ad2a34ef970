#!/usr/bin/env bash
# WAL flushes and data-file fsyncs per CREATE TABLE (issue 16): N CREATE
# TABLE (a int PRIMARY KEY, b text) in autocommit, none dropped, through
# mzproxy (database flush_mz, managed tables) and directly (flush_direct),
# with every PostgreSQL process traced by strace -f -T -e fsync,fdatasync -y
# (the time in those calls is printed too).
# fdatasync of pg_wal/ files are WAL flushes (fsync of one: a new WAL
# segment); fsync of base/ files are relation files synced at once
# (PostgreSQL 15 syncs each btree it builds).
#
# usage: bench/ddlflush.sh      env: N=20 SRC=tree KEEP=dir (keep the traces)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

N=${N:-20}
bench_setup
for d in flush_mz flush_direct; do
	psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE $d" >/dev/null
done
echo "WAL flushes and fsyncs per CREATE TABLE, $N tables, $(git -C "$root" rev-parse --short HEAD)${SRC:+ (SRC=$SRC)}"

# measure NAME PORT DB: N CREATE TABLEs traced; prints the counts per table.
measure() {
	local name=$1 port=$2 d=$3 pm trace=$work/$1.strace
	for i in 1 2; do # warm: the first statements load caches and the schema
		psql -h 127.0.0.1 -p "$port" -U postgres -d "$d" -qAtc "CREATE TABLE warm_$i (a int PRIMARY KEY, b text)" >/dev/null
	done
	pm=$(head -1 "$work/pg/postmaster.pid")
	strace -f -qq -T -e trace=fsync,fdatasync -y -o "$trace" $(for p in $pm $(pgrep -P "$pm"); do echo -p "$p"; done) &
	local st=$!
	sleep 1
	for i in $(seq "$N"); do echo "CREATE TABLE t_$i (a int PRIMARY KEY, b text);"; done |
		psql -h 127.0.0.1 -p "$port" -U postgres -d "$d" -qAt >/dev/null
	sleep 1
	kill "$st"; wait "$st" 2>/dev/null || true
	[ -n "${KEEP:-}" ] && cp "$trace" "$KEEP/$name.strace"
	# The backend that ran the statements is the process with the most
	# calls; the others (WAL writer, checkpointer, autovacuum) are noise.
	awk -v n="$N" -v name="$name" '
		{ pid = $1; all[pid]++; secs = $NF; gsub(/[<>]/, "", secs); took[pid] += secs }
		/^[0-9]+ +fdatasync\(.*pg_wal/ { wal[pid]++ } /^[0-9]+ +fsync\(.*pg_wal/ { seg[pid]++ }
		/base\// { data[pid]++ }
		END {
			for (p in all) if (all[p] > all[b]) b = p
			for (p in all) if (p != b) other += all[p]
			printf "%-8s backend: WAL flushes %.2f, relation fsyncs %.2f, %.2f ms in them per CREATE TABLE (new WAL segments synced: %d; other processes: %d calls)\n",
				name, wal[b] / n, data[b] / n, took[b] * 1000 / n, seg[b], other
		}' "$trace"
}
measure mzproxy "$mz_port" flush_mz
measure direct "$pg_port" flush_direct
