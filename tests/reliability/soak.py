"""Soak: sustained mixed load against `tern serve --device cpu` for a given
time, then the figures a leak would move: resident memory growth from a
warmed-up baseline to the end (sampled all along), KV blocks still in use
once idle, requests still running, and any 5xx or failed request.

The mix, from a few client threads at once: chat and completion streams,
n > 1, long prompts (~1,000 tokens), streams dropped mid-way (FIN or RST),
prompts sharing long prefixes (prefix-cache hits), logprobs and
top_logprobs, TGI streams, tokenize round trips, and bad requests (400s).

    python tests/reliability/soak.py --duration 30m      # or 90s, 1h, 600 (seconds)
"""

import argparse
import json
import random
import re
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field

if __package__ in (None, ""):
    import pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import support
else:
    from . import support

RSS_BOUND_MB = 50
SERVER_FLAGS = ["--device", "cpu", "--kv-cache-memory", "4MiB", "--disable-log-requests"]
WORDS = ["alpha", "beta", "gamma", "天气", "很好", "春眠", "不觉晓", "x", "hello", "world", "。", "1984"]
PREFIXES = [" ".join(random.Random(p).choice(WORDS) for _ in range(300)) for p in range(4)]


def parse_duration(text):
    """Seconds from '600', '90s', '30m', '1h', '1h30m'."""
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 600, 90s, 30m, 1h)")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def sse_done(resp):
    return resp.status == 200 and resp.body.endswith(b"data: [DONE]\n\n")


def scenario(rng):
    """(name, path, body, check) for one request of the mix; check(Response) -> bool."""
    k = rng.randrange(10)
    if k == 0:
        return ("chat-stream", "/v1/chat/completions",
                {"messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": f"Question {rng.randrange(10**6)}"}],
                 "max_tokens": rng.randrange(1, 64), "stream": True,
                 "stream_options": {"include_usage": True}}, sse_done)
    if k == 1:
        n = rng.choice([2, 3, 4])
        return ("n>1", "/v1/completions", {"prompt": f"Options {rng.randrange(10**6)}:", "n": n,
                                          "max_tokens": 16, "temperature": 0.8, "seed": rng.randrange(100)},
                lambda r: r.status == 200 and len(json.loads(r.body)["choices"]) == n)
    if k == 2:
        prompt = " ".join(rng.choice(WORDS) for _ in range(450))
        return ("long-prompt", "/v1/completions", {"prompt": prompt, "max_tokens": 8},
                lambda r: r.status == 200 and json.loads(r.body)["usage"]["prompt_tokens"] > 800)
    if k in (3, 4):
        prefix = PREFIXES[rng.randrange(len(PREFIXES))]
        return ("shared-prefix", "/v1/completions",
                {"prompt": prefix + f" question {rng.randrange(10**6)}", "max_tokens": 8, "stream": rng.random() < 0.5},
                lambda r: r.status == 200)
    if k == 5:
        return ("logprobs", "/v1/chat/completions",
                {"messages": [{"role": "user", "content": f"Score {rng.randrange(10**6)}"}], "max_tokens": 12,
                 "logprobs": True, "top_logprobs": rng.randrange(0, 6)},
                lambda r: r.status == 200 and json.loads(r.body)["choices"][0]["logprobs"] is not None)
    if k == 6:
        return ("completion-logprobs", "/v1/completions",
                {"prompt": f"Echo {rng.randrange(10**6)}", "max_tokens": 6, "logprobs": 3, "echo": True},
                lambda r: r.status == 200)
    if k == 7:
        return ("tgi-stream", "/generate_stream",
                {"inputs": f"TGI {rng.randrange(10**6)}", "parameters": {"max_new_tokens": 16, "details": True}},
                lambda r: r.status == 200 and b"generated_text" in r.body)
    if k == 8:
        return ("bad-request", "/v1/completions", {"prompt": "x", "max_tokens": -1},
                lambda r: r.status == 400)
    return ("tokenize", "/tokenize", {"prompt": f"分词 {rng.randrange(10**6)} words"},
            lambda r: r.status == 200 and json.loads(r.body)["count"] > 0)


@dataclass
class Stats:
    requests: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    dropped: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, name):
        with self.lock:
            self.requests[name] = self.requests.get(name, 0) + 1


def client(server, seed, stop_at, stats):
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        if rng.random() < 0.12:  # a stream dropped at a random point
            body = {"prompt": f"Dropped {rng.randrange(10**6)}", "max_tokens": 200, "ignore_eos": True,
                    "stream": True}
            try:
                s = socket.create_connection((server.host, server.port), timeout=60)
                s.sendall(support.json_post("/v1/completions", json.dumps(body)))
                got = b""
                want = rng.randrange(0, 30)
                while got.count(b"data: ") < want and (chunk := s.recv(65536)):
                    got += chunk
                if rng.random() < 0.5:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
                with stats.lock:
                    stats.dropped += 1
            except OSError as e:
                stats.failures.append(f"dropped stream: {e!r}")
            continue
        name, path, body, check = scenario(rng)
        try:
            with support.RawConnection(server, timeout=120) as c:
                c.send(support.json_post(path, json.dumps(body)))
                resp = c.response()
            if not check(resp):
                stats.failures.append(f"{name}: {resp}")
        except (OSError, support.Closed, ValueError) as e:
            stats.failures.append(f"{name}: {e!r}")
        stats.count(name)


