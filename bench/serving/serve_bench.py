#!/usr/bin/env python3
"""Load generator for any OpenAI-compatible /v1/completions server, after
`vllm bench serve`: streamed requests with random token-id prompts (seeded, so
every server gets the same work and none pays for tokenizing text), ignore_eos
and a fixed max_tokens, greedy (temperature 0), or with a scenario name
ending in "+sampled", the default sampling of ERNIE 4.5's generation_config
(temperature 0.8, top-p 0.8) and a seed per request.

Per request: TTFT (send -> first streamed chunk with a choice), ITL (gaps
between such chunks), E2E, TPOT = (E2E - TTFT) / (output tokens - 1), with
output tokens from the usage chunk. Per scenario: mean/p50/p90/p95/p99 of
each, request/s, output tok/s, success rate, the server's peak RSS and GPU
memory (when its pid is known), and the server's cold start when launched here.

    python3 bench/serving/serve_bench.py --launch "build/bin/tern serve --model M --port 0" \\
        --label tern --scenarios single,conc-8,offline
    python3 bench/serving/serve_bench.py --base-url http://127.0.0.1:8000 --scenarios conc-64:256

Scenarios (NAME[:REQUESTS]): single (1 stream, 256-token prompts, 128 out),
conc-N (closed loop of N streams, prompts 50-500, 128 out, max(4N, 32)
requests), offline (all at once, in and out 100-1024, 256 requests); any
of them NAME+sampled samples (temperature 0.8, top-p 0.8) instead of greedy.
Writes OUT_DIR/LABEL.json and OUT_DIR/LABEL.md.
"""

import argparse
import asyncio
import concurrent.futures
import datetime
import json
import math
import multiprocessing
import os
import pathlib
import random
import re
import shlex
import signal
import sys
import time
import urllib.error
import urllib.request

from server_proc import (ROOT, LaunchedServer, ResourceSampler, commit_id, http_get, machine_info, machine_line,
                         read_proc_status)

CHOICE = re.compile(rb'"choices"\s*:\s*\[\s*\{')
# tern's request log line (one per finished request, at info level): the server's own queue and TTFT times.
REQUEST_LOG = re.compile(rb"request \S+ api=\S+ .*?queue_ms=([0-9.]+) ttft_ms=([0-9.]+)")
# tern's --log-level debug line of each request: its arrival, first token and that token's handing to the
# HTTP writer on the steady clock, which is time.perf_counter()'s (CLOCK_MONOTONIC) on Linux.
REQUEST_CLOCK = re.compile(rb"request (\S+) clock: arrival ([0-9.]+) s, first token ([0-9.]+) s, "
                           rb"first token out ([0-9.]+) s")
RESPONSE_ID = re.compile(rb'"id"\s*:\s*"([^"]+)"')
STREAMS_PER_WORKER = 8  # client processes: one per this many streams (at most half the CPUs)
STALE_RETRIES = 8  # tries again of a request whose connection was found closed before any reply
PERCENTILES = (50, 90, 95, 99)

try:
    import aiohttp
    HTTP_CLIENT = f"aiohttp {aiohttp.__version__}"
    STALE_CONNECTION = (aiohttp.ClientConnectionError,)  # the server disconnected, or closed while we wrote
except ImportError:  # the GPU machine and .venv have aiohttp; httpx is the fallback
    aiohttp = None
    try:
        import httpx
        HTTP_CLIENT = f"httpx {httpx.__version__}"
        STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.WriteError)
    except ImportError:
        httpx = None
        HTTP_CLIENT = None
        STALE_CONNECTION = ()


# ----------------------------------------------------------------------------- workload

SAMPLED = {"temperature": 0.8, "top_p": 0.8}  # ERNIE 4.5's generation_config.json


class Scenario:
    def __init__(self, name, concurrency, num_requests, input_range, output_range):
        self.name, self.concurrency, self.num_requests = name, concurrency, num_requests
        self.input_range, self.output_range = input_range, output_range
        self.sampling = {"temperature": 0.0}


