"""GGUF end to end: `tern convert` writes the tiny models into GGUF files that
gguf-py (llama.cpp's own Python reader) reads with the keys, value types,
tensor names, shapes and types llama.cpp's convert_hf_to_gguf.py writes for
ERNIE 4.5; then `tern generate` and `tern serve` (through the official openai
client) on the .gguf answer exactly as on the Hugging Face folder."""

import json
import sys

import numpy as np
import openai
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from conftest import DATA, ROOT, run_tern
from server_fixture import TernServer

sys.path.insert(0, str(ROOT / "tools"))
import quantize_awq  # noqa: E402  (its safetensors reader)

MODELS = ["ernie-tiny", "ernie-tiny-untied"]
OUTTYPES = {"f32": GGMLQuantizationType.F32, "f16": GGMLQuantizationType.F16, "bf16": GGMLQuantizationType.BF16}
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32}  # llama_ftype ALL_F32, MOSTLY_F16, MOSTLY_BF16

# The keys llama.cpp's converter writes for these folders, in its order, with their types.
U32, F32, STR, BOOL, ARR, I32 = (GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING,
                                 GGUFValueType.BOOL, GGUFValueType.ARRAY, GGUFValueType.INT32)
EXPECTED_KEYS = [
    ("general.architecture", STR), ("general.type", STR), ("general.sampling.top_p", F32),
    ("general.sampling.temp", F32), ("general.sampling.penalty_repeat", F32), ("general.name", STR),
    ("general.size_label", STR), ("ernie4_5.block_count", U32), ("ernie4_5.context_length", U32),
    ("ernie4_5.embedding_length", U32), ("ernie4_5.feed_forward_length", U32), ("ernie4_5.attention.head_count", U32),
    ("ernie4_5.attention.head_count_kv", U32), ("ernie4_5.rope.freq_base", F32),
    ("ernie4_5.attention.layer_norm_rms_epsilon", F32), ("ernie4_5.attention.key_length", U32),
    ("ernie4_5.attention.value_length", U32), ("general.file_type", U32), ("general.quantization_version", U32),
    ("tokenizer.ggml.model", STR), ("tokenizer.ggml.pre", STR), ("tokenizer.ggml.tokens", ARR),
    ("tokenizer.ggml.scores", ARR), ("tokenizer.ggml.token_type", ARR), ("tokenizer.ggml.bos_token_id", U32),
    ("tokenizer.ggml.eos_token_id", U32), ("tokenizer.ggml.padding_token_id", U32),
    ("tokenizer.ggml.add_bos_token", BOOL), ("tokenizer.ggml.add_eos_token", BOOL), ("tokenizer.chat_template", STR),
    ("tokenizer.ggml.add_space_prefix", BOOL),
]
# HF name (after "model.layers.N.") -> llama.cpp name (after "blk.N.").
LAYER_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def read_safetensors_bf16(path):
    """{name: float32 array} of a bf16 safetensors file (numpy has no bf16)."""
    tensors = quantize_awq.read_safetensors(path)
    assert all(dtype == "BF16" for dtype, _, _ in tensors.values())
    return {name: quantize_awq.to_f32(*t) for name, t in tensors.items()}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    assert parts[:2] == ["model", "layers"] and parts[-1] == "weight", hf
    return f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:-1])]}.weight"


def convert(tern_bin, model, outtype, out):
    r = run_tern(tern_bin, "convert", "--model", DATA / model, "--outfile", out, "--outtype", outtype)
    assert r.returncode == 0, r.stderr.decode()
    assert out.exists()
    return out


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="module")
def converted(tern_bin, gguf_dir):
    """(model, outtype) -> path of its GGUF, converted once per module."""
    cache = {}

    def get(model, outtype):
        if (model, outtype) not in cache:
            cache[(model, outtype)] = convert(tern_bin, model, outtype, gguf_dir / f"{model}-{outtype}.gguf")
        return cache[(model, outtype)]

    return get


def field_value(field):
    return field.contents()


