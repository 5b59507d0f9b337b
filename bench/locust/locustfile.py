"""The load test of the articles, against tern's OpenAI API: every simulated
user sends a random Chinese prompt of 50-500 characters to
/v1/chat/completions, streams the answer, and waits a little before the next.
Besides locust's own row for the request (its time is the time to the
response headers), two rows are recorded per answer: `ttft` (time to the
first streamed token: its text, or the finish of an empty answer) and `total` (time to `[DONE]`). A request fails on a
non-200 status, an error event, or a stream that ends without `[DONE]`.

    locust -f bench/locust/locustfile.py --host http://127.0.0.1:8000 \
        --headless -u 100 -r 20 -t 60s --csv results/locust

Environment: TERN_API_KEY (when the server has one), LOCUST_MAX_TOKENS
(default 128), LOCUST_MODEL (default: the first of /v1/models),
LOCUST_MIN_WAIT / LOCUST_MAX_WAIT seconds between a user's requests (1, 3),
LOCUST_SUMMARY_JSON (a file for the final figures: requests, failures, QPS,
P50/P95/P99 of each row, written when locust quits, after the requests still
running at the time limit have finished).
"""

import json
import os
import random
import time

from locust import HttpUser, between, events, task

# About 500 of the most common Chinese characters, and punctuation between runs of them.
COMMON_CHARACTERS = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而"
    "方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好"
    "应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向"
    "道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特"
    "件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队"
    "南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风"
    "切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许"
    "步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列"
    "习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派"
    "层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严龙飞"
)
PUNCTUATION = "，。？！、；："


def chinese_prompt(rng, low=50, high=500):
    """A random string of `low`..`high` Chinese characters, with punctuation every 5-20 characters."""
    length = rng.randint(low, high)
    out = []
    until_punctuation = rng.randint(5, 20)
    while len(out) < length:
        if until_punctuation == 0 and len(out) < length - 1:
            out.append(rng.choice(PUNCTUATION))
            until_punctuation = rng.randint(5, 20)
        else:
            out.append(rng.choice(COMMON_CHARACTERS))
            until_punctuation -= 1
    out[-1] = "？"
    return "".join(out)


def sse_data(response):
    """The `data:` payloads of an event stream, split on newlines only (requests' iter_lines also
    splits on U+2028, U+0085 and the like, which JSON strings may hold unescaped)."""
    buffer = b""
    for piece in response.iter_content(chunk_size=None):
        buffer += piece
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data: "):
                yield line[len(b"data: "):].decode("utf-8")


def record(environment, name, started, length=0, exception=None):
    environment.events.request.fire(request_type="SSE", name=name, response_time=(time.perf_counter() - started) * 1000,
                                    response_length=length, exception=exception, context={})


class ChatUser(HttpUser):
    wait_time = between(float(os.environ.get("LOCUST_MIN_WAIT", "1")), float(os.environ.get("LOCUST_MAX_WAIT", "3")))
    max_tokens = int(os.environ.get("LOCUST_MAX_TOKENS", "128"))

    def on_start(self):
        self.rng = random.Random()
        key = os.environ.get("TERN_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.model = os.environ.get("LOCUST_MODEL")
        if not self.model:
            with self.client.get("/v1/models", headers=self.headers, name="/v1/models", catch_response=True) as r:
                self.model = r.json()["data"][0]["id"] if r.status_code == 200 else "default"

    @task
    def chat(self):
        body = {"model": self.model, "messages": [{"role": "user", "content": chinese_prompt(self.rng)}],
                "max_tokens": self.max_tokens, "stream": True, "stream_options": {"include_usage": True}}
        started = time.perf_counter()
        first_text_at = None
        done = False
        error = None
        received = 0
        with self.client.post("/v1/chat/completions", json=body, headers=self.headers, stream=True,
                              name="/v1/chat/completions", catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
                return
            try:
                for data in sse_data(response):
                    received += len(data)
                    if data == "[DONE]":
                        done = True
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        error = chunk["error"].get("message", "error event")
                        break
                    # The first token: its text, or the finish of an answer that ended at once (no text).
                    if first_text_at is None and any(c.get("delta", {}).get("content") or c.get("finish_reason")
                                                     for c in chunk["choices"]):
                        first_text_at = time.perf_counter()
                        record(self.environment, "ttft", started)
            except Exception as e:  # the connection broke mid-stream, or a chunk was not JSON
                error = f"stream broken: {e}"
            if not done and error is None:
                error = "the stream ended without [DONE]"
            if error:
                response.failure(error)
                record(self.environment, "total", started, received, RuntimeError(error))
            else:
                response.success()
                record(self.environment, "total", started, received)


@events.quitting.add_listener
def write_summary(environment, **_):
    path = os.environ.get("LOCUST_SUMMARY_JSON")
    if not path:
        return
    rows = {}
    for (name, method), entry in environment.stats.entries.items():
        rows[f"{method} {name}"] = {
            "requests": entry.num_requests, "failures": entry.num_failures, "qps": entry.total_rps,
            "p50_ms": entry.get_response_time_percentile(0.50), "p95_ms": entry.get_response_time_percentile(0.95),
            "p99_ms": entry.get_response_time_percentile(0.99)}
    errors = [{"name": e.name, "error": e.error, "occurrences": e.occurrences}
              for e in environment.stats.errors.values()]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"users": environment.parsed_options.num_users if environment.parsed_options else None,
                   "rows": rows, "errors": errors}, f, indent=1)
