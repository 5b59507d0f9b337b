#!/usr/bin/env python3
"""Turns bench/serving/serve_bench.py results (and `tern bench offline` JSON) into one
section of docs/benchmarks.md -- tables with the command, commit, machine and
date of each run, tern/baseline ratios -- and PNG plots (latency percentiles
and throughput vs concurrency) drawn with matplotlib when it is installed.

    python3 bench/serving/report.py bench/results/tern.json bench/results/hf.json \\
        --section gpu --title "GPU: one NVIDIA H200" [--engine tern-engine-offline.json]

The section sits between <!-- bench:NAME:begin --> and <!-- bench:NAME:end -->
and is replaced in place, so CPU and GPU sections live side by side.
"""

import argparse
import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_bench import fmt, markdown_table, run_header  # noqa: E402
from server_proc import machine_line  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC_HEAD = """# Benchmarks

tern against the systems users would pick instead, on the same work, machine
and run; the spec is BENCHMARKS.md. Each section below is written by
`bench/serving/report.py` from `bench/serving/serve_bench.py` results; rerun rather than edit.

- Client: `bench/serving/serve_bench.py`, after `vllm bench serve`: streamed
  `/v1/completions`, random token-id prompts (seeded, identical for every
  server), `ignore_eos`, fixed `max_tokens`, greedy. TTFT is send to first
  streamed chunk; TPOT = (E2E - TTFT) / (output tokens - 1); ITL is the gap
  between chunks.
- Scenarios: `single` (1 stream, 256-token prompts, 128 out), `conc-N`
  (closed loop of N streams, prompts 50-500, 128 out), `offline` (all at once,
  in and out 100-1024). "(cut)" marks a scenario stopped by the time budget.
- Model: ERNIE-4.5-0.3B's shape with random bf16 weights
  (`tools/make_random_model.py`), tokenizer padded to the full vocabulary
  (`bench/serving/sp_vocab.py pad`) so every generated token streams as text.
- GPU: `bench/serving/run_gpu_bench.sh OUT_DIR` (tern, then plain HF transformers via
  `bench/serving/baselines/hf_server.py`). CPU: `make bench`.
"""


def load(path):
    return json.loads(pathlib.Path(path).read_text())


def by_scenario(run):
    return {m["scenario"]: m for m in run["scenarios"] if not m.get("skipped")}


def ratio(a, b):
    if not a or not b:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"


def p50(m, key):
    return m[key]["p50"] if m.get(key) else None


