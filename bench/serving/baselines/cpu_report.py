"""The CPU table of llama_cpp_cpu_bench.sh: llama-bench's JSON (one file per
GGUF and pass) and `tern bench pp-tg`'s JSON (one per pass) from OUT_DIR, as
markdown on stdout. Rates are the mean and sample stddev over every timed run
of every pass. The first table is like with like: tern and llama-bench on the
same GGUF file (tern-QUANT-pass*.json); the second, tern on the HF folder
(bf16) against each file. The
tg columns also give the bytes read per second (tokens/s x weight bytes, since
each one-token step reads every weight once) as a share of the measured read
bandwidth.

    python bench/serving/baselines/cpu_report.py OUT_DIR
"""

import glob
import json
import os
import re
import statistics
import sys


def rate(samples):
    if not samples:
        return None
    mean = statistics.fmean(samples)
    sd = statistics.stdev(samples) if len(samples) > 1 else 0.0
    return mean, sd, len(samples)


def fmt(r):
    return "-" if r is None else f"{r[0]:.1f} ± {r[1]:.1f}"


def ratio(a, b):
    return "-" if a is None or b is None else f"{a[0] / b[0]:.2f}x"


def read_text(path, default="unknown"):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return default


def llama_runs(out):
    """{quant: {"pp": samples, "tg": samples, "size": bytes, "info": first record}}"""
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "llama-*-pass*.json"))):
        quant = re.match(r"llama-(.+)-pass\d+\.json$", os.path.basename(path)).group(1)
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
        entry = runs.setdefault(quant, {"pp": [], "tg": [], "size": 0, "info": records[0] if records else {}})
        for r in records:
            test = "pp" if r["n_prompt"] > 0 and r["n_gen"] == 0 else "tg"
            entry[test] += r["samples_ts"]
            entry["size"] = r["model_size"]
    return runs


def tern_runs(out, pattern):
    pp, tg, info = [], [], {}
    for path in sorted(glob.glob(os.path.join(out, pattern))):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        pp += j["pp_samples_tokens_per_s"]
        tg += j["tg_samples_tokens_per_s"]
        info = j
    return {"pp": rate(pp), "tg": rate(tg), "info": info}


def bandwidth(out):
    """{threads: GB/s} from tern_cpu_linear_bench --bandwidth-only's lines: the highest of
    the measurements (before and after the passes), the nearest to the machine's ceiling."""
    bw = {}
    for line in read_text(os.path.join(out, "bandwidth.txt"), "").splitlines():
        m = re.match(r"threads (\d+): read bandwidth ([\d.]+) GB/s", line)
        if m:
            bw[int(m.group(1))] = max(bw.get(int(m.group(1)), 0.0), float(m.group(2)))
    return bw


