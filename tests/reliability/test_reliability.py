"""Reliability of the real `tern serve` with the tiny model: hostile requests,
dropped streams, overload, SIGTERM under load, a short soak, and the
regression tests of what they found. `make test` runs the short versions;
TERN_RELIABILITY_FULL=1 (`make reliability`) the full counts of
docs/reliability.md."""

import json
import os
import socket
import time

import pytest

from . import disconnects, hostile, overload, sigterm, soak, support

FULL = os.environ.get("TERN_RELIABILITY_FULL") == "1"


@pytest.fixture
def tern():
    servers = []

    def start(*flags):
        s = support.TernServer(*flags)
        servers.append(s)
        return s

    yield start
    for s in servers:
        if s.alive():
            support.stop_cleanly(s)
        else:
            s.log.close()
            os.unlink(s.log.name)


# --- hostile requests -----------------------------------------------------------------

def test_hostile_requests_get_clear_4xx(tern):
    """2,000 malformed or extreme requests (5,000 in the full run): each a 4xx whose
    error names the problem; no 5xx, crash or hang; nothing left running after."""
    server = tern(*hostile.server_flags())
    cases = hostile.generate(5000 if FULL else 2000, seed=7 if FULL else 1)
    report = hostile.run(server, cases, workers=8)
    print(report.summary())
    assert report.alive, server.logs()[-3000:]
    assert not report.failures, report.summary()
    assert not report.server_errors, report.summary()
    assert report.state_after.idle(), report.summary()
    assert "Sanitizer" not in server.logs()


def test_slowloris_gets_408_and_the_server_keeps_serving(tern):
    server = tern("--http-read-timeout", 1)
    trickles = [support.RawConnection(server, timeout=10) for _ in range(20)]
    for c in trickles:
        c.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    t0 = time.monotonic()
    # Twenty held requests take no worker: the server answers at once meanwhile.
    status, _, _ = server.get("/health", timeout=5)
    assert status == 200 and time.monotonic() - t0 < 0.5
    for c in trickles:
        resp = c.response()
        assert resp.status == 408, resp
        assert "within 1 s" in json.loads(resp.body)["error"]["message"]
        assert c.wait_closed(3)
        c.close()
    assert time.monotonic() - t0 < 4
    # A connection that never sends a byte is closed without an answer.
    with support.RawConnection(server, timeout=10) as idle:
        assert idle.wait_closed(3) and idle.buf == b""


def test_deep_nesting_is_refused_by_name(server_fixture_server):
    s = server_fixture_server
    for path, body in (("/v1/chat/completions", '{"messages": ' + "[" * 100000 + "]" * 100000 + "}"),
                       ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], '
                                                '"chat_template_kwargs": ' + '{"a":' * 70 + "1" + "}" * 71),
                       ("/generate", '{"inputs": "hi", "parameters": ' + '{"a":' * 500000 + "1" + "}" * 500001),
                       ("/tokenize", '{"prompt": ' + "[" * 65 + "]" * 65 + "}")):
        status, _, body = s.post_json(path, body.encode())
        assert status == 400, (path, body)
        assert "nests deeper than 64 levels" in json.dumps(body)
    assert s.post_json("/tokenize", {"prompt": "hi", "x": [[[[[[1]]]]]]})[0] == 200


def test_invalid_json_names_the_byte(server_fixture_server):
    status, _, body = server_fixture_server.post_json("/v1/completions", b'{"prompt": "hi",}')
    assert status == 400
    assert "not valid JSON" in body["error"]["message"] and "at byte 16" in body["error"]["message"]
    status, _, body = server_fixture_server.post_json("/detokenize", b"[1, 2")
    assert status == 400 and "not valid JSON" in body["error"]["message"]


@pytest.mark.parametrize("field", ["add_special_tokens", "add_generation_prompt", "return_token_strs"])
def test_tokenize_flags_of_the_wrong_type_are_refused(server_fixture_server, field):
    status, _, body = server_fixture_server.post_json("/tokenize", {"prompt": "hi", field: "no"})
    assert status == 400 and body["error"]["param"] == field, body


