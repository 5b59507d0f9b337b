"""The two tools side by side on the same files: llama.cpp's converter,
llama-quantize, llama-server and llama-perplexity against `tern convert`,
`tern quantize`, `tern generate` and `tern perplexity`. Files are made once
per work folder and kept (a later run reuses them when the inputs are not
newer), so a failing check can be rerun by hand on the same bytes."""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
from gguf import GGUFReader

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
# The two tiny test models, and a wide one made here whose rows (256 and 768
# values) split into the 256-value blocks of the K-quants: the tiny models'
# rows (64, 128, 192) do not, so there every K mix falls back to Q5_0, Q5_1
# and Q8_0 (in llama-quantize and in tern quantize alike).
MODELS = ["ernie-tiny", "ernie-tiny-untied", "ernie-wide"]
WIDE_SHAPE = ["--layers", "4", "--hidden", "256", "--intermediate", "768", "--heads", "4", "--kv-heads", "2",
              "--head-dim", "64", "--vocab", "1280", "--untied", "--init-std", "0.1", "--no-pad-tokenizer"]
CONVERT_TYPES = ["f32", "bf16", "q8_0"]
QUANT_TYPES = ["Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K"]
GREEDY_TOKENS = 20
# Greedy tokens of the two tools are compared until they part; parting where
# the top-2 margin in tern's logits is below a threshold is allowed (two
# different forward passes may pick either token there), at a clear margin it
# is a failure. On f32 files only the float order
# differs: MARGIN_THRESHOLD. On bf16 files llama.cpp also rounds the
# activations to bf16 for its bf16 dot products (tern keeps them f32), and on
# files with quantized matrices both tools quantize the activations to 8 bits
# for their integer dot products, each its own way (tern's AVX2 kernels differ
# from its own fp32 reference kernels by as much as from llama.cpp's); the
# random weights turn that into logit differences of a few tenths:
# QUANT_MARGIN_THRESHOLD.
MARGIN_THRESHOLD = 0.02
QUANT_MARGIN_THRESHOLD = 0.25


def margin_threshold(how, qtype):
    return MARGIN_THRESHOLD if how == "convert" and qtype == "f32" else QUANT_MARGIN_THRESHOLD
# Window of the KL runs (tern perplexity and llama-perplexity -c).
KL_CTX = 64


def env_path(name, default=None):
    value = os.environ.get(name, default)
    return pathlib.Path(value) if value else None


class Tools:
    """Paths of the binaries under test and of the work folder."""

    def __init__(self):
        self.tern = env_path("TERN_BIN", str(ROOT / "build" / "bin" / "tern"))
        self.llama_bin = env_path("LLAMA_BIN")
        self.llama_src = env_path("LLAMA_SRC")
        self.convert_python = env_path("CONVERT_PYTHON")
        self.work = env_path("COMPAT_DIR", str(ROOT / "build" / "compat"))
        self.threads = os.environ.get("COMPAT_THREADS", "2")
        self.work.mkdir(parents=True, exist_ok=True)

    def missing(self):
        need = {"TERN_BIN": self.tern, "LLAMA_BIN": self.llama_bin, "LLAMA_SRC": self.llama_src,
                "CONVERT_PYTHON": self.convert_python}
        return [k for k, v in need.items() if v is None or not v.exists()]

    def llama(self, name):
        return str(self.llama_bin / name)


def run(args, log, timeout=600, env=None):
    """Runs a command, its output to `log`; raises with the log's tail on failure."""
    r = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env)
    pathlib.Path(log).write_bytes(r.stdout)
    if r.returncode != 0:
        tail = pathlib.Path(log).read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(map(str, args))} exited {r.returncode}:\n{tail}")
    return pathlib.Path(log).read_text(errors="replace")


def fresh(out, *inputs):
    """True when `out` exists and is newer than every input."""
    return out.exists() and all(out.stat().st_mtime >= pathlib.Path(i).stat().st_mtime for i in inputs)


