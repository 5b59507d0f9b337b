"""`tern serve` under test: a helper that starts the real binary with the
tiny model on a free 127.0.0.1 port (--port 0, the port read back from the
"listening on http[s]://HOST:PORT" line), waits for /health, and stops it with
SIGTERM, asserting a clean exit 0; and the session-scoped `server` fixture.

Test modules load it with `pytest_plugins = ["server_fixture"]` so that the
whole session shares one server."""

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "data" / "ernie-tiny"
LISTENING = re.compile(r"listening on (https?)://([0-9.]+):(\d+)")


def tern_binary():
    path = os.environ.get("TERN_BIN", str(ROOT / "build" / "bin" / "tern"))
    if not os.path.exists(path):
        pytest.fail(f"tern binary not found at {path}; build first (make build) or set TERN_BIN")
    return path


class TernServer:
    """One `tern serve` process. stderr goes to a file (a pipe nobody reads
    would fill up with request logs and stall the server). With --ssl-*
    flags, `ssl_context` is what request() verifies the server with."""

    def __init__(self, *flags, model=MODEL, timeout=30.0, ssl_context=None):
        self.ssl_context = ssl_context
        self.log = tempfile.NamedTemporaryFile(prefix="tern-serve-", suffix=".log", delete=False)
        args = [tern_binary(), "serve", "--model", str(model), "--host", "127.0.0.1", "--port", "0",
                *map(str, flags)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        match = None
        while match is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tern serve exited with {self.proc.returncode}:\n{self.logs()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"tern serve did not print its address:\n{self.logs()}")
            match = LISTENING.search(self.logs())
            time.sleep(0.02)
        self.scheme, self.host, self.port = match.group(1), match.group(2), int(match.group(3))
        self.url = f"{self.scheme}://{self.host}:{self.port}"
        while self.get("/health")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"/health never answered 200:\n{self.logs()}")
            time.sleep(0.05)

    def logs(self):
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def request(self, method, path, body=None, headers=None, timeout=60.0):
        """(status, lower-cased headers, body bytes); never raises on HTTP errors."""
        data = body if body is None or isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if data is not None and "Content-Type" not in (headers or {}):
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context) as resp:
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
        except (ConnectionError, urllib.error.URLError) as e:
            return 0, {}, str(e).encode()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post_json(self, path, body, **kw):
        status, headers, raw = self.request("POST", path, body, **kw)
        try:
            return status, headers, json.loads(raw)
        except ValueError:
            return status, headers, raw

    def connect(self, timeout=10.0):
        return socket.create_connection((self.host, self.port), timeout=timeout)

    def stop(self, timeout=30.0):
        """SIGTERM; returns the exit code (killing it after `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.log.write(thread_stacks(self.proc.pid).encode())
                self.log.flush()
                self.proc.kill()
                self.proc.wait()
                return None
        self.log.close()
        return self.proc.returncode


def thread_stacks(pid):
    """Every thread's stack of a process that would not stop (gdb, where the
    machine has it), for the log that a failing test prints."""
    gdb = shutil.which("gdb")
    if not gdb:
        return "\n(no gdb: no thread stacks of the process that did not exit)\n"
    try:
        out = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        out = f"gdb failed: {e}"
    return "\n--- thread stacks of the process that did not exit on SIGTERM ---\n" + out[-20000:] + "\n"


def stop_cleanly(server):
    """Stops `server`, failing the test unless it exits 0 on SIGTERM."""
    code = server.stop()
    tail = 4000 if code is not None else 24000  # a hang: the log ends with every thread's stack
    assert code == 0, f"tern serve exited with {code} after SIGTERM:\n{server.logs()[-tail:]}"
    os.unlink(server.log.name)


@pytest.fixture(scope="session")
def server():
    """The shared server: the tiny model with its full 4096-token context."""
    s = TernServer()
    yield s
    stop_cleanly(s)


@pytest.fixture
def dedicated_server():
    """A factory for servers with their own flags, each stopped (exit 0
    asserted) at the end of the test."""
    started = []

    def start(*flags, **kw):
        s = TernServer(*flags, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.alive():
            stop_cleanly(s)
        else:  # a test that expected a crash (xfail) already saw it
            s.log.close()
            os.unlink(s.log.name)
