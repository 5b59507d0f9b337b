"""The OpenAI/vLLM routes through the official `openai` Python client, against
the real `tern serve` with the tiny model: chat and completions, streaming and
not, n > 1, stop strings, seeds, logprobs, echo, max_tokens and usage, and the
client's exception types for the server's errors."""

import openai
import pytest

pytest_plugins = ["server_fixture"]

MODEL = "ernie-tiny"
CHAT = [{"role": "user", "content": "Tell me a story about a lighthouse."}]
GREEDY = {"temperature": 0}
LONG = {"ignore_eos": True}  # the tiny model may emit eos early; length is then exact


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def chat(client, **kw):
    kw.setdefault("messages", CHAT)
    return client.chat.completions.create(model=MODEL, **kw)


def complete(client, **kw):
    kw.setdefault("prompt", "Once upon a time")
    return client.completions.create(model=MODEL, **kw)


def collect_chat_stream(stream):
    chunks = list(stream)
    texts = {}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
    return chunks, texts


# --- chat ---------------------------------------------------------------------

def test_chat_max_tokens_gives_length_and_usage(client, server):
    r = chat(client, max_tokens=7, extra_body=LONG, **GREEDY)
    assert r.object == "chat.completion" and r.model == MODEL
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0 and choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 7
    # The prompt is the rendered chat template: /tokenize counts it the same way.
    status, _, tok = server.post_json("/tokenize", {"messages": CHAT})
    assert status == 200
    assert r.usage.prompt_tokens == tok["count"]
    assert r.usage.total_tokens == r.usage.prompt_tokens + 7


