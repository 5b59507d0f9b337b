#!/usr/bin/env python3
"""Writes tests/data/quant/<TYPE>.bin: blocks of ggml's quantized types made
and decoded by the `gguf` Python package (gguf==0.19.0, numpy==2.2.1), for
tests/unit/backend_cpu/quant_layout_test.cpp.

File layout (little-endian): b"TQF1", u32 n (elements), u32 nbytes,
f32 x[n], u8 blocks[nbytes], f32 dequantized[n].
 - Q8_0, Q4_0: blocks = gguf.quants.quantize(x) (gguf has these quantizers),
   so the test checks tern's quantizer gives the same bytes.
 - Q4_K, Q5_K, Q6_K: gguf has no quantizer; blocks are random bytes with
   finite fp16 scales (every bit of the layout exercised), x = gguf's
   dequantization of them.

    .venv/bin/python tools/make_quant_fixture.py [out_dir]
"""
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants


def special_blocks(block):
    """Blocks that probe rounding: ties of the largest |x|, .5 boundaries,
    all zeros, tiny and large values."""
    out = []
    ties = np.zeros(block, np.float32)
    ties[3], ties[7] = -2.0, 2.0  # Q4_0 takes the first of equal |x|
    out.append(ties)
    halves = np.arange(block, dtype=np.float32) - block / 2 + 0.5  # k + 0.5
    halves[0] = 127.0
    out.append(halves)
    out.append(np.zeros(block, np.float32))
    out.append(np.linspace(-1e-6, 2e-6, block, dtype=np.float32))
    out.append(np.linspace(-300, 100, block, dtype=np.float32))
    q4 = (np.arange(block, dtype=np.float32) % 16 - 8) / 8 * 3  # x * id + 8.5 near integers
    q4[5] = -3.0
    out.append(q4.astype(np.float32))
    return out


def simple_fixture(qtype, rng):
    block = 32
    rows = [rng.standard_normal(block).astype(np.float32) * s for s in (1.0, 0.01, 5.0, 1.0, 0.3, 2.0)]
    rows += [(rng.standard_normal(block) ** 3).astype(np.float32) for _ in range(2)]  # heavy tails
    rows += special_blocks(block)
    x = np.concatenate(rows).astype(np.float32)
    blocks = quants.quantize(x, qtype)
    return x, blocks.tobytes(), quants.dequantize(blocks, qtype).astype(np.float32)


def random_fp16(rng, n, scale, allow_negative):
    v = rng.standard_normal(n).astype(np.float32) * scale
    if not allow_negative:
        v = np.abs(v)
    return v.astype(np.float16).view(np.uint8).reshape(n, 2)


def k_fixture(qtype, rng, nblocks=4):
    block_bytes = {T.Q4_K: 144, T.Q5_K: 176, T.Q6_K: 210}[qtype]
    raw = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
    if qtype in (T.Q4_K, T.Q5_K):
        raw[:, 0:2] = random_fp16(rng, nblocks, 0.01, allow_negative=False)  # d
        raw[:, 2:4] = random_fp16(rng, nblocks, 0.02, allow_negative=False)  # dmin
    else:
        raw[:, 208:210] = random_fp16(rng, nblocks, 0.001, allow_negative=True)  # d
    deq = quants.dequantize(raw, qtype).reshape(-1).astype(np.float32)
    return deq, raw.tobytes(), deq


def write(path, x, blob, deq):
    with open(path, "wb") as f:
        f.write(b"TQF1")
        f.write(struct.pack("<II", x.size, len(blob)))
        f.write(x.astype("<f4").tobytes())
        f.write(blob)
        f.write(deq.astype("<f4").tobytes())


def main():
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "tests/data/quant"
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20250417)
    for qtype in (T.Q8_0, T.Q4_0):
        write(out_dir / f"{qtype.name}.bin", *simple_fixture(qtype, rng))
    for qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        write(out_dir / f"{qtype.name}.bin", *k_fixture(qtype, rng))


if __name__ == "__main__":
    main()
