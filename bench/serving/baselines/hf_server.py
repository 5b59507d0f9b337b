#!/usr/bin/env python3
"""Plain Hugging Face transformers behind a minimal OpenAI-style server: the
baseline that bench/serving/serve_bench.py measures with the same client as tern.

POST /v1/completions (token-id or text prompt, max_tokens, stream,
stream_options.include_usage, ignore_eos; always greedy), GET /v1/models,
GET /health. A static batcher: requests that arrive within --batch-wait-ms of
the first waiting one (up to --max-batch-size) are left-padded into one batch
and run by `model.generate` to the longest max_tokens; a streamer hands each
step's tokens to the requests, and a request that arrives meanwhile waits for
the next batch -- what plain HF serving does, no continuous batching.
--static-cache-compile adds cache_implementation="static" (generate then
compiles the decode step), with batch and length bucketed to powers of two.

    python3 bench/serving/baselines/hf_server.py --model MODEL_DIR --port 8001
    python3 bench/serving/baselines/hf_server.py --model tests/data/ernie-tiny --backend fake   # no torch: plumbing test

Prints "listening on http://HOST:PORT" on stderr once the model is loaded and
a self-test batch has run. Threads: aiohttp on the main thread's event loop;
one engine thread owns the model; tokens cross via call_soon_threadsafe.
"""

import argparse
import asyncio
import json
import pathlib
import queue
import random
import signal
import sys
import threading
import time
import uuid

from aiohttp import web

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import sp_vocab  # noqa: E402 -- bench/serving/sp_vocab.py


def log(msg):
    print(f"hf_server: {msg}", file=sys.stderr, flush=True)


class Request:
    """One completion. The engine thread writes count/done; the event loop
    owns the queue, decoder and cancelled flag."""

    def __init__(self, prompt, max_tokens, ignore_eos, decoder):
        self.prompt, self.max_tokens, self.ignore_eos = prompt, max_tokens, ignore_eos
        self.decoder = decoder
        self.queue = asyncio.Queue()
        self.count = 0
        self.done = False
        self.cancelled = False


class BatchStreamer:
    """transformers' streamer protocol for a whole batch: generate() calls
    put(prompt ids) once, then put(next tokens, shape [batch]) every step, then
    end(). Rows past len(rows) are bucket padding and are ignored."""

    def __init__(self, rows, eos_ids, emit):
        self.rows, self.eos_ids, self.emit = rows, set(eos_ids), emit
        self.seen_prompt = False
        self.all_done = False

    def put(self, value):
        if not self.seen_prompt and value.dim() == 2:
            self.seen_prompt = True
            return
        self.seen_prompt = True
        self.step(value.reshape(-1).tolist())

    def step(self, tokens):
        updates = []
        for r, t in zip(self.rows, tokens):
            if r.done:
                continue
            r.count += 1
            finish = None
            if r.cancelled:
                r.done = True
                continue
            if not r.ignore_eos and t in self.eos_ids:
                finish = "stop"
            elif r.count >= r.max_tokens:
                finish = "length"
            r.done = finish is not None
            updates.append((r, t, finish))
        self.all_done = all(r.done for r in self.rows)
        if updates:
            self.emit(updates)

    def end(self):
        rest = [(r, None, "length") for r in self.rows if not r.done]
        for r in self.rows:
            r.done = True
        self.all_done = True
        if rest:
            self.emit(rest)


def next_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


