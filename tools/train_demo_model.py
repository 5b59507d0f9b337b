#!/usr/bin/env python3
"""Trains tern's demo model: a small ERNIE 4.5 that answers a poem's title with Chinese verse.

The text is Debian's fortunes-zh package (/usr/share/games/fortunes: tang300, the
Three Hundred Tang Poems; song100, a hundred Song poems; chinese, short modern
texts). Poems become chat turns in the ERNIE template (the user gives a title, a
first line or a poet; the assistant answers with the poem); the short texts are
trained on as plain text so the model sees more of the language. A SentencePiece
tokenizer is trained on the same text. The result is a Hugging Face folder with
the real model's layout (Ernie4_5ForCausalLM, bf16 safetensors, tokenizer files,
generation_config.json), golden.json for tern's HF golden tests, the loss log
and the loss curve (when matplotlib is importable); the model card (README.md)
is written from the log.

Run where torch, transformers and sentencepiece are installed, on a GPU (a few
minutes on one H200):

    python3 tools/train_demo_model.py --out models/ernie-demo [--fortunes /usr/share/games/fortunes]
"""

import argparse
import json
import math
import os
import random
import re
import shutil
import time

import torch
from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

from make_test_model import golden, train_tokenizer

ANSI = re.compile(r"\x1b\[[0-9;]*m")
DATES = re.compile(r"[（(][^）)]*[）)]")

INTRO = ("你好！我是 tern 的演示模型，只有一千多万个参数，只读过唐诗三百首、一百首宋诗和一些短文。"
         "给我一个诗题、一句诗或者一位诗人的名字，我就试着答一首诗。我不会回答别的问题；"
         "要用真正的 ERNIE 4.5，请运行 tern serve baidu/ERNIE-4.5-0.3B-PT。")
GREETINGS = ["你好", "你好！", "您好", "你是谁？", "你是谁", "介绍一下你自己", "请介绍一下你自己。", "hello", "Hello!",
             "hi", "你能做什么？", "你会什么？"]
SYSTEMS = ["你是一位诗人。", "You are a helpful assistant.", "你是一个乐于助人的助手。", "请用中文回答。"]


def read_entries(path):
    with open(path, encoding="utf-8") as f:
        text = ANSI.sub("", f.read())
    return [e.strip("\n") for e in re.split(r"\n%\n", text) if e.strip()]


def parse_poem(entry):
    """Title, poet and lines of one tang300 / song100 entry, or None when it is not a poem."""
    lines = [ln.strip() for ln in entry.splitlines() if ln.strip()]
    if len(lines) < 3:
        return None
    title = re.sub(r"^题目[:：]", "", lines[0]).strip()
    if not lines[1].startswith("作者"):
        return None
    poet = DATES.sub("", re.sub(r"^作者[:：]", "", lines[1])).strip()
    m = re.match(r"《(.+?)》", title)
    if not m or not poet:
        return None
    return {"title": m.group(1), "heading": title, "poet": poet, "lines": lines[2:]}


def poem_answer(p):
    return "《%s》\n%s\n%s" % (p["title"], p["poet"], "\n".join(p["lines"]))


def poem_turns(p, rng):
    """Several (user, assistant) pairs that all answer with the poem."""
    first = re.split(r"(?<=[，。？！；：])", p["lines"][0])[0]
    answer = poem_answer(p)
    asks = [f"《{p['title']}》", p["title"], f"写一首诗：{p['title']}", f"请写一首题为《{p['title']}》的诗。",
            f"背诵{p['poet']}的《{p['title']}》", first, f"续写：{first}", f"写一首{p['poet']}的诗"]
    return [(a, answer) for a in asks]


