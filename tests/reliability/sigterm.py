"""SIGTERM under load against the real `tern serve`: short and long requests
(streamed and not) in flight, then SIGTERM. Short ones finish whole; long
ones end cleanly at the drain deadline (--shutdown-timeout): a stream's last
event is the error "the server is shutting down" then [DONE] and the chunked
end, a plain request gets 503 with Retry-After; no connection is torn. New
connections are refused from the signal on, and the process exits 0 within
the deadline plus a few seconds.

    python tests/reliability/sigterm.py --drain 3 --streams 24
"""

import argparse
import json
import signal
import socket
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

# What the process may take past the drain deadline: handlers answering, the engine thread joined.
EXIT_SLACK_S = 3.0
LONG_TOKENS = 4000  # far past the drain at the decode speeds measured here
CALIBRATION_TOKENS = 64


@dataclass
class Outcome:
    kind: str
    ended: str = ""        # finished | shutting-down | torn | refused | ...
    seconds_after_signal: float = 0.0
    detail: str = ""


@dataclass
class Report:
    drain_s: float = 0.0
    short_tokens: int = 0
    outcomes: list = field(default_factory=list)
    exit_code: int = None
    exit_after_s: float = 0.0
    refused_after_signal: bool = False
    errors: list = field(default_factory=list)

    def counts(self):
        out = {}
        for o in self.outcomes:
            key = f"{o.kind}: {o.ended}"
            out[key] = out.get(key, 0) + 1
        return out

    def ok(self):
        return not self.errors and self.exit_code == 0 and self.refused_after_signal

    def summary(self):
        last = max((o.seconds_after_signal for o in self.outcomes), default=0)
        short = max((o.seconds_after_signal for o in self.outcomes if o.kind.startswith("short")), default=0)
        return (f"sigterm: {len(self.outcomes)} requests in flight, --shutdown-timeout {self.drain_s:g}: "
                f"{self.counts()}\n  short requests of {self.short_tokens} tokens, long of {LONG_TOKENS}; last short one finished {short:.2f} s, last answer {last:.2f} s after the signal; exit code {self.exit_code} after "
                f"{self.exit_after_s:.2f} s; new connections refused: {self.refused_after_signal}"
                + "".join(f"\n  ERROR {e}" for e in self.errors))


def read_stream_end(conn):
    """How a streamed response ended: 'finished', 'shutting-down' or what went wrong."""
    resp = conn.response()  # chunked: raises Closed when the stream is torn
    if resp.status != 200:
        return f"status {resp.status}"
    text = resp.body.decode()
    if not text.endswith("data: [DONE]\n\n"):
        return "no [DONE]"
    events = [json.loads(e[6:]) for e in text.split("\n\n") if e.startswith("data: {")]
    if "error" in events[-1]:
        msg = events[-1]["error"]["message"] if isinstance(events[-1]["error"], dict) else events[-1]["error"]
        return "shutting-down" if "shutting down" in msg else f"error {msg}"
    reasons = [c.get("finish_reason") for e in events for c in e.get("choices", []) if c.get("finish_reason")]
    return "finished" if reasons else "no finish_reason"


def seconds_per_step(server, concurrency):
    """Wall time of one decode step with `concurrency` streams running: the short
    requests are sized from it, so they are still running at the signal and end
    well within the drain whether the machine is quiet or busy."""
    def one(i):
        body = {"prompt": f"Warm {i}:", "max_tokens": CALIBRATION_TOKENS, "ignore_eos": True}
        with support.RawConnection(server, timeout=120) as c:
            c.send(support.json_post("/v1/completions", json.dumps(body)))
            assert c.response().status == 200

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(concurrency)))
    return (time.monotonic() - t0) / CALIBRATION_TOKENS


