"""psycopg 3, a prepared timestamped read (prepare=True: a named statement)
run after each of a list of statements that change the search_path.

python3 psycopg_prepared_path.py <url> <read> <steps> <want>, run by
TestPreparedReadFollowsSearchPath (integration/prepared_path_test.go),
against mzproxy and against PostgreSQL itself. steps and want are JSON
lists: the step "read" runs the read, whose first column (or SQLSTATE)
must be want's next. Prints "ok reads" or "FAIL reads: <detail>".
"""
import json
import sys

import psycopg

URL, READ = sys.argv[1], sys.argv[2]
STEPS, WANT = json.loads(sys.argv[3]), json.loads(sys.argv[4])

try:
    got = []
    with psycopg.connect(URL, autocommit=True) as conn:
        for step in STEPS:
            if step != "read":
                conn.execute(step)
                continue
            try:
                row = conn.execute(READ, prepare=True).fetchone()
                got.append(row[0] if row else "")
            except psycopg.Error as e:
                got.append(e.sqlstate)
    if got != WANT:
        raise Exception("reads answered %s, want %s" % (got, WANT))
    print("ok reads", flush=True)
except Exception as e:
    print("FAIL reads: %s" % e, flush=True)
    sys.exit(1)
