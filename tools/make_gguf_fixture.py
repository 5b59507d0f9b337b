#!/usr/bin/env python3
"""Builds tests/data/gguf/fixture.gguf with llama.cpp's own `gguf` package.

The file holds metadata of every GGUF value type (scalars and arrays,
strings with non-ASCII text), an ERNIE-shaped tokenizer block, a 64-byte
general.alignment, and tensors of several ggml types and ranks (F32, F16,
BF16, I32, Q8_0, Q4_0, and Q4_K and Q6_K holding a byte pattern). tests/unit/formats/gguf_test.cpp reads
it and checks every value, dequantizes the Q8_0 and Q4_0 tensors against the
formulas below, and rewrites it with tern's GgufWriter expecting the same
bytes. Keep the formulas and values in step with that test.

    .venv/bin/python tools/make_gguf_fixture.py [--out tests/data/gguf/fixture.gguf]
    .venv/bin/python tools/make_gguf_fixture.py --dump FILE   # read any GGUF with gguf.GGUFReader
    .venv/bin/python tools/make_gguf_fixture.py --corpus tests/fuzz/corpus/fuzz_gguf   # fuzzer seeds
"""

import argparse
import os
import struct

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V


def f32_range(n, scale, start):
    return (np.arange(n, dtype=np.float32) * np.float32(scale) + np.float32(start)).astype(np.float32)


def byte_pattern(n, seed):
    return ((np.arange(n, dtype=np.int64) * 7 + seed) % 256).astype(np.uint8)


