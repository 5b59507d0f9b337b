// Linear-layer formats for AVX2 + FMA + F16C (most x86 laptops and servers
// since 2013), plugged into the shared loop nest of linear_tiling.h. This
// whole file is compiled for that ISA; linear_kernels.cpp enters it only
// after checking the CPU. It includes no project header with inline
// functions, so no non-template code is compiled here for two ISAs at once.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "backend/cpu/avx2_sum.h"
#include "backend/cpu/linear_isa.h"
#include "backend/cpu/linear_tiling.h"

namespace tern::cpu::linear_isa {
namespace {

// The scalar tails below use an explicit fma: left as `s += a * b`, g++ may
// contract it in one tile instantiation and not another, and an output's bits
// would then depend on the tile (decode vs prefill) it was computed in.
inline float bf16_bits_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Register budget (16 ymm): MR*NR accumulators + the NR widened weight
// vectors per step (two each for bf16) + the x vectors of one token.
struct Avx2Common {
  using Vec = __m256;
  using XElem = float;
  static constexpr int kMR = 4;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec madd(Vec acc, Vec x, Vec w) { return _mm256_fmadd_ps(x, w, acc); }
  static float hsum(Vec v) { return hsum256(v); }
};

// bf16 weights, fp32 x split per 16-element chunk into its 8 even then its 8
// odd elements: a 256-bit load of 16 bf16 is 8 pairs; shifting each 32-bit
// pair left by 16 gives the even weights as fp32, masking off the low half
// gives the odd ones. Two integer ops per 16 weights, no shuffles.
struct Bf16Split : Avx2Common {
  using WElem = uint16_t;
  static constexpr int kStep = 16;
  static constexpr int kParts = 2;
  static constexpr int nr_for(int mr) { return mr == 1 ? 4 : mr == 2 ? 3 : 2; }
  static void load_x(const float* p, Vec (&v)[2]) {
    v[0] = _mm256_loadu_ps(p);
    v[1] = _mm256_loadu_ps(p + 8);
  }
  static void load_w(const uint16_t* p, Vec (&v)[2]) {
    const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
    v[1] = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static float tail(const float* x, const uint16_t* w, int64_t k0, int64_t k_len) {
    float s = 0.0f;
    for (int64_t k = k0; k < k_len; ++k) s = __builtin_fmaf(x[k], bf16_bits_to_f32(w[k]), s);
    return s;
  }
};

struct F16 : Avx2Common {
  using WElem = uint16_t;
  static constexpr int kStep = 8;
  static constexpr int kParts = 1;
  static constexpr int nr_for(int mr) { return mr <= 2 ? 4 : 3; }
  static void load_x(const float* p, Vec (&v)[1]) { v[0] = _mm256_loadu_ps(p); }
  static void load_w(const uint16_t* p, Vec (&v)[1]) {
    v[0] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float tail(const float* x, const uint16_t* w, int64_t k0, int64_t k_len) {
    float s = 0.0f;
    for (int64_t k = k0; k < k_len; ++k) s = __builtin_fmaf(x[k], _cvtsh_ss(w[k]), s);
    return s;
  }
};

struct F32 : Avx2Common {
  using WElem = float;
  static constexpr int kStep = 8;
  static constexpr int kParts = 1;
  static constexpr int nr_for(int mr) { return mr <= 2 ? 4 : 3; }
  static void load_x(const float* p, Vec (&v)[1]) { v[0] = _mm256_loadu_ps(p); }
  static void load_w(const float* p, Vec (&v)[1]) { v[0] = _mm256_loadu_ps(p); }
  static float tail(const float* x, const float* w, int64_t k0, int64_t k_len) {
    float s = 0.0f;
    for (int64_t k = k0; k < k_len; ++k) s = __builtin_fmaf(x[k], w[k], s);
    return s;
  }
};

}  // namespace

const IsaKernels& avx2_kernels() {
  static const IsaKernels kernels{
      .bf16_exact = &linear_rows<Bf16Split>,
      .bf16_dot = nullptr,
      .f16 = &linear_rows<F16>,
      .f32 = &linear_rows<F32>,
      .pair_chunk = Bf16Split::kStep,
  };
  return kernels;
}

}  // namespace tern::cpu::linear_isa

#pragma GCC pop_options
#endif  // x86-64 GCC/Clang
