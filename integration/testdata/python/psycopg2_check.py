"""psycopg2 through mzproxy: run by TestDrivers with MZ_DSN and MZ_TABLE set.

psycopg2 interpolates parameters on the client and sends simple Query
messages; prepared statements are SQL PREPARE/EXECUTE.
"""
import os
import sys

import psycopg2
import psycopg2.errors

dsn, table = os.environ["MZ_DSN"], os.environ["MZ_TABLE"]


def check(cond, what):
    if not cond:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


conn = psycopg2.connect(dsn)
cur = conn.cursor()

cur.execute("SELECT %s::int + %s, %s || 'x', %s", (40, 2, "it's", None))
check(cur.fetchone() == (42, "it'sx", None), "parameters")

cur.execute("CREATE TABLE " + table + " (id int PRIMARY KEY, name text)")
cur.executemany("INSERT INTO " + table + " VALUES (%s, %s)", [(i, "n%d" % i) for i in range(10)])
conn.commit()

cur.execute("PREPARE byid (int) AS SELECT name FROM " + table + " WHERE id = $1")
for i in range(10):
    cur.execute("EXECUTE byid (%s)", (i,))
    check(cur.fetchone() == ("n%d" % i,), "prepared statement")
conn.commit()

# Errors carry the SQLSTATE; the transaction is then aborted until rollback.
try:
    cur.execute("INSERT INTO " + table + " VALUES (1, 'dup')")
    check(False, "duplicate key accepted")
except psycopg2.errors.UniqueViolation as e:
    check(e.pgcode == "23505", "pgcode " + str(e.pgcode))
try:
    cur.execute("SELECT 1")
    check(False, "statement in an aborted transaction")
except psycopg2.errors.InFailedSqlTransaction as e:
    check(e.pgcode == "25P02", "pgcode " + str(e.pgcode))
conn.rollback()
try:
    cur.execute("SELECT 1/0")
except psycopg2.Error as e:
    check(e.pgcode == "22012", "pgcode " + str(e.pgcode))
conn.rollback()

# A transaction: rolled back, then committed.
cur.execute("DELETE FROM " + table)
conn.rollback()
cur.execute("SELECT count(*) FROM " + table)
check(cur.fetchone() == (10,), "rollback")
with conn:
    with conn.cursor() as c:
        c.execute("UPDATE " + table + " SET name = upper(name) WHERE id < 5")
cur.execute("SELECT count(*) FROM " + table + " WHERE name LIKE 'N%%'")
check(cur.fetchone() == (5,), "commit")
conn.commit()

# COPY both ways.
import io
cur.copy_expert("COPY " + table + " FROM STDIN", io.StringIO("".join("%d\tc%d\n" % (i, i) for i in range(100, 200))))
out = io.StringIO()
cur.copy_expert("COPY (SELECT count(*) FROM " + table + ") TO STDOUT", out)
check(out.getvalue() == "110\n", "copy " + out.getvalue())
conn.commit()

# Notices.
cur.execute("DO $$ BEGIN RAISE NOTICE 'hello from DO'; END $$")
check(any("hello from DO" in n for n in conn.notices), "notice")

conn.close()
print("OK")
