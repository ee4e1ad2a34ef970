"""psycopg (3) through mzproxy: python3 psycopg_check.py <url> <table>, run by
TestDriverMatrix (integration/driver_matrix_test.go says what each case does).

psycopg 3 binds parameters on the server: its %s placeholders become $1,
$2, ... of an extended-protocol Parse, so AS OF %s is AS OF $2. It prepares
a statement by name on request (prepare=True) or after prepare_threshold
executions, pipelines statements (conn.pipeline(), libpq 14 or later) and
runs named cursors as DECLARE with bound parameters.
"""
import sys

import psycopg
from psycopg import errors

from matrix import Cases, expect

url, table = sys.argv[1], sys.argv[2]
conn = psycopg.connect(url, autocommit=True)
cases = Cases(conn.rollback)
state = {}


def one(sql, args=None, **kw):
    return conn.execute(sql, args, **kw).fetchone()


def insert():
    for k, v in [(1, "one"), (2, "two"), (3, "three")]:
        n = conn.execute("INSERT INTO " + table + " VALUES (%s, %s)", (k, v)).rowcount
        expect(n == 1, "rowcount %d" % n)


def update():
    n = conn.execute("UPDATE " + table + " SET v = %s WHERE k = %s", ("uno", 1)).rowcount
    expect(n == 1, "rowcount %d" % n)


def mz_now_param():
    row = one("SELECT v, mz_now() FROM " + table + " WHERE k = %s", (1,))
    expect(row[0] == "uno" and row[1] > 0, "got %r" % (row,))
    state["ts"] = int(row[1])