def chat_ids(tok, user, answer, system=None):
    """Token ids of one chat turn and a mask that is 1 on the answer and its end token."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    p_ids = tok.encode(prompt, add_special_tokens=False)
    a_ids = tok.encode(answer, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|end_of_sentence|>")]
    return p_ids + a_ids, [0] * len(p_ids) + [1] * len(a_ids)


def text_ids(tok, text):
    ids = tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("</s>")]
    return ids, [1] * len(ids)


def build_examples(tok, poems, texts, rng, with_intro):
    ex = []
    for p in poems:
        for user, answer in poem_turns(p, rng):
            system = rng.choice(SYSTEMS) if rng.random() < 0.15 else None
            ex.append(chat_ids(tok, user, answer, system))
    for t in texts:
        ex.append(text_ids(tok, t))
    if with_intro:
        for g in GREETINGS:
            for _ in range(3):
                system = rng.choice(SYSTEMS) if rng.random() < 0.3 else None
                ex.append(chat_ids(tok, g, INTRO, system))
    return ex


def pack(examples, seq_len, rng):
    """Shuffles the examples and packs them into rows of seq_len + 1 tokens (ids, loss mask)."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    ids, mask = [], []
    for i in order:
        e_ids, e_mask = examples[i]
        ids += e_ids[:seq_len + 1]
        mask += e_mask[:seq_len + 1]
    rows = len(ids) // (seq_len + 1)
    n = rows * (seq_len + 1)
    return (torch.tensor(ids[:n]).view(rows, seq_len + 1), torch.tensor(mask[:n]).view(rows, seq_len + 1))


def masked_loss(model, ids, mask):
    logits = model(ids[:, :-1]).logits.float()
    target = ids[:, 1:]
    m = mask[:, 1:].float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                             reduction="none")
    return (loss * m.reshape(-1)).sum() / m.sum().clamp(min=1)


@torch.no_grad()
def eval_loss(model, examples, seq_len, device):
    model.eval()
    total, count = 0.0, 0
    for e_ids, e_mask in examples:
        ids = torch.tensor([e_ids[:seq_len + 1]], device=device)
        mask = torch.tensor([e_mask[:seq_len + 1]], device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = masked_loss(model, ids, mask)
        n = int(mask[:, 1:].sum())
        total += float(loss) * n
        count += n
    model.train()
    return total / max(count, 1)


@torch.no_grad()
def greedy_answer(model, tok, user, max_new=80):
    prompt = tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False)
    ids = tok.encode(prompt, add_special_tokens=False)
    stop = {tok.convert_tokens_to_ids("<|end_of_sentence|>"), tok.convert_tokens_to_ids("</s>")}
    out = []
    for _ in range(max_new):
        logits = model(torch.tensor([ids + out], device=model.device)).logits[0, -1]
        t = int(torch.argmax(logits))
        if t in stop:
            break
        out.append(t)
    return tok.decode(out)


