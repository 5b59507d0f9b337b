"""Operating `tern serve`: SSE framing on the wire, cancellation when clients
disconnect (running requests and KV blocks fall back to 0), /metrics with
vLLM's names parsed by prometheus_client, queue limits (503 + Retry-After,
TGI's 429), error statuses (400, 404, 413), and the small GET routes."""

import json
import pathlib
import re
import shutil
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import auto_cpu_kernels

pytest_plugins = ["server_fixture"]

MODEL = "ernie-tiny"


# --- raw HTTP helpers -------------------------------------------------------------

def raw_request(path, body):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


def read_all(sock):
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk


def dechunk(body):
    """Decodes a chunked transfer-encoded body, checking the framing."""
    out, pos = b"", 0
    while True:
        eol = body.index(b"\r\n", pos)
        size = int(body[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            assert body[pos:pos + 2] == b"\r\n", "missing final CRLF"
            return out
        out += body[pos:pos + size]
        assert body[pos + size:pos + size + 2] == b"\r\n"
        pos += size + 2


def split_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, body


def check_sse(text):
    """`data: {json}\\n\\n` events, the last `data: [DONE]\\n\\n`; returns the JSON payloads."""
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    events = text.split("\n\n")
    assert events[-1] == ""
    events = events[:-1]
    assert events[-1] == "data: [DONE]"
    payloads = []
    for e in events[:-1]:
        assert e.startswith("data: ") and "\n" not in e, e
        payloads.append(json.loads(e[len("data: "):]))
    return payloads


# --- SSE framing ------------------------------------------------------------------

@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/completions", {"prompt": "hi"}),
])
def test_sse_framing_raw_socket(server, path, body):
    body = dict(body, model=MODEL, max_tokens=6, stream=True, ignore_eos=True, stream_options={"include_usage": True})
    with server.connect() as sock:
        sock.sendall(raw_request(path, body))
        status, headers, payload = split_response(read_all(sock))
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"] == "text/event-stream"
    assert headers["transfer-encoding"] == "chunked"
    events = check_sse(dechunk(payload).decode())
    assert all(e["choices"] for e in events[:-1])
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 6


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_sse_framing_curl(server):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    out = subprocess.run(["curl", "-sN", "-D", "-", "-H", "Content-Type: application/json", "-d", json.dumps(body),
                          server.url + "/v1/chat/completions"], capture_output=True, timeout=60, check=True).stdout
    _, headers, payload = split_response(out)
    assert headers["content-type"] == "text/event-stream"
    events = check_sse(payload.decode())
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"


# --- metrics ----------------------------------------------------------------------

VLLM_GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
VLLM_COUNTERS = ["vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
                 "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total"]
VLLM_HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                   "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                   "vllm:request_prompt_tokens", "vllm:request_generation_tokens"]


