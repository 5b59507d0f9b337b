"""The `tern` Python package (python/tern) on the tiny model: vLLM-shaped outputs with the HF goldens' greedy
tokens and `tern generate`'s, batching equal to one prompt at a time, streaming and cancellation, and a clear
exception for every bad argument. Uses the libtern of the build under test (TERN_LIBRARY, else the one
beside TERN_BIN's bin/ folder) and the package from python/ unless one is installed."""

import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TINY = DATA / "ernie-tiny"
TERN_BIN = os.environ.get("TERN_BIN", str(ROOT / "build" / "bin" / "tern"))
os.environ.setdefault("TERN_LIBRARY", str(pathlib.Path(TERN_BIN).resolve().parents[1] / "lib" / "libtern.so"))
if not os.path.exists(os.environ["TERN_LIBRARY"]):
    pytest.fail(f"libtern not found at {os.environ['TERN_LIBRARY']}; build first or set TERN_LIBRARY",
                pytrace=False)
sys.path.insert(0, str(ROOT / "python"))

import tern  # noqa: E402
from tern import LLM, SamplingParams, TernError, TernNotFoundError, TernValueError  # noqa: E402

GOLDEN = json.loads((TINY / "golden.json").read_text(encoding="utf-8"))
PLAIN_PROMPTS = [p for p in GOLDEN["prompts"] if not p["chat"]]


@pytest.fixture(scope="module")
def llm():
    # The exact kernels: the tiny random model's greedy margins are below bf16 rounding.
    with LLM(model=str(TINY), device="cpu", kv_cache_memory="64MiB", max_model_len=512,
             cpu_kernels="optimized") as model:
        yield model


def greedy(max_tokens=20, **kw):
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, **kw)


def test_the_package_is_the_one_under_test():
    assert pathlib.Path(tern.__file__).resolve().parent == ROOT / "python" / "tern"
    assert tern.__version__ == "0.1.0"


def test_greedy_tokens_match_transformers_and_tern_generate(llm):
    outputs = llm.generate([p["text"] for p in PLAIN_PROMPTS], greedy())
    assert len(outputs) == len(PLAIN_PROMPTS)
    for p, out in zip(PLAIN_PROMPTS, outputs):
        assert out.prompt == p["text"]
        assert out.prompt_token_ids == p["ids"]
        assert out.finished
        (sample,) = out.outputs
        assert sample.token_ids == p["greedy"], p["name"]
        assert sample.finish_reason == "length"
        assert sample.text == llm.detokenize(sample.token_ids)
    p = PLAIN_PROMPTS[0]
    r = subprocess.run([TERN_BIN, "generate", "--model", str(TINY), "--prompt", p["text"], "--json",
                        "--max-tokens", "20", "--temperature", "0", "--ignore-eos", "--device", "cpu",
                        "--cpu-kernels", "optimized"],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    cli = json.loads(r.stdout)
    assert cli["token_ids"] == outputs[0].outputs[0].token_ids
    assert cli["text"] == outputs[0].outputs[0].text


def test_speculative_config_keeps_the_outputs(llm):
    """vLLM's speculative_config (a dict, or its JSON) turns on prompt lookup: the same greedy and seeded
    outputs as the model without it; a method other than ngram is refused with the engine's message."""
    prompts = [p["text"] * 2 for p in PLAIN_PROMPTS if len(p["ids"]) < 100]
    assert prompts
    params = [greedy(40), SamplingParams(temperature=0.8, seed=3, max_tokens=40, ignore_eos=True)]
    want = [[o.outputs[0].token_ids for o in llm.generate(prompts, sp)] for sp in params]
    for config in ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1},
                   '{"method": "ngram", "num_speculative_tokens": 2}'):
        with LLM(model=str(TINY), device="cpu", kv_cache_memory="64MiB", max_model_len=512,
                 cpu_kernels="optimized", speculative_config=config) as spec:
            got = [[o.outputs[0].token_ids for o in spec.generate(prompts, sp)] for sp in params]
        assert got == want
    with pytest.raises(TernValueError, match='method must be "ngram"'):
        LLM(model=str(TINY), device="cpu", speculative_config={"method": "eagle", "num_speculative_tokens": 2})


def test_a_batch_equals_one_prompt_at_a_time(llm):
    prompts = [p["text"] for p in PLAIN_PROMPTS] * 4
    batched = llm.generate(prompts, greedy(12))
    for prompt, out in zip(prompts, batched):
        alone = llm.generate(prompt, greedy(12))[0]
        assert out.outputs[0].token_ids == alone.outputs[0].token_ids
        assert out.outputs[0].text == alone.outputs[0].text
    # Token-id prompts and per-prompt sampling params.
    ids = [{"prompt_token_ids": p["ids"]} for p in PLAIN_PROMPTS]
    lengths = [3 + i for i in range(len(ids))]
    outs = llm.generate(ids, [greedy(n) for n in lengths])
    assert [len(o.outputs[0].token_ids) for o in outs] == lengths
    assert [o.outputs[0].token_ids for o in outs] == [p["greedy"][:n] for p, n in zip(PLAIN_PROMPTS, lengths)]


