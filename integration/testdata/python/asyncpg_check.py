"""asyncpg through mzproxy: python3 asyncpg_check.py <url> <table>, run by
TestDriverMatrix (integration/driver_matrix_test.go says what each case does).

asyncpg speaks the extended protocol with $n placeholders and prepares
every statement that has arguments under a name of its own
(__asyncpg_stmt_N__), kept in a per-connection statement cache: the types
of the parameters are the server's answer to Describe, so the proxy must
describe a mz_now() statement with only the client's own parameters.
Statements without arguments go as a simple Query.
"""
import asyncio
import sys

import asyncpg

from matrix import Cases, expect

url, table = sys.argv[1], sys.argv[2]


async def main():
    conn = await asyncpg.connect(url)
    cases = Cases()
    state = {}

    async def insert():
        for k, v in [(1, "one"), (2, "two"), (3, "three")]:
            status = await conn.execute("INSERT INTO " + table + " VALUES ($1, $2)", k, v)
            expect(status == "INSERT 0 1", "status " + status)

    async def update():
        status = await conn.execute("UPDATE " + table + " SET v = $1 WHERE k = $2", "uno", 1)
        expect(status == "UPDATE 1", "status " + status)

    async def select():
        v = await conn.fetchval("SELECT v FROM " + table + " WHERE k = $1", 1)
        expect(v == "uno", "got %r" % v)

    async def mz_now_param():
        row = await conn.fetchrow("SELECT v, mz_now() FROM " + table + " WHERE k = $1", 1)
        expect(row[0] == "uno" and row[1] > 0, "got %r" % (row,))
        state["ts"] = int(row[1])

    async def plain_after_mz_now():
        expect(await conn.fetchval("SELECT 1") == 1, "SELECT 1")

    async def param_after_mz_now():
        expect(await conn.fetchval("SELECT $1::int", 42) == 42, "SELECT 42")

    async def mz_now_repeated():
        # Runs of reads of the present between writes (the read guard
        # learns the settled count of writes and reads through it).
        last = 0
        for i in range(12):
            want = "r%d" % (i // 4)
            if i % 4 == 0:
                await conn.execute("UPDATE " + table + " SET v = $1 WHERE k = $2", want, 1)
            row = await conn.fetchrow("SELECT v, mz_now() FROM " + table + " WHERE k = $1", 1)
            expect(row[0] == want and int(row[1]) >= last, "read %d: got %r, want %r at or after %d" % (i, row, want, last))
            last = int(row[1])
        await conn.execute("UPDATE " + table + " SET v = $1 WHERE k = $2", "eins", 1)  # the later cases' row

    async def as_of_param():
        await conn.execute("UPDATE " + table + " SET v = $1 WHERE k = $2", "eins", 1)
        v = await conn.fetchval("SELECT v FROM " + table + " WHERE k = $1 AS OF $2", 1, state["ts"])
        expect(v == "uno", "got %r" % v)

    async def as_of_at_least_param():
        v = await conn.fetchval("SELECT v FROM " + table + " WHERE k = $1 AS OF AT LEAST $2", 1, state["ts"])
        expect(v in ("uno", "eins"), "got %r" % v)

    class RollBack(Exception):
        pass

    async def rollback():
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM " + table + " WHERE k = $1", 2)
                raise RollBack()
        except RollBack:
            pass
        expect(await conn.fetchval("SELECT count(*) FROM " + table) == 3, "rows after the rollback")

    async def unique_violation():
        try:
            await conn.execute("INSERT INTO " + table + " VALUES ($1, $2)", 1, "dup")
            expect(False, "duplicate key accepted")
        except asyncpg.exceptions.UniqueViolationError as e:
            expect(e.sqlstate == "23505", "sqlstate " + str(e.sqlstate))
        expect(await conn.fetchval("SELECT count(*) FROM " + table) == 3, "rows after the violation")

    async def timeout():
        await conn.execute("SET statement_timeout = '100ms'")
        try:
            await conn.fetchval("SELECT pg_sleep(5)")
            expect(False, "pg_sleep(5) finished under a 100ms statement_timeout")
        except asyncpg.exceptions.QueryCanceledError as e:
            expect(e.sqlstate == "57014", "sqlstate " + str(e.sqlstate))
        await conn.execute("RESET statement_timeout")
        expect(await conn.fetchval("SELECT 1") == 1, "SELECT 1 after the timeout")

    async def prepared():
        # An explicitly prepared mz_now() read: the client sees its one
        # parameter, and each execution reads the present.
        stmt = await conn.prepare("SELECT v, mz_now() FROM " + table + " WHERE k = $1")
        expect(len(stmt.get_parameters()) == 1, "parameters %r" % (stmt.get_parameters(),))
        expect([a.name for a in stmt.get_attributes()] == ["v", "mz_now"], "columns %r" % (stmt.get_attributes(),))
        for _ in range(2):
            row = await stmt.fetchrow(3)
            expect(row[0] == "three" and row[1] > 0, "got %r" % (row,))
        expect(await conn.fetchval("SELECT $1::int + 1", 1) == 2, "SELECT after the prepared one")

    async def cursor():
        # A cursor in a transaction: Execute with a row limit, portal suspended.
        async with conn.transaction():
            ks = [r[0] async for r in conn.cursor("SELECT k FROM " + table + " WHERE k <= $1 ORDER BY k", 3, prefetch=2)]
        expect(ks == [1, 2, 3], "got %r" % ks)

    await cases.run_async("ddl", lambda: conn.execute("CREATE TABLE " + table + " (k int PRIMARY KEY, v text)"))
    for name, fn in [("insert", insert), ("update", update), ("select", select),
                     ("mz_now_param", mz_now_param), ("plain_after_mz_now", plain_after_mz_now),
                     ("param_after_mz_now", param_after_mz_now), ("as_of_param", as_of_param),
                     ("as_of_at_least_param", as_of_at_least_param),
                     ("mz_now_repeated", mz_now_repeated), ("rollback", rollback),
                     ("unique_violation", unique_violation), ("timeout", timeout),
                     ("prepared", prepared), ("cursor", cursor)]:
        await cases.run_async(name, fn)
    await conn.close()
    cases.finish()


asyncio.run(main())
