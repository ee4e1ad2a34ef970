#!/usr/bin/env bash
# What 32 clients of blind single-row INSERTs wait for (issue 14): during
# one pgbench run through mzproxy (this tree, simple protocol, a managed
# keyless table) and one directly (a plain table of another database),
# each on the same PostgreSQL (fsync on), a sampler in the database reads
# every 0.1 s the wait events of pgbench's backends (idle ones: waiting
# for the client's next statement) and the buffers some
# backend has pinned (pg_buffercache), by relation: which pages the
# BufferContent waits are on. Around each run: the cluster's WAL
# (pg_stat_wal: records, full-page images, bytes, writes and flushes, per
# write), the CPU per write of the cluster's processes, of mzproxy (or
# PgBouncer) and of pgbench, and how busy the machine's CPUs were
# (/proc/stat, all work on it): what each write costs the cores the
# direct run shares.
#
# A third run, "slotdirect", sends the backend what mzproxy sends it for
# each write, directly (pgbench, one Query: `SELECT
# mzproxy.begin_write_occ(NULL, 0); INSERT ...` on mzproxy's database, the
# managed table, its history trigger): the backend's share of the gap, with
# no proxy in the way.
#
# TARGETS chooses the runs (default "mz direct slotdirect"); two more take
# the history trigger away and keep the rest: "mzplain", through mzproxy
# but on a table made directly in PostgreSQL in mzproxy's database
# (unmanaged: the optimistic write and its slot, no history trigger), and
# "slotplain", the slot and that table's write sent directly. "bouncer"
# runs the direct workload through PgBouncer (session pooling, over the
# Unix socket, as bench/writelat.sh's): a reference proxy's CPU per write.
#
# WORKLOAD=counter runs instead the increment of one row (a managed table
# with a primary key, `UPDATE ctr SET n = n + 1 WHERE id = 1`; set
# CLIENTS=8 for bench/writes.sh's section 2).
#
# usage: bench/writewaits.sh
#   env: DURATION=10 CLIENTS=32 WORKLOAD=insert
#        TARGETS="mz direct slotdirect" (also: mzplain slotplain bouncer)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-32}
WORKLOAD=${WORKLOAD:-insert}
TARGETS=${TARGETS:-"mz direct slotdirect"}

SRC=tree bench_postgres
declare -A port pid db
rev_database tree
d=$(rev_dbname tree)
psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc "CREATE DATABASE plain"
psql -X -h 127.0.0.1 -p "${port[$d]}" -U postgres -d "$d" -qAtc "CREATE TABLE ins (x int)"
psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d plain -qAtc "CREATE TABLE ins (x int)"
psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$d" -qAtc "CREATE SCHEMA u; CREATE TABLE u.ins (x int)"
for t in "$d" plain; do
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$t" -qAtc "CREATE EXTENSION IF NOT EXISTS pg_buffercache"
done
echo 'INSERT INTO ins VALUES (1);' >"$work/ins.sql"
if [ "$WORKLOAD" = counter ]; then
	psql -X -h 127.0.0.1 -p "${port[$d]}" -U postgres -d "$d" -qAtc "CREATE TABLE ctr (id int PRIMARY KEY, n bigint); INSERT INTO ctr VALUES (1, 0)"
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d plain -qAtc "CREATE TABLE ctr (id int PRIMARY KEY, n bigint); INSERT INTO ctr VALUES (1, 0)"
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$d" -qAtc "CREATE TABLE u.ctr (id int PRIMARY KEY, n bigint); INSERT INTO u.ctr VALUES (1, 0)"
	echo 'UPDATE ctr SET n = n + 1 WHERE id = 1;' >"$work/ins.sql"
fi
# One write of each managed table first: its first write makes its history
# (lazy history), with the table locked, and the runs measure the steady
# state.
psql -X -h 127.0.0.1 -p "${port[$d]}" -U postgres -d "$d" -qAtc "INSERT INTO ins VALUES (0)"
{ printf 'SELECT mzproxy.begin_write_occ(NULL, 0) \\; '; cat "$work/ins.sql"; } >"$work/slot.sql"
sed -E 's/(ins|ctr) /u.\1 /' "$work/ins.sql" >"$work/plain.sql"
sed -E 's/(ins|ctr) /u.\1 /' "$work/slot.sql" >"$work/slotplain.sql"

if [[ " $TARGETS " == *" bouncer "* ]]; then
	bench_pgbouncer bouncer plain "max_client_conn = 200" "default_pool_size = 100"
fi

