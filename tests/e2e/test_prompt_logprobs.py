"""Prompt log-probabilities as evaluation tools use them (lm-evaluation-harness' loglikelihood through
vLLM's API): completions' `echo` with `logprobs` (the prompt's tokens first, the first one null),
`max_tokens: 0` with echo, and vLLM's `prompt_logprobs`; checked against HF transformers' logits of the
tiny model and against the logprobs of the same tokens when they were generated."""

import math

pytest_plugins = ["server_fixture"]


def log_softmax_at(logits, i):
    m = max(logits)
    return logits[i] - (m + math.log(sum(math.exp(x - m) for x in logits)))


def test_echo_with_logprobs_scores_the_prompt_against_hf(dedicated_server, tiny_golden):
    server = dedicated_server("--cpu-kernels", "optimized")  # the exact kernels, held to HF's fp32 logits
    p = next(p for p in tiny_golden["prompts"] if len(p["ids"]) >= 3)
    ids = p["ids"]
    status, _, body = server.post_json("/v1/completions", {
        "prompt": ids, "echo": True, "logprobs": 2, "max_tokens": 0, "temperature": 0})
    assert status == 200, body
    choice = body["choices"][0]
    lp = choice["logprobs"]
    assert choice["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 0
    assert len(lp["tokens"]) == len(ids) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    want = log_softmax_at(p["first_logits"], ids[1])
    assert abs(lp["token_logprobs"][1] - want) < 1e-3, (lp["token_logprobs"][1], want)
    assert all(v is not None and v <= 0 for v in lp["token_logprobs"][1:])
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    assert all(2 <= len(t) <= 3 for t in lp["top_logprobs"][1:])  # the top 2, plus the prompt's token


def test_echoed_logprobs_equal_the_logprobs_the_tokens_were_generated_with(server, tiny_golden):
    ids = tiny_golden["prompts"][0]["ids"]
    status, _, gen = server.post_json("/v1/completions", {
        "prompt": ids, "max_tokens": 8, "temperature": 0, "logprobs": 1, "ignore_eos": True})
    assert status == 200, gen
    gen_lps = gen["choices"][0]["logprobs"]["token_logprobs"]
    out_ids = tiny_golden["prompts"][0]["greedy"][:8]  # HF's greedy tokens, which tern's equal
    status, _, echo = server.post_json("/v1/completions", {
        "prompt": ids + out_ids, "echo": True, "logprobs": 1, "max_tokens": 0})
    assert status == 200, echo
    scored = echo["choices"][0]["logprobs"]["token_logprobs"][len(ids):]
    assert len(scored) == 8
    for a, b in zip(scored, gen_lps):
        assert abs(a - b) < 1e-4, (scored, gen_lps)


def test_prompt_logprobs_field_on_chat_and_completions(server):
    body = {"messages": [{"role": "user", "content": "你好，世界"}], "max_tokens": 2, "prompt_logprobs": 3}
    first = None
    for attempt in range(2):  # the second would hit the prefix cache: the prompt is computed again, same figures
        status, _, chat = server.post_json("/v1/chat/completions", body)
        assert status == 200, chat
        plp = chat["prompt_logprobs"]
        assert plp[0] is None and len(plp) == chat["usage"]["prompt_tokens"]
        for entry in plp[1:]:
            assert 1 <= len(entry) <= 4
            for tok, v in entry.items():
                assert int(tok) >= 0 and v["logprob"] <= 0 and v["rank"] >= 1 and "decoded_token" in v
        if attempt == 0:
            first = plp
        else:
            assert plp == first
    status, _, comp = server.post_json("/v1/completions", {"prompt": "hello world", "max_tokens": 1,
                                                           "prompt_logprobs": 0})
    assert status == 200, comp
    plp = comp["choices"][0]["prompt_logprobs"]
    assert plp[0] is None and all(len(e) == 1 and next(iter(e.values()))["rank"] >= 1 for e in plp[1:])


def test_prompt_logprobs_refusals_name_the_field(server):
    status, _, body = server.post_json("/v1/completions", {"prompt": "hi", "max_tokens": 0})
    assert status == 400 and "echo" in body["error"]["message"], body
    status, _, body = server.post_json("/v1/completions", {"prompt": "hi", "prompt_logprobs": 21})
    assert status == 400 and body["error"]["param"] == "prompt_logprobs", body
    status, _, body = server.post_json("/v1/completions", {"prompt": "hi", "prompt_logprobs": 1, "stream": True})
    assert status == 400 and "prompt_logprobs" in body["error"]["message"], body
    status, _, body = server.post_json("/v1/completions", {"prompt": "hi", "echo": True, "logprobs": 1,
                                                           "stream": True})
    assert status == 400 and "echo" in body["error"]["message"], body
