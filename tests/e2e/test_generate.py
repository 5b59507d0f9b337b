"""`tern generate` end to end: the real binary on the tiny models, checked
against HF transformers' goldens, plus the errors a user sees for bad models."""

import json
import re
import shutil

import pytest

from conftest import DATA, run_tern

STOP_IDS = {2}  # </s>; <|end_of_sentence|> is looked up from the golden tokenizer


def generate_json(tern_bin, model, prompt, *extra):
    r = run_tern(tern_bin, "generate", "--model", model, "--prompt", prompt, "--json", *extra)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def expected_greedy(golden_prompt, stop_ids):
    out = []
    for t in golden_prompt["greedy"]:
        out.append(t)
        if t in stop_ids:
            return out, "stop"
    return out, "length"


@pytest.mark.parametrize("model", ["ernie-tiny", "ernie-tiny-untied"])
def test_greedy_matches_transformers(tern_bin, model):
    golden = json.loads((DATA / model / "golden.json").read_text(encoding="utf-8"))
    stop_ids = STOP_IDS | {golden_sep_id(golden)}
    for p in golden["prompts"]:
        if p["chat"]:
            continue
        # The exact kernels: the tiny random models' greedy margins are below bf16 rounding.
        out = generate_json(tern_bin, DATA / model, p["text"], "--max-tokens", 20, "--temperature", 0,
                            "--cpu-kernels", "optimized")
        assert out["prompt_token_ids"] == p["ids"], p["name"]
        want, reason = expected_greedy(p, stop_ids)
        assert out["token_ids"] == want, p["name"]
        assert out["finish_reason"] == reason


def golden_sep_id(golden):
    for t in golden["tokenizer"]:
        if t["text"] == "<|begin_of_sentence|><|end_of_sentence|>":
            return t["ids"][1]
    raise AssertionError("golden lacks the special-token case")


def test_ignore_eos_runs_to_max_tokens(tern_bin, tiny_model, tiny_golden):
    p = tiny_golden["prompts"][0]
    out = generate_json(tern_bin, tiny_model, p["text"], "--max-tokens", 20, "--temperature", 0, "--ignore-eos")
    assert out["token_ids"] == p["greedy"]
    assert out["finish_reason"] == "length"


def test_chat_flag_applies_the_template(tern_bin, tiny_model, tiny_golden):
    p = next(p for p in tiny_golden["prompts"] if p["name"] == "chat_zh")
    out = generate_json(tern_bin, tiny_model, "请介绍一下你自己。", "--chat", "--max-tokens", 5, "--temperature", 0,
                        "--ignore-eos")
    assert out["prompt_token_ids"] == p["ids"]
    assert out["token_ids"] == p["greedy"][:5]


def test_seeded_sampling_is_reproducible(tern_bin, tiny_model):
    a = generate_json(tern_bin, tiny_model, "今天", "--max-tokens", 24, "--seed", 7, "--temperature", 1.0,
                      "--ignore-eos")
    b = generate_json(tern_bin, tiny_model, "今天", "--max-tokens", 24, "--seed", 7, "--temperature", 1.0,
                      "--ignore-eos")
    c = generate_json(tern_bin, tiny_model, "今天", "--max-tokens", 24, "--seed", 8, "--temperature", 1.0,
                      "--ignore-eos")
    assert a["token_ids"] == b["token_ids"]
    assert a["token_ids"] != c["token_ids"]


def test_streamed_text_equals_json_text(tern_bin, tiny_model):
    args = ["--model", tiny_model, "--prompt", "你好", "--max-tokens", 30, "--temperature", 0, "--ignore-eos"]
    streamed = run_tern(tern_bin, "generate", *args)
    assert streamed.returncode == 0, streamed.stderr.decode()
    text = streamed.stdout.decode("utf-8")
    assert "\ufffd" not in text
    j = generate_json(tern_bin, tiny_model, "你好", "--max-tokens", 30, "--temperature", 0, "--ignore-eos")
    assert text == j["text"] + "\n"


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def expect_failure(tern_bin, model, *needles):
    r = run_tern(tern_bin, "generate", "--model", model, "--prompt", "hi", "--max-tokens", 2)
    err = r.stderr.decode()
    assert r.returncode == 1, f"exit {r.returncode}: {err}"  # 1 = clean error, not a signal
    for n in needles:
        assert n in err, err
    return err


def test_missing_model_folder(tern_bin, tmp_path):
    expect_failure(tern_bin, tmp_path / "nope", "nope")


