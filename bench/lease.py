"""Measurements for bench/lease.sh (see there); run through it."""
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import psycopg2

BINARY, BACKEND, WORK = os.environ["MZ_BINARY"], os.environ["MZ_BACKEND"], os.environ["MZ_WORK"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Proxy:
    """One mzproxy process on the shared backend."""

    def __init__(self, *flags, name="mzproxy"):
        self.port, self.metrics = free_port(), free_port()
        self.log = open(os.path.join(WORK, name + ".log"), "w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [BINARY, "--listen", "127.0.0.1:%d" % self.port, "--metrics-listen", "127.0.0.1:%d" % self.metrics,
             "--log-level", "warn", "--backend", BACKEND, *flags],
            stdout=self.log, stderr=self.log)

    def ready(self, timeout=30):
        """Seconds from process start until /readyz answered 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % self.metrics, timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(0.002)
        raise RuntimeError("mzproxy not ready")

    def dsn(self, db="postgres"):
        return "host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable" % (self.port, db)

    def cpu(self):
        """CPU seconds (user + system) the process has used."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def handover(rounds=5):
    old = Proxy("--generation", "1", name="gen1")
    old.ready()
    c = psycopg2.connect(old.dsn())
    c.autocommit = True
    c.cursor().execute("CREATE TABLE IF NOT EXISTS handover (x int)")
    c.close()
    ready, first, write, write2, warm = [], [], [], [], []
    for gen in range(2, 2 + rounds):
        new = Proxy("--generation", str(gen), name="gen%d" % gen)
        r = new.ready()
        conn = psycopg2.connect(new.dsn())
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("SELECT 1")
        f = time.monotonic() - new.started
        t = time.monotonic()
        cur.execute("INSERT INTO handover VALUES (1)")  # a write: the new generation owns writes
        w = time.monotonic() - t
        cur.execute("INSERT INTO handover VALUES (1)")
        w2 = time.monotonic() - t - w
        conn.close()
        t = time.monotonic()
        again = psycopg2.connect(new.dsn())
        again.cursor().execute("SELECT 1")
        again.close()
        warm.append((time.monotonic() - t) * 1000)
        write2.append(w2 * 1000)
        ready.append(r * 1000)
        first.append(f * 1000)
        write.append(w * 1000)
        old.stop()
        old = new
    old.stop()
    print("handover over %d generations (ms): process start -> /readyz 200: median %.0f (min %.0f, max %.0f); "
          "-> first query (connect + SELECT 1) answered: median %.0f (after ready: median %.1f); "
          "then its first write: median %.1f, second write %.1f; a later connect + SELECT 1: median %.1f" % (
              rounds, statistics.median(ready), min(ready), max(ready), statistics.median(first),
              statistics.median([f - r for f, r in zip(first, ready)]), statistics.median(write),
              statistics.median(write2), statistics.median(warm)))