class HfBackend:
    """Ernie4_5ForCausalLM (any AutoModelForCausalLM) on one device, run by generate()."""

    def __init__(self, args):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, GenerationConfig, StoppingCriteria, StoppingCriteriaList

        self.torch, self.args = torch, args
        dtype = getattr(torch, args.dtype)
        t0 = time.perf_counter()
        try:
            model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation=args.attn)
        except TypeError:  # transformers < 4.56 spells it torch_dtype
            model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype, attn_implementation=args.attn)
        if model.dtype != dtype:
            model = model.to(dtype)
        self.model = model.to(args.device).eval()
        cfg = self.model.config
        eos = cfg.eos_token_id if cfg.eos_token_id is not None else 2
        self.eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        self.pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
        self.vocab_size = cfg.vocab_size
        self.max_len = getattr(cfg, "max_position_embeddings", 131072)
        # A clean greedy config, so the checkpoint's sampling defaults
        # (do_sample, temperature, top_p) never leak into generate().
        self.model.generation_config = GenerationConfig(bos_token_id=getattr(cfg, "bos_token_id", None),
                                                        eos_token_id=self.eos_ids, pad_token_id=self.pad,
                                                        do_sample=False)
        self.StoppingCriteriaList = StoppingCriteriaList

        class AllDone(StoppingCriteria):
            """Ends generate() once every request in the batch has what it asked for."""

            def __init__(self, streamer):
                self.streamer = streamer

            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), self.streamer.all_done, dtype=torch.bool,
                                  device=input_ids.device)

        self.AllDone = AllDone
        if args.static_cache_compile:
            import torch._dynamo
            for name in ("cache_size_limit", "recompile_limit"):
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, 256)
        log(f"loaded {args.model} ({type(self.model).__name__}, {args.dtype}, attn {args.attn}) on {args.device} "
            f"in {time.perf_counter() - t0:.1f} s; torch {torch.__version__}, transformers {transformers.__version__}")

    def run_batch(self, rows, emit):
        torch = self.torch
        real = len(rows)
        width = max(len(r.prompt) for r in rows)
        max_new = max(r.max_tokens for r in rows)
        batch = real
        extra = {}
        if self.args.static_cache_compile:
            # One compiled decode graph per (batch, cache length) bucket.
            batch = min(next_pow2(real), max(real, self.args.max_batch_size))
            total = next_pow2(max(width + max_new, 256))
            max_new = total - width
            extra["cache_implementation"] = "static"
        ids = torch.full((batch, width), self.pad, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i in range(batch):
            p = rows[i if i < real else 0].prompt  # bucket padding repeats the first row
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        # ignore_eos everywhere: an id the model never picks, so nothing stops early.
        eos = [self.vocab_size] if all(r.ignore_eos for r in rows) else self.eos_ids
        streamer = BatchStreamer(rows, self.eos_ids, emit)
        with torch.no_grad():  # as generate() itself; inference-mode tensors can upset torch.compile
            self.model.generate(input_ids=ids.to(self.args.device), attention_mask=mask.to(self.args.device),
                                max_new_tokens=max_new, do_sample=False, eos_token_id=eos, pad_token_id=self.pad,
                                streamer=streamer, stopping_criteria=self.StoppingCriteriaList([self.AllDone(streamer)]),
                                **extra)
        return batch, width

    def warm_shapes(self, shapes):
        """Runs generate once per BATCHxLENGTH shape (static-cache compile warmup)."""
        for spec in shapes:
            b, _, n = spec.partition("x")
            rows = [Request([1000 + i] * 8, max(1, int(n) - 8), True, None) for i in range(int(b))]
            t0 = time.perf_counter()
            self.run_batch(rows, lambda updates: None)
            log(f"warmed {spec} in {time.perf_counter() - t0:.1f} s")


class FakeBackend:
    """No model: sleeps like one and emits random ids. Tests the HTTP, batching
    and streaming plumbing on machines without torch."""

    def __init__(self, args):
        self.args = args
        cfg = json.loads((pathlib.Path(args.model) / "config.json").read_text())
        self.vocab_size, self.eos_ids, self.max_len = cfg["vocab_size"], [cfg.get("eos_token_id", 2)], 131072
        self.rng = random.Random(0)

    def run_batch(self, rows, emit):
        width = max(len(r.prompt) for r in rows)
        streamer = BatchStreamer(rows, [] if all(r.ignore_eos for r in rows) else self.eos_ids, emit)
        time.sleep(self.args.fake_prefill_us * width * len(rows) / 1e6)
        for _ in range(max(r.max_tokens for r in rows)):
            streamer.step([self.rng.randrange(3, self.vocab_size) for _ in rows])
            if streamer.all_done:
                break
            time.sleep(self.args.fake_step_ms / 1000)
        streamer.end()
        return len(rows), width


class Batcher(threading.Thread):
    """The engine thread: gathers a batch, runs it to the end, repeats."""

    def __init__(self, backend, loop, max_batch, wait_s):
        super().__init__(name="engine", daemon=True)
        self.backend, self.loop, self.max_batch, self.wait_s = backend, loop, max_batch, wait_s
        self.pending = queue.Queue()

    def submit(self, req):
        self.pending.put(req)

    def stop(self):
        self.pending.put(None)

    def _gather(self, first):
        batch = [first]
        end = time.monotonic() + self.wait_s
        while len(batch) < self.max_batch:
            try:
                left = end - time.monotonic()
                req = self.pending.get(timeout=left) if left > 0 else self.pending.get_nowait()
            except queue.Empty:
                break
            if req is None:
                self.pending.put(None)
                break
            batch.append(req)
        return [r for r in batch if not r.cancelled]

    def emit(self, updates):
        self.loop.call_soon_threadsafe(deliver, updates)

    def run(self):
        while True:
            first = self.pending.get()
            if first is None:
                return
            rows = self._gather(first)
            if not rows:
                continue
            t0 = time.perf_counter()
            try:
                shape = self.backend.run_batch(rows, self.emit)
                log(f"batch of {len(rows)} (padded {shape[0]}x{shape[1]}, max_tokens {max(r.max_tokens for r in rows)}) "
                    f"in {time.perf_counter() - t0:.2f} s")
            except Exception as e:  # noqa: BLE001 -- the requests get the error, the server lives on
                log(f"batch of {len(rows)} failed: {type(e).__name__}: {e}")
                self.emit([(r, None, f"error:{type(e).__name__}: {e}") for r in rows if not r.done])
                for r in rows:
                    r.done = True


def deliver(updates):
    """Event loop side of Batcher.emit: detokenize and queue for the handler."""
    for req, token, finish in updates:
        text = req.decoder.push(token) if token is not None and req.decoder else ""
        req.queue.put_nowait((text, finish))


def self_test(backend):
    """Two requests of different lengths through run_batch: each must get
    exactly max_tokens tokens. Fails fast on a transformers API mismatch."""
    got = {}
    rows = [Request([1000 + i for i in range(n)], m, True, None) for n, m in ((5, 3), (9, 6))]

    def collect(updates):
        for r, t, finish in updates:
            got.setdefault(id(r), []).append((t, finish))

    t0 = time.perf_counter()
    backend.run_batch(rows, collect)
    for r in rows:
        toks = got.get(id(r), [])
        if len(toks) != r.max_tokens or toks[-1][1] != "length" or any(t is None for t, _ in toks):
            raise SystemExit(f"hf_server: self-test failed: asked {r.max_tokens} tokens, got {toks}")
    log(f"self-test ok in {time.perf_counter() - t0:.2f} s")


# ----------------------------------------------------------------------------- HTTP

def error(status, message):
    return web.json_response({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                             status=status)


def parse_completion(body, ctx):
    """(Request, stream, include_usage) or an error response."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        if len(prompt) != 1:
            return error(400, "one prompt per request")
        prompt = prompt[0]
    if isinstance(prompt, str):
        tok = ctx.get("tokenizer")
        if tok is None:
            return error(400, "text prompts need a tokenizer; send token ids")
        prompt = tok(prompt, add_special_tokens=False)["input_ids"]
    if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
        return error(400, "prompt must be a non-empty list of token ids (or a string)")
    if any(t < 0 or t >= ctx["vocab_size"] for t in prompt):
        return error(400, f"token ids must be in [0, {ctx['vocab_size']})")
    max_tokens = body.get("max_tokens", 16)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        return error(400, "max_tokens must be a positive integer")
    if body.get("n", 1) != 1:
        return error(400, "only n=1 is supported")
    if len(prompt) + max_tokens > ctx["max_len"]:
        return error(400, f"prompt + max_tokens exceeds {ctx['max_len']}")
    req = Request(prompt, max_tokens, bool(body.get("ignore_eos", False)), ctx["decoder"].stream())
    include_usage = bool((body.get("stream_options") or {}).get("include_usage", False))
    return req, bool(body.get("stream", False)), include_usage


def sse(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def completions(request):
    ctx = request.app["ctx"]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "body is not JSON")
    if not isinstance(body, dict):
        return error(400, "body must be a JSON object")
    parsed = parse_completion(body, ctx)
    if isinstance(parsed, web.Response):
        return parsed
    req, stream, include_usage = parsed
    rid, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    base = {"id": rid, "object": "text_completion", "created": created, "model": ctx["name"]}

    def usage():
        return {"prompt_tokens": len(req.prompt), "completion_tokens": req.count,
                "total_tokens": len(req.prompt) + req.count}

    ctx["batcher"].submit(req)

    if not stream:
        text, finish = [], None
        while finish is None:
            piece, finish = await req.queue.get()
            text.append(piece)
        if finish.startswith("error:"):
            return error(500, finish[6:])
        return web.json_response({**base, "choices": [{"index": 0, "text": "".join(text), "logprobs": None,
                                                       "finish_reason": finish}], "usage": usage()})

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        finish = None
        while finish is None:
            items = [await req.queue.get()]
            while not req.queue.empty():
                items.append(req.queue.get_nowait())
            out = []
            for text, finish in items:
                if finish and finish.startswith("error:"):
                    out.append(sse({"error": {"message": finish[6:], "type": "server_error", "code": 500}}))
                    break
                out.append(sse({**base, "choices": [{"index": 0, "text": text, "logprobs": None,
                                                     "finish_reason": finish}]}))
            if finish is not None:
                if include_usage and not finish.startswith("error:"):
                    out.append(sse({**base, "choices": [], "usage": usage()}))
                out.append(b"data: [DONE]\n\n")
            await resp.write(b"".join(out))
    except (ConnectionResetError, asyncio.CancelledError):
        req.cancelled = True
        raise
    await resp.write_eof()
    return resp


async def health(request):
    return web.Response(text="")


async def models(request):
    ctx = request.app["ctx"]
    return web.json_response({"object": "list", "data": [{"id": ctx["name"], "object": "model",
                                                          "owned_by": "hf_server", "max_model_len": ctx["max_len"]}]})


async def serve(args, backend, decoder):
    loop = asyncio.get_running_loop()
    batcher = Batcher(backend, loop, args.max_batch_size, args.batch_wait_ms / 1000)
    batcher.start()
    app = web.Application(client_max_size=64 * 2**20)
    app["ctx"] = {"batcher": batcher, "decoder": decoder, "vocab_size": backend.vocab_size,
                  "max_len": backend.max_len, "name": args.served_model_name or pathlib.Path(args.model).name,
                  "tokenizer": load_tokenizer(args) if args.text_prompts else None}
    app.add_routes([web.post("/v1/completions", completions), web.get("/health", health),
                    web.get("/v1/models", models)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    host, port = runner.addresses[0][:2]
    print(f"hf_server: listening on http://{host}:{port} (model {app['ctx']['name']})", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    batcher.stop()
    await runner.cleanup()
    log("stopped")


def load_tokenizer(args):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(args.model)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model folder (Hugging Face layout)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001, help="0 picks a free one")
    ap.add_argument("--served-model-name")
    ap.add_argument("--backend", choices=["hf", "fake"], default="hf")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (default sdpa)")
    ap.add_argument("--max-batch-size", type=int, default=256)
    ap.add_argument("--batch-wait-ms", type=float, default=10.0, help="how long a batch waits to fill (default 10)")
    ap.add_argument("--static-cache-compile", action="store_true",
                    help="static KV cache + compiled decode step (bucketed shapes; first use of a shape compiles)")
    ap.add_argument("--warmup-shapes", default="", help="BATCHxLENGTH,... run once before serving, e.g. 1x512,64x1024")
    ap.add_argument("--text-prompts", action="store_true", help="load AutoTokenizer so string prompts work")
    ap.add_argument("--fake-step-ms", type=float, default=5.0)
    ap.add_argument("--fake-prefill-us", type=float, default=2.0, help="per prompt token")
    args = ap.parse_args()

    backend = FakeBackend(args) if args.backend == "fake" else HfBackend(args)
    decoder = sp_vocab.PieceDecoder(sp_vocab.read_pieces(str(pathlib.Path(args.model) / "tokenizer.model")))
    self_test(backend)
    if args.warmup_shapes and args.backend == "hf":
        backend.warm_shapes([s for s in args.warmup_shapes.split(",") if s])
    asyncio.run(serve(args, backend, decoder))


if __name__ == "__main__":
    main()
