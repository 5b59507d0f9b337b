"""Security of `tern serve` (docs/security.md): HTTPS with --ssl-certfile and
--ssl-keyfile (a certificate made here with the openssl CLI; the openai client
verifying it, streaming, a failed handshake, plain HTTP to the HTTPS port,
client certificates, bad files refused at start), API keys that never reach
the log in any format or level, prompt text logged only with
--log-requests-text, cache_salt keeping tenants' prefix caches apart, and
each request limit answered with a 4xx that names the limit and its flag."""

import json
import socket
import ssl
import subprocess
import time

import httpx
import openai
import pytest

pytest_plugins = ["server_fixture"]

MODEL = "ernie-tiny"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A self-signed server certificate for 127.0.0.1, a key that is not its
    key, and a CA with one client certificate."""
    d = tmp_path_factory.mktemp("tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "server.key", "-out", "server.crt", "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", cwd=d)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", "other.key", cwd=d)
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=tern test CA",
            cwd=d)
    openssl("req", *ec, "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=tern test client", cwd=d)
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "client.crt", "-days", "2", cwd=d)
    (d / "not-a-cert.pem").write_text("this is not PEM\n")
    return d


def tls_flags(certs):
    return ["--ssl-certfile", certs / "server.crt", "--ssl-keyfile", certs / "server.key"]


def trusting(certs):
    return ssl.create_default_context(cafile=str(certs / "server.crt"))


@pytest.fixture(scope="module")
def tls_server(certs):
    from server_fixture import TernServer, stop_cleanly
    s = TernServer(*tls_flags(certs), ssl_context=trusting(certs))
    yield s
    stop_cleanly(s)


def tls_client(server, certs, client_cert=False):
    ctx = trusting(certs)
    if client_cert:
        ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    http = httpx.Client(verify=ctx)
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, http_client=http)


def metric(server, name):
    status, _, body = server.get("/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


# --- HTTPS ---------------------------------------------------------------------------------------------

def test_tls_chat_stream_and_keep_alive(tls_server, certs):
    assert tls_server.url.startswith("https://127.0.0.1:")
    client = tls_client(tls_server, certs)
    messages = [{"role": "user", "content": "你好"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    assert r.choices[0].message.content and r.usage.completion_tokens > 0
    # The same connection (keep-alive) carries a stream, with every chunk and the end.
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == r.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    c = client.completions.create(model=MODEL, prompt="Hello", max_tokens=4, temperature=0)
    assert c.usage.completion_tokens > 0


def test_http10_stream_over_tls_ends_with_close_notify(tls_server, certs):
    """A close-delimited body (HTTP/1.0 stream) ends with TLS's close_notify, so
    the client can tell the end from a cut."""
    raw = socket.create_connection((tls_server.host, tls_server.port), timeout=30)
    conn = trusting(certs).wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False)
    body = json.dumps({"prompt": "Hello", "max_tokens": 4, "stream": True}).encode()
    conn.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    data = b""
    while chunk := conn.recv(65536):  # an SSLEOFError here would mean a cut without close_notify
        data += chunk
    conn.close()
    assert data.startswith(b"HTTP/1.1 200") and b"Connection: close" in data
    assert data.rstrip().endswith(b"data: [DONE]") and b"Transfer-Encoding" not in data


def test_pipelined_requests_over_tls(tls_server, certs):
    """Two requests sent at once, in two TLS records: the second is read from
    the socket with the first and waits in OpenSSL's buffers (the socket has
    nothing more to say), yet must be answered."""
    raw = socket.create_connection((tls_server.host, tls_server.port), timeout=30)
    conn = trusting(certs).wrap_socket(raw, server_hostname="127.0.0.1")
    conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    conn.close()
    assert data.count(b"HTTP/1.1 200") == 2 and MODEL.encode() in data


def test_tls_untrusted_certificate_fails_the_handshake(tls_server, certs):
    before = metric(tls_server, "tern:http_tls_handshake_failures_total")
    client = openai.OpenAI(base_url=tls_server.url + "/v1", api_key="none", max_retries=0)  # system CAs only
    with pytest.raises(openai.APIConnectionError):
        client.models.list()
    deadline = time.monotonic() + 5  # the server sees the client's alert a moment later
    while metric(tls_server, "tern:http_tls_handshake_failures_total") != before + 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert tls_client(tls_server, certs).models.list().data[0].id == MODEL


def test_plain_http_to_tls_port_gets_400(tls_server, certs):
    with socket.create_connection((tls_server.host, tls_server.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400")
    assert b"https://" in reply
    # Garbage that is neither TLS nor HTTP: closed, nothing else.
    with socket.create_connection((tls_server.host, tls_server.port), timeout=10) as s:
        s.sendall(bytes(range(256)) * 4)
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
    assert tls_server.alive()
    assert tls_server.get("/health")[0] == 200


def test_client_certificates(certs, dedicated_server):
    # The fixture's /health probe needs a client certificate too.
    ctx = trusting(certs)
    ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    s = dedicated_server(*tls_flags(certs), "--ssl-ca-certs", certs / "ca.crt", "--ssl-cert-reqs", "2",
                         ssl_context=ctx)
    with_cert = tls_client(s, certs, client_cert=True)
    assert with_cert.models.list().data[0].id == MODEL
    without = tls_client(s, certs)
    with pytest.raises(openai.APIConnectionError):
        without.models.list()


def unverified():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def presented_certificate(server):
    """The DER certificate a new TLS connection to the server gets."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with unverified().wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)


