"""Hostile requests against the real `tern serve`: a seeded generator of
malformed and extreme requests (invalid JSON and UTF-8, a wrong type for every
field, huge, negative and non-finite numbers, 10 MB prompts, deep nesting,
unknown models, bad stop lists, huge logit_bias, unknown routes and methods,
bad headers and framing, slowloris trickles, pipelined garbage), each sent on
its own raw connection, and the check that every one gets a clear 4xx whose
JSON error body names the problem: no 5xx, no crash, no hang, and afterwards
no running request and no KV block in use.

    python tests/reliability/hostile.py --count 5000        # starts its own server
    python tests/reliability/hostile.py --url http://127.0.0.1:8000 --count 2000
"""

import argparse
import json
import random
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

if __package__ in (None, ""):
    import pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import support
else:
    from . import support

# A request must arrive whole within this many seconds (the server's --http-read-timeout in these runs):
# long enough for a 10 MB body on a busy 2-core machine.
READ_TIMEOUT_S = 5
# Seconds without an answer that count as a hang (a 10 MB prompt is read and tokenized well within it).
HANG_S = 60

OPENAI_ROUTES = ("/v1/chat/completions", "/v1/completions")
TGI_ROUTES = ("/generate", "/generate_stream", "/")
JSON_ROUTES = OPENAI_ROUTES + TGI_ROUTES + ("/tokenize", "/detokenize")

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
COMPLETION = {"prompt": "hi", "max_tokens": 1}
TGI = {"inputs": "hi", "parameters": {"max_new_tokens": 1}}
BASE = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETION, "/generate": TGI, "/generate_stream": TGI,
        "/": TGI, "/tokenize": {"prompt": "hi"}, "/detokenize": {"tokens": [1, 2]}}
# Richer valid bodies, for the truncation and byte-insertion families.
RICH = {
    "/v1/chat/completions": {"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": [{"type": "text", "text": "你好"}]}],
                             "max_tokens": 1, "temperature": 0.5, "stop": ["\n", "。"], "logprobs": True,
                             "top_logprobs": 2, "stream": True, "stream_options": {"include_usage": True}},
    "/v1/completions": {"prompt": ["a b c", "天气"], "max_tokens": 1, "n": 2, "logprobs": 1, "echo": True,
                        "logit_bias": {"5": -100}, "seed": 7, "stop_token_ids": [2]},
    "/generate": {"inputs": "hello", "parameters": {"max_new_tokens": 1, "do_sample": True, "top_k": 5,
                                                    "stop": ["x"], "details": True}},
}


@dataclass
class Expect:
    """One response the case must get: a status in `statuses` (any 4xx when empty) whose
    body names one of `names` (case-insensitive; any text when empty)."""
    statuses: tuple = ()
    names: tuple = ()


@dataclass
class Case:
    family: str
    name: str
    data: bytes
    expect: list = field(default_factory=lambda: [Expect()])
    chunks: list = None      # slowloris: sent one by one, `delay` s apart
    delay: float = 0.0
    # The connection must then close (after the last expected response) within this many seconds.
    closes_within: float = None


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False).encode()


def post(route, body):
    return support.json_post(route, body if isinstance(body, bytes) else dumps(body))


def field_case(family, route, key, value, names, base=None, statuses=()):
    body = dict(base if base is not None else BASE[route])
    if route in TGI_ROUTES and key not in ("inputs", "parameters", "stream"):
        body["parameters"] = dict(body.get("parameters", {}), **{key: value})
    else:
        body[key] = value
    return Case(family, f"{route} {key}={json.dumps(value)[:60]}", post(route, dumps(body)),
                [Expect(statuses, names)])


# --- invalid JSON and invalid UTF-8 --------------------------------------------------

BAD_JSON = [b"", b"{", b"}", b"[", b"nul", b"NaN", b'{"prompt": NaN}', b'{"max_tokens": Infinity}',
            b'{"prompt": "x",}', b"{'prompt': 'x'}", b'{"prompt" "x"}', b'{"prompt": "x"} trailing',
            b"\x00", b"/* c */ {}", b'{"prompt": "x"', b'{"prompt": "\\x41"}', b'{"prompt": "\\u12"}',
            b'{"prompt": "a\nb"}', b'{"max_tokens": 01}', b'{"max_tokens": +1}', b'{"max_tokens": .5}',
            b'{"max_tokens": 1.}', b'{"a": tru}', b'\xef\xbb\xbf\xef\xbb\xbf{}']
BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe4\xbd", b"\xf8\x88\x80\x80\x80", b"\x80",
            b"\xf4\x90\x80\x80"]
BAD_ESCAPES = [b"\\ud800", b"\\udc00", b"\\ud800\\u0041", b"\\udbff"]


