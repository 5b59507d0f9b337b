"""--kv-cache-dtype: fp8 (and its alias fp8_e4m3) on the CPU stores e4m3 K/V,
so the same --kv-cache-memory holds four times the fp32 tokens, which the
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


@pytest.mark.parametrize("value", ["fp8", "fp8_e4m3"])
def test_serve_reports_fp8_dtype_and_four_times_the_tokens(value):
    capacity = {}
    # 700 fp32 blocks of ernie-tiny (3 layers x K, V x 16 positions x 16 floats).
    for dtype in ("auto", value):
        server = TernServer("--device", "cpu", "--kv-cache-memory", 700 * 6144, "--kv-cache-dtype", dtype,
                            "--max-model-len", "256")
        try:
            status, _, body = server.get("/metrics")
            assert status == 200
            text = body.decode()
            info = metric_line(text, "vllm:cache_config_info{")
            assert len(info) == 1, text
            stored = "fp32" if dtype == "auto" else "fp8_e4m3"
            assert f'cache_dtype="{stored}"' in info[0]
            tokens = metric_line(text, "tern:kv_cache_capacity_tokens{")
            capacity[dtype] = float(tokens[0].split()[-1])
            status, _, body = server.post_json("/v1/completions", {"prompt": "hello there", "max_tokens": 8,
                                                                   "temperature": 0, "ignore_eos": True})
            assert status == 200, body
            assert body["usage"]["completion_tokens"] == 8
            log = server.logs()
            assert re.search(rf"KV cache {int(capacity[dtype])} tokens, {stored}", log), log
        finally:
            stop_cleanly(server)
    assert capacity[value] == 4 * capacity["auto"]


@pytest.mark.parametrize("value, needle", [("fp8_e5m2", "fp8_e5m2 is not supported"), ("int8", "'int8'"),
                                           ("FP8", "'FP8'")])
def test_other_values_are_refused_naming_the_flag(tern_bin, tiny_model, value, needle):
    r = run_tern(tern_bin, "generate", "--model", tiny_model, "--prompt", "hi", "--max-tokens", 2,
                 "--kv-cache-dtype", value)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "--kv-cache-dtype" in err and needle in err and "auto, fp8, fp8_e4m3" in err, err


def test_bench_pp_tg_refuses_fp8(tern_bin, tiny_model):
    r = run_tern(tern_bin, "bench", "pp-tg", "--model", tiny_model, "-p", 8, "-n", 4, "--kv-cache-dtype", "fp8")
    assert r.returncode != 0
    assert "--kv-cache-dtype fp8" in r.stderr.decode()


def test_perplexity_scores_the_fp8_cache_against_an_auto_base(tern_bin, tiny_model, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(" ".join(f"word{i % 37} and the number {i}." for i in range(400)))
    base = tmp_path / "base.kld"
    r = run_tern(tern_bin, "perplexity", "--model", tiny_model, "-f", text, "-c", 64, "--chunks", 3,
                 "--kl-divergence-base", base)
    assert r.returncode == 0, r.stderr.decode()
    figures = {}
    for dtype in ("auto", "fp8"):
        out = tmp_path / f"{dtype}.json"
        r = run_tern(tern_bin, "perplexity", "--model", tiny_model, "--kl-divergence", "--kl-divergence-base", base,
                     "--kv-cache-dtype", dtype, "--json-out", out)
        assert r.returncode == 0, r.stderr.decode()
        figures[dtype] = json.loads(out.read_text())
    assert figures["auto"]["kld_mean"] < 1e-6  # the base itself
    assert figures["fp8"]["kv_cache_dtype"] == "fp8_e4m3"
    assert 1e-6 < figures["fp8"]["kld_mean"] < 0.5
