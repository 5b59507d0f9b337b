// Device helpers for FP8 e4m3 weights (--quantization fp8): codes to fp32
// and fp32 to codes as backend/cpu/fp8_quant.h defines them (e4m3 values
// are exact in fp16, so the conversion through half2 is exact; fp32 to
// e4m3 rounds to nearest even and saturates to +-448). The conversions are
// single instructions on sm_89 and later, emulated by cuda_fp8.h before.
// Included by .cu files only.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/fp8_bits.h"

namespace tern::cuda {

// Codes 2i and 2i + 1 of a 16-bit pair (2i in the low byte) as fp32: the
// conversion instruction on sm_89 and later, integer operations before
// (fp8_bits.h; cuda_fp8.h's emulation there is long and the GEMV unrolls it
// many times over). Both are exact.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t pair) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
#else
  __half2_raw raw;
  const uint32_t bits = e4m3x2_to_f16x2_bits(pair);
  raw.x = static_cast<unsigned short>(bits & 0xffffu);
  raw.y = static_cast<unsigned short>(bits >> 16);
  const float2 f = __half22float2(__half2(raw));
  return make_float2(f.x * kE4m3HalfScale, f.y * kE4m3HalfScale);
#endif
}

// 8 codes (an 8-byte load, the lowest address in w.x's low byte) against
// the inputs a (4 floats) then b (4 floats), in order.
__device__ __forceinline__ float dot8_e4m3(const uint2 w, const float4 a, const float4 b, float acc) {
  const float2 w0 = e4m3x2_to_float2(w.x), w1 = e4m3x2_to_float2(w.x >> 16);
  const float2 w2 = e4m3x2_to_float2(w.y), w3 = e4m3x2_to_float2(w.y >> 16);
  acc = fmaf(w0.x, a.x, acc);
  acc = fmaf(w0.y, a.y, acc);
  acc = fmaf(w1.x, a.z, acc);
  acc = fmaf(w1.y, a.w, acc);
  acc = fmaf(w2.x, b.x, acc);
  acc = fmaf(w2.y, b.y, acc);
  acc = fmaf(w3.x, b.z, acc);
  acc = fmaf(w3.y, b.w, acc);
  return acc;
}

// fp32 to an e4m3 code: nearest, ties to even, finite values past 448 to
// +-448, NaN to 0x7f (f32_to_fp8_e4m3 in base/fp8_e4m3.h).
__device__ __forceinline__ uint8_t f32_to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace tern::cuda
