"""asyncpg statements prepared outside a transaction, then reads inside one,
through mzproxy: python3 asyncpg_unsynced.py <url> <table>, run by
TestAsyncpgUnsyncedPrepare (integration/asyncpg_test.go). Prints "ok <case>"
or "FAIL <case>: <detail>" per case; exits 1 when any failed.
"""
import asyncio, gc, sys
import asyncpg

URL, TABLE = sys.argv[1], sys.argv[2]
failed = False


async def case(name, fn):
    global failed
    conn = await asyncpg.connect(URL)
    try:
        await fn(conn)
        print("ok", name, flush=True)
    except Exception as e:
        failed = True
        print("FAIL %s: %s %s" % (name, getattr(e, "sqlstate", type(e).__name__), e), flush=True)
    finally:
        await conn.close()


async def read_in_transaction(conn):
    # A cursor is a Bind and Executes inside the block; mz_now() read twice
    # is the transaction's one timestamp.
    async with conn.transaction():
        rows = [r["v"] async for r in conn.cursor(f"SELECT v FROM {TABLE} WHERE k = $1", 1)]
        if rows != ["a"]:
            raise Exception("cursor read %r" % rows)
        first = await conn.fetchval("SELECT mz_now()::text")
        second = await conn.fetchval(f"SELECT mz_now()::text FROM {TABLE} WHERE k = $1", 1)
        if first != second:
            raise Exception("mz_now() moved inside the transaction: %s then %s" % (first, second))
        # Pinned: the proxy made the backend transaction REPEATABLE READ.
        iso = await conn.fetchval("SELECT current_setting('transaction_isolation')")
        if iso != "repeatable read":
            raise Exception("the read-only transaction was not pinned (backend isolation %s)" % iso)


async def dropped_mz_now_statement(conn):
    # prepare is Parse, Describe, Flush: no Sync. The statement is never
    # executed and is dropped; asyncpg closes it later, with the next
    # statement it prepares.
    stmt = await conn.prepare(f"SELECT v, mz_now() FROM {TABLE} WHERE k = $1")
    del stmt
    gc.collect()
    await read_in_transaction(conn)
    await read_in_transaction(conn)


async def kept_statement(conn):
    stmt = await conn.prepare(f"SELECT v FROM {TABLE} WHERE k = $1")
    async with conn.transaction():
        v = await stmt.fetchval(1)
        if v != "a":
            raise Exception("prepared statement read %r" % v)
    await read_in_transaction(conn)


async def main():
    setup = await asyncpg.connect(URL)
    await setup.execute(f"CREATE TABLE {TABLE} (k int PRIMARY KEY, v text)")
    await setup.execute(f"INSERT INTO {TABLE} VALUES (1, 'a')")
    await setup.close()
    await case("dropped_mz_now_statement", dropped_mz_now_statement)
    await case("kept_statement", kept_statement)


asyncio.run(main())
sys.exit(1 if failed else 0)
