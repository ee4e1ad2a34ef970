"""Case reporting shared by the Python driver programs of the driver matrix
(integration/driver_matrix_test.go): each case prints "ok <case>" or
"FAIL <case>: <detail>" and the next case runs anyway; finish() exits 1
when any case failed.
"""
import sys
import traceback


class CheckFailed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


class Cases:
    def __init__(self, recover=None):
        self.failed = []
        self.recover = recover  # called after a failed case, to leave no transaction open

    def run(self, name, fn):
        try:
            fn()
        except Exception as e:  # any error fails only this case
            self._fail(name, e)
        else:
            print("ok", name, flush=True)

    async def run_async(self, name, fn):
        try:
            await fn()
        except Exception as e:
            self._fail(name, e)
        else:
            print("ok", name, flush=True)

    def _fail(self, name, e):
        self.failed.append(name)
        detail = " ".join(str(e).split())
        code = getattr(e, "pgcode", None) or getattr(e, "sqlstate", None)
        if code:
            detail += " (SQLSTATE %s)" % code
        print("FAIL %s: %s: %s" % (name, type(e).__name__, detail), flush=True)
        traceback.print_exc(file=sys.stderr)
        if self.recover is not None:
            try:
                self.recover()
            except Exception:
                traceback.print_exc(file=sys.stderr)

    def finish(self):
        sys.exit(1 if self.failed else 0)
