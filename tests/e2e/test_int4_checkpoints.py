"""Int4 weight-only checkpoints as people download them: tools/quantize_awq.py writes AutoAWQ GEMM,
GPTQ (sym, asym, act order) and compressed-tensors W4A16 folders of the tiny models at test time, and
the real `tern` loads each. Over the golden prompts followed by HF's greedy continuations, the next-token
distributions of `tern serve` (vLLM's prompt_logprobs, the whole vocabulary) on each int4 folder stay
within a mean KL divergence bound of the bf16 folder's, and their argmax mostly agrees; `tern generate`
answers greedily on each. Malformed folders (bits 8, a missing or wrong-shaped tensor, a group size that
does not fit, reordered g_idx without desc_act, ...) and --quantization names that do not match the
folder are refused with a message naming the tensor or field."""

import functools
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import DATA, ROOT, run_tern
from server_fixture import TernServer, stop_cleanly

sys.path.insert(0, str(ROOT / "tools"))
import quantize_awq  # noqa: E402  (read_safetensors / write_safetensors for the malformed folders)

MODELS = ["ernie-tiny", "ernie-tiny-untied"]
# ernie-tiny's layers take 64, 128 and 192 input channels: group 32 gives 2, 4 and 6 groups, 64 gives 1,
# 2 and 3 (odd), 128 ragged last groups (GPTQ and compressed-tensors allow them, AWQ does not).
# ernie-tiny-untied's take 48, 64 and 96: AWQ needs group 16 there, the others run ragged groups.
VARIANTS = {
    "gptq-sym-g64": ["--format", "gptq", "--sym", "--group-size", "64"],
    "gptq-asym-g128": ["--format", "gptq", "--asym", "--group-size", "128"],
    "gptq-actorder-g32": ["--format", "gptq", "--sym", "--group-size", "32", "--act-order"],
    "gptq-v2-asym-g32": ["--format", "gptq", "--asym", "--group-size", "32", "--checkpoint-format", "gptq_v2"],
    "ct-sym-g32": ["--format", "compressed-tensors", "--sym", "--group-size", "32"],
    "ct-asym-channel": ["--format", "compressed-tensors", "--asym", "--group-size", "-1"],
    "ct-actorder-g32": ["--format", "compressed-tensors", "--asym", "--group-size", "32", "--act-order"],
}
TIED_ONLY = {
    "awq-g32": ["--format", "awq", "--group-size", "32"],
    "awq-g64": ["--format", "awq", "--group-size", "64"],
}
# The untied model's head quantized too (1280 x 48): GPTQ's lm_head option, compressed-tensors without ignore.
UNTIED_ONLY = {
    "awq-g16": ["--format", "awq", "--group-size", "16"],
    "gptq-sym-g32-lmhead": ["--format", "gptq", "--sym", "--group-size", "32", "--lm-head"],
    "ct-asym-g32-lmhead": ["--format", "compressed-tensors", "--asym", "--group-size", "32", "--lm-head"],
}
# Mean KL(bf16 || int4) of the next-token distribution over every scored position, in nats, and the
# share of positions whose most likely token is the same. The tiny models have random weights and sharp
# logits (a standard deviation near 4.5), so round-to-nearest int4 moves them far more than it moves a
# trained model: the bounds are 1.5 times the largest KL measured over each model's variants and about
# 0.75 times the lowest agreement (docs/benchmarks.md has the figures). A wrong nibble order or a zero
# point off by one measures KL 12-13 and agreement under 5%.
KL_BOUND = {"ernie-tiny": 1.9, "ernie-tiny-untied": 0.9}
TOP1_AGREEMENT_MIN = 0.35
# The demo model (trained, 12M parameters) is what int4 quality means: one variant per scheme, its widths
# 384 and 960 taking AWQ groups of 64 (960 = 15 x 64) and ragged GPTQ / compressed-tensors groups of 128.
DEMO = ROOT / "models" / "ernie-demo"
DEMO_VARIANTS = {
    "awq-g64": ["--format", "awq", "--group-size", "64"],
    "gptq-sym-g128": ["--format", "gptq", "--sym", "--group-size", "128"],
    "ct-asym-g128": ["--format", "compressed-tensors", "--asym", "--group-size", "128"],
}
# About twice the largest KL measured on it, and (greedy paths being fragile) two thirds of the lowest
# agreements (docs/benchmarks.md).
DEMO_KL_BOUND = 0.2
DEMO_TOP1_MIN = 0.58
DEMO_GREEDY_MIN = 0.35  # share of greedy tokens generated before the first difference from bf16