def invalid_json_cases(rng):
    cases = []
    for route in JSON_ROUTES:
        for raw in BAD_JSON:
            cases.append(Case("invalid-json", f"{route} {raw[:30]!r}", post(route, raw), [Expect((400,), ("json",))]))
    string_fields = {"/v1/chat/completions": ("content", "role", "model"), "/v1/completions": ("prompt", "model"),
                     "/generate": ("inputs",), "/tokenize": ("prompt",)}
    for route, keys in string_fields.items():
        for key in keys:
            for bad in BAD_UTF8 + BAD_ESCAPES:
                if key in ("content", "role"):
                    msg = {"role": "user", "content": "hi"}
                    body = dumps(dict(BASE[route], messages=[dict(msg, **{key: "@@"})]))
                elif route == "/generate":
                    body = dumps(dict(BASE[route], inputs="@@"))
                else:
                    body = dumps(dict(BASE[route], **{key: "@@"}))
                body = body.replace(b"@@", b"a" + bad + b"b")
                cases.append(Case("invalid-utf8", f"{route} {key} {bad!r}", post(route, body),
                                  [Expect((400,), ("json", "utf-8"))]))
    return cases


def truncated_json_cases(rng, count):
    """Proper prefixes of valid bodies: never valid JSON."""
    cases = []
    routes = list(JSON_ROUTES)
    for i in range(count):
        route = routes[i % len(routes)]
        full = dumps(RICH.get(route, BASE[route]) if rng.random() < 0.5 else BASE[route])
        cut = rng.randrange(1, len(full))
        cases.append(Case("truncated-json", f"{route} cut at {cut}", post(route, full[:cut]),
                          [Expect((400,), ("json",))]))
    return cases


def inserted_byte_cases(rng, count):
    """A byte that is never valid in UTF-8 inserted anywhere in a valid body."""
    cases = []
    routes = list(JSON_ROUTES)
    for i in range(count):
        route = routes[i % len(routes)]
        full = dumps(RICH.get(route, BASE[route]))
        at = rng.randrange(0, len(full) + 1)
        bad = rng.choice([b"\xff", b"\xfe", b"\xc1", b"\xf5", b"\xf8"])
        cases.append(Case("invalid-byte", f"{route} {bad!r} at {at}", post(route, full[:at] + bad + full[at:]),
                          [Expect((400,), ("json", "utf-8"))]))
    return cases


# --- wrong types for every field ----------------------------------------------------------

WRONG = {
    "int": ["1", True, [1], {"v": 1}, 1.5, "ten"],
    "num": ["0.5", True, [0.5], {"v": 0.5}, "high"],
    "bool": ["true", 1, 0, [True], {"v": True}, "yes"],
    "str": [1, True, ["x"], {"v": "x"}, 1.5],
    "obj": ["x", 1, [1], True],
    "stop": [1, True, {"v": "x"}, [1], [None], [["x"]], [{"a": 1}], [True]],
    "ids": ["1", 1, [1.5], ["1"], [-1], [True], {"a": 1}, [[1]]],
    "bias": ["x", [1], 1, True, {"5": "x"}, {"5": [1]}, {"x": 1}, {"5": True}, {"5": {"v": 1}}, {"": 1},
             {"1.5": 1}, {" 5": 1}],
}
OPENAI_FIELDS = {
    "model": "str", "user": "str", "cache_salt": "str",
    "max_tokens": "int", "max_completion_tokens": "int", "n": "int", "seed": "int", "top_k": "int",
    "min_tokens": "int", "priority": "int", "prompt_logprobs": "int",
    "temperature": "num", "top_p": "num", "min_p": "num", "presence_penalty": "num", "frequency_penalty": "num",
    "repetition_penalty": "num",
    "stream": "bool", "ignore_eos": "bool", "skip_special_tokens": "bool", "include_stop_str_in_output": "bool",
    "add_special_tokens": "bool",
    "stop": "stop", "stop_token_ids": "ids", "logit_bias": "bias",
    "response_format": "obj",
}
CHAT_FIELDS = {"logprobs": "bool", "top_logprobs": "int", "add_generation_prompt": "bool",
               "chat_template_kwargs": "obj"}
COMPLETION_FIELDS = {"logprobs": "int", "echo": "bool", "suffix": "str", "best_of": "int"}
TGI_FIELDS = {"temperature": "num", "top_p": "num", "typical_p": "num", "repetition_penalty": "num",
              "frequency_penalty": "num", "top_k": "int", "max_new_tokens": "int", "seed": "int", "truncate": "int",
              "best_of": "int", "top_n_tokens": "int", "do_sample": "bool", "details": "bool",
              "decoder_input_details": "bool", "return_full_text": "bool", "watermark": "bool",
              "stop": "ids", "adapter_id": "str"}
BAD_MESSAGES = ["hi", 1, {}, [], [1], ["hi"], [None], [{"content": "x"}], [{"role": 1, "content": "x"}],
                [{"role": "user", "content": 1}], [{"role": "user", "content": [1]}],
                [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}],
                [{"role": "user"}], [{"role": "user", "content": {"a": 1}}], [{"role": "user", "content": True}],
                [{"role": "user", "content": [{"type": "text"}]}], [{"role": "user", "content": [{"text": "x"}]}],
                [{"role": "user", "content": [{"type": "text", "text": 5}]}]]
BAD_PROMPTS = [1, True, {"a": 1}, [], [[]], [None], [1.5], [-1], [99999999], [[1, "x"]], ["x", 1], [True],
               [1, 2**40], [[1], [-5]], ""]


