// Device helpers for int4 weights (Int4Weights, kernels.h): eight weights
// of one block loaded together, and their codes to fp32 without a
// conversion instruction: 2^23 + q has q in a float's low mantissa bits, so
// one OR makes it and one subtraction of 2^23 + z leaves q - z, exactly.
// Included by .cu files only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace tern::cuda {

// Elements e .. e + 7 of an int4 matrix (e a multiple of 8, so one block):
// codes with element e + j in nibble j, and the block's d (fp16 bits, low
// half of dz) and z (bits 16..23).
struct Int4x8 {
  uint32_t codes;
  uint32_t dz;
};

__device__ __forceinline__ Int4x8 load_int4x8(const Int4Weights& w, int64_t e) {
  const int64_t block = e / 32;
  Int4x8 v;
  v.codes = __ldg(reinterpret_cast<const unsigned int*>(w.codes + e / 2));
  v.dz = static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(w.scales) + block)) |
         (static_cast<uint32_t>(__ldg(w.zeros + block)) << 16);
  return v;
}

// 2^23 + z, which int4_minus_zero subtracts.
__device__ __forceinline__ float int4_bias(uint32_t dz) { return 8388608.0f + static_cast<float>(dz >> 16); }
__device__ __forceinline__ float int4_scale(uint32_t dz) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(dz & 0xffffu)));
}
// q - z for nibble j of codes (bias: int4_bias).
__device__ __forceinline__ float int4_minus_zero(uint32_t codes, int j, float bias) {
  return __uint_as_float(0x4b000000u | ((codes >> (4 * j)) & 15u)) - bias;
}

// 8 weights (codes, with their block's dz) against the inputs a (4 floats)
// then b (4 floats): the sum of (q - z) * input in order, times d, added to acc.
__device__ __forceinline__ float dot8_int4(const Int4x8 w, const float4 a, const float4 b, float acc) {
  const float bias = int4_bias(w.dz);
  float s = int4_minus_zero(w.codes, 0, bias) * a.x;
  s = fmaf(int4_minus_zero(w.codes, 1, bias), a.y, s);
  s = fmaf(int4_minus_zero(w.codes, 2, bias), a.z, s);
  s = fmaf(int4_minus_zero(w.codes, 3, bias), a.w, s);
  s = fmaf(int4_minus_zero(w.codes, 4, bias), b.x, s);
  s = fmaf(int4_minus_zero(w.codes, 5, bias), b.y, s);
  s = fmaf(int4_minus_zero(w.codes, 6, bias), b.z, s);
  s = fmaf(int4_minus_zero(w.codes, 7, bias), b.w, s);
  return fmaf(int4_scale(w.dz), s, acc);
}

}  // namespace tern::cuda