def make(out, inputs, build):
    """Builds `out` through out.tmp unless it is fresh; returns out."""
    out = pathlib.Path(out)
    if not fresh(out, *inputs):
        tmp = out.with_name(out.name + ".tmp")
        build(tmp)
        tmp.rename(out)
    return out


# --- files ---------------------------------------------------------------

def model_dir(tools, model):
    """A test model's folder: tests/data's, or the wide model, made once in the work folder with
    tools/make_random_model.py and the tiny models' tokenizer."""
    if (DATA / model).is_dir():
        return DATA / model
    out = tools.work / model
    script = ROOT / "tools" / "make_random_model.py"
    if not fresh(out / "model.safetensors", script):
        run([sys.executable, script, "--out", out, "--tokenizer-from", DATA / "ernie-tiny", *WIDE_SHAPE],
            f"{out}.log")
    return out


def llama_convert(tools, model, outtype):
    src = model_dir(tools, model)
    out = tools.work / f"{model}.llama-convert.{outtype}.gguf"
    return make(out, [src / "model.safetensors"], lambda tmp: run(
        [tools.convert_python, tools.llama_src / "convert_hf_to_gguf.py", src, "--outtype", outtype,
         "--outfile", tmp], f"{out}.log"))


def tern_convert(tools, model, outtype):
    src = model_dir(tools, model)
    out = tools.work / f"{model}.tern-convert.{outtype}.gguf"
    return make(out, [src / "model.safetensors", tools.tern], lambda tmp: run(
        [tools.tern, "convert", "--model", src, "--outfile", tmp, "--outtype", outtype], f"{out}.log"))


def llama_quantize(tools, model, qtype):
    base = llama_convert(tools, model, "bf16")
    out = tools.work / f"{model}.llama-quantize.{qtype}.gguf"
    return make(out, [base], lambda tmp: run(
        [tools.llama("llama-quantize"), base, tmp, qtype, tools.threads], f"{out}.log"))


def tern_quantize(tools, model, qtype):
    """tern quantize on the same input llama-quantize gets: llama.cpp's bf16 file."""
    base = llama_convert(tools, model, "bf16")
    out = tools.work / f"{model}.tern-quantize.{qtype}.gguf"
    return make(out, [base, tools.tern], lambda tmp: run(
        [tools.tern, "quantize", base, tmp, qtype.lower()], f"{out}.log"))


# The files each tool writes, by kind: (who wrote it, how, type).
def file_kinds():
    kinds = [("llama.cpp", "convert", t) for t in CONVERT_TYPES] + [("tern", "convert", t) for t in CONVERT_TYPES]
    kinds += [("llama.cpp", "quantize", q) for q in QUANT_TYPES] + [("tern", "quantize", q) for q in QUANT_TYPES]
    return kinds


def make_file(tools, model, writer, how, qtype):
    fn = {("llama.cpp", "convert"): llama_convert, ("tern", "convert"): tern_convert,
          ("llama.cpp", "quantize"): llama_quantize, ("tern", "quantize"): tern_quantize}[(writer, how)]
    return fn(tools, model, qtype)


# --- greedy tokens ---------------------------------------------------------

def golden(model):
    """The model's golden.json; the wide model, with the tiny models' tokenizer, takes ernie-tiny's prompts."""
    folder = DATA / model if (DATA / model).is_dir() else DATA / "ernie-tiny"
    return json.loads((folder / "golden.json").read_text(encoding="utf-8"))


