"""`tern bench` end to end on the tiny model (CPU): the offline, conc and
pp-tg scenarios' workloads, their JSON, and the errors for bad limits."""

import json

from conftest import auto_cpu_kernels, run_tern


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
    assert "time to first token: p50" in text and 0 < j["ttft_ms"]["p50"] <= j["ttft_ms"]["p99"]


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
    # Time to first token: from arrival (all at the start) and from admission (a closed loop's view).
    assert "time to first token (from admission): p50" in text
    for key in ("ttft_ms", "ttft_after_admission_ms"):
        p = j[key]
        assert 0 < p["p50"] <= p["p90"] <= p["p99"], (key, p)
    assert j["ttft_after_admission_ms"]["p99"] <= j["ttft_ms"]["p99"]
    j, _ = bench_json(tern_bin, tiny_model, tmp_path, "conc", "--concurrency", 10, "--num-requests", 12,
                      "--input-min", 4, "--input-max", 4, "--output-min", 2, "--output-max", 2)
    assert (j["requests"], j["prompt_tokens"], j["output_tokens"]) == (12, 48, 24)
    assert j["max_batch_seqs"] == 10


def test_conc_refuses_a_different_max_num_seqs(tern_bin, tiny_model):
    r = run_tern(tern_bin, "bench", "conc", "--concurrency", 4, "--max-num-seqs", 8, "--model", tiny_model,
                 "--device", "cpu")
    assert r.returncode != 0
    assert b"--concurrency" in r.stderr


def test_pp_tg_reports_llama_bench_style_rates(tern_bin, tiny_model, tmp_path):
    j, text = bench_json(tern_bin, tiny_model, tmp_path, "pp-tg", "-p", 16, "-n", 8, "-r", 3)
    assert j["scenario"] == "pp-tg"
    assert (j["n_prompt"], j["n_gen"], j["repetitions"]) == (16, 8, 3)
    assert (j["device"], j["threads"], j["cpu_kernels"]) == ("cpu", 2, auto_cpu_kernels())
    assert j["model"] == str(tiny_model)
    assert j["commit"] and j["commit"] != "unknown"
    # One rate per timed run (the warm-up not among them), mean and stddev over them.
    for test in ("pp", "tg"):
        samples = j[f"{test}_samples_tokens_per_s"]
        assert len(samples) == 3 and all(s > 0 for s in samples)
        assert min(samples) <= j[f"{test}_tokens_per_s"] <= max(samples)
        assert 0 <= j[f"{test}_tokens_per_s_stddev"] <= max(samples) - min(samples)
    assert "| pp16 " in text and "| tg8 " in text
    # Where each test's time went (the model's forward profile, all runs).
    for test in ("pp", "tg"):
        split = j[f"{test}_time_split"]
        assert set(split) == {"linear_s", "attention_s", "lm_head_s", "other_s", "forward_calls"}
        assert split["linear_s"] > 0 and all(v >= 0 for v in split.values())
        assert f"{test} time (all runs): linear " in text
    assert j["pp_time_split"]["forward_calls"] == 3 + 1  # the timed runs and the warm-up
    assert j["tg_time_split"]["forward_calls"] == (3 + 1) * 8


def test_pp_tg_runs_one_test_alone_and_the_reference_kernels(tern_bin, tiny_model, tmp_path):
    j, text = bench_json(tern_bin, tiny_model, tmp_path, "pp-tg", "-p", 0, "-n", 4, "-r", 1, "--cpu-kernels",
                         "reference")
    assert j["cpu_kernels"] == "reference"
    assert j["pp_samples_tokens_per_s"] == [] and j["tg_tokens_per_s"] > 0
    assert j["tg_tokens_per_s_stddev"] == 0  # one run: no spread
    assert "pp" not in text.split("\n", 1)[1]


def test_pp_tg_refuses_no_work_and_too_long_prompts(tern_bin, tiny_model):
    r = run_tern(tern_bin, "bench", "pp-tg", "-p", 0, "-n", 0, "--model", tiny_model, "--device", "cpu")
    assert r.returncode != 0 and b"-p" in r.stderr
    r = run_tern(tern_bin, "bench", "pp-tg", "-p", 1 << 20, "-n", 1, "--model", tiny_model, "--device", "cpu")
    assert r.returncode != 0 and b"positions" in r.stderr


def test_pp_tg_quantizes_at_load(tern_bin, tiny_model, tmp_path):
    j, text = bench_json(tern_bin, tiny_model, tmp_path, "pp-tg", "-p", 8, "-n", 2, "-r", 1, "--quantization", "q8_0")
    assert j["quantization"] == "q8_0" and j["weights_dtype"] == "Q8_0"
    assert "(Q8_0 weights)" in text


def test_scenarios_refuse_flags_they_would_not_use(tern_bin, tiny_model):
    for scenario, flag, value in (("pp-tg", "--concurrency", 4), ("pp-tg", "--temperature", 0.8),
                                  ("pp-tg", "--max-num-seqs", 8), ("pp-tg", "--kv-cache-memory", "1GiB"),
                                  ("offline", "-r", 3), ("conc", "--n-gen", 16)):
        r = run_tern(tern_bin, "bench", scenario, flag, value, "--model", tiny_model, "--device", "cpu")
        assert r.returncode != 0, (scenario, flag)
        assert f"bench {scenario} does not use it".encode() in r.stderr, r.stderr


def test_offline_reports_speculative_drafts(tern_bin, tiny_model, tmp_path):
    """With --speculate, the JSON and the summary say how many drafts were verified and accepted (the tiny
    model's greedy output repeats itself, so its lookups find drafts)."""
    j, text = bench_json(tern_bin, tiny_model, tmp_path, "offline", "--num-requests", 2, "--input-min", 8,
                         "--input-max", 16, "--output-min", 48, "--output-max", 48, "--speculate", 4)
    assert j["output_tokens"] == 2 * 48
    assert 0 < j["spec_accepted_tokens"] <= j["spec_draft_tokens"], j
    assert "speculative decoding: " in text and " accepted (" in text, text
    plain, _ = bench_json(tern_bin, tiny_model, tmp_path, "offline", "--num-requests", 2, "--input-min", 8,
                          "--input-max", 16, "--output-min", 48, "--output-max", 48)
    assert plain["spec_draft_tokens"] == 0 and plain["steps"] > j["steps"], (plain["steps"], j["steps"])