def test_ssl_refresh_serves_a_renewed_certificate(certs, dedicated_server, tmp_path):
    live_crt, live_key = tmp_path / "live.crt", tmp_path / "live.key"
    live_crt.write_bytes((certs / "server.crt").read_bytes())
    live_key.write_bytes((certs / "server.key").read_bytes())
    s = dedicated_server("--ssl-certfile", live_crt, "--ssl-keyfile", live_key, "--enable-ssl-refresh",
                         ssl_context=unverified())
    old = presented_certificate(s)
    assert old == ssl.PEM_cert_to_DER_cert((certs / "server.crt").read_text())
    held = unverified().wrap_socket(socket.create_connection(("127.0.0.1", s.port), timeout=10))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "new.key", "-out", "new.crt", "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1", cwd=tmp_path)
    try:
        # The certificate first, its key not yet: that pair does not load, the old one stays.
        live_crt.write_bytes((tmp_path / "new.crt").read_bytes())
        time.sleep(2.5)
        assert presented_certificate(s) == old
        assert metric(s, "tern:http_tls_reloads_total") == 0
        assert "do not load" in s.logs()
        live_key.write_bytes((tmp_path / "new.key").read_bytes())
        deadline = time.monotonic() + 10
        while presented_certificate(s) == old:
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.2)
        assert presented_certificate(s) == ssl.PEM_cert_to_DER_cert((tmp_path / "new.crt").read_text())
        assert metric(s, "tern:http_tls_reloads_total") == 1
        # A connection opened before the reload goes on with its session.
        held.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert held.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        held.close()
    # Verified against the new certificate: the openai client works.
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0,
                           http_client=httpx.Client(verify=ssl.create_default_context(
                               cafile=str(tmp_path / "new.crt"))))
    assert client.models.list().data[0].id == MODEL


def test_ssl_refresh_needs_tls(tern_bin, tiny_model):
    r = subprocess.run([tern_bin, "serve", "--model", tiny_model, "--port", "0", "--enable-ssl-refresh"],
                       capture_output=True, timeout=60)
    assert r.returncode == 1 and b"--enable-ssl-refresh" in r.stderr


@pytest.mark.parametrize("case", ["missing key", "missing cert", "not a cert", "wrong key", "key alone",
                                  "reqs without ca"])
def test_bad_tls_files_refused_at_start(case, certs, tern_bin, tiny_model):
    cert, key = certs / "server.crt", certs / "server.key"
    flags, named = {
        "missing key": (["--ssl-certfile", cert, "--ssl-keyfile", certs / "nope.key"], "nope.key"),
        "missing cert": (["--ssl-certfile", certs / "nope.crt", "--ssl-keyfile", key], "nope.crt"),
        "not a cert": (["--ssl-certfile", certs / "not-a-cert.pem", "--ssl-keyfile", key], "not-a-cert.pem"),
        "wrong key": (["--ssl-certfile", cert, "--ssl-keyfile", certs / "other.key"], "other.key"),
        "key alone": (["--ssl-keyfile", key], "--ssl-certfile"),
        "reqs without ca": ([*tls_flags(certs), "--ssl-cert-reqs", "2"], "--ssl-ca-certs"),
    }[case]
    r = subprocess.run([tern_bin, "serve", "--model", tiny_model, "--host", "127.0.0.1", "--port", "0",
                        *map(str, flags)], capture_output=True, timeout=60)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert named in err, err
    assert "listening" not in err


