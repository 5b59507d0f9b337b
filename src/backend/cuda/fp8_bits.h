// Two e4m3 codes as two fp16 numbers by integer operations alone, for GPUs
// without an FP8 conversion instruction (sm_80/86): code s eeee mmm becomes
// the fp16 bits s 0eeee mmm 0000000, which is the code's value times 2^-8
// (fp16's exponent bias 15 against e4m3's 7; e4m3 subnormals land on fp16
// subnormals, so every code is exact), hence multiplied by 256 the value
// itself. The low byte goes to the low half. Plain C++ as well as CUDA, so
// the CPU tests check every code (tests/unit/backend_cuda/fp8_bits_test.cpp).
// The NaN codes (0x7f, 0xff) come out as +-480; the quantizer never makes them.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TERN_FP8_HOST_DEVICE __host__ __device__
#else
#define TERN_FP8_HOST_DEVICE
#endif

namespace tern::cuda {

constexpr float kE4m3HalfScale = 256.0f;

TERN_FP8_HOST_DEVICE constexpr uint32_t e4m3x2_to_f16x2_bits(uint32_t pair) {
  return ((pair & 0x007fu) << 7) | ((pair & 0x0080u) << 8) | ((pair & 0x7f00u) << 15) | ((pair & 0x8000u) << 16);
}

}  // namespace tern::cuda
