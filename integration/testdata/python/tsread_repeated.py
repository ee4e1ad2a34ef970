"""The same one-shot timestamped reads, repeated on one connection, through
mzproxy: psycopg 3 (queries with parameters, never prepared by the driver:
the unnamed statement parsed at each read, which the event loop serves by
binding a statement of the proxy's from the text's third read on), psycopg
3 in pipeline mode, and asyncpg (its own prepared statements).

python3 tsread_repeated.py <url> <psycopg table> <pipeline table>
<asyncpg table>, run by TestLoopUnnamedTimestampedReadsRepeated
(integration/loop_parse_read_test.go); each table has rows (1, 'one') and
(2, 'two'), and a schema <table>_s has a table of its name with (1, 'uno')
and (2, 'dos'). Prints "ok <case>" or "FAIL <case>: <detail>" per case;
exits 1 when any failed.
"""
import asyncio
import contextlib
import sys

import asyncpg
import psycopg

from matrix import Cases, expect

URL, PSYCOPG, PIPELINE, ASYNCPG = sys.argv[1:5]

writer = psycopg.connect(URL, autocommit=True)


def scenario(table, one, execute, errors, ph, prepares=False):
    """ph(n) is the driver's n-th placeholder; one(sql, args) the first row;
    prepares: the driver prepares its statements (asyncpg)."""
    stamped = "SELECT v, mz_now()::text FROM %s WHERE k = %s" % (table, ph(1))
    last = [0]

    def read_all(want):
        for i in range(8):
            k = 1 + i % 2
            v, ts = one(stamped, (k,))
            expect(v == want[k - 1], "read %d of k = %d: %r, want %r" % (i, k, v, want[k - 1]))
            expect(int(ts) >= last[0], "mz_now() %s after %d" % (ts, last[0]))
            last[0] = int(ts)

    read_all(("one", "two"))
    past = int(one("SELECT mz_now()::bigint", ())[0])
    writer.execute("UPDATE %s SET v = 'eins' WHERE k = 1" % table)
    for i in range(6):
        v = one("SELECT v FROM %s WHERE k = %s AS OF %s" % (table, ph(1), ph(2)), (1, past))[0]
        expect(v == "one", "AS OF read %d: %r, want 'one'" % (i, v))
    for _ in range(4):
        try:
            one("SELECT nope, mz_now() FROM %s WHERE k = %s" % (table, ph(1)), (1,))
        except errors as e:
            expect(e.sqlstate == "42703", "SQLSTATE %s (%s), want 42703" % (e.sqlstate, e))
        else:
            raise AssertionError("an unknown column succeeded")
    star = "SELECT *, mz_now()::text FROM %s WHERE k = %s" % (table, ph(1))
    for _ in range(4):
        row = one(star, (2,))
        expect(len(row) == 3 and row[1] == "two", "SELECT *: %r" % (row,))
    execute("SET search_path = %s_s, public" % table)
    read_all(("uno", "dos"))
    execute("RESET search_path")
    read_all(("eins", "two"))
    writer.execute("ALTER TABLE %s ADD COLUMN w int NOT NULL DEFAULT 7" % table)
    for _ in range(0 if prepares else 4):
        row = one(star, (2,))
        expect(len(row) == 4 and row[1] == "two" and row[2] == 7, "SELECT * after ADD COLUMN: %r" % (row,))
    if prepares:
        # The driver's prepared statement: PostgreSQL's error.
        try:
            one(star, (2,))
        except errors as e:
            expect(e.sqlstate == "0A000", "SQLSTATE %s (%s), want 0A000" % (e.sqlstate, e))
        else:
            raise AssertionError("SELECT * after ADD COLUMN succeeded, want 0A000")


def psycopg_case(table, pipeline):
    def run():
        # Never prepared by the driver: every read is the unnamed
        # statement's Parse.
        conn = psycopg.connect(URL, autocommit=True, prepare_threshold=None)
        try:
            def one(sql, args):
                with conn.pipeline() if pipeline else contextlib.nullcontext():
                    cur = conn.execute(sql, args)
                return cur.fetchone()

            scenario(table, one, conn.execute, psycopg.Error, lambda n: "%s")
        finally:
            conn.close()
    return run


async def asyncpg_case():
    conn = await asyncpg.connect(URL)
    loop = asyncio.get_running_loop()
    try:
        # The scenario is synchronous: each call runs the coroutine on a
        # loop of its own thread.
        def call(coro):
            return asyncio.run_coroutine_threadsafe(coro, loop).result()

        def one(sql, args):
            return tuple(call(conn.fetchrow(sql, *args)))

        await asyncio.to_thread(scenario, ASYNCPG, one, lambda sql: call(conn.execute(sql)),
                                asyncpg.PostgresError, lambda n: "$%d" % n, True)
    finally:
        await conn.close()


cases = Cases()
cases.run("psycopg", psycopg_case(PSYCOPG, False))
cases.run("psycopg_pipeline", psycopg_case(PIPELINE, True))
asyncio.run(cases.run_async("asyncpg", asyncpg_case))
cases.finish()
