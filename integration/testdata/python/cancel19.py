"""Cancel and statement_timeout from Python's drivers: python3 cancel19.py
<driver> <url>, run by TestCancel19DriverPrograms (integration/cancel19_test.go)
through mzproxy and directly, whose outputs must be the same. <driver> is
psycopg (conn.cancel() from another thread, statement_timeout, and both in
pipeline mode) or asyncpg (a cancelled task, which cancels the statement
as timeout= does, and statement_timeout). A cancel is sent once a second
connection sees the statement in its pg_sleep in pg_stat_activity, never
at a fixed time: a cancel that came while a statement was still on its
way (a driver's prepare, a proxy's queue) is answered by the point it
reaches, which a loaded machine moves. Each case interrupts a read of a table, a write to it
or a CREATE TABLE AS, in autocommit or in a block, on a connection of its
own (the cases run at once), and prints one line: what the statement
raised, what a block's next statement raised, and the table afterwards.
The tables c19_<case> (k int PRIMARY KEY, v int) with the row (1, 0)
are made by the program first.
"""
import asyncio
import sys
import threading
import time

driver, url = sys.argv[1], sys.argv[2]

SLEEPING_SQL = (
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
    " AND datname = current_database() AND pid <> pg_backend_pid() AND query ~ (%s || '\\M')"
)
WAIT_BOUND = 20.0  # seconds; the statements sleep 30

OPS = {
    # (text, takes a parameter)
    "read": ("SELECT count(*) FROM {t}, pg_sleep(30) WHERE k = {p}", True),
    "write": ("UPDATE {t} SET v = v + 1 WHERE k = (SELECT {p}::int FROM pg_sleep(30))", True),
    "ddl": ("CREATE TABLE {t}_ctas AS SELECT k FROM {t}, pg_sleep(30)", False),
}


def cases(mechs):
    out = []
    for op in OPS:
        for mech in mechs:
            for block in (False, True):
                out.append((op, mech, block))
    return out


def name(op, mech, block):
    return "%s_%s_%s" % (op, mech, "block" if block else "autocommit")


def after_sql(t):
    return ("SELECT v::text || ' ' || (to_regclass('{t}_ctas') IS NULL)::text FROM {t} WHERE k = 1").format(t=t)


def psycopg_main():
    import psycopg

    def described(e):
        if e is None:
            return "none"
        if isinstance(e, psycopg.Error) and e.sqlstate:
            return "%s %s" % (e.sqlstate, e.diag.message_primary)
        return "%s %s" % (type(e).__name__, e)

    def cancel_when_sleeping(conn, t):
        # From a connection of its own, through the same server.
        with psycopg.connect(url, autocommit=True) as watch:
            deadline = time.monotonic() + WAIT_BOUND
            while time.monotonic() < deadline:
                if watch.execute(SLEEPING_SQL.replace("%s", "%(t)s"), {"t": t}).fetchone()[0] > 0:
                    break
                time.sleep(0.05)
        conn.cancel()

    todo = cases(["cancel", "timeout", "pipeline_cancel", "pipeline_timeout"])
    setup = psycopg.connect(url, autocommit=True)
    for c in todo:
        t = "c19_" + name(*c)
        setup.execute("CREATE TABLE %s (k int PRIMARY KEY, v int)" % t)
        setup.execute("INSERT INTO %s VALUES (1, 0)" % t)
    setup.close()
    results = {}

    def run(op, mech, block):
        t = "c19_" + name(op, mech, block)
        text, param = OPS[op]
        sql = text.format(t=t, p="%s")
        args = (1,) if param else None
        conn = psycopg.connect(url, autocommit=True)
        line = []
        if "timeout" in mech:
            conn.execute("SET statement_timeout = '1s'")
        if block:
            conn.execute("BEGIN")
        timer = None
        if "cancel" in mech:
            timer = threading.Thread(target=cancel_when_sleeping, args=(conn, t))
            timer.start()
        err = None
        try:
            if mech.startswith("pipeline"):
                with conn.pipeline():
                    conn.execute(sql, args)
                    conn.execute("SELECT 1")
            else:
                conn.execute(sql, args)
        except Exception as e:  # noqa: BLE001
            err = e
        if timer:
            timer.join()
        line.append("stmt=" + described(err))
        if block:
            err = None
            try:
                conn.execute("SELECT 1")
            except Exception as e:  # noqa: BLE001
                err = e
            line.append("in_block=" + described(err))
            conn.execute("ROLLBACK")
        if "timeout" in mech:
            conn.execute("RESET statement_timeout")
        line.append("next=" + str(conn.execute("SELECT 41 + 1").fetchone()[0]))
        line.append("after=" + conn.execute(after_sql(t)).fetchone()[0])
        conn.close()
        results[name(op, mech, block)] = "; ".join(line)

    threads = [threading.Thread(target=run, args=c) for c in todo]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for k in sorted(results):
        print("%s: %s" % (k, results[k]))
    return len(results) == len(todo)


async def asyncpg_main():
    import asyncpg

    def described(e):
        if e is None:
            return "none"
        if isinstance(e, asyncpg.PostgresError):
            return "%s %s" % (e.sqlstate, e.args[0] if e.args else "")
        return type(e).__name__

    async def sleeping(t):
        watch = await asyncpg.connect(url)
        try:
            deadline = time.monotonic() + WAIT_BOUND
            while time.monotonic() < deadline:
                if await watch.fetchval(SLEEPING_SQL.replace("%s", "$1::text"), t) > 0:
                    return
                await asyncio.sleep(0.05)
        finally:
            await watch.close()

    todo = cases(["cancel", "statement_timeout"])
    setup = await asyncpg.connect(url)
    for c in todo:
        t = "c19_" + name(*c)
        await setup.execute("CREATE TABLE %s (k int PRIMARY KEY, v int); INSERT INTO %s VALUES (1, 0)" % (t, t))
    await setup.close()
    results = {}

    async def run(op, mech, block):
        t = "c19_" + name(op, mech, block)
        text, param = OPS[op]
        sql = text.format(t=t, p="$1")
        args = (1,) if param else ()
        conn = await asyncpg.connect(url)
        line = []
        if mech == "statement_timeout":
            await conn.execute("SET statement_timeout = '1s'")
        if block:
            await conn.execute("BEGIN")
        err = None
        # asyncpg sends a CancelRequest when the task running a statement
        # is cancelled, as when its timeout= passes (the same path of its
        # protocol), and raises CancelledError.
        task = asyncio.ensure_future(conn.execute(sql, *args))
        if mech == "cancel":
            await sleeping(t)
            task.cancel()
        try:
            await task
        except BaseException as e:  # noqa: BLE001 (asyncio's CancelledError)
            err = e
        line.append("stmt=" + described(err))
        if block:
            err = None
            try:
                await conn.fetchval("SELECT 1")
            except Exception as e:  # noqa: BLE001
                err = e
            line.append("in_block=" + described(err))
            await conn.execute("ROLLBACK")
        if mech == "statement_timeout":
            await conn.execute("RESET statement_timeout")
        line.append("next=%s" % await conn.fetchval("SELECT 41 + 1"))
        line.append("after=" + await conn.fetchval(after_sql(t)))
        await conn.close()
        results[name(op, mech, block)] = "; ".join(line)

    await asyncio.gather(*(run(*c) for c in todo))
    for k in sorted(results):
        print("%s: %s" % (k, results[k]))
    return len(results) == len(todo)


ok = psycopg_main() if driver == "psycopg" else asyncio.run(asyncpg_main())
sys.exit(0 if ok else 1)
