#!/usr/bin/env python3
"""Where a kernel's time goes, by stretch of code between block barriers.

Reads the CSV that `ncu --import REPORT --page source --csv --print-source
sass` writes for a kernel profiled with `--section SourceCounters` (one row
per SASS instruction with its sampled warp stalls and executed count),
splits the instructions at every BAR.SYNC, and prints the stretches with the
most stall samples: their share of the samples, instructions executed, the
most common opcodes (a stretch of IMAD/LEA/ISETP around its loads is index
arithmetic) and the top stall reasons overall, then the opcodes by
instructions executed over the whole kernel.

--split runs cuts at every change of the executed count instead, so each
stretch is a run of code executed the same number of times (a loop body, a
once-per-warp prologue); with --sort executed the stretches come in order of
the instructions they executed, which is what an issue-bound kernel spends:
a per-block setup of many times its loop's instructions shows up at once.

    bench/kernels/sass_regions.py source_sass.csv [--top 12] [--split barriers|runs] [--sort samples|executed]
                                  [--kernel N]
"""
import argparse
import csv
import sys
from collections import Counter


def read(path, which):
    """The instruction rows of profiled launch `which`: a report of several launches gives one section
    each, every one led by a "Kernel Name" row and its own "Address" header."""
    rows = list(csv.reader(open(path, newline="")))
    sections, name = [], ""
    for i, r in enumerate(rows):
        if r and r[0] == "Kernel Name":
            name = r[1] if len(r) > 1 else ""
        elif r and r[0] == "Address":
            sections.append((name, r, []))
        elif sections and len(r) >= len(sections[-1][1]):
            sections[-1][2].append(r)
    if not sections:
        sys.exit(f"{path}: no 'Address' header row: not ncu's SASS source page")
    if which >= len(sections):
        sys.exit(f"{path}: --kernel {which}, but the file has {len(sections)} profiled launch(es)")
    name, header, body = sections[which]
    if len(sections) > 1:
        print(f"launch {which} of {len(sections)}: {name[:100]}")
    return header, body


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
    ap.add_argument("--kernel", type=int, default=0, help="which profiled launch of the file (0: the first)")
    ap.add_argument("--split", choices=("barriers", "runs"), default="barriers",
                    help="cut at each BAR.SYNC, or at each change of the executed count")
    ap.add_argument("--sort", choices=("samples", "executed"), default="samples",
                    help="order the stretches by stall samples or by instructions executed")
    args = ap.parse_args()
    if args.top < 1 or args.kernel < 0:
        sys.exit("--top must be at least 1 and --kernel at least 0")
    header, body = read(args.csv, args.kernel)
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
    mix = Counter()
    for r in body:
        mix[opcode(r[source])] += number(r[executed])
    all_executed = sum(mix.values()) or 1.0
    print("executed: " + ", ".join(f"{op} {100 * n / all_executed:.1f}%" for op, n in mix.most_common(8)))

    regions, current = [], []
    for k, r in enumerate(body):
        if args.split == "runs" and current and number(current[-1][1][executed]) != number(r[executed]):
            regions.append(current)
            current = []
        current.append((k, r))
        if args.split == "barriers" and opcode(r[source]) == "BAR":
            regions.append(current)
            current = []
    if current:
        regions.append(current)
    table = []
    for region in regions:
        ops = Counter(opcode(r[source]) for _, r in region)
        table.append((sum(number(r[samples]) for _, r in region), sum(number(r[executed]) for _, r in region),
                      region[0][0], region[-1][0], ops))
    table.sort(key=lambda t: -t[0] if args.sort == "samples" else -t[1])
    print(f"{'samples':>8} {'executed':>11} {'share':>6}  instructions  most common opcodes")
    for s, e, first, last, ops in table[:args.top]:
        common = " ".join(f"{op}:{n}" for op, n in ops.most_common(7))
        print(f"{100 * s / total:7.1f}% {e:11.0f} {100 * e / all_executed:5.1f}%  {first:5d}-{last:<5d}  {common}")


if __name__ == "__main__":
    main()
