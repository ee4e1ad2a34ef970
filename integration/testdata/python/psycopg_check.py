"""psycopg (3) through mzproxy: run by TestDrivers with MZ_DSN and MZ_TABLE set.

psycopg 3 binds parameters on the server (extended protocol), can prepare
statements (prepare=True) and pipeline them.
"""
import os
import sys

import psycopg
from psycopg import errors

dsn, table = os.environ["MZ_DSN"], os.environ["MZ_TABLE"]


def check(cond, what):
    if not cond:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


with psycopg.connect(dsn) as conn:
    row = conn.execute("SELECT %s::int + %s, %s || 'x', %s::text", (40, 2, "it's", None)).fetchone()
    check(row == (42, "it'sx", None), "parameters %r" % (row,))

    # Binary results.
    with conn.cursor(binary=True) as cur:
        cur.execute("SELECT %s::bytea, %s::int8[]", (b"\x00\x01\xff", [1, 2, 3]))
        check(cur.fetchone() == (b"\x00\x01\xff", [1, 2, 3]), "binary")

    conn.execute("CREATE TABLE " + table + " (id int PRIMARY KEY, name text)")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO " + table + " VALUES (%s, %s)", [(i, "n%d" % i) for i in range(10)])
    conn.commit()

    for i in range(10):
        row = conn.execute("SELECT name FROM " + table + " WHERE id = %s", (i,), prepare=True).fetchone()
        check(row == ("n%d" % i,), "prepared")
    conn.commit()

    try:
        conn.execute("INSERT INTO " + table + " VALUES (%s, 'dup')", (1,))
        check(False, "duplicate key accepted")
    except errors.UniqueViolation as e:
        check(e.sqlstate == "23505", "sqlstate " + str(e.sqlstate))
    conn.rollback()
    try:
        conn.execute("SELECT * FROM no_such_table_psycopg")
    except errors.UndefinedTable as e:
        check(e.sqlstate == "42P01", "sqlstate " + str(e.sqlstate))
    conn.rollback()

    # Transactions as context managers.
    try:
        with conn.transaction():
            conn.execute("DELETE FROM " + table)
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    check(conn.execute("SELECT count(*) FROM " + table).fetchone() == (10,), "rollback")
    with conn.transaction():
        conn.execute("UPDATE " + table + " SET name = upper(name) WHERE id < 5")
    check(conn.execute("SELECT count(*) FROM " + table + " WHERE name LIKE 'N%%'").fetchone() == (5,), "commit")
    conn.commit()

    # Pipeline mode (needs libpq 14 or later).
    if psycopg.Pipeline.is_supported():
        with conn.pipeline():
            curs = [conn.execute("SELECT %s::int * 2", (i,)) for i in range(50)]
        check([c.fetchone()[0] for c in curs] == [i * 2 for i in range(50)], "pipeline")
        conn.commit()

    # COPY.
    with conn.cursor() as cur:
        with cur.copy("COPY " + table + " (id, name) FROM STDIN") as cp:
            for i in range(100, 200):
                cp.write_row((i, "c%d" % i))
        conn.commit()
        with cur.copy("COPY (SELECT id FROM " + table + " WHERE id >= 198 ORDER BY id) TO STDOUT") as cp:
            rows = [r for r in cp.rows()]
        check(rows == [("198",), ("199",)], "copy out %r" % rows)

print("OK")
