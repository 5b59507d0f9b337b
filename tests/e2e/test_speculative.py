"""Speculative decoding by prompt lookup (`--speculative-config`, vLLM's JSON, and `--speculate N`, TGI's): the
real server on the tiny model through the official `openai` client gives the same text, tokens and logprobs as a
server without it, greedy and seeded, streamed and not, while its metrics show drafts verified and accepted; bad
configurations stop the server before it loads, with a line that says why."""

import json
import re
import subprocess

import openai
import pytest

pytest_plugins = ["server_fixture"]

MODEL = "ernie-tiny"
# A prompt that repeats itself, so that lookups find earlier matches.
PROMPT = "one two three four five six. " * 6 + "one two three"


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def counter(server, name):
    status, _, body = server.request("GET", "/metrics")
    assert status == 200
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+]+)$", body.decode(), re.M)
    assert m, name
    return float(m.group(1))


def completions(server):
    c = client(server)
    out = []
    for params in ({"temperature": 0}, {"temperature": 0, "logprobs": 2},
                   {"temperature": 0.8, "top_p": 0.9, "seed": 7},
                   {"temperature": 1.0, "seed": 11, "frequency_penalty": 0.5, "n": 2}):
        r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, extra_body={"ignore_eos": True},
                                 **params)
        out.append([(ch.text, ch.finish_reason, ch.logprobs.token_logprobs if ch.logprobs else None)
                    for ch in r.choices])
    stream = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=30,
                                       temperature=0, stream=True)
    out.append("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
    return out


def assert_same(want_all, have_all):
    """The same texts and finish reasons; logprobs within rounding (a row computed among drafts is the same
    arithmetic over a longer step)."""
    assert len(want_all) == len(have_all)
    for want, have in zip(want_all, have_all):
        if isinstance(want, str):
            assert want == have
            continue
        for (wt, wf, wl), (ht, hf, hl) in zip(want, have, strict=True):
            assert (wt, wf) == (ht, hf)
            assert (wl is None) == (hl is None)
            if wl is not None:
                assert hl == pytest.approx(wl, abs=1e-3)


def test_speculation_gives_the_outputs_of_a_server_without_it(server, dedicated_server):
    plain = completions(server)
    spec = dedicated_server("--speculative-config",
                            '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}')
    assert ("speculative decoding by prompt lookup: up to 4 drafts a step from earlier 2-3 token matches, "
            "while at most 4 sequences decode") in spec.logs(), spec.logs()
    assert_same(plain, completions(spec))
    drafts = counter(spec, "vllm:spec_decode_num_draft_tokens_total")
    accepted = counter(spec, "vllm:spec_decode_num_accepted_tokens_total")
    assert counter(spec, "vllm:spec_decode_num_drafts_total") > 0
    assert 0 < accepted <= drafts
    assert counter(server, "vllm:spec_decode_num_draft_tokens_total") == 0

    tgi = dedicated_server("--speculate", "3")
    assert "up to 3 drafts a step from earlier 2-4 token matches" in tgi.logs(), tgi.logs()
    assert_same(plain, completions(tgi))


@pytest.mark.parametrize("args, message", [
    (["--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}'], 'method must be "ngram"'),
    (["--speculative-config", '{"method": "ngram"}'], "num_speculative_tokens (at least 1) is required"),
    (["--speculative-config", "ngram"], "must be a JSON object"),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2, "model": "x"}'],
     "unknown key 'model'"),
    (["--speculate", "2", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}'],
     "give one"),
    (["--speculate", "17"], "--speculate: must be from 0 to 16, got 17"),
    (["--speculate", "2", "--device", "null"], "the null runner does not return"),
])
def test_bad_speculative_settings_stop_the_server_readably(args, message):
    from server_fixture import MODEL as model_dir, tern_binary

    r = subprocess.run([tern_binary(), "serve", str(model_dir), "--port", "0", *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def streamed(server):
    """A streamed completion with logprobs (tokens arrive several to a chunk once drafts are accepted) and TGI's
    /generate_stream (one event a token whatever the engine's steps), as the client sees them."""
    c = client(server)
    tokens, logprobs = [], []
    for chunk in c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0, logprobs=1,
                                      stream=True, extra_body={"ignore_eos": True}):
        if chunk.choices and chunk.choices[0].logprobs:
            tokens += chunk.choices[0].logprobs.tokens
            logprobs += chunk.choices[0].logprobs.token_logprobs
    status, _, raw = server.request("POST", "/generate_stream",
                                    {"inputs": PROMPT, "parameters": {"max_new_tokens": 30, "details": True}})
    assert status == 200, raw
    events = [json.loads(e[len("data:"):]) for e in raw.decode().split("\n\n") if e]
    return tokens, logprobs, [e["token"]["id"] for e in events], events[-1]["generated_text"]


def test_streams_carry_every_token_once(server, dedicated_server):
    want_tokens, want_lps, want_ids, want_text = streamed(server)
    spec = dedicated_server("--speculate", "4")
    tokens, lps, ids, text = streamed(spec)
    assert tokens == want_tokens and len(tokens) == 40
    assert lps == pytest.approx(want_lps, abs=1e-3)
    assert ids == want_ids and len(ids) == 30 and text == want_text
    assert counter(spec, "vllm:spec_decode_num_accepted_tokens_total") > 0