# --- keys and request text in the logs -----------------------------------------------------------------

KEY = "sk-tern-SECRET-3f9a2c71"
WRONG = "sk-tern-WRONG-77b1e0d4"


def odd_key_requests(s):
    """Requests carrying the key (or a wrong one) everywhere a client might put it."""
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    s.post_json("/v1/chat/completions", chat, headers={"Authorization": "Bearer " + KEY})
    s.post_json("/v1/chat/completions", chat, headers={"Authorization": "Bearer " + WRONG})
    s.post_json("/v1/chat/completions", chat, headers={"Authorization": KEY})  # no scheme
    s.post_json("/v1/chat/completions", chat, headers={"X-Api-Key": KEY, "Cookie": "key=" + KEY})
    s.get("/v1/models?api_key=" + KEY)
    s.get("/v1/" + KEY, headers={"Authorization": "Bearer " + KEY})
    s.post_json("/v1/chat/completions", {**chat, "model": KEY}, headers={"Authorization": "Bearer " + KEY})
    s.post_json("/v1/chat/completions", {**chat, "user": KEY}, headers={"Authorization": "Bearer " + KEY})
    s.post_json("/v1/completions", {"prompt": "x", "max_tokens": 2, "temperature": KEY},
                headers={"Authorization": "Bearer " + KEY})
    s.request("POST", "/v1/completions", b"{" + KEY.encode(), headers={"Authorization": "Bearer " + KEY})
    s.post_json("/generate", {"inputs": "hi", "parameters": {"max_new_tokens": 2}},
                headers={"Authorization": "Bearer " + WRONG})


MARKER = "ZEBRA-MARKER-6d1c"


def text_requests(s, marker, key=None):
    """Chat, completions and TGI with `marker` in the prompt, answered and refused."""
    auth = {"Authorization": "Bearer " + key} if key else {}
    ok = []
    ok.append(s.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": marker + " chat"}],
                                                   "max_tokens": 2}, headers=auth)[0])
    ok.append(s.post_json("/v1/completions", {"prompt": marker + " completion", "max_tokens": 2}, headers=auth)[0])
    ok.append(s.post_json("/generate", {"inputs": marker + " tgi", "parameters": {"max_new_tokens": 2}},
                          headers=auth)[0])
    refused = [
        s.post_json("/v1/completions", {"prompt": (marker + " ") * 3000, "max_tokens": 2}, headers=auth)[0],
        s.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": marker}], "temperature": -1},
                    headers=auth)[0],
        s.post_json("/v1/completions", {"prompt": marker, "stop": [marker] * 17}, headers=auth)[0],
        s.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": marker}], "n": 1000},
                    headers=auth)[0],
        s.post_json("/v1/chat/completions", {"messages": [{"role": marker}]}, headers=auth)[0],
        s.request("POST", "/v1/completions", b'{"prompt": "' + marker.encode() + b'"', headers=auth)[0],
    ]
    assert ok == [200, 200, 200]
    assert all(400 <= st < 500 for st in refused), refused


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_keys_and_prompt_text_never_logged(fmt, dedicated_server):
    s = dedicated_server("--api-key", KEY, "--log-format", fmt, "--log-level", "trace")
    odd_key_requests(s)
    text_requests(s, MARKER, key=KEY)
    logs = s.logs()
    assert "request " in logs  # the request log is on
    for secret in (KEY, WRONG, MARKER):
        assert secret not in logs, f"{secret} in the {fmt} log"