def wrong_type_cases(rng):
    cases = []
    for route, fields in (("/v1/chat/completions", {**OPENAI_FIELDS, **CHAT_FIELDS}),
                          ("/v1/completions", {**OPENAI_FIELDS, **COMPLETION_FIELDS})):
        for key, kind in fields.items():
            for value in WRONG[kind]:
                if key == "stop_token_ids" and value == [[1]]:
                    continue
                cases.append(field_case("wrong-type", route, key, value, (key,)))
    for route in TGI_ROUTES:
        for key, kind in TGI_FIELDS.items():
            wrong = WRONG["stop"] if key == "stop" else WRONG[kind]
            for value in wrong:
                cases.append(field_case("wrong-type", route, key, value, (key,)))
        for value in WRONG["str"] + [""]:
            cases.append(field_case("wrong-type", route, "inputs", value, ("inputs",)))
        for value in WRONG["obj"]:
            cases.append(field_case("wrong-type", route, "parameters", value, ("parameters",)))
    for value in WRONG["bool"]:
        cases.append(field_case("wrong-type", "/", "stream", value, ("stream",)))
    for value in BAD_MESSAGES:
        cases.append(field_case("wrong-type", "/v1/chat/completions", "messages", value, ("messages", "content")))
    for value in BAD_PROMPTS:
        cases.append(field_case("wrong-type", "/v1/completions", "prompt", value, ("prompt",)))
    for value in [1, True, {"a": 1}, ["x"], None]:
        cases.append(field_case("wrong-type", "/tokenize", "prompt", value, ("prompt",), base={}))
    for key in ("add_special_tokens", "return_token_strs", "add_generation_prompt"):
        for value in WRONG["bool"]:
            cases.append(field_case("wrong-type", "/tokenize", key, value, (key,)))
    for value in ["1", 1, None, {"a": 1}, [1.5], ["1"], [-1], [True], [[1]], [2**40], [1280]]:
        cases.append(field_case("wrong-type", "/detokenize", "tokens", value, ("tokens",), base={}))
    # The whole body of the wrong type.
    for route in JSON_ROUTES:
        for body in (b"[]", b"1", b'"x"', b"null", b"true", b"[{}]"):
            cases.append(Case("wrong-type", f"{route} body {body!r}", post(route, body), [Expect((400, 422), ())]))
    return cases


# --- extreme numbers -----------------------------------------------------------------------

EXTREME_OPENAI = [
    ("n", 10**6), ("n", -1), ("n", 0), ("n", 129), ("n", 1e6), ("n", 2**63), ("n", 2**64), ("n", -2**63),
    ("max_tokens", 10**9), ("max_tokens", -1), ("max_tokens", 2**31), ("max_tokens", 2**63 - 1),
    ("max_tokens", 2**64 + 1), ("max_tokens", 1e300), ("max_tokens", -1e300), ("max_tokens", 4096),
    ("max_completion_tokens", 10**9), ("max_completion_tokens", -5),
    ("temperature", -1), ("temperature", -1e-9), ("temperature", -1e308), ("temperature", 1e400),
    ("top_p", 0), ("top_p", -1), ("top_p", 1.5), ("top_p", 1e9), ("top_p", -1e400),
    ("top_k", -2), ("top_k", -10**9), ("top_k", 2**64), ("min_p", -0.1), ("min_p", 1.1), ("min_p", 1e300),
    ("presence_penalty", 2.5), ("presence_penalty", -1e9), ("frequency_penalty", 3), ("frequency_penalty", -2.01),
    ("repetition_penalty", 0), ("repetition_penalty", -1), ("repetition_penalty", -1e300),
    ("seed", 2**64), ("seed", -2**70), ("seed", 1e30),
    ("min_tokens", -1), ("min_tokens", 2), ("min_tokens", 10**9),
    ("prompt_logprobs", 21), ("prompt_logprobs", -1), ("prompt_logprobs", 10**6),
    ("stop_token_ids", [-1]), ("stop_token_ids", [2**40]), ("stop_token_ids", [2**31]),
    ("logit_bias", {"-1": 1}), ("logit_bias", {"1280": 1}), ("logit_bias", {"99999999999999999999": 1}),
    ("logit_bias", {"5": 1e400}), ("logit_bias", {"5": -1e400}), ("logit_bias", {"-99999999999999999999": 1}),
]
EXTREME_CHAT = [("top_logprobs", 21), ("top_logprobs", -1), ("top_logprobs", 10**9), ("max_tokens", 0)]
EXTREME_COMPLETION = [("logprobs", 21), ("logprobs", -1), ("logprobs", 10**6), ("best_of", 10**6),
                      ("best_of", 0), ("max_tokens", 0)]