def main():
    out = sys.argv[1]
    llama = llama_runs(out)
    tern = tern_runs(out, "tern-optimized-pass*.json")
    ref = tern_runs(out, "tern-reference.json")
    bw = bandwidth(out)
    ti = tern["info"]
    threads = ti.get("threads", 0)
    bw_t = bw.get(threads)
    tern_bytes = 0
    model_dir = ti.get("model", "")
    for p in glob.glob(os.path.join(model_dir, "*.safetensors")):
        tern_bytes += os.path.getsize(p)
    cpu = re.search(r"Model name:\s*(.+)", read_text(os.path.join(out, "machine.txt"), ""))
    first = next(iter(llama.values()), {}).get("info", {})
    n_prompt, n_gen = ti.get("n_prompt", 512), ti.get("n_gen", 128)

    def tg_share(r, size):
        if r is None or not bw_t or not size:
            return "-"
        gbs = r[0] * size / 1e9
        return f"{gbs:.1f} GB/s ({100 * gbs / bw_t:.0f}%)"

    print(f"tern commit {read_text(os.path.join(out, 'commit.txt'))} (binary {ti.get('commit', '?')}), "
          f"llama.cpp {first.get('build_commit', '?')} (llama-cpp-python's vendor/llama.cpp), "
          f"{read_text(os.path.join(out, 'date.txt'))}, {cpu.group(1).strip() if cpu else 'CPU unknown'}, "
          f"{threads} threads; read bandwidth "
          + (", ".join(f"{v:.1f} GB/s at {t} thread{'s' if t > 1 else ''}" for t, v in sorted(bw.items()))
             or "not measured")
          + ".")
    loads = [float(x) for x in read_text(os.path.join(out, "load.txt"), "").split()]
    if loads:
        print(f"Load average (1 min) during the runs: {min(loads):.2f} to {max(loads):.2f}.")
    same = {q: tern_runs(out, f"tern-{q}-pass*.json") for q in llama}
    same = {q: r for q, r in same.items() if r["pp"] or r["tg"]}
    if same:
        print()
        print(f"Same file: `tern bench pp-tg --model FILE` and `llama-bench -m FILE`, alternating.")
        print()
        print(f"| file | size GB | llama.cpp pp{n_prompt} | llama.cpp tg{n_gen} | tern pp{n_prompt} | tern tg{n_gen} "
              f"| pp tern/llama | tg tern/llama | llama.cpp tg read | tern tg read |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for quant, e in sorted(llama.items(), key=lambda kv: -kv[1]["size"]):
            if quant not in same:
                continue
            pp, tg, t = rate(e["pp"]), rate(e["tg"]), same[quant]
            rows = [(quant, t),
                    (f"{quant}, tern `--cpu-kernels optimized`", tern_runs(out, f"tern-{quant}-optimized-pass*.json"))]
            for label, t in rows:
                if not (t["pp"] or t["tg"]):
                    continue
                print(f"| {label} | {e['size'] / 1e9:.2f} | {fmt(pp)} | {fmt(tg)} | {fmt(t['pp'])} | {fmt(t['tg'])} "
                      f"| {ratio(t['pp'], pp)} | {ratio(t['tg'], tg)} | {tg_share(tg, e['size'])} "
                      f"| {tg_share(t['tg'], e['size'])} |")
        print()
        print("tg read: tokens/s x the file's weight bytes (a one-token step reads every weight once), "
              "as a share of the measured read bandwidth at the same thread count.")
    print()
    print(f"| llama.cpp weights | size GB | llama.cpp pp{n_prompt} | llama.cpp tg{n_gen} | "
          f"tern bf16 pp{n_prompt} | tern bf16 tg{n_gen} | pp tern/llama | tg tern/llama | llama.cpp tg read |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for quant, e in sorted(llama.items(), key=lambda kv: -kv[1]["size"]):
        pp, tg = rate(e["pp"]), rate(e["tg"])
        label = quant + ("" if quant == "BF16" else " (against tern's bf16 HF folder)")
        print(f"| {label} | {e['size'] / 1e9:.2f} | {fmt(pp)} | {fmt(tg)} | {fmt(tern['pp'])} | {fmt(tern['tg'])} "
              f"| {ratio(tern['pp'], pp)} | {ratio(tern['tg'], tg)} | {tg_share(tg, e['size'])} |")
    print()
    print(f"| tern bf16 | kernels | pp{n_prompt} | tg{n_gen} | tg read | runs |")
    print("|---|---|---:|---:|---:|---:|")
    for label, r in (("optimized", tern), ("reference", ref)):
        if r["pp"] is None and r["tg"] is None:
            continue
        n = r["tg"][2] if r["tg"] else r["pp"][2]
        print(f"| {tern_bytes / 1e9:.2f} GB | {label} | {fmt(r['pp'])} | {fmt(r['tg'])} "
              f"| {tg_share(r['tg'], tern_bytes)} | {n} |")
    if ref["tg"] and tern["tg"]:
        print()
        print(f"Optimized over reference kernels: pp {ratio(tern['pp'], ref['pp'])}, tg {ratio(tern['tg'], ref['tg'])}.")
    if bw_t and tern_bytes:
        print(f"Bandwidth bound for bf16 tg: {bw_t:.1f} GB/s / {tern_bytes / 1e9:.2f} GB per token = "
              f"{bw_t * 1e9 / tern_bytes:.0f} tok/s at {threads} threads.")


if __name__ == "__main__":
    main()