def write_fixture(path):
    w = gguf.GGUFWriter(path, arch="ernie4_5")  # writes general.architecture first
    w.add_custom_alignment(64)
    w.add_name("tern gguf fixture")

    # The model keys a loader reads.
    w.add_uint32("ernie4_5.block_count", 2)
    w.add_uint32("ernie4_5.context_length", 131072)
    w.add_uint32("ernie4_5.embedding_length", 8)
    w.add_uint32("ernie4_5.attention.head_count", 2)
    w.add_float32("ernie4_5.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32("ernie4_5.rope.freq_base", 500000.0)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "\u2581hello", "\u4e16\u754c", ""])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.5, -2.25, -3.0, -4.5, -1000.0])
    w.add_array("tokenizer.ggml.token_type", [2, 3, 3, 1, 1, 6])
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_string("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}\n{% endfor %}")

    # One key per scalar type, at the edges of its range.
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.15625)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "h\u00e9llo, \u4e16\u754c")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62) - 7)
    w.add_float64("test.f64", 3.141592653589793)

    # One array per element type.
    w.add_key_value("test.array.u8", [0, 1, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("test.array.i8", [-128, 0, 127], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("test.array.u16", [0, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("test.array.i16", [-32768, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("test.array.u32", [7, 4294967295], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("test.array.i32", [-2147483648, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.array.f32", [1.0, -0.5, 1e30], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.array.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("test.array.string", ["a", "", "\u00fc\u00f1\u00ee"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("test.array.u64", [0, 2**64 - 1], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("test.array.i64", [-(2**63), 2**63 - 1], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("test.array.f64", [0.1, -2.5e-300], V.ARRAY, sub_type=V.FLOAT64)

    # Tensors; shapes are numpy order, GGUF stores them reversed (ne[0] innermost).
    w.add_tensor("token_embd.weight", f32_range(24, 0.25, -2.0).reshape(3, 8))
    w.add_tensor("output_norm.weight", f32_range(8, 0.5, -1.0).astype(np.float16))
    w.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(f32_range(32, 0.125, -2.0).reshape(2, 16), Q.BF16),
                 raw_dtype=Q.BF16)
    w.add_tensor("blk.0.attn_k.weight", f32_range(24, 1.0, 0.0).reshape(2, 3, 4))
    w.add_tensor("blk.0.attn_v.weight", f32_range(64, -0.5, 3.0).astype(np.float16).reshape(1, 2, 1, 32))
    w.add_tensor("blk.0.layer_index", np.array([5, -6, 7, -8], dtype=np.int32))
    i = np.arange(128, dtype=np.float32)
    w.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize((np.sin(i * 0.37) * 3).reshape(2, 64), Q.Q8_0),
                 raw_dtype=Q.Q8_0)
    i = np.arange(64, dtype=np.float32)
    w.add_tensor("blk.0.ffn_down.weight", gguf.quants.quantize((np.cos(i * 0.21) * 2).reshape(1, 64), Q.Q4_0),
                 raw_dtype=Q.Q4_0)
    # gguf-py has no K-quant quantizer: these hold a byte pattern, (7 * j + seed) mod 256.
    w.add_tensor("blk.0.ffn_gate.weight", byte_pattern(144, 11).reshape(1, 144), raw_dtype=Q.Q4_K)
    w.add_tensor("blk.1.attn_q.weight", byte_pattern(2 * 210, 29).reshape(2, 210), raw_dtype=Q.Q6_K)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_bytes(tensors, kvs, version=3, alignment=32, data=b""):
    """Hand-assembled GGUF: kvs are (key, type id, packed value), tensors (name, dims, type id, offset)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        out += gguf_string(key) + struct.pack("<I", vtype) + value
    for name, dims, ttype, offset in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, offset)
    if tensors:
        out += b"\0" * (-len(out) % alignment)
    return out + data


def write_corpus(out_dir, fixture):
    """Small valid and broken files: the fuzzer's starting points."""
    os.makedirs(out_dir, exist_ok=True)
    with open(fixture, "rb") as f:
        full = f.read()
    u32 = lambda v: struct.pack("<I", v)  # noqa: E731
    tokens = u32(V.STRING) + struct.pack("<Q", 3) + b"".join(gguf_string(t) for t in ["<s>", "", "\u4e16"])
    seeds = {
        "fixture.gguf": full,
        "truncated_fixture.gguf": full[:1500],
        "keys_only.gguf": gguf_bytes([], [("general.architecture", V.STRING, gguf_string("ernie4_5")),
                                          ("ernie4_5.block_count", V.UINT32, u32(18)),
                                          ("tokenizer.ggml.tokens", V.ARRAY, tokens),
                                          ("b", V.BOOL, b"\1"), ("f", V.FLOAT64, struct.pack("<d", 0.5))]),
        "v2_align8.gguf": gguf_bytes([("a", [2], Q.F32, 0), ("b", [32, 1], Q.Q8_0, 8)],
                                     [("general.alignment", V.UINT32, u32(8))], version=2, alignment=8,
                                     data=bytes(range(8)) + bytes(34)),
        "bad_magic.gguf": b"GGUX" + full[4:64],
        "version1.gguf": gguf_bytes([], [], version=1),
        "big_endian.gguf": b"GGUF" + struct.pack(">IQQ", 3, 0, 0),
        "nested_array.gguf": gguf_bytes([], [("a", V.ARRAY, u32(V.ARRAY) + struct.pack("<Q", 1) + u32(V.UINT8)
                                                + struct.pack("<Q", 0))]),
        "overlap.gguf": gguf_bytes([("a", [16], Q.F32, 0), ("b", [4], Q.F32, 32)], [], data=bytes(64)),
        "unknown_type.gguf": gguf_bytes([("a", [4], 1000, 0)], [], data=bytes(16)),
        "huge_counts.gguf": b"GGUF" + struct.pack("<IQQ", 3, 2**63, 2**64 - 1),
    }
    for name, data in seeds.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {out_dir}")


def dump(path):
    """Prints what gguf.GGUFReader sees: the other direction's check for files tern writes."""
    r = gguf.GGUFReader(path)
    for field in r.fields.values():
        if field.name.startswith("GGUF."):
            continue
        types = "/".join(t.name for t in field.types)
        value = field.contents()
        if isinstance(value, list) and len(value) > 8:
            value = value[:8] + ["..."]
        print(f"{field.name} [{types}] = {value!r}")
    for t in r.tensors:
        print(f"tensor {t.name} {t.tensor_type.name} ne={list(int(d) for d in t.shape)} "
              f"offset={t.data_offset} bytes={t.n_bytes}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/gguf/fixture.gguf")
    ap.add_argument("--dump", metavar="FILE", help="print a GGUF file as gguf.GGUFReader reads it, then exit")
    ap.add_argument("--corpus", metavar="DIR", help="write fuzzer seeds (from --out's fixture) to DIR, then exit")
    args = ap.parse_args()
    if args.dump:
        dump(args.dump)
        return
    if args.corpus:
        write_corpus(args.corpus, args.out)
        return
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    write_fixture(args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
