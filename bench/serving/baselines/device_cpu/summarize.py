#!/usr/bin/env python3
"""Markdown tables from tern-*.json / llama-*.json in a results folder (stdlib only).
    python3 summarize.py RESULTS_DIR
"""
import glob
import json
import os
import re
import sys

d = sys.argv[1]
FILES = ["BF16", "Q8_0", "Q4_0", "Q4_K_M"]


def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001
        return {"_error": str(e)}


def tern(q, t, suffix=""):
    j = load(os.path.join(d, f"tern-{q}{suffix}-t{t}.json"))
    if "_error" in j:
        return None
    return (j.get("pp_tokens_per_s"), j.get("pp_tokens_per_s_stddev"),
            j.get("tg_tokens_per_s"), j.get("tg_tokens_per_s_stddev"),
            j.get("pp_samples_tokens_per_s"), j.get("tg_samples_tokens_per_s"), j.get("commit"),
            j.get("cpu_kernels"))


def llama(q, t):
    j = load(os.path.join(d, f"llama-{q}-t{t}.json"))
    if not isinstance(j, list):
        return None
    pp = tg = None
    info = {}
    for r in j:
        info = r
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            pp = (r["avg_ts"], r["stddev_ts"], r.get("samples_ts"))
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            tg = (r["avg_ts"], r["stddev_ts"], r.get("samples_ts"))
    return pp, tg, info


def fmt(m, s):
    return "n/a" if m is None else f"{m:.1f} ± {s:.1f}"


def ratio(a, b):
    return "n/a" if (a is None or b is None or b == 0) else f"{a / b:.2f}"


threads = sorted({int(m.group(1)) for p in glob.glob(os.path.join(d, "*-t*.json"))
                  if (m := re.search(r"-t(\d+)\.json$", p))}, reverse=True)
info_printed = False
for t in threads:
    print(f"\n### {t} threads\n")
    print("| file | llama.cpp pp512 | llama.cpp tg128 | tern pp512 | tern tg128 | pp tern/llama | tg tern/llama |")
    print("|---|---|---|---|---|---|---|")
    rows = [(q, q, "") for q in FILES] + [("BF16 (tern --cpu-kernels fast)", "BF16", "-fast")]
    for label, q, suf in rows:
        tj = tern(q, t, suf)
        lj = llama(q, t)
        lpp = lj[0] if lj and lj[0] else (None, None, None)
        ltg = lj[1] if lj and lj[1] else (None, None, None)
        tpp = (tj[0], tj[1]) if tj else (None, None)
        ttg = (tj[2], tj[3]) if tj else (None, None)
        if tj is None and lj is None:
            continue
        print(f"| {label} | {fmt(*lpp[:2])} | {fmt(*ltg[:2])} | {fmt(*tpp)} | {fmt(*ttg)} | "
              f"{ratio(tpp[0], lpp[0])} | {ratio(ttg[0], ltg[0])} |")
    print("\nsamples (tok/s):")
    for q in FILES:
        for suf in ("", "-fast"):
            tj = tern(q, t, suf)
            if tj:
                print(f"- tern {q}{suf}: pp {[round(x, 1) for x in tj[4] or []]} tg {[round(x, 1) for x in tj[5] or []]}"
                      f" (commit {tj[6]}, kernels {tj[7]})")
        lj = llama(q, t)
        if lj:
            print(f"- llama {q}: pp {[round(x, 1) for x in (lj[0] or (0, 0, []))[2] or []]}"
                  f" tg {[round(x, 1) for x in (lj[1] or (0, 0, []))[2] or []]}")
            if not info_printed:
                i = lj[2]
                print(f"- llama.cpp build {i.get('build_commit')} ({i.get('build_number')}), backends {i.get('backends')},"
                      f" cpu_info {i.get('cpu_info')}, type_k {i.get('type_k')}, n_batch {i.get('n_batch')},"
                      f" n_ubatch {i.get('n_ubatch')}, flash_attn {i.get('flash_attn')}, mmap {i.get('use_mmap')}")
                info_printed = True