def tern_greedy(tools, path, prompt):
    """tern generate --json on `path`: (prompt ids, greedy ids, top-2 margin at each generated position)."""
    args = [tools.tern, "generate", "--model", path, "--prompt", prompt["text"], "--max-tokens", GREEDY_TOKENS,
            "--temperature", 0, "--ignore-eos", "--json", "--logprobs", 2, "--device", "cpu",
            "--threads", tools.threads]
    r = subprocess.run([str(a) for a in args], capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"tern generate on {path} exited {r.returncode}: {r.stderr.decode()[-2000:]}")
    j = json.loads(r.stdout)
    margins = [e["top"][0][1] - e["top"][1][1] for e in j["logprobs"]]
    return j["prompt_token_ids"], j["token_ids"], margins


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama-server on one file, one slot, on a free port; stopped with SIGTERM."""

    def __init__(self, tools, path, timeout=120.0):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [tools.llama("llama-server"), "-m", str(path), "--host", "127.0.0.1", "--port", str(self.port),
             "-t", tools.threads, "-c", "512", "-np", "1", "--no-webui"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.proc.returncode} on {path}:\n{self.logs()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llama-server never became healthy on {path}:\n{self.logs()[-3000:]}")
            time.sleep(0.1)

    def logs(self):
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def greedy(self, ids):
        """Greedy continuation of the token ids (temperature 0, EOS ignored, no prompt cache)."""
        body = {"prompt": ids, "n_predict": GREEDY_TOKENS, "temperature": 0, "top_k": 1, "ignore_eos": True,
                "cache_prompt": False, "return_tokens": True, "seed": 0}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())["tokens"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


# </s> and <|end_of_sentence|>: llama-server's ignore_eos sets their logits to
# -inf (its logit_bias_eog), vLLM's and tern's leave them be, so a walk ends
# where tern picks one.
END_IDS = (2, 4)


def compare_greedy(tern_ids, llama_ids, margins, threshold):
    """Walks the two greedy sequences while they agree: (positions equal, position where they part at a
    margin below the threshold or None, position where they part at a clear margin or None, position
    where tern picked an end token or None). Equal tokens at low margins count as equal; after the
    sequences part their contexts differ, so the walk ends."""
    for i, (a, b) in enumerate(zip(tern_ids, llama_ids)):
        if a in END_IDS:
            return i, None, None, i
        if a != b:
            return (i, i, None, None) if margins[i] < threshold else (i, None, i, None)
    return min(len(tern_ids), len(llama_ids)), None, None, None


# --- bytes and metadata --------------------------------------------------

def read_gguf(path):
    r = GGUFReader(path)
    keys = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        v = f.contents()
        keys[name] = (tuple(int(t) for t in f.types), v)
    tensors = {t.name: (t.tensor_type.name, tuple(int(x) for x in t.shape), bytes(np.asarray(t.data).tobytes()))
               for t in r.tensors}
    return list(keys), keys, tensors


def compare_files(a, b):
    """Keys (order, types, values) and tensors (names, types, shapes, bytes) of two GGUF files."""
    order_a, keys_a, ten_a = read_gguf(a)
    order_b, keys_b, ten_b = read_gguf(b)
    differing_keys = sorted(k for k in set(keys_a) | set(keys_b) if keys_a.get(k) != keys_b.get(k))
    common = sorted(set(ten_a) & set(ten_b))
    same_type = [n for n in common if ten_a[n][:2] == ten_b[n][:2]]
    same_bytes = [n for n in same_type if ten_a[n][2] == ten_b[n][2]]
    types_differ = {n: (ten_a[n][0], ten_b[n][0]) for n in common if ten_a[n][0] != ten_b[n][0]}
    bytes_differ = [n for n in same_type if ten_a[n][2] != ten_b[n][2]]
    return {
        "key_order_equal": order_a == order_b,
        "keys_differing": differing_keys,
        "tensors": len(common),
        "tensor_names_equal": set(ten_a) == set(ten_b),
        "same_type_and_shape": len(same_type),
        "same_bytes": len(same_bytes),
        "types_differ": types_differ,
        "bytes_differ": bytes_differ,
        "bytes_differ_types": sorted({ten_a[n][0] for n in bytes_differ}),
    }


# --- KL divergence ---------------------------------------------------------

def eval_text(model):
    """The golden texts without special tokens (llama-perplexity reads them as plain text), one a line."""
    g = golden(model)
    texts = [p["text"] for p in g["prompts"] if not p["chat"]]
    texts += [t["text"] for t in g["tokenizer"]
              if t["text"].strip() and "<|" not in t["text"] and "<mask" not in t["text"]]
    return "\n".join(texts) + "\n"


def eval_text_file(tools, model):
    path = tools.work / f"{model}.eval.txt"
    text = eval_text(model)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def tern_kl_base(tools, model, base_gguf):
    text = eval_text_file(tools, model)
    out = tools.work / f"{model}.tern.kl-base.bin"
    make(out, [base_gguf, text, tools.tern], lambda tmp: run(
        [tools.tern, "perplexity", "--model", base_gguf, "-f", text, "-c", KL_CTX, "--kl-divergence-base", tmp,
         "--threads", tools.threads, "--device", "cpu"], f"{out}.log"))
    return out


def llama_kl_base(tools, model, base_gguf):
    text = eval_text_file(tools, model)
    out = tools.work / f"{model}.llama.kl-base.bin"
    make(out, [base_gguf, text], lambda tmp: run(
        [tools.llama("llama-perplexity"), "-m", base_gguf, "-f", text, "-c", KL_CTX, "-b", KL_CTX,
         "--kl-divergence-base", tmp, "-t", tools.threads], f"{out}.log"))
    return out


def tern_kl(tools, gguf, base):
    out = tools.work / f"{pathlib.Path(gguf).stem}.tern-kl.{pathlib.Path(base).stem}.json"
    if not fresh(out, gguf, base, tools.tern):
        run([tools.tern, "perplexity", "--model", gguf, "--kl-divergence-base", base, "--kl-divergence",
             "--json-out", out, "--threads", tools.threads, "--device", "cpu"], f"{out}.log")
    j = json.loads(out.read_text())
    return {"kld": j["kld_mean"], "kld_error": j["kld_error"], "same_top": j["same_top"],
            "positions": j["positions"], "ppl": j["ppl"]}


LLAMA_KL_TRIES = 12
KLD_LINE = re.compile(r"Mean\s+KLD:\s+([-0-9.e+]+)\s+±\s+([-0-9.e+]+)")
SAME_TOP = re.compile(r"Same top p:\s+([0-9.]+)\s+±")
PPL_Q = re.compile(r"Mean PPL\(Q\)\s+:\s+([0-9.]+)")


def llama_kl(tools, gguf, base):
    out = tools.work / f"{pathlib.Path(gguf).stem}.llama-kl.{pathlib.Path(base).stem}.log"
    # llama.cpp's logger is a background thread that the process does not wait
    # for at exit (common_log_main() leaks it on purpose, llama.cpp issue
    # 22142), so the last lines, the summary among them, are lost now and then
    # (up to half the runs on a busy machine): such a run is repeated.
    for _ in range(LLAMA_KL_TRIES):
        if not fresh(out, gguf, base) or not whole_summary(out.read_text(errors="replace")):
            run([tools.llama("llama-perplexity"), "-m", gguf, "--kl-divergence-base", base, "--kl-divergence",
                 "-c", KL_CTX, "-b", KL_CTX, "-t", tools.threads], f"{out}.tmp")
            pathlib.Path(f"{out}.tmp").rename(out)
    text = out.read_text(errors="replace")
    if not whole_summary(text):
        raise RuntimeError(f"no whole summary in {out} after {LLAMA_KL_TRIES} runs")
    m, same, ppl = KLD_LINE.search(text), SAME_TOP.search(text), PPL_Q.search(text)
    return {"kld": float(m.group(1)), "kld_error": float(m.group(2)), "same_top": float(same.group(1)) / 100,
            "ppl": float(ppl.group(1))}


def whole_summary(text):
    """llama-perplexity's summary has its PPL, mean KLD and (last) same-top lines."""
    return all(r.search(text) for r in (KLD_LINE, SAME_TOP, PPL_Q))


def base_tokens(path):
    """The evaluation tokens of a llama-perplexity log-probability file."""
    raw = pathlib.Path(path).read_bytes()
    n_ctx, n_vocab, n_chunk = np.frombuffer(raw[8:20], dtype=np.int32)
    return np.frombuffer(raw[20:20 + 4 * n_ctx * n_chunk], dtype=np.int32).tolist()