def scrape(server):
    """{(sample name, sorted labels): value}, and the families by name and type."""
    status, headers, raw = server.get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    samples, families = {}, {}
    for family in text_string_to_metric_families(raw.decode()):
        families[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, families


def value(samples, name, **labels):
    labels = dict(labels, model_name=MODEL)
    return samples[(name, tuple(sorted(labels.items())))]


def scrape_when_idle(server):
    """A scrape once no request runs or waits: the server is shared by the whole session, and a request an
    earlier test left (a dropped stream still being cancelled) would add its tokens to the deltas below."""
    deadline = time.monotonic() + 10
    while True:
        samples, families = scrape(server)
        busy = value(samples, "vllm:num_requests_running") + value(samples, "vllm:num_requests_waiting")
        if busy == 0:
            again, _ = scrape(server)
            if value(again, "vllm:generation_tokens_total") == value(samples, "vllm:generation_tokens_total"):
                return again, families
        assert time.monotonic() < deadline, "the server never went idle"
        time.sleep(0.02)


def test_metrics_names_labels_and_monotonic_counters(server):
    before, families = scrape_when_idle(server)
    for name in VLLM_GAUGES:
        assert families[name] == "gauge"
    for name in VLLM_COUNTERS:  # the parser names counter families without _total
        assert families[name[:-len("_total")]] == "counter", name
    for name in VLLM_HISTOGRAMS:
        assert families[name] == "histogram"
        assert (name + "_count", (("model_name", MODEL),)) in before
    assert all(dict(labels).get("model_name") == MODEL for (name, labels) in before
               if name.startswith("vllm:")), "every vllm: sample carries model_name"

    _, _, tok = server.post_json("/tokenize", {"prompt": "Counting tokens"})
    status, _, r = server.post_json("/v1/completions", {"prompt": "Counting tokens", "max_tokens": 5,
                                                        "ignore_eos": True})
    assert status == 200
    # The engine publishes its counters after the step that delivered the
    # last token, so a scrape right after the response may be a step behind.
    deadline = time.monotonic() + 2
    while True:
        after, _ = scrape(server)
        if value(after, "vllm:generation_tokens_total") - value(before, "vllm:generation_tokens_total") >= 5:
            break
        assert time.monotonic() < deadline, "generation_tokens_total never caught up"
        time.sleep(0.02)

    for key, v in before.items():
        name = key[0]
        if name.endswith(("_total", "_count", "_sum", "_bucket")) and key in after:
            assert after[key] >= v, f"{key} went down"
    delta = lambda name, **kw: value(after, name, **kw) - value(before, name, **kw)  # noqa: E731
    assert delta("vllm:prompt_tokens_total") == tok["count"]
    assert delta("vllm:generation_tokens_total") == 5
    assert delta("vllm:request_success_total", finished_reason="length") == 1
    assert delta("vllm:e2e_request_latency_seconds_count") == 1
    assert delta("vllm:request_generation_tokens_sum") == 5
    assert delta("vllm:request_prompt_tokens_sum") == tok["count"]
    assert delta("vllm:time_to_first_token_seconds_count") == 1


def test_async_scheduling_flag_and_its_counter(dedicated_server):
    """--no-async-scheduling is a flag `tern serve` takes, and
    tern:engine_overlapped_steps_total counts overlapped steps: none on the
    CPU, whose runner does not overlap, nor with the flag."""
    for flags in ((), ("--no-async-scheduling",)):
        s = dedicated_server(*flags)
        status, _, _ = s.post_json("/v1/completions", {"prompt": "Overlap", "max_tokens": 4, "ignore_eos": True})
        assert status == 200
        # The step that made the last token is counted once that step is
        # done, which may be just after its token reached the client.
        deadline = time.monotonic() + 5
        while True:
            samples, families = scrape(s)
            steps = [v for (name, _), v in samples.items() if name == "tern:engine_steps_total"]
            if (steps and steps[0] >= 4) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert steps and steps[0] >= 4
        assert families["tern:engine_overlapped_steps"] == "counter"
        overlapped = [v for (name, _), v in samples.items() if name == "tern:engine_overlapped_steps_total"]
        assert overlapped == [0.0], flags


def test_decode_kernel_flag(dedicated_server):
    """--no-decode-kernel and --gemm-k-split-tokens (and TERN_DECODE_KERNEL,
    TERN_GEMM_K_SPLIT_TOKENS) are options `tern serve` takes and lists in
    --help; on the CPU they change nothing; a negative split size is refused."""
    from server_fixture import tern_binary  # the plugin's own module, loaded by pytest_plugins

    help_text = subprocess.run([tern_binary(), "serve", "--help"], capture_output=True, text=True).stdout
    assert "--no-decode-kernel" in help_text and "TERN_DECODE_KERNEL" in help_text
    assert "--gemm-k-split-tokens" in help_text and "TERN_GEMM_K_SPLIT_TOKENS" in help_text
    s = dedicated_server("--no-decode-kernel", "--gemm-k-split-tokens", "0")
    status, _, body = s.post_json("/v1/completions", {"prompt": "Kernel", "max_tokens": 3, "ignore_eos": True})
    assert status == 200 and body["usage"]["completion_tokens"] == 3
    bad = subprocess.run([tern_binary(), "serve", "--gemm-k-split-tokens=-1"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--gemm-k-split-tokens" in bad.stderr, bad.stderr


@pytest.mark.parametrize("args, message", [
    (["serve", "--max-num-seqs", "0"], "--max-num-seqs: must be at least 1, got 0"),
    (["serve", "--max-num-seqs", "many"], "--max-num-seqs: must be a number, got 'many'"),
    (["serve", "--http-read-timeout", "0"], "--http-read-timeout: must be from 0.001 to 1000000, got 0"),
    (["serve", "--max-n", "200"], "--max-n: must be from 1 to 128, got 200"),
    (["bench", "--num-requests", "-2"], "--num-requests: must be at least 1, got -2"),
])
def test_numeric_flags_out_of_range_are_refused_readably(args, message):
    """A numeric flag out of its range stops the command before anything loads, with a line that names the
    flag, its range and the value given; --help shows the same range."""
    from server_fixture import tern_binary

    r = subprocess.run([tern_binary(), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert len(r.stderr.splitlines()[0]) < 120, r.stderr
    help_text = subprocess.run([tern_binary(), args[0], "--help"], capture_output=True, text=True).stdout
    assert "--max-num-seqs INT:>= 1=256" in help_text, help_text


def test_start_up_log_and_metrics_name_the_cpu_threads_and_kernels(dedicated_server):
    """The start-up line and tern:cpu_info say how the CPU forward runs: threads, kernel set and
    instruction set."""
    kernels = auto_cpu_kernels()  # what --cpu-kernels auto picks on this CPU
    s = dedicated_server("--threads", "2")
    assert re.search(rf"on cpu \(2 threads, {kernels} kernels \((AVX-512|AVX2|portable)[^)]*\); \d+ max tokens",
                     s.logs()), s.logs()
    status, _, body = s.request("GET", "/metrics")
    assert status == 200
    info = [line for line in body.decode().splitlines() if line.startswith("tern:cpu_info{")]
    assert len(info) == 1 and info[0].endswith(" 1"), info
    assert re.search(rf'threads="2",kernels="{kernels}",isa="(avx512|avx2|portable)",bf16_products="(true|false)"',
                     info[0]), info
    s = dedicated_server("--threads", "1", "--cpu-kernels", "reference")
    assert "on cpu (1 thread, reference kernels (plain loops); " in s.logs(), s.logs()
    _, _, body = s.request("GET", "/metrics")
    assert 'threads="1",kernels="reference",isa="none",bf16_products="false"' in body.decode()


def test_threads_are_named_for_top_and_perf(dedicated_server):
    """`top -H`, perf and gdb tell tern's threads apart: the engine, each HTTP thread beside the
    main one, and each CPU worker beside the engine thread."""
    s = dedicated_server("--threads", "2", "--http-threads", "3")
    task = pathlib.Path(f"/proc/{s.proc.pid}/task")
    wanted = {"tern-engine", "tern-http-1", "tern-http-2", "tern-cpu-1"}
    for _ in range(200):  # a thread names itself as it starts
        names = sorted((t / "comm").read_text().strip() for t in task.iterdir())
        if wanted <= set(names):
            break
        time.sleep(0.01)
    assert wanted <= set(names), names
    assert "tern-http-3" not in names and "tern-cpu-2" not in names, names  # the main thread and the caller


def test_descriptor_table_is_grown_for_max_connections_at_start(dedicated_server):
    """The open-file limit and the descriptor table are sized for --max-connections before any
    thread starts, so a burst of new connections never waits in accept() for the table to grow."""
    s = dedicated_server("--max-connections", "3000", "--log-level", "debug")
    status = pathlib.Path(f"/proc/{s.proc.pid}/status").read_text()
    fd_size = int(next(line.split()[1] for line in status.splitlines() if line.startswith("FDSize:")))
    soft = int(pathlib.Path(f"/proc/{s.proc.pid}/limits").read_text().split("Max open files")[1].split()[0])
    wanted = min(3000 + 1024, soft)
    assert fd_size >= wanted, (fd_size, soft)
    assert re.search(r"open files: soft limit \d+ \(was -?\d+\), descriptor table \d+ slots", s.logs()), s.logs()


def test_request_log_times_and_debug_step_log(dedicated_server):
    """Each request's log line splits its wait (queue_ms: arrival to first step) from its time to
    the first token; --log-level debug adds a line per engine step with the batch's make-up."""
    s = dedicated_server("--log-level", "debug")
    status, _, _ = s.post_json("/v1/completions", {"prompt": "hello there", "max_tokens": 4, "temperature": 0})
    assert status == 200
    logs = s.logs()
    req = re.search(r"request \S+ api=completions prompt_tokens=(\d+) cached_tokens=\d+ output_tokens=4 "
                    r"queue_ms=([\d.]+) ttft_ms=([\d.]+) total_ms=([\d.]+) finish=length", logs)
    assert req, logs
    queue, ttft, total = (float(req.group(i)) for i in (2, 3, 4))
    assert queue <= ttft <= total, req.group(0)
    prompt = int(req.group(1))
    steps = re.findall(r"step (\d+): (\d+) tokens, (\d+) decodes, (\d+) prompt chunks of (\d+) tokens, "
                       r"\d+ running, \d+ waiting, [\d.]+ ms", logs)
    assert steps, logs
    assert any(int(p) == 1 and int(t) == prompt for _, _, _, p, t in steps), steps  # the prefill
    assert any(int(d) == 1 and int(p) == 0 for _, _, d, p, _ in steps), steps  # a decode step
    # The request's instants on the steady clock: arrival <= first token <= its handing to the handler.
    clock = re.search(r"request \S+ clock: arrival ([\d.]+) s, first token ([\d.]+) s, first token out ([\d.]+) s "
                      r"\(steady clock\)", logs)
    assert clock, logs
    arrival, first, out = (float(clock.group(i)) for i in (1, 2, 3))
    assert arrival <= first <= out and abs((first - arrival) * 1000 - ttft) < 0.2, clock.group(0)


def test_disconnects_cancel_requests(server):
    """50 long streams, dropped after a few chunks: the engine must end them
    all and free their KV blocks within a few seconds."""
    body = {"model": MODEL, "prompt": "A long story:", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    socks = []
    try:
        for _ in range(50):
            s = server.connect(timeout=30)
            s.sendall(raw_request("/v1/completions", body))
            socks.append(s)
        for s in socks:
            got = b""
            while got.count(b"data: ") < 3:
                chunk = s.recv(65536)
                assert chunk, "stream ended early"
                got += chunk
        during, _ = scrape(server)
        assert value(during, "vllm:num_requests_running") + value(during, "vllm:num_requests_waiting") > 0
        assert value(during, "vllm:kv_cache_usage_perc") > 0
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while True:
        now, _ = scrape(server)
        running = value(now, "vllm:num_requests_running")
        waiting = value(now, "vllm:num_requests_waiting")
        usage = value(now, "vllm:kv_cache_usage_perc")
        if running == 0 and waiting == 0 and usage == 0:
            break
        assert time.monotonic() < deadline, f"still running={running} waiting={waiting} kv={usage}"
        time.sleep(0.1)
    # The server still serves.
    status, _, r = server.post_json("/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert status == 200


# --- limits and errors --------------------------------------------------------------

def test_queue_full_gives_503_with_retry_after(dedicated_server):
    s = dedicated_server("--max-queued-requests", "2", "--max-body-bytes", "4096")
    body = {"model": MODEL, "prompt": "Busy", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    socks = []
    try:
        for _ in range(2):  # fill the queue with two streams that are surely running
            sock = s.connect(timeout=30)
            sock.sendall(raw_request("/v1/completions", body))
            got = b""
            while b"data: " not in got:
                got += sock.recv(65536)
            socks.append(sock)
        statuses = []
        for _ in range(4):
            status, headers, r = s.post_json("/v1/completions", {"prompt": "one more", "max_tokens": 2})
            statuses.append(status)
            assert status == 503, r
            assert int(headers["retry-after"]) >= 1
            assert r["error"]["code"] == 503 and r["error"]["message"]
        status, headers, r = s.post_json("/v1/chat/completions",
                                         {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})
        assert status == 503 and "retry-after" in headers
        status, headers, r = s.post_json("/generate", {"inputs": "x", "parameters": {"max_new_tokens": 2}})
        assert status == 429 and r["error_type"] == "overloaded" and "retry-after" in headers
    finally:
        for sock in socks:
            sock.close()
    deadline = time.monotonic() + 10
    while s.post_json("/v1/completions", {"prompt": "later", "max_tokens": 2})[0] != 200:
        assert time.monotonic() < deadline, "the queue never drained"
        time.sleep(0.1)

    # The same server has a 4 KiB body limit.
    status, headers, r = s.post_json("/v1/completions", {"prompt": "x" * 10000, "max_tokens": 2})
    assert status == 413, r
    assert "error" in r and headers["content-type"].startswith("application/json")


def test_bad_json_is_400(server):
    for path in ("/v1/chat/completions", "/v1/completions", "/tokenize"):
        status, headers, raw = server.request("POST", path, b'{"messages": [')
        assert status == 400, path
        assert headers["content-type"].startswith("application/json")
        err = json.loads(raw)["error"]
        assert err["code"] == 400 and err["type"] == "BadRequestError" and err["message"]


def test_unknown_path_is_404(server):
    status, headers, raw = server.get("/v1/nothing-here")
    assert status == 404 and json.loads(raw)["error"]["code"] == 404
    status, _, _ = server.request("POST", "/v2/completions", {"prompt": "x"})
    assert status == 404


def test_simple_routes(server):
    status, _, raw = server.get("/health")
    assert status == 200
    assert server.get("/ping")[0] == 200
    status, _, raw = server.get("/version")
    assert status == 200 and json.loads(raw)["version"]
    status, _, raw = server.get("/v1/models")
    model = json.loads(raw)["data"][0]
    assert model["id"] == MODEL and model["max_model_len"] == 4096


def test_chat_page_serves_repeatedly(dedicated_server):
    s = dedicated_server()
    for _ in range(3):
        status, headers, raw = s.get("/")
        assert status == 200 and headers["content-type"].startswith("text/html") and raw
    assert s.alive() and s.get("/health")[0] == 200


def test_api_key_guards_tgi_compat_route(dedicated_server):
    s = dedicated_server("--api-key", "sesame")
    assert s.post_json("/generate", {"inputs": "x", "parameters": {"max_new_tokens": 1}})[0] == 401
    status, _, r = s.post_json("/", {"inputs": "x", "parameters": {"max_new_tokens": 1}})
    assert status == 401, r
