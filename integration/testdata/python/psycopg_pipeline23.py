"""psycopg 3 in pipeline mode against session 22's changes (session 23):

first_write   one pipeline: BEGIN; INSERT INTO <t> VALUES (%s, %s) (the
              table's first write: its history is built in front of the
              Parse); UPDATE with arguments; SELECT of the block's own
              write; COMMIT. Then the rows, and a read AS OF AT LEAST
              mz_now() sees them.
literals      in one pipeline, reads at mz_now() whose texts differ only
              in their literals' spellings (1e5 / 1e6, 'x' / E'x', -1 /
              - 1), each giving the rows PostgreSQL gives for the same
              condition without mz_now().

python3 psycopg_pipeline23.py <url> <table>, run by
TestOutside23PsycopgPipeline. Prints "ok <case>" or "FAIL <case>: <detail>"
per case; exits 1 when any failed.
"""
import sys
import psycopg

URL, TABLE = sys.argv[1], sys.argv[2]
failed = False


def report(name, fn):
    global failed
    try:
        fn()
        print("ok " + name, flush=True)
    except Exception as e:  # noqa: BLE001 - any failure is the case's
        failed = True
        print("FAIL %s: %s" % (name, str(e).replace("\n", " ")), flush=True)


def first_write():
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("CREATE TABLE %s (k numeric PRIMARY KEY, v text)" % TABLE)
        with conn.pipeline():
            conn.execute("BEGIN")
            conn.execute("INSERT INTO %s VALUES (%%s, %%s)" % TABLE, (1, "a"))
            conn.execute("INSERT INTO %s VALUES (%%s, %%s), (100000, 'x'), (-1, E'x')" % TABLE, (2, "b"))
            conn.execute("UPDATE %s SET v = v || %%s WHERE k = %%s" % TABLE, ("!", 1))
            cur = conn.execute("SELECT v FROM %s WHERE k = %%s" % TABLE, (1,))
            conn.execute("COMMIT")
        got = cur.fetchall()
        if got != [("a!",)]:
            raise AssertionError("own write in the block: %r" % (got,))
        n = conn.execute("SELECT count(*) FROM %s AS OF AT LEAST mz_now()" % TABLE).fetchone()[0]
        if n != 4:
            raise AssertionError("AS OF AT LEAST mz_now(): %d rows, want 4" % n)


def literals():
    conds = ["k = 1e5", "k = 1e6", "k = 100000", "v = 'x'", "v = E'x'", "k = -1", "k = - 1", "k = -2"]
    with psycopg.connect(URL, autocommit=True) as conn:
        want = {}
        for c in conds:
            want[c] = sorted(conn.execute("SELECT k::text, v FROM %s WHERE %s" % (TABLE, c)).fetchall())
        curs = []
        with conn.pipeline():
            for c in conds:
                curs.append((c, conn.execute("SELECT k::text, v, mz_now() FROM %s WHERE %s" % (TABLE, c))))
        for c, cur in curs:
            got = sorted((r[0], r[1]) for r in cur.fetchall())
            if got != want[c]:
                raise AssertionError("%s: %r, want %r" % (c, got, want[c]))


report("first_write", first_write)
report("literals", literals)
sys.exit(1 if failed else 0)
