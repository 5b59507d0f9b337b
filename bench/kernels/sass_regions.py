#!/usr/bin/env python3
"""Where a kernel's time goes, by stretch of code between block barriers.

Reads the CSV that `ncu --import REPORT --page source --csv --print-source
sass` writes for a kernel profiled with `--section SourceCounters` (one row
per SASS instruction with its sampled warp stalls and executed count),
splits the instructions at every BAR.SYNC, and prints the stretches with the
most stall samples: their share of the samples, instructions executed, the
most common opcodes (a stretch of IMAD/LEA/ISETP around its loads is index
arithmetic) and the top stall reasons overall.

    bench/kernels/sass_regions.py source_sass.csv [--top 12]
"""
import argparse
import csv
import sys
from collections import Counter


def read(path):
    rows = list(csv.reader(open(path, newline="")))
    for i, r in enumerate(rows):
        if r and r[0] == "Address":
            header = r
            body = [x for x in rows[i + 1:] if len(x) >= len(header)]
            return header, body
    sys.exit(f"{path}: no 'Address' header row: not ncu's SASS source page")


def number(text):
    try:
        return float(text or 0)
    except ValueError:
        return 0.0


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    header, body = read(args.csv)
    col = {name: i for i, name in enumerate(header)}
    samples = col["Warp Stall Sampling (All Samples)"]
    executed = col["Instructions Executed"]
    source = col["Source"]
    stalls = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    total = sum(number(r[samples]) for r in body) or 1.0
    print(f"{len(body)} instructions, {total:.0f} stall samples, "
          f"{sum(number(r[executed]) for r in body):.0f} instructions executed")
    reasons = Counter()
    for r in body:
        for n in stalls:
            reasons[n] += number(r[col[n]])
    print("top stalls: " + ", ".join(f"{n[6:]} {100 * v / total:.1f}%" for n, v in reasons.most_common(6)))

    regions, current = [], []
    for k, r in enumerate(body):
        current.append((k, r))
        if opcode(r[source]) == "BAR":
            regions.append(current)
            current = []
    if current:
        regions.append(current)
    table = []
    for region in regions:
        ops = Counter(opcode(r[source]) for _, r in region)
        table.append((sum(number(r[samples]) for _, r in region), sum(number(r[executed]) for _, r in region),
                      region[0][0], region[-1][0], ops))
    table.sort(key=lambda t: -t[0])
    print(f"{'samples':>8} {'executed':>11}  instructions  most common opcodes")
    for s, e, first, last, ops in table[:args.top]:
        common = " ".join(f"{op}:{n}" for op, n in ops.most_common(7))
        print(f"{100 * s / total:7.1f}% {e:11.0f}  {first:5d}-{last:<5d}  {common}")


if __name__ == "__main__":
    main()
