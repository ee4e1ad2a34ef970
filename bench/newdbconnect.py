#!/usr/bin/env python3
"""A new database's first connection and first CREATE TABLE through two
mzproxy builds in front of one PostgreSQL, interleaved (issue 16).

usage: bench/newdbconnect.py PG_PORT PORT_A PORT_B   (env: ROUNDS=6 LABELS="a b")

Per round and proxy: CREATE DATABASE through the proxy (a copy of its
template database, made first if missing), 0.5 s, then psycopg connects to
the new database through the same proxy (timed: "connect") and runs one
CREATE TABLE (timed), then the database is dropped directly. Prints the
median and each round's connect in ms per proxy (labelled by
LABELS="a b"). The proxies run with --backend at 127.0.0.1:PG_PORT
as postgres, trust authentication.
"""
import psycopg, time, sys, os, statistics
PGP = int(sys.argv[1])
labels = os.environ.get('LABELS', 'a b').split()
ports = {labels[0]: int(sys.argv[2]), labels[1]: int(sys.argv[3])}
def d(db='postgres'): return psycopg.connect(host='127.0.0.1', port=PGP, user='postgres', dbname=db, autocommit=True)
def p(port, db='postgres'): return psycopg.connect(host='127.0.0.1', port=port, user='postgres', dbname=db, autocommit=True)
dc = d()
def tmpl(): return dc.execute("select count(*) from pg_database where datname='mzproxy_template' and datistemplate").fetchone()[0]
if not tmpl():
    c = p(ports[labels[1]]); c.execute("create database warm"); c.close()
    while not tmpl(): time.sleep(0.1)
    dc.execute("drop database warm with (force)")
res = {k: [] for k in ports}
for r in range(int(os.environ.get('ROUNDS', '6'))):
    for k, port in (ports.items() if r % 2 == 0 else reversed(list(ports.items()))):
        name = f"m6_{k}_{r}_{os.getpid()}"
        c = p(port); c.execute(f"create database {name}"); c.close()
        time.sleep(0.5)
        t0 = time.time(); c = p(port, name); t1 = time.time()
        c.execute("create table t0 (a int)"); t2 = time.time()
        c.close()
        res[k].append((1000*(t1-t0), 1000*(t2-t1)))
        time.sleep(0.5)
        dc.execute(f"drop database {name} with (force)")
for k, v in res.items():
    print(k, "connect ms median %.0f %s" % (statistics.median(x[0] for x in v), [round(x[0]) for x in v]),
          "| first create table ms median %.0f" % statistics.median(x[1] for x in v))
