#!/usr/bin/env python3
"""Builds the tokenizer test fixture in tests/data/tokenizer-fixture/.

Trains a small BPE SentencePiece model (byte fallback, ERNIE special pieces)
with the Debian `spm_train` CLI on a mixed Chinese/English/code corpus written
below, then writes a tokenizer_config.json laid out like the real ERNIE 4.5
one. Standard library only; run from the repository root:

    python3 tools/make_tokenizer_fixture.py [--out tests/data/tokenizer-fixture]
"""

import argparse
import json
import os
import random
import subprocess
import tempfile

# ERNIE's special pieces, stored in the SentencePiece vocabulary as
# user-defined symbols right after <unk>, <s>, </s>.
SPECIAL_PIECES = [
    "<|begin_of_sentence|>", "<|end_of_sentence|>", "<|endoftext|>", "<mask:0>", "<mask:1>", "<mask:2>",
    "<mask:3>", "<|IMAGE_PLACEHOLDER|>", "<think>", "</think>",
]

# The ERNIE 4.5 chat template (MODEL.md, "Chat template").
CHAT_TEMPLATE = (
    "{%- if not add_generation_prompt is defined -%}{%- set add_generation_prompt = true -%}{%- endif -%}\n"
    "{%- if not cls_token is defined -%}{%- set cls_token = \"<|begin_of_sentence|>\" -%}{%- endif -%}\n"
    "{%- if not sep_token is defined -%}{%- set sep_token = \"<|end_of_sentence|>\" -%}{%- endif -%}\n"
    "{{- cls_token -}}\n"
    "{%- for message in messages -%}\n"
    "{%- if message[\"role\"] == \"user\" -%}{{- \"User: \" + message[\"content\"] + \"\\n\" -}}\n"
    "{%- elif message[\"role\"] == \"assistant\" -%}{{- \"Assistant: \" + message[\"content\"] + sep_token -}}\n"
    "{%- elif message[\"role\"] == \"system\" -%}{{- message[\"content\"] + \"\\n\" -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- \"Assistant: \" -}}{%- endif -%}"
)

ZH = [
    "你好，世界！", "今天天气很好，我们一起去公园散步吧。", "人工智能正在改变我们的生活和工作方式。",
    "请简单介绍一下你自己。", "北京是中国的首都，有着三千多年的建城历史。", "我喜欢读书、写字、画画和听音乐。",
    "这个模型可以用中文和英文回答问题。", "机器学习需要大量的数据和计算资源。", "请用三句话总结这篇文章的主要内容。",
    "你今天过得怎么样？", "谢谢你的帮助，非常感谢！", "上海的夜景非常漂亮，黄浦江两岸灯火通明。",
    "学习编程最好的方法就是多写代码。", "长城是世界上最伟大的建筑之一。", "请把下面的句子翻译成英文。",
    "深度学习模型通常在图形处理器上训练。", "春天来了，花儿都开了，小鸟在树上唱歌。", "我们明天早上八点在学校门口见面。",
    "这本书讲的是一个关于友谊和勇气的故事。", "中文分词是自然语言处理中的一个基础问题。", "他每天坚持跑步五公里。",
    "服务器返回了一个错误，请稍后再试。", "数据库中一共有一千二百条记录。", "妈妈做的饭菜总是最好吃的。",
    "海内存知己，天涯若比邻。", "床前明月光，疑是地上霜。举头望明月，低头思故乡。", "文心大模型支持多种语言。",
    "请注意：输入的文本不能超过两千个字。", "杭州西湖的风景如画，吸引了很多游客。", "为什么天空是蓝色的？",
]
EN = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "Large language models generate text one token at a time.",
    "Please summarize the following article in three sentences.", "What is the capital of France?",
    "I would like a cup of coffee, please.", "Machine learning needs a lot of data and compute.",
    "The server returned an error; please try again later.",
    "She has been running five kilometers every day.",
    "Tokenizers split text into pieces that a model can read.",
    "In 2025 the team released version 4.5 of the model.",
    "Numbers like 3.14159 and 2.71828 are famous constants.", "The meeting starts at 9:30 AM on Monday.",
    "Don't forget to save your work before you close the editor!",
    "Streaming responses arrive as server-sent events.",
    "The cache keeps the keys and values of every previous token.", "Why is the sky blue during the day?",
    "Translate the following sentence into Chinese.", "It's a beautiful day, isn't it?",
    "Error: file not found (code 404).",
]
CODE = [
    "def add(a, b):\n    return a + b", "for i in range(10):\n        print(i)",
    "if x == 0:\n    pass\nelse:\n    x -= 1",
    "int main() {\n    printf(\"hello\\n\");\n    return 0;\n}",
    "    // two levels of indentation\n        value = 42;",
    "class Tokenizer:\n    def __init__(self, path):\n        self.path = path",
    "x = [1, 2, 3]    # trailing comment",
    "SELECT name,  age   FROM users  WHERE id = 7;", "\tif (ok) {\n\t\treturn true;\n\t}",
    "key:    value\nother:  thing",
    "|  col  |  col  |\n|-------|-------|", "    ", "        return None", "a  b   c    d     e",
    "std::vector<int> ids = {1, 2, 3};", "   leading spaces and   runs   of spaces   ",
]


