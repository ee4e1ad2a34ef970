"""Lazy history from Python's drivers: python3 lazy17.py <driver> <url>, run
by TestOutside17LazyHistoryDrivers (integration/outside17_test.go, lazyCases
says what the shared cases check). <driver> is psycopg or asyncpg. Each
case writes tables never written before:

  first_write_in_block      CREATE TABLE; BEGIN; two INSERTs; COMMIT
  hidden_writer_autocommit  an INSERT whose trigger writes a never-written
                            table lands (mzproxy runs it again, once)
  hidden_writer_block       the same in a block: 40001; the block again lands
  batch                     psycopg: three INSERTs in a pipeline;
                            asyncpg: executemany
  copy                      COPY FROM STDIN
"""
import asyncio
import sys

from matrix import Cases, expect

driver, url = sys.argv[1], sys.argv[2]

HIDDEN = [
    "CREATE TABLE lz_src (k int)",
    "CREATE TABLE lz_audit (k int)",
    "CREATE TABLE lz_audit2 (k int)",
    """CREATE FUNCTION lz_copy() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN INSERT INTO lz_audit VALUES (NEW.k);
       IF NEW.k > 100 THEN INSERT INTO lz_audit2 VALUES (NEW.k); END IF; RETURN NEW; END $$""",
    "CREATE TRIGGER lz_src_audit AFTER INSERT ON lz_src FOR EACH ROW EXECUTE FUNCTION lz_copy()",
]


def psycopg_cases():
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    cases = Cases(conn.rollback)

    def count(table):
        return conn.execute("SELECT count(*) FROM " + table).fetchone()[0]

    def first_write_in_block():
        conn.execute("CREATE TABLE lz_block (k int)")
        with conn.transaction():
            for k in (1, 2):
                conn.execute("INSERT INTO lz_block VALUES (%s)", (k,))
        expect(count("lz_block") == 2, "rows %d" % count("lz_block"))

    for sql in HIDDEN:
        conn.execute(sql)

    def hidden_writer_autocommit():
        n = conn.execute("INSERT INTO lz_src VALUES (%s)", (1,)).rowcount
        expect(n == 1 and count("lz_audit") == 1, "rowcount %d, audit %d" % (n, count("lz_audit")))

    def hidden_writer_block():
        try:
            with conn.transaction():
                conn.execute("INSERT INTO lz_src VALUES (%s)", (101,))
            expect(False, "the block committed")
        except psycopg.errors.SerializationFailure:
            pass
        with conn.transaction():
            conn.execute("INSERT INTO lz_src VALUES (%s)", (101,))
        expect(count("lz_audit2") == 1, "audit2 %d" % count("lz_audit2"))

    def batch():
        expect(psycopg.Pipeline.is_supported(), "pipeline mode needs libpq 14 or later")
        conn.execute("CREATE TABLE lz_batch (k int)")
        with conn.pipeline():
            for k in (1, 2, 3):
                conn.execute("INSERT INTO lz_batch VALUES (%s)", (k,))
        expect(count("lz_batch") == 3, "rows %d" % count("lz_batch"))

    def copy():
        conn.execute("CREATE TABLE lz_copy (k int)")
        with conn.cursor() as cur:
            with cur.copy("COPY lz_copy (k) FROM STDIN") as cp:
                for k in (1, 2):
                    cp.write_row((k,))
        expect(count("lz_copy") == 2, "rows %d" % count("lz_copy"))

    for name, fn in [("first_write_in_block", first_write_in_block),
                     ("hidden_writer_autocommit", hidden_writer_autocommit),
                     ("hidden_writer_block", hidden_writer_block),
                     ("batch", batch), ("copy", copy)]:
        cases.run(name, fn)
    cases.finish()


async def asyncpg_cases():
    import asyncpg

    conn = await asyncpg.connect(url)
    cases = Cases()

    async def count(table):
        return await conn.fetchval("SELECT count(*) FROM " + table)

    async def first_write_in_block():
        await conn.execute("CREATE TABLE lz_block (k int)")
        async with conn.transaction():
            for k in (1, 2):
                await conn.execute("INSERT INTO lz_block VALUES ($1)", k)
        n = await count("lz_block")
        expect(n == 2, "rows %d" % n)

    for sql in HIDDEN:
        await conn.execute(sql)

    async def hidden_writer_autocommit():
        status = await conn.execute("INSERT INTO lz_src VALUES ($1)", 1)
        n = await count("lz_audit")
        expect(status == "INSERT 0 1" and n == 1, "status %s, audit %d" % (status, n))

    async def hidden_writer_block():
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO lz_src VALUES ($1)", 101)
            expect(False, "the block committed")
        except asyncpg.SerializationError:
            pass
        async with conn.transaction():
            await conn.execute("INSERT INTO lz_src VALUES ($1)", 101)
        n = await count("lz_audit2")
        expect(n == 1, "audit2 %d" % n)

    async def batch():
        await conn.execute("CREATE TABLE lz_batch (k int)")
        await conn.executemany("INSERT INTO lz_batch VALUES ($1)", [(1,), (2,), (3,)])
        n = await count("lz_batch")
        expect(n == 3, "rows %d" % n)

    async def copy():
        await conn.execute("CREATE TABLE lz_copy (k int)")
        await conn.copy_records_to_table("lz_copy", records=[(1,), (2,)], columns=["k"])
        n = await count("lz_copy")
        expect(n == 2, "rows %d" % n)

    for name, fn in [("first_write_in_block", first_write_in_block),
                     ("hidden_writer_autocommit", hidden_writer_autocommit),
                     ("hidden_writer_block", hidden_writer_block),
                     ("batch", batch), ("copy", copy)]:
        await cases.run_async(name, fn)
    await conn.close()
    cases.finish()


if driver == "psycopg":
    psycopg_cases()
else:
    asyncio.run(asyncpg_cases())
