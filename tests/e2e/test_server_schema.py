"""/openapi.json: it documents every route, tern's real responses conform to
it, and schemathesis, fuzzing valid and invalid requests from it, finds no
5xx, no undocumented status or content type and no response off the schema."""

import copy
import json
import os
import pathlib
import subprocess
import sys

import jsonschema
import pytest

pytest_plugins = ["server_fixture"]

ROUTES = {
    ("/v1/chat/completions", "post"), ("/v1/completions", "post"), ("/v1/models", "get"),
    ("/tokenize", "post"), ("/detokenize", "post"), ("/health", "get"), ("/ping", "get"), ("/ping", "post"),
    ("/version", "get"), ("/metrics", "get"), ("/openapi.json", "get"), ("/", "get"), ("/", "post"),
    ("/generate", "post"), ("/generate_stream", "post"), ("/info", "get"),
}


@pytest.fixture(scope="module")
def spec(server):
    status, headers, raw = server.get("/openapi.json")
    assert status == 200 and headers["content-type"].startswith("application/json")
    return json.loads(raw)


def to_json_schema(node):
    """OpenAPI 3.0 schema objects -> JSON Schema draft 4 (nullable -> anyOf null)."""
    if isinstance(node, list):
        return [to_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def validator_for(spec, path, method, status):
    """A validator for the JSON body of `status` on (path, method)."""
    root = to_json_schema(copy.deepcopy(spec))
    response = spec["paths"][path][method]["responses"][str(status)]
    if "$ref" in response:
        response = spec["components"]["responses"][response["$ref"].split("/")[-1]]
    schema = to_json_schema(response["content"]["application/json"]["schema"])
    # The document is the root resource, so "#/components/..." references resolve.
    return jsonschema.Draft4Validator(dict(root, **schema))


def check(spec, path, method, status, body):
    v = validator_for(spec, path, method, status)
    errors = sorted(v.iter_errors(body), key=str)
    assert not errors, f"{method.upper()} {path} {status}: {errors[0].message} at {list(errors[0].path)}"


def test_document_covers_every_route(spec):
    assert spec["openapi"].startswith("3.0")
    documented = {(p, m) for p, item in spec["paths"].items() for m in item}
    assert documented == ROUTES
    for path, method in ROUTES:
        op = spec["paths"][path][method]
        assert "200" in op["responses"] and "400" in op["responses"]
        if method == "post" and path not in ("/ping",):
            assert op["requestBody"]["content"]["application/json"]["schema"]
    chat = spec["components"]["schemas"]["SamplingFields"]["properties"]
    assert chat["n"]["minimum"] == 1 and chat["temperature"]["minimum"] == 0
    assert spec["components"]["schemas"]["TgiParameters"]["properties"]["top_p"]["exclusiveMaximum"] is True


def test_real_responses_conform(server, spec):
    """Responses tern sends for ordinary requests, checked against the document."""
    cases = [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                  "logprobs": True, "top_logprobs": 2, "n": 2, "seed": 1}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 30,
                                  "temperature": 0, "stop": ["e", "a"]}),
        ("/v1/completions", {"prompt": ["Hello", "World"], "max_tokens": 3, "logprobs": 3, "echo": True}),
        ("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2}),
        ("/tokenize", {"prompt": "Hello world", "return_token_strs": True}),
        ("/tokenize", {"messages": [{"role": "user", "content": "Hello"}]}),
        ("/detokenize", {"tokens": [5, 6, 7]}),
        ("/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 3, "details": True, "top_n_tokens": 2}}),
        ("/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 3, "do_sample": True, "details": True}}),
        ("/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 2}}),
        ("/", {"inputs": "Hi", "parameters": {"max_new_tokens": 2, "details": True}}),
    ]
    for path, body in cases:
        status, _, r = server.post_json(path, body)
        assert status == 200, (path, r)
        check(spec, path, "post", 200, r)
    for path in ("/v1/models", "/version", "/info", "/openapi.json"):
        status, _, raw = server.get(path)
        check(spec, path, "get", 200, json.loads(raw))
    errors = [
        ("/v1/chat/completions", {"messages": []}, 400),
        ("/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404),
        ("/v1/completions", {"prompt": "x", "temperature": -2}, 400),
        ("/detokenize", {"tokens": [-1]}, 400),
        ("/generate", {"inputs": "x", "parameters": {"temperature": 0}}, 422),
        ("/generate_stream", {"inputs": ""}, 422),
        ("/", {"inputs": "x", "stream": 3}, 422),
    ]
    for path, body, code in errors:
        status, _, r = server.post_json(path, body)
        assert status == code, (path, r)
        check(spec, path, "post", code, r)
    status, _, raw = server.request("POST", "/generate", b"{oops")
    check(spec, "/generate", "post", 400, json.loads(raw))


def test_schemathesis_finds_nothing(dedicated_server, tmp_path):
    """Coverage and fuzzing phases, 30 examples per operation, fixed seed.
    The short context keeps requests that leave max_tokens out cheap."""
    s = dedicated_server("--max-model-len", "128", "--disable-log-requests")
    st = pathlib.Path(sys.executable).with_name("st")
    cmd = [str(st), "run", s.url + "/openapi.json",
           "--checks", "not_a_server_error,response_schema_conformance,status_code_conformance,"
                       "content_type_conformance",
           "--max-examples", "30", "--seed", "7", "--phases", "coverage,fuzzing", "--workers", "2",
           "--request-timeout", "30", "--no-color"]
    env = dict(os.environ, SCHEMATHESIS_TELEMETRY="false", NO_COLOR="1")
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:] + "\n--- server log ---\n" + s.logs()[-3000:]
    assert "No issues found" in out, out[-3000:]
    assert s.alive()