EXTREME_TGI = [
    ("max_new_tokens", 0), ("max_new_tokens", 10**9), ("max_new_tokens", 2**32 + 1), ("max_new_tokens", -1),
    ("max_new_tokens", 4096), ("max_new_tokens", 1e300), ("top_k", 0), ("top_k", -1), ("top_k", 2**40),
    ("temperature", 0), ("temperature", -1), ("temperature", 1e400), ("top_p", 1.0), ("top_p", 0), ("top_p", 2),
    ("repetition_penalty", 0), ("repetition_penalty", -0.5), ("best_of", 0), ("best_of", 10**9),
    ("top_n_tokens", 10**6), ("top_n_tokens", 21), ("truncate", 0), ("truncate", 10**9), ("seed", -1),
    ("seed", 2**64), ("frequency_penalty", 3), ("frequency_penalty", -1e9), ("typical_p", 2), ("typical_p", 0),
]


def extreme_number_cases(rng):
    cases = []
    for route, extra in (("/v1/chat/completions", EXTREME_CHAT), ("/v1/completions", EXTREME_COMPLETION)):
        for key, value in EXTREME_OPENAI + extra:
            names = (key, "max_tokens", "context length") if key in ("max_tokens", "min_tokens") else (key,)
            body = dict(BASE[route])
            if key == "max_tokens":
                body.pop("max_tokens")
            if key == "min_tokens":
                body["max_tokens"] = 1
            case = field_case("extreme-number", route, key, value, names, base=body)
            # JSON has no infinity: Python writes it as Infinity, which is itself invalid JSON.
            if b"Infinity" in case.data:
                case.expect = [Expect((400,), (key, "json"))]
            cases.append(case)
    for route in TGI_ROUTES:
        for key, value in EXTREME_TGI:
            case = field_case("extreme-number", route, key, value, (key,), base={"inputs": "hi", "parameters": {}})
            if b"Infinity" in case.data:
                case.expect = [Expect((400,), ("json",))]
            cases.append(case)
    # Numbers as text the JSON grammar allows but no double holds.
    for route in ("/v1/completions", "/generate"):
        for text in (b"1e99999", b"-1e99999", b"1" * 400, b"-" + b"9" * 400, b"0." + b"0" * 400 + b"1e400"):
            if route == "/generate":
                body = b'{"inputs": "hi", "parameters": {"max_new_tokens": ' + text + b'}}'
            else:
                body = b'{"prompt": "hi", "max_tokens": ' + text + b'}'
            cases.append(Case("extreme-number", f"{route} max_tokens={text[:20]!r}...", post(route, body),
                              [Expect((400, 422), ("max_tokens", "max_new_tokens", "json"))]))
    return cases


# --- huge inputs -----------------------------------------------------------------------------