def parse_range(text):
    lo, _, hi = text.partition(":")
    try:
        lo, hi = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad range {text!r}: want MIN:MAX, e.g. 50:500") from None
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"bad range {text!r}: want MIN:MAX with 1 <= MIN <= MAX")
    return lo, hi


def make_scenario(spec, args):
    name, _, count = spec.partition(":")
    if name.endswith("+sampled"):
        s = make_scenario(name[:-len("+sampled")] + (":" + count if count else ""), args)
        s.name, s.sampling = name, dict(SAMPLED)
        return s
    n = int(count) if count else None
    if name == "single":
        return Scenario(name, 1, n or args.num_prompts or 8, (args.single_input,) * 2, (args.output_len,) * 2)
    if name.startswith("conc-"):
        c = int(name[5:])
        if c < 1:
            raise SystemExit(f"bad scenario {spec!r}: concurrency must be >= 1")
        return Scenario(name, c, n or args.num_prompts or max(4 * c, 32), args.conc_input, (args.output_len,) * 2)
    if name == "offline":
        n = n or args.offline_requests
        return Scenario(name, n, n, args.offline_input, args.offline_output)
    raise SystemExit(f"unknown scenario {spec!r} (single, conc-N, offline, each optionally +sampled and :REQUESTS)")


def token_pool(args):
    """(low, high, excluded ids) of the prompt token ids: above the control
    tokens, below the vocabulary, skipping added tokens."""
    low, high, excluded = 16, 1200, set()
    if args.model_dir:
        folder = pathlib.Path(args.model_dir)
        high = json.loads((folder / "config.json").read_text())["vocab_size"]
        if (folder / "added_tokens.json").exists():
            excluded = set(json.loads((folder / "added_tokens.json").read_text()).values())
        low = 1000 if high > 4000 else 16
    if args.token_range:
        low, high = args.token_range
    return low, high, excluded


def make_requests(scenario, seed, pool):
    rng = random.Random(f"{seed}:{scenario.name}:{scenario.num_requests}")
    low, high, excluded = pool
    out = []
    for _ in range(scenario.num_requests):
        n_in = rng.randint(*scenario.input_range)
        n_out = rng.randint(*scenario.output_range)
        ids = []
        while len(ids) < n_in:
            t = rng.randrange(low, high)
            if t not in excluded:
                ids.append(t)
        out.append((ids, n_out))
    return out


# ----------------------------------------------------------------------------- one request

def new_result(prompt_len, max_tokens):
    return {"prompt_len": prompt_len, "max_tokens": max_tokens, "ok": False, "error": None, "started": None,
            "ttft": None, "e2e": None, "itl": [], "chunks": 0, "output_tokens": None, "finished": False}


def scan_events(buf, res, start, now):
    """Consumes the complete SSE lines in buf; returns (rest, done)."""
    *lines, rest = buf.split(b"\n")
    for line in lines:
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return rest, True
        if CHOICE.search(data):
            if res["ttft"] is None:
                res["ttft"] = now - start
                m = RESPONSE_ID.search(data)
                if m:
                    res["id"] = m.group(1).decode(errors="replace")
            else:
                res["itl"].append(now - res["last"])
            res["last"] = now
            res["chunks"] += 1
        if b'"usage"' in data or (b'"error"' in data and not CHOICE.search(data)):
            obj = json.loads(data)
            if obj.get("error"):
                err = obj["error"]
                res["error"] = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
            if obj.get("usage"):
                res["output_tokens"] = obj["usage"].get("completion_tokens")
    return rest, False


def finish_result(res, end):
    res["e2e"] = end - res["started"]
    res.pop("last", None)
    if res["error"] is None and res["ttft"] is not None:
        res["ok"] = True
        if res["output_tokens"] is None:
            res["output_tokens"] = res["chunks"]
    elif res["error"] is None:
        res["error"] = "stream ended without any token"


