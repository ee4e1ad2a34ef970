"""psycopg2 through mzproxy: python3 psycopg2_check.py <url> <table>, run by
TestDriverMatrix (integration/driver_matrix_test.go says what each case does).

psycopg2 interpolates parameters on the client and sends simple Query
messages only, so AS OF %s reaches the proxy as a literal; a named cursor is
DECLARE/FETCH inside a transaction.
"""
import io
import sys

import psycopg2
import psycopg2.errors

from matrix import Cases, expect

url, table = sys.argv[1], sys.argv[2]
conn = psycopg2.connect(url)
conn.autocommit = True
cur = conn.cursor()


def recover():
    conn.rollback()
    conn.autocommit = True


cases = Cases(recover)
state = {}


def one(sql, args=None):
    cur.execute(sql, args)
    return cur.fetchone()


def ddl():
    cur.execute("CREATE TABLE " + table + " (k int PRIMARY KEY, v text)")


def insert():
    for k, v in [(1, "one"), (2, "two"), (3, "three")]:
        cur.execute("INSERT INTO " + table + " VALUES (%s, %s)", (k, v))
        expect(cur.rowcount == 1, "rowcount %d" % cur.rowcount)


def update():
    cur.execute("UPDATE " + table + " SET v = %s WHERE k = %s", ("uno", 1))
    expect(cur.rowcount == 1, "rowcount %d" % cur.rowcount)


def select():
    row = one("SELECT v FROM " + table + " WHERE k = %s", (1,))
    expect(row == ("uno",), "got %r" % (row,))


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
            cur.execute("UPDATE " + table + " SET v = %s WHERE k = %s", (want, 1))
        row = one("SELECT v, mz_now() FROM " + table + " WHERE k = %s", (1,))
        expect(row[0] == want and int(row[1]) >= last, "read %d: got %r, want %r at or after %d" % (i, row, want, last))
        last = int(row[1])
    cur.execute("UPDATE " + table + " SET v = %s WHERE k = %s", ("eins", 1))  # the later cases' row


def as_of_param():
    cur.execute("UPDATE " + table + " SET v = %s WHERE k = %s", ("eins", 1))
    row = one("SELECT v FROM " + table + " WHERE k = %s AS OF %s", (1, state["ts"]))
    expect(row == ("uno",), "got %r" % (row,))


def as_of_at_least_param():
    row = one("SELECT v FROM " + table + " WHERE k = %s AS OF AT LEAST %s", (1, state["ts"]))
    expect(row in [("uno",), ("eins",)], "got %r" % (row,))


def rollback():
    conn.autocommit = False
    cur.execute("DELETE FROM " + table + " WHERE k = %s", (2,))
    conn.rollback()
    conn.autocommit = True
    expect(one("SELECT count(*) FROM " + table) == (3,), "rows after the rollback")


def unique_violation():
    try:
        cur.execute("INSERT INTO " + table + " VALUES (%s, %s)", (1, "dup"))
        expect(False, "duplicate key accepted")
    except psycopg2.errors.UniqueViolation as e:
        expect(e.pgcode == "23505", "pgcode " + str(e.pgcode))
    expect(one("SELECT count(*) FROM " + table) == (3,), "rows after the violation")


def timeout():
    cur.execute("SET statement_timeout = '100ms'")
    try:
        cur.execute("SELECT pg_sleep(5)")
        expect(False, "pg_sleep(5) finished under a 100ms statement_timeout")
    except psycopg2.errors.QueryCanceled as e:
        expect(e.pgcode == "57014", "pgcode " + str(e.pgcode))
    cur.execute("RESET statement_timeout")
    expect(one("SELECT 1") == (1,), "SELECT 1 after the timeout")


def server_cursor():
    conn.autocommit = False
    with conn.cursor(name="mz_matrix") as sc:
        sc.itersize = 2
        sc.execute("SELECT k, v FROM " + table + " WHERE k <= %s ORDER BY k", (3,))
        rows = list(sc)
    conn.commit()
    conn.autocommit = True
    expect(rows == [(1, "eins"), (2, "two"), (3, "three")], "got %r" % rows)


def copy():
    data = "".join("%d\tc%d\n" % (k, k) for k in range(100, 110))
    cur.copy_expert("COPY " + table + " FROM STDIN", io.StringIO(data))
    out = io.StringIO()
    cur.copy_expert("COPY (SELECT count(*) FROM " + table + " WHERE k >= 100) TO STDOUT", out)
    expect(out.getvalue() == "10\n", "copy out %r" % out.getvalue())


def notice():
    cur.execute("DO $$ BEGIN RAISE NOTICE 'hello from DO'; END $$")
    expect(any("hello from DO" in n for n in conn.notices), "notices %r" % conn.notices)


cases.run("ddl", ddl)
cases.run("insert", insert)
cases.run("update", update)
cases.run("select", select)
cases.run("mz_now_param", mz_now_param)
cases.run("plain_after_mz_now", lambda: expect(one("SELECT 1") == (1,), "SELECT 1"))
cases.run("param_after_mz_now", lambda: expect(one("SELECT %s::int", (42,)) == (42,), "SELECT 42"))
cases.run("as_of_param", as_of_param)
cases.run("as_of_at_least_param", as_of_at_least_param)
cases.run("mz_now_repeated", mz_now_repeated)
cases.run("rollback", rollback)
cases.run("unique_violation", unique_violation)
cases.run("timeout", timeout)
cases.run("server_cursor", server_cursor)
cases.run("copy", copy)
cases.run("notice", notice)
conn.close()
cases.finish()
