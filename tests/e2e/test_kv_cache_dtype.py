"""--kv-cache-dtype on the CPU: float32, bfloat16 (auto under the fast kernel
set) and fp8 (e4m3), so the same --kv-cache-memory holds one, two or four
times the fp32 tokens, which the
start-up log and /metrics (vllm:cache_config_info, tern:kv_cache_capacity_tokens)
report; greedy generation runs to the end; `tern perplexity` scores the fp8
cache against an auto base; fp8_e5m2 and anything else are refused with the
flag and the accepted values named."""

import json
import re

import pytest

from conftest import run_tern
from server_fixture import TernServer, stop_cleanly


def metric_line(text, name):
    return [line for line in text.splitlines() if line.startswith(name)]


def serve_and_measure(*flags):
    """(stored dtype name, capacity in tokens) of a CPU server on ernie-tiny with
    700 fp32 blocks' worth of --kv-cache-memory (3 layers x K, V x 16 positions
    x 16 floats), after a greedy request that runs to its end."""
    server = TernServer("--device", "cpu", "--kv-cache-memory", 700 * 6144, "--max-model-len", "256", *flags)
    try:
        status, _, body = server.get("/metrics")
        assert status == 200
        text = body.decode()
        info = metric_line(text, "vllm:cache_config_info{")
        assert len(info) == 1, text
        stored = re.search(r'cache_dtype="([^"]+)"', info[0]).group(1)
        tokens = float(metric_line(text, "tern:kv_cache_capacity_tokens{")[0].split()[-1])
        status, _, body = server.post_json("/v1/completions", {"prompt": "hello there", "max_tokens": 8,
                                                               "temperature": 0, "ignore_eos": True})
        assert status == 200, body
        assert body["usage"]["completion_tokens"] == 8
        log = server.logs()
        assert re.search(rf"KV cache {int(tokens)} tokens, {stored}", log), log
        return stored, tokens
    finally:
        stop_cleanly(server)


@pytest.mark.parametrize("flags, stored, times", [
    (("--kv-cache-dtype", "float32"), "fp32", 1),
    (("--kv-cache-dtype", "fp32", "--cpu-kernels", "fast"), "fp32", 1),
    (("--kv-cache-dtype", "auto", "--cpu-kernels", "optimized"), "fp32", 1),
    (("--kv-cache-dtype", "auto", "--cpu-kernels", "fast"), "bf16", 2),
    (("--kv-cache-dtype", "bfloat16", "--cpu-kernels", "optimized"), "bf16", 2),
    (("--kv-cache-dtype", "bf16"), "bf16", 2),
    (("--kv-cache-dtype", "fp8"), "fp8_e4m3", 4),
    (("--kv-cache-dtype", "fp8_e4m3"), "fp8_e4m3", 4),
])
def test_serve_reports_the_stored_dtype_and_its_tokens(flags, stored, times):
    """The CPU's auto is bf16 under the fast kernel set and fp32 under optimized;
    bf16 holds twice the fp32 tokens in the same memory, fp8 four times."""
    got, tokens = serve_and_measure(*flags)
    assert got == stored
    _, fp32_tokens = serve_and_measure("--kv-cache-dtype", "float32")
    assert tokens == times * fp32_tokens


@pytest.mark.parametrize("value, needle", [("fp8_e5m2", "fp8_e5m2 is not supported"), ("int8", "'int8'"),
                                           ("FP8", "'FP8'")])
def test_other_values_are_refused_naming_the_flag(tern_bin, tiny_model, value, needle):
    r = run_tern(tern_bin, "generate", "--model", tiny_model, "--prompt", "hi", "--max-tokens", 2,
                 "--kv-cache-dtype", value)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "--kv-cache-dtype" in err and needle in err and "auto, float32, bfloat16, fp8, fp8_e4m3" in err, err


def test_bench_pp_tg_refuses_fp8(tern_bin, tiny_model):
    r = run_tern(tern_bin, "bench", "pp-tg", "--model", tiny_model, "-p", 8, "-n", 4, "--kv-cache-dtype", "fp8")
    assert r.returncode != 0
    assert "--kv-cache-dtype fp8" in r.stderr.decode()


def test_perplexity_scores_the_bf16_and_fp8_caches_against_an_auto_base(tern_bin, tiny_model, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(" ".join(f"word{i % 37} and the number {i}." for i in range(400)))
    base = tmp_path / "base.kld"
    r = run_tern(tern_bin, "perplexity", "--model", tiny_model, "-f", text, "-c", 64, "--chunks", 3,
                 "--kl-divergence-base", base)
    assert r.returncode == 0, r.stderr.decode()
    figures = {}
    for dtype in ("auto", "bfloat16", "fp8"):
        out = tmp_path / f"{dtype}.json"
        r = run_tern(tern_bin, "perplexity", "--model", tiny_model, "--kl-divergence", "--kl-divergence-base", base,
                     "--kv-cache-dtype", dtype, "--json-out", out)
        assert r.returncode == 0, r.stderr.decode()
        figures[dtype] = json.loads(out.read_text())
    assert figures["auto"]["kld_mean"] < 1e-6  # the base itself
    assert figures["fp8"]["kv_cache_dtype"] == "fp8_e4m3"
    assert 1e-6 < figures["fp8"]["kld_mean"] < 0.5
    assert figures["bfloat16"]["kv_cache_dtype"] == "bfloat16"
    assert 0 < figures["bfloat16"]["kld_mean"] < figures["fp8"]["kld_mean"]  # 8 mantissa bits against 4
