#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log by kernel.

Kernels are grouped by a short name (template arguments cut); a profiled
step starts at each embedding_gather_kernel (the first kernel of a step).
Prints per step and kernel: count, total and mean microseconds, and the
step's sum.
    ncu_summary.py LOG
"""
import csv
import re
import sys
from collections import OrderedDict


def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "").replace("void ", "")
    m = re.search(r"gemv_kernel<([^>]*)>", name)
    if m:
        return "gemv<" + re.sub(r"\(?tern::cuda::Gemv(In|Out)put\)?", "", m.group(1)) + ">"
    m = re.search(r"paged_attention_kernel<\d+>", name)
    if m:
        return m.group(0)
    name = re.sub(r"[<(].*", "", name)
    return name.split("::")[-1][:70]


def main():
    path = sys.argv[1]
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "ns")
        v = float(r["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
        us = v * scale.get(unit, 1e-3)
        rows.append((int(r["ID"]), short(r["Kernel Name"]), us))
    if not rows:
        print("no kernels in", path)
        return
    parts = []
    for row in rows:
        if row[1] == "embedding_gather_kernel" or not parts:
            parts.append([])
        parts[-1].append(row)
    for s, part in enumerate(parts):
        groups = OrderedDict()
        for _, name, us in part:
            g = groups.setdefault(name, [0, 0.0])
            g[0] += 1
            g[1] += us
        total = sum(g[1] for g in groups.values())
        print(f"-- profiled step {s}: {len(part)} kernels, {total:.1f} us of kernel time")
        for name, (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            print(f"{n:5d} x {us / n:8.2f} us = {us:8.1f} us  {name}")


if __name__ == "__main__":
    main()