async def send_aiohttp(session, url, payload, res):
    res["started"] = start = time.perf_counter()
    async with session.post(url, json=payload, trace_request_ctx=res) as resp:
        if resp.status != 200:
            res["error"] = f"HTTP {resp.status}: {(await resp.text())[:300]}"
            res["e2e"] = time.perf_counter() - start
            return
        buf, done = b"", False
        async for chunk in resp.content.iter_any():
            buf, done = scan_events(buf + chunk, res, start, time.perf_counter())
            if done:
                break
    finish_result(res, time.perf_counter())


def sent_trace():
    """aiohttp tracing that stamps each request's result with "sent", when
    its body has gone to the socket (the client's own share of its TTFT
    ends there)."""
    async def on_chunk_sent(session, ctx, params):
        ctx.trace_request_ctx["sent"] = time.perf_counter()

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(on_chunk_sent)
    return trace


async def send_httpx(client, url, payload, res):
    res["started"] = start = time.perf_counter()
    async with client.stream("POST", url, json=payload) as resp:
        if resp.status_code != 200:
            res["error"] = f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}"
            res["e2e"] = time.perf_counter() - start
            return
        buf, done = b"", False
        async for chunk in resp.aiter_raw():
            buf, done = scan_events(buf + chunk, res, start, time.perf_counter())
            if done:
                break
    finish_result(res, time.perf_counter())


# ----------------------------------------------------------------------------- one worker process

async def run_closed_loop(job):
    """Runs job["requests"] with job["concurrency"] streams; each stream takes
    the next request as soon as its last one ends. Stops starting requests at
    the deadline and abandons the ones under way (marked unfinished)."""
    url = job["base_url"] + "/v1/completions"
    pending = list(enumerate(job["requests"]))
    pending.reverse()
    results = [None] * len(job["requests"])
    deadline = job["deadline"]

    def payload(ids, n_out):
        body = {"model": job["model"], "prompt": ids, "max_tokens": n_out, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        body.update(job["sampling"])
        if "top_p" in body:
            body["seed"] = len(ids) * 7919 + n_out
        return body

    async def stream(send, client):
        while pending and time.perf_counter() < deadline:
            i, (ids, n_out) = pending.pop()
            res = results[i] = new_result(len(ids), n_out)
            try:
                for attempt in range(STALE_RETRIES + 1):
                    left = None if deadline == float("inf") else max(0.001, deadline - time.perf_counter())
                    try:
                        await asyncio.wait_for(send(client, url, payload(ids, n_out), res), left)
                        break
                    except STALE_CONNECTION as e:
                        # A kept-alive connection the server had closed (llama-server's HTTP library
                        # closes them unannounced): nothing came back, so the request goes again, timed
                        # afresh; each try drops one stale connection from the pool.
                        if res["chunks"] or res["ttft"] is not None or attempt == STALE_RETRIES:
                            raise
                        res = results[i] = new_result(len(ids), n_out)
                        res["retried"] = type(e).__name__
                res["finished"] = True
            except asyncio.TimeoutError:
                res["finished"] = False  # cut by the time budget: neither success nor failure
                res.pop("last", None)
            except Exception as e:  # noqa: BLE001 -- any transport error is a failed request
                res["error"] = f"{type(e).__name__}: {e}"[:300]
                res["e2e"] = time.perf_counter() - res["started"] if res["started"] else None
                res["finished"] = True
                res.pop("last", None)

    cpu0 = time.process_time()
    if aiohttp is not None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=job["request_timeout"])
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector, trace_configs=[sent_trace()]) as session:
            await asyncio.gather(*(stream(send_aiohttp, session) for _ in range(job["concurrency"])))
    else:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(timeout=httpx.Timeout(job["request_timeout"]), limits=limits) as client:
            await asyncio.gather(*(stream(send_httpx, client) for _ in range(job["concurrency"])))
    return {"results": [r for r in results if r is not None], "cpu_s": time.process_time() - cpu0}