def quantize(model, args, out, dequantized):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "quantize_awq.py"), "--model", str(model_dir(model)),
                        "--out", str(out), "--dequantized", str(dequantized), *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def dequantized_root(tmp_path_factory):
    return tmp_path_factory.mktemp("int4-dequantized")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, dequantized_root):
    """{(model, variant): folder}, every int4 folder of both tiny models; beside each, under
    dequantized_root, the bf16 folder of its weights dequantized by NumPy."""
    root = tmp_path_factory.mktemp("int4")
    out = {}
    for model in MODELS:
        for name, args in variants_of(model).items():
            out[(model, name)] = quantize(model, args, root / f"{model}-{name}", dequantized_root / f"{model}-{name}")
    return out


def variants_of(model):
    return dict(VARIANTS, **(UNTIED_ONLY if model.endswith("untied") else TIED_ONLY))


def model_dir(model):
    return DEMO if model == "ernie-demo" else DATA / model


def golden(model):
    return json.loads((model_dir(model) / "golden.json").read_text(encoding="utf-8"))


def vocab_size(model):
    return json.loads((model_dir(model) / "config.json").read_text())["vocab_size"]


def sequences(model):
    """Each golden prompt followed by HF's greedy continuation of it."""
    return [p["ids"] + p["greedy"] for p in golden(model)["prompts"]]


def serve(folder, vocab, *flags):
    return TernServer("--max-logprobs", vocab, "--kv-cache-memory", "64MiB", *flags, model=folder)


def log_probs(folder, seqs, vocab):
    """[positions, vocab] log-probabilities of each next token after the first, from tern serve."""
    server = serve(folder, vocab)
    rows = []
    try:
        for ids in seqs:
            status, _, body = server.post_json("/v1/completions", {
                "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": vocab})
            assert status == 200, body
            for entry in body["choices"][0]["prompt_logprobs"][1:]:
                row = np.full(vocab, -np.inf)
                for tok, v in entry.items():
                    row[int(tok)] = v["logprob"]
                assert np.isfinite(row).all(), "prompt_logprobs did not cover the vocabulary"
                rows.append(row)
    finally:
        stop_cleanly(server)
    return np.array(rows)


@pytest.fixture(scope="module")
def reference():
    """The bf16 folders' distributions: {model: [positions, vocab]}."""
    return {m: log_probs(DATA / m, sequences(m), vocab_size(m)) for m in MODELS}


def kl_and_top1(ref, got):
    """Mean KL(ref || got) over the positions, and the share of positions with the same argmax."""
    assert got.shape == ref.shape
    kl = float(np.mean(np.sum(np.exp(ref) * (ref - got), axis=1)))
    return kl, float(np.mean(np.argmax(ref, axis=1) == np.argmax(got, axis=1)))


@functools.lru_cache(maxsize=None)
def greedy(tern_bin, folder, prompt):
    r = run_tern(tern_bin, "generate", "--model", folder, "--prompt", prompt, "--max-tokens", 20,
                 "--temperature", 0, "--ignore-eos", "--json")
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)["token_ids"]


CASES = [(m, v) for m in MODELS for v in variants_of(m)]
# KL is measured on one variant per scheme and model (each costs a server answering 1280 logprobs per
# position); the exactness test above ties every other variant to NumPy's weights.
KL_CASES = [("ernie-tiny", v) for v in ["awq-g32", "gptq-sym-g64", "gptq-actorder-g32", "ct-asym-channel"]] + [
    ("ernie-tiny-untied", v) for v in ["awq-g16", "gptq-asym-g128", "gptq-sym-g32-lmhead", "ct-asym-g32-lmhead"]]


