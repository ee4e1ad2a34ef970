#!/usr/bin/env python3
"""Compare mzslt --timings files per kind of record.

usage: bench/slttimes.py direct.tsv proxy.tsv [more.tsv ...]

Each file is one mzslt run's --timings output (<file> <line> <what> <us>).
Prints, per kind (the SQL's first word, its first two for CREATE, DROP,
ALTER and REINDEX; "connect", "database"), the count, the total seconds
and the median milliseconds in each run, and the total's difference
between the last run and the first, largest first; then the total per
corpus file. Kinds of less than 0.05 s in every run are summed as "other".
"""
import statistics
import sys
from collections import defaultdict


def load(path):
    kinds, files = defaultdict(list), defaultdict(float)
    for line in open(path):
        f, _, what, us = line.rstrip("\n").split("\t")
        words = what.split(" ")
        kind = " ".join(words[:2]) if words[0] in ("CREATE", "DROP", "ALTER", "REINDEX") else words[0]
        kinds[kind].append(int(us) / 1e6)
        files[f] += int(us) / 1e6
    return kinds, files


runs = [load(p) for p in sys.argv[1:]]
small = [k for k in set().union(*(r[0] for r in runs)) if all(sum(r[0].get(k, [])) < 0.05 for r in runs)]
for r in runs:
    for k in small:
        if k in r[0]:
            r[0].setdefault("other", []).extend(r[0].pop(k))
names = [p.rsplit("/", 1)[-1] for p in sys.argv[1:]]
base = runs[0]
keys = set().union(*(r[0] for r in runs))


def diff(k):
    return sum(runs[-1][0].get(k, [])) - sum(base[0].get(k, []))


head = "| kind | " + " | ".join(f"{n}: count, total s, median ms" for n in names) + " | last - first, s |"
print(head)
print("|---" * (len(names) + 2) + "|")
for k in sorted(keys, key=diff, reverse=True):
    cells = []
    for r in runs:
        v = r[0].get(k, [])
        cells.append(f"{len(v)}, {sum(v):.2f}, {statistics.median(v) * 1e3:.2f}" if v else "-")
    print(f"| {k} | " + " | ".join(cells) + f" | {diff(k):+.2f} |")
tot = [sum(sum(v) for v in r[0].values()) for r in runs]
print("| all | " + " | ".join(f"{t:.2f}" for t in tot) + f" | {tot[-1] - tot[0]:+.2f} |")
print()
print("| file | " + " | ".join(f"{n} s" for n in names) + " | last/first |")
print("|---" * (len(names) + 2) + "|")
for f in sorted(base[1]):
    vals = [r[1].get(f, 0.0) for r in runs]
    print(f"| {f} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {vals[-1] / vals[0]:.2f}x |")