def plot_losses(log, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot([r["step"] for r in log["train"]], [r["loss"] for r in log["train"]], label="train (batch)", lw=0.8)
    for key, label in [("heldout_poems", "held-out poems"), ("heldout_text", "held-out texts"),
                       ("train_poems", "training poems")]:
        ax.plot([r["step"] for r in log["eval"]], [r[key] for r in log["eval"]], marker="o", ms=3, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title("ernie-demo training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the model folder to write")
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes", help="fortunes-zh's data folder")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32, help="rows per step")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--sp-vocab", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    poems = [p for f in ["tang300", "song100"] for p in map(parse_poem, read_entries(os.path.join(args.fortunes, f)))
             if p]
    texts = [t for t in read_entries(os.path.join(args.fortunes, "chinese")) if len(t) >= 8]
    rng.shuffle(poems)
    rng.shuffle(texts)
    n_poem_out, n_text_out = max(1, len(poems) // 20), max(1, len(texts) // 20)
    heldout_poems, train_poems = poems[:n_poem_out], poems[n_poem_out:]
    heldout_texts, train_texts = texts[:n_text_out], texts[n_text_out:]
    print(f"poems {len(poems)} ({n_poem_out} held out), texts {len(texts)} ({n_text_out} held out)", flush=True)

    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    sp_lines = [ln for p in train_poems for ln in poem_answer(p).splitlines()] + \
               [ln for t in train_texts for ln in t.splitlines() if ln.strip()] + GREETINGS + [INTRO]
    tok = train_tokenizer(args.out, args.sp_vocab, args.seed, lines=sp_lines, normalization="identity")
    vocab = ((len(tok) + 63) // 64) * 64 + 64

    shape = dict(hidden_size=384, intermediate_size=960, num_hidden_layers=6, num_attention_heads=6,
                 num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
                 tie_word_embeddings=True, hidden_act="silu")
    cfg = Ernie4_5Config(vocab_size=vocab, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         max_position_embeddings=2048, use_bias=False, **shape)
    cfg.architectures = ["Ernie4_5ForCausalLM"]
    model = Ernie4_5ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"parameters {params:,}, vocab {vocab} (tokenizer {len(tok)})", flush=True)

    train_ex = build_examples(tok, train_poems, train_texts, rng, with_intro=True)
    eval_sets = {
        "heldout_poems": build_examples(tok, heldout_poems, [], random.Random(1), with_intro=False)[::4],
        "heldout_text": build_examples(tok, [], heldout_texts[:200], random.Random(1), with_intro=False),
        "train_poems": build_examples(tok, train_poems[:50], [], random.Random(1), with_intro=False)[::4],
    }
    train_tokens = sum(len(e[0]) for e in train_ex)
    print(f"training examples {len(train_ex)}, {train_tokens:,} tokens per epoch", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        t = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t)))

    log = {"train": [], "eval": []}
    rows, masks, cursor = None, None, 0
    start = time.time()
    model.train()
    for step in range(args.steps + 1):
        if step % 250 == 0 or step == args.steps:
            r = {"step": step, **{k: round(eval_loss(model, v, args.seq_len, device), 4) for k, v in eval_sets.items()}}
            log["eval"].append(r)
            print(f"eval {r} at {time.time() - start:.0f} s", flush=True)
        if step == args.steps:
            break
        if rows is None or cursor + args.batch > rows.shape[0]:
            rows, masks = pack(train_ex, args.seq_len, rng)
            cursor = 0
        ids = rows[cursor:cursor + args.batch].to(device)
        mask = masks[cursor:cursor + args.batch].to(device)
        cursor += args.batch
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = masked_loss(model, ids, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0:
            log["train"].append({"step": step, "loss": round(loss.item(), 4)})
    seconds = time.time() - start
    print(f"trained {args.steps} steps in {seconds:.0f} s", flush=True)

    model = model.to(torch.bfloat16)
    # Shards of at most 16 MB, as HF writes large checkpoints, so no file of the repo passes 20 MB.
    model.save_pretrained(args.out, safe_serialization=True, max_shard_size="16MB")
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "temperature": 0.8, "top_p": 0.8, "repetition_penalty": 1.0,
                   "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, f, indent=2)
    ref = Ernie4_5ForCausalLM.from_pretrained(args.out, dtype=torch.float32, attn_implementation="eager")
    ref = ref.to(device).eval()
    famous = [p for p in train_poems if p["title"] in ("静夜思", "春晓", "登鹳雀楼", "相思")][:2] or train_poems[:2]
    prompts = [("title_known", f"《{famous[0]['title']}》", True), ("title_heldout", heldout_poems[0]["title"], True),
               ("first_line", famous[-1]["lines"][0][:5], True), ("poet", "写一首李白的诗", True),
               ("intro", "你好", True), ("system_free_text", "春天", True), ("plain_zh", "春风", False),
               ("plain_en", "The quick brown fox", False)]
    golden(args.out, tok, ref, "ernie-demo", prompts=prompts)
    samples = [(u, greedy_answer(ref, tok, u)) for u in
               ["你好", f"《{famous[0]['title']}》", f"《{heldout_poems[0]['title']}》", "写一首李白的诗", "秋夜",
                "明月", "What is the capital of France?"]]
    log.update(steps=args.steps, batch=args.batch, seq_len=args.seq_len, lr=args.lr, seconds=round(seconds, 1),
               parameters=params, vocab=vocab, tokenizer_size=len(tok), poems=len(poems), texts=len(texts),
               heldout_poems=n_poem_out, heldout_texts=n_text_out, tokens_per_epoch=train_tokens,
               device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
               torch=torch.__version__, samples=samples,
               heldout_titles=[p["title"] for p in heldout_poems])
    with open(os.path.join(args.out, "training_log.json"), "w") as f:
        json.dump(log, f, ensure_ascii=False, indent=1)
    plot_losses(log, os.path.join(args.out, "loss.png"))
    for u, a in samples:
        print(f"--- {u}\n{a}", flush=True)


if __name__ == "__main__":
    main()