@dataclass
class Report:
    duration_s: float = 0.0
    stats: Stats = None
    rss_samples: list = field(default_factory=list)   # (seconds, bytes)
    rss_baseline: int = 0
    rss_after: int = 0
    state_after: object = None
    prefix_hits: float = 0
    preemptions: float = 0
    server_errors: dict = field(default_factory=dict)

    def growth_mb(self):
        return (self.rss_after - self.rss_baseline) / 2**20

    def ok(self):
        return (not self.stats.failures and self.state_after.idle() and not self.server_errors
                and self.growth_mb() < RSS_BOUND_MB)

    def summary(self):
        mb = 2**20
        total = sum(self.stats.requests.values()) + self.stats.dropped
        peak = max(b for _, b in self.rss_samples) if self.rss_samples else 0
        return (f"soak: {self.duration_s:.0f} s, {total} requests ({self.stats.dropped} dropped streams; "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.stats.requests.items()))
                + f"); failures {len(self.stats.failures)}; 5xx {self.server_errors or 0}\n"
                f"  prefix-cache hit tokens {self.prefix_hits:g}, preemptions {self.preemptions:g}\n"
                f"  RSS: baseline {self.rss_baseline / mb:.1f} MB, peak {peak / mb:.1f} MB, "
                f"end {self.rss_after / mb:.1f} MB "
                f"(growth {self.growth_mb():+.1f} MB, bound < {RSS_BOUND_MB} MB)\n"
                f"  after: {self.state_after} (leaked blocks: {self.state_after.used_blocks:g})"
                + "".join(f"\n  FAIL {f}" for f in self.stats.failures[:20]))


def run(server, duration_s, clients=6, seed=1, warmup_s=None, log=None):
    pid = support.server_pid(server)
    stats = Stats()
    before = support.engine_state(server)
    t0 = time.monotonic()
    warmup_s = min(60.0, duration_s * 0.1) if warmup_s is None else warmup_s
    stop_at = t0 + duration_s
    threads = [threading.Thread(target=client, args=(server, seed * 1000 + i, stop_at, stats)) for i in range(clients)]
    for t in threads:
        t.start()
    report = Report(duration_s=duration_s, stats=stats)
    baseline_taken = False
    next_log = t0 + 60
    while any(t.is_alive() for t in threads):
        time.sleep(0.5)
        now = time.monotonic()
        rss = support.rss_bytes(pid)
        report.rss_samples.append((now - t0, rss))
        if not baseline_taken and now - t0 >= warmup_s:
            report.rss_baseline, baseline_taken = rss, True
        if log and now >= next_log:
            next_log += 60
            log(f"soak: {now - t0:.0f} s, RSS {rss / 2**20:.1f} MB, "
                f"{sum(stats.requests.values()) + stats.dropped} requests, {len(stats.failures)} failures")
    for t in threads:
        t.join()
    if not baseline_taken:
        report.rss_baseline = report.rss_samples[0][1]
    report.state_after = support.wait_idle(server, timeout=60)
    report.rss_after = support.rss_bytes(pid)
    samples = support.metrics(server)
    report.prefix_hits = samples.get(("vllm:prefix_cache_hits_total", ()), 0) - 0
    report.preemptions = report.state_after.preemptions - before.preemptions
    report.server_errors = report.state_after.server_errors()
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=parse_duration, default=parse_duration("30m"))
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default=None, help="model folder (default: the tiny test model)")
    ap.add_argument("--json-out", help="write the figures here")
    ap.add_argument("--server-flags", default=" ".join(SERVER_FLAGS),
                    help=f"tern serve's flags (default: {' '.join(SERVER_FLAGS)}; e.g. '--device cuda')")
    args = ap.parse_args()
    kw = {"model": args.model} if args.model else {}
    server = support.TernServer(*args.server_flags.split(), **kw)
    try:
        report = run(server, args.duration, args.clients, args.seed, log=lambda m: print(m, flush=True))
    finally:
        code = server.stop()
    print(report.summary())
    if code != 0:
        print(f"tern serve exited with {code}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"duration_s": report.duration_s, "requests": report.stats.requests,
                       "dropped_streams": report.stats.dropped, "failures": report.stats.failures,
                       "rss_baseline_mb": report.rss_baseline / 2**20, "rss_end_mb": report.rss_after / 2**20,
                       "rss_growth_mb": report.growth_mb(), "leaked_blocks": report.state_after.used_blocks,
                       "prefix_cache_hit_tokens": report.prefix_hits, "preemptions": report.preemptions,
                       "rss_samples": report.rss_samples[::20]}, f, indent=1)
    return 0 if report.ok() and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