def comparison(subject, baseline):
    """tern vs baseline per shared scenario; every ratio reads 'higher = tern better'."""
    s_runs, b_runs = by_scenario(subject), by_scenario(baseline)
    s, b = subject["label"], baseline["label"]
    lines = [f"| scenario | out tok/s {s} | out tok/s {b} | {s}/{b} | TTFT p50 ms {s} | {b} | {b}/{s} "
             f"| TPOT p50 ms {s} | {b} | {b}/{s} |", "|" + "---|" * 10]
    for name, m in s_runs.items():
        o = b_runs.get(name)
        if o is None:
            continue
        cut = " (cut)" if m["truncated"] or o["truncated"] else ""
        lines.append(
            f"| {name}{cut} | {fmt(m['output_throughput'])} | {fmt(o['output_throughput'])} "
            f"| {ratio(m['output_throughput'], o['output_throughput'])} "
            f"| {fmt(p50(m, 'ttft_ms'))} | {fmt(p50(o, 'ttft_ms'))} | {ratio(p50(o, 'ttft_ms'), p50(m, 'ttft_ms'))} "
            f"| {fmt(p50(m, 'tpot_ms'), 2)} | {fmt(p50(o, 'tpot_ms'), 2)} "
            f"| {ratio(p50(o, 'tpot_ms'), p50(m, 'tpot_ms'))} |")
    ss, bs = subject["server"], baseline["server"]

    def peak(run, key):
        vals = [m["resources"].get(key) for m in run["scenarios"] if m.get("resources")]
        vals = [v for v in vals if v is not None]
        return max(vals) if vals else None

    lines += ["", f"| | {s} | {b} | {b}/{s} |", "|---|---|---|---|",
              f"| cold start to /health ready, s | {fmt(ss.get('ready_s'), 2)} | {fmt(bs.get('ready_s'), 2)} "
              f"| {ratio(bs.get('ready_s'), ss.get('ready_s'))} |",
              f"| GPU memory at ready, MiB | {fmt(ss.get('gpu_mib_at_ready'), 0)} "
              f"| {fmt(bs.get('gpu_mib_at_ready'), 0)} | {ratio(bs.get('gpu_mib_at_ready'), ss.get('gpu_mib_at_ready'))} |",
              f"| peak GPU memory, MiB | {fmt(peak(subject, 'peak_gpu_mib'), 0)} | {fmt(peak(baseline, 'peak_gpu_mib'), 0)} "
              f"| {ratio(peak(baseline, 'peak_gpu_mib'), peak(subject, 'peak_gpu_mib'))} |",
              f"| peak host RSS, MiB | {fmt(peak(subject, 'peak_rss_mib'), 0)} | {fmt(peak(baseline, 'peak_rss_mib'), 0)} "
              f"| {ratio(peak(baseline, 'peak_rss_mib'), peak(subject, 'peak_rss_mib'))} |"]
    return "\n".join(lines)


def engine_table(engines, command):
    lines = []
    if command:
        lines.append(f"`{command}`\n")
    lines += ["| scenario | requests | prompt tokens | output tokens | wall s | req/s | out tok/s | total tok/s "
              "| max batch | preemptions |", "|" + "---|" * 10]
    for e in engines:
        lines.append(f"| {e.get('scenario', '?')} | {e.get('requests')} | {e.get('prompt_tokens')} "
                     f"| {e.get('output_tokens')} | {fmt(e.get('wall_s'), 2)} | {fmt(e.get('requests_per_s'), 2)} "
                     f"| {fmt(e.get('output_tokens_per_s'))} | {fmt(e.get('total_tokens_per_s'))} "
                     f"| {e.get('max_batch_seqs', '-')} | {e.get('preemptions', '-')} |")
    return "\n".join(lines)


def conc_points(run):
    """[(concurrency, metrics)] of the greedy conc-N scenarios that ran to the end."""
    pts = [(m["concurrency"], m) for m in run["scenarios"]
           if m["scenario"].startswith("conc-") and not m["scenario"].endswith("+sampled") and not m.get("skipped")
           and not m["truncated"] and m["completed"]]
    return sorted(pts, key=lambda p: p[0])