def worker_main(job):
    try:
        import uvloop  # noqa: F401 -- faster event loop where installed
        return uvloop.run(run_closed_loop(job))
    except ImportError:
        return asyncio.run(run_closed_loop(job))


# ----------------------------------------------------------------------------- statistics

def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summary(values, scale=1000.0):
    """mean / std / pN of values (seconds), in ms by default."""
    v = sorted(x * scale for x in values if x is not None)
    if not v:
        return None
    mean = sum(v) / len(v)
    out = {"mean": mean, "std": math.sqrt(sum((x - mean) ** 2 for x in v) / len(v)), "min": v[0], "max": v[-1]}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(v, q)
    return {k: round(x, 3) for k, x in out.items()}


def scenario_metrics(scenario, results, t_start, t_end, cpu_s, workers):
    done = [r for r in results if r["finished"]]
    ok = [r for r in done if r["ok"]]
    failed = [r for r in done if not r["ok"]]
    unfinished = [r for r in results if not r["finished"]]
    # Throughput over the span in which requests ran; an unfinished request's
    # streamed chunks count as output too so a cut run is not underestimated.
    duration = max(t_end - t_start, 1e-9)
    out_tokens = sum(r["output_tokens"] for r in ok)
    streamed = out_tokens + sum(r["chunks"] for r in unfinished)
    tpot = [(r["e2e"] - r["ttft"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1]
    return {
        "scenario": scenario.name, "concurrency": scenario.concurrency, "num_requests": scenario.num_requests,
        "sampling": scenario.sampling,
        "input_range": list(scenario.input_range), "output_range": list(scenario.output_range),
        "started": len(results), "completed": len(ok), "failed": len(failed), "unfinished": len(unfinished),
        "truncated": bool(unfinished) or len(results) < scenario.num_requests,
        "success_rate": round(len(ok) / len(done), 4) if done else None,
        "short_outputs": sum(1 for r in ok if r["output_tokens"] != r["max_tokens"]),
        "errors": sorted({r["error"] for r in failed})[:5],
        "retried_on_closed_connection": sum(1 for r in results if r.get("retried")),
        "duration_s": round(duration, 4),
        "total_input_tokens": sum(r["prompt_len"] for r in ok),
        "total_output_tokens": out_tokens,
        "request_throughput": round(len(ok) / duration, 4),
        "output_throughput": round(streamed / duration, 2),
        "total_token_throughput": round((streamed + sum(r["prompt_len"] for r in ok)) / duration, 2),
        "ttft_ms": summary([r["ttft"] for r in ok]),
        "tpot_ms": summary(tpot),
        "itl_ms": summary([g for r in ok for g in r["itl"]]),
        "e2e_ms": summary([r["e2e"] for r in ok]),
        # A worker near 1.0 CPU per wall second means the client, not the server, may be the limit.
        "client": {"workers": workers, "cpu_s": round(cpu_s, 3),
                   "cpu_per_wall_per_worker": round(cpu_s / duration / workers, 3)},
    }


# ----------------------------------------------------------------------------- scenario runner

def split_job(requests, concurrency, workers):
    """Round-robin split of requests and streams over worker processes."""
    workers = max(1, min(workers, concurrency))
    jobs = []
    for w in range(workers):
        c = concurrency // workers + (1 if w < concurrency % workers else 0)
        jobs.append({"requests": requests[w::workers], "concurrency": c})
    return [j for j in jobs if j["requests"]]


def run_scenario(scenario, args, base_url, model, deadline, pool):
    requests = make_requests(scenario, args.seed, pool)
    workers = args.workers or max(1, min((os.cpu_count() or 2) // 2, math.ceil(scenario.concurrency / STREAMS_PER_WORKER)))
    jobs = split_job(requests, scenario.concurrency, workers)
    for j in jobs:
        j.update(base_url=base_url, model=model, deadline=deadline, request_timeout=args.request_timeout,
                 sampling=scenario.sampling)
    t_start = time.perf_counter()
    if len(jobs) == 1:
        outs = [worker_main(jobs[0])]
    else:
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(len(jobs), mp_context=ctx) as ex:
            outs = list(ex.map(worker_main, jobs))
    results = [r for o in outs for r in o["results"]]
    starts = [r["started"] for r in results if r["started"]]
    ends = [r["started"] + r["e2e"] for r in results if r["finished"] and r["e2e"] is not None]
    t0 = min(starts) if starts else t_start
    t1 = max(ends + ([min(time.perf_counter(), deadline)] if any(not r["finished"] for r in results) else []),
             default=time.perf_counter())
    return scenario_metrics(scenario, results, t0, t1, sum(o["cpu_s"] for o in outs), len(jobs)), results


def server_times(log_path, start, end, results=(), wave=0):
    """The server's own times of the requests that finished while a scenario
    ran: tern's request log lines between byte offsets start and end of its
    log, queue_ms (arrival to its first step) and ttft_ms (arrival to its
    first token), requests that produced a token only. Beside the client's
    TTFT they tell the server's share of it from the client's and HTTP's.
    With tern's debug lines (`--log-level debug`), each of the client's
    requests (results) is matched by its response id and its TTFT split
    into client_ttft_split_ms: "client_send" (the client's clock start to
    its request's body written to the socket, connecting included; aiohttp
    only, else 0), "to_arrival" (from there to the server's session start:
    the server's read and parsing),
    "server" (arrival to the first token), "to_writer" (that token to the
    HTTP handler) and "to_client" (the handler to the client's read of the
    chunk), with every request's parts in client_ttft_split_rows. With wave
    (the scenario's concurrency), the first wave: the first `wave` requests
    the client started (a closed loop starts them together), how long their
    arrivals took (first to last) and when the last of their first tokens
    left the engine, after the first arrival (first_wave_ms). Empty for a
    server that writes no such lines."""
    with open(log_path, "rb") as f:
        f.seek(start)
        data = f.read(max(0, end - start))
    queue, ttft = [], []
    for m in REQUEST_LOG.finditer(data):
        if float(m.group(2)) > 0:
            queue.append(float(m.group(1)))
            ttft.append(float(m.group(2)))
    if not ttft:
        return {}
    out = {"server_requests": len(ttft), "server_queue_ms": summary(queue, 1.0), "server_ttft_ms": summary(ttft, 1.0)}
    clocks = {m.group(1).decode(errors="replace"): [float(x) for x in m.groups()[1:]]
              for m in REQUEST_CLOCK.finditer(data)}
    parts = {"client_send": [], "to_arrival": [], "server": [], "to_writer": [], "to_client": []}
    rows, firsts = [], []
    t0 = min((r["started"] for r in results if r.get("started")), default=0.0)
    for r in results:
        c = clocks.get(r.get("id"))
        if c is None or r.get("ttft") is None or not c[2]:
            continue
        arrival, first, handed = c
        got = r["started"] + r["ttft"]
        sent = r.get("sent", r["started"])  # aiohttp's trace; without it the send counts in to_arrival
        split = (sent - r["started"], arrival - sent, first - arrival, handed - first, got - handed)
        for k, v in zip(parts, split):
            parts[k].append(v * 1000)
        rows.append([round((r["started"] - t0) * 1000, 2)] + [round(v * 1000, 2) for v in split])
        firsts.append((r["started"], arrival, handed))
    if parts["server"]:
        out["client_ttft_split_requests"] = len(parts["server"])
        out["client_ttft_split_ms"] = {k: summary(v, 1.0) for k, v in parts.items()}
        # Each request: its start (ms after the scenario's first) and its five parts, in start order.
        out["client_ttft_split_rows"] = {"columns": ["start", *parts], "rows": sorted(rows)}
    if wave > 1 and len(firsts) >= wave:
        first = sorted(firsts)[:wave]
        arrived = min(a for _, a, _ in first)
        out["first_wave_ms"] = {"requests": wave,
                                "arrivals": round((max(a for _, a, _ in first) - arrived) * 1000, 2),
                                "last_first_token_out": round((max(h for _, _, h in first) - arrived) * 1000, 2)}
    return out


def server_times_lines(run):
    """One line per scenario with the server's own times, for the markdown."""
    lines = []
    for m in run["scenarios"]:
        if m.get("server_ttft_ms"):
            t, q = m["server_ttft_ms"], m["server_queue_ms"]
            lines.append(f"- {run['label']} {m['scenario']}: the server's request log ({m['server_requests']} "
                         f"requests): TTFT p50 / p99 {fmt(t['p50'])} / {fmt(t['p99'])} ms, queue p50 / p99 "
                         f"{fmt(q['p50'])} / {fmt(q['p99'])} ms (the client's TTFT p50 / p99: "
                         f"{pct(m, 'ttft_ms', 'p50')} / {pct(m, 'ttft_ms', 'p99')} ms; client processes: "
                         f"{m['client']['workers']})")
        split = m.get("client_ttft_split_ms")
        if split:
            lines.append(f"  - the client's TTFT of {m['client_ttft_split_requests']} requests matched in the debug log, "
                         "p50 / p99 ms: " + "; ".join(f"{k.replace('_', ' ')} {fmt(v['p50'])} / {fmt(v['p99'])}"
                                                      for k, v in split.items()))
        wave = m.get("first_wave_ms")
        if wave:
            lines.append(f"  - the first wave ({wave['requests']} requests started together): arrivals over "
                         f"{fmt(wave['arrivals'])} ms, its last first token out {fmt(wave['last_first_token_out'])} ms "
                         "after its first arrival")
    return lines


def warmup(base_url, model, pool):
    """One short request so connection setup and lazy init are not measured."""
    low, high, _ = pool
    body = json.dumps({"model": model, "prompt": list(range(low, low + 16)), "max_tokens": 4, "ignore_eos": True,
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(base_url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            resp.read()
    except (OSError, urllib.error.HTTPError) as e:
        print(f"serve_bench: warmup request failed: {e}", file=sys.stderr)


# ----------------------------------------------------------------------------- markdown

def fmt(x, digits=1):
    if x is None:
        return "-"
    if isinstance(x, float) and abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def pct(m, key, q):
    return fmt(m[key][q]) if m.get(key) else "-"


def markdown_table(runs):
    """One table row per scenario of every run (a run = one serve_bench JSON)."""
    head = ("| server | scenario | conc | ok/sent | req/s | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms "
            "| ITL p50 / p99 ms | E2E p50 / p99 s | peak RSS MiB | peak GPU MiB |")
    lines = [head, "|" + "---|" * 12]
    for run in runs:
        for m in run["scenarios"]:
            if m.get("skipped"):
                lines.append(f"| {run['label']} | {m['scenario']} | {m['concurrency']} | skipped: {m['skipped']} "
                             + "| " * 8 + "|")
                continue
            e2e = m.get("e2e_ms") or {}
            cut = " (cut)" if m["truncated"] else ""
            lines.append(
                f"| {run['label']} | {m['scenario']}{cut} | {m['concurrency']} | {m['completed']}/{m['started']} "
                f"| {fmt(m['request_throughput'], 2)} | {fmt(m['output_throughput'])} "
                f"| {pct(m, 'ttft_ms', 'p50')} / {pct(m, 'ttft_ms', 'p99')} "
                f"| {pct(m, 'tpot_ms', 'p50')} / {pct(m, 'tpot_ms', 'p99')} "
                f"| {pct(m, 'itl_ms', 'p50')} / {pct(m, 'itl_ms', 'p99')} "
                f"| {fmt(e2e.get('p50', 0) / 1000, 2) if e2e else '-'} / "
                f"{fmt(e2e.get('p99', 0) / 1000, 2) if e2e else '-'} "
                f"| {fmt(m['resources'].get('peak_rss_mib'), 0)} | {fmt(m['resources'].get('peak_gpu_mib'), 0)} |")
    return "\n".join(lines)


def run_header(run):
    s = run["server"]
    ready = f"; ready in {s['ready_s']:.2f} s" if s.get("ready_s") is not None else ""
    return (f"**{run['label']}**: `{run['command']}`  \n"
            f"server: `{s.get('launch') or s['url']}` (model {s['model']}{ready})  \n"
            f"commit {run['commit']}, {machine_line(run['machine'])}, {run['date']}, client {run['client']}")


# ----------------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="server already running, e.g. http://127.0.0.1:8000")
    where.add_argument("--launch", help="command that starts the server and prints 'listening on http://HOST:PORT'")
    ap.add_argument("--launch-timeout", type=float, default=300.0, help="seconds to wait for /health (default 300)")
    ap.add_argument("--server-pid", type=int, help="pid of a --base-url server, for its RSS and GPU memory")
    ap.add_argument("--model", help="model name in requests (default: the first of GET /v1/models)")
    ap.add_argument("--model-dir", help="model folder: prompt ids come from its whole vocabulary")
    ap.add_argument("--token-range", type=parse_range, help="prompt token ids LOW:HIGH (default 16:1200, or "
                    "1000:vocab_size with --model-dir)")
    ap.add_argument("--scenarios", default="single,conc-1,conc-8,offline", help="comma list of NAME[:REQUESTS]")
    ap.add_argument("--num-prompts", type=int, help="requests per single/conc-N scenario (default 8 / max(4N, 32))")
    ap.add_argument("--single-input", type=int, default=256, help="prompt tokens of 'single' (default 256)")
    ap.add_argument("--output-len", type=int, default=128, help="output tokens of single and conc-N (default 128)")
    ap.add_argument("--conc-input", type=parse_range, default=(50, 500), help="conc-N prompt tokens (default 50:500)")
    ap.add_argument("--offline-requests", type=int, default=256, help="requests of 'offline' (default 256)")
    ap.add_argument("--offline-input", type=parse_range, default=(100, 1024), help="default 100:1024")
    ap.add_argument("--offline-output", type=parse_range, default=(100, 1024), help="default 100:1024")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds for all scenarios; a scenario still running then is cut, later ones skipped")
    ap.add_argument("--request-timeout", type=float, default=600.0, help="seconds without a byte before failing")
    ap.add_argument("--workers", type=int, default=0, help=f"client processes (default: one per {STREAMS_PER_WORKER} "
                    "streams, at most half the CPUs)")
    ap.add_argument("--gpu-sample-interval", type=float, default=1.0,
                    help="seconds between GPU memory samples (nvidia-smi) while a scenario runs, the first one "
                    "interval in; 0: only after each scenario (default 1)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the one short unmeasured request")
    ap.add_argument("--label", default="serve", help="name of this run: OUT_DIR/LABEL.json and .md")
    ap.add_argument("--out-dir", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--commit", help="commit measured (default: $TERN_COMMIT, else git rev-parse)")
    args = ap.parse_args(argv)
    if args.gpu_sample_interval < 0:
        ap.error(f"--gpu-sample-interval takes seconds >= 0, not {args.gpu_sample_interval}")
    return args


def main(argv=None):
    args = parse_args(argv)
    # `timeout` and Ctrl-C must still stop a launched server (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if HTTP_CLIENT is None:
        raise SystemExit("serve_bench: needs aiohttp or httpx")
    scenarios = [make_scenario(s.strip(), args) for s in args.scenarios.split(",") if s.strip()]
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pool = token_pool(args)

    server, pid = None, args.server_pid
    if args.launch:
        log_path = out_dir / f"{args.label}-server.log"
        print(f"serve_bench: launching {args.launch}", file=sys.stderr)
        try:
            server = LaunchedServer(args.launch, str(log_path), args.launch_timeout)
        except RuntimeError as e:
            print(f"serve_bench: {e}", file=sys.stderr)
            return 2
        # For a wrapper script's cleanup should this process be killed outright.
        pid_file = out_dir / f"{args.label}-server.pid"
        pid_file.write_text(f"{server.pid}\n")
        base_url, pid = server.url, server.pid
        print(f"serve_bench: {base_url} ready in {server.ready_s:.3f} s", file=sys.stderr)
    else:
        base_url = args.base_url.rstrip("/")
    run = {"label": args.label, "command": " ".join(shlex.quote(a) for a in [sys.argv[0], *sys.argv[1:]]),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "commit": commit_id(args.commit), "machine": machine_info(), "client": HTTP_CLIENT,
           "seed": args.seed, "token_range": list(pool[:2]), "scenarios": []}
    exit_code = 0
    try:
        model = args.model
        if not model:
            status, body = http_get(base_url + "/v1/models", timeout=30)
            if status != 200:
                raise SystemExit(f"serve_bench: GET /v1/models answered {status}; pass --model")
            model = json.loads(body)["data"][0]["id"]
        run["server"] = {"url": base_url, "launch": args.launch, "pid": pid, "model": model,
                         "ready_s": round(server.ready_s, 4) if server else None,
                         "gpu_mib_at_ready": server.gpu_at_ready if server else None,
                         "rss_mib_at_ready": (read_proc_status(pid).get("VmRSS") if pid else None)}
        if not args.no_warmup:
            warmup(base_url, model, pool)
        budget_start = time.perf_counter()
        deadline = budget_start + args.time_budget if args.time_budget else float("inf")
        for sc in scenarios:
            left = deadline - time.perf_counter()
            if left < 2.0:
                run["scenarios"].append({"scenario": sc.name, "concurrency": sc.concurrency,
                                         "num_requests": sc.num_requests, "skipped": "time budget spent"})
                print(f"serve_bench: {sc.name}: skipped (time budget spent)", file=sys.stderr)
                continue
            log_start = os.path.getsize(server.log_path) if server else 0
            with ResourceSampler(pid, server.idle_gpu_total if server else None, args.gpu_sample_interval) as sampler:
                m, results = run_scenario(sc, args, base_url, model, deadline, pool)
            m["resources"] = sampler.report()
            if server:
                time.sleep(0.2)  # the last requests' log lines follow their last bytes
                m.update(server_times(server.log_path, log_start, os.path.getsize(server.log_path), results,
                                      sc.concurrency))
            run["scenarios"].append(m)
            print(f"serve_bench: {sc.name}: {m['completed']}/{m['started']} ok, {m['output_throughput']:,.0f} out "
                  f"tok/s, TTFT p50 {pct(m, 'ttft_ms', 'p50')} ms, TPOT p50 {pct(m, 'tpot_ms', 'p50')} ms"
                  f"{' (cut by the time budget)' if m['truncated'] else ''}", file=sys.stderr)
            if m["failed"]:
                exit_code = 1
                print(f"serve_bench: {sc.name}: {m['failed']} failed: {m['errors']}", file=sys.stderr)
    finally:
        if server:
            run.setdefault("server", {})["exit_code"] = server.stop()
            pid_file.unlink(missing_ok=True)
    (out_dir / f"{args.label}.json").write_text(json.dumps(run, indent=1) + "\n")
    notes = server_times_lines(run)
    (out_dir / f"{args.label}.md").write_text(run_header(run) + "\n\n" + markdown_table([run]) + "\n"
                                              + ("\n" + "\n".join(notes) + "\n" if notes else ""))
    print(markdown_table([run]))
    for line in notes:
        print(line)
    print(f"serve_bench: wrote {out_dir / (args.label + '.json')} and .md", file=sys.stderr)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
