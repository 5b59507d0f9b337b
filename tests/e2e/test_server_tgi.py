"""TGI's routes (/generate, /generate_stream, /info, and the compat POST /
that the `text-generation` client posts to), against the real `tern serve`:
response and stream shapes, greedy-by-default, seeds, stop sequences,
return_full_text, and TGI's validation errors ({"error", "error_type"}, 422)."""

import json

import pytest
import text_generation
from text_generation.errors import ValidationError

pytest_plugins = ["server_fixture"]
# text-generation 0.7 calls pydantic's deprecated .dict().
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def generate(server, inputs="Once upon a time", path="/generate", **parameters):
    return server.post_json(path, {"inputs": inputs, "parameters": parameters})


def stream_events(server, inputs="Once upon a time", **parameters):
    """The `data:` payloads of /generate_stream, parsed, read over a raw socket."""
    status, headers, raw = server.request("POST", "/generate_stream",
                                          {"inputs": inputs, "parameters": parameters})
    assert status == 200, raw
    assert headers["content-type"].startswith("text/event-stream")
    text = raw.decode()
    assert text.endswith("\n\n")
    events = [e for e in text.split("\n\n") if e]
    assert all(e.startswith("data:") for e in events), events
    assert "[DONE]" not in text  # TGI streams end without a terminator
    return [json.loads(e[len("data:"):]) for e in events]


def test_generate_details(server):
    status, _, r = generate(server, max_new_tokens=6, details=True)
    assert status == 200, r
    d = r["details"]
    assert d["finish_reason"] in ("length", "eos_token")
    assert d["generated_tokens"] == len(d["tokens"]) <= 6
    assert d["seed"] is None  # greedy
    assert d["prefill"] == []
    for t in d["tokens"]:
        assert set(t) == {"id", "text", "logprob", "special"}
        assert isinstance(t["id"], int) and t["logprob"] <= 0 and isinstance(t["special"], bool)
    status, _, plain = generate(server, max_new_tokens=6)
    assert plain == {"generated_text": r["generated_text"]}  # greedy by default, no details unless asked


def test_generate_is_greedy_by_default(server):
    """TGI ignores generation_config.json: without do_sample or a warper the
    output is the greedy one (the tiny model's config asks for sampling)."""
    texts = {generate(server, max_new_tokens=12)[2]["generated_text"] for _ in range(3)}
    assert len(texts) == 1
    greedy = server.post_json("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 12,
                                                  "temperature": 0})[2]
    assert greedy["choices"][0]["text"].startswith(texts.pop())


def test_generate_sampling_seed(server):
    kw = dict(max_new_tokens=10, do_sample=True, seed=42, details=True)
    a, b = generate(server, **kw)[2], generate(server, **kw)[2]
    assert a["generated_text"] == b["generated_text"]
    assert a["details"]["seed"] == 42
    unseeded = generate(server, max_new_tokens=4, do_sample=True, details=True)[2]
    assert isinstance(unseeded["details"]["seed"], int)  # TGI reports the seed it drew


def test_generate_top_n_tokens(server):
    r = generate(server, max_new_tokens=4, details=True, top_n_tokens=3)[2]["details"]
    assert len(r["top_tokens"]) == len(r["tokens"])
    for tok, top in zip(r["tokens"], r["top_tokens"]):
        assert len(top) == 3
        assert tok["logprob"] == pytest.approx(top[0]["logprob"])  # greedy picks the best