def corpus_lines(seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(600):
        kind = rng.random()
        if kind < 0.35:
            parts = [rng.choice(ZH) for _ in range(rng.randint(1, 3))]
            sep = ""
        elif kind < 0.65:
            parts = [rng.choice(EN) for _ in range(rng.randint(1, 3))]
            sep = " "
        elif kind < 0.85:
            parts = [rng.choice(CODE) for _ in range(rng.randint(1, 2))]
            sep = "\n"
        else:
            parts = [rng.choice(ZH), rng.choice(EN), rng.choice(ZH)]
            sep = rng.choice([" ", "", "  "])
        # spm_train reads one sentence per line: newlines inside code become
        # separate lines, so "\n" stays a byte-fallback token like in HF tests.
        lines.extend(sep.join(parts).split("\n"))
    return lines


def train(out_dir, vocab_size, seed):
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(corpus_lines(seed)) + "\n")
        prefix = os.path.join(tmp, "tok")
        # Relative paths (run inside tmp): the TrainerSpec stores them, and a
        # random temp path would make every rebuild of the fixture differ.
        subprocess.run([
            "spm_train", "--input=corpus.txt", "--model_prefix=tok", "--model_type=bpe",
            f"--vocab_size={vocab_size}", "--byte_fallback=true", "--character_coverage=0.9995",
            "--split_digits=true", "--user_defined_symbols=" + ",".join(SPECIAL_PIECES), "--unk_id=0",
            "--bos_id=1", "--eos_id=2", "--pad_id=-1", "--normalization_rule_name=identity",
            "--add_dummy_prefix=false", "--remove_extra_whitespaces=false",
            "--allow_whitespace_only_pieces=true", "--num_threads=1", "--minloglevel=2",
        ], check=True, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        vocab = subprocess.run(["spm_export_vocab", f"--model={prefix}.model"], check=True,
                               capture_output=True, text=True).stdout
        with open(prefix + ".model", "rb") as f:
            model = f.read()
    with open(os.path.join(out_dir, "tokenizer.model"), "wb") as f:
        f.write(model)
    return [line.split("\t")[0] for line in vocab.splitlines()]


def write_config(out_dir, pieces):
    ids = {p: i for i, p in enumerate(pieces)}
    decoder = {}
    for piece in ["<unk>", "<s>", "</s>"] + SPECIAL_PIECES:
        decoder[str(ids[piece])] = {"content": piece, "lstrip": False, "normalized": False, "rstrip": False,
                                    "single_word": False, "special": True}
    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": "<s>",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "cls_token": "<|begin_of_sentence|>",
        "eos_token": "</s>",
        "legacy": True,
        "mask_token": "<mask:1>",
        "model_max_length": 131072,
        "pad_token": "<unk>",
        "sep_token": "<|end_of_sentence|>",
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/tokenizer-fixture")
    ap.add_argument("--vocab-size", type=int, default=1200)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pieces = train(args.out, args.vocab_size, seed=20250630)
    write_config(args.out, pieces)
    print(f"{args.out}: {len(pieces)} pieces, tokenizer.model "
          f"{os.path.getsize(os.path.join(args.out, 'tokenizer.model'))} bytes")


if __name__ == "__main__":
    main()
