#!/usr/bin/env python3
"""Writes int4 weight-only checkpoints of a Hugging Face ERNIE 4.5 folder in the
layouts people download: AutoAWQ's GEMM packing, GPTQ (sym or asym, v1 zero
points, optional act order) and compressed-tensors pack-quantized W4A16 (also with act order), each
with the quantization_config its loaders read.

The quantization is plain round-to-nearest per group of input channels (no
activation-aware scaling, no GPTQ error feedback: there is no calibration
data), so the files have the real layouts and the quality of RTN. With
--act-order, input channels are grouped in order of falling mean squared
weight, a stand-in for GPTQ's Hessian diagonal, and g_idx records the groups.

    python3 tools/quantize_awq.py --model tests/data/ernie-tiny --out /tmp/tiny-awq --format awq --group-size 32

The q/k/v/o and gate/up/down projections are quantized; the embedding, the
norms and (unless --lm-head) lm_head are copied as they are. numpy only.
"""

import argparse
import json
import pathlib
import shutil
import struct

import numpy as np

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # output column held by nibble n of an AWQ GEMM word
FLOAT_DTYPES = {"F32": np.float32, "F16": np.float16}


# ---- safetensors in and out (numpy has no bfloat16: BF16 travels as raw uint16)

def read_safetensors(path):
    """{name: (dtype string, shape, raw bytes)} in file order."""
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], list(info["shape"]), raw[8 + n + begin:8 + n + end])
    return out


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype string, shape, raw bytes)}, written in that order."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def to_f32(dtype, shape, data):
    if dtype == "BF16":
        bits = np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(data, dtype=FLOAT_DTYPES[dtype]).astype(np.float32).reshape(shape)


def bf16_bits(x):
    """float32 -> bfloat16 bit patterns, round to nearest even."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def tensor(dtype, array):
    return (dtype, list(array.shape), np.ascontiguousarray(array).tobytes())


# ---- round-to-nearest group quantization

def group_columns(n_in, width, w, act_order):
    """The input channels of each group, and g_idx (the group of each channel)."""
    order = np.argsort(-(w.astype(np.float64) ** 2).mean(axis=0), kind="stable") if act_order else np.arange(n_in)
    groups = [order[s:s + width] for s in range(0, n_in, width)]
    g_idx = np.empty(n_in, dtype=np.int32)
    for g, cols in enumerate(groups):
        g_idx[cols] = g
    return groups, g_idx


def quantize(w, width, sym, scale_round, act_order=False, min_zero=0):
    """w [out, in] -> (q uint8 [out, in] in 0..15, zero int [groups, out], scale float32 [groups, out], g_idx).

    sym: scale = 2 max|w| / 15, zero 8. asym: the range [min(w, 0), max(w, 0)] in 15 steps, zero =
    round(-min / scale), kept >= min_zero (GPTQ v1 cannot store a zero point of 0). scale_round maps
    scales to what the file stores (fp16 or bf16) before q is computed against them."""
    n_out, n_in = w.shape
    groups, g_idx = group_columns(n_in, width, w, act_order)
    q = np.zeros((n_out, n_in), dtype=np.uint8)
    zeros = np.zeros((len(groups), n_out), dtype=np.int64)
    scales = np.zeros((len(groups), n_out), dtype=np.float32)
    for g, cols in enumerate(groups):
        wg = w[:, cols]
        if sym:
            scale = 2 * np.abs(wg).max(axis=1) / 15
            zero = np.full(n_out, 8)
        else:
            lo, hi = np.minimum(wg.min(axis=1), 0), np.maximum(wg.max(axis=1), 0)
            scale = (hi - lo) / 15
        scale = scale_round(np.maximum(scale, 1e-5))
        if not sym:
            zero = np.clip(np.round(-lo / scale), min_zero, 15).astype(np.int64)
        q[:, cols] = np.clip(np.round(wg / scale[:, None]) + zero[:, None], 0, 15).astype(np.uint8)
        zeros[g], scales[g] = zero, scale
    return q, zeros, scales, g_idx


def dequantize(q, zeros, scales, g_idx):
    """(q - z) * s in float32, as a loader computes it: the reference for tern's int4 loaders."""
    return (q.astype(np.float32) - zeros[g_idx].T.astype(np.float32)) * scales[g_idx].T