def test_chat_stream_role_first_and_same_text(client):
    full = chat(client, max_tokens=12, extra_body=LONG, **GREEDY).choices[0].message.content
    chunks, texts = collect_chat_stream(chat(client, max_tokens=12, extra_body=LONG, stream=True, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(len(c.choices) > 0 for c in chunks), "only the usage chunk may have empty choices"
    assert all(c.usage is None for c in chunks), "no usage chunk without include_usage"
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(ch.finish_reason is None for c in chunks[:-1] for ch in c.choices)
    assert texts[0] == full


def test_chat_stream_include_usage(client):
    chunks, texts = collect_chat_stream(chat(client, max_tokens=5, extra_body=LONG, stream=True,
                                             stream_options={"include_usage": True}, **GREEDY))
    *body, last = chunks
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 5
    assert last.usage.total_tokens == last.usage.prompt_tokens + 5
    assert all(len(c.choices) > 0 and c.usage is None for c in body)


def test_chat_n_choices(client):
    r = chat(client, n=3, max_tokens=6, temperature=1.0, seed=11, extra_body=LONG)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == 18
    chunks, texts = collect_chat_stream(chat(client, n=2, max_tokens=6, temperature=1.0, seed=11, stream=True,
                                             extra_body=LONG))
    assert set(texts) == {0, 1}
    finishes = {ch.index: ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason}
    assert finishes == {0: "length", 1: "length"}
    # Same seed, same draws, streamed or not.
    assert texts[0] == r.choices[0].message.content and texts[1] == r.choices[1].message.content


def test_chat_seed_reproducible(client):
    kw = dict(max_tokens=16, temperature=1.0, extra_body=LONG)
    a = chat(client, seed=1234, **kw).choices[0].message.content
    b = chat(client, seed=1234, **kw).choices[0].message.content
    assert a == b
    others = {chat(client, seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert others != {a}, "different seeds should give different samples"


def test_chat_stop_string_absent(client):
    base = chat(client, max_tokens=40, extra_body=LONG, **GREEDY).choices[0].message.content
    visible = [i for i, ch in enumerate(base) if not ch.isspace()]
    assert len(visible) > 10, base
    start = visible[len(visible) // 2]
    stop = base[start:start + 2]
    expected = base[:base.find(stop)]
    r = chat(client, max_tokens=40, stop=[stop], extra_body=LONG, **GREEDY)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == expected
    assert stop not in r.choices[0].message.content
    chunks, texts = collect_chat_stream(chat(client, max_tokens=40, stop=stop, stream=True, extra_body=LONG, **GREEDY))
    assert texts[0] == expected
    assert all(stop not in (ch.delta.content or "") for c in chunks for ch in c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_logprobs(client):
    r = chat(client, max_tokens=6, logprobs=True, top_logprobs=3, extra_body=LONG, **GREEDY)
    content = r.choices[0].logprobs.content
    assert len(content) == 6 == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        # Greedy: the sampled token is the most likely one.
        assert entry.logprob == pytest.approx(tops[0])
        assert bytes(entry.bytes).decode("utf-8", errors="replace") is not None
    plain = chat(client, max_tokens=6, extra_body=LONG, **GREEDY)
    assert plain.choices[0].logprobs is None


# --- completions --------------------------------------------------------------

def test_completion_max_tokens_and_usage(client, server):
    r = complete(client, max_tokens=5, extra_body=LONG, **GREEDY)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5
    status, _, tok = server.post_json("/tokenize", {"prompt": "Once upon a time"})
    assert r.usage.prompt_tokens == tok["count"]
    assert r.usage.total_tokens == tok["count"] + 5


def test_completion_stream_same_text(client):
    full = complete(client, max_tokens=10, extra_body=LONG, **GREEDY).choices[0].text
    chunks = list(complete(client, max_tokens=10, stream=True, extra_body=LONG,
                           stream_options={"include_usage": True}, **GREEDY))
    *body, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == 10
    assert all(len(c.choices) > 0 for c in body)
    assert "".join(c.choices[0].text for c in body) == full
    assert body[-1].choices[0].finish_reason == "length"


def test_completion_list_prompt_and_n(client):
    r = complete(client, prompt=["Hello", "The sea"], n=2, max_tokens=3, temperature=1.0, seed=5, extra_body=LONG)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert r.usage.completion_tokens == 12


def test_completion_token_id_prompt(client, server):
    _, _, tok = server.post_json("/tokenize", {"prompt": "Once upon a time"})
    by_ids = complete(client, prompt=tok["tokens"], max_tokens=6, extra_body=LONG, **GREEDY).choices[0].text
    by_text = complete(client, max_tokens=6, extra_body=LONG, **GREEDY).choices[0].text
    assert by_ids == by_text


def test_completion_logprobs(client):
    r = complete(client, max_tokens=5, logprobs=2, extra_body=LONG, **GREEDY)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(1 <= len(top) <= 2 for top in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)
    # Greedy: the sampled token's logprob is the best of its top list.
    for v, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert v == pytest.approx(max(top.values()))


def test_completion_echo(client):
    r = complete(client, prompt="Echo me", echo=True, max_tokens=4, extra_body=LONG, **GREEDY)
    plain = complete(client, prompt="Echo me", max_tokens=4, extra_body=LONG, **GREEDY)
    assert r.choices[0].text == "Echo me" + plain.choices[0].text


def test_completion_stop_string_absent(client):
    base = complete(client, max_tokens=40, extra_body=LONG, **GREEDY).choices[0].text
    visible = [i for i, ch in enumerate(base) if not ch.isspace()]
    start = visible[len(visible) // 2]
    stop = base[start:start + 2]
    r = complete(client, max_tokens=40, stop=stop, extra_body=LONG, **GREEDY)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base[:base.find(stop)]


# --- Chinese text, streamed ------------------------------------------------------

def test_streamed_chinese_equals_non_streamed(client):
    """Whole UTF-8 characters in every chunk: the streamed text of a seeded
    sampling run equals the non-streamed text, and no chunk holds U+FFFD."""
    messages = [{"role": "user", "content": "请用中文写一首关于大海和月亮的诗。"}]
    kw = dict(messages=messages, max_tokens=48, temperature=1.0, extra_body=LONG)
    # The tiny model can sample byte sequences that are not UTF-8 at all (then
    # U+FFFD is the right answer, streamed or not): use a seed whose text is
    # valid Chinese so that any U+FFFD would come from splitting characters.
    for seed in range(40):
        full = chat(client, seed=seed, **kw).choices[0].message.content
        if "\ufffd" not in full and any("\u4e00" <= ch <= "\u9fff" for ch in full):
            break
    else:
        pytest.fail("no seed gave valid Chinese text")
    assert any(len(ch.encode()) > 1 for ch in full)
    chunks, texts = collect_chat_stream(chat(client, seed=seed, stream=True, **kw))
    pieces = [ch.delta.content or "" for c in chunks for ch in c.choices]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == full
    assert sum(1 for p in pieces if p) > 3, "expected the text to arrive in several chunks"


# --- errors -----------------------------------------------------------------------

def test_prompt_too_long_is_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, prompt="lighthouse " * 5000, max_tokens=4)
    assert "maximum context length is 4096 tokens" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        chat(client, max_tokens=5000)


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_p": 0}, {"n": 0}, {"max_tokens": 0},
                                 {"top_logprobs": 30, "logprobs": True}, {"presence_penalty": 3}])
def test_bad_values_are_bad_request(client, bad):
    with pytest.raises(openai.BadRequestError):
        chat(client, **bad)


def test_chat_stream_continuous_usage_stats(client):
    chunks, texts = collect_chat_stream(chat(client, max_tokens=5, extra_body=LONG, stream=True,
                                             stream_options={"include_usage": True, "continuous_usage_stats": True},
                                             **GREEDY))
    *body, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == 5
    counted = [c.usage.completion_tokens for c in body if c.choices and c.usage is not None]
    assert counted, "every content chunk carries the usage so far"
    assert counted == sorted(counted) and counted[-1] == 5
    assert all(c.usage.prompt_tokens == last.usage.prompt_tokens for c in body if c.usage is not None)


@pytest.mark.parametrize("field,extra", [
    ("continue_final_message", {"continue_final_message": True}),
    ("stream_options", {"stream_options": {"include_usage": True}}),  # only with stream: true
])
def test_chat_fields_not_honoured_are_refused_by_name(client, field, extra):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=2, extra_body=extra)
    assert e.value.body["param"] == field, e.value.body


@pytest.mark.parametrize("field,extra", [
    ("use_beam_search", {"use_beam_search": True}),
    ("allowed_token_ids", {"allowed_token_ids": [5, 6]}), ("bad_words", {"bad_words": ["sea"]}),
    ("guided_choice", {"guided_choice": ["a", "b"]}), ("guided_regex", {"guided_regex": "[ab]"}),
    ("tool_choice", {"tool_choice": "required"}), ("chat_template", {"chat_template": "{{ x }}"}),
    ("documents", {"documents": [{"text": "d"}]}), ("spaces_between_special_tokens",
                                                   {"spaces_between_special_tokens": False}),
    ("modalities", {"modalities": ["text", "audio"]}), ("logits_processors", {"logits_processors": ["x"]}),
])
def test_unimplemented_vllm_fields_are_refused_by_name(client, field, extra):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=2, extra_body=extra)
    assert e.value.body["param"] == field, e.value.body
    assert "not supported" in e.value.body["message"]


def test_neutral_values_of_unimplemented_fields_are_served(client):
    neutral = {"use_beam_search": False, "allowed_token_ids": [], "bad_words": [],
               "tool_choice": "none", "spaces_between_special_tokens": True, "modalities": ["text"],
               "continue_final_message": False, "length_penalty": 1.0, "guided_regex": None}
    assert chat(client, max_tokens=2, extra_body=neutral).choices


def test_add_special_tokens_is_honoured(client, server):
    # The prompt is tokenized as /tokenize does with the same flag (this model's tokenizer adds no BOS, so
    # both agree on the count; a model that adds one gets it only when asked).
    for flag in (True, False):
        status, _, tok = server.post_json("/tokenize", {"prompt": "Once upon a time", "add_special_tokens": flag})
        assert status == 200
        used = complete(client, max_tokens=1, extra_body={"add_special_tokens": flag}).usage.prompt_tokens
        assert used == tok["count"], flag


@pytest.mark.parametrize("field,extra", [("suffix", {"suffix": " the end."}), ("best_of", {"best_of": 3}),
                                         ("best_of", {"best_of": 2, "n": 1})])
def test_completion_fields_not_honoured_are_refused_by_name(client, field, extra):
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, max_tokens=2, extra_body=extra)
    assert e.value.body["param"] == field, e.value.body
    # best_of equal to n asks for nothing more than n: served.
    assert len(complete(client, max_tokens=2, n=2, extra_body={"best_of": 2}).choices) == 2


@pytest.mark.parametrize("message", [{"role": "user"}, {"role": "user", "content": None}, {"role": "system"}])
def test_message_without_content_is_bad_request(client, message):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=2, messages=[message] if message["role"] == "user" else [message] + CHAT)
    assert "needs content" in str(e.value)
    # An assistant turn without content (a tool call's) is fine.
    assert chat(client, max_tokens=2, messages=CHAT + [{"role": "assistant"}] + CHAT).choices


def test_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=CHAT, max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=2)


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].model_extra.get("max_model_len") == 4096


def test_api_key(dedicated_server):
    s = dedicated_server("--api-key", "sesame")
    wrong = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    right = openai.OpenAI(base_url=s.url + "/v1", api_key="sesame", max_retries=0)
    r = right.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
    assert r.choices[0].message.role == "assistant"
    assert s.get("/health")[0] == 200  # open without a key