def test_stop_string_of_digits_is_a_string_stop_reason(server_fixture_server):
    """A stop string of digits came back as an integer stop_reason, and one past int64
    made the response throw (the connection closed with no answer)."""
    s = server_fixture_server
    _, _, tok = s.post_json("/tokenize", {"prompt": "9", "add_special_tokens": False})
    nine = tok["tokens"][-1]
    assert s.post_json("/detokenize", {"tokens": [nine]})[2]["prompt"].strip() == "9"
    for stop in ("99", "9" * 25):
        for stream in (False, True):
            body = {"prompt": "Count:", "max_tokens": 60, "logit_bias": {str(nine): 100}, "stop": [stop],
                    "temperature": 0, "stream": stream}
            with support.RawConnection(s, timeout=30) as c:
                c.send(support.json_post("/v1/completions", json.dumps(body)))
                resp = c.response()
            assert resp.status == 200, resp
            if stream:
                events = [json.loads(e[6:]) for e in resp.body.decode().split("\n\n") if e.startswith("data: {")]
                choice = [c for e in events for c in e["choices"] if c.get("finish_reason")][0]
            else:
                choice = json.loads(resp.body)["choices"][0]
            assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop, choice


def test_stop_token_id_is_an_integer_stop_reason(server_fixture_server):
    s = server_fixture_server
    _, _, tok = s.post_json("/tokenize", {"prompt": "9", "add_special_tokens": False})
    nine = tok["tokens"][-1]
    _, _, r = s.post_json("/v1/completions", {"prompt": "Count:", "max_tokens": 20, "temperature": 0,
                                              "logit_bias": {str(nine): 100}, "stop_token_ids": [nine]})
    assert r["choices"][0]["stop_reason"] == nine


@pytest.fixture(scope="module")
def server_fixture_server():
    s = support.TernServer("--disable-log-requests")
    yield s
    support.stop_cleanly(s)


# --- disconnects, overload, SIGTERM, soak ------------------------------------------------

def test_dropped_streams_leak_nothing(tern):
    server = tern(*disconnects.SERVER_FLAGS)
    report = disconnects.run(server, 1000 if FULL else 150, seed=3, concurrency=48 if FULL else 24)
    print(report.summary())
    assert report.ok(), report.summary()
    if FULL:
        assert report.preemptions > 0, report.summary()


def test_overload_refuses_fast_and_completes_the_admitted(tern):
    max_queued = 16 if FULL else 8
    server = tern(*overload.server_flags(max_queued))
    report = overload.run(server, 400 if FULL else 64, max_queued)
    print(report.summary())
    assert report.refused, report.summary()
    assert report.ok(refusal_p99_bound_s=1.0), report.summary()


def test_sigterm_under_load_drains_cleanly(tern):
    # Short requests are sized to a quarter of it from the measured step time; the
    # long ones (4,000 tokens) take several times longer on a quiet 2-core machine.
    drain = 2.5
    server = tern("--shutdown-timeout", drain, "--disable-log-requests")
    report = sigterm.run(server, drain, streams=24 if FULL else 10, plain=8 if FULL else 4)
    print(report.summary())
    assert report.ok(), report.summary() + "\n" + server.logs()[-2000:]


def test_short_soak(tern):
    server = tern(*soak.SERVER_FLAGS)
    seconds = float(os.environ.get("TERN_SOAK_SECONDS", 300 if FULL else 8))
    report = soak.run(server, seconds, clients=6 if FULL else 4, warmup_s=min(30, seconds / 4))
    print(report.summary())
    assert report.ok(), report.summary()


def test_new_connections_are_refused_once_draining(tern):
    server = tern("--shutdown-timeout", 5)
    c = support.RawConnection(server)
    c.send(support.json_post("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 3000, "ignore_eos": True,
                                                            "stream": True})))
    while b"data: " not in c.buf:
        c._fill()
    server.proc.send_signal(15)
    time.sleep(0.3)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((server.host, server.port), timeout=2)
    c.close()  # the last stream leaves: the server exits at once
    assert server.proc.wait(timeout=5) == 0