def dequantized_tensor(q, zeros, scales, g_idx):
    """The layer as tern keeps it: its exact values (F32 here) where ggml Q4_0 / Q8_0 blocks hold them
    (every run of 32 inputs in one group, scales that fp16 holds), else rounded to bf16."""
    n_out, n_in = q.shape
    w = dequantize(q, zeros, scales, g_idx)
    blocks = n_in % 32 == 0 and (g_idx == np.repeat(g_idx[::32], 32)).all() and \
        (scales.astype(np.float16).astype(np.float32) == scales).all()
    return ("F32", [n_out, n_in], w.tobytes()) if blocks else ("BF16", [n_out, n_in], bf16_bits(w).tobytes())


def pack_nibbles(values, axis):
    """Packs 8 consecutive 4-bit values along `axis` (whose length is a multiple of 8) into int32, the
    first in the low bits."""
    v = np.moveaxis(values.astype(np.uint32), axis, -1)
    v = v.reshape(*v.shape[:-1], v.shape[-1] // 8, 8)
    words = np.zeros(v.shape[:-1], dtype=np.uint32)
    for n in range(8):
        words |= (v[..., n] & 0xF) << np.uint32(4 * n)
    return np.moveaxis(words, -1, axis).view(np.int32)


def pad_to_8(values, axis):
    pad = -values.shape[axis] % 8
    if pad == 0:
        return values
    widths = [(0, 0)] * values.ndim
    widths[axis] = (0, pad)
    return np.pad(values, widths)


def fp16_round(x):
    return x.astype(np.float16).astype(np.float32)


def bf16_round(x):
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


# ---- the three layouts: ({suffix: tensor}, (q, zeros, scales, g_idx)) for one linear layer

def awq_layer(w, args):
    n_out, n_in = w.shape
    if n_out % 8 or n_in % args.width(n_in):
        raise SystemExit(f"AWQ GEMM needs out % 8 == 0 and whole groups; layer is {n_out} x {n_in}, group "
                         f"{args.width(n_in)}")
    q, zeros, scales, g_idx = quantize(w, args.width(n_in), sym=False, scale_round=fp16_round)
    # Nibble n of word j holds column 8j + AWQ_ORDER[n]: reorder each run of 8 columns, then pack.
    perm = np.arange(n_out).reshape(-1, 8)[:, AWQ_ORDER].reshape(-1)
    return {
        "qweight": tensor("I32", pack_nibbles(q.T[:, perm], axis=1)),
        "qzeros": tensor("I32", pack_nibbles(zeros[:, perm], axis=1)),
        "scales": tensor("F16", scales.astype(np.float16)),
    }, (q, zeros, scales, g_idx)


def gptq_layer(w, args):
    n_out, n_in = w.shape
    if n_out % 8 or n_in % 8:
        raise SystemExit(f"GPTQ needs in and out multiples of 8; layer is {n_out} x {n_in}")
    v1 = args.checkpoint_format == "gptq"
    q, zeros, scales, g_idx = quantize(w, args.width(n_in), sym=args.sym, scale_round=fp16_round,
                                       act_order=args.act_order, min_zero=1 if v1 else 0)
    return {
        "qweight": tensor("I32", pack_nibbles(q.T, axis=0)),
        "qzeros": tensor("I32", pack_nibbles(zeros - (1 if v1 else 0), axis=1)),
        "scales": tensor("F16", scales.astype(np.float16)),
        "g_idx": tensor("I32", g_idx),
    }, (q, zeros, scales, g_idx)


def compressed_tensors_layer(w, args):
    n_out, n_in = w.shape
    q, zeros, scales, g_idx = quantize(w, args.width(n_in), sym=args.sym, scale_round=bf16_round,
                                       act_order=args.act_order)
    # The file stores signed values + 8, which is q itself (and the zero point itself) in this form.
    out = {
        "weight_packed": tensor("I32", pack_nibbles(pad_to_8(q, axis=1), axis=1)),
        "weight_scale": ("BF16", [n_out, scales.shape[0]], bf16_bits(scales.T).tobytes()),
        "weight_shape": tensor("I64", np.array([n_out, n_in], dtype=np.int64)),
    }
    if not args.sym:
        out["weight_zero_point"] = tensor("I32", pack_nibbles(pad_to_8(zeros.T, axis=0), axis=0))
    if args.act_order:
        out["weight_g_idx"] = tensor("I32", g_idx)
    return out, (q, zeros, scales, g_idx)


def quantization_config(args):
    group = args.group_size if args.group_size > 0 else -1
    if args.format == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": group, "version": "gemm", "zero_point": True,
                "modules_to_not_convert": None}
    if args.format == "gptq":
        return {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": args.act_order, "sym": args.sym,
                "static_groups": False, "lm_head": args.lm_head, "checkpoint_format": args.checkpoint_format}
    weights = {"num_bits": 4, "type": "int", "symmetric": args.sym, "dynamic": False,
               "actorder": "group" if args.act_order else None,
               "strategy": "group" if group > 0 else "channel", "group_size": group if group > 0 else None,
               "observer": "minmax"}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None, "format": "pack-quantized"}},
            "ignore": [] if args.lm_head else ["lm_head"], "kv_cache_scheme": None}