def run(server, drain_s, streams, plain):
    report = Report(drain_s=drain_s)
    step_s = seconds_per_step(server, streams + plain)
    # A short one runs about a quarter of the drain: in flight at the signal, done long before the deadline.
    short_tokens = max(20, min(LONG_TOKENS // 4, int(drain_s / 4 / step_s)))
    report.short_tokens = short_tokens
    started = threading.Barrier(streams + plain + 1)
    signal_time = [0.0]

    def stream(i):
        short = i % 2 == 0
        body = {"prompt": f"Stream {i}:", "max_tokens": short_tokens if short else LONG_TOKENS, "ignore_eos": True, "stream": True}
        o = Outcome("short stream" if short else "long stream")
        with support.RawConnection(server, timeout=drain_s + 30) as c:
            c.send(support.json_post("/v1/completions", json.dumps(body)))
            # The head and a first event are out: the request is surely in flight.
            while b"data: " not in c.buf:
                c._fill()
            started.wait()
            try:
                o.ended = read_stream_end(c)
            except support.Closed:
                o.ended = "torn"
        o.seconds_after_signal = time.monotonic()  # made relative to the signal below
        return o

    def plain_request(i):
        short = i % 2 == 0
        o = Outcome("short request" if short else "long request")
        body = {"prompt": f"Plain {i}:", "max_tokens": short_tokens if short else LONG_TOKENS, "ignore_eos": True}
        with support.RawConnection(server, timeout=drain_s + 30) as c:
            c.send(support.json_post("/v1/completions", json.dumps(body)))
            time.sleep(0.1)  # queued or running by now
            started.wait()
            try:
                resp = c.response()
                if resp.status == 200:
                    o.ended = "finished"
                elif resp.status == 503 and "shutting down" in resp.body.decode() and resp.headers.get("retry-after"):
                    o.ended = "shutting-down"
                else:
                    o.ended = f"status {resp.status}"
            except support.Closed:
                o.ended = "torn"
        o.seconds_after_signal = time.monotonic()  # made relative to the signal below
        return o

    with ThreadPoolExecutor(streams + plain) as pool:
        futures = [pool.submit(stream, i) for i in range(streams)]
        futures += [pool.submit(plain_request, i) for i in range(plain)]
        started.wait()
        signal_time[0] = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        try:
            socket.create_connection((server.host, server.port), timeout=2).close()
            report.errors.append("a new connection was accepted after SIGTERM")
        except ConnectionRefusedError:
            report.refused_after_signal = True
        report.outcomes = [f.result() for f in futures]
    for o in report.outcomes:
        o.seconds_after_signal -= signal_time[0]
    try:
        report.exit_code = server.proc.wait(timeout=drain_s + 30)
    except Exception:  # noqa: BLE001
        server.proc.kill()
        report.errors.append("the server did not exit")
    report.exit_after_s = time.monotonic() - signal_time[0]
    for o in report.outcomes:
        short = o.kind.startswith("short")
        if short and o.ended != "finished":
            report.errors.append(f"{o.kind} did not finish: {o.ended}")
        if not short and o.ended not in ("finished", "shutting-down"):
            report.errors.append(f"{o.kind} did not end cleanly: {o.ended}")
        if o.seconds_after_signal > drain_s + EXIT_SLACK_S:
            report.errors.append(f"{o.kind} ended {o.seconds_after_signal:.2f} s after the signal")
    if report.exit_after_s > drain_s + EXIT_SLACK_S:
        report.errors.append(f"exit took {report.exit_after_s:.2f} s")
    if not any(o.ended == "shutting-down" for o in report.outcomes):
        report.errors.append("no long request was still running at the deadline")
    if not any(o.seconds_after_signal > 0.02 for o in report.outcomes if o.kind.startswith("short")):
        report.errors.append("the short requests had all finished before the signal")
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drain", type=float, default=3.0, help="--shutdown-timeout, seconds")
    ap.add_argument("--streams", type=int, default=24)
    ap.add_argument("--plain", type=int, default=8)
    args = ap.parse_args()
    server = support.TernServer("--shutdown-timeout", args.drain, "--disable-log-requests")
    report = run(server, args.drain, args.streams, args.plain)
    print(report.summary())
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
