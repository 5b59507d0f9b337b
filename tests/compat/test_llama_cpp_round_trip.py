"""GGUF files both ways between tern and llama.cpp, with the real binaries, on
the tiny models: llama.cpp's convert_hf_to_gguf.py and llama-quantize write
files that tern loads; `tern convert` and `tern quantize` write files that
llama.cpp loads; on every file the two give the same greedy tokens wherever
tern's top-2 margin is clear; files that should be alike are compared key by
key and tensor by tensor; and each quantization's mean KL divergence against
bf16 is measured by `tern perplexity` and by llama-perplexity on the same text.
Every finding also goes to the results file docs/compat.md is written from."""

import pytest

from compat_tools import (CONVERT_TYPES, MODELS, QUANT_TYPES, LlamaServer, base_tokens, compare_files,
                          compare_greedy, file_kinds, golden, llama_convert, llama_kl, llama_kl_base, llama_quantize,
                          make_file, margin_threshold, tern_convert, tern_greedy, tern_kl, tern_kl_base,
                          tern_quantize)


def kind_id(kind):
    writer, how, qtype = kind
    return f"{writer}-{how}-{qtype}"


@pytest.mark.parametrize("kind", file_kinds(), ids=kind_id)
@pytest.mark.parametrize("model", MODELS)
def test_greedy_tokens_agree_on_the_same_file(tools, results, model, kind):
    """Each file loads in both tools, and their greedy tokens from the golden
    prompts agree until they part at a position whose margin in tern is below
    the file's threshold (counted: either token is a right answer there)."""
    writer, how, qtype = kind
    path = make_file(tools, model, writer, how, qtype)
    loads = {"model": model, "writer": writer, "how": how, "type": qtype, "file": path.name}
    results["loads"].append(loads)
    tern_runs = []
    for p in golden(model)["prompts"]:
        prompt_ids, ids, margins = tern_greedy(tools, path, p)
        assert prompt_ids == p["ids"], f"{p['name']}: tern tokenized the prompt differently from HF on {path.name}"
        tern_runs.append((p, ids, margins))
    loads["tern"] = True
    server = LlamaServer(tools, path)
    try:
        llama_runs = [server.greedy(p["ids"]) for p, _, _ in tern_runs]
    finally:
        server.stop()
    loads["llama.cpp"] = True

    threshold = margin_threshold(how, qtype)
    row = {"model": model, "writer": writer, "how": how, "type": qtype, "prompts": len(tern_runs),
           "threshold": threshold, "positions": 0, "equal": 0, "stopped_low_margin": 0, "ended": 0,
           "mismatches": []}
    for (p, ids, margins), llama_ids in zip(tern_runs, llama_runs):
        compared, low, mismatch, ended = compare_greedy(ids, llama_ids, margins, threshold)
        row["positions"] += len(ids)
        row["equal"] += compared
        row["stopped_low_margin"] += low is not None
        row["ended"] += ended is not None
        if mismatch is not None:
            row["mismatches"].append({"prompt": p["name"], "position": mismatch, "margin": margins[mismatch],
                                      "tern": ids, "llama.cpp": llama_ids})
    results["greedy"].append(row)
    assert not row["mismatches"], f"greedy tokens differ at margins >= {threshold}: {row['mismatches']}"


@pytest.mark.parametrize("outtype", CONVERT_TYPES)
@pytest.mark.parametrize("model", MODELS)
def test_tern_convert_writes_what_the_converter_writes(tools, results, model, outtype):
    """tern convert against convert_hf_to_gguf.py on the same folder: the same
    keys in the same order with the same values, the same tensors, types and
    shapes; the bytes are reported (equal for f32 and bf16, which are exact)."""
    d = compare_files(llama_convert(tools, model, outtype), tern_convert(tools, model, outtype))
    d.update({"model": model, "pair": f"convert {outtype}"})
    results["identity"].append(d)
    assert d["tensor_names_equal"] and d["same_type_and_shape"] == d["tensors"], d["types_differ"]
    assert d["key_order_equal"] and not d["keys_differing"], d["keys_differing"]
    if outtype in ("f32", "bf16"):
        assert d["same_bytes"] == d["tensors"], d["bytes_differ"]


@pytest.mark.parametrize("qtype", QUANT_TYPES)
@pytest.mark.parametrize("model", MODELS)
def test_tern_quantize_picks_llama_quantize_types(tools, results, model, qtype):
    """tern quantize against llama-quantize on the same bf16 file: every
    tensor gets the same type (llama-quant.cpp's rules and fallbacks) and the
    same keys; identical blocks are counted and reported, not required (the
    rounding of two implementations may differ in the last step)."""
    d = compare_files(llama_quantize(tools, model, qtype), tern_quantize(tools, model, qtype))
    d.update({"model": model, "pair": f"quantize {qtype}"})
    results["identity"].append(d)
    assert d["tensor_names_equal"] and not d["types_differ"], d["types_differ"]
    assert not d["keys_differing"], d["keys_differing"]


@pytest.mark.parametrize("model", MODELS)
def test_kl_divergence_per_type_from_both_tools(tools, results, model):
    """Mean KL divergence of each quantized file's next-token distributions
    against the bf16 file's, over the golden texts in windows of KL_CTX tokens:
    tern perplexity against tern's bf16 base and llama-perplexity against
    llama.cpp's. The bases are in the same file format, so each tool also
    scores the bf16 file against the other's base: the two forward passes'
    own distance, which every quantization's KL sits on top of."""
    bf16 = llama_convert(tools, model, "bf16")
    tern_base = tern_kl_base(tools, model, bf16)
    llama_base = llama_kl_base(tools, model, bf16)
    tern_tokens, llama_tokens = base_tokens(tern_base), base_tokens(llama_base)
    results["tokens"].append({"model": model, "tern": len(tern_tokens), "llama.cpp": len(llama_tokens),
                              "equal": tern_tokens == llama_tokens})

    cross = {"model": model, "writer": "llama.cpp", "type": "BF16 (other tool's base)",
             "tern": tern_kl(tools, bf16, llama_base), "llama.cpp": llama_kl(tools, bf16, tern_base)}
    results["kl"].append(cross)
    self_kl = tern_kl(tools, bf16, tern_base)
    assert self_kl["kld"] < 1e-4 and self_kl["same_top"] == 1.0, self_kl
    assert cross["tern"]["kld"] < 1e-3 and cross["llama.cpp"]["kld"] < 1e-3, cross

    for writer, quantize in (("llama.cpp", llama_quantize), ("tern", tern_quantize)):
        for qtype in QUANT_TYPES:
            q = quantize(tools, model, qtype)
            row = {"model": model, "writer": writer, "type": qtype,
                   "tern": tern_kl(tools, q, tern_base), "llama.cpp": llama_kl(tools, q, llama_base)}
            results["kl"].append(row)
            # The same file, the same text, each tool against its own bf16: the two figures agree to within
            # the forward passes' own distance (the BF16 row) and their activation rounding.
            a, b = row["tern"]["kld"], row["llama.cpp"]["kld"]
            assert abs(a - b) <= 0.15 * max(a, b) + 1e-4, row