def test_truncated_weights(tern_bin, tmp_path, tiny_model):
    m = copy_model(tiny_model, tmp_path / "m")
    data = (m / "model.safetensors").read_bytes()
    (m / "model.safetensors").write_bytes(data[: len(data) // 2])
    expect_failure(tern_bin, m, "model.safetensors")


def test_garbage_header(tern_bin, tmp_path, tiny_model):
    m = copy_model(tiny_model, tmp_path / "m")
    (m / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    expect_failure(tern_bin, m, "model.safetensors")


def test_wrong_shape_names_the_tensor(tern_bin, tmp_path, tiny_model):
    m = copy_model(tiny_model, tmp_path / "m")
    cfg = json.loads((m / "config.json").read_text())
    cfg["intermediate_size"] = cfg["intermediate_size"] * 2
    (m / "config.json").write_text(json.dumps(cfg))
    expect_failure(tern_bin, m, "gate_proj", "expected")


def test_unknown_architecture(tern_bin, tmp_path, tiny_model):
    m = copy_model(tiny_model, tmp_path / "m")
    cfg = json.loads((m / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["model_type"] = "llama"
    (m / "config.json").write_text(json.dumps(cfg))
    expect_failure(tern_bin, m, "LlamaForCausalLM")


def test_missing_tokenizer(tern_bin, tmp_path, tiny_model):
    m = copy_model(tiny_model, tmp_path / "m")
    (m / "tokenizer.model").unlink()
    expect_failure(tern_bin, m, "tokenizer.model")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--device", "cpu", "--gpu-memory-utilization", "0.5"], "on the CPU use --kv-cache-memory"),
        (["--kv-cache-memory", "1GiB", "--gpu-memory-utilization", "0.5"], "not both"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
        (["--device", "cpu", "--kv-cache-memory", "1KiB"], "raise --kv-cache-memory"),
        (["--device", "cpu", "--kv-cache-memory", "512KiB", "--max-model-len", "4096"], "--max-model-len 4096"),
    ],
)
def test_kv_cache_sizing_errors_name_the_flag(tern_bin, tiny_model, flags, message):
    r = run_tern(tern_bin, "generate", "--model", tiny_model, "--prompt", "hi", "--max-tokens", 2, *flags)
    assert r.returncode != 0
    assert message in r.stderr.decode(), r.stderr.decode()


@pytest.mark.parametrize("mix", ["q8_0", "Q4_0", "fp8"])
def test_quantization_at_load_generates(tern_bin, tiny_model, mix):
    plain = run_tern(tern_bin, "generate", "--model", tiny_model, "--device", "cpu", "--prompt", "hi",
                     "--max-tokens", 6, "--temperature", 0, "--ignore-eos", "--json")
    quant = run_tern(tern_bin, "generate", "--model", tiny_model, "--device", "cpu", "--prompt", "hi",
                     "--max-tokens", 6, "--temperature", 0, "--ignore-eos", "--json", "--quantization", mix)
    assert plain.returncode == 0 and quant.returncode == 0, quant.stderr.decode()
    a, b = json.loads(plain.stdout.decode().splitlines()[-1]), json.loads(quant.stdout.decode().splitlines()[-1])
    assert len(b["token_ids"]) == 6 and b["prompt_token_ids"] == a["prompt_token_ids"]


def test_quantize_lm_head(tern_bin, tiny_model):
    """--quantize-lm-head (TERN_QUANTIZE_LM_HEAD) is listed in --help and generates beside --quantization fp8
    and beside the float layers (on the CPU the reference's FP8 head); with a llama-quantize mix, which gives the
    head its own type, it is refused with a message naming both flags."""
    help_text = run_tern(tern_bin, "serve", "--help").stdout.decode()
    assert "--quantize-lm-head" in help_text and "TERN_QUANTIZE_LM_HEAD" in help_text
    args = ("--model", tiny_model, "--device", "cpu", "--prompt", "hi", "--max-tokens", 6, "--temperature", 0,
            "--ignore-eos", "--json")
    for flags in (("--quantization", "fp8"), ()):
        ok = run_tern(tern_bin, "generate", *args, *flags, "--quantize-lm-head")
        assert ok.returncode == 0, ok.stderr.decode()
        assert len(json.loads(ok.stdout.decode().splitlines()[-1])["token_ids"]) == 6
    bad = run_tern(tern_bin, "generate", *args, "--quantization", "q8_0", "--quantize-lm-head")
    err = bad.stderr.decode()
    assert bad.returncode != 0 and "--quantize-lm-head" in err and "--quantization q8_0" in err, err


def test_quantization_at_load_frees_its_rows_and_matches_the_quantized_file(tern_bin, tiny_model, tmp_path):
    """--quantization q4_0 on the CPU: the rows it quantized in memory are freed once the packed copies
    serve the kernels (logged), and the greedy tokens are those of `tern quantize`'s Q4_0 file made from
    the same f32 values."""
    f32, q4 = tmp_path / "f32.gguf", tmp_path / "q4_0.gguf"
    assert run_tern(tern_bin, "convert", "--model", tiny_model, "--outfile", f32, "--outtype", "f32").returncode == 0
    assert run_tern(tern_bin, "quantize", f32, q4, "Q4_0").returncode == 0
    args = ("--device", "cpu", "--prompt", "hi", "--max-tokens", 8, "--temperature", 0, "--ignore-eos", "--json",
            "--log-level", "info")
    at_load = run_tern(tern_bin, "generate", "--model", tiny_model, "--quantization", "q4_0", *args)
    from_file = run_tern(tern_bin, "generate", "--model", q4, *args)
    assert at_load.returncode == 0 and from_file.returncode == 0, at_load.stderr.decode() + from_file.stderr.decode()
    assert re.search(r"--quantization: [\d.]+ MiB of quantized rows freed", at_load.stderr.decode())
    a = json.loads(at_load.stdout.decode().splitlines()[-1])
    b = json.loads(from_file.stdout.decode().splitlines()[-1])
    assert a["token_ids"] == b["token_ids"] and len(a["token_ids"]) == 8


def test_quantization_names_are_checked(tern_bin, tiny_model):
    r = run_tern(tern_bin, "generate", "--model", tiny_model, "--prompt", "hi", "--quantization", "q9")
    assert r.returncode != 0
    assert "q4_k_m" in r.stderr.decode()
