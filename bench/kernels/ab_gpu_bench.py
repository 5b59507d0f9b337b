#!/usr/bin/env python3
"""Two tern_gpu_bench builds side by side: A, B, A, B, ... (--rounds each),
the same arguments to both (plus --a-args / --b-args to either), then one
table of their decode and prefill rates per configuration and batch: each
side's range over its runs and the ratio of the medians, B over A.

    bench/kernels/ab_gpu_bench.py --a old/tern_gpu_bench --b build/bin/tern_gpu_bench \\
        --rounds 2 --b-args "--configs graphs,regkv" -- --model /tmp/m --configs graphs --batch 8,64,256

Alternating runs on one GPU keep clock and thermal drift out of the
comparison. A process's first configuration decodes a few percent faster
than the ones after it, so configurations compare cleanly only in the same
position; --config-per-run runs each of a side's --configs in a process of
its own (every one first). Each run's output goes to --log-dir (a_1.log,
b_1.log, ...; a_1_graphs.log, ... with --config-per-run);
--json writes the parsed runs and the summary. Exit status: 0 when every
run succeeded and printed its table, 1 otherwise (the table shows what
there is).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

# tern_gpu_bench's closing table: | config | batch | decode tok/s | ms/step | logits-to-host tok/s | prefill tok/s |
COLUMNS = ("config", "batch", "decode", "ms_per_step", "host_decode", "prefill")


def parse_table(text: str) -> list[dict]:
    """The rows of tern_gpu_bench's closing table in `text` (header and rule lines skipped)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) != len(COLUMNS):
            continue
        try:
            row = {"config": cells[0], "batch": int(cells[1])}
            for name, cell in zip(COLUMNS[2:], cells[2:]):
                row[name] = float(cell)
        except ValueError:
            continue  # the header, or a rule line
        rows.append(row)
    return rows


def run_once(binary: str, args: list[str], log: Path, timeout: float) -> tuple[list[dict], str]:
    """One run: its table's rows and an error ('' when it exited 0 and printed a table)."""
    try:
        done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        log.write_text(out)
        return parse_table(out), f"timed out after {timeout:.0f} s"
    except OSError as e:
        log.write_text(str(e))
        return [], f"could not run: {e}"
    log.write_text(done.stdout + ("\n--- stderr ---\n" + done.stderr if done.stderr else ""))
    rows = parse_table(done.stdout)
    if done.returncode != 0:
        return rows, f"exit status {done.returncode}"
    if not rows:
        return rows, "no table in its output"
    return rows, ""


def split_configs(args: list[str]) -> tuple[list[str], list[str]]:
    """`args` without any --configs option, and the configurations the last one names ([] if none)."""
    rest: list[str] = []
    configs: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--configs" and i + 1 < len(args):
            configs = [c for c in args[i + 1].split(",") if c]
            i += 2
            continue
        if args[i].startswith("--configs="):
            configs = [c for c in args[i].split("=", 1)[1].split(",") if c]
        else:
            rest.append(args[i])
        i += 1
    return rest, configs


def span(values: list[float]) -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:,.0f}" if lo == hi else f"{lo:,.0f}-{hi:,.0f}"


def ratio(a: list[float], b: list[float]) -> str:
    if not a or not b or statistics.median(a) == 0:
        return "-"
    return f"{statistics.median(b) / statistics.median(a):.3f}"


def summarize(runs: dict[str, list[list[dict]]]) -> list[dict]:
    """Per (config, batch), in first-seen order: each side's decode and prefill values over its runs."""
    values: dict[tuple[str, int], dict[str, dict[str, list[float]]]] = {}  # insertion-ordered
    for side in ("a", "b"):
        for rows in runs[side]:
            for row in rows:
                sides = values.setdefault((row["config"], row["batch"]),
                                          {s: {"decode": [], "prefill": []} for s in ("a", "b")})
                sides[side]["decode"].append(row["decode"])
                sides[side]["prefill"].append(row["prefill"])
    return [{"config": config, "batch": batch, **sides} for (config, batch), sides in values.items()]


def markdown(summary: list[dict]) -> str:
    lines = [
        "| config | batch | decode tok/s A | decode tok/s B | B/A | prefill tok/s A | prefill tok/s B | B/A |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        a, b = s["a"], s["b"]
        lines.append(
            f"| {s['config']} | {s['batch']} | {span(a['decode'])} | {span(b['decode'])} | "
            f"{ratio(a['decode'], b['decode'])} | {span(a['prefill'])} | {span(b['prefill'])} | "
            f"{ratio(a['prefill'], b['prefill'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    common: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, common = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="tern_gpu_bench binary A (the baseline)")
    p.add_argument("--b", required=True, help="tern_gpu_bench binary B")
    p.add_argument("--a-args", default="", help="arguments for A only (one shell-quoted string; --a-args=--x for one word)")
    p.add_argument("--b-args", default="", help="arguments for B only (one shell-quoted string; --b-args=--x for one word)")
    p.add_argument("--rounds", type=int, default=2, help="runs of each, alternating (default 2)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run (default 300)")
    p.add_argument("--log-dir", default=".", help="where each run's output goes (default .)")
    p.add_argument("--json", help="write the runs and the summary here")
    p.add_argument("--config-per-run", action="store_true",
                   help="run each of a side's --configs in a process of its own (each one first)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: at least 1")
    if args.timeout <= 0:
        p.error(f"--timeout {args.timeout}: must be positive")
    for side in ("a", "b"):
        binary = getattr(args, side)
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            p.error(f"--{side} {binary}: not an executable file")
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)

    runs: dict[str, list[list[dict]]] = {"a": [], "b": []}
    errors: list[str] = []
    for r in range(1, args.rounds + 1):
        for side in ("a", "b"):
            side_args = [*common, *shlex.split(getattr(args, f"{side}_args"))]
            rest, configs = split_configs(side_args)
            if args.config_per_run and configs:
                jobs = [(f"{side}_{r}_{c}.log", f" {c}", [*rest, "--configs", c]) for c in configs]
            else:
                jobs = [(f"{side}_{r}.log", "", side_args)]
            round_rows: list[dict] = []
            for name, label, run_args in jobs:
                log = log_dir / name
                rows, error = run_once(getattr(args, side), run_args, log, args.timeout)
                round_rows.extend(rows)
                status = error or f"{len(rows)} rows"
                print(f"{side.upper()} run {r}{label}: {status} ({log})", flush=True)
                if error:
                    errors.append(f"{side.upper()} run {r}{label}: {error}")
            runs[side].append(round_rows)
    summary = summarize(runs)
    print()
    print(markdown(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"a": args.a, "b": args.b, "common_args": common,
                                               "a_args": args.a_args, "b_args": args.b_args, "runs": runs,
                                               "summary": summary, "errors": errors}, indent=1))
    for e in errors:
        print(f"ab_gpu_bench: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