def top_logprobs(folder, seqs, k=20):
    """[(token id, logprob)] of the top k at every position after the first, from tern serve on the
    reference kernels (which multiply Q4_0 / Q8_0 and float rows alike: dequantized to fp32)."""
    server = serve(folder, k, "--cpu-kernels", "reference")
    try:
        out = []
        for ids in seqs:
            status, _, body = server.post_json("/v1/completions", {
                "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": k})
            assert status == 200, body
            for entry in body["choices"][0]["prompt_logprobs"][1:]:
                out.append(sorted((int(t), v["logprob"]) for t, v in entry.items()))
    finally:
        stop_cleanly(server)
    return out


@pytest.mark.parametrize("model,variant", CASES, ids=[f"{m}-{v}" for m, v in CASES])
def test_int4_folder_computes_the_numpy_dequantized_weights(folders, dequantized_root, model, variant):
    # The int4 folder and a float folder of NumPy's (q - z) * s (exact where tern keeps Q4_0 / Q8_0
    # blocks, rounded to bf16 where it keeps bf16) give the same logprobs to the last bit.
    seqs = sequences(model)
    assert top_logprobs(folders[(model, variant)], seqs) == top_logprobs(dequantized_root / f"{model}-{variant}", seqs)


@pytest.mark.parametrize("model,variant", KL_CASES, ids=[f"{m}-{v}" for m, v in KL_CASES])
def test_int4_next_token_distribution_stays_close_to_bf16(folders, reference, model, variant):
    ref = reference[model]
    kl, top1 = kl_and_top1(ref, log_probs(folders[(model, variant)], sequences(model), vocab_size(model)))
    print(f"\n{model} {variant}: mean KL {kl:.5f} nats over {len(ref)} positions, top-1 agreement {top1:.3f}")
    assert 0 < kl < KL_BOUND[model], (variant, kl)
    assert top1 >= TOP1_AGREEMENT_MIN, (variant, top1)


def greedy_agreement(tern_bin, model, folder):
    """The share of `tern generate`'s 20 greedy tokens per golden prompt that come before the first
    difference from the bf16 folder's."""
    prompts = [p["text"] for p in golden(model)["prompts"]]
    same = 0
    for p in prompts:
        want, got = greedy(tern_bin, model_dir(model), p), greedy(tern_bin, folder, p)
        assert len(got) == 20 and all(0 <= t < vocab_size(model) for t in got)
        same += next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), 20)
    return same / (20 * len(prompts))


@pytest.mark.parametrize("model", MODELS)
def test_generate_greedy_on_every_int4_folder(tern_bin, folders, model):
    # Random weights with sharp logits: greedy paths part within a few tokens, so this reports the
    # agreement and checks that every folder generates; the demo model's test below bounds it.
    report = [f"{v}: {greedy_agreement(tern_bin, m, f):.3f}" for (m, v), f in sorted(folders.items()) if m == model]
    print(f"\n{model}, greedy tokens before the first difference from bf16:\n  " + "\n  ".join(report))


@pytest.fixture(scope="module")
def demo_reference():
    return log_probs(DEMO, sequences("ernie-demo"), vocab_size("ernie-demo"))


@pytest.mark.parametrize("variant", DEMO_VARIANTS)
def test_demo_model_int4_quality(tern_bin, tmp_path, demo_reference, variant):
    folder = quantize("ernie-demo", DEMO_VARIANTS[variant], tmp_path / "int4", tmp_path / "dequantized")
    kl, top1 = kl_and_top1(demo_reference, log_probs(folder, sequences("ernie-demo"), vocab_size("ernie-demo")))
    agreement = greedy_agreement(tern_bin, "ernie-demo", folder)
    print(f"\nernie-demo {variant}: mean KL {kl:.4f} nats over {len(demo_reference)} positions, top-1 agreement "
          f"{top1:.3f}, greedy agreement {agreement:.3f}")
    assert 0 < kl < DEMO_KL_BOUND, kl
    assert top1 >= DEMO_TOP1_MIN, top1
    assert agreement >= DEMO_GREEDY_MIN, agreement


