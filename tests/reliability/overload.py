"""Overload past --max-queued-requests against the real `tern serve`: a burst
of clients, each sending one request at once (OpenAI completions and chat,
streamed or not, and TGI's /generate). Every request either completes (all
its tokens) or is refused fast: 503 (TGI: 429) with Retry-After. Measured: the
admitted requests' latency (p50, p99, max) and the refusals' latency.

    python tests/reliability/overload.py --clients 400 --max-queued 16
"""

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

if __package__ in (None, ""):
    import pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import support
else:
    from . import support

MAX_TOKENS = 24


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def request_for(i):
    kind = ("completion", "chat-stream", "tgi", "completion-stream")[i % 4]
    if kind == "completion":
        return kind, support.json_post("/v1/completions", json.dumps(
            {"prompt": f"Request {i}:", "max_tokens": MAX_TOKENS, "ignore_eos": True}))
    if kind == "completion-stream":
        return kind, support.json_post("/v1/completions", json.dumps(
            {"prompt": f"Request {i}:", "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True,
             "stream_options": {"include_usage": True}}))
    if kind == "chat-stream":
        return kind, support.json_post("/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": f"Request {i}"}], "max_tokens": MAX_TOKENS,
             "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}))
    return kind, support.json_post("/generate", json.dumps(
        {"inputs": f"Request {i}:", "parameters": {"max_new_tokens": MAX_TOKENS, "details": True}}))


def completed_tokens(kind, resp):
    """Tokens the response says it generated, or None when its body is not a whole answer."""
    if kind.endswith("stream"):
        text = resp.body.decode()
        if not text.endswith("data: [DONE]\n\n"):
            return None
        usage = [json.loads(e[6:]).get("usage") for e in text.split("\n\n") if e.startswith("data: {")]
        return usage[-1]["completion_tokens"] if usage and usage[-1] else None
    body = json.loads(resp.body)
    if kind == "tgi":  # TGI has no ignore_eos: an answer that ended on the end token is whole too
        d = body["details"]
        return MAX_TOKENS if d["finish_reason"] == "eos_token" and d["generated_tokens"] >= 1 else d["generated_tokens"]
    return body["usage"]["completion_tokens"]


@dataclass
class Report:
    clients: int = 0
    max_queued: int = 0
    admitted: list = field(default_factory=list)   # seconds
    refused: list = field(default_factory=list)    # seconds
    refused_status: dict = field(default_factory=dict)
    missing_retry_after: int = 0
    incomplete: list = field(default_factory=list)
    other: list = field(default_factory=list)
    state_after: object = None

    def ok(self, refusal_p99_bound_s):
        return (self.admitted and not self.incomplete and not self.other and not self.missing_retry_after
                and len(self.admitted) >= self.max_queued and self.state_after.idle()
                and (not self.refused or percentile(self.refused, 99) <= refusal_p99_bound_s))

    def summary(self):
        ms = lambda v: f"{v * 1000:.0f} ms"  # noqa: E731
        a, r = self.admitted, self.refused
        return (f"overload: {self.clients} clients at once, --max-queued-requests {self.max_queued}: "
                f"{len(a)} admitted and complete, {len(r)} refused {self.refused_status}, "
                f"{len(self.incomplete)} incomplete, {len(self.other)} other\n"
                f"  admitted latency p50 {ms(percentile(a, 50))}, p99 {ms(percentile(a, 99))}, "
                f"max {ms(max(a) if a else float('nan'))}\n"
                f"  refusal latency p50 {ms(percentile(r, 50))}, p99 {ms(percentile(r, 99))}, "
                f"max {ms(max(r) if r else float('nan'))}; without Retry-After: {self.missing_retry_after}\n"
                f"  after: {self.state_after}"
                + "".join(f"\n  INCOMPLETE {x}" for x in self.incomplete[:10])
                + "".join(f"\n  OTHER {x}" for x in self.other[:10]))


def run(server, clients, max_queued):
    report = Report(clients=clients, max_queued=max_queued)
    lock = threading.Lock()
    conns = [support.RawConnection(server, timeout=300) for _ in range(clients)]  # connected before the burst
    go = threading.Barrier(clients)

    def client(i):
        kind, data = request_for(i)
        conn = conns[i]
        try:
            go.wait()
            t0 = time.monotonic()
            conn.send(data)
            resp = conn.response()
            dt = time.monotonic() - t0
        except Exception as e:  # noqa: BLE001  (any failure is reported)
            with lock:
                report.other.append(f"{kind}: {e!r}")
            return
        finally:
            conn.close()
        with lock:
            if resp.status == 200:
                tokens = completed_tokens(kind, resp)
                if tokens != MAX_TOKENS:
                    report.incomplete.append(f"{kind}: {tokens} tokens: {resp.body[-200:]!r}")
                else:
                    report.admitted.append(dt)
            elif resp.status in (503, 429):
                report.refused.append(dt)
                report.refused_status[resp.status] = report.refused_status.get(resp.status, 0) + 1
                if not resp.headers.get("retry-after", "").isdigit():
                    report.missing_retry_after += 1
            else:
                report.other.append(f"{kind}: {resp}")

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    report.state_after = support.wait_idle(server, timeout=60)
    return report


def server_flags(max_queued):
    return ["--max-queued-requests", max_queued, "--disable-log-requests"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=400)
    ap.add_argument("--max-queued", type=int, default=16)
    ap.add_argument("--refusal-p99-bound", type=float, default=0.5, help="seconds")
    args = ap.parse_args()
    server = support.TernServer(*server_flags(args.max_queued))
    try:
        report = run(server, args.clients, args.max_queued)
    finally:
        code = server.stop()
    print(report.summary())
    return 0 if report.ok(args.refusal_p99_bound) and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
