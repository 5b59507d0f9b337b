"""Writes docs/compat.md from the results file of `make compat`
(COMPAT_DIR/results.json, written by tests/compat/conftest.py): which files
load where, greedy-token agreement, byte and metadata identity, and the KL
divergence table of tern beside llama.cpp.

    python tests/compat/report.py build/compat/results.json docs/compat.md [--setup-seconds S --total-seconds T]
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from compat_tools import GREEDY_TOKENS, KL_CTX, MARGIN_THRESHOLD, QUANT_MARGIN_THRESHOLD  # noqa: E402

INTRO = """# tern and llama.cpp on each other's GGUF files

`make compat` (tests/compat/, the real binaries; written by tests/compat/report.py)
builds llama.cpp's CPU tools from llama-cpp-python's source package and
llama.cpp's converter environment (both cached outside the repo, in
`LLAMA_DIR`), then on three models: the two tiny test models
(`tests/data/ernie-tiny`, tied embeddings, 3 layers; `ernie-tiny-untied`,
2 layers; rows of 64, 128 and 192 values) and `ernie-wide`, made by
`tools/make_random_model.py` with the tiny models' tokenizer (4 layers,
hidden 256, intermediate 768, untied, random weights of standard deviation
0.1), whose rows split into the 256-value blocks of the K-quants; on the tiny
models every K mix falls back to Q5_0, Q5_1 and Q8_0, in both tools. For each:

- GGUF files from llama.cpp's `convert_hf_to_gguf.py` (f32, bf16, q8_0) and
  `llama-quantize` (from its bf16 file), and the same from `tern convert` and
  `tern quantize` (from the same bf16 file);