def test_chat_uses_the_template_like_transformers(llm):
    case = GOLDEN["chat"][0]
    out = llm.chat(case["messages"], greedy(5))[0]
    assert out.prompt == case["rendered"]
    assert out.prompt_token_ids == case["ids"]
    golden_chat = next(p for p in GOLDEN["prompts"] if p["name"] == "chat_zh")
    question = "请介绍一下你自己。"
    r = subprocess.run([TERN_BIN, "generate", "--model", str(TINY), "--prompt", question, "--chat", "--json",
                        "--max-tokens", "5", "--temperature", "0", "--ignore-eos", "--device", "cpu"],
                       capture_output=True, timeout=120)
    cli = json.loads(r.stdout)
    assert cli["prompt_token_ids"] == golden_chat["ids"]
    mine = llm.chat([{"role": "user", "content": question}], greedy(5))[0]
    assert mine.prompt_token_ids == cli["prompt_token_ids"]
    assert mine.outputs[0].token_ids == cli["token_ids"] == golden_chat["greedy"][:5]
    two = llm.chat([case["messages"], GOLDEN["chat"][1]["messages"]], greedy(3))
    assert [o.prompt_token_ids for o in two] == [case["ids"], GOLDEN["chat"][1]["ids"]]


def test_sampling_parameters_are_honoured(llm):
    prompt = PLAIN_PROMPTS[1]["text"]
    want = PLAIN_PROMPTS[1]["greedy"]
    seeded = SamplingParams(n=3, temperature=1.2, seed=7, max_tokens=8, ignore_eos=True)
    a, b = llm.generate(prompt, seeded)[0], llm.generate(prompt, seeded)[0]
    assert [o.index for o in a.outputs] == [0, 1, 2]
    assert [o.token_ids for o in a.outputs] == [o.token_ids for o in b.outputs]
    assert all(len(o.token_ids) == 8 for o in a.outputs)

    lp = llm.generate(prompt, greedy(4, logprobs=2))[0].outputs[0]
    assert len(lp.logprobs) == 4
    for token, step in zip(lp.token_ids, lp.logprobs):
        assert step[token].rank == 1 and step[token].logprob <= 0
        assert len(step) == 2
    assert lp.cumulative_logprob == pytest.approx(sum(s[t].logprob for t, s in zip(lp.token_ids, lp.logprobs)))
    assert llm.generate(prompt, greedy(4))[0].outputs[0].logprobs is None

    # The first greedy token not seen before it ends the output when it is a stop token.
    j = next(i for i in range(1, len(want)) if want[i] not in want[:i])
    stopped = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[want[j]]))
    assert stopped[0].outputs[0].token_ids == want[:j + 1]
    assert stopped[0].outputs[0].finish_reason == "stop"
    assert stopped[0].outputs[0].stop_reason == want[j]

    text = llm.generate(prompt, greedy(20))[0].outputs[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = llm.generate(prompt, greedy(20, stop=stop))[0].outputs[0]
    assert cut.text == text[:text.index(stop)]
    assert cut.finish_reason == "stop" and cut.stop_reason == stop

    biased = llm.generate(prompt, greedy(1, logit_bias={want[0]: -100}))[0].outputs[0]
    assert biased.token_ids[0] != want[0]
    full = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))[0]
    assert len(full.outputs[0].token_ids) == llm.max_model_len - len(PLAIN_PROMPTS[1]["ids"])


def test_default_sampling_params_come_from_generation_config(llm):
    d = llm.get_default_sampling_params()
    assert (d.temperature, d.top_p) == (0.8, 0.8)
    assert SamplingParams().temperature == 1.0 and SamplingParams().max_tokens == 16


def test_streaming_yields_the_same_text_in_pieces(llm):
    prompt = PLAIN_PROMPTS[0]
    pieces = list(llm.stream(prompt["text"], greedy(20)))
    assert len(pieces) > 1
    assert [t for p in pieces for t in p.token_ids] == prompt["greedy"]
    assert "".join(p.text for p in pieces) == llm.generate(prompt["text"], greedy(20))[0].outputs[0].text
    assert pieces[-1].finished and pieces[-1].finish_reason == "length"
    assert not any(p.finished for p in pieces[:-1])
    chat = list(llm.stream([{"role": "user", "content": "请介绍一下你自己。"}], greedy(3)))
    assert [t for p in chat for t in p.token_ids] == next(
        p for p in GOLDEN["prompts"] if p["name"] == "chat_zh")["greedy"][:3]