def mz_now_repeated():
    # Runs of reads of the present between writes (the read guard learns
    # the settled count of writes and reads through it): each write is in
    # every later read, and mz_now() never goes back.
    last = 0
    for i in range(12):
        want = "r%d" % (i // 4)
        if i % 4 == 0:
            conn.execute("UPDATE " + table + " SET v = %s WHERE k = %s", (want, 1))
        row = one("SELECT v, mz_now() FROM " + table + " WHERE k = %s", (1,))
        expect(row[0] == want and int(row[1]) >= last, "read %d: got %r, want %r at or after %d" % (i, row, want, last))
        last = int(row[1])

    # The same in a pipeline: the reads sent before any answer is read.
    conn.execute("UPDATE " + table + " SET v = %s WHERE k = %s", ("q", 1))
    with conn.pipeline():
        curs = [conn.execute("SELECT v, mz_now() FROM " + table + " WHERE k = %s", (1,)) for _ in range(6)]
    for i, c in enumerate(curs):
        row = c.fetchone()
        expect(row[0] == "q" and int(row[1]) >= last, "pipelined read %d: got %r, want 'q' at or after %d" % (i, row, last))
        last = int(row[1])
    conn.execute("UPDATE " + table + " SET v = %s WHERE k = %s", ("eins", 1))  # the later cases' row


def as_of_param():
    conn.execute("UPDATE " + table + " SET v = %s WHERE k = %s", ("eins", 1))
    row = one("SELECT v FROM " + table + " WHERE k = %s AS OF %s", (1, state["ts"]))
    expect(row == ("uno",), "got %r" % (row,))


def as_of_at_least_param():
    row = one("SELECT v FROM " + table + " WHERE k = %s AS OF AT LEAST %s", (1, state["ts"]))
    expect(row in [("uno",), ("eins",)], "got %r" % (row,))


class RollBack(Exception):
    pass


def rollback():
    try:
        with conn.transaction():
            conn.execute("DELETE FROM " + table + " WHERE k = %s", (2,))
            raise RollBack()
    except RollBack:
        pass
    expect(one("SELECT count(*) FROM " + table) == (3,), "rows after the rollback")


def unique_violation():
    try:
        conn.execute("INSERT INTO " + table + " VALUES (%s, %s)", (1, "dup"))
        expect(False, "duplicate key accepted")
    except errors.UniqueViolation as e:
        expect(e.sqlstate == "23505", "sqlstate " + str(e.sqlstate))
    expect(one("SELECT count(*) FROM " + table) == (3,), "rows after the violation")


def timeout():
    conn.execute("SET statement_timeout = '100ms'")
    try:
        conn.execute("SELECT pg_sleep(5)")
        expect(False, "pg_sleep(5) finished under a 100ms statement_timeout")
    except errors.QueryCanceled as e:
        expect(e.sqlstate == "57014", "sqlstate " + str(e.sqlstate))
    conn.execute("RESET statement_timeout")
    expect(one("SELECT 1") == (1,), "SELECT 1 after the timeout")


def pipeline():
    # Writes, a mz_now() read with a parameter and plain reads in one
    # pipeline: psycopg sends them all before reading any answer.
    expect(psycopg.Pipeline.is_supported(), "pipeline mode needs libpq 14 or later")
    with conn.pipeline():
        ins = [conn.execute("INSERT INTO " + table + " VALUES (%s, %s)", (k, "p")) for k in (20, 21)]
        now = conn.execute("SELECT v, mz_now() FROM " + table + " WHERE k = %s", (20,))
        plain = conn.execute("SELECT 1")
        param = conn.execute("SELECT %s::int * 2", (21,))
        count = conn.execute("SELECT count(*) FROM " + table + " WHERE v = %s", ("p",))
    expect([c.rowcount for c in ins] == [1, 1], "insert rowcounts")
    row = now.fetchone()
    expect(row[0] == "p" and row[1] > 0, "mz_now() read %r" % (row,))
    expect(plain.fetchone() == (1,), "plain query")
    expect(param.fetchone() == (42,), "parameterized query")
    expect(count.fetchone() == (2,), "count")


def server_cursor():
    with conn.transaction():
        with conn.cursor(name="mz_matrix") as sc:
            sc.itersize = 2
            sc.execute("SELECT k, v FROM " + table + " WHERE k <= %s ORDER BY k", (3,))
            rows = sc.fetchall()
    expect(rows == [(1, "eins"), (2, "two"), (3, "three")], "got %r" % rows)


def prepared():
    # Named statements: the mz_now() read twice, then a plain query.
    for _ in range(2):
        row = one("SELECT v, mz_now() FROM " + table + " WHERE k = %s", (3,), prepare=True)
        expect(row[0] == "three" and row[1] > 0, "got %r" % (row,))
    expect(one("SELECT %s::int + 1", (1,), prepare=True) == (2,), "prepared SELECT")
    expect(one("SELECT 1") == (1,), "plain query after prepared ones")


def binary():
    with conn.cursor(binary=True) as cur:
        cur.execute("SELECT %s::bytea, %s::int8[]", (b"\x00\x01\xff", [1, 2, 3]))
        row = cur.fetchone()
    expect(row == (b"\x00\x01\xff", [1, 2, 3]), "got %r" % (row,))


def copy():
    with conn.cursor() as cur:
        with cur.copy("COPY " + table + " (k, v) FROM STDIN") as cp:
            for k in range(100, 110):
                cp.write_row((k, "c%d" % k))
        with cur.copy("COPY (SELECT k FROM " + table + " WHERE k >= 108 ORDER BY k) TO STDOUT") as cp:
            rows = list(cp.rows())
    expect(rows == [("108",), ("109",)], "copy out %r" % rows)


cases.run("ddl", lambda: conn.execute("CREATE TABLE " + table + " (k int PRIMARY KEY, v text)"))
cases.run("insert", insert)
cases.run("update", update)
cases.run("select", lambda: expect(one("SELECT v FROM " + table + " WHERE k = %s", (1,)) == ("uno",), "select"))
cases.run("mz_now_param", mz_now_param)
cases.run("plain_after_mz_now", lambda: expect(one("SELECT 1") == (1,), "SELECT 1"))
cases.run("param_after_mz_now", lambda: expect(one("SELECT %s::int", (42,)) == (42,), "SELECT 42"))
cases.run("as_of_param", as_of_param)
cases.run("as_of_at_least_param", as_of_at_least_param)
cases.run("mz_now_repeated", mz_now_repeated)
cases.run("rollback", rollback)
cases.run("unique_violation", unique_violation)
cases.run("timeout", timeout)
cases.run("pipeline", pipeline)
cases.run("server_cursor", server_cursor)
cases.run("prepared", prepared)
cases.run("binary", binary)
cases.run("copy", copy)
conn.close()
cases.finish()
