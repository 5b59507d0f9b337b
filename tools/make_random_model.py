#!/usr/bin/env python3
"""Writes a full-size ERNIE-4.5-0.3B-shaped checkpoint with random bf16 weights.

The shapes, tensor names, config and tokenizer files are those of
baidu/ERNIE-4.5-0.3B-PT (MODEL.md); the weights are random, deterministic from
--seed. Benchmarks run on it, since every byte and FLOP is still exercised.
Needs numpy only; takes a few seconds. The copied SentencePiece model is
padded to the full vocabulary (bench/serving/sp_vocab.py says why) unless
--no-pad-tokenizer. --hidden, --intermediate, --heads, --kv-heads,
--head-dim, --vocab, --untied and --init-std make smaller models of other
shapes (tests/compat's wide model, whose rows split into K-quant blocks).

    python3 tools/make_random_model.py --out models/ernie-4.5-0.3b-random \
        --tokenizer-from tests/data/ernie-tiny
"""

import argparse
import json
import os
import shutil
import struct

import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "serving"))
import sp_vocab  # noqa: E402 -- bench/serving/sp_vocab.py

CONFIG = {
    "architectures": ["Ernie4_5ForCausalLM"], "model_type": "ernie4_5", "vocab_size": 103424,
    "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "max_position_embeddings": 131072, "use_bias": False, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "use_cache": True,
}
TOKENIZER_FILES = ["tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "tokenizer.json", "generation_config.json"]


def tensor_specs(c):
    h, i, q, kv = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"] * c["head_dim"], \
        c["num_key_value_heads"] * c["head_dim"]
    specs = [("model.embed_tokens.weight", (c["vocab_size"], h))]
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}."
        specs += [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (q, h)),
                  (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.v_proj.weight", (kv, h)),
                  (p + "self_attn.o_proj.weight", (h, q)), (p + "post_attention_layernorm.weight", (h,)),
                  (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                  (p + "mlp.down_proj.weight", (h, i))]
    specs.append(("model.norm.weight", (h,)))
    return specs


def random_bf16(rng, shape, is_norm, std=0.02):
    if is_norm:
        x = 1.0 + 0.05 * rng.standard_normal(shape, dtype=np.float32)
    else:
        x = std * rng.standard_normal(shape, dtype=np.float32)
    bits = x.view(np.uint32)
    # Round to nearest even, as torch does when casting to bfloat16.
    bits = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (bits >> np.uint32(16)).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-from", required=True, help="model folder whose tokenizer files are copied")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=None, help="override num_hidden_layers (smaller test models)")
    for flag, key in (("--hidden", "hidden_size"), ("--intermediate", "intermediate_size"),
                      ("--heads", "num_attention_heads"), ("--kv-heads", "num_key_value_heads"),
                      ("--head-dim", "head_dim"), ("--vocab", "vocab_size")):
        ap.add_argument(flag, type=int, dest=key, default=None, help=f"override {key}")
    ap.add_argument("--untied", action="store_true", help="a separate lm_head.weight (tie_word_embeddings false)")
    ap.add_argument("--init-std", type=float, default=0.02, help="standard deviation of the matrices' weights")
    ap.add_argument("--no-pad-tokenizer", dest="pad_tokenizer", action="store_false",
                    help="keep the copied tokenizer.model as is (most ids then decode to no text)")
    args = ap.parse_args()

    config = dict(CONFIG)
    if args.layers:
        config["num_hidden_layers"] = args.layers
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "vocab_size"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    config["tie_word_embeddings"] = not args.untied
    os.makedirs(args.out, exist_ok=True)
    specs = tensor_specs(config)
    if args.untied:
        specs.append(("lm_head.weight", (config["vocab_size"], config["hidden_size"])))
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in specs:
        size = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)
    rng = np.random.default_rng(args.seed)
    tmp = os.path.join(args.out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for name, shape in specs:
            f.write(random_bf16(rng, shape, name.endswith("norm.weight"), args.init_std).tobytes())
    os.replace(tmp, os.path.join(args.out, "model.safetensors"))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in TOKENIZER_FILES:
        src = os.path.join(args.tokenizer_from, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(args.out, name))
    if args.pad_tokenizer and os.path.exists(os.path.join(args.out, "tokenizer.model")):
        before, after = sp_vocab.pad_model_dir(args.out)
        print(f"tokenizer.model: {before} pieces padded to {after}")
    print(f"wrote {args.out}: {sum(int(np.prod(s)) for _, s in specs):,} parameters")


if __name__ == "__main__":
    main()
