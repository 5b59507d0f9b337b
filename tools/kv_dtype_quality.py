#!/usr/bin/env python3
"""What --kv-cache-dtype fp8 costs a model, against the auto cache (fp32 on the CPU):

- greedy: each golden prompt of the model's golden.json continued by `tern generate`
  (temperature 0, --max-tokens N) with either cache; the share of tokens produced
  before the first difference, over all prompts;
- KL and top-1: those auto continuations (prompt and output text) written to one file,
  scored by `tern perplexity` with --kl-divergence-base (auto) then --kl-divergence
  --kv-cache-dtype fp8 on the same windows: the mean KL(auto || fp8) of the next-token
  distributions in nats, and the share of positions with the same most likely token.

Prints one markdown table row per model. Usage:
    tools/kv_dtype_quality.py [--tern build/bin/tern] [--tokens 96] [--ctx 64] MODEL_DIR...
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile


def generate(tern, model, prompt, tokens, dtype):
    out = subprocess.run([tern, "generate", "--model", model, "--device", "cpu", "--prompt", prompt,
                          "--max-tokens", str(tokens), "--temperature", "0", "--ignore-eos", "--json",
                          "--kv-cache-dtype", dtype, "--cpu-kernels", "optimized"], capture_output=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tern", default="build/bin/tern")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--ctx", type=int, default=64)
    args = ap.parse_args()
    print("| model | prompts | greedy tokens | greedy agreement | positions | mean KL (nats) | top-1 |")
    print("|---|---|---|---|---|---|---|")
    for model in args.models:
        golden = json.loads((pathlib.Path(model) / "golden.json").read_text())
        same = total = 0
        text = []
        for p in golden["prompts"]:
            base = generate(args.tern, model, p["text"], args.tokens, "auto")
            fp8 = generate(args.tern, model, p["text"], args.tokens, "fp8")
            a, b = base["token_ids"], fp8["token_ids"]
            run = 0
            while run < min(len(a), len(b)) and a[run] == b[run]:
                run += 1
            same += run
            total += len(a)
            text.append(p["text"] + base["text"])
        with tempfile.TemporaryDirectory() as tmp:
            corpus = pathlib.Path(tmp) / "text.txt"
            corpus.write_text("\n".join(text))
            kld = pathlib.Path(tmp) / "base.kld"
            report = pathlib.Path(tmp) / "fp8.json"
            subprocess.run([args.tern, "perplexity", "--model", model, "-f", str(corpus), "-c", str(args.ctx),
                            "--kl-divergence-base", str(kld), "--cpu-kernels", "optimized"], capture_output=True, check=True)
            subprocess.run([args.tern, "perplexity", "--model", model, "--kl-divergence", "--kl-divergence-base",
                            str(kld), "--kv-cache-dtype", "fp8", "--cpu-kernels", "optimized",
                            "--json-out", str(report)],
                           capture_output=True, check=True)
            r = json.loads(report.read_text())
        print(f"| {model} | {len(golden['prompts'])} | {total} | {same / total:.3f} | {r['positions']} | "
              f"{r['kld_mean']:.4f} | {r['same_top']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
