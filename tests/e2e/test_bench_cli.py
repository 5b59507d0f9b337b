"""`tern bench` end to end on the tiny model (CPU): the offline and conc
scenarios' workloads, their JSON, and the error for conflicting limits."""

import json

from conftest import run_tern


def bench_json(tern_bin, tiny_model, tmp_path, *args):
    out = tmp_path / "bench.json"
    r = run_tern(tern_bin, "bench", *args, "--model", tiny_model, "--device", "cpu", "--threads", 2,
                 "--json-out", out)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(out.read_text()), r.stdout.decode()


def test_offline_runs_every_request_to_its_length(tern_bin, tiny_model, tmp_path):
    j, text = bench_json(tern_bin, tiny_model, tmp_path, "offline", "--num-requests", 6, "--input-min", 8,
                         "--input-max", 24, "--output-min", 5, "--output-max", 5)
    assert j["scenario"] == "offline"
    assert j["requests"] == 6
    assert j["output_tokens"] == 6 * 5  # EOS ignored: every request reaches its length
    assert 6 * 8 <= j["prompt_tokens"] <= 6 * 24
    assert j["output_tokens_per_s"] > 0 and j["steps"] > 0
    assert text.startswith("offline: 6 requests")


def test_conc_keeps_its_concurrency_running_with_conc_n_workload(tern_bin, tiny_model, tmp_path):
    # conc-N's defaults: 4N requests (at least 32), prompts 50-500 tokens, 128 out; N sequences at most.
    j, text = bench_json(tern_bin, tiny_model, tmp_path, "conc", "--concurrency", 3, "--output-min", 6,
                         "--output-max", 6)
    assert j["scenario"] == "conc-3"
    assert j["requests"] == 32
    assert j["max_num_seqs"] == 3
    assert j["max_batch_seqs"] == 3
    assert j["output_tokens"] == 32 * 6
    assert 32 * 50 <= j["prompt_tokens"] <= 32 * 500
    assert text.startswith("conc-3: 32 requests")
    j, _ = bench_json(tern_bin, tiny_model, tmp_path, "conc", "--concurrency", 10, "--num-requests", 12,
                      "--input-min", 4, "--input-max", 4, "--output-min", 2, "--output-max", 2)
    assert (j["requests"], j["prompt_tokens"], j["output_tokens"]) == (12, 48, 24)
    assert j["max_batch_seqs"] == 10


def test_conc_refuses_a_different_max_num_seqs(tern_bin, tiny_model):
    r = run_tern(tern_bin, "bench", "conc", "--concurrency", 4, "--max-num-seqs", 8, "--model", tiny_model,
                 "--device", "cpu")
    assert r.returncode != 0
    assert b"--concurrency" in r.stderr
