"""The HTTP transport alone (keep-alive, SSE framing, limits, timeouts, CORS,
API key, disconnects, shutdown), against tools/http_echo_server.cpp on a free
port on 127.0.0.1. Raw sockets where the framing itself is under test."""

import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def echo_bin():
    path = os.environ.get("TERN_HTTP_ECHO", str(ROOT / "build" / "bin" / "tern_http_echo"))
    if not os.path.exists(path):
        pytest.fail(f"tern_http_echo not found at {path}; build it or set TERN_HTTP_ECHO")
    return path


class EchoServer:
    def __init__(self, binary, *flags):
        # stderr goes to a file: a pipe nobody reads could fill up and stall the server.
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", "0", *map(str, flags)],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.log()}")
        self.port = int(line.split()[-1])

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read()

    def connect(self, timeout=5.0):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def http(self, timeout=5.0):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None):
        conn = self.http()
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def stats(self):
        status, _, body = self.request("GET", "/stats")
        assert status == 200
        return json.loads(body)

    def wait_stats(self, pred, timeout=1.0):
        deadline = time.monotonic() + timeout
        while True:
            s = self.stats()
            if pred(s) or time.monotonic() > deadline:
                return s
            time.sleep(0.02)

    def alive(self):
        return self.proc.poll() is None and self.request("GET", "/health")[0] == 200

    def stop(self):
        """Stops the server; fails on a bad exit or a sanitizer report."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        log = self.log()
        self.stderr.close()
        assert "Sanitizer" not in log and "runtime error:" not in log, log
        assert self.proc.returncode == 0, (self.proc.returncode, log)


@pytest.fixture
def start(echo_bin):
    servers = []

    def _start(*flags):
        s = EchoServer(echo_bin, *flags)
        servers.append(s)
        return s

    yield _start
    for s in servers:
        s.stop()


@pytest.fixture
def server(start):
    return start()


class Reader:
    """Reads HTTP/1.1 responses off a raw socket, keeping chunk boundaries."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, headers, body, chunks); chunks is None unless chunked."""
        status = int(self.line().split(b" ", 2)[1])
        headers = {}
        while True:
            line = self.line()
            if not line:
                break
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if status == 100:
            return status, headers, b"", None
        if headers.get("transfer-encoding") == "chunked":
            chunks = []
            while True:
                size = int(self.line(), 16)
                if size == 0:
                    assert self.line() == b""
                    break
                chunks.append(self.exact(size))
                assert self.exact(2) == b"\r\n"
            return status, headers, b"".join(chunks), chunks
        return status, headers, self.exact(int(headers.get("content-length", "0"))), None

    def closed(self, timeout):
        """True if the peer closes (EOF or reset) within `timeout` seconds."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


def raw_request(method, path, body=b"", headers=None, version="HTTP/1.1"):
    lines = [f"{method} {path} {version}", "Host: 127.0.0.1"]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def assert_openai_error(body, code):
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["message"]


# --- keep-alive, pipelining, framing ---------------------------------------

def test_keep_alive_reuses_one_connection(server):
    conn = server.http()
    conn.request("GET", "/health")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read() == b'{"ok":true}'
    sock = conn.sock
    for i in range(20):
        body = f"payload {i}".encode()
        conn.request("POST", "/echo", body=body, headers={"Content-Type": "text/plain"})
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "text/plain"
        assert resp.read() == body
        assert conn.sock is sock, "the client had to reconnect"
    conn.close()


def test_pipelined_requests_answered_in_order(server):
    with server.connect() as s:
        s.sendall(b"".join(raw_request("POST", "/echo", f"req{i}".encode()) for i in range(5)))
        r = Reader(s)
        for i in range(5):
            status, _, body, _ = r.response()
            assert (status, body) == (200, f"req{i}".encode())


def test_sse_chunked_framing(server):
    with server.connect() as s:
        s.sendall(raw_request("GET", "/stream?n=4"))
        r = Reader(s)
        status, headers, body, chunks = r.response()
        assert status == 200
        assert headers["content-type"] == "text/event-stream"
        assert headers["transfer-encoding"] == "chunked"
        assert "content-length" not in headers
        # One HTTP chunk per write, each a whole SSE event.
        assert chunks == [b'data: {"i":%d}\n\n' % i for i in range(4)] + [b"data: [DONE]\n\n"]
        # The connection is still usable after the terminating chunk.
        s.sendall(raw_request("POST", "/echo", b"after"))
        assert r.response()[2] == b"after"


def test_sse_events_arrive_as_written(server):
    with server.connect() as s:
        s.sendall(raw_request("GET", "/stream?n=3&delay_ms=300"))
        r = Reader(s)
        assert r.line().startswith(b"HTTP/1.1 200")
        while r.line():
            pass
        t0 = time.monotonic()
        size = int(r.line(), 16)
        assert r.exact(size) == b'data: {"i":0}\n\n'
        assert time.monotonic() - t0 < 0.2, "first event was held back"


def test_http10_stream_is_close_delimited(server):
    with server.connect() as s:
        s.sendall(raw_request("GET", "/stream?n=2", version="HTTP/1.0"))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        assert b"Transfer-Encoding" not in head
        assert body == b'data: {"i":0}\n\ndata: {"i":1}\n\ndata: [DONE]\n\n'


def test_expect_100_continue(server):
    with server.connect() as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        r = Reader(s)
        assert r.response()[0] == 100
        s.sendall(b"hello")
        assert r.response()[:3:2] == (200, b"hello")


def test_head_sends_no_body(server):
    with server.connect() as s:
        s.sendall(raw_request("HEAD", "/health") + raw_request("POST", "/echo", b"next"))
        r = Reader(s)
        assert r.line().startswith(b"HTTP/1.1 200")
        while r.line():
            pass
        assert r.response()[2] == b"next"


def test_request_id_echoed_or_generated(server):
    _, headers, _ = server.request("GET", "/health", headers={"X-Request-Id": "abc-123"})
    assert headers["x-request-id"] == "abc-123"
    _, headers, _ = server.request("GET", "/health")
    assert len(headers["x-request-id"]) == 32


# --- errors and limits ------------------------------------------------------

def test_unknown_path_404_and_wrong_method_405(server):
    status, headers, body = server.request("GET", "/nope")
    assert status == 404 and headers["content-type"] == "application/json"
    assert_openai_error(body, 404)
    status, headers, body = server.request("DELETE", "/echo")
    assert status == 405
    assert headers["allow"] == "POST, OPTIONS"
    assert_openai_error(body, 405)


def test_body_over_limit_413(start):
    srv = start("--max-body-bytes", 1024)
    assert srv.request("POST", "/echo", body=b"x" * 1024)[0] == 200
    status, _, body = srv.request("POST", "/echo", body=b"x" * 1025)
    assert status == 413
    assert_openai_error(body, 413)
    # A large body the server refuses early still gets its 413, not a reset.
    status, _, body = srv.request("POST", "/echo", body=b"x" * (8 << 20))
    assert status == 413
    # Chunked bodies are counted as they arrive.
    with srv.connect() as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + b"400\r\n" + b"y" * 1024 + b"\r\n" + b"10\r\n" + b"z" * 16 + b"\r\n0\r\n\r\n")
        status, _, body, _ = Reader(s).response()
        assert status == 413
    assert srv.alive()


def test_huge_header_431(start):
    srv = start("--max-header-bytes", 4096)
    with srv.connect() as s:
        s.sendall(raw_request("GET", "/health", headers={"X-Big": "a" * 8000}))
        r = Reader(s)
        status, headers, body, _ = r.response()
        assert status == 431
        assert headers["connection"] == "close"
        assert_openai_error(body, 431)
        assert r.closed(2.0)
    status, _, _ = srv.request("GET", "/health", headers={"X-Ok": "a" * 3000})
    assert status == 200


def test_default_header_limit_is_16k(server):
    assert server.request("GET", "/health", headers={"X-A": "a" * 12000})[0] == 200
    assert server.request("GET", "/health", headers={"X-A": "a" * 20000})[0] == 431


@pytest.mark.parametrize("garbage", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),  # a TLS ClientHello
    b"\x00" * 100 + b"\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nBad Header\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nabc",
])
def test_garbage_gets_400_json_or_close(server, garbage):
    with server.connect() as s:
        s.sendall(garbage)
        r = Reader(s)
        try:
            status, headers, body, _ = r.response()
        except (EOFError, ConnectionResetError):
            pass
        else:
            assert status == 400
            assert_openai_error(body, 400)
            assert r.closed(2.0)
    assert server.alive()


def test_error_bodies_stay_valid_json_for_any_path_bytes(server):
    with server.connect() as s:
        s.sendall(b"GET /\xff\xfe\x80" + b"x" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body, _ = Reader(s).response()
        assert status == 404
        assert_openai_error(body.decode("utf-8"), 404)
        assert len(body) < 1000


def test_random_bytes_never_crash(server):
    import random
    rng = random.Random(1234)
    for _ in range(50):
        with server.connect() as s:
            s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000))))
            s.shutdown(socket.SHUT_WR)
            Reader(s).closed(2.0)
    assert server.alive()
    st = server.wait_stats(lambda st: st["connections_open"] == 1)
    assert st["connections_open"] == 1, st  # just the /stats one


def test_slowloris_is_cut_off(start):
    srv = start("--read-timeout-ms", 500, "--idle-timeout-ms", 300)
    with srv.connect() as s:
        t0 = time.monotonic()
        s.sendall(b"GET /health HTTP/1.1\r\n")
        r = Reader(s)
        s.settimeout(0.1)
        closed = False
        for i in range(30):  # one header byte every 100 ms: never finishes in time
            try:
                s.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            try:
                if s.recv(1024) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
        assert closed or r.closed(1.0)
        assert time.monotonic() - t0 < 1.5
    # An idle keep-alive connection is closed after the idle timeout.
    with srv.connect() as s:
        s.sendall(raw_request("GET", "/health"))
        r = Reader(s)
        assert r.response()[0] == 200
        t0 = time.monotonic()
        assert r.closed(2.0)
        assert 0.2 < time.monotonic() - t0 < 1.0
    assert srv.alive()


def test_idle_keep_alive_is_timed_as_idle_and_closed_at_shutdown(start):
    # Between requests a keep-alive connection is idle, not reading one: the
    # read timeout does not apply (no 408, no close) and SIGTERM closes it at
    # once. Each request's head and body go out as separate segments, as
    # HTTP clients send them, which can leave a readiness event behind for
    # the wait that follows; that wait must not take it for a request.
    srv = start("--read-timeout-ms", 300, "--idle-timeout-ms", 10000, "--shutdown-timeout-ms", 10000)
    with srv.connect() as s:
        r = Reader(s)
        for i in range(3):
            req = raw_request("POST", "/echo", body=b'{"i": %d}' % i)
            head, body = req.split(b"\r\n\r\n", 1)
            s.sendall(head + b"\r\n\r\n")
            time.sleep(0.01)
            s.sendall(body)
            assert r.response()[0] == 200
            time.sleep(0.6)  # twice the read timeout, idle
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        assert r.closed(1.0), "an idle keep-alive connection should close at once"
    assert srv.proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 2.0


def test_too_many_connections_503(start):
    srv = start("--max-connections", 3)
    held = [srv.connect() for _ in range(3)]
    time.sleep(0.1)
    with srv.connect() as s:
        s.sendall(raw_request("GET", "/health"))
        status, headers, body, _ = Reader(s).response()
        assert status == 503
        assert headers["retry-after"] == "1"
        assert_openai_error(body, 503)
    for h in held:
        h.close()
    time.sleep(0.1)
    assert srv.request("GET", "/health")[0] == 200


# --- CORS and API key --------------------------------------------------------

def test_cors_preflight_and_headers(start):
    srv = start("--allowed-origins", "https://a.example")
    pre = {"Origin": "https://a.example", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}
    status, headers, _ = srv.request("OPTIONS", "/echo", headers=pre)
    assert status == 200
    assert headers["access-control-allow-origin"] == "https://a.example"
    assert "POST" in headers["access-control-allow-methods"]
    assert headers["access-control-allow-headers"] == "authorization, content-type"
    status, _, body = srv.request("OPTIONS", "/echo", headers={**pre, "Origin": "https://evil.example"})
    assert status == 400
    assert_openai_error(body, 400)
    status, headers, _ = srv.request("POST", "/echo", body=b"x", headers={"Origin": "https://a.example"})
    assert headers["access-control-allow-origin"] == "https://a.example"
    status, headers, _ = srv.request("POST", "/echo", body=b"x", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in headers


def test_cors_wildcard_by_default(server):
    status, headers, _ = server.request("OPTIONS", "/stream", headers={
        "Origin": "http://localhost:3000", "Access-Control-Request-Method": "GET"})
    assert status == 200 and headers["access-control-allow-origin"] == "*"


def test_api_key(start):
    srv = start("--api-key", "sk-test")
    status, headers, body = srv.request("POST", "/echo", body=b"x")
    assert status == 401
    assert_openai_error(body, 401)
    assert srv.request("POST", "/echo", body=b"x", headers={"Authorization": "Bearer sk-wrong"})[0] == 401
    assert srv.request("POST", "/echo", body=b"x", headers={"Authorization": "Bearer sk-test"})[0] == 200
    assert srv.request("GET", "/health")[0] == 200
    # Preflights carry no credentials and must pass.
    status, _, _ = srv.request("OPTIONS", "/echo", headers={
        "Origin": "https://x", "Access-Control-Request-Method": "POST"})
    assert status == 200


# --- disconnects ------------------------------------------------------------

def test_disconnect_mid_stream_is_noticed(server):
    s = server.connect()
    s.sendall(raw_request("GET", "/stream?n=100000&delay_ms=50"))
    r = Reader(s)
    assert r.line().startswith(b"HTTP/1.1 200")
    while r.line():
        pass
    r.exact(int(r.line(), 16))
    s.close()
    t0 = time.monotonic()
    st = server.wait_stats(lambda st: st["stream_cancellations"] == 1)
    assert st["stream_cancellations"] == 1, st
    assert time.monotonic() - t0 < 1.0
    assert st["client_disconnects"] == 1


def test_disconnect_while_waiting_is_noticed(server):
    """Before any response byte (a request in prefill): the handler waits on
    engine events and must learn of the disconnect at once."""
    s = server.connect()
    s.sendall(raw_request("GET", "/slow?ms=30000"))
    server.wait_stats(lambda st: st["active"] == 1)
    s.close()
    t0 = time.monotonic()
    st = server.wait_stats(lambda st: st["slow_cancellations"] == 1)
    assert st["slow_cancellations"] == 1, st
    assert time.monotonic() - t0 < 1.0
    assert st["active"] == 0


def test_engine_events_wake_the_handler(server):
    status, _, body = server.request("GET", "/slow?ms=500")
    assert status == 200
    assert json.loads(body)["events"] >= 10  # the ticker notifies every 20 ms


def test_reset_mid_stream_is_noticed(server):
    s = server.connect()
    s.sendall(raw_request("GET", "/stream?n=100000&delay_ms=20"))
    Reader(s).line()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # RST
    st = server.wait_stats(lambda st: st["stream_cancellations"] == 1)
    assert st["stream_cancellations"] == 1


def test_client_that_stops_reading_is_dropped(start):
    """A stalled reader fills the socket buffers; past the write timeout the
    server gives up on it instead of holding the stream forever."""
    srv = start("--write-timeout-ms", 500)
    s = srv.connect()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(raw_request("GET", "/stream?n=100000000"))
    st = srv.wait_stats(lambda st: st["stream_cancellations"] == 1, timeout=5.0)
    assert st["stream_cancellations"] == 1, st
    assert st["active"] == 0
    s.close()


def test_200_concurrent_streams(server):
    def one(i):
        with server.connect(timeout=30) as s:
            s.sendall(raw_request("GET", "/stream?n=20&delay_ms=10"))
            status, _, _, chunks = Reader(s).response()
            assert status == 200
            return chunks

    with ThreadPoolExecutor(200) as pool:
        results = list(pool.map(one, range(200)))
    expected = [b'data: {"i":%d}\n\n' % i for i in range(20)] + [b"data: [DONE]\n\n"]
    assert all(r == expected for r in results)
    st = server.stats()
    assert st["stream_cancellations"] == 0 and st["requests_in_flight"] == 1


# --- shutdown ---------------------------------------------------------------

def test_sigterm_lets_short_streams_finish(start):
    srv = start("--shutdown-timeout-ms", 5000)
    s = srv.connect()
    s.sendall(raw_request("GET", "/stream?n=10&delay_ms=100"))
    r = Reader(s)
    assert r.line().startswith(b"HTTP/1.1 200")
    srv.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    time.sleep(0.2)
    with pytest.raises(ConnectionRefusedError):  # no longer accepting
        srv.connect(timeout=1)
    while r.line():
        pass
    chunks = []
    while (size := int(r.line(), 16)) != 0:
        chunks.append(r.exact(size))
        r.exact(2)
    assert chunks[-1] == b"data: [DONE]\n\n" and len(chunks) == 11
    assert srv.proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 2.5


def test_sigterm_while_streaming_exits_0_within_timeout(start):
    srv = start("--shutdown-timeout-ms", 1000)
    streams = []
    for _ in range(5):
        s = srv.connect()
        s.sendall(raw_request("GET", "/stream?n=100000&delay_ms=50"))
        Reader(s).line()
        streams.append(s)
    idle = srv.connect()
    idle.sendall(raw_request("GET", "/health"))
    idle_reader = Reader(idle)
    assert idle_reader.response()[0] == 200
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert idle_reader.closed(0.5), "an idle keep-alive connection should close at once"
    assert srv.proc.wait(timeout=5) == 0
    elapsed = time.monotonic() - t0
    assert 0.9 < elapsed < 2.0, elapsed
    for s in streams:
        assert Reader(s).closed(1.0)
        s.close()


def test_sigterm_closes_a_head_still_arriving_and_finishes_a_body(start):
    # A request whose head has not all arrived is not in flight yet: shutdown
    # closes its connection at once rather than waiting up to the read
    # timeout. One whose head arrived is; it finishes once its body does.
    srv = start("--shutdown-timeout-ms", 10000, "--read-timeout-ms", 10000)
    head_only = srv.connect()
    head_only.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    with_body = srv.connect()
    req = raw_request("POST", "/echo", body=b"0123456789")
    with_body.sendall(req[:-5])
    time.sleep(0.3)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert Reader(head_only).closed(1.0), "a request head still arriving should not hold the drain"
    time.sleep(0.2)
    with_body.sendall(req[-5:])
    status, headers, body, _ = Reader(with_body).response()
    assert (status, body) == (200, b"0123456789")
    assert headers.get("connection") == "close"
    assert srv.proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 3.0
    head_only.close()
    with_body.close()


def test_sigint_with_nothing_in_flight_exits_at_once(start):
    srv = start()
    assert srv.request("GET", "/health")[0] == 200
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGINT)
    assert srv.proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 0.5
