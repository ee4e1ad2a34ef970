"""psycopg 3 read-only transactions through mzproxy, each read a query with
parameters (the unnamed statement parsed, bound, described and run: the
event loop serves the first one with the pin in front of its Parse).

python3 psycopg_rotxn.py <url> <table>, run by
TestLoopUnnamedParseReadOnlyTxn (integration/loop_parse_txn_test.go); the
table has rows (1, v) and (2, 100). Prints "ok <case>" or "FAIL <case>:
<detail>" per case; exits 1 when any failed.
"""
import sys

import psycopg

from matrix import Cases, expect

URL, TABLE = sys.argv[1], sys.argv[2]
READ = "SELECT v FROM %s WHERE k = %%s" % TABLE
STAMPED = "SELECT v, mz_now()::text FROM %s WHERE k = %%s" % TABLE

writer = psycopg.connect(URL, autocommit=True)
conn = psycopg.connect(URL)


def current():
    return writer.execute("SELECT v FROM %s WHERE k = 1" % TABLE).fetchone()[0]


def bump():
    writer.execute("UPDATE %s SET v = v + 1 WHERE k = 1" % TABLE)


def one(sql, k):
    return conn.execute(sql, (k,)).fetchone()


def expect_code(sql, k, code):
    try:
        one(sql, k)
    except psycopg.Error as e:
        expect(e.sqlstate == code, "SQLSTATE %s (%s), want %s" % (e.sqlstate, e, code))
        return
    raise AssertionError("succeeded, want SQLSTATE %s" % code)


def txn():
    """A transaction's reads see one snapshot, and mz_now() one timestamp,
    while the writer commits between them."""
    for _ in range(6):
        want = current()
        a = one(READ, 1)[0]
        bump()
        b, ts1 = one(STAMPED, 1)
        bump()
        c = one(READ, 1)[0]
        other, ts2 = one(STAMPED, 2)
        conn.commit()
        expect((a, b, c, other) == (want, want, want, 100) and ts1 == ts2 and ts1,
               "reads %s, mz_now() %s and %s; want %d three times, 100, one timestamp" % ((a, b, c, other), ts1, ts2, want))


def error(sync=lambda: None):
    """An error inside: 25P02 until ROLLBACK."""
    expect_code("SELECT 1 / (v - v) FROM %s WHERE k = %%s" % TABLE, 1, "22012")
    # (In a pipeline, what follows the error up to a Sync is aborted by
    # psycopg itself.)
    sync()
    expect_code(READ, 1, "25P02")
    conn.rollback()
    expect(one(READ, 2)[0] == 100, "read after ROLLBACK")
    conn.commit()


def write():
    """A write inside commits."""
    want = current()
    expect(one(READ, 1)[0] == want, "read before the write")
    conn.execute("UPDATE %s SET v = v + 1 WHERE k = %%s" % TABLE, (1,))
    expect(one(READ, 1)[0] == want + 1, "read after the write")
    conn.commit()
    expect(current() == want + 1, "after COMMIT")


def pipelined(case):
    def run():
        with conn.pipeline():
            case()
    return run


def pipeline_error():
    with conn.pipeline() as p:
        error(p.sync)


cases = Cases(recover=conn.rollback)
cases.run("txn", txn)
cases.run("error", error)
cases.run("write", write)
cases.run("pipeline_txn", pipelined(txn))
cases.run("pipeline_error", pipeline_error)
conn.close()
writer.close()
cases.finish()