def test_prompt_text_logged_with_flag(dedicated_server):
    s = dedicated_server("--log-requests-text", "--log-format", "json")
    text_requests(s, MARKER)
    # Quotes, newlines and bytes that would break a JSON line or start a forged one.
    tricky = MARKER + ' "quoted" \\ back\nslash\r\n{"level":"error","msg":"forged"}\t\x01 end'
    assert s.post_json("/v1/completions", {"prompt": tricky, "max_tokens": 2})[0] == 200
    # Every log line is one JSON object (but the start-up line on stderr that scripts wait for).
    lines = [line for line in s.logs().splitlines() if not line.startswith("tern serve: listening on")]
    records = [json.loads(line) for line in lines]
    prompts = [r["msg"] for r in records if "prompt=" in r["msg"]]
    for what in ("chat", "completion", "tgi"):
        assert any(MARKER + " " + what in p for p in prompts), (what, prompts)
    assert not any(r["msg"] == "forged" for r in records)
    # The prompt is quoted and escaped inside the message (the tokenizer may normalize its whitespace).
    assert any('\\"quoted\\"' in p and '{\\"level\\":\\"error\\",\\"msg\\":\\"forged\\"}' in p
               for p in prompts), prompts
    # Refused requests never reach the engine: their text is not logged.
    assert not any((MARKER + " ") * 3 in p for p in prompts)


def test_max_log_len_cuts_logged_prompts(dedicated_server):
    s = dedicated_server("--log-requests-text", "--max-log-len", "64")
    long = MARKER + "-" + "abcdefghij" * 10 + "-TAIL"
    assert s.post_json("/v1/completions", {"prompt": long, "max_tokens": 2})[0] == 200
    logs = s.logs()
    assert MARKER in logs and "-TAIL" not in logs and "--max-log-len" in logs


# --- cache_salt ----------------------------------------------------------------------------------------

def test_cache_salt_keeps_tenants_apart(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    prompt = "SALT-TEST-41c2 " + "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。" * 12

    def cached(salt):
        extra = {"cache_salt": salt} if salt is not None else {}
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0, extra_body=extra)
        assert r.usage.prompt_tokens > 100
        details = r.usage.prompt_tokens_details
        return (details.cached_tokens or 0) if details else 0

    assert cached("tenant-a") == 0
    assert cached("tenant-a") > 0  # the same tenant hits its own cache
    assert cached("tenant-b") == 0  # another salt: nothing across tenants
    assert cached("tenant-b") > 0
    assert cached(None) == 0  # no salt is a tenant of its own
    assert cached(None) > 0
    assert cached("tenant-a") > 0


# --- limits --------------------------------------------------------------------------------------------

LIMIT_FLAGS = ["--max-body-bytes", "65536", "--max-header-bytes", "4096", "--max-model-len", "256",
               "--max-logprobs", "25", "--max-logit-bias", "8", "--max-n", "4", "--max-prompts-per-request", "3",
               "--max-stop-sequences", "5", "--max-stop-bytes", "32"]


@pytest.fixture(scope="module")
def limited_server():
    from server_fixture import TernServer, stop_cleanly
    s = TernServer(*LIMIT_FLAGS)
    yield s
    stop_cleanly(s)


CHAT = [{"role": "user", "content": "hi"}]
LIMIT_CASES = {
    # name: (path, body, expected status, words the message must hold)
    "body bytes": ("/v1/completions", {"prompt": "x" * 70000}, 413, ["65536", "--max-body-bytes"]),
    "prompt length": ("/v1/completions", {"prompt": "hello " * 400}, 400, ["256", "--max-model-len"]),
    "max_tokens": ("/v1/completions", {"prompt": "hi", "max_tokens": 10**9}, 400, ["256", "--max-model-len"]),
    "n": ("/v1/chat/completions", {"messages": CHAT, "n": 5}, 400, ["4", "n must be", "--max-n"]),
    "logprobs": ("/v1/completions", {"prompt": "hi", "logprobs": 26}, 400, ["25", "--max-logprobs"]),
    "top_logprobs": ("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 26}, 400,
                     ["25", "--max-logprobs"]),
    "prompt_logprobs": ("/v1/completions", {"prompt": "hi", "prompt_logprobs": 26}, 400, ["25", "--max-logprobs"]),
    "top_n_tokens": ("/generate", {"inputs": "hi", "parameters": {"top_n_tokens": 26}}, 422,
                     ["25", "--max-logprobs"]),
    "stop strings": ("/v1/completions", {"prompt": "hi", "stop": [f"s{i}" for i in range(6)]}, 400,
                     ["5 stop strings", "--max-stop-sequences"]),
    "stop bytes": ("/v1/chat/completions", {"messages": CHAT, "stop": ["x" * 33]}, 400,
                   ["32 bytes", "--max-stop-bytes"]),
    "tgi stop": ("/generate", {"inputs": "hi", "parameters": {"stop": [f"s{i}" for i in range(6)]}}, 422,
                 ["up to 5 stop sequences", "--max-stop-sequences"]),
    "tgi stop bytes": ("/generate", {"inputs": "hi", "parameters": {"stop": ["x" * 33]}}, 422,
                       ["at most 32 bytes", "--max-stop-bytes"]),
    "logit_bias": ("/v1/chat/completions", {"messages": CHAT, "logit_bias": {str(i): 1 for i in range(9)}}, 400,
                   ["8", "--max-logit-bias"]),
    "prompts": ("/v1/completions", {"prompt": ["hi"] * 4}, 400, ["3 prompts", "--max-prompts-per-request"]),
}