- every file loaded in both tools: `tern generate --json --logprobs 2` and
  `llama-server`'s `/completion` (token ids in and out, temperature 0, top-k 1,
  EOS ignored, no prompt cache), {greedy} greedy tokens from each golden prompt
  (the wide model takes ernie-tiny's);
- the two greedy sequences on the same file compared until they part; they may
  part only where tern's top-2 logit margin is below the file's threshold,
  where either token is a right answer for two different forward passes (such
  partings are counted; at a clear margin it is a failure): {margin} on f32 files, where only the float order differs;
  {qmargin} on bf16 files (llama.cpp rounds the activations to bf16 for its
  bf16 dot products, tern keeps them f32) and on quantized ones (both tools
  quantize the activations to 8 bits for their integer dot products, each its
  own way; tern's AVX2 kernels differ from its own fp32 reference kernels by
  as much as from llama.cpp's);
- files compared key by key and tensor by tensor where they should match;
- each quantized file's mean KL divergence of the next-token distribution
  against the bf16 file over the golden texts (the prompts and tokenizer texts
  without special tokens, one a line), in windows of {ctx} tokens whose second
  half is scored: `tern perplexity --kl-divergence` and `llama-perplexity
  --kl-divergence`, each against its own bf16 base (`--kl-divergence-base`).
  Both tools read and write the same base-file format, so each also scores the
  bf16 file against the other's base.

It is not part of `make test`: a first run builds llama.cpp and installs torch
for the converter (README, Tests); `make test` checks tern's GGUF files with
gguf-py (tests/e2e/test_gguf.py) and `tern perplexity` (tests/e2e/test_perplexity.py).
"""


def summary(r):
    out = []
    loads = r["loads"]
    bad = [x for x in loads if not (x.get("tern") and x.get("llama.cpp"))]
    out.append(f"- Files: {len(loads)}; " + ("every one loads in both tools." if not bad else
               "not loading: " + ", ".join(f"{x['file']}" for x in bad) + "."))
    g = r["greedy"]
    out.append(f"- Greedy tokens: {sum(x['equal'] for x in g)} of {sum(x['positions'] for x in g)} equal "
               f"before the sequences part; {sum(x['stopped_low_margin'] for x in g)} of "
               f"{sum(x['prompts'] for x in g)} prompts part at a low margin, "
               f"{sum(x['ended'] for x in g)} end where tern picks an end token, "
               f"{sum(len(x['mismatches']) for x in g)} at a clear margin.")
    same, differ = [], []
    for x in r["identity"]:
        (same if x["same_bytes"] == x["tensors"] else differ).append(f"{x['model']} {x['pair']}")
    out.append(f"- Identical files (every key and tensor byte): {len(same)} of {len(r['identity'])} pairs.")
    if differ:
        out.append("- Tensors with different bytes: " + "; ".join(
            f"{x['model']} {x['pair']}: {len(x['bytes_differ'])} of its {', '.join(x['bytes_differ_types'])} tensors"
            for x in r["identity"] if x["bytes_differ"]) + ".")
    return "\n".join(out)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def fmt_kl(r):
    if r is None:
        return "-"
    return f"{r['kld']:.6f} ± {r['kld_error']:.6f}"


def fmt_top(r):
    return "-" if r is None or r.get("same_top") is None else f"{100 * r['same_top']:.1f}%"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("--setup-seconds", type=int)
    ap.add_argument("--total-seconds", type=int)
    a = ap.parse_args()
    r = json.loads(pathlib.Path(a.results).read_text())

    parts = [INTRO.format(greedy=GREEDY_TOKENS, margin=MARGIN_THRESHOLD, qmargin=QUANT_MARGIN_THRESHOLD, ctx=KL_CTX)]
    run = (f"Command `make compat`; tern commit {r['commit']}; llama.cpp from {r['llama_cpp']}; "
           f"{r['machine']}; {r['date']}; pytest exit status {r['exitstatus']}.")
    parts.append("## Last run\n\n" + run + "\n\n" + summary(r))

    loads = sorted(r["loads"], key=lambda x: (x["model"], x["writer"], x["how"], x["type"]))
    rows = [(x["model"], x["writer"], x["how"], x["type"], "yes" if x.get("tern") else "**no**",
             "yes" if x.get("llama.cpp") else "**no**") for x in loads]
    parts.append("## Which files load where\n\n" + table(
        ["model", "written by", "how", "type", "loads in tern", "loads in llama.cpp"], rows))

    greedy = sorted(r["greedy"], key=lambda x: (x["model"], x["writer"], x["how"], x["type"]))
    rows = [(x["model"], x["writer"], f"{x['how']} {x['type']}", x["threshold"], x["prompts"], x["positions"],
             x["equal"], x["stopped_low_margin"], x["ended"], len(x["mismatches"])) for x in greedy]
    tot = [sum(x[k] for x in greedy) for k in ("positions", "equal", "stopped_low_margin", "ended")]
    rows.append(("**all**", "", "", "", sum(x["prompts"] for x in greedy), tot[0], tot[1], tot[2], tot[3],
                 sum(len(x["mismatches"]) for x in greedy)))
    parts.append("## Greedy tokens, tern and llama.cpp on the same file\n\n"
                 "Per file: the margin threshold, golden prompts, tokens generated by each tool, positions "
                 "equal before the two sequences part (all, when they never do), prompts where they part at a "
                 "margin below the threshold, prompts where tern picked `</s>` or `<|end_of_sentence|>` (the "
                 "walk ends there: llama-server's `ignore_eos` sets those tokens' logits to -inf, vLLM's and "
                 "tern's do not), prompts where they part at a clear margin (a failure).\n\n" + table(
                     ["model", "written by", "file", "threshold", "prompts", "tokens", "equal", "parted at low margin",
                      "ended by tern's EOS", "mismatches"], rows))

    ident = sorted(r["identity"], key=lambda x: (x["pair"].split()[0], x["model"], x["pair"]))
    rows = []
    for x in ident:
        keys = "same" if x["key_order_equal"] and not x["keys_differing"] else ", ".join(x["keys_differing"]) or "order"
        types = "same" if not x["types_differ"] else ", ".join(f"{n}: {a} vs {b}" for n, a, b in
                                                              ((n, *v) for n, v in x["types_differ"].items()))
        rows.append((x["model"], x["pair"], keys, types, f"{x['same_bytes']} / {x['tensors']}"))
    parts.append("## Bytes and metadata\n\n`convert T`: convert_hf_to_gguf.py against `tern convert` on the same "
                 "folder. `quantize T`: llama-quantize against `tern quantize` on llama.cpp's bf16 file. "
                 "Keys: every key, its type and value (order too). Tensors with identical bytes out of all.\n\n"
                 + table(["model", "pair", "keys", "tensor types", "identical tensors"], rows))

    rows = [(x["model"], x["tern"], x["llama.cpp"], "yes" if x["equal"] else "**no**") for x in r["tokens"]]
    parts.append("## Evaluation tokens\n\nTokens of the KL text as each tool's tokenizer cut it (each tool's base "
                 "file holds its own).\n\n" + table(["model", "tern", "llama.cpp", "same ids"], rows))

    kl = sorted(r["kl"], key=lambda x: (x["model"], x["writer"] != "llama.cpp", x["type"]))
    rows = [(x["model"], x["writer"], x["type"], fmt_kl(x["tern"]), fmt_kl(x["llama.cpp"]), fmt_top(x["tern"]),
             fmt_top(x["llama.cpp"])) for x in kl]
    parts.append("## KL divergence against bf16\n\nMean KL divergence (nats) of the next-token distribution "
                 f"of each quantized file against the bf16 file, over {r['kl'][0]['tern'].get('positions', '?')} "
                 "positions, with its standard error; same top: positions whose most likely token is the bf16 "
                 "file's. tern: `tern perplexity` against tern's bf16 base; llama.cpp: `llama-perplexity` against "
                 "llama.cpp's. The BF16 rows score the bf16 file against the other tool's base: how far the two "
                 "forward passes are from each other.\n\n" + table(
                     ["model", "file written by", "type", "KL, tern", "KL, llama.cpp", "same top, tern",
                      "same top, llama.cpp"], rows))

    dur = [f"pytest: {r['seconds']} s"]
    if a.setup_seconds is not None:
        dur.insert(0, f"setup (llama.cpp build and converter venv, cached after the first run): {a.setup_seconds} s")
    if a.total_seconds is not None:
        dur.append(f"whole `make compat` after the tern build: {a.total_seconds} s")
    parts.append("## Duration\n\n" + "; ".join(dur) + ".")
    pathlib.Path(a.out).write_text("\n\n".join(parts) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