@pytest.mark.parametrize("outtype", OUTTYPES)
@pytest.mark.parametrize("model", MODELS)
def test_gguf_py_reads_what_llama_cpp_converter_writes(converted, model, outtype):
    reader = GGUFReader(converted(model, outtype))
    config = json.loads((DATA / model / "config.json").read_text())
    tok_config = json.loads((DATA / model / "tokenizer_config.json").read_text())
    keys = [(name, f.types[0]) for name, f in reader.fields.items() if not name.startswith("GGUF.")]
    assert keys == EXPECTED_KEYS

    value = {name: field_value(f) for name, f in reader.fields.items()}
    assert value["general.architecture"] == "ernie4_5"
    assert value["general.type"] == "model"
    assert value["general.name"] == " ".join(w.title() for w in model.split("-"))  # the converter's title
    assert value["ernie4_5.block_count"] == config["num_hidden_layers"]
    assert value["ernie4_5.context_length"] == config["max_position_embeddings"]
    assert value["ernie4_5.embedding_length"] == config["hidden_size"]
    assert value["ernie4_5.feed_forward_length"] == config["intermediate_size"]
    assert value["ernie4_5.attention.head_count"] == config["num_attention_heads"]
    assert value["ernie4_5.attention.head_count_kv"] == config["num_key_value_heads"]
    assert value["ernie4_5.attention.key_length"] == config["head_dim"]
    assert value["ernie4_5.attention.value_length"] == config["head_dim"]
    assert value["ernie4_5.rope.freq_base"] == pytest.approx(config["rope_parameters"]["rope_theta"])
    assert value["ernie4_5.attention.layer_norm_rms_epsilon"] == pytest.approx(config["rms_norm_eps"], rel=1e-6)
    assert value["general.file_type"] == FILE_TYPE[outtype]
    assert value["general.quantization_version"] == 2
    assert value["tokenizer.ggml.model"] == "llama"
    assert value["tokenizer.ggml.pre"] == "default"
    assert reader.fields["tokenizer.ggml.tokens"].types == [ARR, STR]
    assert reader.fields["tokenizer.ggml.scores"].types == [ARR, F32]
    assert reader.fields["tokenizer.ggml.token_type"].types == [ARR, I32]
    tokens = value["tokenizer.ggml.tokens"]
    assert len(tokens) == config["vocab_size"]
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[-1] == f"[PAD{config['vocab_size'] - 1}]"
    assert value["tokenizer.ggml.bos_token_id"] == config["bos_token_id"]
    assert value["tokenizer.ggml.eos_token_id"] == config["eos_token_id"]
    assert value["tokenizer.ggml.padding_token_id"] == config["pad_token_id"]
    assert value["tokenizer.ggml.add_bos_token"] is False
    assert value["tokenizer.chat_template"] == tok_config["chat_template"]

    # Tensors: llama.cpp's names, shapes in ggml order (ne0 = the input
    # width), norms F32, the rest the outtype, values the folder's rounded.
    source = read_safetensors_bf16(DATA / model / "model.safetensors")
    tensors = {t.name: t for t in reader.tensors}
    assert sorted(tensors) == sorted(gguf_name(n) for n in source)
    assert ("output.weight" in tensors) == (not config["tie_word_embeddings"])
    for hf, want in source.items():
        t = tensors[gguf_name(hf)]
        assert list(t.shape) == list(reversed(want.shape)), t.name
        is_norm = want.ndim == 1
        assert t.tensor_type == (GGMLQuantizationType.F32 if is_norm else OUTTYPES[outtype]), t.name
        got = np.asarray(t.data)
        if t.tensor_type == GGMLQuantizationType.F32:
            np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=t.name)
        elif t.tensor_type == GGMLQuantizationType.F16:
            np.testing.assert_array_equal(got.reshape(want.shape), want.astype(np.float16), err_msg=t.name)
        else:  # bf16 in, bf16 out: the same bits
            bits = np.frombuffer(got.tobytes(), dtype=np.uint16)
            np.testing.assert_array_equal(bits, (want.view(np.uint32) >> 16).astype(np.uint16).ravel(),
                                          err_msg=t.name)


def generate(tern_bin, model_path, prompt, *extra):
    r = run_tern(tern_bin, "generate", "--model", model_path, "--prompt", prompt, "--json", "--temperature", 0,
                 "--max-tokens", 20, *extra)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout), r.stderr.decode()


@pytest.mark.parametrize("outtype", ["f32", "bf16"])
@pytest.mark.parametrize("model", MODELS)
def test_generate_on_gguf_matches_the_folder(tern_bin, converted, model, outtype):
    path = converted(model, outtype)
    golden = json.loads((DATA / model / "golden.json").read_text(encoding="utf-8"))
    checked = 0
    # The golden prompts (chat ones already rendered), and one through --chat.
    cases = [(p["name"], p["text"], ()) for p in golden["prompts"]] + [("chat", "Hi  there\n你好", ("--chat",))]
    # The exact kernels on both: the default set rounds activations to bf16 for the folder's bf16
    # weights, not for an f32 file's, and the tiny models' greedy margins are below that rounding.
    extra_kernels = ("--cpu-kernels", "optimized")
    for name, prompt, extra in cases:
        extra = extra + extra_kernels
        want, _ = generate(tern_bin, DATA / model, prompt, *extra)
        got, log = generate(tern_bin, path, prompt, *extra, "--log-level", "info")
        assert got["prompt_token_ids"] == want["prompt_token_ids"], name
        assert got["token_ids"] == want["token_ids"], name
        assert got["text"] == want["text"], name
        assert got["finish_reason"] == want["finish_reason"], name
        assert "generation defaults from general.sampling" in log
        checked += 1
    assert checked == len(golden["prompts"]) + 1


