"""bench/serving/serve_bench.py against a server that drops kept-alive connections
without answering (as llama-server's HTTP library closes them unannounced):
a request whose connection turns out closed before any byte came back goes
again, is counted in retried_on_closed_connection, and no request fails."""

import json
import pathlib
import socket
import subprocess
import sys
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

SERVER = textwrap.dedent('''
    import asyncio, sys
    from aiohttp import web
    served = {}
    async def completions(request):
        transport = request.transport
        served[id(transport)] = served.get(id(transport), 0) + 1
        if served[id(transport)] % 3 == 0:  # every third request on a connection: dropped unanswered
            transport.abort()
            raise ConnectionResetError("closed")
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(body["max_tokens"]):
            await resp.write(b'data: {"choices": [{"text": "x"}]}\\n\\n')
        await resp.write(b'data: {"choices": [], "usage": {"completion_tokens": %d}}\\n\\n' % body["max_tokens"])
        await resp.write(b"data: [DONE]\\n\\n")
        await resp.write_eof()
        return resp
    async def models(request):
        return web.json_response({"data": [{"id": "fake"}]})
    app = web.Application()
    app.add_routes([web.post("/v1/completions", completions), web.get("/v1/models", models)])
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
''')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_requests_on_closed_keepalive_connections_go_again(tmp_path):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        out = subprocess.run([sys.executable, str(ROOT / "bench/serving/serve_bench.py"), "--base-url",
                              f"http://127.0.0.1:{port}", "--label", "closer", "--out-dir", str(tmp_path),
                              "--scenarios", "single:8,conc-4:24,conc-2+sampled:6", "--time-budget", "60"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        report = json.loads((tmp_path / "closer.json").read_text())
        scenarios = report["scenarios"]
        assert [s["completed"] for s in scenarios] == [8, 24, 6]
        assert scenarios[2]["scenario"] == "conc-2+sampled"
        assert all(s["failed"] == 0 for s in scenarios)
        assert sum(s["retried_on_closed_connection"] for s in scenarios) > 0
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_launched_tern_reports_its_own_times_beside_the_clients(tmp_path, tern_bin, tiny_model):
    """With --launch, serve_bench reads the server's request log: each
    scenario's requests' queue and TTFT as tern measured them, which fit
    inside the client's (a request reaches the server after the client
    starts its clock, and its first token leaves before the client sees it)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench/serving/serve_bench.py"), "--launch",
                          f"{tern_bin} serve --model {tiny_model} --device cpu --host 127.0.0.1 --port 0",
                          "--launch-timeout", "60", "--label", "own", "--out-dir", str(tmp_path),
                          "--scenarios", "single:3,conc-4:8", "--output-len", "8", "--single-input", "32",
                          "--conc-input", "8:40", "--time-budget", "90"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    scenarios = json.loads((tmp_path / "own.json").read_text())["scenarios"]
    for s in scenarios:
        assert s["server_requests"] == s["completed"], s["scenario"]
        assert 0 <= s["server_queue_ms"]["p50"] <= s["server_ttft_ms"]["p50"]
        assert s["server_ttft_ms"]["min"] <= s["ttft_ms"]["min"]
        assert s["server_ttft_ms"]["max"] <= s["ttft_ms"]["max"]
    assert scenarios[1]["client"]["workers"] == 1  # 4 streams: one client process
    md = (tmp_path / "own.md").read_text()
    assert "- own conc-4: the server's request log (8 requests): TTFT p50 / p99" in md


def test_with_tern_debug_lines_each_clients_ttft_splits_into_four_parts(tmp_path, tern_bin, tiny_model):
    """tern's `--log-level debug` writes each request's arrival, first token
    and that token's handing to the HTTP handler on the steady clock; the
    client matches its requests by response id and splits each TTFT at those
    instants: four parts, none negative, whose sum is the client's TTFT."""
    out = subprocess.run([sys.executable, str(ROOT / "bench/serving/serve_bench.py"), "--launch",
                          f"{tern_bin} serve --model {tiny_model} --device cpu --host 127.0.0.1 --port 0 "
                          "--log-level debug", "--launch-timeout", "60", "--label", "split", "--out-dir",
                          str(tmp_path), "--scenarios", "conc-4:8", "--output-len", "4", "--conc-input", "8:40",
                          "--time-budget", "90"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    s = json.loads((tmp_path / "split.json").read_text())["scenarios"][0]
    assert s["client_ttft_split_requests"] == s["completed"] == 8
    split = s["client_ttft_split_ms"]
    assert list(split) == ["client_send", "to_arrival", "server", "to_writer", "to_client"]
    rows = s["client_ttft_split_rows"]
    assert rows["columns"] == ["start", *split] and len(rows["rows"]) == 8
    for part in split.values():
        assert part["min"] >= 0, split
    total_mean = sum(part["mean"] for part in split.values())
    assert abs(total_mean - s["ttft_ms"]["mean"]) < 0.01 + 0.001 * s["ttft_ms"]["mean"], (split, s["ttft_ms"])
    md = (tmp_path / "split.md").read_text()
    assert "  - the client's TTFT of 8 requests matched in the debug log, p50 / p99 ms: client send " in md
    # The first wave: the 4 requests the closed loop started together.
    wave = s["first_wave_ms"]
    assert wave["requests"] == 4 and 0 <= wave["arrivals"] <= wave["last_first_token_out"], wave
    first = sorted(rows["rows"])[:4]  # start, client send, to arrival, server, to writer, to client
    arrivals = [r[0] + r[1] + r[2] for r in first]
    handed = [a + r[3] + r[4] for a, r in zip(arrivals, first)]
    assert abs(wave["arrivals"] - (max(arrivals) - min(arrivals))) < 0.1, (wave, first)
    assert abs(wave["last_first_token_out"] - (max(handed) - min(arrivals))) < 0.1, (wave, first)
    assert "  - the first wave (4 requests started together): arrivals over " in md


def run_tool(script, *args):
    """A bench/serving script run to its end, its output captured."""
    return subprocess.run([sys.executable, str(ROOT / "bench/serving" / script), *args], capture_output=True,
                          text=True, timeout=60)


def test_a_negative_gpu_sample_interval_is_refused():
    out = run_tool("serve_bench.py", "--base-url", "http://127.0.0.1:9", "--gpu-sample-interval", "-1")
    assert out.returncode == 2
    assert "--gpu-sample-interval takes seconds >= 0, not -1.0" in out.stderr


def test_thread_probe_follows_every_thread_of_a_running_tern(tmp_path, tern_bin, tiny_model):
    """bench/serving/thread_probe.py finds tern serve by its command line and writes each thread's
    state changes on the steady clock, named as tern names them."""
    out = tmp_path / "probe.txt"
    probe = subprocess.Popen([sys.executable, str(ROOT / "bench/serving/thread_probe.py"), "--pattern",
                              f"serve --model {tiny_model} --device null", "--seconds", "20", "--out", str(out)])
    server = subprocess.Popen([tern_bin, "serve", "--model", str(tiny_model), "--device", "null", "--port", "0",
                               "--http-threads", "2"], stderr=subprocess.PIPE, text=True)
    try:
        for line in server.stderr:
            if "listening on" in line:
                break
        time.sleep(1.0)
    finally:
        server.terminate()
        server.wait(timeout=30)
    probe.wait(timeout=30)
    assert probe.returncode == 0
    lines = out.read_text().splitlines()
    assert lines[0] == f"# pid {server.pid}", lines[:3]
    assert lines[-1].startswith("# ") and lines[-1].endswith(" samples"), lines[-3:]
    names = {line.split()[2] for line in lines[1:-1]}
    assert {"tern-engine", "tern-http-1"} <= names, names
    stamps = [float(line.split()[0]) for line in lines[1:-1]]
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.monotonic()) < 60


def test_thread_probe_names_a_process_it_cannot_find():
    out = run_tool("thread_probe.py", "--pattern", "no-such-process-anywhere-4711", "--seconds", "0.2")
    assert out.returncode == 1
    assert "thread_probe: no such process (no-such-process-anywhere-4711)" in out.stderr