def test_generate_stop_sequence(server):
    base = generate(server, max_new_tokens=40)[2]["generated_text"]
    visible = [i for i, ch in enumerate(base) if not ch.isspace()]
    start = visible[len(visible) // 2]
    stop = base[start:start + 2]
    r = generate(server, max_new_tokens=40, stop=[stop], details=True)[2]
    assert r["details"]["finish_reason"] == "stop_sequence"
    assert r["generated_text"] == base[:base.find(stop)]


def test_generate_return_full_text(server):
    plain = generate(server, "Hello there", max_new_tokens=5)[2]["generated_text"]
    full = generate(server, "Hello there", max_new_tokens=5, return_full_text=True)[2]["generated_text"]
    assert full == "Hello there" + plain


def test_generate_truncate_keeps_the_end(server):
    _, _, ids = server.post_json("/tokenize", {"prompt": "one two three four five six seven"})
    _, _, tail = server.post_json("/detokenize", {"tokens": ids["tokens"][-3:]})
    a = generate(server, "one two three four five six seven", max_new_tokens=5, truncate=3)[2]
    b = server.post_json("/v1/completions", {"prompt": ids["tokens"][-3:], "max_tokens": 5, "temperature": 0})[2]
    assert a["generated_text"] == b["choices"][0]["text"], tail


def test_generate_stream_matches_generate(server):
    kw = dict(max_new_tokens=8, details=True)
    whole = generate(server, **kw)[2]
    events = stream_events(server, **kw)
    *tokens, last = events
    assert all(e["generated_text"] is None and e["details"] is None for e in tokens)
    assert last["generated_text"] == whole["generated_text"]
    assert last["details"]["finish_reason"] == whole["details"]["finish_reason"]
    assert last["details"]["generated_tokens"] == len(events) == whole["details"]["generated_tokens"]
    assert [e["token"] for e in events] == whole["details"]["tokens"]
    assert [e["index"] for e in events] == list(range(len(events)))


def test_generate_stream_full_text_and_seed(server):
    events = stream_events(server, "Hi", max_new_tokens=4, do_sample=True, seed=7, return_full_text=True)
    last = events[-1]
    assert last["generated_text"].startswith("Hi")
    assert last["details"]["seed"] == 7


@pytest.mark.parametrize("params,fragment", [
    ({"temperature": 0}, "`temperature` must be strictly positive"),
    ({"top_p": 1.0}, "`top_p` must be > 0.0 and < 1.0"),
    ({"top_k": 0}, "`top_k` must be strictly positive"),
    ({"max_new_tokens": 0}, "`max_new_tokens` must be strictly positive"),
    ({"repetition_penalty": 0}, "`repetition_penalty` must be strictly positive"),
    ({"frequency_penalty": 3}, "`frequency_penalty` must be >= -2.0 and <= 2.0"),
    ({"best_of": 2}, "`best_of` must be > 0 and <= 1"),
    ({"typical_p": 0.5}, "typical_p"),
    ({"max_new_tokens": 5000}, "must be <= 4096"),
    ({"temperature": "hot"}, "parameters.temperature"),
    ({"stop": "x"}, "parameters.stop"),
    ({"watermark": True}, "`watermark` is not supported"),
    ({"adapter_id": "my-lora"}, "`adapter_id` names a LoRA adapter"),
])
def test_validation_errors(server, params, fragment):
    for path in ("/generate", "/generate_stream"):
        status, _, r = generate(server, path=path, **params)
        assert status == 422, (path, r)
        assert r["error_type"] == "validation"
        assert fragment in r["error"]


def test_body_errors(server):
    status, _, r = server.post_json("/generate", {"inputs": ""})
    assert status == 422 and "`inputs` cannot be empty" in r["error"]
    status, _, r = server.post_json("/generate", {"parameters": {}})
    assert status == 422 and "inputs" in r["error"] and r["error_type"] == "validation"
    status, _, r = server.post_json("/generate", {"inputs": "x " * 5000})
    assert status == 422 and "must have less than 4095 tokens" in r["error"]
    status, _, raw = server.request("POST", "/generate", b"{not json")
    r = json.loads(raw)
    assert status == 400 and set(r) == {"error", "error_type"}


def test_info(server):
    status, _, raw = server.get("/info")
    info = json.loads(raw)
    assert status == 200
    assert info["model_id"] == "ernie-tiny"
    assert info["max_total_tokens"] == 4096 and info["max_input_tokens"] == 4095
    assert info["router"] == "tern" and info["version"]
    assert info["model_dtype"] == "torch.bfloat16"
    assert info["max_best_of"] == 1


# --- the text-generation client (it posts to TGI's compat route, POST /) ----

def test_client_generate(server):
    client = text_generation.Client(server.url, timeout=60)
    r = client.generate("Once upon a time", max_new_tokens=6)
    assert r.details.finish_reason in (text_generation.types.FinishReason.Length,
                                       text_generation.types.FinishReason.EndOfSequenceToken)
    assert r.details.generated_tokens == len(r.details.tokens) <= 6
    assert r.generated_text == generate(server, max_new_tokens=6)[2]["generated_text"]
    seeded = client.generate("Once upon a time", max_new_tokens=6, do_sample=True, seed=3)
    assert seeded.details.seed == 3
    assert client.generate("Once upon a time", max_new_tokens=6, do_sample=True, seed=3).generated_text == \
        seeded.generated_text


def test_client_generate_stream(server):
    client = text_generation.Client(server.url, timeout=60)
    responses = list(client.generate_stream("Once upon a time", max_new_tokens=6))
    assert responses[-1].details is not None and responses[-1].generated_text is not None
    assert all(r.details is None for r in responses[:-1])
    assert responses[-1].generated_text == generate(server, max_new_tokens=6)[2]["generated_text"]
    # The same client pointed at /generate_stream itself (it posts to its base URL).
    direct = list(text_generation.Client(server.url + "/generate_stream").generate_stream("Once upon a time",
                                                                                         max_new_tokens=6))
    assert [r.token.id for r in direct] == [r.token.id for r in responses]


def test_client_validation_error(server):
    client = text_generation.Client(server.url)
    with pytest.raises(ValidationError):
        client.generate("Hello", max_new_tokens=5000)
    with pytest.raises(ValidationError):
        list(client.generate_stream("Hello", max_new_tokens=5000))
