"""`--device null`: the server and the engine with no model computation, for
measuring what they cost themselves. The real binary on a real port: every
token is the runner's one fixed pick, requests run to max_tokens whatever
the sampling, streaming and chat work as on a model, prompt scoring is
refused with a 400 that names it, and the commands that run the CPU forward
themselves refuse the device. With --null-step-us the runner stands in for a
device of that step time, its steps overlapped with the host's work."""

import json

from conftest import run_tern

pytest_plugins = ["server_fixture"]


def test_null_device_serves_fixed_tokens_to_max_tokens(dedicated_server):
    s = dedicated_server("--device", "null")
    assert "--device null: no model runs" in s.logs()
    for params in ({"temperature": 0}, {"temperature": 0.8, "top_p": 0.8, "seed": 5}, {}):
        body = {"prompt": "hello there", "max_tokens": 7, **params}
        status, _, out = s.post_json("/v1/completions", body)
        assert status == 200, out
        assert out["usage"]["completion_tokens"] == 7, out
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["choices"][0]["text"].strip(), out
    status, _, chat = s.post_json("/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert status == 200 and chat["usage"]["completion_tokens"] == 4, chat
    status, _, raw = s.request("POST", "/v1/completions",
                               {"prompt": "hi", "max_tokens": 5, "stream": True, "temperature": 0})
    assert status == 200
    events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    texts = [json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"]]
    assert len([t for t in texts if t]) == 5, events
    status, _, err = s.post_json("/v1/completions", {"prompt": "hi", "max_tokens": 2, "prompt_logprobs": 1})
    assert status == 400, err
    assert "prompt_logprobs" in json.dumps(err)


def test_null_device_generate_timings_and_refusals(tern_bin, tiny_model):
    r = run_tern(tern_bin, "generate", "--model", tiny_model, "--device", "null", "-p", "hello", "-n", "6", "--json")
    assert r.returncode == 0, r.stderr.decode()
    out = json.loads(r.stdout)
    assert len(out["token_ids"]) == 6 and len(set(out["token_ids"])) == 1, out
    t = out["timings"]
    # Both times are counted from the request's arrival, so decoding never takes negative time.
    assert t["total_ms"] >= t["ttft_ms"] >= 0 and t["decode_tokens_per_second"] >= 0, t
    for args in (["bench", "pp-tg", "-p", "16", "-n", "0"], ["perplexity", "--file", tiny_model / "config.json"]):
        r = run_tern(tern_bin, *args, "--model", tiny_model, "--device", "null")
        assert r.returncode != 0
        assert "CPU forward only" in r.stderr.decode(), r.stderr.decode()


def test_null_step_time_overlaps_steps_and_needs_the_null_device(dedicated_server, tern_bin, tiny_model):
    s = dedicated_server("--device", "null", "--null-step-us", "2000")
    assert "after 2000 us" in s.logs()
    for stream in (False, True):
        status, _, raw = s.request("POST", "/v1/completions",
                                   {"prompt": "hi", "max_tokens": 12, "stream": stream, "temperature": 0})
        assert status == 200, raw
    status, _, out = s.post_json("/v1/completions", {"prompt": "hi", "max_tokens": 20, "temperature": 0})
    assert status == 200 and out["usage"]["completion_tokens"] == 20, out
    # 8 requests of 10 tokens, 4 at a time: with a step time most steps are launched before the one before
    # them is collected (not those after which a sequence ends), and a step takes about the 1 ms it stands
    # for; without one, none is.
    for step_us, overlaps in (("1000", True), ("0", False)):
        r = run_tern(tern_bin, "bench", "conc", "--model", tiny_model, "--device", "null", "--null-step-us", step_us,
                     "--concurrency", "4", "--num-requests", "8", "--input-min", "8", "--input-max", "8",
                     "--output-min", "10", "--output-max", "10")
        assert r.returncode == 0, r.stderr.decode()
        text = r.stdout.decode() + r.stderr.decode()
        assert "80 output tokens" in text, text
        steps = int(text.split(" steps (mean ")[0].rsplit(" ", 1)[1])
        mean_ms = float(text.split(" steps (mean ")[1].split(" ms")[0])
        overlapped = int(text.split(" overlapped")[0].rsplit(" ", 1)[1])
        if overlaps:
            assert overlapped >= steps // 2 and mean_ms >= 0.8, text
        else:
            assert overlapped == 0, text
    r = run_tern(tern_bin, "generate", "--model", tiny_model, "--null-step-us", "100", "-p", "hi", "-n", "2")
    assert r.returncode != 0 and "--null-step-us is for --device null" in r.stderr.decode()
