"""`tern perplexity` (llama-perplexity's perplexity and KL-divergence runs,
its base-file format) and `tern generate --logprobs`, the two things
`make compat` compares with llama.cpp, checked here without it: the first
generated token's log-probabilities against HF's logits, a base file's
layout, the model against its own base, and a quantized file against the
bf16 one."""

import json
import math

import numpy as np

from conftest import DATA, run_tern


def log_softmax(logits):
    x = np.asarray(logits, dtype=np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def test_generate_logprobs_are_hf_log_softmax_of_the_first_token(tern_bin, tiny_golden):
    p = next(p for p in tiny_golden["prompts"] if p["name"] == "en")
    r = run_tern(tern_bin, "generate", "--model", DATA / "ernie-tiny", "--prompt", p["text"], "--max-tokens", 4,
                 "--temperature", 0, "--ignore-eos", "--json", "--logprobs", 3, "--device", "cpu",
                 "--cpu-kernels", "optimized")  # the exact kernels, held to HF's fp32 logits
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    assert j["prompt_token_ids"] == p["ids"] and j["token_ids"] == p["greedy"][:4]
    assert [e["token"] for e in j["logprobs"]] == j["token_ids"]
    want = log_softmax(p["last_logits"])  # HF's logits after the whole prompt
    first = j["logprobs"][0]
    order = np.argsort(-want, kind="stable")[:3]
    assert [t for t, _ in first["top"]] == order.tolist()
    for t, lp in first["top"]:
        assert abs(lp - want[t]) < 2e-3, (t, lp, want[t])
    assert first["logprob"] == first["top"][0][1]


def test_logprobs_need_json(tern_bin):
    r = run_tern(tern_bin, "generate", "--model", DATA / "ernie-tiny", "--prompt", "hi", "--logprobs", 2)
    assert r.returncode != 0 and b"--logprobs prints with --json only" in r.stderr


def eval_text(golden):
    return "\n".join(p["text"] for p in golden["prompts"] if not p["chat"]) + "\n"


def test_base_file_layout_self_kl_and_a_quantized_file(tern_bin, tiny_golden, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(eval_text(tiny_golden), encoding="utf-8")
    bf16, q4 = tmp_path / "bf16.gguf", tmp_path / "q4_0.gguf"
    assert run_tern(tern_bin, "convert", "--model", DATA / "ernie-tiny", "--outfile", bf16, "--outtype",
                    "bf16").returncode == 0
    assert run_tern(tern_bin, "quantize", bf16, q4, "q4_0").returncode == 0
    base, ppl_json = tmp_path / "base.bin", tmp_path / "ppl.json"
    r = run_tern(tern_bin, "perplexity", "--model", bf16, "-f", text, "-c", 32, "--kl-divergence-base", base,
                 "--json-out", ppl_json, "--device", "cpu")
    assert r.returncode == 0, r.stderr.decode()
    ppl = json.loads(ppl_json.read_text())

    # llama-perplexity's layout: magic, n_ctx, n_vocab, n_chunk, the tokens, then
    # per window 32 - 1 - 16 rows of 2 floats and the vocabulary in u16 steps.
    raw = base.read_bytes()
    assert raw[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = np.frombuffer(raw[8:20], dtype=np.int32)
    assert (n_ctx, n_vocab) == (32, 1280) and n_chunk == ppl["n_chunks"] == ppl["n_tokens"] // 32 >= 2
    tokens = np.frombuffer(raw[20:20 + 4 * n_ctx * n_chunk], dtype=np.int32)
    assert tokens[:len(tiny_golden["prompts"][0]["ids"])].tolist() == tiny_golden["prompts"][0]["ids"]
    rows = n_chunk * (n_ctx - 1 - n_ctx // 2)
    assert len(raw) == 20 + 4 * n_ctx * n_chunk + rows * (1280 + 4) * 2 and ppl["positions"] == rows

    def kl(model, *flags):
        out = tmp_path / "kl.json"
        r = run_tern(tern_bin, "perplexity", "--model", model, "--kl-divergence-base", base, "--kl-divergence",
                     "--json-out", out, "--device", "cpu", *flags)
        assert r.returncode == 0, r.stderr.decode()
        assert b"Mean    KLD:" in r.stdout
        return json.loads(out.read_text())

    same = kl(bf16)
    assert abs(same["kld_mean"]) < 1e-5 and same["same_top"] == 1.0 and same["positions"] == rows
    assert math.isclose(same["ppl"], ppl["ppl"], rel_tol=1e-6)
    # The base floors log-probabilities 16 nats below the top (llama-perplexity's
    # format), so the base's perplexity of these unlikely tokens is at most the model's.
    assert same["ppl_base"] <= ppl["ppl"] * (1 + 1e-6)
    q = kl(q4)
    assert 1e-3 < q["kld_mean"] < 5 and q["same_top"] < 1.0 and q["kld_error"] > 0
    assert q["kld_max"] >= q["kld_99"] >= q["kld_median"] > 0
    # --quantization quantizes the bf16 file at load as `tern quantize` did.
    at_load = kl(bf16, "--quantization", "q4_0")
    assert at_load["quantization"] == "q4_0"
    assert math.isclose(at_load["kld_mean"], q["kld_mean"], rel_tol=1e-6) and at_load["same_top"] == q["same_top"]


def test_perplexity_errors_name_what_is_wrong(tern_bin, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("你好", encoding="utf-8")
    r = run_tern(tern_bin, "perplexity", "--model", DATA / "ernie-tiny", "-f", short, "-c", 32)
    assert r.returncode == 1 and b"tokenizes to 1 tokens; a window of 32 needs at least 64" in r.stderr
    r = run_tern(tern_bin, "perplexity", "--model", DATA / "ernie-tiny", "--kl-divergence")
    assert r.returncode == 1 and b"--kl-divergence needs --kl-divergence-base" in r.stderr
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"_logits_" + b"\0" * 12)
    r = run_tern(tern_bin, "perplexity", "--model", DATA / "ernie-tiny", "--kl-divergence-base", bad,
                 "--kl-divergence")
    assert r.returncode == 1 and b"n_ctx 0 outside [2, 2^24]" in r.stderr
    # The engine's flags (batching, KV cache) mean nothing to a forward over windows: refused, not ignored.
    r = run_tern(tern_bin, "perplexity", "--model", DATA / "ernie-tiny", "-f", short, "--max-num-seqs", 4)
    assert r.returncode != 0 and b"--max-num-seqs" in r.stderr