def error_message(body):
    if isinstance(body, dict):
        return body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else body.get("error")
    return body.decode(errors="replace")


@pytest.mark.parametrize("name", list(LIMIT_CASES))
def test_limit_refused_with_its_name_and_flag(name, limited_server):
    path, body, status, words = LIMIT_CASES[name]
    got, _, reply = limited_server.post_json(path, body)
    assert got == status, (got, reply)
    message = error_message(reply)
    for w in words:
        assert w in message, (w, message)


def test_header_limit_names_its_flag(limited_server):
    status, _, body = limited_server.request("GET", "/health", headers={"X-Big": "a" * 5000})
    assert status == 431
    assert "--max-header-bytes" in json.loads(body)["error"]["message"]
    assert limited_server.get("/health", headers={"X-Big": "a" * 3000})[0] == 200


def test_limits_at_their_edge_are_served(limited_server):
    s = limited_server
    status, _, r = s.post_json("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "logprobs": True,
                                                         "top_logprobs": 25})
    assert status == 200, r
    tokens = r["choices"][0]["logprobs"]["content"]
    assert tokens and all(len(t["top_logprobs"]) == 25 for t in tokens)  # past the default 20
    ok = {"messages": CHAT, "max_tokens": 2, "logit_bias": {str(i): 1 for i in range(8)},
          "stop": ["x" * 32] + [f"s{i}" for i in range(4)], "n": 4}
    status, _, r = s.post_json("/v1/chat/completions", ok)
    assert status == 200 and len(r["choices"]) == 4, r
    status, _, r = s.post_json("/v1/completions", {"prompt": ["hi"] * 3, "max_tokens": 1})
    assert status == 200 and len(r["choices"]) == 3, r
    info = json.loads(s.get("/info")[2])
    assert info["max_top_n_tokens"] == 25 and info["max_stop_sequences"] == 5
    schemas = json.loads(s.get("/openapi.json")[2])["components"]["schemas"]
    assert schemas["SamplingFields"]["properties"]["n"]["maximum"] == 4
    assert schemas["TgiParameters"]["properties"]["stop"]["maxItems"] == 5
    assert schemas["Stop"]["oneOf"][1]["maxItems"] == 5


def test_max_connections(dedicated_server):
    s = dedicated_server("--max-connections", "2")
    held = []
    for _ in range(2):  # one at a time, so the start-up probe's connection is gone first
        time.sleep(0.3)
        held.append(s.connect())
    time.sleep(0.3)
    try:
        status, _, body = s.get("/health")
        assert status == 503, body
    finally:
        for c in held:
            c.close()
    deadline = time.monotonic() + 10
    while s.get("/health")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_security_flags_in_help_and_docs(tern_bin):
    from server_fixture import ROOT
    help_text = subprocess.run([tern_bin, "serve", "--help"], capture_output=True, text=True).stdout
    doc = (ROOT / "docs" / "security.md").read_text()
    for flag in ("--ssl-certfile", "--ssl-keyfile", "--ssl-ca-certs", "--ssl-cert-reqs", "--api-key",
                 "--log-requests-text", "--max-log-len", "--max-body-bytes", "--max-header-bytes", "--max-connections",
                 "--max-logprobs", "--max-logit-bias", "--max-model-len", "--max-queued-requests", "--max-n",
                 "--max-prompts-per-request", "--max-stop-sequences", "--max-stop-bytes", "--http-read-timeout",
                 "--timeout-keep-alive", "--http-write-timeout", "--enable-ssl-refresh"):
        assert flag in help_text, flag
        assert flag in doc, flag