# ---- refusals

def fail_message(tern_bin, folder, *flags):
    r = run_tern(tern_bin, "generate", "--model", folder, "--prompt", "hi", "--max-tokens", 1, *flags)
    assert r.returncode != 0, f"{folder} loaded"
    return r.stderr.decode()


def edited(folders, tmp_path, variant, config=None, tensors=None):
    """A copy of the ernie-tiny folder of `variant`, its quantization_config updated with `config` and
    its tensors edited by `tensors(dict)`."""
    out = tmp_path / variant
    shutil.copytree(folders[("ernie-tiny", variant)], out)
    if config is not None:
        c = json.loads((out / "config.json").read_text())
        if config == "drop":
            del c["quantization_config"]
        else:
            config(c["quantization_config"])
        (out / "config.json").write_text(json.dumps(c))
    if tensors is not None:
        t = quantize_awq.read_safetensors(out / "model.safetensors")
        tensors(t)
        quantize_awq.write_safetensors(out / "model.safetensors", t)
    return out


Q = "model.layers.1.self_attn.q_proj"


def test_refuses_bits_8(tern_bin, folders, tmp_path):
    for variant in ["awq-g32", "gptq-sym-g64"]:
        folder = edited(folders, tmp_path, variant, config=lambda q: q.update(bits=8))
        assert "bits is 8" in fail_message(tern_bin, folder)
    folder = edited(folders, tmp_path, "ct-sym-g32",
                    config=lambda q: q["config_groups"]["group_0"]["weights"].update(num_bits=8))
    assert "num_bits is 8" in fail_message(tern_bin, folder)


def test_refuses_missing_and_misshapen_tensors(tern_bin, folders, tmp_path):
    folder = edited(folders, tmp_path, "awq-g32", tensors=lambda t: t.pop(f"{Q}.scales"))
    msg = fail_message(tern_bin, folder)
    assert f"'{Q}.scales' is missing" in msg, msg

    def truncate(t):
        dtype, shape, data = t[f"{Q}.qweight"]
        t[f"{Q}.qweight"] = (dtype, [shape[0] - 8, shape[1]], data[:(shape[0] - 8) * shape[1] * 4])
    msg = fail_message(tern_bin, edited(folders, tmp_path / "b", "awq-g32", tensors=truncate))
    assert f"'{Q}.qweight' has shape [56, 16], expected [64, 16]" in msg and "AWQ" in msg, msg

    def retype(t):
        _, shape, data = t[f"{Q}.qzeros"]
        t[f"{Q}.qzeros"] = ("F32", shape, data)
    msg = fail_message(tern_bin, edited(folders, tmp_path / "c", "gptq-sym-g64", tensors=retype))
    assert f"'{Q}.qzeros' has dtype F32, expected I32" in msg, msg

    folder = edited(folders, tmp_path / "d", "ct-asym-channel", tensors=lambda t: t.pop(f"{Q}.weight_zero_point"))
    assert f"'{Q}.weight_zero_point' is missing" in fail_message(tern_bin, folder)


def test_refuses_group_sizes_that_do_not_fit(tern_bin, folders, tmp_path):
    # An AWQ folder of group 32 relabelled 48: 48 divides none of the tiny widths.
    msg = fail_message(tern_bin, edited(folders, tmp_path, "awq-g32", config=lambda q: q.update(group_size=48)))
    assert "group_size 48 does not divide in_features 64" in msg, msg
    # Relabelled 64: every shape of qzeros and scales is then wrong.
    msg = fail_message(tern_bin, edited(folders, tmp_path / "b", "awq-g32", config=lambda q: q.update(group_size=64)))
    assert "qzeros' has shape [2, 16], expected [1, 16]" in msg, msg
    folder = edited(folders, tmp_path / "c", "gptq-sym-g64", config=lambda q: q.update(group_size=0))
    msg = fail_message(tern_bin, folder)
    assert "group_size is 0" in msg, msg