def is_quantized_layer(name, shape, lm_head):
    if len(shape) != 2 or not name.endswith(".weight"):
        return False
    return name.endswith("_proj.weight") or (lm_head and name == "lm_head.weight")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, type=pathlib.Path, help="Hugging Face folder with bf16/f16/f32 weights")
    p.add_argument("--out", required=True, type=pathlib.Path, help="folder to write (created)")
    p.add_argument("--format", required=True, choices=["awq", "gptq", "compressed-tensors"])
    p.add_argument("--group-size", type=int, default=128, help="input channels per scale; -1: one group per row")
    sym = p.add_mutually_exclusive_group()
    sym.add_argument("--sym", dest="sym", action="store_true",
                     help="symmetric (zero point 8); gptq, compressed-tensors")
    sym.add_argument("--asym", dest="sym", action="store_false", help="zero points per group (default; AWQ always)")
    p.set_defaults(sym=False)
    p.add_argument("--act-order", action="store_true",
                   help="gptq (desc_act) and compressed-tensors (actorder \"group\"): channels grouped by weight "
                        "energy, g_idx saying which group each is in")
    p.add_argument("--checkpoint-format", choices=["gptq", "gptq_v2"], default="gptq",
                   help="gptq: v1 stores zero point - 1 (the common layout), v2 the zero point itself")
    p.add_argument("--lm-head", action="store_true", help="quantize an untied lm_head too")
    p.add_argument("--dequantized", type=pathlib.Path,
                   help="also write this float folder, each quantized layer replaced by (q - z) * s as tern "
                        "keeps it (dequantized_tensor): what it must compute from the int4 folder, bit for bit")
    args = p.parse_args()
    if args.format == "awq" and args.sym:
        p.error("AWQ GEMM checkpoints are asymmetric (zero_point true)")
    if args.act_order and args.format == "awq":
        p.error("AWQ GEMM has no act order")
    args.width = lambda n_in: args.group_size if args.group_size > 0 else n_in
    layer = {"awq": awq_layer, "gptq": gptq_layer, "compressed-tensors": compressed_tensors_layer}[args.format]

    src = args.model
    if (src / "model.safetensors").exists():
        shards = [src / "model.safetensors"]
    else:
        index = json.loads((src / "model.safetensors.index.json").read_text())
        shards = [src / s for s in dict.fromkeys(index["weight_map"].values())]
    tensors = {}
    for shard in shards:
        tensors.update(read_safetensors(shard))

    out, dequantized = {}, {}
    for name, (dtype, shape, data) in tensors.items():
        dequantized[name] = out[name] = (dtype, shape, data)
        if not is_quantized_layer(name, shape, args.lm_head):
            continue
        del out[name]
        prefix = name[:-len(".weight")]
        layer_tensors, values = layer(to_f32(dtype, shape, data), args)
        for suffix, t in layer_tensors.items():
            out[f"{prefix}.{suffix}"] = t
        dequantized[name] = dequantized_tensor(*values)

    config = json.loads((src / "config.json").read_text())
    write_folder(src, args.out, out, dict(config, quantization_config=quantization_config(args)))
    if args.dequantized:
        write_folder(src, args.dequantized, dequantized, config)


def write_folder(src, dst, tensors, config):
    """dst: the tensors, config.json, and the other files of src (tokenizer, generation config)."""
    dst.mkdir(parents=True, exist_ok=True)
    write_safetensors(dst / "model.safetensors", tensors, {"format": "pt"})
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith("model.safetensors") and f.name not in ("config.json", "golden.json"):
            shutil.copy(f, dst / f.name)
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