def test_convert_errors_name_the_problem(tern_bin, tmp_path):
    r = run_tern(tern_bin, "convert", "--model", tmp_path / "nowhere", "--outfile", tmp_path / "x.gguf")
    assert r.returncode != 0
    assert "nowhere" in r.stderr.decode()
    assert not (tmp_path / "x.gguf").exists()
    r = run_tern(tern_bin, "convert", "--model", DATA / "ernie-tiny", "--outfile", tmp_path / "x.gguf",
                 "--outtype", "q4_k_m")
    assert r.returncode != 0
    assert "q4_k_m" in r.stderr.decode() and "tern quantize" in r.stderr.decode()
    assert not (tmp_path / "x.gguf").exists()


def test_generate_on_a_gguf_without_sampling_keys_says_so(tern_bin, converted, tmp_path):
    # A GGUF made without generation_config.json has no general.sampling.* keys.
    import gguf

    src = GGUFReader(converted("ernie-tiny", "f32"))
    out = tmp_path / "no-sampling.gguf"
    w = gguf.GGUFWriter(out, "ernie4_5")
    for name, f in src.fields.items():
        if name.startswith("GGUF.") or name.startswith("general.sampling.") or name == "general.architecture":
            continue
        if f.types[0] == ARR:
            w.add_key_value(name, f.contents(), ARR, sub_type=f.types[1])
        else:
            w.add_key_value(name, f.contents(), f.types[0])
    for t in src.tensors:
        w.add_tensor(t.name, np.asarray(t.data))  # f32: the numpy shape is ne reversed
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    got, log = generate(tern_bin, out, "Hello", "--log-level", "info")
    want, _ = generate(tern_bin, DATA / "ernie-tiny", "Hello")
    assert got["token_ids"] == want["token_ids"]
    assert "no generation defaults in the GGUF" in log


@pytest.mark.parametrize("model", MODELS)
def test_serve_gguf_answers_chat_completions_as_the_folder(converted, model):
    path = converted(model, "bf16")
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Tell me about   the sea.\n你好"}]
    answers = []
    for model_path in (DATA / model, path):
        server = TernServer(model=model_path)
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
            listed = [m.id for m in client.models.list().data]
            assert listed == [model_path.name]
            r = client.chat.completions.create(model=model_path.name, messages=messages, temperature=0,
                                               max_tokens=16)
            stream = client.chat.completions.create(model=model_path.name, messages=messages, temperature=0,
                                                    max_tokens=16, stream=True)
            streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            answers.append((r.choices[0].message.content, r.choices[0].finish_reason, r.usage.prompt_tokens,
                            r.usage.completion_tokens, streamed))
        finally:
            assert server.stop() == 0, server.logs()
    assert answers[0] == answers[1]
    assert answers[0][3] > 0


# ---- Quantized files: `tern convert --outtype q8_0` and `tern quantize`.