def test_act_order_needs_desc_act(tern_bin, folders, tmp_path):
    folder = edited(folders, tmp_path, "gptq-actorder-g32", config=lambda q: q.update(desc_act=False))
    msg = fail_message(tern_bin, folder)
    assert "g_idx" in msg and "reordered" in msg and "desc_act" in msg, msg
    folder = edited(folders, tmp_path / "b", "gptq-actorder-g32", tensors=lambda t: t.pop(f"{Q}.g_idx"))
    assert f"'{Q}.g_idx' is missing" in fail_message(tern_bin, folder)


def test_refuses_zero_points_of_the_other_gptq_format(tern_bin, folders, tmp_path):
    folder = edited(folders, tmp_path, "gptq-sym-g64", config=lambda q: q.update(checkpoint_format="gptq_v2"))
    msg = fail_message(tern_bin, folder)
    assert "zero point 7" in msg and "sym=true" in msg, msg


def test_refuses_unsupported_schemes(tern_bin, folders, tmp_path):
    msg = fail_message(tern_bin, edited(folders, tmp_path, "awq-g32", config=lambda q: q.update(version="gemv")))
    assert 'version is "gemv"' in msg, msg
    w4a8 = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
    msg = fail_message(tern_bin, edited(folders, tmp_path / "b", "ct-sym-g32",
                                        config=lambda q: q["config_groups"]["group_0"].update(input_activations=w4a8)))
    assert "input_activations" in msg and "W4A16" in msg, msg


def test_int4_tensors_without_quantization_config(tern_bin, folders, tmp_path):
    msg = fail_message(tern_bin, edited(folders, tmp_path, "awq-g32", config="drop"))
    assert "no quantization_config" in msg and ".qweight" in msg, msg


def test_refuses_a_layer_stored_both_ways(tern_bin, folders, tmp_path):
    bf16 = quantize_awq.read_safetensors(DATA / "ernie-tiny" / "model.safetensors")
    folder = edited(folders, tmp_path, "ct-sym-g32", tensors=lambda t: t.update({f"{Q}.weight": bf16[f"{Q}.weight"]}))
    msg = fail_message(tern_bin, folder)
    assert f"both '{Q}.weight' and '{Q}.weight_packed'" in msg, msg


def test_fp8_refuses_int4_folders(tern_bin, folders):
    msg = fail_message(tern_bin, folders[("ernie-tiny", "awq-g32")], "--quantization", "fp8", "--device", "cpu")
    assert "--quantization fp8" in msg and "int4 checkpoint" in msg, msg


def test_quantization_flag_must_name_the_folders_scheme(tern_bin, folders, tiny_model):
    msg = fail_message(tern_bin, tiny_model, "--quantization", "awq")
    assert "--quantization awq" in msg and "no quantization_config" in msg and "q4_k_m" in msg, msg
    msg = fail_message(tern_bin, folders[("ernie-tiny", "awq-g32")], "--quantization", "gptq")
    assert "quant_method is awq" in msg, msg
    for variant, method in [("awq-g32", "awq"), ("gptq-sym-g64", "gptq"), ("ct-sym-g32", "compressed-tensors")]:
        r = run_tern(tern_bin, "generate", "--model", folders[("ernie-tiny", variant)], "--prompt", "hi",
                     "--max-tokens", 2, "--quantization", method, "--log-level", "info")
        assert r.returncode == 0, r.stderr.decode()
        assert "int4 checkpoint" in r.stderr.decode()


def test_quantize_lm_head_beside_an_int4_checkpoint(tern_bin, folders):
    """--quantize-lm-head beside an int4 folder's layers: the float head takes FP8 values (on the CPU, the
    reference's fp32 form, logged) and greedy generation still runs."""
    r = run_tern(tern_bin, "generate", "--model", folders[("ernie-tiny", "awq-g32")], "--device", "cpu",
                 "--prompt", "hi", "--max-tokens", 4, "--temperature", 0, "--ignore-eos", "--json",
                 "--quantize-lm-head", "--log-level", "info")
    assert r.returncode == 0, r.stderr.decode()
    assert "--quantize-lm-head on the CPU" in r.stderr.decode()
    assert len(json.loads(r.stdout.decode().splitlines()[-1])["token_ids"]) == 4
