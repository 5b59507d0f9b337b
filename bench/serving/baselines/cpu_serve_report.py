"""The serving table of llama_cpp_cpu_bench.sh (SERVE=1): serve_bench.py's JSON
files serve-FILE-SERVER-passN.json from OUT_DIR, as markdown on stdout. FILE is
BF16 (tern on the bf16 HF folder, llama-server on the BF16 GGUF) or a quantized
type (both servers on the same GGUF); SERVER is llama.cpp or tern-KERNELS. Each
row is one server on one file at one concurrency: output tokens/s as the mean
over the passes (with each pass's figure when there are several), latencies
from the first pass. Then tern's output tokens/s over llama-server's on the
same file, per concurrency, against #16's target of 1.5x at 8 streams.

    python bench/serving/baselines/cpu_serve_report.py OUT_DIR
"""

import glob
import json
import os
import re
import statistics
import sys

NAME = re.compile(r"serve-(?P<file>[A-Za-z0-9_]+)-(?P<server>llama\.cpp|tern-[a-z]+)-pass(?P<pass>\d+)\.json$")


def load(out):
    """{(file, server): {scenario: [records of each pass, in pass order]}}, and one run's header."""
    runs, header = {}, None
    paths = sorted(glob.glob(os.path.join(out, "serve-*.json")))
    for path in paths:
        m = NAME.search(os.path.basename(path))
        if m is None:
            continue
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        header = header or data
        per = runs.setdefault((m["file"], m["server"]), {})
        for s in data.get("scenarios", []):
            per.setdefault(s["scenario"], []).append((int(m["pass"]), s))
    for per in runs.values():
        for scen in per.values():
            scen.sort(key=lambda x: x[0])
    return runs, header


def conc_key(name):
    m = re.search(r"(\d+)", name)
    return int(m.group(1)) if m else 0


def pct(d, key):
    return "-" if not d or d.get(key) is None else f"{d[key]:,.1f}" if d[key] < 100 else f"{d[key]:,.0f}"


def mean_rate(records):
    vals = [s["output_throughput"] for _, s in records if s.get("completed")]
    return statistics.fmean(vals) if vals else None


def main(out):
    runs, header = load(out)
    if not runs:
        print(f"no serve-*.json in {out}")
        return 1
    if header:
        m = header.get("machine", {})
        print(f"Serving, commit {header.get('commit', '?')}, {header.get('date', '?')}, "
              f"{m.get('cpu', '?')} ({m.get('cpus', '?')} CPUs), client {header.get('client', '?')}.\n")
    files = sorted({f for f, _ in runs}, key=lambda f: (f != "BF16", f))
    print("| file | server | scenario | conc | ok/sent | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms "
          "| ITL p50 / p99 ms | peak RSS MiB |")
    print("|---|---|---|---:|---|---:|---|---|---|---:|")
    for f in files:
        servers = sorted({s for ff, s in runs if ff == f}, key=lambda s: (s == "llama.cpp", s))
        for server in servers:
            per = runs[(f, server)]
            for scen in sorted(per, key=conc_key):
                recs = per[scen]
                first = recs[0][1]
                rate = mean_rate(recs)
                rate_text = "-" if rate is None else f"{rate:.1f}"
                if len(recs) > 1:
                    rate_text += " (" + ", ".join(f"{s['output_throughput']:.1f}" for _, s in recs) + ")"
                res = first.get("resources") or {}
                rss = res.get("peak_rss_mib")
                print(f"| {f} | {server} | {scen} | {first.get('concurrency', '-')} "
                      f"| {first.get('completed', 0)}/{first.get('num_requests', 0)} | {rate_text} "
                      f"| {pct(first.get('ttft_ms'), 'p50')} / {pct(first.get('ttft_ms'), 'p99')} "
                      f"| {pct(first.get('tpot_ms'), 'p50')} / {pct(first.get('tpot_ms'), 'p99')} "
                      f"| {pct(first.get('itl_ms'), 'p50')} / {pct(first.get('itl_ms'), 'p99')} "
                      f"| {'-' if rss is None else f'{rss:,.0f}'} |")
    print("\ntern's output tokens/s over llama-server's on the same file (target at 8 streams: >= 1.5x):\n")
    scenarios = sorted({scen for per in runs.values() for scen in per}, key=conc_key)
    print("| file | tern | " + " | ".join(scenarios) + " |")
    print("|---|---|" + "---:|" * len(scenarios))
    for f in files:
        llama = runs.get((f, "llama.cpp"), {})
        for server in sorted(s for ff, s in runs if ff == f and s != "llama.cpp"):
            cells = []
            for scen in scenarios:
                t, l = mean_rate(runs[(f, server)].get(scen, [])), mean_rate(llama.get(scen, []))
                cells.append("-" if t is None or l is None else f"{t / l:.2f}x")
            print(f"| {f} | {server[len('tern-'):]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