def test_cancelling_a_stream_ends_it_with_abort(llm):
    stream = llm.stream(PLAIN_PROMPTS[0]["text"], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))
    first = next(stream)
    assert not first.finished
    stream.cancel()
    rest = list(stream)
    assert rest[-1].finished and rest[-1].finish_reason == "abort"
    assert rest[-1].completion_tokens < llm.max_model_len // 2
    # Leaving a stream early cancels it; the engine goes on serving others.
    with llm.stream(PLAIN_PROMPTS[0]["text"], SamplingParams(temperature=0, max_tokens=None)) as s:
        next(s)
    assert llm.generate(PLAIN_PROMPTS[0]["text"], greedy(3))[0].outputs[0].token_ids == PLAIN_PROMPTS[0]["greedy"][:3]


def test_many_python_threads_share_one_llm(llm):
    prompt = PLAIN_PROMPTS[2]
    results, errors = [], []

    def work():
        try:
            results.append(llm.generate(prompt["text"], greedy(20))[0].outputs[0].token_ids)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [prompt["greedy"]] * 6


@pytest.mark.parametrize("params, exception, message", [
    (SamplingParams(temperature=-1), TernValueError, "temperature must be non-negative, got -1.0."),
    (SamplingParams(top_p=0), TernValueError, "top_p"),
    (SamplingParams(n=0), TernValueError, "n must be between 1 and 128"),
    (SamplingParams(logprobs=21), TernValueError, "logprobs"),
    (SamplingParams(max_tokens=0), TernValueError, "max_tokens"),
    (SamplingParams(max_tokens=10**6), TernValueError, "maximum context length"),
    (SamplingParams(min_tokens=-1), TernValueError, "min_tokens"),
    (SamplingParams(stop=["a"] * 17), TernValueError, "stop"),
    (SamplingParams(stop_token_ids=[-4]), TernValueError, "stop_token_ids"),
    (SamplingParams(logit_bias={10**6: 1.0}), TernValueError, "logit_bias"),
    (SamplingParams(seed=-1), TernValueError, "seed"),
    (SamplingParams(stop=[3]), TypeError, "stop"),
    (SamplingParams(temperature="hot"), TypeError, "temperature"),
])
def test_bad_sampling_parameters_raise_with_the_engines_message(llm, params, exception, message):
    with pytest.raises(exception, match=None) as info:
        llm.generate("你好", params)
    assert message in str(info.value)
    if isinstance(info.value, TernError):
        assert info.value.status == "invalid argument" or info.value.status == "out of range"


def test_bad_arguments_raise_clear_exceptions(llm, tmp_path):
    with pytest.raises(TernNotFoundError, match=str(tmp_path / "missing")):
        LLM(model=str(tmp_path / "missing"), device="cpu")
    with pytest.raises(TernValueError, match="device must be auto, cpu or cuda, not 'tpu'"):
        LLM(model=str(TINY), device="tpu")
    with pytest.raises(TernValueError, match="block_size"):
        LLM(model=str(TINY), device="cpu", block_size=100000)
    with pytest.raises(ValueError, match="kv_cache_memory"):
        LLM(model=str(TINY), device="cpu", kv_cache_memory="lots")
    with pytest.raises(TypeError, match="unexpected keyword argument 'best_of'"):
        SamplingParams(best_of=2)
    with pytest.raises(TypeError, match="prompt"):
        llm.generate([[1, 2, 3]], greedy(2))
    with pytest.raises(TernValueError, match="prompt_ids"):
        llm.generate({"prompt_token_ids": [llm.vocab_size]}, greedy(2))
    with pytest.raises(TernValueError, match="empty"):
        llm.generate({"prompt_token_ids": []}, greedy(2))
    with pytest.raises(ValueError, match="2 sampling params for 1 prompts"):
        llm.generate(["a"], [greedy(1), greedy(1)])
    with pytest.raises(TypeError, match="role"):
        llm.chat([{"content": "hi"}])
    with pytest.raises(TernValueError, match="needs content"):
        llm.chat([{"role": "user"}])
    with pytest.raises(TernValueError, match="ids"):
        llm.detokenize([-1])
    with pytest.raises(TernValueError, match="level"):
        tern.set_log_level("loud")
    closed = LLM(model=str(TINY), device="cpu", kv_cache_memory="16MiB")
    closed.close()
    with pytest.raises(TernValueError, match="closed"):
        closed.generate("a", greedy(1))


def test_a_failed_batch_cancels_what_it_submitted(llm):
    with pytest.raises(TernValueError, match="temperature"):
        llm.generate(["a", "b", "c"], [greedy(None), greedy(None), SamplingParams(temperature=-1)])
    # The first two were cancelled and freed: the engine is idle again and serves the next batch at once.
    assert llm.generate("a", greedy(2))[0].outputs[0].finish_reason == "length"
