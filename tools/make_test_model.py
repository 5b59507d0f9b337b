#!/usr/bin/env python3
"""Builds tiny ERNIE 4.5 test models and their golden data with HF transformers.

Each model folder has the layout of the real baidu/ERNIE-4.5-0.3B-PT repo:
config.json, model.safetensors (bf16), generation_config.json, a SentencePiece
tokenizer.model trained here (BPE, byte fallback, the ERNIE special tokens) and
the tokenizer files transformers writes for it. golden.json holds what the C++
side must reproduce: token ids from AutoTokenizer, the rendered chat template,
last-position logits computed in fp32 by Ernie4_5ForCausalLM, and greedy
continuations. Run where torch, transformers and sentencepiece are installed:

    python3 tools/make_test_model.py --out tests/data
"""

import argparse
import io
import json
import os
import random
import shutil

import sentencepiece as spm
import torch
from transformers import AutoTokenizer, Ernie4_5Config, Ernie4_5ForCausalLM

CHAT_TEMPLATE = (
    "{%- if not add_generation_prompt is defined -%}\n    {%- set add_generation_prompt = true -%}\n{%- endif -%}\n"
    "{%- if not cls_token is defined -%}\n    {%- set cls_token = \"<|begin_of_sentence|>\" -%}\n{%- endif -%}\n"
    "{%- if not sep_token is defined -%}\n    {%- set sep_token = \"<|end_of_sentence|>\" -%}\n{%- endif -%}\n"
    "{{- cls_token -}}\n{%- for message in messages -%}\n"
    "    {%- if message[\"role\"] == \"user\" -%}\n        {{- \"User: \" + message[\"content\"] + \"\\n\" -}}\n"
    "    {%- elif message[\"role\"] == \"assistant\" -%}\n"
    "        {{- \"Assistant: \" + message[\"content\"] + sep_token -}}\n"
    "    {%- elif message[\"role\"] == \"system\" -%}\n        {{- message[\"content\"] + \"\\n\" -}}\n"
    "    {%- endif -%}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{- \"Assistant: \" -}}\n{%- endif -%}"
)

# Special pieces the real vocabulary carries after <unk>, <s>, </s>.
SPECIAL_PIECES = ["<|begin_of_sentence|>", "<|end_of_sentence|>", "<|endoftext|>", "<mask:0>", "<mask:1>",
                  "<mask:2>", "<mask:3>", "<|IMAGE_PLACEHOLDER|>", "<think>", "</think>"]
# Added past the SentencePiece vocabulary, as the HF conversion of ERNIE does.
EXTRA_ADDED = ["<mask:4>", "<mask:5>", "<mask:6>", "<mask:7>"]

ZH = ["你好，世界！", "今天天气很好，我们去公园散步吧。", "人工智能正在改变我们的生活方式。", "请介绍一下你自己。",
      "北京是中国的首都，有着悠久的历史。", "我喜欢读书、写字和听音乐。", "这个模型可以回答中文和英文的问题。",
      "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。", "机器学习需要大量的数据和计算资源。",
      "请用三句话总结这篇文章的主要内容。", "你今天过得怎么样？", "谢谢你的帮助，非常感谢！"]
EN = ["Hello, world!", "The quick brown fox jumps over the lazy dog.", "Large language models generate text one token at a time.",
      "Please summarize the following article in three sentences.", "What is the capital of France?",
      "I would like a cup of coffee, please.", "Machine learning needs data and compute.",
      "def add(a, b):\n    return a + b\n", "for i in range(10):\n        print(i)\n", "The year 2025 had 365 days.",
      "Numbers like 3.14159 and 2.71828 are famous constants.", "  leading spaces and   runs   of spaces  "]


