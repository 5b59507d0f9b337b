#!/usr/bin/env python3
"""Speculative decoding by prompt lookup against none, one stream at a time, through HTTP.

For each set of server flags (`--flag-sets "A;B"`, an empty set: the server's defaults) a fresh
`tern serve` is launched, warmed up, and sent the same requests one after another: greedy
completions of `--max-tokens` tokens (EOS ignored) over two prompt sets,
  copy:   a passage, then the request to write it again (the output can quote the prompt, as in
          summaries, code edits and retrieval answers, where prompt lookup finds its drafts);
  random: random words (nothing to quote).
Reported per flag set and prompt set: output tokens/s over the requests' wall time, the drafts the
server verified and accepted (its vllm:spec_decode_* counters), and whether every output equalled
the first flag set's (speculation must not change them).

  bench/serving/speculative_bench.py --tern build/bin/tern --model models/ernie-4.5-0.3b-random \\
      --flag-sets ";--speculate 4" --requests 4 --max-tokens 128
"""

import argparse
import json
import random
import re
import shlex
import sys
import time
import urllib.request

from server_proc import LaunchedServer, commit_id, machine_info, machine_line

PASSAGE = ("The river starts in the mountains, where snow melts in spring and runs down through pine forests. "
           "In the valley it slows, widens and feeds the farms on both banks; the towns along it grew up where "
           "the first bridges could be built. ")
WORDS = ("apple stone window seven river cloud paper quiet engine violet north table summer letter garden "
         "silver number morning bridge yellow planet music").split()


def prompts(kind, count, seed):
    rng = random.Random(f"{seed}:{kind}")
    out = []
    for i in range(count):
        if kind == "copy":
            text = " ".join(PASSAGE.split()[i % 5:]) * 2
            out.append(f"{text}\n\nWrite the text above again, word for word:\n{text[:60]}")
        else:
            out.append(" ".join(rng.choice(WORDS) for _ in range(120)))
    return out


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def counters(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        m = re.search(rf"^vllm:spec_decode_{name}_total\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def run_flags(args, flags, sets):
    command = f"{args.tern} serve --model {shlex.quote(args.model)} --host 127.0.0.1 --port 0 {flags}"
    server = LaunchedServer(command, f"/tmp/speculative_bench_{abs(hash(flags))}.log", 300)
    try:
        url = server.url
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
            model = json.loads(r.read())["data"][0]["id"]
        post(url + "/v1/completions", {"model": model, "prompt": "warm up", "max_tokens": 8})
        rows = {}
        for kind, texts in sets.items():
            before = counters(url)
            outputs, tokens = [], 0
            t0 = time.perf_counter()
            for text in texts:
                r = post(url + "/v1/completions", {"model": model, "prompt": text, "max_tokens": args.max_tokens,
                                                   "temperature": 0, "ignore_eos": True})
                outputs.append(r["choices"][0]["text"])
                tokens += r["usage"]["completion_tokens"]
            wall = time.perf_counter() - t0
            after = counters(url)
            rows[kind] = {"tok_s": tokens / wall, "tokens": tokens, "outputs": outputs,
                          **{k: after[k] - before[k] for k in after}}
        return rows
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tern", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--flag-sets", default=";--speculate 4", help="';'-separated server flag sets")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=1, help="each flag set this many times, in turn")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sets = {kind: prompts(kind, args.requests, args.seed) for kind in ("copy", "random")}
    flag_sets = [f.strip() for f in args.flag_sets.split(";")]
    print(f"speculative_bench: {machine_line(machine_info())}, tern {commit_id(None)}, {args.model}, {args.requests} requests "
          f"of {args.max_tokens} tokens per prompt set, greedy, one at a time", file=sys.stderr)
    results = []
    for rnd in range(args.rounds):
        for flags in flag_sets:
            results.append((rnd, flags, run_flags(args, flags, sets)))
            print(f"speculative_bench: round {rnd + 1}, flags '{flags}' done", file=sys.stderr)
    first = {kind: results[0][2][kind]["outputs"] for kind in sets}
    print("| flags | prompts | out tok/s | drafts verified | accepted | accepted per step with drafts | "
          "outputs as the first set's |")
    print("|---|---|---:|---:|---:|---:|---|")
    for rnd, flags, rows in results:
        for kind, r in rows.items():
            per = r["num_accepted_tokens"] / r["num_drafts"] if r["num_drafts"] else 0.0
            same = "yes" if r["outputs"] == first[kind] else "NO"
            print(f"| `{flags or '(none)'}` | {kind} | {r['tok_s']:,.1f} | {r['num_draft_tokens']:.0f} | "
                  f"{r['num_accepted_tokens']:.0f} | {per:.2f} | {same} |")
    return 0 if all(r["outputs"] == first[k] for _, _, rows in results for k, r in rows.items()) else 1


if __name__ == "__main__":
    sys.exit(main())
