"""psycopg 3 in libpq's pipeline mode: a batch that prepares a read (a Parse
and nothing run) and then sends a command PostgreSQL refuses inside a
pipeline (DISCARD ALL, VACUUM). PostgreSQL runs the command, the batch's
first statement; so must mzproxy, also when the read is timestamped and the
proxy must first ask the backend for the session's search_path.

python3 psycopg_pipeline_first.py <url> <read>, run by
TestPipelineFirstStatement (integration/pipeline_first_test.go), against
mzproxy and against PostgreSQL itself. Prints "ok <case>" or "FAIL <case>:
<detail>" per case; exits 1 when any failed.
"""
import sys
from psycopg import pq

URL, READ = sys.argv[1], sys.argv[2]
failed = False


def pipeline(pgc, command):
    """Sends Parse of the read, then the command, then Sync; returns each
    result's status (or SQLSTATE) up to the pipeline's sync."""
    pgc.enter_pipeline_mode()
    pgc.send_prepare(b"read", READ.encode())
    pgc.send_query_params(command.encode(), None)
    pgc.pipeline_sync()
    out = []
    while True:
        r = pgc.get_result()
        if r is None:
            continue
        if r.status == pq.ExecStatus.PIPELINE_SYNC:
            break
        if r.status in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.PIPELINE_ABORTED):
            code = r.error_field(pq.DiagnosticField.SQLSTATE)
            out.append("error %s %s" % (code and code.decode(), (r.error_message or b"").decode().strip()))
        else:
            out.append(pq.ExecStatus(r.status).name)
    pgc.exit_pipeline_mode()
    return out


for command in ["DISCARD ALL", "VACUUM pg_catalog.pg_am"]:
    name = command.split()[0].lower()
    pgc = pq.PGconn.connect(URL.encode())
    try:
        if pgc.status != pq.ConnStatus.OK:
            raise Exception(pgc.error_message.decode())
        # The session's search_path is then not known to mzproxy: the
        # read's Parse makes it ask.
        r = pgc.exec_(b"DISCARD ALL")
        if r.status != pq.ExecStatus.COMMAND_OK:
            raise Exception("DISCARD ALL: %s" % r.error_message.decode())
        got = pipeline(pgc, command)
        if got != ["COMMAND_OK", "COMMAND_OK"]:
            raise Exception("pipeline answered %s" % got)
        # The prepared read survives DISCARD ALL only if it ran first.
        r = pgc.exec_prepared(b"read", [b"1"])
        want = pq.ExecStatus.FATAL_ERROR if name == "discard" else pq.ExecStatus.TUPLES_OK
        if r.status != want:
            raise Exception("the prepared read afterwards: %s %s" % (pq.ExecStatus(r.status).name, (r.error_message or b"").decode()))
        print("ok", name, flush=True)
    except Exception as e:
        failed = True
        print("FAIL %s: %s" % (name, e), flush=True)
    finally:
        pgc.finish()

sys.exit(1 if failed else 0)