def corpus_lines(seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(3000):
        parts = [rng.choice(ZH + EN) for _ in range(rng.randint(1, 3))]
        lines.append(rng.choice([" ", "", "\n"]).join(parts))
    return lines


def train_tokenizer(folder, vocab_size, seed, lines=None, normalization="nmt_nfkc"):
    """Trains tokenizer.model on `lines` (the mixed test corpus when None) and writes the HF tokenizer files."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines(seed) if lines is None else lines), model_writer=model,
        model_type="bpe", vocab_size=vocab_size, byte_fallback=True, character_coverage=0.9995, split_digits=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, user_defined_symbols=SPECIAL_PIECES,
        # The real model keeps SentencePiece's default normalizer; HF ignores it. Keeping it here
        # makes the tests catch a tokenizer that trusts SentencePiece's normalization.
        normalization_rule_name=normalization, add_dummy_prefix=True, remove_extra_whitespaces=True,
        allow_whitespace_only_pieces=True, num_threads=4, minloglevel=2)
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    # Tokenizer files as the real repo ships them; AutoTokenizer converts tokenizer.model itself.
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    sp_size = sp.get_piece_size()
    added = {t: sp_size + i for i, t in enumerate(EXTRA_ADDED)}
    decoder = {}
    for piece in ["<unk>", "<s>", "</s>"] + SPECIAL_PIECES:
        decoder[str(sp.piece_to_id(piece))] = piece
    decoder.update({str(i): t for t, i in added.items()})
    config = {
        "add_bos_token": False, "add_eos_token": False, "add_prefix_space": False, "legacy": True,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>",
        "cls_token": "<|begin_of_sentence|>", "sep_token": "<|end_of_sentence|>", "mask_token": "<mask:1>",
        "clean_up_tokenization_spaces": False, "model_max_length": 131072, "tokenizer_class": "LlamaTokenizer",
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {i: {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                     "single_word": False, "special": True} for i, c in decoder.items()},
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
        json.dump({k: config[k] for k in ["bos_token", "eos_token", "unk_token", "pad_token", "cls_token",
                                          "sep_token", "mask_token"]}, f, indent=2)
    with open(os.path.join(folder, "added_tokens.json"), "w") as f:
        json.dump(added, f, indent=2)
    tok = AutoTokenizer.from_pretrained(folder)
    assert len(tok) == sp_size + len(EXTRA_ADDED), (len(tok), sp_size)
    assert tok.convert_ids_to_tokens(tok.encode("你好", add_special_tokens=False)), "tokenizer lost its vocabulary"
    return AutoTokenizer.from_pretrained(folder)


def build_model(folder, shape, vocab_size, seed):
    torch.manual_seed(seed)
    cfg = Ernie4_5Config(vocab_size=vocab_size, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         max_position_embeddings=4096, use_bias=False, **shape)
    cfg.architectures = ["Ernie4_5ForCausalLM"]
    model = Ernie4_5ForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))  # exercise the norm weights
            else:
                p.copy_(torch.randn_like(p) * (0.6 if "embed" in name or "lm_head" in name else 0.15))
    model = model.to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "temperature": 0.8, "top_p": 0.8, "repetition_penalty": 1.0,
                   "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, f, indent=2)
    ref = Ernie4_5ForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    return ref.eval()


TOKENIZER_TEXTS = ZH + EN + [
    "", " ", "  ", "a", " a", "a ", "a  b", "\n", "\n\n", "\t", "line1\nline2\n\nline4", "  two leading", "trailing  ",
    "mixed 中文 and English 混合", "emoji 😀🎉 and 你好👍", "rare 𝄞 𠀀 ꙮ characters", "ＦＵＬＬ　ＷＩＤＴＨ　１２３",
    "café naïve résumé", "<|begin_of_sentence|>User: hi\nAssistant: ", "x<|end_of_sentence|>y",
    " <|end_of_sentence|> ", "<mask:5>text<mask:6>", "<|begin_of_sentence|><|end_of_sentence|>",
    "User:你好\nAssistant:", "a\u00a0b", "tab\tseparated\tvalues", "1234567890", "Ünïcödé",
]

CHAT_CASES = [
    {"messages": [{"role": "user", "content": "你好"}], "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "SYS"}, {"role": "user", "content": "U"},
                  {"role": "assistant", "content": "A"}], "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
                  {"role": "user", "content": "And 3+3?"}], "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "dropped"}],
     "add_generation_prompt": False},
]

PROMPTS = [
    ("zh", "你好", False), ("en", "The quick brown fox", False), ("mixed", "今天 weather 很好 and 我们", False),
    ("emoji", "I feel 😀 today 🎉", False),
    ("long", " ".join(ZH[:6] + EN[:6]) * 2, False),
    ("chat_zh", "请介绍一下你自己。", True), ("chat_en", "What is the capital of France?", True),
]


@torch.no_grad()
def greedy(model, ids, steps):
    out = list(ids)
    for _ in range(steps):
        logits = model(torch.tensor([out], device=model.device)).logits[0, -1]
        out.append(int(torch.argmax(logits)))
    return out[len(ids):]


@torch.no_grad()
def golden(folder, tok, model, cfg_name, prompts=None):
    g = {"model": cfg_name, "tokenizer": [], "chat": [], "prompts": []}
    prompts = PROMPTS if prompts is None else prompts
    for text in TOKENIZER_TEXTS:
        ids = tok.encode(text, add_special_tokens=True)
        g["tokenizer"].append({"text": text, "ids": ids,
                               "decoded": tok.decode(ids, skip_special_tokens=False),
                               "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    for case in CHAT_CASES:
        rendered = tok.apply_chat_template(case["messages"], add_generation_prompt=case["add_generation_prompt"],
                                           tokenize=False)
        g["chat"].append(dict(case, rendered=rendered, ids=tok.encode(rendered, add_special_tokens=False)))
    for name, text, chat in prompts:
        if chat:
            text = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                           tokenize=False)
        ids = tok.encode(text, add_special_tokens=False)
        logits = model(torch.tensor([ids], device=model.device)).logits[0].float()
        last = logits[-1]
        top2 = torch.topk(last, 2).values
        g["prompts"].append({"name": name, "text": text, "chat": chat, "ids": ids,
                             "last_logits": [round(float(x), 6) for x in last],
                             "first_logits": [round(float(x), 6) for x in logits[0]],
                             "top2_margin": float(top2[0] - top2[1]),
                             "greedy": greedy(model, ids, 20)})
    with open(os.path.join(folder, "golden.json"), "w") as f:
        json.dump(g, f, ensure_ascii=False, indent=1)


SHAPES = {
    # Like the real model: q width (16 x 8 = 128) != hidden (64), 8 q heads per kv head, tied head.
    "ernie-tiny": dict(hidden_size=64, intermediate_size=192, num_hidden_layers=3, num_attention_heads=16,
                       num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5, rope_theta=500000.0,
                       tie_word_embeddings=True, hidden_act="silu"),
    # Untied lm_head, other rope_theta and eps, 2 q heads per kv head.
    "ernie-tiny-untied": dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0,
                              tie_word_embeddings=False, hidden_act="silu"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write the model folders into")
    ap.add_argument("--sp-vocab", type=int, default=1200)
    args = ap.parse_args()
    for i, (name, shape) in enumerate(SHAPES.items()):
        folder = os.path.join(args.out, name)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        tok = train_tokenizer(folder, args.sp_vocab, seed=1234)  # same tokenizer for every shape
        vocab = ((len(tok) + 63) // 64) * 64 + 64  # padded past the tokenizer, like the real model
        model = build_model(folder, shape, vocab, seed=42 + i)
        golden(folder, tok, model, name)
        import transformers
        print("transformers", transformers.__version__, "torch", torch.__version__, type(tok).__name__)
        for t in ["你好", "a  b", " x", "<|end_of_sentence|>x", "𝄞"]:
            ids = tok.encode(t, add_special_tokens=True)
            print(repr(t), ids, tok.convert_ids_to_tokens(ids), repr(tok.decode(ids)))
        print(name, "vocab", vocab, "tokenizer", len(tok), "files", sorted(os.listdir(folder)))


if __name__ == "__main__":
    main()
