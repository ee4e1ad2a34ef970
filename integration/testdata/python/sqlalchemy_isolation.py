"""SQLAlchemy's isolation levels through mzproxy: run by TestIsolationDrivers
with MZ_URL (user@host:port/database?sslmode=disable) and MZ_TABLE set.

SQLAlchemy reads the connection's isolation level back when it first
connects (SHOW TRANSACTION ISOLATION LEVEL, upper-cased) and, when a
connection that ran at another level (AUTOCOMMIT, SERIALIZABLE, ...) goes
back to the pool, sets the level it read again, checking it against
PostgreSQL's four names first. Each dialect runs in a database table of its
own: MZ_TABLE with the dialect's name appended.
"""
import os
import sys

import sqlalchemy
from sqlalchemy import create_engine, text

url, table = os.environ["MZ_URL"], os.environ["MZ_TABLE"]
POSTGRES_LEVELS = ("READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE")


def check(cond, what):
    if not cond:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


def dbapi_connection(conn):
    """The driver's connection under a SQLAlchemy Connection."""
    return conn.connection.dbapi_connection


def count(conn, tbl):
    return conn.execute(text("SELECT count(*) FROM " + tbl)).scalar()


def run(dialect):
    tbl = table + "_" + dialect
    # One pooled connection, so every checkout gets the one SQLAlchemy
    # reset when the one before returned it.
    engine = create_engine("postgresql+%s://%s" % (dialect, url), future=True, pool_size=1, max_overflow=0)
    with engine.connect() as conn:
        default = conn.default_isolation_level
        check(conn.get_isolation_level() == default, "%s: isolation level %r" % (dialect, conn.get_isolation_level()))
        first = dbapi_connection(conn)

    # The case: AUTOCOMMIT, then back to the pool.
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        check(dbapi_connection(conn) is first, dialect + ": the pool handed out another connection")
        conn.execute(text("CREATE TABLE " + tbl + " (id int PRIMARY KEY, name text)"))
        conn.execute(text("INSERT INTO " + tbl + " VALUES (1, 'autocommit')"))
        check(count(conn, tbl) == 1, dialect + ": autocommit insert")
    with engine.connect() as conn:
        check(dbapi_connection(conn) is first, dialect + ": the pool handed out another connection")
        check(conn.get_isolation_level() == default, "%s: level after AUTOCOMMIT %r" % (dialect, conn.get_isolation_level()))
        with conn.begin():
            conn.execute(text("INSERT INTO " + tbl + " VALUES (2, 'after autocommit')"))
            check(count(conn, tbl) == 2, dialect + ": own write in the transaction")
        with conn.begin():
            check(count(conn, tbl) == 2, dialect + ": read in a transaction")

    # The levels an application chooses, each reset when returned.
    for i, level in enumerate(("SERIALIZABLE", "REPEATABLE READ", "READ COMMITTED")):
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level=level)
            with conn.begin():
                before = count(conn, tbl)
                conn.execute(text("INSERT INTO " + tbl + " VALUES (:id, :name)"), {"id": 10 + i, "name": level})
            with conn.begin():
                check(count(conn, tbl) == before + 1, "%s: %s write" % (dialect, level))
        with engine.connect() as conn:
            check(conn.get_isolation_level() == default, "%s: level after %s %r" % (dialect, level, conn.get_isolation_level()))
            conn.execute(text("SELECT 1"))
            conn.commit()

    # The engine's own default level, applied to every new connection.
    other = create_engine("postgresql+%s://%s" % (dialect, url), future=True, isolation_level="AUTOCOMMIT")
    with other.connect() as conn:
        check(count(conn, tbl) == 5, dialect + ": engine-wide AUTOCOMMIT")
    other.dispose()
    engine.dispose()
    # Checked last, so that a name SQLAlchemy cannot set back fails where
    # an application meets it (the pool's reset above).
    check(default in POSTGRES_LEVELS, "%s: default isolation level %r" % (dialect, default))


def dialects():
    """psycopg2's dialect, and psycopg 3's where this SQLAlchemy has it (2.0 on)."""
    have = ["psycopg2"]
    try:
        from sqlalchemy.dialects.postgresql import psycopg  # noqa: F401
        import psycopg as _  # noqa: F401
        have.append("psycopg")
    except ImportError:
        pass
    return have


for d in dialects():
    run(d)
print("dialects:", " ".join(dialects()), "sqlalchemy", sqlalchemy.__version__, file=sys.stderr)
print("OK")
