"""psycopg 3 read-back of the isolation level through mzproxy, as SQLAlchemy
2's postgresql+psycopg dialect does it (for SQLAlchemy releases without that
dialect): run by TestIsolationDrivers with MZ_DSN and MZ_TABLE set.

The dialect reads SHOW TRANSACTION ISOLATION LEVEL at first connect,
upper-cased; AUTOCOMMIT is psycopg's autocommit; any other level, and the
reset of a pooled connection to the level read, is psycopg's
isolation_level, which psycopg sends as BEGIN ISOLATION LEVEL ...
"""
import os
import sys

import psycopg
from psycopg import IsolationLevel

dsn, table = os.environ["MZ_DSN"], os.environ["MZ_TABLE"]
POSTGRES_LEVELS = ("READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE")


def check(cond, what):
    if not cond:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


def read_level(conn):
    # Simple protocol (no parameters) as the dialect's cursor sends it; and
    # the same answer over the extended protocol (prepare=True).
    level = conn.execute("show transaction isolation level").fetchone()[0].upper()
    again = conn.execute("show transaction isolation level", prepare=True).fetchone()[0].upper()
    check(level == again, "simple %r, extended %r" % (level, again))
    if not conn.autocommit:
        conn.rollback()
    return level


def set_level(conn, level):
    """The dialect's set_isolation_level."""
    check(level == "AUTOCOMMIT" or level in POSTGRES_LEVELS, "cannot set %r" % level)
    if level == "AUTOCOMMIT":
        conn.autocommit, conn.isolation_level = True, None
    else:
        conn.autocommit, conn.isolation_level = False, IsolationLevel[level.replace(" ", "_")]


def count(conn):
    return conn.execute("SELECT count(*) FROM " + table).fetchone()[0]


with psycopg.connect(dsn) as conn:
    default = read_level(conn)
    check(default in POSTGRES_LEVELS, "default isolation level %r" % default)

    set_level(conn, "AUTOCOMMIT")
    conn.execute("CREATE TABLE " + table + " (id int PRIMARY KEY, name text)")
    conn.execute("INSERT INTO " + table + " VALUES (1, 'autocommit')")
    set_level(conn, default)  # returned to the pool
    check(read_level(conn) == default, "level after AUTOCOMMIT")
    with conn.transaction():
        conn.execute("INSERT INTO " + table + " VALUES (2, 'after autocommit')")
        check(count(conn) == 2, "own write in the transaction")

    for i, level in enumerate(("SERIALIZABLE", "REPEATABLE READ", "READ COMMITTED")):
        set_level(conn, level)
        with conn.transaction():
            before = count(conn)
            conn.execute("INSERT INTO " + table + " VALUES (%s, %s)", (10 + i, level))
        check(count(conn) == before + 1, level + " write")
        conn.commit()
        set_level(conn, default)
        check(read_level(conn) == default, "level after " + level)
print("OK")
