"""Streams dropped at random moments against the real `tern serve`, with a KV
cache small enough that the scheduler preempts: before the request is whole,
after it is sent but before the response head, during a long prompt's
prefill, mid-decode after a few events, and while preempted (a crowd of long
streams, dropped at random). Half close with FIN, half reset (RST). Then:
no request running or waiting, no KV block in use, and the server's resident
memory back within a bound of its baseline (taken after a warm-up wave that
touches as much of the heap as the run will).

    python tests/reliability/disconnects.py --count 1000
"""

import argparse
import json
import random
import socket
import struct
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

# Small enough that 48 long streams preempt one another: 4096 tokens of the tiny model's KV cache.
SERVER_FLAGS = ["--kv-cache-memory", "1536KiB", "--max-num-seqs", "32", "--disable-log-requests"]
# Resident memory may end at most this far above the warmed-up baseline.
RSS_BOUND_MB = 16
MOMENTS = ("partial-request", "before-head", "prefill", "mid-decode", "preempted")


def stream_body(rng, moment):
    if moment == "prefill":
        prompt = " ".join(rng.choice(["alpha", "beta", "天气", "很好", "x"]) for _ in range(250))
        return {"prompt": prompt, "max_tokens": 64, "stream": True}
    if moment == "preempted":
        return {"prompt": "A long story, part %d:" % rng.randrange(10**6), "max_tokens": 1500,
                "ignore_eos": True, "stream": True}
    if rng.random() < 0.5:
        return {"messages": [{"role": "user", "content": "Tell me a story %d" % rng.randrange(10**6)}],
                "max_tokens": 400, "ignore_eos": True, "stream": True, "n": rng.choice([1, 1, 2])}
    return {"prompt": "Once upon a time %d" % rng.randrange(10**6), "max_tokens": 400, "ignore_eos": True,
            "stream": True, "logprobs": rng.choice([None, 2])}


def request_bytes(body):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    return support.json_post(path, json.dumps({k: v for k, v in body.items() if v is not None}))


def drop(sock, rst):
    if rst:  # SO_LINGER 0: close sends RST
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def one(server, rng, moment):
    """One dropped stream; returns how many SSE events it read first."""
    rst = rng.random() < 0.5
    data = request_bytes(stream_body(rng, moment))
    sock = socket.create_connection((server.host, server.port), timeout=60)
    events = 0
    try:
        if moment == "partial-request":
            sock.sendall(data[:rng.randrange(1, len(data))])
            time.sleep(rng.random() * 0.05)
        elif moment in ("before-head", "prefill"):
            sock.sendall(data)
            time.sleep(rng.random() * (0.005 if moment == "before-head" else 0.05))
        else:
            sock.sendall(data)
            wanted = rng.randrange(1, 40) if moment == "mid-decode" else rng.randrange(1, 300)
            got = b""
            while events < wanted:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got += chunk
                events = got.count(b"data: ")
    finally:
        drop(sock, rst)
    return events


@dataclass
class Report:
    count: int = 0
    by_moment: dict = field(default_factory=dict)
    seconds: float = 0.0
    rss_baseline: int = 0
    rss_peak: int = 0
    rss_after: int = 0
    preemptions: float = 0
    state_after: object = None
    served_after: bool = False
    errors: list = field(default_factory=list)

    def rss_growth_mb(self):
        return (self.rss_after - self.rss_baseline) / 2**20

    def ok(self):
        return (not self.errors and self.state_after.idle() and self.served_after
                and self.rss_growth_mb() <= RSS_BOUND_MB)

    def summary(self):
        mb = 2**20
        return (f"disconnects: {self.count} streams dropped in {self.seconds:.1f} s "
                f"({', '.join(f'{k} {v}' for k, v in self.by_moment.items())}); preemptions during the run: "
                f"{self.preemptions:g}\n  after: {self.state_after}; served after: {self.served_after}\n"
                f"  RSS: baseline {self.rss_baseline / mb:.1f} MB, peak {self.rss_peak / mb:.1f} MB, after "
                f"{self.rss_after / mb:.1f} MB (growth {self.rss_growth_mb():+.1f} MB, bound {RSS_BOUND_MB} MB)"
                + "".join(f"\n  ERROR {e}" for e in self.errors[:20]))


def warm_up(server, rng, concurrency):
    """Whole streams of every shape, as many at once as the run has: the heap and the KV
    cache's pages are touched before the baseline is taken."""
    def full(i):
        body = stream_body(rng, MOMENTS[i % len(MOMENTS)])
        body["max_tokens"] = min(body["max_tokens"], 64)
        with support.RawConnection(server, timeout=120) as c:
            c.send(request_bytes(body))
            return c.response().status
    with ThreadPoolExecutor(concurrency) as pool:
        statuses = list(pool.map(full, range(concurrency)))
    assert all(s == 200 for s in statuses), statuses


def run(server, count, seed=1, concurrency=48):
    rng = random.Random(seed)
    report = Report(count=count)
    pid = support.server_pid(server)
    warm_up(server, rng, concurrency)
    support.wait_idle(server)
    report.rss_baseline = support.rss_bytes(pid)
    report.rss_peak = report.rss_baseline
    before = support.engine_state(server)
    moments = [MOMENTS[i % len(MOMENTS)] for i in range(count)]
    rng.shuffle(moments)
    for m in moments:
        report.by_moment[m] = report.by_moment.get(m, 0) + 1
    t0 = time.monotonic()
    seeds = [rng.randrange(2**32) for _ in moments]

    def task(i):
        try:
            one(server, random.Random(seeds[i]), moments[i])
        except OSError as e:
            report.errors.append(f"{moments[i]}: {e!r}")
        if i % 50 == 0:
            report.rss_peak = max(report.rss_peak, support.rss_bytes(pid))

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(task, range(count)))
    report.seconds = time.monotonic() - t0
    report.state_after = support.wait_idle(server, timeout=60)
    report.preemptions = report.state_after.preemptions - before.preemptions
    report.rss_after = support.rss_bytes(pid)
    status, _, body = server.post_json("/v1/completions", {"prompt": "still there?", "max_tokens": 4,
                                                           "ignore_eos": True})
    report.served_after = status == 200 and body["usage"]["completion_tokens"] == 4
    server_errors = report.state_after.server_errors()
    if server_errors:
        report.errors.append(f"5xx responses: {server_errors}")
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=48)
    args = ap.parse_args()
    server = support.TernServer(*SERVER_FLAGS)
    try:
        report = run(server, args.count, args.seed, args.concurrency)
    finally:
        code = server.stop()
    print(report.summary())
    if code != 0:
        print(f"tern serve exited with {code}")
    return 0 if report.ok() and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
