// The block structs of ggml's quantized types, byte for byte (ggml-common.h
// documents the same layouts): a row of a quantized WeightMatrix is an array
// of these. fp16 fields are raw IEEE half bits. Only standard-layout structs
// of byte-sized and 16/32-bit fields, so their size and offsets are ggml's
// on every ABI tern builds for (checked below).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tern::cpu {

constexpr int kQK8_0 = 32;        // elements per Q8_0 / Q4_0 block
constexpr int kQKK = 256;         // elements per K-quant super-block
constexpr int kKScaleBytes = 12;  // 8 six-bit scales + 8 six-bit mins (Q4_K, Q5_K)

// x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};

// x[i] = d * ((qs[i] & 15) - 8), x[i + 16] = d * ((qs[i] >> 4) - 8), i < 16.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK8_0 / 2];
};

// Eight sub-blocks of 32; sub-block j has a 6-bit scale sc_j and min m_j
// (packed in `scales`, see decode_k4_scales) and x = d sc_j q - dmin m_j.
// Elements 64c .. 64c+31 are the low nibbles of qs[32c .. 32c+31], elements
// 64c+32 .. 64c+63 their high nibbles.
struct BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};

// Q4_K plus a fifth bit: element 64c + l (l < 32) adds 16 when bit 2c of
// qh[l] is set, element 64c + 32 + l when bit 2c+1 is.
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// Sixteen sub-blocks of 16 with int8 scales; x = d scales[i/16] (q - 32) with
// q six bits: in each half h (128 elements), element 128h + 32g + l (l < 32)
// takes its low 4 bits from ql[64h + l + 32 (g & 1)] (low nibble for g < 2,
// high for g >= 2) and its top 2 bits from bits 2g, 2g+1 of qh[32h + l].
struct BlockQ6K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

// Activations for K-quant dot products: x = d qs, with bsums[i] the sum of
// qs[16i .. 16i+15] (for the min and offset terms).
struct BlockQ8K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2);
static_assert(sizeof(BlockQ4_0) == 18 && offsetof(BlockQ4_0, qs) == 2);
static_assert(sizeof(BlockQ4K) == 144 && offsetof(BlockQ4K, scales) == 4 && offsetof(BlockQ4K, qs) == 16);
static_assert(sizeof(BlockQ5K) == 176 && offsetof(BlockQ5K, qh) == 16 && offsetof(BlockQ5K, qs) == 48);
static_assert(sizeof(BlockQ6K) == 210 && offsetof(BlockQ6K, qh) == 128 && offsetof(BlockQ6K, scales) == 192 &&
              offsetof(BlockQ6K, d) == 208);
static_assert(sizeof(BlockQ8K) == 292 && offsetof(BlockQ8K, bsums) == 260);
static_assert(alignof(BlockQ8_0) == 2 && alignof(BlockQ4_0) == 2 && alignof(BlockQ4K) == 2 && alignof(BlockQ5K) == 2 &&
              alignof(BlockQ6K) == 2);

// Sub-block j's 6-bit scale and min from the 12 packed bytes of Q4_K/Q5_K:
// j < 4: the low 6 bits of bytes j and j+4; j >= 4: a nibble of byte j+4 for
// the low 4 bits, the top 2 bits of bytes j-4 and j for the high 2.
inline void decode_k4_scale(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace tern::cpu
