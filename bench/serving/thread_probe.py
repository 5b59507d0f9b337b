#!/usr/bin/env python3
"""Samples every thread of a running process (tern serve, or any other) as fast as it can: its
state (R running, S sleeping, D uninterruptible) and wchan (the kernel function it sleeps in), and
writes a line each time a thread's (state, wchan) changes:

    SECONDS TID NAME STATE WCHAN [| KERNEL STACK]

SECONDS is CLOCK_MONOTONIC, the clock of tern's `--log-level debug` request lines (arrival, first
token, first token out), so a stall in those lines can be matched to what each thread was doing.
The kernel stack (innermost first, as root) is added when a thread is in D state or waits on a lock.
It found tern's HTTP main thread in D state for 22 ms in accept() (synchronize_rcu < expand_files <
alloc_fd) while a wave of 64 connections waited: the descriptor table growing under load.

    python3 bench/serving/thread_probe.py --pattern "tern serve" --seconds 30 --out probe.txt

Start it before the load; it waits for a process whose command line holds --pattern (or takes --pid)
and stops when that process ends or after --seconds.
"""

import argparse
import os
import sys
import time


def find_process(pattern, deadline):
    me = os.getpid()
    while time.monotonic() < deadline:
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == me:
                continue
            try:
                cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            first = os.path.basename(cmd.split(" ", 1)[0])
            if pattern in cmd and "thread_probe" not in cmd and first not in ("timeout", "sh", "bash", "env") \
                    and not first.startswith("python"):
                return int(p)
        time.sleep(0.005)
    return None


def kernel_stack(base):
    try:
        lines = open(base + "stack").read().splitlines()[:8]
    except OSError:
        return ""
    return " < ".join(line.split()[1].split("+")[0] for line in lines if len(line.split()) > 1)


def probe(pid, out, deadline):
    last, samples = {}, 0
    out.write(f"# pid {pid}\n")
    while time.monotonic() < deadline:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            break
        now = time.monotonic()
        samples += 1
        for tid in tids:
            base = f"/proc/{pid}/task/{tid}/"
            try:
                stat = open(base + "stat").read()
                state = stat[stat.rindex(")") + 2]
                wchan = open(base + "wchan").read().strip() or "-"
                if last.get(tid) == (state, wchan):
                    continue
                name = open(base + "comm").read().strip()  # threads name themselves after they start
            except OSError:
                continue
            last[tid] = (state, wchan)
            line = f"{now:.6f} {tid} {name} {state} {wchan}"
            if state == "D" or any(w in wchan for w in ("rwsem", "mmap", "lock", "rcu")):
                stack = kernel_stack(base)
                if stack:
                    line += " | " + stack
            out.write(line + "\n")
    out.write(f"# {samples} samples\n")
    return samples


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    who = ap.add_mutually_exclusive_group(required=True)
    who.add_argument("--pattern", help="a string of the process's command line, e.g. 'tern serve'")
    who.add_argument("--pid", type=int, help="the process id")
    ap.add_argument("--seconds", type=float, default=60.0, help="the longest the probe runs (default 60)")
    ap.add_argument("--out", default="-", help="the output file (default: standard output)")
    args = ap.parse_args()
    if args.seconds <= 0:
        ap.error("--seconds must be positive")
    deadline = time.monotonic() + args.seconds
    pid = args.pid if args.pid is not None else find_process(args.pattern, deadline)
    if pid is None or not os.path.isdir(f"/proc/{pid}"):
        sys.exit(f"thread_probe: no such process ({args.pattern or args.pid})")
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    with out:
        probe(pid, out, deadline)


if __name__ == "__main__":
    main()