# sample database seconds: one line per sample and backend ("wait"), and
# per pinned buffer of a relation ("pin").
sample() {
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d "$1" -qAt <<EOS
CREATE TEMP TABLE waits (wait text);
CREATE TEMP TABLE pins (rel text, blk bigint, pinned int);
DO \$\$
DECLARE stop timestamptz := clock_timestamp() + interval '$2 seconds';
BEGIN
  WHILE clock_timestamp() < stop LOOP
    INSERT INTO waits SELECT CASE WHEN state = 'idle' THEN 'idle (waiting for the client)'
      ELSE coalesce(wait_event_type || ' ' || wait_event, 'on CPU') END
      FROM pg_stat_activity WHERE application_name = 'pgbench';
    INSERT INTO pins SELECT c.relname, b.relblocknumber, b.pinning_backends
      FROM pg_buffercache b JOIN pg_class c ON c.relfilenode = b.relfilenode
      WHERE b.pinning_backends > 0 AND b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database());
    PERFORM pg_stat_clear_snapshot();
    PERFORM pg_sleep(0.1);
  END LOOP;
END \$\$;
SELECT 'wait', wait, count(*) FROM waits GROUP BY 2 ORDER BY 3 DESC;
SELECT 'pin', rel, count(*), sum(pinned), count(DISTINCT blk) FROM pins GROUP BY 2 ORDER BY 4 DESC LIMIT 12;
EOS
}

wal() {
	psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAt -F ' ' \
		-c "SELECT wal_records, wal_fpi, wal_bytes, wal_write, wal_sync FROM pg_stat_wal"
}

for t in $TARGETS; do
	script=$work/ins.sql
	case $t in
	mz) p=${port[$d]} dbn=$d ;;
	direct) p=$pg_port dbn=plain ;;
	slotdirect) p=$pg_port dbn=$d script=$work/slot.sql ;;
	mzplain) p=${port[$d]} dbn=$d script=$work/plain.sql ;;
	slotplain) p=$pg_port dbn=$d script=$work/slotplain.sql ;;
	bouncer) p=${port[bouncer]} dbn=plain ;;
	esac
	hop=${pid[$d]}
	[ "$t" = bouncer ] && hop=${pid[bouncer]}
	sample "$dbn" "$DURATION" >"$work/sample.$t" &
	spid=$!
	sleep 0.5
	read -r w0 f0 b0 wr0 s0 <<<"$(wal)"
	c0=$(cluster_ticks) m0=$(cpu_ticks "$hop")
	read -r _ u0 n0 s0_ i0 io0 _ <<<"$(head -1 /proc/stat)"
	out=$(/usr/bin/time -f 'pgbench-cpu %U %S' pgbench -n -M simple -c "$CLIENTS" -j 2 -T "$((DURATION - 1))" -f "$script" \
		-h 127.0.0.1 -p "$p" -U postgres "$dbn" 2>&1)
	# pgbench's backends have exited: their CPU is the postmaster's
	# children's once it has reaped them, and not counted before.
	for _ in $(seq 20); do
		[ "$(psql -X -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qAtc \
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'")" = 0 ] && break
		sleep 0.1
	done
	sleep 0.1
	c1=$(cluster_ticks) m1=$(cpu_ticks "$hop")
	read -r _ u1 n1 s1_ i1 io1 _ <<<"$(head -1 /proc/stat)"
	busy=$(((u1 + n1 + s1_) - (u0 + n0 + s0_))) idle=$(((i1 + io1) - (i0 + io0)))
	read -r pu ps <<<"$(awk '/^pgbench-cpu/ {print $2, $3}' <<<"$out")"
	read -r w1 f1 b1 wr1 s1 <<<"$(wal)"
	wait "$spid"
	n=$(awk '/number of transactions actually processed/ {print $NF}' <<<"$out")
	n=${n%%/*}
	echo "## $t: $(grep -E '^tps' <<<"$out" | head -1)"
	awk -v n="$n" -v w=$((w1 - w0)) -v f=$((f1 - f0)) -v b=$((b1 - b0)) -v wr=$((wr1 - wr0)) -v s=$((s1 - s0)) \
		-v c=$((c1 - c0)) -v m=$((m1 - m0)) -v hz="$hz" -v t="$t" -v pb="$pu" -v pbs="$ps" \
		-v busy="$busy" -v idle="$idle" 'BEGIN {
		printf "# per write (%d): WAL records %.2f, full-page images %.3f, bytes %.0f, writes %.3f, flushes %.3f; CPU µs: cluster %.1f", n, w/n, f/n, b/n, wr/n, s/n, c*1e6/hz/n
		if (t ~ /^mz/) printf ", mzproxy %.1f", m*1e6/hz/n
		if (t == "bouncer") printf ", PgBouncer %.1f", m*1e6/hz/n
		printf ", pgbench %.1f; the machine busy %.0f%%\n", (pb+pbs)*1e6/n, 100*busy/(busy+idle) }'
	echo "# kind | wait event or relation | samples | (pin: backends pinning, summed | distinct blocks)"
	cat "$work/sample.$t"
done