def pgbench(proxy, clients, seconds):
    out = subprocess.run(["pgbench", "-n", "-S", "-M", "extended", "-c", str(clients), "-j", str(clients), "-T", str(seconds),
                          "-h", "127.0.0.1", "-p", str(proxy.port), "-U", "postgres", "postgres"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("tps"):
            return float(line.split()[2])
    raise RuntimeError(out)


def proxies(clients=8, seconds=int(os.environ.get("PROXIES_SECONDS", "20")),
            rounds=int(os.environ.get("PROXIES_ROUNDS", "3"))):
    subprocess.run(["pgbench", "-i", "-q", "-s", "5", "-h", os.environ["PG_SOCKET"], "-p", os.environ["PG_PORT"],
                    "-U", "postgres", "postgres"], check=True, capture_output=True)
    a, b = Proxy(name="a"), Proxy(name="b")
    a.ready(), b.ready()
    cpu = {"one": [], "control": [], "two": []}

    def measured(name, run):
        # The proxies' CPU per transaction (both processes, whichever
        # served), from their CPU time and pgbench's tps.
        c0 = a.cpu() + b.cpu()
        tps = run()
        cpu[name].append((a.cpu() + b.cpu() - c0) / (tps * seconds) * 1e6)
        return tps

    def split(targets):
        # Two pgbench processes of clients/2 each, at once.
        res = [None, None]
        ts = [threading.Thread(target=lambda i, p: res.__setitem__(i, pgbench(p, clients // 2, seconds)), args=(i, p))
              for i, p in enumerate(targets)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return res[0] + res[1]

    one, control, two = [], [], []
    for _ in range(rounds):
        one.append(measured("one", lambda: pgbench(a, clients, seconds)))
        control.append(measured("control", lambda: split((a, a))))
        two.append(measured("two", lambda: split((a, b))))
    a.stop(), b.stop()
    med = statistics.median
    print("pgbench -S, %d clients, %ds x %d rounds (tps): one pgbench, one proxy: median %.0f %s; two pgbench "
          "(%d clients each), one proxy: median %.0f %s; two pgbench, two proxies: median %.0f %s; "
          "two proxies / one proxy with two pgbench: %.2f (per round: %s)" % (
              clients, seconds, rounds, med(one), [round(x) for x in one], clients // 2, med(control),
              [round(x) for x in control], med(two), [round(x) for x in two], med(two) / med(control),
              [round(t / c, 2) for t, c in zip(two, control)]))
    print("proxies' CPU per transaction (median, us): one pgbench, one proxy %.1f; two pgbench, one proxy %.1f; "
          "two pgbench, two proxies %.1f" % (med(cpu["one"]), med(cpu["control"]), med(cpu["two"])))


def storage(seconds=int(os.environ.get("STORAGE_SECONDS", "300"))):
    def run(flags, secs, label):
        p = Proxy(*flags, name=label)
        p.ready()
        db = "st_" + label
        admin = psycopg2.connect(p.dsn())
        admin.autocommit = True
        admin.cursor().execute("CREATE DATABASE " + db)
        w = psycopg2.connect(p.dsn(db))
        w.autocommit = True
        wc = w.cursor()
        wc.execute("CREATE TABLE kv (k int PRIMARY KEY, v int)")
        wc.execute("INSERT INTO kv SELECT g, 0 FROM generate_series(1, 100) g")
        wc.execute("SELECT history FROM mzproxy.catalog WHERE name = 'kv'")
        history = wc.fetchone()[0]
        stop = time.monotonic() + secs
        lat, samples = [], []

        def reader():
            r = psycopg2.connect(p.dsn(db))
            r.autocommit = True
            rc = r.cursor()
            while time.monotonic() < stop:
                t = time.monotonic()
                rc.execute("SELECT sum(v) FROM kv")
                rc.fetchone()
                lat.append((time.monotonic() - t) * 1000)
                time.sleep(0.01)
            r.close()

        rt = threading.Thread(target=reader)
        rt.start()
        updates, last = 0, time.monotonic()
        while time.monotonic() < stop:
            wc.execute("UPDATE kv SET v = v + 1 WHERE k %% 10 = %s", (updates % 10,))
            updates += 1
            if time.monotonic() - last >= 5:
                last = time.monotonic()
                wc.execute("SELECT count(*) FROM " + history)
                samples.append(wc.fetchone()[0])
        rt.join()
        wc.execute("SELECT count(*) FROM " + history)
        samples.append(wc.fetchone()[0])
        wc.execute("SELECT total_compacted_rows FROM mz_internal.mz_compactions WHERE name = 'kv'")
        compacted = wc.fetchone()[0]
        w.close()
        p.stop()
        lat.sort()
        return {"updates": updates, "versions": updates * 10 + 100, "samples": samples, "compacted": compacted,
                "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)], "reads": len(lat)}

    on = run([], seconds, "compacting")
    print("storage, %ds steady updates (10 rows each) with default retention and heartbeat: %d updates, %d versions "
          "written; history rows sampled every 5s: max %d, last %d, first half max %d, second half max %d; "
          "compacted %d rows (%.0f rows/s)" % (
              seconds, on["updates"], on["versions"], max(on["samples"]), on["samples"][-1],
              max(on["samples"][:len(on["samples"]) // 2]), max(on["samples"][len(on["samples"]) // 2:]),
              on["compacted"], on["compacted"] / seconds))
    off_secs = min(seconds, 60)
    off = run(["--compaction-interval", "0"], off_secs, "nocompaction")
    print("concurrent read latency (SELECT sum(v) over 100 rows, every 10 ms): with compaction p50 %.2f ms p99 %.2f ms "
          "(%d reads); without compaction (%ds) p50 %.2f ms p99 %.2f ms (%d reads), history then %d rows" % (
              on["p50"], on["p99"], on["reads"], off_secs, off["p50"], off["p99"], off["reads"], off["samples"][-1]))


{"handover": handover, "proxies": proxies, "storage": storage}[sys.argv[1]]()