def plot(runs, plots_dir, stem):
    """Two PNGs; returns their file names, or [] without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print("report: matplotlib is not installed; skipping plots", file=sys.stderr)
        return []
    plots_dir.mkdir(parents=True, exist_ok=True)
    names = [f"{stem}-latency.png", f"{stem}-throughput.png"]
    plain = FuncFormatter(lambda v, _: f"{v:g}")

    def axes_style(ax, ylabel):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(plain)
        ax.yaxis.set_major_formatter(plain)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, key, title in zip(axes, ("ttft_ms", "tpot_ms", "e2e_ms"), ("TTFT", "TPOT", "E2E latency")):
        for i, run in enumerate(runs):
            pts = [(c, m[key]) for c, m in conc_points(run) if m.get(key)]
            if not pts:
                continue
            xs = [c for c, _ in pts]
            color = f"C{i}"
            ax.plot(xs, [s["p50"] for _, s in pts], "-o", color=color, label=f"{run['label']} p50")
            ax.plot(xs, [s["p90"] for _, s in pts], "--", color=color, alpha=0.7, label=f"{run['label']} p90")
            ax.plot(xs, [s["p99"] for _, s in pts], ":", color=color, alpha=0.7, label=f"{run['label']} p99")
        axes_style(ax, "ms")
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plots_dir / names[0], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, run in enumerate(runs):
        pts = conc_points(run)
        if not pts:
            continue
        xs = [c for c, _ in pts]
        axes[0].plot(xs, [m["output_throughput"] for _, m in pts], "-o", color=f"C{i}", label=run["label"])
        axes[1].plot(xs, [m["request_throughput"] for _, m in pts], "-o", color=f"C{i}", label=run["label"])
    for ax, label in zip(axes, ("output tokens/s", "requests/s")):
        axes_style(ax, label)
        ax.legend()
    axes[0].set_title("Output throughput")
    axes[1].set_title("Request throughput")
    fig.tight_layout()
    fig.savefig(plots_dir / names[1], dpi=110)
    plt.close(fig)
    return names


def section_text(args, runs, engines):
    parts = [f"## {args.title}", ""]
    if runs:
        dates = sorted({r["date"] for r in runs})
        commits = sorted({r["commit"] for r in runs})
        parts += [f"Measured {', '.join(dates)} at commit {', '.join(commits)} on {machine_line(runs[0]['machine'])}; "
                  f"model `{runs[0]['server']['model']}`.", ""]
    if args.note:
        parts += [args.note, ""]
    subject = next((r for r in runs if r["label"] == args.subject), None)
    for base in runs:
        if subject is not None and base is not subject:
            parts += [f"### {subject['label']} vs {base['label']}", "",
                      "Ratios read \"higher is better for " + subject["label"] + "\".", "",
                      comparison(subject, base), ""]
    if runs:
        parts += ["### All runs", "", markdown_table(runs), ""]
        parts += [run_header(r) + "\n" for r in runs]
    if engines:
        parts += ["### Engine only (no HTTP)", "", engine_table(engines, args.engine_command), ""]
    plots_dir = pathlib.Path(args.plots_dir)
    stem = f"benchmarks-{args.section}"
    names = plot(runs, plots_dir, stem) if runs and not args.no_plots else []
    if not names and not args.no_plots:
        names = [n for n in (f"{stem}-latency.png", f"{stem}-throughput.png") if (plots_dir / n).exists()]
    md_dir = pathlib.Path(args.md).resolve().parent
    for n in names:
        rel = pathlib.Path((plots_dir / n).resolve()).relative_to(md_dir) if \
            (plots_dir / n).resolve().is_relative_to(md_dir) else (plots_dir / n).resolve()
        parts += [f"![{n}]({rel})", ""]
    return "\n".join(parts).rstrip() + "\n"


def write_section(md_path, name, body):
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    block = f"{begin}\n{body}{end}\n"
    text = md_path.read_text() if md_path.exists() else DOC_HEAD
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="serve_bench JSON files")
    ap.add_argument("--engine", action="append", default=[], help="`tern bench --json-out` file (repeatable)")
    ap.add_argument("--engine-command", help="the command that wrote --engine")
    ap.add_argument("--section", required=True, help="section name, e.g. gpu or cpu")
    ap.add_argument("--title", help="section heading (default: the section name)")
    ap.add_argument("--subject", default="tern", help="label compared against every other run (default tern)")
    ap.add_argument("--md", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--plots-dir", default=None, help="where PNGs go (default: beside --md)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--note", help="a paragraph placed under the heading")
    args = ap.parse_args()
    args.title = args.title or args.section
    args.plots_dir = args.plots_dir or str(pathlib.Path(args.md).parent)
    runs = [load(p) for p in args.runs]
    engines = [load(p) for p in args.engine]
    if not runs and not engines:
        raise SystemExit("report: nothing to report")
    write_section(pathlib.Path(args.md), args.section, section_text(args, runs, engines))
    print(f"report: wrote section '{args.section}' of {args.md}", file=sys.stderr)


if __name__ == "__main__":
    main()