def huge_input_cases(rng, scale=1.0):
    mb = max(1, int(10 * scale)) << 20
    words = " ".join(rng.choice(["alpha", "beta", "天气", "很好", "x", "hello", "。"]) for _ in range(mb // 5))
    texts = {"ascii": "a" * mb, "chinese": "春眠不觉晓" * (mb // 15), "words": words[:mb]}
    cases = []
    for kind, text in texts.items():
        cases.append(field_case("huge", "/v1/completions", "prompt", text, ("context length", "prompt")))
        cases.append(Case("huge", f"/v1/chat/completions {kind} {len(text.encode()) >> 20} MB content",
                          post("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}),
                          [Expect((400,), ("context length", "messages"))]))
        cases.append(Case("huge", f"/generate {kind} {len(text.encode()) >> 20} MB inputs",
                          post("/generate", {"inputs": text}), [Expect((422,), ("inputs",))]))
    cases += [
        field_case("huge", "/v1/completions", "prompt", [5] * (mb // 3), ("context length", "prompt")),
        field_case("huge", "/v1/completions", "prompt", ["hi"] * 1000, ("prompt",)),
        field_case("huge", "/v1/completions", "prompt", [[5, 6]] * 300, ("prompt",)),
        field_case("huge", "/v1/chat/completions", "messages",
                   [{"role": "user", "content": "hello there"}] * (mb // 64), ("context length", "messages")),
        field_case("huge", "/v1/completions", "stop", ["s%d" % i for i in range(100000)], ("stop",)),
        field_case("huge", "/v1/chat/completions", "stop", ["x"] * 17, ("stop",)),
        field_case("huge", "/generate", "stop", ["s%d" % i for i in range(50000)], ("stop",)),
        field_case("huge", "/v1/completions", "logit_bias", {str(i): 1 for i in range(200000)}, ("logit_bias",)),
        field_case("huge", "/v1/completions", "logit_bias", {str(i): -100 for i in range(1281)}, ("logit_bias",)),
        field_case("huge", "/v1/chat/completions", "logit_bias", {str(i * 7919): 5 for i in range(300000)},
                   ("logit_bias",)),
        field_case("huge", "/v1/completions", "stop_token_ids", list(range(-5, 1000000)), ("stop_token_ids",)),
        field_case("huge", "/detokenize", "tokens", list(range(0, 1000000)), ("tokens",), base={}),
        Case("huge", "/v1/completions 20 MB body", post("/v1/completions", {"prompt": "b" * (20 << 20)}),
             [Expect((413,), ("too large",))]),
        Case("huge", "/v1/completions Content-Length 1 TB, 1 MB sent",
             support.http_request("POST", "/v1/completions", b"{" + b" " * (1 << 20),
                                  [("Content-Length", str(1 << 40))]),
             [Expect((413,), ("too large",))]),
    ]
    return cases


# --- deep nesting ----------------------------------------------------------------------------

def nesting_cases(rng, scale=1.0):
    cases = []
    for depth in (1000, 100000, int(2000000 * scale) or 1000):
        for route in JSON_ROUTES:
            cases.append(Case("deep-nesting", f"{route} body [[[ x{depth}", post(route, b"[" * depth + b"]" * depth),
                              [Expect((400, 422), ())]))
        nested = b"[" * depth + b"1" + b"]" * depth
        obj = b'{"a":' * depth + b"1" + b"}" * depth
        for route, body, names in (
                ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi", "x": ' + nested + b"}]}",
                 ("messages",)),
                ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": ' + nested + b"}]}",
                 ("messages", "content")),
                ("/v1/chat/completions",
                 b'{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"k": ' + obj + b"}}",
                 ("chat_template_kwargs", "nest")),
                ("/v1/completions", b'{"prompt": ' + nested + b"}", ("prompt",)),
                ("/v1/completions", b'{"prompt": "hi", "logit_bias": {"5": ' + obj + b"}}", ("logit_bias",)),
                ("/v1/completions", b'{"prompt": "hi", "stop": ' + nested + b"}", ("stop",)),
                ("/v1/completions", b'{"prompt": "hi", "max_tokens": 1, "user": ' + obj + b"}", ("user",)),
                ("/generate", b'{"inputs": "hi", "parameters": ' + obj + b"}", ("parameters", "a")),
                ("/generate", b'{"inputs": ' + nested + b"}", ("inputs",)),
                ("/tokenize", b'{"messages": [{"role": "user", "content": ' + nested + b"}]}", ("messages",)),
                ("/detokenize", b'{"tokens": ' + nested + b"}", ("tokens",))):
            cases.append(Case("deep-nesting", f"{route} {names[0]} nested x{depth}", post(route, body),
                              [Expect((400, 422), names + ("nest",))]))
    return cases


# --- unknown models, stop lists -------------------------------------------------------------

UNKNOWN_MODELS = ["gpt-4", "", " ", "ernie-tiny ", "ERNIE-TINY", "../../etc/passwd", "m" * 10000, "模型",
                  "baidu/ERNIE-4.5-0.3B-PT", "ernie-tiny\u0000", "ernie-tiny/../x", "%s%n"]


def unknown_model_cases(rng):
    cases = []
    for route in OPENAI_ROUTES:
        for name in UNKNOWN_MODELS:
            case = field_case("unknown-model", route, "model", name, ("model",), statuses=(404,))
            cases.append(case)
    return cases


# (Empty stop strings are dropped before counting, as in TGI: [""] * 17 is no stop list at all.)
BAD_STOPS = [["x"] * 17, ["a"] * 1000, [1, 2], [None], [["a"]], {"a": "b"}, 5, True,
             [{"text": "x"}], ["ok", 5]]


def stop_list_cases(rng):
    cases = []
    for route in OPENAI_ROUTES + ("/generate", "/generate_stream"):
        for stop in BAD_STOPS:
            cases.append(field_case("bad-stop", route, "stop", stop, ("stop",)))
    return cases


# --- routes, methods, headers, framing ---------------------------------------------------------

def route_cases(rng):
    cases = []
    known = ["/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize",
             "/detokenize", "/generate", "/generate_stream", "/info", "/version", "/ping", "/openapi.json"]
    for path in known:
        for method in ("PUT", "DELETE", "PATCH", "TRACE", "FOO", "get", "PROPFIND"):
            cases.append(Case("route-method", f"{method} {path}", support.http_request(method, path),
                              [Expect((404, 405, 400, 501), ())]))
    for path in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/generate"):
        cases.append(Case("route-method", f"GET {path}", support.http_request("GET", path), [Expect((405,), ())]))
    for path in ("/v2/chat/completions", "/v1/embeddings", "/admin", "/../../etc/passwd", "/%00", "/v1/models/x/y",
                 "/v1/chat/completions/", "//v1/completions", "/v1/completions%20", "/" + "a" * 8000,
                 "/\xff\xfe", "/x?" + "q=1&" * 1000, "/metrics/../admin", "/v1//models", "/.env", "/generate/x",
                 "/%2e%2e/%2e%2e/etc/passwd", "/v1/chat/completions;x", "/ping/", "/HEALTH"):
        for method in ("GET", "POST"):
            data = support.http_request(method, path, b"{}" if method == "POST" else b"")
            cases.append(Case("route-unknown", f"{method} {path[:40]}", data, [Expect((404, 405), ())]))
    # Targets that are not origin-form paths.
    for target in ("*", "http://evil.example/v1/models", "evil.example:443", "v1/models", "%", "/v1/models#frag"):
        cases.append(Case("route-unknown", f"GET {target}", support.http_request("GET", target),
                          [Expect((400, 404), ())]))
    cases.append(Case("route-unknown", "CONNECT evil.example:443",
                      support.http_request("CONNECT", "evil.example:443"), [Expect((400, 404, 405), ())]))
    cases.append(Case("route-unknown", "OPTIONS * without Origin", support.http_request("OPTIONS", "*"),
                      [Expect((400, 404), ())]))
    return cases


def raw(text):
    return text.encode("latin-1") if isinstance(text, str) else text


BODY = b'{"prompt": "hi", "max_tokens": 1}'


def header_cases(rng):
    P = "POST /v1/completions HTTP/1.1\r\nHost: tern\r\nContent-Type: application/json\r\n"
    G = "GET /health HTTP/1.1\r\nHost: tern\r\n"
    framing = [
        ("duplicate differing Content-Length", P + "Content-Length: 3\r\nContent-Length: 4\r\n\r\n" + "abcd", 400),
        ("negative Content-Length", P + "Content-Length: -1\r\n\r\n", 400),
        ("non-numeric Content-Length", P + "Content-Length: abc\r\n\r\n", 400),
        ("hex Content-Length", P + "Content-Length: 0x10\r\n\r\n", 400),
        ("Content-Length 1e20", P + "Content-Length: 100000000000000000000\r\n\r\n", (400, 413)),
        ("Content-Length list", P + "Content-Length: 5, 6\r\n\r\n", 400),
        ("Content-Length with spaces inside", P + "Content-Length: 1 0\r\n\r\n", 400),
        ("Content-Length plus chunked",
         P + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
         400),
        ("chunked: bad hex size", P + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400),
        ("chunked: negative size", P + "Transfer-Encoding: chunked\r\n\r\n-5\r\nabc\r\n0\r\n\r\n", 400),
        ("chunked: overflowing size", P + "Transfer-Encoding: chunked\r\n\r\n" + "f" * 22 + "\r\nab\r\n", (400, 413)),
        ("chunked: missing CRLF after data", P + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n", 400),
        ("chunked: garbage extension", P + "Transfer-Encoding: chunked\r\n\r\n3;\x01\x02\r\nabc\r\n0\r\n\r\n", 400),
        ("chunked: body over the limit", P + "Transfer-Encoding: chunked\r\n\r\n" + "2000000\r\n", 413),
        # No line end: the parser cannot tell the size line is bad until one comes, or the read timeout.
        ("chunked: garbage instead of a chunk", P + "Transfer-Encoding: chunked\r\n\r\n" + "\x00\xff" * 50, (400, 408)),
        ("Transfer-Encoding gzip", P + "Transfer-Encoding: gzip\r\n\r\nabc", 400),
        ("Transfer-Encoding chunked, gzip", P + "Transfer-Encoding: chunked, gzip\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400),
        ("Transfer-Encoding twice", P + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         400),
        ("Transfer-Encoding identity", P + "Transfer-Encoding: identity\r\n\r\n", 400),
        ("header without colon", G + "Bad Header\r\n\r\n", 400),
        ("space before colon", G + "X-A : b\r\n\r\n", 400),
        ("NUL in a header value", G + "X-A: a\x00b\r\n\r\n", 400),
        ("control byte in a header name", G + "X\x01A: b\r\n\r\n", 400),
        ("empty header name", G + ": b\r\n\r\n", 400),
        ("bare CR", G + "X-A: a\rb\r\n\r\n", 400),
        ("HTTP/9.9", "GET /health HTTP/9.9\r\n\r\n", 400),
        ("HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),
        ("HTTP/0.9 request line", "GET /health\r\n\r\n", 400),
        ("no request target", "GET  HTTP/1.1\r\n\r\n", 400),
        ("lower-case version", "GET /health http/1.1\r\n\r\n", 400),
        ("TLS ClientHello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)), 400),
        ("NUL bytes", b"\x00" * 100 + b"\r\n\r\n", 400),
        ("request line of spaces", " " * 100 + "\r\n\r\n", 400),
        ("huge header value", G + "X-Big: " + "a" * 20000 + "\r\n\r\n", 431),
        ("many headers", G + "".join(f"X-H{i}: {'v' * 20}\r\n" for i in range(2000)) + "\r\n", 431),
        ("huge request line", "GET /" + "a" * 20000 + " HTTP/1.1\r\n\r\n", (414, 431)),
        ("huge header name", G + "X" * 20000 + ": v\r\n\r\n", 431),
        ("huge Authorization", G + "Authorization: Bearer " + "k" * 20000 + "\r\n\r\n", 431),
        ("Expect: 100-continue with an oversized body",
         P + f"Content-Length: {64 << 20}\r\nExpect: 100-continue\r\n\r\n",
         413),
    ]
    cases = []
    for name, data, status in framing:
        statuses = status if isinstance(status, tuple) else (status,)
        cases.append(Case("bad-header", name, raw(data), [Expect(statuses, ())]))
    # Duplicated and odd headers on a request that is otherwise valid JSON but not valid as a request.
    for name, headers in (
            ("duplicate Content-Type, bad body", [("Content-Type", "application/json"), ("Content-Type", "text/x")]),
            ("Content-Encoding gzip (not decoded)", [("Content-Encoding", "gzip")]),
            ("200 duplicated X-Request-Id", [("X-Request-Id", "r%d" % i) for i in range(200)])):
        data = support.http_request("POST", "/v1/completions", b'{"prompt": 5}', headers)
        cases.append(Case("bad-header", name, data, [Expect((400,), ("prompt",))]))
    # Content-Length larger than the body, the client waiting: the read timeout answers.
    for sent in (0, 10, len(BODY) - 1):
        data = raw(P + f"Content-Length: {len(BODY)}\r\n\r\n") + BODY[:sent]
        cases.append(Case("bad-header", f"Content-Length over the body ({sent} of {len(BODY)} bytes sent)", data,
                          [Expect((408,), ("time",))], closes_within=READ_TIMEOUT_S + 8))
    # Content-Length smaller than the body: a truncated JSON body, then the rest as a request.
    data = raw(P + f"Content-Length: {len(BODY) - 5}\r\n\r\n") + BODY
    cases.append(Case("bad-header", "Content-Length under the body", data,
                      [Expect((400,), ("json",)), Expect((400,), ())]))
    return cases


def slowloris_cases(rng, count):
    cases = []
    head = b"POST /v1/completions HTTP/1.1\r\nHost: tern\r\nContent-Type: application/json\r\n"
    for i in range(count):
        if i % 3 == 0:  # the request line and headers, a byte at a time
            data = head + b"X-Slow: " + b"s" * 200
            chunks = [data[j:j + 1] for j in range(len(data))]
        elif i % 3 == 1:  # endless headers, a line at a time
            chunks = [head] + [b"X-%d: v\r\n" % j for j in range(200)]
        else:  # a whole head, then the body a byte at a time
            chunks = [head + b"Content-Length: %d\r\n\r\n" % (len(BODY) + 100)] + [b" "] * 200
        cases.append(Case("slowloris", f"trickle {i} ({['bytes', 'header lines', 'body'][i % 3]})", b"",
                          [Expect((408,), ("time",))], chunks=chunks, delay=0.1,
                          closes_within=READ_TIMEOUT_S + 8))
    return cases


def pipelined_cases(rng, count):
    cases = []
    valid = support.http_request("GET", "/health")
    garbage = [b"\x00\xff garbage\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"NOT HTTP AT ALL\r\n\r\n",
               support.json_post("/v1/completions", b'{"prompt": '), b"\r\n\r\n\r\n\x16\x03\x01",
               b"GET /health HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"POST /tokenize HTTP/1.1\r\nBad\r\n\r\n"]
    for i in range(count):
        bad = garbage[i % len(garbage)]
        status = (400,)
        if i % 4 == 0:  # garbage after good requests: the good ones answered in order, then a 400
            k = 1 + rng.randrange(20)
            data = valid * k + bad
            expect = [Expect((200,), ())] * k + [Expect(status, ())]
        elif i % 4 == 1:  # garbage first: a 400, then the connection closes (nothing after it is served)
            data = bad + valid * 3
            expect = [Expect(status, ())]
        elif i % 4 == 2:  # a bad JSON body between good requests
            data = valid + support.json_post("/v1/completions", b"{oops") + valid + bad
            expect = [Expect((200,), ()), Expect((400,), ("json",)), Expect((200,), ()), Expect(status, ())]
        else:  # many requests and garbage in one write
            data = (valid + support.json_post("/detokenize", b'{"tokens": "x"}')) * 10 + bad
            expect = [Expect((200,), ()), Expect((400,), ("tokens",))] * 10 + [Expect(status, ())]
        closes = READ_TIMEOUT_S + 8
        if bad.startswith(b"POST /v1/completions"):  # a whole request whose body is cut JSON: keep-alive holds
            expect[-1], closes = Expect((400,), ("json",)), None
        cases.append(Case("pipelined", f"pipelined {i} ({len(expect)} responses)", data, expect, closes_within=closes))
    return cases


# --- the generator and the runner -------------------------------------------------------------

def generate(count=2000, seed=1, scale=1.0):
    """At least `count` cases: every fixed family, then random truncations and invalid bytes
    to make up the count. `scale` < 1 shrinks the 10 MB prompts and the deepest nesting."""
    rng = random.Random(seed)
    cases = (invalid_json_cases(rng) + wrong_type_cases(rng) + extreme_number_cases(rng) + huge_input_cases(rng, scale)
             + nesting_cases(rng, scale) + unknown_model_cases(rng) + stop_list_cases(rng) + route_cases(rng)
             + header_cases(rng) + slowloris_cases(rng, 12) + pipelined_cases(rng, 40))
    missing = max(0, count - len(cases))
    cases += truncated_json_cases(rng, (missing + 1) // 2) + inserted_byte_cases(rng, missing // 2)
    return cases


def body_names(body, names):
    text = body.decode("utf-8", "replace").lower()
    return not names or any(n.lower() in text for n in names)


def check_error_body(resp):
    """The error body: JSON, {"error": {"message": ...}} (OpenAI) or {"error": "..."} (TGI), non-empty."""
    try:
        j = json.loads(resp.body)
    except ValueError:
        return f"error body is not JSON: {resp.body[:200]!r}"
    err = j.get("error") if isinstance(j, dict) else None
    msg = err.get("message") if isinstance(err, dict) else err
    if not isinstance(msg, str) or not msg.strip():
        return f"error body names no problem: {resp.body[:200]!r}"
    return None


def run_case(server, case):
    """None if the case got what it expects, else what went wrong."""
    t0 = time.monotonic()
    try:
        with support.RawConnection(server, timeout=HANG_S) as conn:
            if case.chunks is not None:
                for chunk in case.chunks:
                    if not conn.send(chunk):
                        break
                    time.sleep(case.delay)
                    if time.monotonic() - t0 > READ_TIMEOUT_S + 8:
                        return "slowloris: the server never cut the connection off"
            else:
                conn.send(case.data)
            got = []
            for i, exp in enumerate(case.expect):
                try:
                    resp = conn.response()
                except support.Closed:
                    return f"connection closed after {len(got)} of {len(case.expect)} responses"
                got.append(resp)
                if exp.statuses and resp.status not in exp.statuses:
                    return f"response {i}: expected {exp.statuses}, got {resp}"
                if not exp.statuses and not 400 <= resp.status < 500:
                    return f"response {i}: expected a 4xx, got {resp}"
                if resp.status >= 400:
                    if (problem := check_error_body(resp)):
                        return f"response {i}: {problem}"
                    if not body_names(resp.body, exp.names):
                        return f"response {i}: the error names none of {exp.names}: {resp}"
            if case.closes_within is not None and got[-1].status >= 400:
                left = case.closes_within - (time.monotonic() - t0)
                if not conn.wait_closed(max(left, 0.5)):
                    return "the connection stayed open after the error"
    except socket.timeout:
        return f"hang: nothing within {HANG_S} s"
    except OSError as e:
        return f"connection failed: {e!r}"
    return None


@dataclass
class Report:
    cases: int = 0
    failures: list = field(default_factory=list)
    by_family: dict = field(default_factory=dict)
    statuses: dict = field(default_factory=dict)
    seconds: float = 0.0
    state_after: object = None
    server_errors: dict = field(default_factory=dict)
    alive: bool = True

    def ok(self):
        return not self.failures and self.alive and not self.server_errors and self.state_after.idle()

    def summary(self):
        lines = [f"hostile requests: {self.cases} in {self.seconds:.1f} s, {len(self.failures)} failed; "
                 f"server alive: {self.alive}; 5xx: {self.server_errors or 0}; after: {self.state_after}"]
        lines.append("  by family: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_family.items())))
        lines.append("  responses by status (server's count): " +
                     ", ".join(f"{k}: {int(v)}" for k, v in sorted(self.statuses.items())))
        for family, name, problem in self.failures[:50]:
            lines.append(f"  FAIL [{family}] {name}: {problem}")
        if len(self.failures) > 50:
            lines.append(f"  ... and {len(self.failures) - 50} more")
        return "\n".join(lines)


def run(server, cases, workers=8):
    before = support.engine_state(server)
    report = Report(cases=len(cases))
    for c in cases:
        report.by_family[c.family] = report.by_family.get(c.family, 0) + 1
    t0 = time.monotonic()
    # The heavy cases first, so they overlap the many small ones.
    order = sorted(cases, key=lambda c: -(len(c.data) + 10**7 * (c.chunks is not None)))
    with ThreadPoolExecutor(workers) as pool:
        for case, problem in zip(order, pool.map(lambda c: run_case(server, c), order)):
            if problem:
                report.failures.append((case.family, case.name, problem))
    report.seconds = time.monotonic() - t0
    report.alive = server.alive() if hasattr(server, "alive") else True
    if report.alive:
        report.state_after = support.wait_idle(server, timeout=30)
        before_5xx = before.server_errors()
        report.server_errors = {s: n - before_5xx.get(s, 0) for s, n in report.state_after.server_errors().items()
                                if n > before_5xx.get(s, 0)}
        report.statuses = {s: n - before.responses.get(s, 0) for s, n in report.state_after.responses.items()
                           if n > before.responses.get(s, 0)}
    return report


class RemoteServer:
    """A server given by URL (not started here)."""

    def __init__(self, url):
        from urllib.parse import urlparse
        u = urlparse(url)
        self.host, self.port, self.url = u.hostname, u.port or 80, url.rstrip("/")

    def get(self, path, timeout=10):
        import urllib.request
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()

    def alive(self):
        try:
            return self.get("/health")[0] == 200
        except OSError:
            return False


def server_flags():
    return ["--http-read-timeout", READ_TIMEOUT_S, "--disable-log-requests"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=2000, help="at least this many requests (default 2000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=8, help="connections at a time")
    ap.add_argument("--url", help="an already running server (started with --http-read-timeout 5)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    args = ap.parse_args()
    cases = generate(args.count, args.seed)
    if args.list:
        for c in cases:
            print(f"[{c.family}] {c.name}")
        print(f"{len(cases)} cases")
        return 0
    if args.url:
        server = RemoteServer(args.url)
        report = run(server, cases, args.workers)
    else:
        server = support.TernServer(*server_flags())
        try:
            report = run(server, cases, args.workers)
        finally:
            code = server.stop()
            if code != 0:
                print(f"tern serve exited with {code}:\n{server.logs()[-3000:]}")
                report.alive = False
    print(report.summary())
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
