"""What the reliability runs share: `tern serve` under test (the e2e tests'
TernServer), /metrics readings (running and waiting requests, KV blocks in
use, HTTP responses by status), the server's resident memory, and raw-socket
HTTP: send bytes, read back one response (Content-Length, chunked or
close-delimited) or learn that the server closed the connection."""

import os
import pathlib
import re
import socket
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from server_fixture import TernServer, stop_cleanly  # noqa: E402,F401  (the e2e tests' server helper)

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics(server):
    """{(name, ((label, value), ...)): float} from GET /metrics."""
    status, _, raw = server.get("/metrics", timeout=10)
    assert status == 200, (status, raw[:200])
    out = {}
    for line in raw.decode().splitlines():
        m = SAMPLE.match(line)
        if not m or line.startswith("#"):
            continue
        labels = tuple(sorted((k, v) for k, v in LABEL.findall(m.group(2) or "") if k != "model_name"))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


class EngineState:
    """The gauges that must fall back to zero once no request is left."""

    def __init__(self, samples):
        self.running = samples[("vllm:num_requests_running", ())]
        self.waiting = samples[("vllm:num_requests_waiting", ())]
        self.total_blocks = samples[("tern:kv_cache_total_blocks", ())]
        # Free or evictable: blocks the prefix cache keeps for reuse are not in use.
        self.used_blocks = self.total_blocks - samples[("tern:kv_cache_free_blocks", ())]
        self.http_in_flight = samples[("tern:http_requests_in_flight", ())]
        self.responses = {int(dict(labels)["status"]): v for (name, labels), v in samples.items()
                          if name == "tern:http_responses_total"}
        self.preemptions = samples.get(("vllm:num_preemptions_total", ()), 0)

    def idle(self):
        # The scrape itself is one request in flight.
        return self.running == 0 and self.waiting == 0 and self.used_blocks == 0 and self.http_in_flight <= 1

    def server_errors(self):
        return {s: int(n) for s, n in self.responses.items() if s >= 500 and n > 0}

    def __repr__(self):
        return (f"running={self.running:g} waiting={self.waiting:g} used_blocks={self.used_blocks:g}"
                f"/{self.total_blocks:g} http_in_flight={self.http_in_flight:g}")


def engine_state(server):
    return EngineState(metrics(server))


def wait_idle(server, timeout=30.0):
    """The engine state once idle, or the last one seen after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        state = engine_state(server)
        if state.idle() or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def __repr__(self):
        return f"{self.status} {self.body[:300]!r}"


class Closed(Exception):
    """The server closed (or reset) the connection before a whole response."""


class RawConnection:
    """A raw TCP connection that reads HTTP/1.1 responses."""

    def __init__(self, server, timeout=30.0):
        self.sock = socket.create_connection((server.host, server.port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False  # the server already answered and closed: the reply may still be readable

    def _fill(self):
        try:
            data = self.sock.recv(1 << 16)
        except ConnectionResetError:
            data = b""
        if not data:
            raise Closed("connection closed")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """The next response; Closed if the connection ends first. socket.timeout if it hangs."""
        status_line = self._line()
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise AssertionError(f"not an HTTP status line: {status_line[:100]!r}")
        status = int(parts[1])
        headers = {}
        while (line := self._line()):
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if status in (100, 204, 304):
            return Response(status, headers, b"")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while (size := int(self._line().split(b";")[0], 16)) != 0:
                body += self._exact(size)
                self._exact(2)
            self._line()
            return Response(status, headers, body)
        if "content-length" in headers:
            return Response(status, headers, self._exact(int(headers["content-length"])))
        body = self.buf
        self.buf = b""
        try:
            while True:
                self._fill()
                body += self.buf
                self.buf = b""
        except Closed:
            return Response(status, headers, body)

    def wait_closed(self, timeout):
        """True if the server closes the connection within `timeout` s (bytes it sends meanwhile are kept)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    return True
                self.buf += data
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


def http_request(method, path, body=b"", headers=None, version="HTTP/1.1", host=True):
    """A request's bytes. `headers` is a list of (name, value); Content-Length is added for a body."""
    lines = [f"{method} {path} {version}"]
    if host:
        lines.append("Host: tern")
    hdrs = list(headers or [])
    if body and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in hdrs):
        hdrs.append(("Content-Length", str(len(body))))
    lines += [f"{k}: {v}" for k, v in hdrs]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def json_post(path, body, extra_headers=()):
    """POST of a JSON (or any) body: bytes in, request bytes out."""
    if isinstance(body, str):
        body = body.encode()
    return http_request("POST", path, body, [("Content-Type", "application/json"), *extra_headers])


def server_pid(server):
    return server.proc.pid


def env_int(name, default):
    return int(os.environ.get(name, default))