QTYPES = {"q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}  # llama_ftype ids
Q8_0, Q4_0 = GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0


def tiny_quant_type(qtype, t, tied):
    """What each type gives a tiny-model tensor, as llama-quantize gives it:
    rows of 64 and 192 (48 and 96 untied) fit no K-quant block, so Q4_K falls
    back to Q5_0, Q5_K to Q5_1 and Q6_K to Q8_0, and rows of 48 fit no block
    at all: F16. The output (the embedding when tied) is Q6_K under all but
    q8_0, which does not fit: Q8_0; so are attn_v and ffn_down of the last
    layer (of 3 tied, 2 untied) under the K mixes."""
    name = t.name
    if "norm" in name:
        return GGMLQuantizationType.F32
    if t.shape[0] % 32:
        return GGMLQuantizationType.F16
    is_output = name == "output.weight" or (tied and name == "token_embd.weight")
    if qtype == "q4_0":
        return Q8_0 if is_output else Q4_0
    if qtype not in ("q4_k_m", "q5_k_m"):
        return Q8_0
    last = 2 if tied else 1
    more_bits = name in (f"blk.{last}.attn_v.weight", f"blk.{last}.ffn_down.weight")
    if is_output or more_bits:
        return Q8_0
    return GGMLQuantizationType.Q5_0 if qtype == "q4_k_m" else GGMLQuantizationType.Q5_1


def quantize(tern_bin, src, out, qtype):
    r = run_tern(tern_bin, "quantize", src, out, qtype)
    assert r.returncode == 0, r.stderr.decode()
    assert out.exists()
    return r.stderr.decode()


@pytest.mark.parametrize("model", MODELS)
def test_convert_q8_0_then_quantize_q4_0_and_generate_on_each(tern_bin, converted, model, tmp_path):
    from gguf.quants import dequantize

    config = json.loads((DATA / model / "config.json").read_text())
    tied = config["tie_word_embeddings"]
    source = read_safetensors_bf16(DATA / model / "model.safetensors")
    q8 = converted(model, "q8_0")
    reader = GGUFReader(q8)
    keys = [(name, f.types[0]) for name, f in reader.fields.items() if not name.startswith("GGUF.")]
    assert keys == EXPECTED_KEYS
    assert reader.fields["general.file_type"].contents() == 7
    for hf, want in source.items():
        t = next(t for t in reader.tensors if t.name == gguf_name(hf))
        assert t.tensor_type == tiny_quant_type("q8_0", t, tied), t.name
        got = dequantize(np.asarray(t.data), t.tensor_type).reshape(want.shape)
        # Q8_0: at most half a step, max|x|/127/2 per block of 32, plus the fp16
        # rounding of the scale (2^-11 relative) times up to 127 steps; F16: 2^-11 relative.
        top = np.abs(want).max()
        tol = top * (0.5 / 127 + 2.0**-10) if t.tensor_type == Q8_0 else top * 2.0**-10
        np.testing.assert_allclose(got, want, rtol=0, atol=tol, err_msg=t.name)

    q4 = tmp_path / "q4_0.gguf"
    log = quantize(tern_bin, q8, q4, "q4_0")
    assert "Q4_0" in log
    reader = GGUFReader(q4)
    keys = [(name, f.types[0]) for name, f in reader.fields.items() if not name.startswith("GGUF.")]
    moved = [("general.quantization_version", U32), ("general.file_type", U32)]
    assert keys == [k for k in EXPECTED_KEYS if k not in moved] + moved  # where llama-quantize puts them
    assert reader.fields["general.file_type"].contents() == 2
    assert reader.fields["general.quantization_version"].contents() == 2
    for t in reader.tensors:
        assert t.tensor_type == tiny_quant_type("q4_0", t, tied), t.name

    want, _ = generate(tern_bin, DATA / model, "Hello")
    for path in (q8, q4):
        got, _ = generate(tern_bin, path, "Hello")
        assert got["prompt_token_ids"] == want["prompt_token_ids"]
        assert len(got["token_ids"]) > 0
        assert got["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize("qtype", QTYPES)
def test_quantize_writes_each_type_that_gguf_py_reads(tern_bin, converted, qtype, tmp_path):
    src = converted("ernie-tiny-untied", "bf16")
    out = tmp_path / f"{qtype}.gguf"
    quantize(tern_bin, src, out, qtype.upper() if qtype == "q4_k_m" else qtype)
    before, after = GGUFReader(src), GGUFReader(out)
    assert after.fields["general.file_type"].contents() == QTYPES[qtype]
    for name, f in before.fields.items():
        if name.startswith("GGUF.") or name in ("general.file_type", "general.quantization_version"):
            continue
        assert after.fields[name].contents() == f.contents(), name
    for t in after.tensors:
        assert t.tensor_type == tiny_quant_type(qtype, t, False), t.name
    got, _ = generate(tern_bin, out, "Hello")
    assert len(got["token_ids"]) > 0


def test_quantize_refusals_name_the_problem(tern_bin, converted, tmp_path):
    src = converted("ernie-tiny", "bf16")
    r = run_tern(tern_bin, "quantize", src, tmp_path / "x.gguf", "q3_k_m")
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "'q3_k_m'" in err and all(t in err for t in QTYPES), err
    r = run_tern(tern_bin, "quantize", tmp_path / "nowhere.gguf", tmp_path / "x.gguf", "q8_0")
    assert r.returncode != 0 and "nowhere.gguf" in r.stderr.decode()
    before = src.read_bytes()
    r = run_tern(tern_bin, "quantize", src, src, "q4_0")
    assert r.returncode != 0 and "is the input" in r.stderr.decode()
    assert src.read_bytes() == before
    assert not (tmp_path / "x.gguf").exists()
    r = run_tern(tern_bin, "quantize", "--help")
    assert r.returncode == 0
    assert all(f"{t} (file type {i})" in r.stdout.decode() for t, i in QTYPES.items()), r.stdout.decode()
